"""Does an L2 flush clear what a kernel loaded at ``evict_last``? (GPU; ``python benchmarks/flush_check.py OUT.json``)

Each repetition queues: a primer that reads ``x`` (none; a read at ``evict_last``; a plain read, which is
``out.copy_(x)``), the flush (``timing.FLUSH_MODES``), the spin, then the timed op reading ``x``. A flush
that works gives the same time whatever the primer did; one that leaves ``evict_last`` lines in the L2
lets the op after an ``evict_last`` primer read part of ``x`` from the L2 and measure faster. Sizes: one
that fits the L2 (16 MiB) and one five times its size (256 MiB, the bench's large cases). Also timed:
each flush alone. Rounds interleave every setting; figures are medians over rounds of per-round medians.
"""

from __future__ import annotations

import json
import statistics
import sys

import torch

from tileflip import timing
from tileflip.kernels.triton_flush import LOAD_BLOCK, load_evict_last_kernel

SIZES = (16 << 20, 256 << 20)
ROUNDS = 3
REPS = 30


def evict_last_read(x64, sink):
    n = x64.numel()
    return lambda: load_evict_last_kernel[(n // LOAD_BLOCK,)](x64, sink, n, BLOCK=LOAD_BLOCK)


def timed(op, primer, flush, reps=REPS) -> float:
    """Median device time of ``op`` with ``primer`` run before each flush (``timing.device_times``)."""
    times = timing.device_times(op, warmup=3, reps=reps, spin=timing.SPIN_CYCLES, flush=flush, before=primer)
    return statistics.median(times)


def measure(size: int, sink) -> list[dict]:
    """Every (flush, op, primer) on an input of ``size`` bytes, rounds interleaved."""
    x = torch.randint(-(2**62), 2**62, (size // 8,), dtype=torch.int64, device="cuda")
    out = torch.empty_like(x)
    ops = {"copy": lambda: out.copy_(x), "evict_last-read": evict_last_read(x, sink)}
    primers = {"none": None, "evict_last-read": evict_last_read(x, sink), "plain-read": lambda: out.copy_(x)}
    figures = {}
    for _ in range(ROUNDS):
        for mode in timing.FLUSH_MODES:
            flush = timing.flush_fn("cuda", mode)
            figures.setdefault((mode, "flush-alone", "none"), []).append(timed(flush, None, lambda: None))
            for op_name, op in ops.items():
                for primer_name, primer in primers.items():
                    figures.setdefault((mode, op_name, primer_name), []).append(timed(op, primer, mode))
    assert torch.equal(out, x)
    records = []
    for (mode, op_name, primer_name), ms in figures.items():
        med = statistics.median(ms)
        moved = size if op_name == "evict_last-read" else 2 * size
        gbps = (timing.FLUSH_BYTES if op_name == "flush-alone" else moved) / med / 1e6
        records.append({"bytes": size, "flush": mode, "op": op_name, "primer": primer_name, "ms": med,
                        "rounds_ms": ms, "gbps": gbps})  # fmt: skip
        print(f"{size >> 20:4d} MiB flush={mode:5s} {op_name:16s} after {primer_name:16s} "
              f"{med * 1000:8.1f} us {gbps:7.0f} GB/s  rounds {[round(m * 1000, 1) for m in ms]}", flush=True)
    return records


def main(path: str) -> None:
    sink = torch.empty(1 << 16, dtype=torch.int64, device="cuda")
    records = [r for size in SIZES for r in measure(size, sink)]
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "reps": REPS, "rounds": ROUNDS}
    with open(path, "w") as f:
        json.dump({"meta": meta, "records": records}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
