"""Device time of one call, by CUDA events, with L2 flushed and the host's launch latency kept out.

Every repetition queues, in order: the L2 flush, a spin kernel of at least ``SPIN_CYCLES`` clock cycles
(~100 us, and at least four times the host's measured time to enqueue the call: ``spin_cycles``), the
start event, the call, the end event. The spin keeps the GPU busy while the host enqueues the call, so
the events bracket device work only. The flush (``FLUSH_MODE``): ``"l2"``, the default, reads a 256 MiB
buffer at ``evict_last`` priority and discards its lines (``tileflip.kernels.triton.flush``), leaving
the L2 clean and empty; ``"zero"`` is a 256 MiB ``zero_``, as ``triton.testing.do_bench`` does. Why
both, with their figures: docs/design.md (the benchmark). Host time is measured apart (the host suite).
"""

from __future__ import annotations

import statistics
import time

FLUSH_BYTES = 256 << 20
FLUSH_MODES = ("l2", "zero")
FLUSH_MODE = "l2"
SPIN_CYCLES = 200_000  # ~100 us at H200 clocks: the least spin
SPIN_CLOCK_HZ = 2.0e9  # cycles per second of the spin kernel (an H200's SM clock, rounded up)

_flush = {}


def flush_fn(device, mode: str | None = None):
    """A callable that queues an L2 flush of ``device`` (``mode``: one of FLUSH_MODES; default FLUSH_MODE)."""
    import torch

    mode = FLUSH_MODE if mode is None else mode
    if mode not in FLUSH_MODES:
        raise ValueError(f"mode: expected one of {FLUSH_MODES}, got {mode!r}")
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    fn = _flush.get((device, mode))
    if fn is None:
        if mode == "zero":
            fn = torch.empty(FLUSH_BYTES, dtype=torch.int8, device=device).zero_
        else:
            from tileflip.kernels.triton.flush import Flush

            fn = Flush(device, FLUSH_BYTES)
        _flush[(device, mode)] = fn
    return fn


def device_times(fn, *, warmup: int = 10, reps: int = 40, device="cuda", spin: int | None = None, flush=None,
                 before=None) -> list[float]:  # fmt: skip
    """Milliseconds of device time of ``fn()`` for each of ``reps`` repetitions (after ``warmup`` calls).
    ``spin``: the spin's clock cycles (default: ``spin_cycles``, from the call's own host time);
    ``flush``: one of FLUSH_MODES (default FLUSH_MODE) or a callable queued in its place; ``before``: a
    callable queued before the flush of each repetition (e.g. to put x in the L2 first)."""
    import torch

    flush = flush if callable(flush) else flush_fn(device, flush)
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize(device)
    if spin is None:
        spin = spin_cycles(fn, device)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for start, end in zip(starts, ends):
        if before is not None:
            before()
        flush()
        torch.cuda._sleep(spin)
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize(device)
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def spin_cycles(fn, device) -> int:
    """Cycles of spin that cover the host's time to enqueue ``fn`` four times over (at least SPIN_CYCLES):
    a call whose host path is slower than the spin would be timed with the host's latency in it."""
    import torch

    host = 0.0
    for _ in range(3):
        torch.cuda._sleep(SPIN_CYCLES)  # the call is queued behind work, as in the timed loop
        t0 = time.perf_counter()
        fn()
        host = max(host, time.perf_counter() - t0)
    torch.cuda.synchronize(device)
    return max(SPIN_CYCLES, int(4 * host * SPIN_CLOCK_HZ))


def summarize(times: list[float]) -> tuple[float, float, float]:
    """Median, 20th and 80th percentile."""
    q = statistics.quantiles(times, n=5) if len(times) > 1 else [times[0]] * 4
    return statistics.median(times), q[0], q[3]
