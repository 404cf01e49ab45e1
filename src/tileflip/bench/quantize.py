"""Benchmark of ``tileflip.quantize`` against its peers and a same-run copy.

For each shape (bf16) and recipe, three output sets: row-wise only, column-wise only, and both; mxfp8 and
nvfp4 in both scale layouts, plain and blocked (what the block-scaled GEMMs read). Bytes moved are the
minimum any implementation must move: x read once, each output and its (unpadded) scales written once
(nvfp4 with its global scale given). The copy moves the same total, half
read and half written, and is timed first in every round. Peers: torchao's blockwise fp8 Triton
kernels for the fp8 recipes (for both outputs, its two kernels back to back), and torch.compile of
tileflip's plain-torch reference for every recipe (both outputs in one compiled function). Records
use the suites' long form with ``op="quantize"``, ``recipe``, ``scale_layout`` and ``outputs``; each carries ``exact``
(tileflip's kernel: every output bit-equal to the plain-torch reference on the same device).
"""

from __future__ import annotations

import functools

from tileflip.bench.cases import parse_part
from tileflip.bench.records import meta as run_meta
from tileflip.bench.records import time_ms, write_results
from tileflip.plan import scales

SHAPES = [(8192, 28672), (16384, 16384)]
RECIPES = ("fp8_1x128", "fp8_128x128", "mxfp8", "nvfp4")
OUTPUTS = {"both": (True, True), "rowwise": (True, False), "columnwise": (False, True)}
TORCHAO = {  # recipe -> (row-wise kernel, column-wise kernel) in torchao.prototype.blockwise_fp8_training.kernels
    "fp8_1x128": ("triton_fp8_blockwise_act_quant_lhs", "triton_fp8_blockwise_act_quant_transposed_lhs"),
    "fp8_128x128": ("triton_fp8_blockwise_weight_quant_rhs", "triton_fp8_blockwise_weight_quant_transposed_rhs"),
}
SCALE_BYTES = {"float32": 4, "float8_e8m0fnu": 1, "float8_e4m3fn": 1}


def min_bytes(recipe: str, M: int, K: int, in_size: int, rowwise: bool, columnwise: bool) -> int:
    """x read once, plus every asked-for output and its (unpadded) scales written once."""
    spec = scales.RECIPES[recipe]
    lay = scales.layouts(recipe, M, K, rowwise, columnwise, False)
    total = M * K * in_size
    for data, scale in ((lay.data, lay.scale), (lay.data_t, lay.scale_t)):
        if data is not None:
            total += data.shape[0] * data.shape[1] + scale.shape[0] * scale.shape[1] * SCALE_BYTES[spec.scale]
    return total


def layouts(recipe: str) -> tuple[str, ...]:
    """The scale layouts a recipe is timed in."""
    return ("plain", "blocked") if scales.RECIPES[recipe].blocked else ("plain",)


def _options(recipe: str, x, layout: str = "plain") -> dict:
    import torch

    options = {"scale_layout": layout} if layout != "plain" else {}
    if recipe == "nvfp4":
        options["global_scale"] = torch.div(x.abs().amax().float(), torch.full((), 2688.0, device=x.device))
    return options


def _same(got, want) -> bool:
    import torch

    for a, b in zip(got, want):
        if (a is None) != (b is None):
            return False
        if a is not None:
            raw = torch.uint8 if a.element_size() == 1 else torch.int32
            if a.shape != b.shape or not torch.equal(a.contiguous().view(raw), b.contiguous().view(raw)):
                return False
    return True


def _functions(x, recipe: str, outputs: str, options: dict, compiled: dict) -> dict:
    """{backend: callable} for one case; ``compiled`` caches torch.compile'd references by case."""
    import torch

    import tileflip
    from tileflip.ops import quantize as q

    rowwise, columnwise = OUTPUTS[outputs]
    fns = {"tileflip": lambda: tileflip.quantize(x, recipe, rowwise=rowwise, columnwise=columnwise, **options)}
    mode, given = q.global_mode(options.get("global_scale", "auto" if recipe != "nvfp4" else None))
    blocked = options.get("scale_layout") == "blocked"
    key = (recipe, outputs, blocked)
    if key not in compiled:
        # Static shapes: with dynamic=True the compiled reference ran at 2-16% of copy, against 22-73% static
        # (bf16 8192 x 28672, H200). Every case compiles its own graphs, hence the raised recompile limit.
        compiled[key] = torch.compile(functools.partial(q._torch_backend, recipe=recipe, rowwise=rowwise,
                                                        columnwise=columnwise, ue8m0=False, blocked=blocked,
                                                        mode=mode, rule="floor"), dynamic=False)  # fmt: skip
    fns["torch-compile"] = functools.partial(compiled[key], x, given=given)
    if recipe in TORCHAO:
        from torchao.prototype.blockwise_fp8_training import kernels as ao

        row, col = (getattr(ao, name) for name in TORCHAO[recipe])
        if outputs == "both":
            fns["torchao"] = lambda: (row(x, 128), col(x, 128))
        else:
            fns["torchao"] = functools.partial(row if rowwise else col, x, 128)
    return fns


def measure(shapes=SHAPES, recipes=RECIPES, rounds: int = 3, quick: bool = False, log=print,
            peers: bool = True) -> list[dict]:  # fmt: skip
    """Long-form records for every shape, recipe and output set."""
    import torch

    import tileflip

    meta = run_meta()
    records, compiled = [], {}
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)  # a graph a case
    for shape in shapes:
        M, K = shape
        gen = torch.Generator(device="cuda").manual_seed(0)
        x = (torch.randn(shape, device="cuda", generator=gen) * 64).to(torch.bfloat16)
        for recipe, layout in ((r, lay) for r in recipes for lay in layouts(r)):
            options = _options(recipe, x, layout)
            for outputs, (rowwise, columnwise) in OUTPUTS.items():
                nbytes = min_bytes(recipe, M, K, 2, rowwise, columnwise)
                src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
                dst = torch.empty_like(src)
                fns = _functions(x, recipe, outputs, options, compiled)
                if not peers:
                    fns = {"tileflip": fns["tileflip"]}
                want = tileflip.quantize(x, recipe, rowwise=rowwise, columnwise=columnwise, backend="torch", **options)
                exact = _same(fns["tileflip"](), want)
                del want
                base = dict(meta, op="quantize", recipe=recipe, scale_layout=layout, outputs=outputs, shape=list(shape),
                            dtype="bfloat16", bytes=nbytes, run=meta["time"])  # fmt: skip
                for r in range(rounds):
                    copy_ms, c20, c80 = time_ms(functools.partial(dst.copy_, src), quick)
                    copy_gbps = nbytes / copy_ms / 1e6
                    row = dict(base, backend="copy", ms=copy_ms, ms_p20=c20, ms_p80=c80, gbps=copy_gbps,
                               copy_gbps=copy_gbps, fraction_of_copy=1.0, round=r)  # fmt: skip
                    records.append(row)
                    for b, fn in fns.items():
                        ms, p20, p80 = time_ms(fn, quick)
                        gbps = nbytes / ms / 1e6
                        records.append(dict(row, backend=b, ms=ms, ms_p20=p20, ms_p80=p80, gbps=gbps,
                                            fraction_of_copy=gbps / copy_gbps,
                                            **({"exact": exact} if b == "tileflip" else {})))  # fmt: skip
                name = f"{'x'.join(map(str, shape))} {case_name(base)} {outputs}"
                log(f"{name}: " + _summary(records, base) + f"; exact {exact}")
                del src, dst, fns
            torch.cuda.empty_cache()
    return records


def case_name(r: dict) -> str:
    """A record's recipe, with its scale layout where that is not plain."""
    layout = r.get("scale_layout", "plain")
    return r["recipe"] if layout == "plain" else f"{r['recipe']} {layout}"


def medians(records: list[dict]) -> dict:
    """{(shape, case name, outputs, backend): (median ms, median fraction of copy)} over rounds."""
    groups: dict = {}
    for r in records:
        if "ms" in r:
            groups.setdefault((tuple(r["shape"]), case_name(r), r["outputs"], r["backend"]), []).append(r)
    out = {}
    for key, rows in groups.items():
        ms = sorted(r["ms"] for r in rows)
        frac = sorted(r["fraction_of_copy"] for r in rows)
        out[key] = (ms[len(ms) // 2], frac[len(frac) // 2])
    return out


def _summary(records, base) -> str:
    med = medians([r for r in records if case_name(r) == case_name(base) and r["outputs"] == base["outputs"]
                   and r["shape"] == base["shape"]])  # fmt: skip
    return ", ".join(f"{k[3]} {v[1]:.1%}" for k, v in med.items() if k[3] != "copy")


def table(records: list[dict]) -> str:
    med = medians(records)
    backends = sorted({k[3] for k in med} - {"copy"}, key=lambda b: (b != "tileflip", b))
    head = f"{'shape':>12} {'recipe':<20} {'outputs':<11}" + "".join(f"{b:>15}" for b in backends)
    lines = [head, "-" * len(head)]
    order = sorted({k[:3] for k in med}, key=lambda k: (k[0], RECIPES.index(k[1].split()[0]), k[1], k[2]))
    for shape, recipe, outputs in order:
        cells = [f"{med[(shape, recipe, outputs, b)][1]:.1%}" if (shape, recipe, outputs, b) in med else "-"
                 for b in backends]  # fmt: skip
        lines.append(f"{'x'.join(map(str, shape)):>12} {recipe:<20} {outputs:<11}" + "".join(f"{c:>15}" for c in cells))
    lines.append("each cell: fraction of the same-run copy's bandwidth, over the minimum bytes (x read once, "
                 "outputs and scales written once); medians over rounds")  # fmt: skip
    return "\n".join(lines)


def run(shapes, *, rounds: int, quick: bool, out_dir, command: str, part: str | None = None,
        log=print) -> list[str]:  # fmt: skip
    """Measure, print the table and write the results file (suite ``quantize``; ``part`` "K/N": every N-th
    shape from the K-th, merged into the file); returns the path written."""
    if part:
        k, n = parse_part(part)
        shapes = list(shapes)[k - 1 :: n]
    records = measure(shapes, rounds=rounds, quick=quick, log=log)
    print(table(records))
    return [str(write_results(records, "quantize", out_dir, command, part=part))]
