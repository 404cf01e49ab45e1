"""The argument parsers every command shares: shapes, pairs, permutations and dtypes."""

from __future__ import annotations

import argparse
from pathlib import Path

from tileflip.plan.dtypes import dtype_name

# A valid value of each pair option, for its errors: the shape 31x65 would be a refused tile (sides are
# powers of two) and more threads than a CUDA block holds (1024); --large's is tileflip check's default.
PAIR_EXAMPLES = {"shape": "31x65", "block": "32x32", "threads": "32x8", "large": "65537x32769"}


def pair(text: str, what: str = "shape") -> tuple[int, int]:
    """'31x65' -> (31, 65); ``what`` names the value in errors, which show a valid one."""
    example = PAIR_EXAMPLES.get(what, "31x65")
    try:
        a, b = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} must look like {example}, got {text!r}") from None
    if a < 0 or b < 0:
        raise argparse.ArgumentTypeError(f"{what} must be non-negative, such as {example}, got {text!r}")
    return a, b


def shape(text: str) -> tuple[int, ...]:
    """'8x4096x32x128' -> (8, 4096, 32, 128); sizes are non-negative."""
    try:
        values = tuple(int(v) for v in text.lower().split("x")) if text else ()
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape must look like 31x65 or 8x4096x32x128, got {text!r}") from None
    if any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"shape must be non-negative, such as 31x65 or 8x4096x32x128, got {text!r}")
    return values


def perm(text: str) -> tuple[int, ...]:
    """'0,2,1,3' -> (0, 2, 1, 3); dims may be negative (write ``--perm=-1,0,1``)."""
    try:
        return tuple(int(v) for v in text.split(",")) if text else ()
    except ValueError:
        raise argparse.ArgumentTypeError(f"perm must look like 0,2,1,3, got {text!r}") from None


def count(text: str, what: str, example: int) -> int:
    """'12' -> 12: a whole number, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} must be a whole number such as {example}, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{what} must be 0 or more, such as {example}, got {text!r}")
    return value


def dtype(text: str) -> str:
    """A dtype's torch name, from a torch name, ``torch.<name>`` or a short name (fp32, bf16, ...)."""
    try:
        return dtype_name(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def dtypes(text: str) -> list[str]:
    """'fp32,bf16,int8' -> ['float32', 'bfloat16', 'int8'] (repeats dropped, order kept)."""
    names: list[str] = []
    for part in text.split(","):
        name = dtype(part)
        if name not in names:
            names.append(name)
    if not names:
        raise argparse.ArgumentTypeError(f"dtypes must be a comma-separated list such as fp32,bf16, got {text!r}")
    return names


def png_refusal(text: str, example: str) -> str | None:
    """Why no PNG can be written at ``text`` (None: it can; missing folders are made when drawing)."""
    if not text.strip():
        return f"expected a file name such as {example}, got {text!r}"
    path = Path(text)
    if path.is_dir():
        return f"{text!r} is a folder; give a file name such as {example}"
    for parent in path.parents:
        if parent.exists():
            return None if parent.is_dir() else f"{str(parent)!r} is a file, so {text!r} cannot be written"
    return None


def png(example: str):
    """An argparse type for a PNG path, refused before any work (``png_refusal``)."""

    def check(text: str) -> str:
        refusal = png_refusal(text, example)
        if refusal:
            raise argparse.ArgumentTypeError(refusal)
        return text

    return check
