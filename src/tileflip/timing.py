"""Device time of one call, by CUDA events, with L2 flushed and the host's launch latency kept out.

``triton.testing.do_bench`` records the start event, then lets the host launch the call. When the GPU
has already drained its queue (the L2 flush takes ~60 us; a Python launch path can take 10-30 us), the
start event fires at once and the figure includes the host's time to launch: small cases then rank
backends by their Python overhead, and do it unevenly (the same call measured 4 us in one round and
30 us in the next on an H200). Here every repetition queues, in order: the L2 flush (a 256 MiB
``zero_``), a spin kernel of ``SPIN_CYCLES`` clock cycles (~100 us), the start event, the call, the end
event. The spin keeps the GPU busy while the host enqueues the call, so the events bracket device work
only. Host time is measured apart (``tileflip bench --suite host``).
"""

from __future__ import annotations

import statistics

FLUSH_BYTES = 256 << 20
SPIN_CYCLES = 200_000  # ~100 us at H200 clocks, longer than any launch path measured here

_flush = {}


def _flush_buffer(device):
    import torch

    buf = _flush.get(device)
    if buf is None:
        buf = _flush[device] = torch.empty(FLUSH_BYTES, dtype=torch.int8, device=device)
    return buf


def device_times(fn, *, warmup: int = 10, reps: int = 40, device="cuda") -> list[float]:
    """Milliseconds of device time of ``fn()`` for each of ``reps`` repetitions (after ``warmup`` calls)."""
    import torch

    flush = _flush_buffer(torch.device(device))
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize(device)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for start, end in zip(starts, ends):
        flush.zero_()
        torch.cuda._sleep(SPIN_CYCLES)
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize(device)
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def summarize(times: list[float]) -> tuple[float, float, float]:
    """Median, 20th and 80th percentile."""
    q = statistics.quantiles(times, n=5) if len(times) > 1 else [times[0]] * 4
    return statistics.median(times), q[0], q[3]
