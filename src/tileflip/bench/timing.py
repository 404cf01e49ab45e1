"""Device time of one call, by CUDA events, with L2 flushed and the host's launch latency kept out.

``triton.testing.do_bench`` records the start event, then lets the host launch the call. When the GPU
has already drained its queue (the L2 flush takes ~90 us; a Python launch path can take 10-30 us), the
start event fires at once and the figure includes the host's time to launch: small cases then rank
backends by their Python overhead, and do it unevenly (the same call measured 4 us in one round and
30 us in the next on an H200). Here every repetition queues, in order: the L2 flush, a spin kernel of
``SPIN_CYCLES`` clock cycles (~100 us), the start event, the call, the end event. The spin keeps the GPU
busy while the host enqueues the call, so the events bracket device work only; it lasts at least four
times the host's measured time to enqueue the call (``spin_cycles``). Host time is measured apart
(``tileflip bench --suite host``).

The flush (``FLUSH_MODE``): ``"l2"``, the default, is ``kernels.triton_flush``: a 256 MiB read at
``evict_last`` priority, then a discard of its lines, leaving the L2 clean and empty (87 us on an H200).
``"zero"`` is a 256 MiB ``zero_`` (83 us; what ``do_bench`` does). It leaves the L2 full of dirty lines,
which the timed call then writes back: on an H200 (``benchmarks/flush_check.py``, session 11 runs 1 and
7) a 256 MiB copy took 129.4-129.7 us after it and 126.3-126.6 us after ``"l2"``, and a 256 MiB read 71.3-71.6
against 63.5-63.6 us. It may also leave lines loaded at ``evict_last`` (the same copy took 128.0-128.3 us when x
had been read that way before the flush). After ``"l2"`` the copy and the read took the same time whatever
had read x before the flush.
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
