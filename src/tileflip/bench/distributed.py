"""Benchmark of ``tileflip.distributed`` on NCCL, one process per GPU: ``tileflip bench --suite distributed``.

Without a launcher around it, the command starts ``torch.distributed.run`` with one process per GPU,
each running the same command (NVLink multicast kept off: ``NCCL_NVLS_ENABLE=0`` unless set). Per case
(>= 1 GiB per rank) and round it times the copy of a rank's bytes, the bare all-to-all of the whole
tensor, the exchange tileflip runs, tileflip's call for each ``chunks`` and its three local passes, and
the DeepSpeed-style sequence; then checks every result bit for bit and profiles tileflip's call. Rank 0
writes ``<out>/<device>x<ranks>/distributed.json`` and a Chrome trace beside it. What each figure means
is described in docs/design.md (the benchmark). ``--device cpu``: a smoke run on gloo, not a measurement.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tileflip.bench import records as rec

CHUNKS = (1, 2, 4, "auto")
# Name prefixes of tileflip's kernels: the Triton ones, and the CUDA C++ transposes ``auto`` may pick.
TILEFLIP_KERNELS = ("transpose_2d_kernel", "transpose_gather_kernel", "permute_rows_kernel", "permute_tiles_kernel",
                    "permute_general_kernel", "segments_kernel", "rows_kernel", "transpose_naive_u",
                    "transpose_tiled_u")  # fmt: skip
TORCH_COPY_OPS = ("aten::copy_", "aten::contiguous", "aten::clone", "aten::cat", "aten::_to_copy")


@dataclass
class Case:
    """One operation on one shape: inputs of every rank (to build the expected answer) and the callables."""

    op: str
    shape: tuple  # this rank's input shape
    dtype: str
    bytes: int  # bytes one rank holds
    run: dict = field(default_factory=dict)  # backend -> callable
    check: dict = field(default_factory=dict)  # label -> callable returning (got, expected)
    plan: object = None
    bare: object = None  # the collective of every block
    remote: object = None  # the collective of the blocks that change rank (what tileflip runs)
    auto: object = 0  # the chunks that "auto" picks: an int, or the weights of uneven pieces


# --------------------------------------------------------------------------------------------------
# Inputs and cases
# --------------------------------------------------------------------------------------------------


def _random(shape, dtype, seed: int, device: str):
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    es = torch.empty((), dtype=dtype).element_size()
    numel = 1
    for s in shape:
        numel *= s
    return torch.randint(0, 256, (numel * es,), dtype=torch.uint8, device=device, generator=g).view(dtype).view(shape)


def _same(a, b) -> bool:
    """Bit equality, compared as signed integers of the element size (CUDA lacks ops on uint16/32/64)."""
    import torch

    signed = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return a.shape == b.shape and bool(torch.equal(a.contiguous().view(signed), b.contiguous().view(signed)))


def transpose_case(P: int, me: int, rows: list, N: int, dtype, device: str) -> Case:
    import torch
    import torch.distributed as dist

    from tileflip.distributed import chunks, ops

    locals_ = [_random((m, N), dtype, 100 + i, device) for i, m in enumerate(rows)]
    local = locals_[me]
    n = chunks.split_sizes(N, P)
    n_at, M = sum(n[:me]), sum(rows)
    es = local.element_size()
    case = Case("transpose", tuple(local.shape), str(dtype).removeprefix("torch."), local.numel() * es)
    case.plan = ops.transpose_plan(P, me, local, rows, N, 1, "auto")
    _collectives(case, chunks.auto_chunks(max(rows) * N * es, N * es))
    expected = torch.cat([x[:, n_at : n_at + n[me]].t() for x in locals_], dim=1)

    def deepspeed():
        send = local.t().contiguous()
        recv = torch.empty(n[me] * M, dtype=dtype, device=device)
        dist.all_to_all_single(recv, send.view(-1), [n[me] * m for m in rows], [n_j * rows[me] for n_j in n])
        if len(set(rows)) == 1:
            return recv.view(P, n[me], rows[me]).permute(1, 0, 2).contiguous().view(n[me], M)
        return torch.cat([b.view(n[me], m) for b, m in zip(recv.split([n[me] * m for m in rows]), rows)], dim=1)

    for k in CHUNKS:
        case.run[f"tileflip:{k}"] = lambda k=k: ops.transpose(local, chunks=k)
        case.check[f"tileflip:{k}"] = lambda k=k: (ops.transpose(local, chunks=k), expected)
    case.run["deepspeed"] = deepspeed
    case.check["deepspeed"] = lambda: (deepspeed(), expected)
    return case


def seq_to_head_case(P: int, me: int, B: int, seq: list, H: int, D: int, dtype, device: str) -> Case:
    import torch

    from tileflip.distributed import chunks, ops

    xs = [_random((B, s, H, D), dtype, 200 + i, device) for i, s in enumerate(seq)]
    x, h = xs[me], H // P
    case = Case("seq_to_head", tuple(x.shape), str(dtype).removeprefix("torch."), x.numel() * x.element_size())
    case.plan = ops.seq_to_head_plan(P, me, x, seq, 1, "auto")
    _collectives(case, chunks.auto_chunks(max(seq) * B * H * D * x.element_size(), h * D * x.element_size()))
    expected = torch.cat([t[:, :, me * h : (me + 1) * h] for t in xs], dim=1)

    def deepspeed():
        s = x.shape[1]
        send = x.reshape(B, s, P, h, D).permute(2, 0, 1, 3, 4).contiguous()
        recv = torch.empty_like(send)
        torch.distributed.all_to_all_single(recv, send)
        return recv.permute(1, 0, 2, 3, 4).contiguous().view(B, P * s, h, D)

    for k in CHUNKS:
        case.run[f"tileflip:{k}"] = lambda k=k: ops.seq_to_head(x, chunks=k)
        case.check[f"tileflip:{k}"] = lambda k=k: (ops.seq_to_head(x, chunks=k), expected)
    case.run["deepspeed"] = deepspeed
    case.check["deepspeed"] = lambda: (deepspeed(), expected)
    return case


def head_to_seq_case(P: int, me: int, B: int, seq: list, H: int, D: int, dtype, device: str) -> Case:
    import torch

    from tileflip.distributed import chunks, ops

    xs = [_random((B, s, H, D), dtype, 300 + i, device) for i, s in enumerate(seq)]
    h = H // P
    y = torch.cat([t[:, :, me * h : (me + 1) * h] for t in xs], dim=1)  # this rank's heads, whole sequence
    expected = xs[me]
    del xs
    case = Case("head_to_seq", tuple(y.shape), str(dtype).removeprefix("torch."), y.numel() * y.element_size())
    case.plan = ops.head_to_seq_plan(P, me, y, seq, 1, "auto")
    _collectives(case, chunks.auto_chunks(y.numel() * y.element_size(), h * D * y.element_size()))

    def deepspeed():
        s = seq[me]
        send = y.reshape(B, P, s, h, D).permute(1, 0, 2, 3, 4).contiguous()
        recv = torch.empty_like(send)
        torch.distributed.all_to_all_single(recv, send)
        return recv.permute(1, 2, 0, 3, 4).contiguous().view(B, s, H, D)

    for k in CHUNKS:
        case.run[f"tileflip:{k}"] = lambda k=k: ops.head_to_seq(y, seq_len=seq[me], chunks=k)
        case.check[f"tileflip:{k}"] = lambda k=k: (ops.head_to_seq(y, seq_len=seq[me], chunks=k), expected)
    case.run["deepspeed"] = deepspeed
    case.check["deepspeed"] = lambda: (deepspeed(), expected)
    return case


def _collectives(case: Case, auto: int) -> None:
    """The two bare collectives of a chunks=1 plan: every block (own buffers of the whole tensor's bytes,
    the plan's split sizes with the own block in), and the plan's own exchange (its buffers and splits)."""
    import torch
    import torch.distributed as dist

    from tileflip.distributed import pipeline

    plan = case.plan
    es = plan.out.element_size()
    ins, outs = plan.full_in_splits, plan.full_out_splits
    send = torch.empty(sum(ins) * es, dtype=torch.uint8, device=plan.out.device)
    recv = torch.empty(sum(outs) * es, dtype=torch.uint8, device=plan.out.device)
    full = pipeline.carriers(send, recv, es, ins, outs)
    mine = plan.bufs.carriers(plan.steps[0])
    case.bare = lambda: dist.all_to_all_single(full[1], full[0], full[3], full[2])
    case.remote = lambda: dist.all_to_all_single(mine[1], mine[0], mine[3], mine[2])
    case.auto = auto


# --------------------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------------------


class _HostEvent:
    """perf_counter with CUDA events' interface, for the CPU smoke run."""

    def record(self):
        self.t = time.perf_counter()

    def elapsed_time(self, end) -> float:
        return (end.t - self.t) * 1e3


def _time(fn, reps: int, warmup: int, device: str) -> tuple[float, float]:
    """(median device ms per call on this rank, host ms per call)."""
    import torch
    import torch.distributed as dist

    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    dist.barrier()
    event = (lambda: torch.cuda.Event(enable_timing=True)) if cuda else _HostEvent
    starts, ends = [event() for _ in range(reps)], [event() for _ in range(reps)]
    t0 = time.perf_counter()
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    host = (time.perf_counter() - t0) / reps * 1e3
    sync()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)), host


def _all_ranks(value) -> list:
    import torch.distributed as dist

    values = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return values


def measure_case(case: Case, meta: dict, rounds: int, reps: int, device: str, log) -> list[dict]:
    import torch

    src = torch.empty(case.bytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    step, own = case.plan.steps[0], case.plan.own or (lambda: None)
    timed = {"copy": lambda: dst.copy_(src), "all_to_all_single": case.bare, "all_to_all_single-remote": case.remote,
             "tileflip-pack": step.pack, "tileflip-unpack": step.unpack, "tileflip-own": own, **case.run}  # fmt: skip
    records = []
    for r in range(rounds):
        row = {}
        for name, fn in timed.items():
            ms, host = _time(fn, reps, 3, device)
            ranks = _all_ranks(ms)
            row[name] = (max(ranks), ranks, host)
        records += _round_records(case, meta, r, row)
    log(_summary_line(case, records))
    return records


LOCAL = ("copy", "tileflip-pack", "tileflip-unpack", "tileflip-own")


def _moved_bytes(case: Case) -> dict:
    """Bytes each local pass reads (and writes) on this rank."""
    plan = case.plan
    return {"copy": case.bytes, "tileflip-pack": plan.bufs.send.numel(), "tileflip-unpack": plan.bufs.recv.numel(),
            "tileflip-own": plan.own_numel * plan.out.element_size()}  # fmt: skip


def _round_records(case: Case, meta: dict, round_: int, row: dict) -> list[dict]:
    copy_ms = row["copy"][0]
    copy_gbps = 2 * case.bytes / copy_ms / 1e6
    bare_ms, ds_ms = row["all_to_all_single"][0], row["deepspeed"][0]
    moved = _moved_bytes(case)
    out = []
    for name, (ms, ranks, host) in row.items():
        backend, _, chunks = name.partition(":")
        local = name in LOCAL
        gbps = (2 * moved[name] if local else case.bytes) / ms / 1e6
        rec = dict(meta, op=case.op, backend=backend, shape=list(case.shape), dtype=case.dtype, ms=ms, gbps=gbps,
                   copy_gbps=copy_gbps, fraction_of_copy=gbps / copy_gbps if local else None, round=round_,
                   ms_ranks=ranks, host_ms=host, bytes_per_rank=case.bytes)  # fmt: skip
        if local:
            rec["moved_bytes"] = moved[name]
        if chunks:
            rec["chunks_arg"] = chunks if chunks == "auto" else int(chunks)
            rec["chunks"] = case.auto if chunks == "auto" else int(chunks)
        if not local:
            rec["vs_bare"] = ms / bare_ms
            rec["vs_deepspeed"] = ms / ds_ms
        out.append(rec)
    return out


def _median_of(records: list[dict], backend: str, key: str = "ms", chunks=None) -> float:
    vals = [r[key] for r in records if r["backend"] == backend and r.get("chunks_arg") == chunks]
    return statistics.median(vals) if vals else float("nan")


def _summary_line(case: Case, records: list[dict]) -> str:
    parts = [f"copy {_median_of(records, 'copy', 'gbps'):.0f} GB/s",
             f"pack {_median_of(records, 'tileflip-pack', 'fraction_of_copy'):.0%} of copy",
             f"unpack {_median_of(records, 'tileflip-unpack', 'fraction_of_copy'):.0%} of copy",
             f"own {_median_of(records, 'tileflip-own', 'fraction_of_copy'):.0%} of copy",
             f"bare {_median_of(records, 'all_to_all_single'):.3f} ms",
             f"bare-remote {_median_of(records, 'all_to_all_single-remote'):.3f} ms",
             f"deepspeed {_median_of(records, 'deepspeed'):.3f} ms"]  # fmt: skip
    parts += [f"chunks={k if k != 'auto' else f'auto={case.auto}'} {_median_of(records, 'tileflip', chunks=k):.3f} ms "
              f"({_median_of(records, 'tileflip', 'vs_bare', chunks=k):.2f}x bare, "
              f"host {_median_of(records, 'tileflip', 'host_ms', chunks=k):.2f} ms)" for k in CHUNKS]  # fmt: skip
    return f"{case.op} {case.shape} {case.dtype}: " + ", ".join(parts)


def summary_records(case: Case, records: list[dict], meta: dict) -> dict:
    """The figures that sum up one case, from the medians over rounds."""
    fixed = [k for k in CHUNKS if k != "auto"]
    best = min(fixed, key=lambda k: _median_of(records, "tileflip", chunks=k))
    auto_vs_bare = _median_of(records, "tileflip", "vs_bare", chunks="auto")
    return dict(
        meta, op="summary", of=case.op, shape=list(case.shape), dtype=case.dtype,
        pack_fraction_of_copy=_median_of(records, "tileflip-pack", "fraction_of_copy"),
        unpack_fraction_of_copy=_median_of(records, "tileflip-unpack", "fraction_of_copy"),
        own_fraction_of_copy=_median_of(records, "tileflip-own", "fraction_of_copy"),
        remote_vs_bare=_median_of(records, "all_to_all_single-remote") / _median_of(records, "all_to_all_single"),
        chunks1_vs_bare=_median_of(records, "tileflip", "vs_bare", chunks=1),
        chunks1_vs_deepspeed=_median_of(records, "tileflip", "vs_deepspeed", chunks=1),
        best_chunks=best, best_vs_bare=_median_of(records, "tileflip", "vs_bare", chunks=best),
        best_vs_deepspeed=_median_of(records, "tileflip", "vs_deepspeed", chunks=best),
        auto_chunks=case.auto, auto_vs_bare=auto_vs_bare,
        auto_vs_deepspeed=_median_of(records, "tileflip", "vs_deepspeed", chunks="auto"),
        auto_within_1_3x_bare=auto_vs_bare <= 1.3,
    )  # fmt: skip


# --------------------------------------------------------------------------------------------------
# Exactness and profile
# --------------------------------------------------------------------------------------------------


def check_case(case: Case, meta: dict) -> list[dict]:
    out = []
    for name, fn in case.check.items():
        got, expected = fn()
        backend, _, chunks = name.partition(":")
        exact = all(_all_ranks(_same(got, expected)))
        out.append(dict(meta, op="check", of=case.op, backend=backend, chunks=_chunks_arg(chunks),
                        shape=list(case.shape), dtype=case.dtype, exact=exact))  # fmt: skip
        del got
    return out


def _chunks_arg(chunks: str):
    return None if not chunks else chunks if chunks == "auto" else int(chunks)


def profile_case(case: Case, meta: dict, name: str, trace: Path | None, device: str) -> dict:
    """CUDA kernels and torch copy ops of one tileflip call (after warm-up): only the call and a device
    synchronize run inside the profiler. A copy op is listed with its input shapes, and counted wherever
    it ran, the caller's thread or a collective backend's own (gloo's all_gather runs copies there)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    fn = case.run[name]
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    fn()
    sync()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities, record_shapes=True) as prof:
        fn()
        sync()
    kernels: dict = {}
    copies: dict = {}
    for e in prof.events():
        if e.device_type == DeviceType.CUDA:
            kernels[e.name] = kernels.get(e.name, 0) + 1
        elif e.name in TORCH_COPY_OPS:
            key = f"{e.name} {e.input_shapes}"
            copies[key] = copies.get(key, 0) + 1
    others = [k for k in kernels if not (k.startswith(TILEFLIP_KERNELS) or k.startswith("nccl"))]
    if trace is not None:
        prof.export_chrome_trace(str(trace))
    backend, _, chunks = name.partition(":")
    return dict(meta, op="profile", of=case.op, backend=backend, chunks=_chunks_arg(chunks),
                shape=list(case.shape), dtype=case.dtype, cuda_kernels=kernels, torch_copy_ops=copies,
                other_kernels=others, only_tileflip_and_nccl=not others and not copies,
                trace=str(trace) if trace else None)  # fmt: skip


# --------------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------------


def _meta(device: str) -> dict:
    import torch
    import torch.distributed as dist
    import triton

    cuda = device == "cuda"
    return {
        "gpu": torch.cuda.get_device_name() if cuda else "cpu (smoke run, not a measurement)",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "time": rec.now(),
        "world": dist.get_world_size(),
        "collectives": dist.get_backend_config(),
        "nccl": str(torch.cuda.nccl.version()) if cuda else None,
        "nvls": os.environ.get("NCCL_NVLS_ENABLE"),
    }


def _cases(P: int, me: int, scale: int, device: str):
    import torch

    # >= 1 GiB per rank at scale 1: a 16384 x 16384 fp32 block of rows; bf16 rows of uneven counts with an
    # odd N; Ulysses on (8, 16384, 32, 128) bf16 per rank. --scale divides the sizes (quick trials).
    r, s = 16384 // scale, 16384 // scale
    rows = [r + 64 * (P - i) // scale for i in range(P)]  # uneven, every rank still >= 1 GiB
    yield lambda: transpose_case(P, me, [r] * P, 16384 // scale, torch.float32, device)
    yield lambda: transpose_case(P, me, rows, 32768 // scale + 1, torch.bfloat16, device)
    yield lambda: seq_to_head_case(P, me, 8, [s] * P, 32, max(2, 128 // scale), torch.bfloat16, device)
    yield lambda: head_to_seq_case(P, me, 8, [s] * P, 32, max(2, 128 // scale), torch.bfloat16, device)


LAUNCHER_ENV = ("LOCAL_RANK", "WORLD_SIZE")  # set by torch.distributed.run in each process it starts


def under_launcher() -> bool:
    return all(k in os.environ for k in LAUNCHER_ENV)


def launch(argv: list[str], nproc: int) -> int:
    """Run ``tileflip bench`` with ``argv`` in ``nproc`` processes under ``torch.distributed.run``."""
    env = dict(os.environ)
    env.setdefault("NCCL_NVLS_ENABLE", "0")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
           "-m", "tileflip.cli", "bench", *argv]  # fmt: skip
    return subprocess.run(cmd, env=env, check=False).returncode


def run(*, out_dir, rounds: int = 3, reps: int = 20, scale: int = 1, device: str = "cuda", command: str = "",
        log_all=print) -> int:  # fmt: skip
    """One rank's part of the benchmark (under ``torch.distributed.run``); rank 0 writes the results."""
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # read when the communicator is created: never multicast
    if os.environ.get("LOCAL_WORLD_SIZE") == os.environ.get("WORLD_SIZE") and os.uname().sysname == "Linux":
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # one host: the gloo sizes exchange on loopback

    import torch
    import torch.distributed as dist

    if device == "cuda":
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    else:
        dist.init_process_group("gloo")
    P, me = dist.get_world_size(), dist.get_rank()
    log = log_all if me == 0 else (lambda *a: None)
    meta = _meta(device)
    meta["run"] = meta["time"]
    label = f"{rec.device_label(meta['gpu']) if device == 'cuda' else 'cpu'}x{P}"
    out_path = rec.results_path(out_dir, label, "distributed")
    if me == 0:
        out_path.parent.mkdir(parents=True, exist_ok=True)
    records = []
    t0 = time.perf_counter()
    for make in _cases(P, me, scale, device):
        case = make()
        timed = measure_case(case, meta, rounds, reps, device, log)
        summary = summary_records(case, timed, meta)
        checks = check_case(case, meta)
        records += [*timed, summary, *checks]
        log(f"  exact: {all(r['exact'] for r in checks)}")
        first = case.op == "transpose" and case.dtype == "float32"
        for name in dict.fromkeys(("tileflip:1", "tileflip:auto", f"tileflip:{summary['best_chunks']}")):
            trace = out_path.with_suffix(".trace.json") if (first and me == 0 and name == "tileflip:auto") else None
            prof = profile_case(case, meta, name, trace, device)
            records.append(prof)
            log(f"  profile {name}: kernels {sorted(prof['cuda_kernels'])}; torch copies {prof['torch_copy_ops']}")
        del case
        if device == "cuda":
            torch.cuda.empty_cache()
    log(f"total {time.perf_counter() - t0:.0f} s")
    if me == 0:
        path = rec.write_results(records, "distributed", out_dir, command, device=label)
        log(f"wrote {path}")
    dist.barrier()
    dist.destroy_process_group()
    return 0
