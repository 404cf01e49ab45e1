"""``tileflip analyze``: the warp-access and time model of tileflip's transposes (CPU), or ``--measure`` on a GPU."""

from __future__ import annotations

import argparse
import json
import sys

from tileflip.analyze.model import analyze
from tileflip.analyze.report import format_report
from tileflip.analyze.variants import KERNELS
from tileflip.cli import parse


def _strides(text: str) -> tuple[int, int]:
    """'512,1' -> (512, 1): the input's two strides, in elements."""
    try:
        strides = tuple(int(s) for s in text.split(","))
        if len(strides) != 2:
            raise ValueError
    except ValueError:
        message = f"strides must look like 512,1 (elements, two of them), got {text!r}"
        raise argparse.ArgumentTypeError(message) from None
    return strides


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tileflip analyze", description=(
        "Warp-level coalescing, sector, bank-conflict and time model of tileflip's transposes (CPU only)."))
    p.add_argument("--kernel", choices=(*KERNELS, "all"), default=None,
                   help="kernel variant (default naive; with --measure, all)")
    p.add_argument("--shape", type=lambda t: parse.pair(t, "shape"), default=(1024, 512),
                   help="input MxN (default 1024x512)")
    p.add_argument("--dtype", type=parse.dtype, default="float32",
                   help="element type, e.g. float32, bf16, int8 (default float32)")
    p.add_argument("--threads", type=lambda t: parse.pair(t, "threads"), default=None,
                   help="CUDA block, e.g. 16x16 (naive) or 32x8 (tiled)")
    p.add_argument("--block", type=lambda t: parse.pair(t, "block"), default=None,
                   help="Triton tile BLOCK_MxBLOCK_N, e.g. 64x64")
    p.add_argument("--num-warps", type=int, default=None, help="Triton num_warps")
    p.add_argument("--group-m", type=int, default=1, help="Triton GROUP_M program order (default 1)")
    p.add_argument("--strides", type=_strides, default=None, help="input strides in elements, e.g. 512,1")
    p.add_argument("--sample", type=int, default=512, help="programs enumerated at most (default 512)")
    p.add_argument("--device", default=None, help="device constants JSON (default: the committed H200 file)")
    p.add_argument("--png", default=None, help="draw the warp accesses (and bank map) to this PNG")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--measure", action="store_true", help="GPU only: measure each variant against a copy")
    p.add_argument("--no-ncu", action="store_true", help="with --measure: skip Nsight Compute even if installed")
    return p


def main(argv: list[str]) -> int:
    """``tileflip analyze ...``; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.measure:
        from tileflip.bench.measure import measure_analyzer

        return measure_analyzer(
            args.shape, args.dtype, kernels=KERNELS if args.kernel in (None, "all") else (args.kernel,),
            threads=args.threads, block=args.block, num_warps=args.num_warps, sample=args.sample,
            device=args.device, as_json=args.json, ncu=not args.no_ncu,
        )
    kernels = KERNELS if args.kernel == "all" else (args.kernel or "naive",)
    reports = [
        # --threads shapes the naive block; it reaches a tiled kernel only when that kernel alone is asked for.
        analyze(k, args.shape, args.dtype,
                threads=args.threads if k == "naive" or args.kernel == k != "triton" else None,
                block=args.block if k == "triton" else None, num_warps=args.num_warps,
                group_m=args.group_m if k == "triton" else 1, strides=args.strides,
                sample=args.sample, device=args.device)
        for k in kernels
    ]
    if args.json:
        payload = reports[0].to_dict() if len(reports) == 1 else {"reports": [r.to_dict() for r in reports]}
        print(json.dumps(payload, indent=2, default=float))
    else:
        print("\n\n".join(format_report(r) for r in reports))
    if args.png:
        from tileflip.analyze.pictures import draw_report

        path = draw_report(reports, args.png)
        print(f"wrote {path}", file=sys.stderr if args.json else sys.stdout)
    return 0
