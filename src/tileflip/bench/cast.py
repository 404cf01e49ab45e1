"""Benchmark of ``tileflip.cast_transpose`` against eager torch, torch.compile and a same-run copy.

All three produce ``y`` (fp8, row-major), ``y_t`` (its contiguous transpose) and ``amax`` (max|x|) from
the same bf16 input and 0-d fp32 scale. Bytes moved, the minimum any implementation must move:
``numel * (in_size + 2)``, a read of x and two fp8 writes; the copy moves ``numel * (in_size + 2) / 2``
bytes, so it reads and writes that same total, and is timed first in every round. Records use the
suites' long form with ``op="cast_transpose"``; tileflip's also carry ``exact`` (y, y_t and amax
bit-equal to eager torch's), and one record per shape (``backend="tileflip-kernels"``) lists the
kernels a profiled call launched.
"""

from __future__ import annotations

import functools

from tileflip.bench.records import medians, time_ms, write_results
from tileflip.bench.records import meta as run_meta
from tileflip.plan import TileConfig

SHAPES = [(16384, 16384), (8192, 28672)]
BACKENDS = ["copy", "tileflip", "torch-eager", "torch-compile"]
FP8 = "float8_e4m3fn"


def reference_fn(dtype):
    """Eager torch's cast_transpose into ``dtype``: the three results as separate ops (its definition)."""
    import torch

    fmax = torch.finfo(dtype).max

    def reference(x, scale):
        y = (x.float() * scale).clamp(-fmax, fmax).to(dtype)
        return y, y.t().contiguous(), x.abs().amax().float()

    return reference


def _make_input(shape, dtype, device):
    import torch

    gen = torch.Generator(device=device).manual_seed(0)
    return (torch.randn(shape, device=device, generator=gen) * 64).to(getattr(torch, dtype))


def _same(got, want) -> bool:
    import torch

    y, y_t, amax = got
    ry, ryt, ramax = want
    same_amax = bool(torch.equal(amax.view(torch.int32), ramax.view(torch.int32))) or bool(amax.isnan() & ramax.isnan())
    return (
        bool(torch.equal(y.view(torch.uint8), ry.view(torch.uint8)))
        and bool(torch.equal(y_t.view(torch.uint8), ryt.view(torch.uint8)))
        and same_amax
    )


def kernels_of(fn) -> list[dict]:
    """Name and device time (us) of each kernel one call of ``fn`` launches (torch.profiler)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return [{"name": e.name, "us": e.device_time} for e in events]


def measure_cast(shapes=SHAPES, rounds: int = 3, quick: bool = False, log=print, dtype: str = "bfloat16",
                 configs=None, device: str = "cuda") -> list[dict]:  # fmt: skip
    """Long-form records for each shape; ``configs`` ({label: (TileConfig, launch options)}, as
    ``parse_tiles`` gives them) adds tile variants as backends ``tileflip-<label>``."""
    import torch

    fp8 = getattr(torch, FP8)
    meta = run_meta()
    records = []
    reference = reference_fn(fp8)
    compiled = torch.compile(reference, dynamic=False)
    for i, shape in enumerate(shapes):
        x = _make_input(shape, dtype, device)
        scale = torch.tensor(0.5, device=device)
        nbytes = x.numel() * (x.element_size() + 2)
        src = torch.empty(nbytes // 2, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        want = reference(x, scale)
        fns = _functions(x, scale, fp8, reference, compiled, configs or {})
        exact = {b: _same(fn(), want) for b, fn in fns.items()}
        for r in range(rounds):
            copy_ms, c20, c80 = time_ms(functools.partial(dst.copy_, src), quick)
            copy_gbps = nbytes / copy_ms / 1e6
            row = dict(meta, op="cast_transpose", backend="copy", shape=list(shape), dtype=dtype, ms=copy_ms,
                       ms_p20=c20, ms_p80=c80, gbps=copy_gbps, copy_gbps=copy_gbps, fraction_of_copy=1.0,
                       run=meta["time"], round=r)  # fmt: skip
            records.append(row)
            for b, fn in fns.items():
                ms, p20, p80 = time_ms(fn, quick)
                gbps = nbytes / ms / 1e6
                records.append(dict(row, backend=b, ms=ms, ms_p20=p20, ms_p80=p80, gbps=gbps,
                                    fraction_of_copy=gbps / copy_gbps, exact=exact[b]))  # fmt: skip
        kernels = kernels_of(fns["tileflip"])
        records.append(dict(meta, op="cast_transpose", backend="tileflip-kernels", shape=list(shape), dtype=dtype,
                            kernels=kernels, run=meta["time"]))  # fmt: skip
        log(f"[{i + 1}/{len(shapes)}] {'x'.join(map(str, shape))} {dtype}: " + _summary(records, shape, dtype)
            + f"; exact {exact}; kernels {[(e['name'][:40], round(e['us'], 1)) for e in kernels]}")  # fmt: skip
        del x, src, dst, want, fns
        if device == "cuda":
            torch.cuda.empty_cache()
    return records


def _functions(x, scale, fp8, reference, compiled, configs) -> dict:
    """{backend: callable returning (y, y_t, amax)} for one input."""
    import tileflip.ops.cast
    from tileflip.kernels.triton import cast_transpose as k

    fns = {
        "tileflip": lambda: tileflip.ops.cast.cast_transpose(x, fp8, scale),
        "torch-eager": lambda: reference(x, scale),
        "torch-compile": lambda: compiled(x, scale),
    }
    for label, (config, options) in configs.items():
        fns[f"tileflip-{label}"] = _variant(x, scale, fp8, config, options, k)
    return fns


def _variant(x, scale, fp8, config, options, k):
    """cast_transpose through the launcher with an explicit tile config and launch options (same
    outputs; the amax by partials and the reduction kernel unless ``options`` asks for the atomic one)."""
    import torch

    M, N = x.shape

    def run():
        y = torch.empty((M, N), dtype=fp8, device=x.device)
        y_t = torch.empty((N, M), dtype=fp8, device=x.device)
        if options.get("amax_atomic"):
            slot = k.amax_slot(x.device)
            k.launch(x, y, y_t, slot, scale, fp8, config, **options)
            return y, y_t, slot.view(torch.float32)
        partials = torch.empty(k.num_programs(M, N, config), dtype=torch.int32, device=x.device)
        k.launch(x, y, y_t, partials, scale, fp8, config, **options)
        return y, y_t, k.finalize_amax(partials)

    return run


def _summary(records, shape, dtype) -> str:
    med = {b: v for (s, d, b), v in medians([r for r in records if "ms" in r]).items()
           if s == tuple(shape) and d == dtype}  # fmt: skip
    copy = med.pop("copy")
    return f"copy {copy[1]:.0f} GB/s; " + ", ".join(f"{b} {g:.0f} GB/s {f:.0%}" for b, (_, g, f) in med.items())


def table(records: list[dict]) -> str:
    med = medians([r for r in records if "ms" in r])
    cases = sorted({(s, d) for s, d, _ in med})
    backends = [b for b in BACKENDS if any(k[2] == b for k in med)]
    backends += sorted({k[2] for k in med} - set(backends))
    head = f"{'shape':>12} {'dtype':<9}" + "".join(f"{b:>20}" for b in backends)
    lines = [head, "-" * len(head)]
    for s, d in cases:
        cells = [f"{med[(s, d, b)][1]:>8.0f} {med[(s, d, b)][2]:>6.1%}" if (s, d, b) in med else "-" for b in backends]
        lines.append(f"{'x'.join(map(str, s)):>12} {d:<9}" + "".join(f"{c:>20}" for c in cells))
    lines.append("each cell: GB/s of minimum bytes (read x, write y and y_t) and fraction of the same-run copy; "
                 "medians over rounds")  # fmt: skip
    return "\n".join(lines)


def parse_tiles(specs: str) -> dict:
    """{spec: (TileConfig, launch options)} for comma-separated specs BMxBNwW[gG][rR][-i64][-atomic]: -i64
    forces int64 offsets, -atomic takes the amax by the atomic max (else per-program partials and a
    reduction kernel, as under CUDA graph capture)."""
    configs = {}
    for spec in filter(None, specs.split(",")):
        tile, *suffixes = spec.split("-")
        try:
            tile, rest = tile.split("w")
            rest, _, regs = rest.partition("r")  # ...rR: at most R registers per thread
            warps, _, group = rest.partition("g")  # BMxBNwW or BMxBNwWgG (bands of G tile rows)
            bm, bn = (int(v) for v in tile.split("x"))
            config = TileConfig(bm, bn, int(warps), int(group or 1), maxnreg=int(regs or 0))
        except ValueError:
            raise ValueError(f"tiles: expected BMxBNwW[gG][rR][-i64][-atomic] such as 128x128w8g4, "
                             f"got {spec!r}") from None
        if set(suffixes) - {"i64", "atomic"}:
            raise ValueError(f"tiles: the suffixes are -i64 and -atomic, got {spec!r}")
        options = {"off64": True} if "i64" in suffixes else {}
        options |= {"amax_atomic": True} if "atomic" in suffixes else {}
        configs[spec] = (config, options)
    return configs


def run(shapes, *, rounds: int, quick: bool, tiles: str, out_dir, command: str, log=print) -> list[str]:
    """Measure, print the table and write the results file (suite ``cast``); returns the path written."""
    configs = parse_tiles(tiles)
    records = measure_cast(shapes, rounds, quick, log, configs=configs)
    print(table(records))
    return [str(write_results(records, "cast", out_dir, command))]
