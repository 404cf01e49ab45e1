"""``tileflip plan``: the launch plan of a transpose or a permute, as text."""

from __future__ import annotations

import argparse

from tileflip.cli import parse


def _perm_example(rank: int) -> str:
    """A permutation of ``rank`` dims to show in an error: the middle two swapped, as 0,2,1,3 does for 4."""
    dims = list(range(rank))
    if rank >= 3:
        dims[1], dims[2] = dims[2], dims[1]
    else:
        dims.reverse()
    return ",".join(map(str, dims))


def main(argv: list[str]) -> int:
    from tileflip import explain, plan

    p = argparse.ArgumentParser(
        prog="tileflip plan",
        description="Print the launch plan of a 2-D transpose or an N-D permute (contiguous input).",
    )
    p.add_argument("--shape", required=True, type=parse.shape, help="e.g. 31x65, or 8x4096x32x128 with --perm")
    p.add_argument("--perm", type=parse.perm, default=None,
                   help="e.g. 0,2,1,3: an N-D permute (negative dims as --perm=-1,0,1)")
    p.add_argument("--block", type=lambda t: parse.pair(t, "block"), default=None, help="tile, e.g. 32x32")
    p.add_argument("--dtype", type=parse.dtype, default="float32", help="e.g. float32, bf16, int8 (default float32)")
    p.add_argument("--programs", type=lambda t: parse.count(t, "programs", 12), default=12,
                   help="how many programs to list (default 12)")
    p.add_argument("--in-place", action="store_true",
                   help="the passes of tileflip.transpose_in_place on an M x N (or B x M x N) tensor")
    p.add_argument("--scratch-bytes", type=lambda t: parse.count(t, "scratch-bytes", 33554432), default=None,
                   help="with --in-place: the scratch budget (default: the plan's own)")
    args = p.parse_args(argv)
    rank = len(args.shape)
    if args.in_place:
        if args.perm is not None or args.block is not None:
            p.error("--in-place takes --shape, --dtype and --scratch-bytes only (no --perm, no --block)")
        if rank not in (2, 3):
            p.error(f"argument --shape: --in-place takes M x N or B x M x N, such as 4096x8192, got {rank} "
                    f"dimension{'s' * (rank != 1)}")  # fmt: skip
        try:
            print(explain.in_place_text(args.shape, dtype=args.dtype, scratch_bytes=args.scratch_bytes))
        except ValueError as error:
            p.error(str(error).replace("scratch_bytes", "--scratch-bytes"))
        return 0
    if args.scratch_bytes is not None:
        p.error("--scratch-bytes is for --in-place")
    # The planner's own refusals name its parameters (dims, x, block); here they name the options instead.
    if args.perm is not None:
        if args.block is not None:
            p.error("--block is for a 2-D transpose's tile; a permute's tiles come from the planner (leave it out)")
        if rank > plan.MAX_RANK:
            p.error(f"argument --shape: a permute takes at most {plan.MAX_RANK} dimensions, such as 8x4096x32x128, "
                    f"got {rank}")
        try:
            plan.check_perm(args.perm, rank)
        except ValueError:
            shape, example = "x".join(map(str, args.shape)) or "(0-D)", _perm_example(rank) or "--perm= (empty)"
            p.error(f"argument --perm: dims must be a permutation of range({rank}), one per dimension of --shape "
                    f"{shape}, such as {example}; got {','.join(map(str, args.perm)) or '(empty)'}")
    elif rank != 2:
        permute = f" (or give --perm for a permute, such as --perm {_perm_example(rank)})" if rank > 2 else ""
        dims = f"{rank} dimension{'s' * (rank != 1)}"
        p.error(f"--shape must be M x N for a transpose, such as 31x65{permute}, got {dims}")
    elif args.block is not None:
        try:
            plan.check_tile(*args.block, arg="--block")
        except ValueError as error:
            p.error(f"{error} (a valid tile: 32x32)")
    try:
        if args.perm is not None:
            text = explain.permute_text(args.shape, args.perm, dtype=args.dtype)
        else:
            text = explain.plan_text(args.shape, block=args.block, dtype=args.dtype, programs=args.programs)
    except ValueError as error:  # the options are checked above: what is left is a shape too large to launch
        p.error(f"argument --shape: {error}")
    print(text)
    return 0
