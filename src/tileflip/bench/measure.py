"""GPU side of ``tileflip analyze --measure``: each transpose variant against a same-run copy, beside the model.

For every variant the kernel runs through ``tileflip.transpose(x, out=out, backend=...)`` and is
timed with ``triton.testing.do_bench(..., return_mode="median")`` (L2 flushed between runs), between
two timings of ``b.copy_(a)`` over the same bytes; the measured fraction of copy is
copy time / kernel time. The prediction comes from ``tileflip.analyze.model.analyze`` with the tile,
warps, layouts and registers of the Triton kernel read back from the launcher's cache after it ran.

Where Nsight Compute (``ncu``) is on the PATH, each variant also runs once under it in a child
process and the measured sectors per request (global loads and stores), shared-memory wavefronts
and DRAM bytes are printed beside the predicted ones. Failures there are reported, never fatal.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys

from tileflip.analyze.model import analyze
from tileflip.analyze.variants import KERNELS
from tileflip.plan.dtypes import dtype_name

BACKENDS = {"naive": "cuda-naive", "tiled_nopad": "cuda-tiled-nopad", "tiled": "cuda-tiled", "triton": "triton"}
TOLERANCE = 0.10

NCU_METRICS = {
    "ld_requests": "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "ld_sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "st_requests": "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "st_sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "smem_ld_wavefronts": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "smem_ld_requests": "smsp__inst_executed_op_shared_ld.sum",
    "dram_read": "dram__bytes_read.sum",
    "dram_write": "dram__bytes_write.sum",
}
_NVTX_RANGE = "tileflip_measure"


def _make_input(torch, M: int, N: int, dtype):
    if dtype.is_floating_point:
        return torch.randn(M, N, device="cuda", dtype=torch.float32).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, (M, N), device="cuda").bool()
    return torch.randint(-100, 100, (M, N), device="cuda").to(dtype)


def _same_bits(torch, a, b) -> bool:
    """Bit-for-bit equality (a copy is exact; also defined for dtypes torch.equal lacks, like fp8)."""
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return torch.equal(a.contiguous().view(as_int), b.contiguous().view(as_int))


def _run(kernel: str, x, out):
    from tileflip.ops.transpose import transpose

    return transpose(x, out=out, backend=BACKENDS[kernel])


def triton_config(element_size: int):
    """(block, num_warps, group_m, layouts) of the Triton transpose as last launched; None if unknown.

    The launch path keeps every compiled class (``triton_transpose.compiled_kernels()``) keyed by
    ("transpose", TileConfig, element size, ...); the compiled kernel carries its TTGIR and cubin, from
    which the real layouts and registers are read.
    """
    try:
        from tileflip.kernels.triton import transpose as triton_transpose
        from tileflip.kernels.triton.layout import layouts_of_compiled, resource_usage

        entries = [(key, k) for key, k in triton_transpose.compiled_kernels().items() if key[2] == element_size]
        if not entries:
            return None
        key, compiled = entries[-1]
        config = key[1]
        layouts = layouts_of_compiled(compiled)
        layouts.update(resource_usage(compiled))
        return (config.block_m, config.block_n), config.num_warps, config.group_m, layouts
    except Exception as exc:  # noqa: BLE001 - a missing cache only costs the prediction its real layouts
        print(f"note: could not read the Triton kernel's configuration ({exc!r}); using the analyzer's defaults")
        return None


def ncu_child(argv: list[str]) -> None:
    """The process ncu profiles: ``KERNEL M N DTYPE``, run once inside an NVTX range (compile and warm-up
    stay outside)."""
    import torch

    kernel, M, N, dtype = argv[0], int(argv[1]), int(argv[2]), getattr(torch, argv[3])
    x = _make_input(torch, M, N, dtype)
    out = torch.empty((N, M), device="cuda", dtype=dtype)
    _run(kernel, x, out)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(_NVTX_RANGE)
    _run(kernel, x, out)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()


def _ncu_metrics(kernel: str, M: int, N: int, dtype_name: str, timeout: int = 300) -> dict:
    """Sum of each metric over the kernels ncu saw in the NVTX range; {"error": ...} when it fails."""
    cmd = [
        shutil.which("ncu"), "--csv", "--print-units", "base", "--nvtx", "--nvtx-include", f"{_NVTX_RANGE}/",
        "--metrics", ",".join(NCU_METRICS.values()),
        sys.executable, "-c", "import sys; from tileflip.bench.measure import ncu_child; ncu_child(sys.argv[1:])",
        kernel, str(M), str(N), dtype_name,
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": repr(exc)}
    sums = parse_ncu_csv(proc.stdout)
    if proc.returncode != 0 or sums is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"error": f"ncu exit {proc.returncode}: {' | '.join(tail)}"}
    return sums


def parse_ncu_csv(text: str) -> dict | None:
    """Sum each metric of ``NCU_METRICS`` over the rows of ``ncu --csv`` output; None without a table."""
    start = text.find('"ID"')
    if start < 0:
        return None
    sums = dict.fromkeys(NCU_METRICS, 0.0)
    names = {v: k for k, v in NCU_METRICS.items()}
    for row in csv.DictReader(io.StringIO(text[start:])):
        key = names.get(row.get("Metric Name", ""))
        if key:
            try:
                sums[key] += float(row["Metric Value"].replace(",", ""))
            except ValueError:
                pass
    return sums


def _predicted_counters(report) -> dict:
    names = {a.name: a for a in report.accesses}

    def per_request(name, attr):
        a = names.get(name)
        return getattr(a, attr) / a.requests if a is not None and a.requests else None

    return {
        "ld_sectors_per_request": per_request("global_load", "sectors"),
        "st_sectors_per_request": per_request("global_store", "sectors"),
        "smem_ld_wavefronts_per_request": per_request("smem_load", "wavefronts"),
        "dram_read": report.dram_read_bytes,
        "dram_write": report.dram_write_bytes,
    }


def _measured_counters(m: dict) -> dict:
    def ratio(a, b):
        return m[a] / m[b] if m.get(b) else None

    return {
        "ld_sectors_per_request": ratio("ld_sectors", "ld_requests"),
        "st_sectors_per_request": ratio("st_sectors", "st_requests"),
        "smem_ld_wavefronts_per_request": ratio("smem_ld_wavefronts", "smem_ld_requests"),
        "dram_read": m.get("dram_read"),
        "dram_write": m.get("dram_write"),
    }


def _fmt(v) -> str:
    if v is None:
        return "-"
    return f"{v / 2**20:.1f} MiB" if v > 1e4 else f"{v:.2f}"


def measure_analyzer(shape, dtype="float32", *, kernels=KERNELS, threads=None, block=None, num_warps=None,
                     sample: int = 512, device=None, as_json: bool = False, ncu: bool = True) -> int:
    """Measure each variant's fraction of a same-run copy and print it beside the prediction; exit status.

    ``shape`` is the input (M, N), ``dtype`` any name ``plan.dtypes`` takes, ``kernels`` a tuple of
    ``KERNELS``; ``threads`` (naive's block), ``block`` and ``num_warps`` (Triton's, when its compiled
    configuration cannot be read back), ``sample`` and ``device`` go to the analyzer; ``ncu`` runs
    Nsight Compute when it is installed.
    """
    import torch
    from triton.testing import do_bench

    if not torch.cuda.is_available():
        print("tileflip analyze --measure needs a CUDA GPU", file=sys.stderr)
        return 2
    M, N = shape
    name = dtype_name(dtype)
    dtype = getattr(torch, name)
    x = _make_input(torch, M, N, dtype)
    out = torch.empty((N, M), device="cuda", dtype=dtype)
    src = x.reshape(-1)
    dst = torch.empty_like(src)

    def copy():
        dst.copy_(src)

    rows = []
    for kernel in kernels:
        def fn(kernel=kernel):
            _run(kernel, x, out)

        fn()
        torch.cuda.synchronize()
        if not _same_bits(torch, out, x.t()):
            print(f"{kernel}: WRONG RESULT, not timed", file=sys.stderr)
            rows.append({"kernel": kernel, "error": "wrong result"})
            continue
        copy_before = do_bench(copy, return_mode="median")
        ms = do_bench(fn, return_mode="median")
        copy_after = do_bench(copy, return_mode="median")
        copy_ms = (copy_before + copy_after) / 2
        # The CUDA launcher's blocks are fixed (16x16 naive, 32x8 tiled); --threads only describes naive's.
        kw = {"threads": threads} if kernel == "naive" else {}
        if kernel == "triton":
            cfg = triton_config(x.element_size())
            if cfg:
                kw = {"block": cfg[0], "num_warps": cfg[1], "group_m": cfg[2], "layouts": cfg[3]}
            elif block:
                kw = {"block": block, "num_warps": num_warps}
        report = analyze(kernel, (M, N), name, sample=sample, device=device, **kw)
        row = {
            "kernel": kernel, "backend": BACKENDS[kernel], "ms": ms, "copy_ms": copy_ms,
            "GB/s": 2 * x.numel() * x.element_size() / ms / 1e6,  # bytes read + bytes written
            "measured_fraction_of_copy": copy_ms / ms,
            "predicted_fraction_of_copy": report.predicted_fraction_of_copy,
            "bound": report.bound, "block": list(report.block), "num_warps": report.num_warps,
            "resources_s": report.resources,
        }
        row["error_points"] = 100 * (row["predicted_fraction_of_copy"] - row["measured_fraction_of_copy"])
        if ncu and shutil.which("ncu"):
            measured = _ncu_metrics(kernel, M, N, name)
            row["ncu"] = measured if "error" in measured else _measured_counters(measured)
            row["predicted_counters"] = _predicted_counters(report)
        rows.append(row)

    ok = all("error" not in r and abs(r["error_points"]) <= 100 * TOLERANCE for r in rows)
    if as_json:
        print(json.dumps({"shape": [M, N], "dtype": name, "device": torch.cuda.get_device_name(),
                          "tolerance_points": 100 * TOLERANCE, "within_tolerance": ok, "rows": rows}, indent=2))
        return 0 if ok else 1
    print(f"{M}x{N} {name} on {torch.cuda.get_device_name()}  (do_bench medians, L2 flushed)")
    print(f"{'kernel':<13}{'ms':>9}{'copy ms':>9}{'GB/s':>8}{'measured':>10}{'predicted':>10}{'diff':>8}  bound")
    for r in rows:
        if "error" in r:
            print(f"{r['kernel']:<13}  {r['error']}")
            continue
        print(f"{r['kernel']:<13}{r['ms']:>9.3f}{r['copy_ms']:>9.3f}{r['GB/s']:>8.0f}"
              f"{r['measured_fraction_of_copy']:>10.1%}{r['predicted_fraction_of_copy']:>10.1%}"
              f"{r['error_points']:>+7.1f}p  {r['bound']}")
    for r in rows:
        if "ncu" not in r:
            continue
        if "error" in r["ncu"]:
            print(f"ncu {r['kernel']}: {r['ncu']['error']}")
            continue
        pairs = ", ".join(f"{k} {_fmt(r['ncu'][k])} (pred {_fmt(r['predicted_counters'][k])})" for k in r["ncu"])
        print(f"ncu {r['kernel']}: {pairs}")
    print(f"all within {100 * TOLERANCE:.0f} points: {'yes' if ok else 'NO'}")
    return 0 if ok else 1
