"""Experiment: what a local kernel running beside NCCL's all-to-all costs the collective, on 2 GPUs.

Run: ``python -m torch.distributed.run --standalone --nproc-per-node 2 benchmarks/dist_overlap.py OUT.json LABEL``
(LABEL names the NCCL environment of the run, which the caller sets). Each rank holds the 1 GiB fp32
16384 x 16384 block of ``tileflip.distributed.transpose``'s benchmark case; the collective is the one
that call runs with ``chunks=1`` (the 512 MiB that changes rank). Timed, each the median over ``REPS``
of the slower rank, the ranks aligned by a barrier before every repetition:

* ``alone``: the collective; the collective of each chunk of a 2- and 4-chunk plan, one after the other;
  a grid-limited copy of 512 MiB (``G`` programs looping over 32 KiB blocks; ``G=0``: one program per
  block) and the call's own passes (pack, own block, unpack);
* ``pair``: the collective on a high-priority stream and one of those local passes on another stream,
  both released by one event that a ~2 ms sleep on the caller's stream delays until the host has queued
  everything (so no host time is in the figures); the time each stream took from that event, in both
  launch orders;
* ``call``: ``tileflip.distributed.transpose`` and ``seq_to_head`` end to end, back to back, for each
  ``chunks`` and each ``BESIDE_SM_FRACTION`` (0: the moves beside a collective on a full grid), beside
  the bare collective of the whole tensor (the own block included), as the benchmark times them.

The question it answers: whether a pass that runs under the collective slows it by about its own
duration (the memory system shared), and whether a pass with fewer programs does not.
"""

from __future__ import annotations

import json
import os
import statistics
import sys

import torch
import torch.distributed as dist
import triton
import triton.language as tl

from tileflip import distributed

REPS = 9


@triton.jit
def grid_copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    step = tl.num_programs(0) * BLOCK
    for start in range(pid * BLOCK, n, step):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)


def main() -> None:
    out_path, label = sys.argv[1], sys.argv[2]
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    P, me = dist.get_world_size(), dist.get_rank()
    dev = torch.device("cuda", local_rank)
    local = torch.randint(-(2**31), 2**31 - 1, (16384, 16384), dtype=torch.int32, device=dev).view(torch.float32)
    rows = [16384] * P
    plans = {k: distributed.transpose_plan(P, me, local, rows, 16384, k, "auto") for k in (1, 2, 4)}
    plan = plans[1]

    def coll(p, i):
        send, recv, ins, outs = p.bufs.carriers(p.steps[i])
        return lambda: dist.all_to_all_single(recv, send, outs, ins)

    colls = {k: [coll(p, i) for i in range(len(p.steps))] for k, p in plans.items()}
    n = (512 << 20) // 8
    src = torch.randint(0, 1 << 62, (n,), dtype=torch.int64, device=dev)
    dst = torch.empty_like(src)

    def grid_copy(G):
        grid = (triton.cdiv(n, 4096) if G == 0 else G,)
        return lambda: grid_copy_kernel[grid](src, dst, n, BLOCK=4096, num_warps=8)

    step = plan.steps[0]
    local_jobs = {f"copy-G{G}": grid_copy(G) for G in (0, 132, 66, 33, 16)}
    beside_programs, looped = distributed.beside_programs, {}
    for G in (66, 33, 16):  # the own block's move on G programs
        distributed.beside_programs = lambda device, G=G: G
        looped[G] = distributed.transpose_plan(P, me, local, rows, 16384, 1, "auto")
    distributed.beside_programs = beside_programs
    local_jobs |= {"pack": step.pack, "own": plan.own, "unpack": step.unpack}
    local_jobs |= {f"own-G{G}": p.own for G, p in looped.items()}
    main_s = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    comm = torch.cuda.Stream(priority=-1)
    records = []

    def slowest(values):
        got = [None] * P
        dist.all_gather_object(got, values)
        return [max(col) for col in zip(*got)]

    def alone(name, fns):
        for f in fns:
            f()
        times = []
        for _ in range(REPS):
            torch.cuda.synchronize()
            dist.barrier()
            evs = [torch.cuda.Event(enable_timing=True) for _ in range(len(fns) + 1)]
            evs[0].record()
            for f, e in zip(fns, evs[1:]):
                f()
                e.record()
            torch.cuda.synchronize()
            times.append([evs[0].elapsed_time(e) for e in evs[1:]])
        med = slowest([statistics.median(c) for c in zip(*times)])
        records.append({"label": label, "kind": "alone", "name": name, "ms": med})
        if me == 0:
            print(f"{label} alone {name}: {' '.join(f'{m:.3f}' for m in med)} ms", flush=True)

    def pair(name, job, job_first):
        times = []
        for _ in range(REPS + 1):
            torch.cuda.synchronize()
            dist.barrier()
            e0, ec, ej = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            torch.cuda._sleep(4_000_000)
            e0.record(main_s)
            comm.wait_event(e0)
            side.wait_event(e0)
            order = [(side, job, ej), (comm, colls[1][0], ec)]
            for stream, fn, ev in order if job_first else order[::-1]:
                with torch.cuda.stream(stream):
                    fn()
                    ev.record(stream)
            main_s.wait_event(ec)
            main_s.wait_event(ej)
            torch.cuda.synchronize()
            times.append((e0.elapsed_time(ec), e0.elapsed_time(ej)))
        c, j = slowest([statistics.median(t[0] for t in times[1:]), statistics.median(t[1] for t in times[1:])])
        records.append({"label": label, "kind": "pair", "name": name, "job_first": job_first, "coll_ms": c,
                        "job_ms": j, "total_ms": max(c, j)})  # fmt: skip
        if me == 0:
            print(f"{label} pair {name} ({'job' if job_first else 'collective'} first): collective {c:.3f} ms, "
                  f"job {j:.3f} ms", flush=True)  # fmt: skip

    def steady(name, fn, reps=REPS):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        dist.barrier()
        evs = [torch.cuda.Event(enable_timing=True) for _ in range(reps + 1)]
        evs[0].record()
        for e in evs[1:]:
            fn()
            e.record()
        torch.cuda.synchronize()
        ms = slowest([statistics.median(a.elapsed_time(b) for a, b in zip(evs, evs[1:]))])[0]
        records.append({"label": label, "kind": "call", "name": name, "ms": ms})
        if me == 0:
            print(f"{label} call {name}: {ms:.3f} ms", flush=True)
        return ms

    sections = sys.argv[3:] or ["pairs", "calls"]
    x = torch.randint(-(2**15), 2**15 - 1, (8, 16384, 32, 128), dtype=torch.int16, device=dev).view(torch.bfloat16)
    if "pairs" in sections:
        for k, fns in colls.items():
            alone(f"collective chunks={k}", fns)
        for name, job in local_jobs.items():
            alone(name, [job])
        for name, job in local_jobs.items():
            for first in (True, False):
                pair(name, job, first)
    whole = [torch.empty(1 << 30, dtype=torch.uint8, device=dev) for _ in range(2)]
    send, recv, ins, outs = distributed.carriers(*whole, 4, plan.full_in_splits, plan.full_out_splits)
    bare = steady("bare all_to_all_single (whole tensor)", lambda: dist.all_to_all_single(recv, send, outs, ins))
    if "sizes" in sections:
        # The collective alone, back to back, for messages of S MiB to the peer (nothing to itself).
        for mib in (32, 64, 128, 256, 384, 512, 768, 1024):
            count = (mib << 20) // 8
            splits = [0 if j == me else count for j in range(P)]
            s_buf, r_buf = whole[0].view(torch.int64)[:count], whole[1].view(torch.int64)[:count]
            steady(f"collective {mib} MiB", lambda s_buf=s_buf, r_buf=r_buf, splits=splits:
                   dist.all_to_all_single(r_buf, s_buf, splits, splits))  # fmt: skip
    if "trace" in sections:
        from torch.profiler import ProfilerActivity, profile

        for k in (1, 2):
            for _ in range(3):
                distributed.transpose(local, chunks=k)
            torch.cuda.synchronize()
            dist.barrier()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(3):
                    distributed.transpose(local, chunks=k)
                torch.cuda.synchronize()
            if me == 0:
                name = f"dist-trace-{label.replace('=', '-')}-chunks{k}.json"
                prof.export_chrome_trace(os.path.join(os.path.dirname(out_path), name))
    if "host" in sections:
        # Host time of each piece of a call (perf_counter; the device has queued work, so no launch waits).
        import time

        ctx = distributed._context(None, "transpose")
        row = [1, 0, 3, 0, 16384, 16384, 0, 0, 0]

        def host(name, fn, reps=40):
            torch.cuda._sleep(200_000_000)  # ~100 ms of queued device work: launches never wait
            dist.barrier(group=ctx.meta)
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            us = (time.perf_counter() - t0) / reps * 1e6
            records.append({"label": label, "kind": "host", "name": name, "us": us})
            if me == 0:
                print(f"{label} host {name}: {us:.1f} us", flush=True)
            torch.cuda.synchronize()

        host("sizes exchange (gloo all_reduce)", lambda: distributed._exchange(ctx, row))
        host("all_to_all_single (512 MiB)", colls[1][0], reps=10)
        seg_args = plan.steps[0]
        host("unpack launch (segments kernel)", seg_args.unpack, reps=10)
        host("pack launch (tileflip.transpose)", seg_args.pack, reps=10)
        host("own launch (looped transpose)", plan.own, reps=10)
        host("transpose_plan", lambda: distributed.transpose_plan(P, me, local, rows, 16384, 1, "auto"), reps=10)
        host("whole call chunks=1", lambda: distributed.transpose(local, chunks=1), reps=10)
        host("whole call chunks=2", lambda: distributed.transpose(local, chunks=2), reps=10)
    if "exchange" in sections:
        # Host time of a sizes exchange over the gloo side group, in the forms it could take.
        import time

        ctx = distributed._context(None, "transpose")
        row = [1, 0, 3, 0, 16384, 16384, 0, 0, 0]
        table = torch.zeros(P, 9, dtype=torch.int64)
        parts = [torch.zeros(9, dtype=torch.int64) for _ in range(P)]
        mine = torch.tensor(row, dtype=torch.int64)
        forms = {
            "_exchange (all_reduce of a new table)": lambda: distributed._exchange(ctx, row),
            "all_reduce of a kept table": lambda: dist.all_reduce(table, group=ctx.meta),
            "all_gather into kept tensors": lambda: dist.all_gather(parts, mine, group=ctx.meta),
            "barrier": lambda: dist.barrier(group=ctx.meta),
        }
        for name, fn in forms.items():
            for _ in range(5):
                fn()
            t0 = time.perf_counter()
            for _ in range(50):
                fn()
            us = (time.perf_counter() - t0) / 50 * 1e6
            records.append({"label": label, "kind": "exchange", "name": name, "us": us})
            if me == 0:
                print(f"{label} exchange {name}: {us:.1f} us", flush=True)
        for name, fn in (("transpose auto", lambda: distributed.transpose(local)),
                         ("transpose chunks=1", lambda: distributed.transpose(local, chunks=1)),
                         ("seq_to_head auto", lambda: distributed.seq_to_head(x))):  # fmt: skip
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(20):
                fn()
            us = (time.perf_counter() - t0) / 20 * 1e6
            torch.cuda.synchronize()
            records.append({"label": label, "kind": "host-call", "name": name, "us": us})
            if me == 0:
                print(f"{label} host per call {name}: {us:.1f} us", flush=True)
    if "cprofile" in sections:
        # Where a call's host time goes: cProfile over back-to-back calls (rank 0 prints).
        import cProfile
        import pstats

        for name, fn in (("transpose auto", lambda: distributed.transpose(local)),
                         ("seq_to_head auto", lambda: distributed.seq_to_head(x))):  # fmt: skip
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(20):
                fn()
            prof.disable()
            torch.cuda.synchronize()
            if me == 0:
                print(f"=== cProfile {name}, 20 calls", flush=True)
                pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(25)
                pstats.Stats(prof, stream=sys.stdout).sort_stats("cumulative").print_stats(30)
    if "weights" in sections:
        # chunks="auto" cut by the given weights (tileflip.distributed.chunk_sizes), the moves beside a
        # collective on the given fraction of the SMs; also at 256 MiB per rank (8192 x 8192 fp32).
        small = local[:8192, :8192].contiguous()
        plan_small = distributed.transpose_plan(P, me, small, [8192] * P, 8192, 1, "auto")
        s_send, s_recv, s_ins, s_outs = distributed.carriers(*whole, 4, plan_small.full_in_splits,
                                                             plan_small.full_out_splits)  # fmt: skip
        bare_small = steady("bare all_to_all_single (8192 x 8192 fp32)",
                            lambda: dist.all_to_all_single(s_recv, s_send, s_outs, s_ins))  # fmt: skip
        auto = distributed.auto_chunks
        for fraction in (0.25, 0.5, 0.75):
            distributed.BESIDE_SM_FRACTION = fraction
            for w in [(1,), (3, 1), (2, 1), (5, 1), (3, 2), (4, 2, 1)]:
                distributed.auto_chunks = lambda b, w=w: w
                for name, fn, base in (("transpose", lambda: distributed.transpose(local), bare),
                                       ("seq_to_head", lambda: distributed.seq_to_head(x), bare),
                                       ("transpose 8192^2", lambda: distributed.transpose(small), bare_small)):
                    ms = steady(f"{name} fraction={fraction} weights={w}", fn)
                    records[-1]["vs_bare"] = ms / base
                    if me == 0:
                        print(f"    {ms / base:.3f}x bare", flush=True)
        distributed.auto_chunks = auto
    for fraction in (0, 0.125, 0.25, 0.5) if "calls" in sections else ():
        distributed.BESIDE_SM_FRACTION = fraction
        for k in (1, 2, 3, 4):
            ms = steady(f"transpose fraction={fraction} chunks={k}", lambda k=k: distributed.transpose(local, chunks=k))
            records[-1]["vs_bare"] = ms / bare
            ms = steady(f"seq_to_head fraction={fraction} chunks={k}", lambda k=k: distributed.seq_to_head(x, chunks=k))
            records[-1]["vs_bare"] = ms / bare
    if me == 0:
        path = out_path
        old = json.load(open(path)) if os.path.exists(path) else []
        json.dump(old + records, open(path, "w"), indent=1)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
