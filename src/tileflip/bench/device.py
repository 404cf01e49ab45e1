"""The analyzer's device constants, measured on this GPU: ``tileflip bench --suite device``.

Writes ``src/tileflip/data/h200.json`` (``tileflip.analyze.timemodel`` reads it): the launch overhead, the
copy bandwidth, the L2 sector rates of one-element-per-sector stores and loads, the memory latency seen
by a CTA, the CTA turnaround, the global request rate, and the SM count, L2 size, shared memory,
threads per SM and clock from the device's properties. Everything is timed as the bench times
(``tileflip.bench.timing``: L2 flushed, a spin kernel ahead of the events) and the median kept. How each
constant is measured is described in docs/design.md (the benchmark); each one's method is also written
into the file's ``provenance``. A step that fails keeps the previous value and says so there.
"""

from __future__ import annotations

import datetime
import json
import statistics
import subprocess
import sys
from pathlib import Path

import torch

from tileflip.bench import timing

try:
    import triton
    import triton.language as tl
except ImportError:  # the latency step is skipped without triton
    triton = None

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "data" / "h200.json"
MATRIX = 8192
# Persistent one-warp CTAs per SM for the latency fit, each moving LATENCY_BLOCK fp32 per iteration.
LATENCY_CTAS_PER_SM = (4, 8, 16)
LATENCY_BLOCK = 512
# CTA turnaround: 8-warp CTAs (the tiled kernels' 256 threads) each copying TURNAROUND_BLOCKS fp32.
TURNAROUND_WARPS = 8
TURNAROUND_BLOCKS = (512, 1024, 2048)
# Request-size check: bytes per CTA per iteration of the one-element-per-lane copies.
REQUEST_CHECK_BYTES = 4096
# Run efficiency: reads (or writes) in runs of RUN_BYTES each, every run alone in its 128-byte lines (runs
# RUN_GAP_MIN bytes apart at least), the other side contiguous; RUN_USEFUL_BYTES moved in all.
RUN_BYTES = (32, 64, 128, 256, 512, 1024, 2048)
RUN_GAP_MIN = 256
RUN_USEFUL_BYTES = 256 << 20
RUN_TILE_ELEMENTS = 4096
# Resident CTAs per SM by compute capability (CUDA programming guide, table of technical limits).
MAX_CTAS_PER_SM = {(7, 5): 16, (8, 6): 16, (8, 7): 16, (8, 9): 24, (12, 0): 24}

if triton is not None:

    @triton.jit
    def _copy_persistent(src, dst, n_blocks, BLOCK: tl.constexpr):
        # Each CTA stays resident and walks blocks with one block of loads in flight at a time (no
        # software pipelining), so the bytes in flight per SM are known: CTAs per SM x BLOCK x 4.
        # Many short-lived CTAs would also measure the CTA launch rate, not the memory latency.
        for b in tl.range(tl.program_id(0), n_blocks, tl.num_programs(0), num_stages=1):
            offs = b.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
            tl.store(dst + offs, tl.load(src + offs))

    @triton.jit
    def _copy_one_block(src, dst, BLOCK: tl.constexpr):
        # One block per CTA, then exit: the slot is refilled by a new CTA (what tileflip's kernels do).
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        tl.store(dst + offs, tl.load(src + offs))

    @triton.jit(do_not_specialize=["stride"])
    def _copy_scalar_persistent(src, dst, n_blocks, stride, BLOCK: tl.constexpr):
        # stride is 1 at run time but unknown to the compiler, so no access is vectorized: every warp
        # instruction moves 32 elements, 64 bytes for 2-byte types, 128 for 4-byte ones.
        for b in tl.range(tl.program_id(0), n_blocks, tl.num_programs(0), num_stages=1):
            offs = (b.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)) * stride
            tl.store(dst + offs, tl.load(src + offs))


    @triton.jit
    def _copy_runs(src, dst, RUN: tl.constexpr, STRIDE: tl.constexpr, RUNS: tl.constexpr,
                   SPREAD_WRITES: tl.constexpr):
        # RUNS runs of RUN fp32 each: read from runs STRIDE elements apart into a contiguous block, or
        # (SPREAD_WRITES) read contiguous and written to runs STRIDE apart.
        r = (tl.program_id(0).to(tl.int64) * RUNS + tl.arange(0, RUNS).to(tl.int64))[:, None]
        j = tl.arange(0, RUN)[None, :]
        if SPREAD_WRITES:
            tl.store(dst + r * STRIDE + j, tl.load(src + r * RUN + j))
        else:
            tl.store(dst + r * RUN + j, tl.load(src + r * STRIDE + j))


def max_sm_clock(props) -> tuple[float | None, str]:
    """The maximum SM clock: torch's clock_rate (kHz), else nvidia-smi; (None, why) when neither answers."""
    khz = getattr(props, "clock_rate", 0) or 0
    if 5e5 < khz < 5e6:  # builds where the attribute was dropped report 0
        return khz * 1e3, "torch.cuda.get_device_properties(0).clock_rate (maximum SM clock)"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.max.sm", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        return float(out.split()[0]) * 1e6, "nvidia-smi --query-gpu=clocks.max.sm"
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        return None, repr(exc)


class Timer:
    """Median device time of a function in seconds (``tileflip.bench.timing.device_times``: L2 flushed,
    the host's launch kept out)."""

    def __init__(self, reps: int):
        self.reps = reps

    def __call__(self, fn) -> float:
        # the "l2" flush is a Triton kernel; without triton, the zeroing flush
        flush = None if triton is not None else "zero"
        return statistics.median(timing.device_times(fn, warmup=3, reps=self.reps, flush=flush)) / 1e3


def copy_time(timer: Timer, nbytes: int) -> float:
    src = torch.ones(nbytes // 4, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    return timer(lambda: dst.copy_(src))


def write_sector_rate(timer: Timer, t0: float, copy_bw: float) -> tuple[float, dict]:
    n = MATRIX * MATRIX
    src = torch.randn(n, device="cuda")
    k = torch.arange(n, device="cuda", dtype=torch.int64)
    idx = (k % MATRIX) * MATRIX + k // MATRIX
    del k
    dst = torch.empty_like(src)
    dst.scatter_(0, idx, src)
    if not torch.equal(dst.view(MATRIX, MATRIX), src.view(MATRIX, MATRIX).t()):
        raise RuntimeError("scatter_ did not produce the transpose")
    t = timer(lambda: dst.scatter_(0, idx, src))
    dram_bound = n * (4 + 8 + 4) / copy_bw  # read src and idx, write dst
    note = {"seconds": t, "elements": n, "dram_bound_seconds": dram_bound}
    if t - t0 < 1.5 * dram_bound:
        note["warning"] = "close to the DRAM bound: the rate is only a lower bound"
    return n / (t - t0), note


def read_sector_rate(timer: Timer, t0: float, copy_bw: float) -> tuple[float, dict]:
    x = torch.randn(MATRIX, MATRIX, device="cuda")
    out = torch.empty_like(x)
    out.copy_(x.t())
    if not torch.equal(out, x.t()):
        raise RuntimeError("copy_ of the transposed view is wrong")
    t = timer(lambda: out.copy_(x.t()))
    n = x.numel()
    dram_bound = n * 8 / copy_bw
    note = {"seconds": t, "elements": n, "dram_bound_seconds": dram_bound}
    if t - t0 < 1.5 * dram_bound:
        note["warning"] = "close to the DRAM bound: torch may tile this copy; the rate is a lower bound"
    return n / (t - t0), note


TORCH_COPY_BYTES = 256 << 20
TORCH_COPY_RUN_BYTES = 4096
TORCH_COPY_DTYPES = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def torch_copy_rate(timer: Timer, t0: float, copy_bw: float) -> tuple[dict, dict]:
    """Elements a second of PyTorch's strided copy, per element size: ``out.copy_(x.permute(1, 0, 2))`` of
    TORCH_COPY_BYTES whose reads and writes are runs of TORCH_COPY_RUN_BYTES, so that only the kernel's
    per-element work bounds it (``tileflip.plan.torchcopy``)."""
    rates, notes = {}, {}
    for es, dtype in TORCH_COPY_DTYPES.items():
        run = TORCH_COPY_RUN_BYTES // es
        rows = TORCH_COPY_BYTES // (2 * TORCH_COPY_RUN_BYTES)
        x = torch.randint(-100, 100, (2, rows, run), device="cuda").to(dtype)
        out = torch.empty((rows, 2, run), dtype=dtype, device="cuda")
        out.copy_(x.permute(1, 0, 2))
        if not torch.equal(out, x.permute(1, 0, 2)):
            raise RuntimeError("copy_ of the permuted view is wrong")
        t = timer(lambda out=out, x=x: out.copy_(x.permute(1, 0, 2)))
        n = x.numel()
        rates[str(es)] = n / (t - t0)
        notes[str(es)] = {"seconds": t, "elements": n, "fraction_of_copy": 2 * n * es / copy_bw / (t - t0)}
        del x, out
    return rates, notes


def cta_latency(timer: Timer, t0: float, copy_bw: float, copy_1gib: float, sms: int, max_ctas: int):
    if triton is None:
        raise RuntimeError("triton is not installed")
    n = (1 << 30) // 4
    src = torch.ones(n, device="cuda")
    dst = torch.empty_like(src)
    share = copy_bw / 2 / sms  # DRAM read bytes per second one SM gets in a copy
    points, estimates = [], []
    for per_sm in LATENCY_CTAS_PER_SM:
        grid = (sms * per_sm,)
        blocks = n // LATENCY_BLOCK
        t = timer(lambda grid=grid: _copy_persistent[grid](src, dst, blocks, BLOCK=LATENCY_BLOCK, num_warps=1))
        frac = (copy_1gib - t0) / (t - t0)
        q = per_sm * LATENCY_BLOCK * 4
        point = {"ctas_per_sm": per_sm, "bytes_in_flight_per_sm": q, "seconds": t, "fraction_of_copy": frac}
        if 0.2 < frac < 0.97:
            point["latency_s"] = q * (1 / frac - 1) / share
            estimates.append(point["latency_s"])
        points.append(point)
    if not torch.equal(dst, src):
        raise RuntimeError("the block copy is wrong")
    if not estimates:
        raise RuntimeError(f"no informative point (fractions {[round(p['fraction_of_copy'], 3) for p in points]})")
    return statistics.median(estimates), points


def _resident_ctas(kernel, threads: int, props, max_ctas: int) -> int:
    """CTAs per SM of a compiled Triton kernel: threads, registers and shared memory limits."""
    limit = min(max_ctas, props.max_threads_per_multi_processor // threads)
    regs = getattr(kernel, "n_regs", 0) or 0
    if regs:
        limit = min(limit, getattr(props, "regs_per_multiprocessor", 65536) // (-(-regs // 8) * 8 * threads))
    shared = getattr(getattr(kernel, "metadata", None), "shared", 0) or 0
    if shared:
        smem = getattr(props, "shared_memory_per_multiprocessor", 233472)
        limit = min(limit, smem // (shared + 1024))
    return max(1, limit)


def cta_turnaround(timer: Timer, sms: int, max_ctas: int):
    """Seconds a CTA slot spends per tile on retiring one CTA and starting the next (one block
    per CTA against persistent CTAs over the same blocks: the difference per round of CTAs)."""
    if triton is None:
        raise RuntimeError("triton is not installed")
    props = torch.cuda.get_device_properties(0)
    n = (1 << 30) // 4
    src = torch.ones(n, device="cuda")
    dst = torch.empty_like(src)
    threads = TURNAROUND_WARPS * 32
    points, estimates = [], []
    for block in TURNAROUND_BLOCKS:
        blocks = n // block
        one = _copy_one_block[(blocks,)](src, dst, BLOCK=block, num_warps=TURNAROUND_WARPS)
        per_sm = _resident_ctas(one, threads, props, max_ctas)
        grid = (sms * per_sm,)
        persistent = _copy_persistent[grid](src, dst, blocks, BLOCK=block, num_warps=TURNAROUND_WARPS)
        if _resident_ctas(persistent, threads, props, max_ctas) < per_sm:
            per_sm = _resident_ctas(persistent, threads, props, max_ctas)
            grid = (sms * per_sm,)
        t_one = timer(lambda block=block, blocks=blocks: _copy_one_block[(blocks,)](
            src, dst, BLOCK=block, num_warps=TURNAROUND_WARPS))
        t_persistent = timer(lambda block=block, blocks=blocks, grid=grid: _copy_persistent[grid](
            src, dst, blocks, BLOCK=block, num_warps=TURNAROUND_WARPS))
        rounds = blocks / (sms * per_sm)
        turnaround = (t_one - t_persistent) / rounds
        points.append({"block_elements": block, "bytes_per_cta": block * 4, "ctas_per_sm": per_sm,
                       "regs": getattr(one, "n_regs", None), "rounds": rounds, "seconds_one_block": t_one,
                       "seconds_persistent": t_persistent, "turnaround_s": turnaround})
        estimates.append(turnaround)
    if not torch.equal(dst, src):
        raise RuntimeError("the block copy is wrong")
    return max(0.0, statistics.median(estimates)), points


def _run_point(timer: Timer, t0: float, run: int) -> dict:
    """Seconds of copies of RUN_USEFUL_BYTES with reads, or writes, in runs of ``run`` bytes, and of the same
    copy contiguous on both sides; the efficiencies they give."""
    useful = RUN_USEFUL_BYTES // 4
    run_el = run // 4
    stride_el = max(2 * run, RUN_GAP_MIN) // 4
    runs = useful // run_el
    tile_runs = max(1, RUN_TILE_ELEMENTS // run_el)
    grid = (runs // tile_runs,)
    contiguous = torch.arange(useful, device="cuda", dtype=torch.float32)
    spread = torch.zeros(runs * stride_el, device="cuda", dtype=torch.float32)
    spread_view = spread.view(runs, stride_el)[:, :run_el]
    spread_view.copy_(contiguous.view(runs, run_el))
    out = torch.empty_like(contiguous)
    ref = torch.empty_like(contiguous)

    def copy(a, b, stride, spread_writes):
        return lambda: _copy_runs[grid](a, b, RUN=run_el, STRIDE=stride, RUNS=tile_runs, SPREAD_WRITES=spread_writes)

    t_read = timer(copy(spread, out, stride_el, False))
    t_write = timer(copy(contiguous, spread, stride_el, True))
    t_ref = timer(copy(contiguous, ref, run_el, False))
    if not (torch.equal(out, contiguous) and torch.equal(ref, contiguous)
            and torch.equal(spread_view, contiguous.view(runs, run_el))):  # fmt: skip
        raise RuntimeError(f"the copy of {run}-byte runs is wrong")
    side = (t_ref - t0) / 2
    point = {"run_bytes": run, "stride_bytes": stride_el * 4, "seconds_read_spread": t_read,
             "seconds_write_spread": t_write, "seconds_contiguous": t_ref}  # fmt: skip
    for name, t in (("read", t_read), ("write", t_write)):
        point[f"{name}_efficiency"] = min(1.0, side / max(t - t0 - side, 1e-12))
    return point


def run_efficiency(timer: Timer, t0: float) -> tuple[dict, list]:
    """DRAM efficiency of reads and of writes in runs of each of RUN_BYTES, every run alone in its 128-byte
    lines, the other side contiguous: {"read": {bytes: e}, "write": {bytes: e}}, e the share of the spread
    side's time that moving the bytes contiguously takes. The same kernel with contiguous runs on both sides
    is the reference, so the kernel's own overhead cancels: t_ref / 2 per side, and e = (t_ref / 2) /
    (t - t_ref / 2), times net of t0."""
    if triton is None:
        raise RuntimeError("triton is not installed")
    effs, points = {"read": {}, "write": {}}, []
    for run in RUN_BYTES:
        point = _run_point(timer, t0, run)
        for name in effs:
            effs[name][str(run)] = point[f"{name}_efficiency"]
        points.append(point)
        torch.cuda.empty_cache()
    return effs, points


def request_size_check(timer: Timer, t0: float, copy_1gib: float, sms: int, max_ctas: int) -> dict:
    """Fraction of copy of one-element-per-lane copies with 2- and 4-byte elements (no constant)."""
    if triton is None:
        raise RuntimeError("triton is not installed")
    props = torch.cuda.get_device_properties(0)
    threads = TURNAROUND_WARPS * 32
    cases = {}
    for dtype in (torch.int16, torch.int32):
        src = torch.ones((1 << 30) // dtype.itemsize, dtype=dtype, device="cuda")
        dst = torch.empty_like(src)
        block = REQUEST_CHECK_BYTES // dtype.itemsize
        blocks = src.numel() // block
        kernel = _copy_scalar_persistent[(sms,)](src, dst, blocks, 1, BLOCK=block, num_warps=TURNAROUND_WARPS)
        cases[dtype] = (src, dst, block, blocks, kernel)
    # Both run with the same CTAs per SM, hence the same bytes in flight: only the request size differs.
    per_sm = min(_resident_ctas(case[-1], threads, props, max_ctas) for case in cases.values())
    grid = (sms * per_sm,)
    result = {}
    for dtype, (src, dst, block, blocks, kernel) in cases.items():
        t = timer(lambda block=block, blocks=blocks, src=src, dst=dst: _copy_scalar_persistent[grid](
            src, dst, blocks, 1, BLOCK=block, num_warps=TURNAROUND_WARPS))
        if not torch.equal(dst, src):
            raise RuntimeError("the scalar copy is wrong")
        requests = 2 * src.numel() // 32  # warp instructions, loads and stores
        result[f"{8 * dtype.itemsize}-bit"] = {
            "bytes_per_request": 32 * dtype.itemsize, "ctas_per_sm": per_sm, "regs": getattr(kernel, "n_regs", None),
            "bytes_in_flight_per_sm": per_sm * REQUEST_CHECK_BYTES, "seconds": t,
            "fraction_of_copy": (copy_1gib - t0) / (t - t0), "requests_per_s": requests / (t - t0)}
    cases.clear()
    return result


def run(out: Path = DEFAULT_OUT, *, reps: int = 30, print_json: bool = False, dry_run: bool = False) -> int:
    """Measure every constant and write them to ``out`` (``dry_run``: print only)."""
    out = Path(out)
    if not torch.cuda.is_available():
        print("tileflip bench --suite device needs a CUDA GPU", file=sys.stderr)
        return 2

    old = json.loads(out.read_text()) if out.exists() else {}
    dev = {k: v for k, v in old.items() if k not in ("provenance", "measurements", "source")}
    provenance = dict(old.get("provenance", {}))
    measurements = {}
    props = torch.cuda.get_device_properties(0)
    cc = (props.major, props.minor)

    dev["device"] = props.name
    dev["sm_count"] = props.multi_processor_count
    dev["l2_cache_bytes"] = props.L2_cache_size
    dev["max_threads_per_sm"] = props.max_threads_per_multi_processor
    dev["max_ctas_per_sm"] = MAX_CTAS_PER_SM.get(cc, 32)
    dev["smem_per_sm_bytes"] = getattr(props, "shared_memory_per_multiprocessor", dev.get("smem_per_sm_bytes", 233472))
    dev["regs_per_sm"] = getattr(props, "regs_per_multiprocessor", dev.get("regs_per_sm", 65536))
    dev.setdefault("smem_reserved_per_cta_bytes", 1024)
    for key in ("sm_count", "l2_cache_bytes", "max_threads_per_sm", "smem_per_sm_bytes", "regs_per_sm"):
        provenance[key] = "torch.cuda.get_device_properties(0)"
    clock_hz, how = max_sm_clock(props)
    if clock_hz:
        dev["sm_clock_hz"], provenance["sm_clock_hz"] = clock_hz, how
    provenance["max_ctas_per_sm"] = f"CUDA limit for compute capability {cc[0]}.{cc[1]}"

    timer = Timer(reps)
    # The model prices a launch as bytes / copy_bw + t0, so the bandwidth is taken net of t0.
    t0 = copy_time(timer, 4096)
    t_1gib = copy_time(timer, 1 << 30)
    t_256mib = copy_time(timer, 256 << 20)
    dev["launch_overhead_s"] = t0
    dev["copy_bandwidth_bytes_per_s"] = 2 * (1 << 30) / (t_1gib - t0)
    dev["copy_bandwidth_256mib_bytes_per_s"] = 2 * (256 << 20) / (t_256mib - t0)
    measurements["copy"] = {"seconds_4kib": t0, "seconds_1gib": t_1gib, "seconds_256mib": t_256mib,
                            "gbps_1gib_gross": 2 * (1 << 30) / t_1gib / 1e9}
    provenance["copy_bandwidth_bytes_per_s"] = "b.copy_(a), 1 GiB fp32: bytes read + written / (median time - t0)"
    provenance["copy_bandwidth_256mib_bytes_per_s"] = "b.copy_(a), 256 MiB fp32, net of t0 (reported, not used)"
    provenance["launch_overhead_s"] = "t0: b.copy_(a) of 4 KiB, median time"
    copy_bw = dev["copy_bandwidth_bytes_per_s"]

    steps = (
        ("l2_write_sectors_per_s", lambda: write_sector_rate(timer, t0, copy_bw),
         f"dst.scatter_(0, transposed idx, src), {MATRIX}^2 fp32: one element per sector, elements / time"),
        ("l2_read_sectors_per_s", lambda: read_sector_rate(timer, t0, copy_bw),
         f"out.copy_(x.t()), {MATRIX}^2 fp32: one element per sector read, elements / time"),
        ("torch_copy_elements_per_s", lambda: torch_copy_rate(timer, t0, copy_bw),
         f"out.copy_(x.permute(1, 0, 2)), {TORCH_COPY_BYTES >> 20} MiB of 1-, 2-, 4- and 8-byte integers in runs of "
         f"{TORCH_COPY_RUN_BYTES} bytes: elements / (time - t0)"),
        ("cta_latency_s", lambda: cta_latency(timer, t0, copy_bw, t_1gib, dev["sm_count"], dev["max_ctas_per_sm"]),
         "Triton persistent one-warp CTAs (4, 8, 16 per SM) copying 1 GiB in 512-element blocks: median of "
         "Q (1/f - 1) / (copy_bw/2/SMs)"),
        ("run_efficiency", lambda: run_efficiency(timer, t0),
         f"Triton copies of {RUN_USEFUL_BYTES >> 20} MiB fp32 in {RUN_TILE_ELEMENTS}-element tiles, one side in "
         f"runs of {RUN_BYTES} bytes (each alone in its 128-byte lines), against the same copy contiguous on both sides"
         ": (t_ref/2) / (t - t_ref/2), net of t0"),
        ("cta_turnaround_s", lambda: cta_turnaround(timer, dev["sm_count"], dev["max_ctas_per_sm"]),
         f"Triton 1 GiB fp32 copies, {TURNAROUND_WARPS}-warp CTAs, blocks of {TURNAROUND_BLOCKS} elements: median "
         "of (t one block per CTA - t persistent CTAs) / (blocks / (SMs x CTAs per SM))"),
    )
    for key, step, how in steps:
        try:
            dev[key], measurements[key] = step()
            provenance[key] = how
        except Exception as exc:  # noqa: BLE001 - keep the old value, say why
            provenance[key] = f"NOT MEASURED ({exc!r}); kept: {provenance.get(key, 'previous value')}"
            print(f"warning: {key}: {exc!r}", file=sys.stderr)
        torch.cuda.empty_cache()
    try:
        measurements["request_size_check"] = request_size_check(timer, t0, t_1gib, dev["sm_count"],
                                                                dev["max_ctas_per_sm"])
        dev["global_requests_per_s"] = measurements["request_size_check"]["16-bit"]["requests_per_s"]
        provenance["global_requests_per_s"] = (
            "Triton persistent 1 GiB copy, one 2-byte element per lane per instruction (64 B warp requests): "
            "warp load + store instructions / (time - t0)")
    except Exception as exc:  # noqa: BLE001 - a check, not a constant
        measurements["request_size_check"] = {"error": repr(exc)}
        print(f"warning: request_size_check: {exc!r}", file=sys.stderr)
    torch.cuda.empty_cache()

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    versions = f"torch {torch.__version__}" + (f", triton {triton.__version__}" if triton else "")
    result = {"device": dev.pop("device"),
              "source": f"measured by tileflip bench --suite device on {stamp} ({props.name}, {versions})"}
    result.update(dev)
    result["provenance"] = provenance
    result["measurements"] = measurements

    for key in ("copy_bandwidth_bytes_per_s", "launch_overhead_s", "l2_write_sectors_per_s",
                "l2_read_sectors_per_s", "cta_latency_s", "cta_turnaround_s", "global_requests_per_s", "sm_clock_hz",
                "l2_cache_bytes"):
        print(f"{key:<28}{result.get(key, float('nan')):.4g}")
    for es, rate in (result.get("torch_copy_elements_per_s") or {}).items():
        print(f"torch strided copy, {es}-byte elements: {rate:.4g} elements/s")
    for side, table in (result.get("run_efficiency") or {}).items():
        print(f"{side} efficiency by run bytes: " + ", ".join(f"{k}: {v:.2f}" for k, v in table.items()))
    for name, point in measurements.get("request_size_check", {}).items():
        if isinstance(point, dict):
            print(f"request size check {name}: {point['bytes_per_request']} B/request, "
                  f"{point['fraction_of_copy']:.1%} of copy, {point['requests_per_s']:.3g} requests/s")
    text = json.dumps(result, indent=2) + "\n"
    if print_json or dry_run:
        print(text)
    if not dry_run:
        out.write_text(text)
        print(f"wrote {out}")
    return 0
