"""The host suite: host time per call of small transposes, tileflip beside torch, where tileflip's time
goes (checks, allocation, launch), and the compilations and first-call times of new shapes of a class.

Host time per call: many calls queued back to back and one synchronize (the GPU is never the limit for
these small cases, so this is what a caller waits for).
"""

from __future__ import annotations

import statistics

from tileflip.bench import records as rec
from tileflip.bench.cases import HOST_SHAPES

CALLS = 2000  # calls per timed batch
NEW_SHAPES = 20


def host_us(fn, calls: int) -> float:
    """Microseconds of host time per call of ``fn``, over ``calls`` calls queued back to back."""
    import time

    import torch

    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def measure_host(rounds: int, log=print) -> list[dict]:
    """Host time per call of small transposes, tileflip beside torch, and where tileflip's time goes."""
    import torch

    import tileflip
    from tileflip import tuning
    from tileflip.kernels.cuda import transpose as cuda_transpose
    from tileflip.kernels.triton import transpose as triton_transpose
    from tileflip.ops.backends import resolve_backend
    from tileflip.ops.checks import check_input, check_out

    meta = rec.meta()
    records = []
    for shape in HOST_SHAPES:
        x = rec.make_input(shape, "float32")
        out = torch.empty(shape[::-1], device="cuda")
        config = tuning.triton_config(4, shape)
        N, M = shape[::-1]

        def checks():
            check_input(x)
            resolve_backend(x, "auto")
            check_out(x, out, (N, M))

        fns = {
            "torch-copy: out.copy_(x.t())": lambda: out.copy_(x.t()),
            "torch-contiguous: x.t().contiguous()": lambda: x.t().contiguous(),
            "tileflip: transpose(x, out=out)": lambda: tileflip.transpose(x, out),
            "tileflip: transpose(x)": lambda: tileflip.transpose(x),
            "tileflip triton: transpose(x, out=out)": lambda: tileflip.transpose(x, out, backend="triton"),
            "tileflip triton-gather: transpose(x, out=out)": lambda: tileflip.transpose(x, out,
                                                                                    backend="triton-gather"),
            "tileflip cuda-tiled: transpose(x, out=out)": lambda: tileflip.transpose(x, out, backend="cuda-tiled"),
            "part: argument checks": checks,
            "part: allocation x.new_empty(N, M)": lambda: x.new_empty(N, M),  # what transpose(x) allocates
            "part: triton launch (fast path)": lambda: triton_transpose.launch(x, out, config),
            "part: cuda launch (cuLaunchKernel)": lambda: cuda_transpose.launch(x, out, "tiled"),
            "reference: empty Python call": lambda: None,
        }  # fmt: skip
        for r in range(rounds):
            for name, fn in fns.items():
                us = host_us(fn, CALLS)
                records.append(dict(meta, op="host", backend=name, shape=list(shape), dtype="float32", us=us,
                                    run=meta["time"], round=r))  # fmt: skip
        log(f"host {shape}: " + ", ".join(
            f"{k.split(':')[0]} "
            f"{statistics.median(v['us'] for v in records if v['backend'] == k and v['shape'] == list(shape)):.1f}us"
            for k in fns))  # fmt: skip
    records += measure_new_shapes(meta)
    return records


def measure_new_shapes(meta) -> list[dict]:
    """``NEW_SHAPES`` new shapes of one known class: compilations counted, host time of each first call."""
    import gc
    import time

    import torch
    import triton

    import tileflip

    compiles = []
    old = triton.knobs.runtime.jit_post_compile_hook
    tileflip.transpose(torch.ones(64, 96, device="cuda"), backend="triton")
    triton.knobs.runtime.jit_post_compile_hook = lambda *a, **k: compiles.append(1)
    firsts = []
    # The cyclic garbage collector is off while the calls are timed (as timeit does): a full collection
    # lands on whichever call triggers it and costs the whole heap (an isolated 1.3-1.4 ms first call).
    gc.collect()
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        for k in range(NEW_SHAPES):
            x = torch.ones(16 * (k + 5), 16 * (3 * k + 7), device="cuda")
            out = torch.empty(x.shape[::-1], device="cuda")
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            tileflip.transpose(x, out, backend="triton")
            firsts.append((time.perf_counter() - t0) * 1e6)
    finally:
        triton.knobs.runtime.jit_post_compile_hook = old
        if gc_was_on:
            gc.enable()
    return [dict(meta, op="new-shapes", backend="triton", shape=None, dtype="float32", compiles=len(compiles),
                 first_call_us=firsts, run=meta["time"])]  # fmt: skip


def host_table(records: list[dict]) -> str:
    rows = {}
    for r in records:
        if r["op"] == "host":
            rows.setdefault((tuple(r["shape"]), r["backend"]), []).append(r["us"])
    lines = [f"{'shape':>10}  {'us per call (median of rounds)':>10}  call"]
    for (shape, name), us in rows.items():
        lines.append(f"{'x'.join(map(str, shape)):>10}  {statistics.median(us):>10.2f}  {name}")
    for r in records:
        if r["op"] == "new-shapes":
            lines.append(f"{len(r['first_call_us'])} new shapes of a known class: {r['compiles']} compilations, "
                         f"first-call host time max {max(r['first_call_us']):.0f} us, "
                         f"median {statistics.median(r['first_call_us']):.0f} us")  # fmt: skip
    return "\n".join(lines)


def run(rounds: int, out_dir, command: str, log=print) -> list[str]:
    """Measure the host suite, print its table and write its results file; returns the path written."""
    records = measure_host(rounds, log)
    print(host_table(records))
    return [str(rec.write_results(records, "host", out_dir, command))]
