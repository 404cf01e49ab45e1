"""``tileflip plan``: the launch plan of a transpose or a permute, as text."""

from __future__ import annotations

import argparse

from tileflip.cli import parse


def main(argv: list[str]) -> int:
    from tileflip import explain

    p = argparse.ArgumentParser(
        prog="tileflip plan",
        description="Print the launch plan of a 2-D transpose or an N-D permute (contiguous input).",
    )
    p.add_argument("--shape", required=True, type=parse.shape, help="e.g. 31x65, or 8x4096x32x128 with --perm")
    p.add_argument("--perm", type=parse.perm, default=None,
                   help="e.g. 0,2,1,3: an N-D permute (negative dims as --perm=-1,0,1)")
    p.add_argument("--block", type=lambda t: parse.pair(t, "block"), default=None, help="tile, e.g. 32x32")
    p.add_argument("--dtype", type=parse.dtype, default="float32", help="e.g. float32, bf16, int8 (default float32)")
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
