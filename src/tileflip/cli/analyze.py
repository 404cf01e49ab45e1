"""``tileflip analyze``: the warp-access and time model of tileflip's transposes (CPU), or ``--measure`` on a GPU."""

from __future__ import annotations

import argparse
import json
import sys

from tileflip import tuning
from tileflip.analyze.model import analyze
from tileflip.analyze.report import format_report, program_order
from tileflip.analyze.timemodel import load_device
from tileflip.analyze.variants import KERNELS, build_variant
from tileflip.cli import parse
from tileflip.plan import MAX_GRID_YZ, check_tile, element_size, transpose_grid

TILE_OPTIONS = ("--block", "--num-warps", "--group-m")
UNMODELLED_FLAGS = ("interior", "maxnreg", "out_tile", "evict_last")  # TileConfig fields the model leaves out


def _strides(text: str) -> tuple[int, int]:
    """'512,1' -> (512, 1): the input's two strides, in elements."""
    try:
        strides = tuple(int(s) for s in text.split(","))
        if len(strides) != 2:
            raise ValueError
    except ValueError:
        message = f"strides must look like 512,1 (elements, two of them), got {text!r}"
        raise argparse.ArgumentTypeError(message) from None
    if min(strides) < 0:
        raise argparse.ArgumentTypeError(f"strides must be non-negative (negative ones are not modelled), got {text!r}")
    return strides


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tileflip analyze", description=(
        "Warp-level coalescing, sector, bank-conflict and time model of tileflip's transposes (CPU only). "
        "The triton kernel is modelled with the tile backend auto runs for the shape and dtype unless "
        "--block, --num-warps or --group-m say otherwise."))
    p.add_argument("--kernel", choices=(*KERNELS, "all"), default=None,
                   help="kernel variant (default naive; with --measure, all)")
    p.add_argument("--shape", type=lambda t: parse.pair(t, "shape"), default=(1024, 512),
                   help="input MxN (default 1024x512)")
    p.add_argument("--dtype", type=parse.dtype, default="float32",
                   help="element type, e.g. float32, bf16, int8 (default float32)")
    p.add_argument("--threads", type=lambda t: parse.pair(t, "threads"), default=None,
                   help="CUDA block, e.g. 16x16 (naive) or 32x8 (tiled)")
    p.add_argument("--block", type=lambda t: parse.pair(t, "block"), default=None,
                   help="Triton tile BLOCK_MxBLOCK_N, e.g. 64x64 (default: the tile auto runs for the shape)")
    p.add_argument("--num-warps", type=int, default=None,
                   help="Triton num_warps (default: auto's for the shape; with --block, by tile size)")
    p.add_argument("--group-m", type=int, default=None,
                   help="Triton GROUP_M program order (1: row by row of tiles; 0: column by column; -1: column "
                        "by column on a 2-D grid; G > 1: bands of G tile rows, column by column); default: "
                        "auto's for the shape, with --block 1")
    p.add_argument("--strides", type=_strides, default=None, help="input strides in elements, e.g. 512,1")
    p.add_argument("--sample", type=int, default=512, help="programs enumerated at most (default 512)")
    p.add_argument("--device", default=None, help="device constants JSON (default: the committed H200 file)")
    p.add_argument("--png", type=parse.png("analyze.png"), default=None,
                   help="draw the warp accesses (and bank map) to this PNG")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--measure", action="store_true", help="GPU only: measure each variant against a copy")
    p.add_argument("--no-ncu", action="store_true", help="with --measure: skip Nsight Compute even if installed")
    return p


def _checked(p: argparse.ArgumentParser, option: str, check):
    """``check()``'s value; a refusal becomes ``option``'s error (exit status 2, before anything is written)."""
    try:
        return check()
    except (ValueError, OSError) as error:
        p.error(f"argument {option}: {error}")


def _validate(p: argparse.ArgumentParser, args, kernels: tuple) -> None:
    """Refuse, naming the option, what the analysis would refuse or silently ignore."""
    if "triton" not in kernels:
        for option, value in zip(TILE_OPTIONS, (args.block, args.num_warps, args.group_m)):
            if value is not None:
                p.error(f"argument {option}: sets the Triton tile, but --kernel {args.kernel or 'naive'} is a CUDA "
                        "kernel (its block is --threads); use --kernel triton or all")
    takes_threads = [k for k in kernels if k == "naive" or args.kernel == k != "triton"]
    if args.threads is not None:
        if not takes_threads:
            p.error("argument --threads: the CUDA kernels' block; --kernel triton's tile is --block and --num-warps")
        for k in takes_threads:
            _checked(p, "--threads", lambda k=k: build_variant(k, 1, 1, 4, threads=args.threads))
    if args.block is not None:
        _checked(p, "--block", lambda: check_tile(*args.block))
    if args.num_warps is not None:
        _checked(p, "--num-warps", lambda: check_tile(1, 1, args.num_warps))
    if args.group_m is not None:
        _checked(p, "--group-m", lambda: transpose_grid(1, 1, 1, 1, args.group_m))
    if args.sample < 1:
        p.error(f"argument --sample: sample must be a positive int (programs enumerated at most), got {args.sample}")


def _auto(shape, itemsize: int, strides) -> dict:
    """What backend auto runs for this input on a CUDA tensor (into a fresh output), and the Triton tile
    tileflip.tuning gives it: the launch path's own calls (``ops.transpose``), none repeated here."""
    M, N = shape
    sxm, sxn = strides or (N, 1)
    chosen = tuning.auto_for(M, N, itemsize, sxm)
    refusal = None
    if chosen == "cuda-vec":
        from tileflip.ops.backends import vec_refusal  # imports torch: only where the table names cuda-vec

        refusal = vec_refusal(itemsize, sxn, M, 0)  # a fresh output starts on a 16-byte boundary
    return {"chosen": chosen, "runs": "triton" if refusal else chosen, "refusal": refusal,
            "shape_class": tuning.shape_class(M, N, itemsize, sxm),
            "config": tuning.triton_config(itemsize, (M, N), sxm)}


def _order(shape, block, group_m) -> str:
    """The program order of a tile on ``shape``, in words (whether -1 gets its 2-D grid depends on grid_n)."""
    return program_order(group_m, two_d=-(-shape[1] // block[1]) <= MAX_GRID_YZ)


def _describe(shape, block, num_warps, group_m) -> str:
    return (f"{block[0]}x{block[1]}, {num_warps} warps, group_m {group_m} "
            f"(program order: {_order(shape, block, group_m)})")


def _tile_statement(auto: dict, itemsize: int, shape, modelled: tuple, given: list) -> list[str]:
    """Lines that say whose tile the triton report models: the one auto runs, or the options'."""
    c, runs = auto["config"], auto["runs"]
    tuned = _describe(shape, (c.block_m, c.block_n), c.num_warps, c.group_m)
    why = f"tileflip.tuning's choice for {itemsize}-byte {auto['shape_class']} shapes"
    lines = []
    if runs != "triton":
        fallback = "; the Triton tile where NVRTC is missing" if runs.startswith("cuda-") else ""
        variant = runs.removeprefix("cuda-").replace("-", "_")
        lines.append(f"auto: backend auto on a CUDA tensor runs {runs} for this shape and dtype ({why}{fallback}); "
                     "this model is of the Triton tile kernel, which backend='triton' runs"
                     + (f" (--kernel {variant} models {runs})" if variant in KERNELS else ""))
    whose = "backend auto" if runs == "triton" else "backend='triton'"
    if not given:
        line = (f"tile: {tuned}: the tile {whose} runs for this shape and dtype ({why}); "
                f"{', '.join(TILE_OPTIONS)} override it")
        flags = [f"{f}={getattr(c, f)}" for f in UNMODELLED_FLAGS if getattr(c, f)]
        if flags:
            line += f"; not modelled: {', '.join(flags)}"
    else:
        same = modelled == ((c.block_m, c.block_n), c.num_warps, c.group_m)
        line = (f"tile: {_describe(shape, *modelled)}: from {', '.join(given)}, "
                + ("the same as" if same else "not") + f" the tile {whose} runs for this shape and dtype"
                + ("" if same else f", which is {tuned}: {why}"))
    if auto["refusal"]:
        line += f"; the table names cuda-vec, which cannot take this call: {auto['refusal']}"
    return lines + [line]


def _tile_choice(auto: dict, itemsize: int, report, group_m: int, args) -> dict:
    """The triton report's tile beside the one auto runs, and the lines that say which it is."""
    c = auto["config"]
    tuned = ((c.block_m, c.block_n), c.num_warps, c.group_m)
    modelled = (tuple(report.block), report.num_warps, group_m)
    given = [o for o, v in zip(TILE_OPTIONS, (args.block, args.num_warps, args.group_m)) if v is not None]
    return {
        "auto_backend": auto["runs"], "auto_table_choice": auto["chosen"], "shape_class": auto["shape_class"],
        "auto_triton_tile": {"block": list(tuned[0]), "num_warps": tuned[1], "group_m": tuned[2],
                             "program_order": _order(args.shape, *tuned[::2])},
        "modelled_tile": {"block": list(modelled[0]), "num_warps": modelled[1], "group_m": modelled[2],
                          "program_order": _order(args.shape, *modelled[::2])},
        "modelled_is_auto": auto["runs"] == "triton" and modelled == tuned,
        "tile_options": given, "statement": _tile_statement(auto, itemsize, args.shape, modelled, given),
    }


def main(argv: list[str]) -> int:
    """``tileflip analyze ...``; returns the exit status."""
    p = _parser()
    args = p.parse_args(argv)
    measured = KERNELS if args.kernel in (None, "all") else (args.kernel,)
    kernels = measured if args.measure else KERNELS if args.kernel == "all" else (args.kernel or "naive",)
    _validate(p, args, kernels)
    device = _checked(p, "--device", lambda: load_device(args.device))
    if args.measure:
        from tileflip.bench.measure import measure_analyzer

        return measure_analyzer(
            args.shape, args.dtype, kernels=measured, threads=args.threads, block=args.block,
            num_warps=args.num_warps, sample=args.sample, device=device, as_json=args.json, ncu=not args.no_ncu,
        )
    itemsize = element_size(args.dtype)
    auto = _auto(args.shape, itemsize, args.strides) if "triton" in kernels else None
    block, num_warps, group_m = args.block, args.num_warps, args.group_m
    if auto:
        # The tile auto runs, unless an option sets it (as plan does: --block alone orders rows, group_m 1).
        c = auto["config"]
        block = block or (c.block_m, c.block_n)
        num_warps = num_warps if num_warps is not None or args.block else c.num_warps
        group_m = group_m if group_m is not None else 1 if args.block else c.group_m
    reports = [
        # --threads shapes the naive block; it reaches a tiled kernel only when that kernel alone is asked for.
        analyze(k, args.shape, args.dtype,
                threads=args.threads if k == "naive" or args.kernel == k != "triton" else None,
                block=block if k == "triton" else None, num_warps=num_warps if k == "triton" else None,
                group_m=group_m if k == "triton" else 1, strides=args.strides,
                sample=args.sample, device=device)
        for k in kernels
    ]
    triton = next((r for r in reports if r.kernel == "triton"), None)
    choice = _tile_choice(auto, itemsize, triton, group_m, args) if triton else {}
    if args.json:
        payloads = [r.to_dict() | ({"tile_choice": choice} if r is triton else {}) for r in reports]
        payload = payloads[0] if len(payloads) == 1 else {"reports": payloads}
        print(json.dumps(payload, indent=2, default=float))
    else:
        texts = []
        for r in reports:
            text = format_report(r)
            if r is triton:  # right under the report's first line, which names the tile
                head, _, rest = text.partition("\n")
                text = "\n".join([head, *choice["statement"], rest])
            texts.append(text)
        print("\n\n".join(texts))
    if args.png:
        from tileflip.analyze.pictures import draw_report

        path = draw_report(reports, args.png)
        print(f"wrote {path}", file=sys.stderr if args.json else sys.stdout)
    return 0
