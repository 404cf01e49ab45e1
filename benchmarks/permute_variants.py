"""Experiment: the permute suites (named and random) under several tile-kernel settings in one process,
each case's copy and every setting timed interleaved; checks each result's bits once.

``python benchmarks/permute_variants.py OUT.json VARIANT...`` where a VARIANT is ``name:key=value,...``
with keys ``fold`` (``tuning.FOLD_FACTOR``), ``bfast`` (``tuning.B_FAST_RULE``), ``bfirst`` (element
sizes, as digits, for ``tuning.B_FIRST_SIZES``; 0 for none; the library's when absent), ``t2d`` (element
sizes, as digits, that take the 2-D table's large tile as ``tuning.PERMUTE_TILES``), ``narrow`` /
``off32`` / ``t4b`` (0 or 1: ``tuning.NARROW_RULE``, ``tuning.OFFSETS32_RULE``, ``tuning.TILES_4B``),
``wload`` (0: ``tuning.WIDE_LOAD_STEP`` off), ``wtiles`` (0: ``tuning.WIDE_LOAD_TILES`` off),
``wafast`` / ``wl64`` (0: ``tuning.WIDE_LOAD_A_FAST`` / ``WIDE_LOAD_OFFSETS64`` empty), ``regcap`` /
``capall`` (``tuning.REGISTER_CAP``, 0 for none / ``REGISTER_CAP_ALL``), ``nhalve`` /
``nwarps`` / ``noff32`` (one narrow step for every vector under 16 bytes, WIDE_LOAD_STEP off: its halvings,
warps, and 0 to keep its int64 offsets), ``warps`` (num_warps) and ``area`` (a factor on the large
tile's area: 0.5 halves the larger side; with ``warps`` or ``area`` the narrow rule and TILES_4B are
off), ``ta`` / ``tb`` (the tile's A and B caps, the config's block_n and block_m, in place of ``area``),
``mreg`` (a register cap on full-vector tile launches, ``tuning.PERMUTE_MAXNREG``) with
``mregsize`` (only that element size), ``short`` (``tuning.SHORT_RUN_BYTES``; 0 turns ``short_kept_run`` off),
``bgrow`` / ``contig`` (0 or 1:
``tuning.FOLD_B_FIRST`` / ``FOLD_CONTIG``) and ``kept`` (with ``area`` or ``warps``: 1 applies them to kept
tiles only, 0 to transposed tiles only; ``area`` above 1 doubles the smaller side), ``wholeb``
(``tuning.WHOLE_B_WASTE``), ``flat`` / ``flatel`` / ``flatw`` (``tuning.ROWS_FLAT``, its elements per program
and warps), ``vrun`` / ``vrunall`` / ``evict`` / ``magic`` (0 or 1: ``tuning.VECTOR_RUNS`` /
``VECTOR_RUNS_TILE_ALL`` / ``PERMUTE_EVICT_LAST`` / ``PERMUTE_MAGIC``), ``aout`` (0 or 1:
``tuning.FOLD_A_OUTPUT_ORDER``), ``realign`` (0 or 1: ``tuning.REALIGN_STORES``, the CUDA kernel
for 1-byte rows off any boundary), ``t2dmin`` (``plan.TRANSPOSE2D_MIN_BYTES``: a large value sends 2-D permutes
to the tile kernel instead of the 2-D transpose kernel).
Prints one line per case and a summary per variant. ``PERMUTE_CASES`` (space-separated pieces of case
labels, e.g. ``"23x21x112 1792x50"``) keeps only the cases whose label contains one of them;
``PERMUTE_EXTRA`` (``DTYPE:AxBxC:p,q,r ...``) adds cases of its own.
"""

import json
import os
import statistics
import sys

import torch

import tileflip
from tileflip import bench, ops, plan, timing, tuning
from tileflip.kernels import cuda_permute, triton_permute

BASE_CONFIG = tuning.permute_config
NARROW_STEPS = tuning.NARROW_STEPS
WIDE_LOAD_STEP = tuning.WIDE_LOAD_STEP
WIDE_LOAD_TILES = tuning.WIDE_LOAD_TILES
WIDE_LOAD_A_FAST = tuning.WIDE_LOAD_A_FAST
WIDE_LOAD_OFFSETS64 = tuning.WIDE_LOAD_OFFSETS64
TILES_4B = tuning.TILES_4B
PERMUTE_TILES = tuning.PERMUTE_TILES
B_FIRST_SIZES = tuning.B_FIRST_SIZES
# Options that set one scalar of tuning: key -> (attribute, type); a variant without the key runs the
# library's value.
SCALARS = {
    "fold": ("FOLD_FACTOR", int), "bgrow": ("FOLD_B_FIRST", bool), "contig": ("FOLD_CONTIG", bool),
    "wholeb": ("WHOLE_B_WASTE", float), "flat": ("ROWS_FLAT", bool), "flatel": ("ROWS_FLAT_ELEMENTS", int),
    "flatw": ("ROWS_FLAT_WARPS", int), "bfast": ("B_FAST_RULE", bool), "narrow": ("NARROW_RULE", bool),
    "short": ("SHORT_RUN_BYTES", int), "off32": ("OFFSETS32_RULE", bool), "vrun": ("VECTOR_RUNS", bool),
    "vrunall": ("VECTOR_RUNS_TILE_ALL", bool), "evict": ("PERMUTE_EVICT_LAST", bool),
    "magic": ("PERMUTE_MAGIC", bool), "aout": ("FOLD_A_OUTPUT_ORDER", bool), "regcap": ("REGISTER_CAP", int),
    "capall": ("REGISTER_CAP_ALL", bool), "realign": ("REALIGN_STORES", bool),
}  # fmt: skip
DEFAULTS = {key: getattr(tuning, attr) for key, (attr, _) in SCALARS.items()}
# The 2-D table's large-class tiles (area and warps; the permute kernel has its own order and orientation).
TABLE_TILES = {es: tuning._config(es, "large") for es in (1, 2, 4, 8)}
TRANSPOSE2D_MIN_BYTES = plan.TRANSPOSE2D_MIN_BYTES


def parse(spec: str) -> tuple[str, dict]:
    name, _, rest = spec.partition(":")
    opts = {k: float(v) for k, v in (kv.split("=") for kv in rest.split(",") if kv)}
    return name, opts


def _sizes(digits: float) -> list[int]:
    """Element sizes named by the digits of an option's value (``18``: 1 and 8; 0: none)."""
    return [int(d) for d in str(int(digits)) if d != "0"]


def apply(opts: dict) -> None:
    for key, (attr, kind) in SCALARS.items():
        setattr(tuning, attr, kind(opts.get(key, DEFAULTS[key])))
    tuning.B_FIRST_SIZES = frozenset(_sizes(opts["bfirst"])) if "bfirst" in opts else B_FIRST_SIZES
    tuning.PERMUTE_TILES = PERMUTE_TILES | {es: TABLE_TILES[es] for es in _sizes(opts.get("t2d", 0))}
    tuning.TILES_4B = TILES_4B if opts.get("t4b", 1) else {}
    sizes = (int(opts["mregsize"]),) if "mregsize" in opts else (1, 2, 4, 8)
    tuning.PERMUTE_MAXNREG = dict.fromkeys(sizes, int(opts["mreg"])) if "mreg" in opts else {}
    one_step = "nhalve" in opts or "nwarps" in opts
    tuning.WIDE_LOAD_STEP = WIDE_LOAD_STEP if opts.get("wload", 1) and not one_step else None
    tuning.WIDE_LOAD_TILES = WIDE_LOAD_TILES if opts.get("wtiles", 1) else {}
    tuning.WIDE_LOAD_A_FAST = WIDE_LOAD_A_FAST if opts.get("wafast", 1) else frozenset()
    tuning.WIDE_LOAD_OFFSETS64 = WIDE_LOAD_OFFSETS64 if opts.get("wl64", 1) else frozenset()
    plan.TRANSPOSE2D_MIN_BYTES = int(opts.get("t2dmin", TRANSPOSE2D_MIN_BYTES))
    ops._plan_permute.cache_clear()  # plans (their kinds) are cached per call's arguments
    if one_step:  # one narrow step for every vector under 16 bytes
        halvings, warps = int(opts.get("nhalve", 1)), int(opts.get("nwarps", 8))
        tuning.NARROW_STEPS = ((tuning.VECTOR_BYTES, halvings, warps, bool(opts.get("noff32", 1))),)
    else:
        tuning.NARROW_STEPS = NARROW_STEPS
    if not {"area", "warps", "ta", "tb"} & set(opts):
        tuning.permute_config = BASE_CONFIG
    else:

        def config(element_size, vector_bytes=16, kept=True, load_bytes=0, store_bytes=0, wide_tiles=True):
            if "kept" in opts and bool(opts["kept"]) != kept:
                return BASE_CONFIG(element_size, vector_bytes, kept, load_bytes, store_bytes, wide_tiles)
            c = BASE_CONFIG(element_size)
            bm, bn = c.block_m, c.block_n
            area = opts.get("area", 1.0)
            while area < 1.0:
                if bm >= bn:
                    bm //= 2
                else:
                    bn //= 2
                area *= 2
            while area > 1.0:
                if bm <= bn:
                    bm *= 2
                else:
                    bn *= 2
                area /= 2
            bm, bn = int(opts.get("tb", bm)), int(opts.get("ta", bn))
            return c._replace(block_m=bm, block_n=bn, num_warps=int(opts.get("warps", c.num_warps)))

        tuning.permute_config = config
    triton_permute.clear_cache()
    cuda_permute.params_of.cache_clear()


def main(out_path: str, specs: list[str]) -> None:
    variants = [parse(s) for s in specs]
    cases = bench.suite_cases("permute") + bench.suite_cases("permute-random")
    if os.environ.get("PERMUTE_CASES"):
        cases = [c for c in cases if any(piece in c.label for piece in os.environ["PERMUTE_CASES"].split())]
    for spec in os.environ.get("PERMUTE_EXTRA", "").split():
        dtype, shape, perm = spec.split(":")
        cases.append(bench.Case(tuple(int(v) for v in shape.split("x")), dtype, tuple(int(v) for v in perm.split(","))))
    records = []
    for case in cases:
        x = bench._make_input(case)
        ref = x.permute(case.perm).contiguous()
        out = torch.empty_like(ref)
        src = torch.empty_like(ref)
        fns = [("copy", {}, lambda: out.copy_(src))]
        for name, opts in variants:
            apply(opts)
            out.view(-1).view(torch.uint8).fill_(0xA5)  # poisoned: a byte left unwritten shows
            tileflip.permute(x, case.perm, out)
            ok = torch.equal(out.view(-1).view(torch.uint8), ref.view(-1).view(torch.uint8))
            fns.append((name, opts, (lambda o=opts: (apply(o), tileflip.permute(x, case.perm, out))), ok))
        times = {name: [] for name, *_ in fns}
        # (Under the earlier zero_ flush a setting timed right after one with evict=1 measured 2 points
        # faster than itself elsewhere, session 10 runs 11, 13 and 15; timing's "l2" flush empties the L2.)
        for _ in range(3):
            for entry in fns:
                name, fn = entry[0], entry[2]
                times[name].append(timing.summarize(timing.device_times(fn, reps=20))[0])
        copy_ms = statistics.median(times["copy"])
        line = [f"{case.label:48s}"]
        for entry in fns[1:]:
            name, ok = entry[0], entry[3]
            ms = statistics.median(times[name])
            records.append({"shape": case.shape, "perm": case.perm, "dtype": case.dtype, "variant": name,
                            "opts": entry[1], "ms": ms, "copy_ms": copy_ms, "fraction_of_copy": copy_ms / ms,
                            "exact": ok})
            line.append(f"{name}={copy_ms / ms:.2f}{'' if ok else '!'}")
        print(" ".join(line), flush=True)
    for name, _ in variants:
        f = [r["fraction_of_copy"] for r in records if r["variant"] == name]
        print(f"{name}: median {statistics.median(f):.3f} min {min(f):.3f} below75 {sum(v < 0.75 for v in f)}"
              f" exact {all(r['exact'] for r in records if r['variant'] == name)}")
    json.dump({"gpu": torch.cuda.get_device_name(), "records": records}, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
