"""``tileflip check``: run anyone's transpose through the checker's suite and print the report."""

from __future__ import annotations

import argparse
import json
import sys

from tileflip.check import runner
from tileflip.check.cases import CATEGORIES, INT32_LIMIT, LARGE_SHAPE, encoding
from tileflip.check.child import split_target
from tileflip.cli import parse


def _checkable_dtypes(text: str) -> list[str]:
    """``parse.dtypes``, refusing the dtypes the checker has no element codes for."""
    names = parse.dtypes(text)
    try:
        for name in names:
            encoding(name)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return names


def _target(text: str) -> str:
    """The target as given, once its form is right and its file exists: refused here, no child is started."""
    try:
        split_target(text)
    except (ValueError, FileNotFoundError) as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def _categories(text: str) -> list[str]:
    names = [c.strip() for c in text.split(",")]
    unknown = [c for c in names if c not in CATEGORIES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown categories {unknown}; choose from {', '.join(CATEGORIES)}")
    return names


# Must say what tileflip.check.child does with a target (resolve_form picks the form, _Run.call calls it).
CONTRACT = """\
the target: a function in path/to/file.py or in an importable module, called once per case, e.g.
  def my_transpose(x, out):  # x: an M x N tensor, any strides (views too); out: a contiguous N x M tensor
      out.copy_(x.t())       # of x's dtype and device: write out[j, i] = x[i, j], nothing else, not x
  def my_transpose(x): ...   # or return a new N x M tensor y of x's dtype, y[j, i] = x[i, j]
Two positional parameters select f(x, out) (--form out), one selects f(x) -> y (--form return); the
f(x, out) form is the stricter check: writes outside out are seen. Without a GPU x lies on the CPU and
Triton kernels run in Triton's interpreter.

  tileflip check path/to/my_kernels.py:my_transpose --dtypes fp32,bf16 --block 32x32
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tileflip check",
        description="Run a transpose f(x, out) or f(x) -> y through adversarial inputs and name the indexing\n"
        "pitfall behind any failure. The verdict is PASS when every case ran and passed, FAIL when one\n"
        "failed, INCOMPLETE when none failed but some could not run here (--large without a GPU): a case\n"
        "that did not run is not a pass. Exit status 0 only for PASS, 1 for FAIL or INCOMPLETE, 2 when\n"
        "the arguments or the target cannot be used.",
        epilog=CONTRACT,
        # Keeps the contract's code lines as written.
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("target", type=_target, help="path/to/file.py:function or package.module:function (see below)")
    p.add_argument(
        "--dtypes",
        type=_checkable_dtypes,
        default=["float32"],
        help="comma-separated dtypes, torch or short names (default float32; e.g. fp32,fp16,bf16,int8,float8_e4m3fn): "
        "any integer or float dtype of 1 to 8 bytes; bool and complex are refused",
    )
    p.add_argument(
        "--block",
        type=lambda t: parse.pair(t, "block"),
        metavar="BMxBN",
        help="the target's tile: map mismatches to the tiles that own them",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--score",
        action="store_true",
        help="add a correctness score out of 3: 2 points when every whole-tile shape (category normal) passes, "
        "1 when every edge shape (boundary, non-square, non-contiguous) passes",
    )
    p.add_argument(
        "--square-only",
        action="store_true",
        help="run only 1024x1024, a demonstration of the square trap: most pitfalls pass there, so a pass proves "
        "little",
    )
    p.add_argument(
        "--only", type=_categories, help=f"comma-separated categories to run, from {', '.join(CATEGORIES)}"
    )
    p.add_argument(
        "--form",
        choices=("auto", "out", "return"),
        default="auto",
        help="f(x, out) or f(x) -> y (default: from the signature)",
    )
    p.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default="auto", help="cpu runs Triton in its interpreter"
    )
    p.add_argument(
        "--large",
        nargs="?",
        const=LARGE_SHAPE,
        type=lambda t: parse.pair(t, "large"),
        metavar="MxN",
        help=f"add a case past 2**31 elements (default {LARGE_SHAPE[0]}x{LARGE_SHAPE[1]}, GPU only: without one "
        "it is skipped and the verdict is INCOMPLETE)",
    )
    p.add_argument("--timeout", type=float, default=300.0, help="seconds one case may run (default 300)")
    p.add_argument(
        "--show",
        type=int,
        default=3,
        help="failing cases shown per category, and wrong elements shown per case (default 3); the rest are "
        "counted",
    )
    # Lets the tests walk the large-case path on small shapes; not a user-facing knob.
    p.add_argument("--overflow-limit", type=int, default=INT32_LIMIT, help=argparse.SUPPRESS)
    return p


def main(argv: list[str]) -> int:
    p = _parser()
    args = p.parse_args(argv)
    if args.show < 0:
        p.error(f"--show must be 0 or more, got {args.show}")
    if not args.timeout > 0:  # (NaN too)
        p.error(f"--timeout must be a positive number of seconds, got {args.timeout}")
    for option, sizes in (("--block", args.block), ("--large", args.large)):
        if sizes is not None and 0 in sizes:
            p.error(f"{option} sides must be positive, such as 32x32, got {sizes[0]}x{sizes[1]}")
    options = dict(
        dtypes=args.dtypes,
        block=args.block,
        square_only=args.square_only,
        only=args.only,
        form=args.form,
        device=args.device,
        large=args.large,
        timeout=args.timeout,
        score=args.score,
        overflow_limit=args.overflow_limit,
    )
    try:
        report = runner.check(args.target, **options)
    except runner.TargetError as error:
        print(f"tileflip check: error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(report.to_json(), indent=1) if args.json else report.text(args.show))
    return 0 if report.passed else 1
