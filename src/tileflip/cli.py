"""The ``tileflip`` command: demo, plan, analyze, check, bench."""

from __future__ import annotations

import argparse
import os
import sys


def parse_pair(text: str, what: str = "shape") -> tuple[int, int]:
    """'31x65' -> (31, 65)."""
    try:
        a, b = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} must look like 31x65, got {text!r}") from None
    if a < 0 or b < 0:
        raise argparse.ArgumentTypeError(f"{what} must be non-negative, got {text!r}")
    return a, b


def parse_dims(text: str, what: str = "shape") -> tuple[int, ...]:
    """'8x4096x32x128' -> (8, 4096, 32, 128); '0,2,1,3' -> (0, 2, 1, 3) (a perm's dims may be negative)."""
    sep = "," if "," in text else "x"
    try:
        values = tuple(int(v) for v in text.lower().split(sep)) if text else ()
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} must look like 8x4096x32x128 or 0,2,1,3, got {text!r}") from None
    if what == "shape" and any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"shape must be non-negative, got {text!r}")
    return values


def use_interpreter_without_gpu() -> str:
    """Turn on Triton's interpreter when there is no GPU; must run before tileflip's kernels are imported."""
    import torch

    if torch.cuda.is_available():
        return "cuda"
    os.environ.setdefault("TRITON_INTERPRET", "1")
    return "cpu"


def cmd_plan(argv: list[str]) -> int:
    from tileflip import explain

    p = argparse.ArgumentParser(
        prog="tileflip plan",
        description="Print the launch plan of a 2-D transpose or an N-D permute (contiguous input).",
    )
    p.add_argument("--shape", required=True, type=parse_dims, help="e.g. 31x65, or 8x4096x32x128 with --perm")
    p.add_argument("--perm", type=lambda t: parse_dims(t, "perm"), default=None,
                   help="e.g. 0,2,1,3: an N-D permute (negative dims as --perm=-1,0,1)")
    p.add_argument("--block", type=lambda t: parse_pair(t, "block"), default=None, help="tile, e.g. 32x32")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--programs", type=int, default=12, help="how many programs to list (default 12)")
    args = p.parse_args(argv)
    if args.programs < 0:
        p.error(f"--programs must be 0 or more, got {args.programs}")
    if args.perm is not None:
        if args.block is not None:
            p.error("--block is for a 2-D transpose's tile; a permute's tiles come from the planner (leave it out)")
        print(explain.permute_text(args.shape, args.perm, dtype=args.dtype))
    elif len(args.shape) != 2:
        p.error(f"--shape must be M x N for a transpose (or give --perm), got {len(args.shape)} dimensions")
    else:
        print(explain.plan_text(args.shape, block=args.block, dtype=args.dtype, programs=args.programs))
    return 0


def cmd_demo(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="tileflip demo", description="Walk the seed example and transpose adversarial cases."
    )
    p.add_argument("--png", default="tileflip-demo-tiles.png", help="where to save the tile-grid picture")
    p.add_argument("--quick", action="store_true", help="fewer dtypes")
    args = p.parse_args(argv)
    device = use_interpreter_without_gpu()
    from tileflip import demo

    return demo.run(device, png=args.png, quick=args.quick)


def _delegate(module: str, argv: list[str]) -> int:
    import importlib

    return importlib.import_module(f"tileflip.{module}").cli(argv)


COMMANDS = {
    "demo": cmd_demo,
    "plan": cmd_plan,
    "analyze": lambda argv: _delegate("analyze", argv),
    "check": lambda argv: _delegate("check", argv),
    "bench": lambda argv: _delegate("bench", argv),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: tileflip {demo,plan,analyze,check,bench} [options]   (tileflip COMMAND --help for each)")
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    try:
        return COMMANDS[argv[0]](argv[1:]) or 0
    except BrokenPipeError:  # the reader went away (`tileflip plan ... | head`): stop quietly, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (so that the exit's flush fails no more)
        return 141  # 128 + SIGPIPE, a shell's status for a writer its pipe closed on
    except (ValueError, TypeError, OverflowError, OSError) as error:  # a refused argument: its message, not a trace
        if os.environ.get("TILEFLIP_TRACEBACK"):
            raise
        print(f"tileflip {argv[0]}: error: {error} (TILEFLIP_TRACEBACK=1 shows where)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
