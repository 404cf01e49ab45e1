"""The in-place suite: ``tileflip.transpose_in_place`` on matrices of 256 MiB to 8 GiB (square,
rectangular, prime, skinny and batched), against a device copy of the same bytes measured in the same run.

Each matrix is filled with a value derived from each element's index and checked afterwards against
that formula, chunk by chunk on the device, never against an out-of-place copy. GB/s counts each element
read once and written once, whatever the passes move. Each record also gives every pass's own time
beside the copy, the scratch the plan allocates, and the peak memory the call adds
(``torch.cuda.max_memory_allocated``). One more case fills more than half of the GPU's free memory, where
``x.t().contiguous()`` raises out-of-memory.
"""

from __future__ import annotations

import statistics
import time

from tileflip.bench import records as rec

GIB = 1 << 30
# (kind, shape (B, M, N), dtype)
CASES = (  # the kinds in turn, smaller first within each
    ("square", (1, 8192, 8192), "float32"),
    ("rectangular", (1, 8192, 16384), "float32"),
    ("prime", (1, 9973, 13001), "float32"),
    ("skinny", (1, 4, 1 << 26), "float32"),
    ("batched", (64, 1024, 2048), "float32"),
    ("square", (1, 16384, 16384), "bfloat16"),
    ("rectangular", (1, 12288, 20480), "bfloat16"),
    ("prime", (1, 16381, 32749), "bfloat16"),
    ("skinny", (1, 1 << 27, 3), "float16"),
    ("batched", (16, 4096, 4100), "bfloat16"),
    ("square", (1, 32768, 32768), "uint8"),
    ("rectangular", (1, 20000, 30000), "float16"),
    ("prime", (1, 32749, 65521), "uint8"),
    ("skinny", (1, 2, 1 << 28), "uint8"),
    ("batched", (8, 4096, 4096), "float32"),
    ("square", (1, 16384, 16384), "float64"),
    ("rectangular", (1, 6000, 11000), "float64"),
    ("skinny", (1, 64, 1 << 22), "float32"),
    ("rectangular", (1, 16384, 32768), "float32"),
    ("rectangular", (1, 40000, 60000), "uint8"),
    ("square", (1, 32768, 32768), "float32"),
    ("rectangular", (1, 30000, 70001), "float32"),
)
CHUNK = 1 << 26  # elements filled or checked at a time
MULTIPLIER = 2654435761


def fill(x) -> None:
    """x's elements (contiguous, any shape) := a value of their flat index, in x's integer view."""
    import torch

    from tileflip.kernels.dtypes import as_int

    flat = as_int(x).view(-1)
    for start in range(0, flat.numel(), CHUNK):
        idx = torch.arange(start, min(start + CHUNK, flat.numel()), device=x.device, dtype=torch.int64)
        flat[start : start + idx.numel()] = (idx * MULTIPLIER + 12345).to(flat.dtype)


def mismatches(y, batch: int, m: int, n: int) -> int:
    """Elements of y (the (B, N, M) transpose, contiguous) that differ from what ``fill`` put at their
    source index b M N + i N + j, for y[b, j, i]."""
    import torch

    from tileflip.kernels.dtypes import as_int

    flat = as_int(y).view(-1)
    bad = 0
    rows = max(1, CHUNK // m)  # rows of y (each of m elements) per chunk
    for b in range(batch):
        for j0 in range(0, n, rows):
            j1 = min(n, j0 + rows)
            j = torch.arange(j0, j1, device=y.device, dtype=torch.int64)[:, None]
            i = torch.arange(m, device=y.device, dtype=torch.int64)[None, :]
            want = ((b * m * n + i * n + j) * MULTIPLIER + 12345).to(flat.dtype)
            got = flat[b * m * n + j0 * m : b * m * n + j1 * m].view(j1 - j0, m)
            bad += int((got != want).sum())
    return bad


def _copy_ms(nbytes: int, reps: int, warmup: int) -> tuple[float, float, float]:
    import torch

    from tileflip.bench import timing

    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").fill_(7)
    dst = torch.empty_like(src)
    times = timing.device_times(lambda: dst.copy_(src), warmup=warmup, reps=reps)
    return timing.summarize(times)


def _pass_ms(x, plan) -> list[float]:
    """Each pass's device time, run one at a time (x is left transposed as the whole call leaves it)."""
    import torch

    from tileflip.kernels.triton import inplace as kernels
    from tileflip.ops.inplace import scratch_for

    scratch = scratch_for(x, plan)
    out = []
    for p in plan.passes:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        kernels.run_pass(x, p, plan.batch, scratch)
        end.record()
        torch.cuda.synchronize()
        out.append(start.elapsed_time(end))
    return out


def run_case(kind: str, shape: tuple, dtype: str, reps: int, warmup: int, log) -> dict:
    import torch

    import tileflip
    from tileflip.bench import timing
    from tileflip.ops.inplace import plan_for

    batch, m, n = shape
    es = getattr(torch, dtype).itemsize
    nbytes = batch * m * n * es
    record = {"case": f"{kind} {'x'.join(map(str, shape if batch > 1 else shape[1:]))} {dtype}", "kind": kind,
              "shape": list(shape), "dtype": dtype, "bytes": nbytes, **rec.meta()}  # fmt: skip
    copy = _copy_ms(nbytes, reps, warmup)
    torch.cuda.empty_cache()  # the copy's buffers
    record["copy_ms"] = copy[0]
    x = torch.empty((batch, m, n), dtype=getattr(torch, dtype), device="cuda")
    fill(x)
    plan_fwd, plan_back = plan_for(x), plan_for(x.view(batch, n, m))
    state = {"t": x, "flipped": False}

    def forward():
        state["t"] = tileflip.transpose_in_place(state["t"])
        state["flipped"] = not state["flipped"]

    def back():
        if state["flipped"]:
            forward()

    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    times = timing.device_times(forward, warmup=warmup, reps=reps, before=back)
    torch.cuda.synchronize()
    record["extra_memory_bytes"] = torch.cuda.max_memory_allocated() - base
    med, lo, hi = timing.summarize(times)
    back()  # now (B, M, N) again; one more call to check the transpose itself
    forward()
    torch.cuda.synchronize()
    record["mismatches"] = mismatches(state["t"], batch, m, n)
    back()
    passes = _pass_ms(state["t"], plan_fwd)
    torch.cuda.synchronize()
    record["mismatches_passes"] = mismatches(state["t"].view(batch, n, m), batch, m, n)
    record.update(ms=med, ms_p20=lo, ms_p80=hi, fraction_of_copy=copy[0] / med, gbps=2 * nbytes / med / 1e6,
                  passes=len(plan_fwd.passes), scratch_bytes=plan_fwd.scratch_bytes,
                  plan=[f"{p.name} ({p.mode})" for p in plan_fwd.passes],
                  pass_ms=passes, pass_fraction_of_copy=[copy[0] / t for t in passes],
                  back_passes=len(plan_back.passes))  # fmt: skip
    x = state["t"] = None
    torch.cuda.empty_cache()
    log(f"{record['case']}: {med:.3f} ms, {record['fraction_of_copy']:.2f} of copy ({copy[0]:.3f} ms), "
        f"{record['passes']} passes {', '.join(f'{f:.2f}' for f in record['pass_fraction_of_copy'])}, "
        f"extra {record['extra_memory_bytes'] / 2**20:.1f} MiB, mismatches {record['mismatches']}")  # fmt: skip
    return record


def fills_the_gpu(log) -> dict:
    """A float32 matrix of more than half the free memory: the out-of-place transpose raises, the in-place
    one runs, and the result is checked against the fill formula."""
    import torch

    import tileflip

    free, _ = torch.cuda.mem_get_info()
    side = int(((free * 0.55) / 4) ** 0.5)
    m, n = side, side + 1
    x = torch.empty((m, n), dtype=torch.float32, device="cuda")
    fill(x)
    try:
        x.t().contiguous()
        refused = False
    except torch.OutOfMemoryError:
        refused = True
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    y = tileflip.transpose_in_place(x)
    end.record()
    torch.cuda.synchronize()
    out = {"shape": [m, n], "dtype": "float32", "bytes": m * n * 4, "free_bytes_before": free,
           "out_of_place_raised_out_of_memory": refused, "ms": start.elapsed_time(end),
           "extra_memory_bytes": torch.cuda.max_memory_allocated() - base,
           "mismatches": mismatches(y.view(1, n, m), 1, m, n)}  # fmt: skip
    log(f"fills the GPU: {m}x{n} float32 ({m * n * 4 / 2**30:.1f} GiB of {free / 2**30:.1f} GiB free), out of "
        f"place raised OOM: {refused}, in place {out['ms']:.1f} ms, mismatches {out['mismatches']}")  # fmt: skip
    x = y = None
    torch.cuda.empty_cache()
    return out


def run(*, reps: int, warmup: int, out_dir, command: str, log, large: bool = True) -> list:
    import torch

    t0 = time.time()
    records = []

    def write(extra=None):  # after each case, so that a run cut short keeps what it measured
        summary = {}
        for kind in sorted({r["kind"] for r in records}):
            fr = [r["fraction_of_copy"] for r in records if r["kind"] == kind]
            summary[kind] = {"median_fraction_of_copy": statistics.median(fr), "min_fraction_of_copy": min(fr),
                             "cases": len(fr)}  # fmt: skip
        extra = {"summary": summary, "seconds": time.time() - t0, "gpu": torch.cuda.get_device_name(), **(extra or {})}
        return rec.write_results(records, "in-place", out_dir, command, extra=extra)

    for kind, shape, dtype in CASES:
        records.append(run_case(kind, shape, dtype, reps, warmup, log))
        write()
    return [write({"fills_the_gpu": fills_the_gpu(log)} if large else None)]
