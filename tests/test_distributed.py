"""tileflip.distributed across processes: gloo on loopback (CPU, Triton's interpreter) and NCCL on two GPUs.

Each test starts one process per rank running this file as a script (``python test_distributed.py
SCENARIO RANK WORLD STORE BACKEND``); the ranks rendezvous through a FileStore in the test's tmp_path.
Starting a rank costs seconds (torch and triton imports), so one group runs many cases: every rank walks
the same list, builds the same global tensor from a seed, passes its own shard and compares its result
bit for bit with the slice of the global answer it owns. A rank reports on its last stdout line
(``RESULT {json}``); a failed assertion shows as its traceback and a non-zero exit.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve()
FAULT_TIMEOUT_S = 4  # the group's timeout in the fault tests: how long a rank waits for an absent peer
GROUP_LIMIT_S = 150  # a group that runs longer than this is killed and the test fails (NCCL: twice this)


# --------------------------------------------------------------------------------------------------
# The parent side: start a group, collect what each rank reports
# --------------------------------------------------------------------------------------------------


def _launch(tmp_path: Path, scenario: str, world: int, backend: str = "gloo") -> list[dict]:
    env = dict(os.environ)
    if sys.platform.startswith("linux"):
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # gloo (data, or NCCL's sizes exchange) on loopback
    if backend == "gloo":
        env["TRITON_INTERPRET"] = "1"  # set before the child imports triton: the kernels run on the CPU
    else:
        env.setdefault("NCCL_NVLS_ENABLE", "0")  # never NVLink multicast
    store = tmp_path / f"store-{scenario}"
    logs = [(tmp_path / f"{scenario}-{rank}.out", tmp_path / f"{scenario}-{rank}.err") for rank in range(world)]
    procs = []
    # Output goes to files, not pipes: a rank blocked on a full pipe would stall its peers' collectives.
    for rank, (out, err) in enumerate(logs):
        with out.open("w") as fo, err.open("w") as fe:
            cmd = [sys.executable, str(HERE), scenario, str(rank), str(world), str(store), backend]
            procs.append(subprocess.Popen(cmd, stdout=fo, stderr=fe, env=env))
    limit = GROUP_LIMIT_S * (1 if backend == "gloo" else 2)
    deadline = time.monotonic() + limit
    try:
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pytest.fail(f"{scenario}: the group did not finish within {limit} s")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [_report(rank, p.returncode, *logs[rank]) for rank, p in enumerate(procs)]


def _report(rank: int, rc: int, out: Path, err: Path) -> dict:
    result = [line for line in out.read_text().splitlines() if line.startswith("RESULT ")]
    report = json.loads(result[-1][len("RESULT ") :]) if result else {}
    return {"rank": rank, "rc": rc, "stderr": err.read_text()[-4000:], **report}


def _assert_all_passed(reports: list[dict]) -> None:
    for r in reports:
        assert r["rc"] == 0 and r.get("ok"), f"rank {r['rank']} failed (exit {r['rc']}):\n{r['stderr']}"


# --------------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("world", [2, 4])
def test_gloo_exact_and_mismatches(tmp_path, world):
    reports = _launch(tmp_path, "exact", world)
    _assert_all_passed(reports)
    assert all(r["cases"] == reports[0]["cases"] > 30 for r in reports)


def test_gloo_moves_beside_the_collective(tmp_path):
    """The passes that run beside a collective (the own block, the packs after the first, the unpacks
    before the last) on a grid capped at 2 programs, as on a GPU: chunked and unchunked, several tiles
    each, and chunks="auto" cut 3:1."""
    reports = _launch(tmp_path, "beside", 2)
    _assert_all_passed(reports)
    assert all(r["cases"] == 8 and r["capped"] for r in reports)


def test_gloo_single_rank(tmp_path):
    """A group of one: no collective at all, only the own block's move."""
    _assert_all_passed(_launch(tmp_path, "single", 1))


@pytest.mark.gpu
@pytest.mark.multigpu
def test_nccl_exact_and_mismatches(tmp_path):
    _assert_all_passed(_launch(tmp_path, "exact", 2, backend="nccl"))


def test_gloo_peer_never_arrives(tmp_path):
    """Rank 1 fails in its own code and never calls: rank 0 raises once the group's timeout passes."""
    r0, r1 = _launch(tmp_path, "never-arrives", 2)
    assert r1["rc"] == 0, r1["stderr"]
    assert r0["rc"] == 0 and r0["error"] == "DistributedError", r0
    assert "tileflip.distributed.transpose" in r0["message"] and "rank 0 of 2" in r0["message"]
    assert "sizes exchange" in r0["message"] and r0["cause"]
    assert FAULT_TIMEOUT_S - 1 <= r0["seconds"] <= FAULT_TIMEOUT_S + 10, r0["seconds"]


@pytest.mark.parametrize("when", ["exits-before", "dies-in-pack-1", "dies-in-pack-2"])
def test_gloo_peer_dies(tmp_path, when):
    """The last rank exits before the call, or dies while packing (after the sizes exchange, so the
    others are already in the data all-to-all, sync or chunked): the others raise without waiting
    for the timeout."""
    *alive, dead = _launch(tmp_path, when, 3)
    assert dead["rc"] == 3, dead["stderr"]
    step = "sizes exchange" if when == "exits-before" else "all_to_all_single"
    for r in alive:
        assert r["rc"] == 0 and r["error"] == "DistributedError", r
        assert step in r["message"] and f"rank {r['rank']} of 3" in r["message"] and r["cause"]
        assert r["seconds"] < FAULT_TIMEOUT_S  # noticed at once, not after the timeout


def test_bench_runs_on_cpu(tmp_path):
    """`tileflip bench --suite distributed` end to end at a tiny scale on gloo: records complete, every result exact."""
    env = dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS="1")
    if sys.platform.startswith("linux"):
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    cmd = [sys.executable, "-m", "tileflip.cli", "bench", "--suite", "distributed", "--device", "cpu", "--gpus", "2",
           "--scale", "256", "--rounds", "1", "--reps", "1", "--out", str(tmp_path)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=GROUP_LIMIT_S, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = json.loads((tmp_path / "cpux2" / "distributed.json").read_text())["records"]
    checks = [r for r in records if r["op"] == "check"]
    assert len(checks) == 4 * 5 and all(r["exact"] for r in checks)  # 4 cases x (chunks 1, 2, 4, "auto"; deepspeed)
    timed = [r for r in records if r["op"] in ("transpose", "seq_to_head", "head_to_seq")]
    backends = {r["backend"] for r in timed}
    assert backends == {"copy", "all_to_all_single", "all_to_all_single-remote", "tileflip", "tileflip-pack",
                        "tileflip-unpack", "tileflip-own", "deepspeed"}  # fmt: skip
    for key in ("gpu", "torch", "triton", "time", "op", "backend", "shape", "dtype", "ms", "gbps", "copy_gbps",
                "fraction_of_copy", "run", "host_ms"):  # fmt: skip
        assert all(key in r for r in timed), key
    assert {r["chunks_arg"] for r in timed if r["backend"] == "tileflip"} == {1, 2, 4, "auto"}
    assert all(r["moved_bytes"] > 0 for r in timed if r["backend"].startswith("tileflip-"))
    summaries = [r for r in records if r["op"] == "summary"]
    assert len(summaries) == 4 and all(r["auto_chunks"] == 1 for r in summaries)  # tiny sizes: one chunk
    profiles = [r for r in records if r["op"] == "profile"]
    assert profiles and all(r["backend"] == "tileflip" for r in profiles)


def test_not_initialized_is_refused():
    from tileflip import distributed

    if torch.distributed.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    with pytest.raises(ValueError, match="group: torch.distributed is not initialized"):
        distributed.transpose(torch.zeros(2, 3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.uint8, torch.float64, torch.bool])
@pytest.mark.parametrize("to_blocks", [True, False])
def test_segment_kernel_matches_reference(dtype, to_blocks):
    """The pack kernel alone, against its torch reference: two-level rows, uneven segments, an offset origin."""
    from helpers import assert_bits_equal, random_bits

    from tileflip.kernels.triton import pack as triton_pack

    seg = triton_pack.Segments(rows=12, inner_rows=4, stride_outer=170, stride_inner=41,
                               starts=(0, 7, 20, 40), widths=(7, 13, 0, 1))  # fmt: skip
    origin = random_bits((3 * 170 + 3,), dtype, seed=1)[3:]
    blocked = random_bits((seg.numel,), dtype, seed=2)
    got_b, want_b = blocked.clone(), blocked.clone()
    got_i, want_i = origin.clone(), origin.clone()
    triton_pack.launch(got_b, got_i, seg, to_blocks=to_blocks)
    triton_pack.reference(want_b, want_i, seg, to_blocks=to_blocks)
    assert_bits_equal(got_b, want_b)
    assert_bits_equal(got_i, want_i)


@pytest.mark.parametrize("programs", [1, 5, 1000])
def test_pack_kernels_on_a_capped_grid(programs):
    """Both pack kernels on a grid of fewer programs than tiles (each program loops; a move beside a
    collective), against the torch references: several tiles per segment and per run."""
    from helpers import assert_bits_equal, random_bits

    from tileflip.kernels.triton import pack as triton_pack

    seg = triton_pack.Segments(rows=3000, inner_rows=1000, stride_outer=25000, stride_inner=23,
                               starts=(0, 7, 20), widths=(7, 13, 1))  # fmt: skip
    origin = random_bits((3 * 25000,), torch.float32, seed=3)
    blocked = random_bits((seg.numel,), torch.float32, seed=4)
    for to_blocks in (True, False):
        got_b, want_b, got_i, want_i = blocked.clone(), blocked.clone(), origin.clone(), origin.clone()
        triton_pack.launch(got_b, got_i, seg, to_blocks=to_blocks, programs=programs)
        triton_pack.reference(want_b, want_i, seg, to_blocks=to_blocks)
        assert_bits_equal(got_b, want_b)
        assert_bits_equal(got_i, want_i)
    spec = triton_pack.Rows(rows=2400, inner_rows=800, width=12, src_outer=12000, src_inner=15, dst_outer=9700,
                            dst_inner=12)  # fmt: skip
    src = random_bits((3 * 12000,), torch.float32, seed=5)
    dst = random_bits((3 * 9700,), torch.float32, seed=6)
    got, want = dst.clone(), dst.clone()
    triton_pack.launch_rows(got, src, spec, programs=programs)
    triton_pack.reference_rows(want, src, spec)
    assert_bits_equal(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.uint8, torch.float64, torch.bool])
def test_rows_kernel_matches_reference(dtype):
    """The own block's copy alone, against its torch reference: both sides on two levels, offset origins."""
    from helpers import assert_bits_equal, bits, random_bits

    from tileflip.kernels.triton import pack as triton_pack

    spec = triton_pack.Rows(rows=12, inner_rows=4, width=6, src_outer=50, src_inner=9, dst_outer=41, dst_inner=7)
    src = random_bits((3 * 50 + 5,), dtype, seed=1)[5:]
    dst = random_bits((3 * 41 + 2,), dtype, seed=2)[2:]
    got, want = dst.clone(), dst.clone()
    triton_pack.launch_rows(got, src, spec)
    triton_pack.reference_rows(want, src, spec)
    assert_bits_equal(got, want)
    assert not torch.equal(bits(got), bits(dst))  # it wrote something (the data are random bits)
    assert spec.numel == 72


def test_auto_chunks():
    from tileflip.distributed.chunks import AUTO_SPLIT, AUTO_SPLIT_BYTES, auto_chunks, chunk_sizes

    assert auto_chunks(0, 64) == auto_chunks(AUTO_SPLIT_BYTES - 1, 64) == 1
    assert auto_chunks(AUTO_SPLIT_BYTES, 64) == auto_chunks(8 * AUTO_SPLIT_BYTES, 16) == AUTO_SPLIT == (3, 1)
    assert auto_chunks(8 * AUTO_SPLIT_BYTES, 2 * 32769) == auto_chunks(8 * AUTO_SPLIT_BYTES, 24) == 1  # unaligned runs
    # Weighted pieces: cut at total * (cumulative weight) // sum, every row in exactly one piece.
    assert chunk_sizes(16384, (3, 1)) == [12288, 4096]
    assert chunk_sizes(3, (3, 1)) == [2, 1] and chunk_sizes(1, (3, 1)) == [0, 1] and chunk_sizes(0, (3, 1)) == [0, 0]
    assert chunk_sizes(10, (1, 2, 1)) == [2, 5, 3]
    for total in range(40):
        assert sum(chunk_sizes(total, (3, 1))) == total and sum(chunk_sizes(total, 3)) == total
    assert chunk_sizes(10, 3) == [4, 3, 3]  # an int: tensor_split's rule


def test_vector_width():
    from tileflip.kernels.triton.pack import vector_width

    assert vector_width(4, (8, 12), (0, 64)) == 4
    assert vector_width(4, (8, 6), (0, 64)) == 2
    assert vector_width(2, (16,), (0, 4)) == 2  # an address 4 bytes from 16-byte alignment
    assert vector_width(1, (32, 48), (0,)) == 16
    assert vector_width(8, (3,), (0,)) == 1


@pytest.mark.parametrize("backend", ["auto", "torch"])
def test_passes_beside_a_collective_run_on_a_capped_grid(monkeypatch, backend):
    """The schedule of a 2-piece call: pack 0 and the last unpack on full grids; the later pack, the
    earlier unpack and the own block's move on the capped grid (Triton backends only), for transpose and
    seq_to_head. The launchers are replaced by recorders: only the plan's choices are under test."""
    from tileflip.distributed import chunks, ops
    from tileflip.kernels.triton import pack as triton_pack
    from tileflip.kernels.triton import transpose as triton_transpose
    from tileflip.ops import backends
    from tileflip.ops import transpose as ops_transpose

    calls = []
    monkeypatch.setattr(chunks, "beside_programs", lambda device: 5)
    monkeypatch.setattr(triton_transpose, "launch_looped", lambda src, dst, config, programs: calls.append(programs))
    monkeypatch.setattr(triton_pack, "launch", lambda *a, programs=0, **k: calls.append(programs))
    monkeypatch.setattr(triton_pack, "launch_rows", lambda *a, programs=0: calls.append(programs))
    monkeypatch.setattr(triton_pack, "reference", lambda *a, **k: calls.append("torch"))
    monkeypatch.setattr(triton_pack, "reference_rows", lambda *a: calls.append("torch"))
    monkeypatch.setattr(ops_transpose, "transpose", lambda src, dst, backend: calls.append(f"full {backend}"))
    monkeypatch.setattr(backends, "launch", lambda src, dst, kernel: calls.append(f"full {kernel}"))
    transpose = ops.transpose_plan(2, 0, torch.zeros(40, 24), [40, 36], 24, (3, 1), backend)
    ulysses = ops.seq_to_head_plan(2, 1, torch.zeros(2, 8, 4, 4), [8, 8], (3, 1), backend)
    expected = {  # pack 0, pack 1, unpack 0, unpack 1, own block
        "auto": (["full auto", 5, 5, 0, 5], [0, 5, 5, 0, 5]),
        "torch": (["full torch", "full torch", "torch", "torch", "full torch"], ["torch"] * 5),
    }[backend]
    for plan, want in zip((transpose, ulysses), expected):
        calls.clear()
        assert len(plan.steps) == 2
        for job in (plan.steps[0].pack, plan.steps[1].pack, plan.steps[0].unpack, plan.steps[1].unpack, plan.own):
            job()
        assert calls == want


def test_split_sizes_are_tensor_splits():
    from tileflip.distributed.chunks import split_sizes

    for total in range(9):
        for parts in range(1, 5):
            want = [len(t) for t in torch.tensor_split(torch.arange(total), parts)]
            assert split_sizes(total, parts) == want


# --------------------------------------------------------------------------------------------------
# The rank side
# --------------------------------------------------------------------------------------------------

DTYPES = ["float32", "bfloat16", "float16", "int16", "uint16", "uint32", "uint64", "float8_e4m3fn",
          "float8_e5m2", "bool", "int8", "float64", "int64", "complex64"]  # fmt: skip
# On GPUs every new element size and tile compiles kernels (a bare machine has no cache): each size once.
GPU_DTYPES = ["float32", "bfloat16", "int16", "float8_e4m3fn", "bool", "float64"]


def _global(shape, dtype, device, seed, layout="contiguous"):
    """The same tensor on every rank: random bits, stored as ``layout`` says."""
    from helpers import random_bits

    if layout == "contiguous":
        return random_bits(shape, dtype, device, seed)
    if layout == "reversed":  # the dimensions' memory order reversed: every stride differs from contiguous
        return random_bits(shape[::-1], dtype, device, seed).permute(*reversed(range(len(shape))))
    if layout == "sliced":  # every other element of the last dimension
        return random_bits((*shape[:-1], 2 * shape[-1]), dtype, device, seed)[..., ::2]
    raise ValueError(layout)


def _check_transpose(rank, world, device, rows, N, dtype, chunks=1, layout="contiguous", seed=0, backend="auto"):
    from helpers import assert_bits_equal

    from tileflip import distributed

    full = _global((sum(rows), N), getattr(torch, dtype), device, seed, layout)
    at = sum(rows[:rank])
    out = distributed.transpose(full[at : at + rows[rank]], chunks=chunks, backend=backend)
    assert_bits_equal(out, torch.tensor_split(full.t(), world)[rank])


def _check_ulysses(rank, world, device, B, seq, H, D, dtype, chunks=1, layout="contiguous", seed=0, backend="auto"):
    from helpers import assert_bits_equal

    from tileflip import distributed

    full = _global((B, sum(seq), H, D), getattr(torch, dtype), device, seed, layout)
    at, h = sum(seq[:rank]), H // world
    x = full[:, at : at + seq[rank]]
    heads = distributed.seq_to_head(x, chunks=chunks, backend=backend)
    assert_bits_equal(heads, full[:, :, rank * h : (rank + 1) * h])
    assert_bits_equal(distributed.head_to_seq(heads, seq_len=seq[rank], chunks=chunks, backend=backend), x)
    # head_to_seq from a strided input whose (S, h, D) block is not one run, and by tensor_split's shards.
    strided = full[:, :, rank * h : (rank + 1) * h]
    want = torch.tensor_split(full, world, dim=1)[rank]
    assert_bits_equal(distributed.head_to_seq(strided, chunks=chunks, backend=backend), want)


def _expect_value_error(fn, *fragments):
    try:
        fn()
    except ValueError as e:
        message = str(e)
        assert all(f in message for f in fragments), (message, fragments)
        return
    raise AssertionError(f"no ValueError; expected one mentioning {fragments}")


def _mismatches(rank, world, device):
    """Cases every rank must refuse the same way before any data moves; the group stays usable."""
    from tileflip import distributed

    last = world - 1
    ones = torch.ones

    _expect_value_error(lambda: distributed.transpose(ones(3, 5 if rank == 0 else 6, device=device)),
                        "number of columns of local (N) differs", "5 on rank [0]")  # fmt: skip
    dtype = torch.float32 if rank == 0 else torch.bfloat16
    _expect_value_error(lambda: distributed.transpose(ones(2, 4, dtype=dtype, device=device)),
                        "the dtype differs", "torch.float32 on rank [0]", "torch.bfloat16")  # fmt: skip
    _expect_value_error(lambda: distributed.seq_to_head(ones(1, 2, world + 1, 4, device=device)),
                        f"H={world + 1} heads", f"divisible by {world}")  # fmt: skip
    bad = ones(6, device=device) if rank == last else ones(2, 3, device=device)
    if rank == last:
        _expect_value_error(lambda: distributed.transpose(bad), "local must be 2-D")
    else:
        _expect_value_error(lambda: distributed.transpose(bad), f"rank [{last}] refused")
    if rank == 0:
        _expect_value_error(lambda: distributed.seq_to_head(ones(1, 2, world, 4, device=device)),
                            "the operation called differs", "seq_to_head on rank [0]")  # fmt: skip
    else:
        _expect_value_error(lambda: distributed.transpose(ones(2, 3, device=device)), "the operation called differs")
    _expect_value_error(lambda: distributed.transpose(ones(2, 3, device=device), chunks=1 + (rank == last)),
                        "chunks differs")  # fmt: skip
    _expect_value_error(lambda: distributed.transpose(ones(2, 3, device=device), chunks="auto" if rank else 2),
                        "chunks differs", "'auto' on rank")  # fmt: skip
    _expect_value_error(lambda: distributed.head_to_seq(ones(1, 4, 1, 2, device=device), seq_len=1 + (rank == 0)),
                        "sum to", "must sum to S")  # fmt: skip
    _check_transpose(rank, world, device, [2] * world, 3, "float32")  # still usable afterwards
    return 8


def _exchange_copies(world, device):
    """The torch copy ops that the sizes exchange runs, on any thread (a gloo all_gather would run two)."""
    from torch.profiler import ProfilerActivity, profile

    from tileflip.distributed import group

    ctx = group.context(None, "transpose")
    row = [1, 0, *range(7)]
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        table = group.exchange(ctx, row)
    assert table == [row] * world, table
    return [e.name for e in prof.events() if e.name in ("aten::copy_", "aten::clone", "aten::cat", "aten::_to_copy")]


def scenario_exact(rank, world, device):
    cases = 0
    uneven = [3, 6, 1, 5][:world]
    for i, dtype in enumerate(DTYPES if device == "cpu" else GPU_DTYPES):
        _check_transpose(rank, world, device, uneven, 5 + i % 3, dtype, seed=i)
        cases += 1
    for rows, N, chunks, layout in [
        ([4] * world, 6, 1, "contiguous"),    # even rows and columns
        ([0, 5, 2, 3][:world], 3, 1, "contiguous"),  # a rank without rows
        (uneven, world - 1, 1, "contiguous"),  # fewer columns than ranks: a rank receives nothing
        (uneven, 7, 2, "contiguous"),          # chunked, uneven
        ([9] * world, 6, 3, "contiguous"),
        ([2, 1, 0, 4][:world], 5, 3, "contiguous"),  # more chunks than some ranks' rows
        (uneven, 6, 1, "reversed"),            # the input's strides transposed
        (uneven, 6, 2, "sliced"),
        ([40, 24, 8, 16][:world], 33, 1, "contiguous"),  # enough for several tiles
    ]:  # fmt: skip
        _check_transpose(rank, world, device, rows, N, "float32", chunks, layout, seed=cases)
        cases += 1
    seq = [3, 5, 2, 4][:world]
    for dtype, seqs, H, D, chunks, layout in [
        ("bfloat16", seq, 2 * world, 3, 1, "contiguous"),
        ("float32", [4] * world, world, 8, 1, "contiguous"),
        ("int16", seq, 2 * world, 4, 1, "contiguous"),
        ("float8_e4m3fn", seq, world, 5, 2, "contiguous"),
        ("bool", [0, 3, 1, 2][:world], world, 2, 1, "contiguous"),
        ("float64", seq, 2 * world, 2, 3, "contiguous"),
        ("float16", seq, 2 * world, 3, 2, "reversed"),
        ("uint32", seq, world, 4, 1, "sliced"),
    ]:  # fmt: skip
        _check_ulysses(rank, world, device, 2, seqs, H, D, dtype, chunks, layout, seed=cases)
        cases += 1
    # chunks="auto" (one chunk at these sizes) and more chunks than any rank has rows.
    _check_transpose(rank, world, device, uneven, 6, "bfloat16", "auto", seed=cases)
    _check_ulysses(rank, world, device, 2, seq, 2 * world, 3, "float32", "auto", seed=cases)
    _check_ulysses(rank, world, device, 1, seq, world, 2, "int8", 7, seed=cases)
    cases += 3
    # The torch backend (one copy per segment) gives the same bits.
    _check_transpose(rank, world, device, uneven, 7, "int16", 2, backend="torch", seed=cases)
    _check_ulysses(rank, world, device, 2, seq, 2 * world, 3, "bfloat16", 2, "reversed", seed=cases, backend="torch")
    cases += 2
    cases += _mismatches(rank, world, device)
    assert _exchange_copies(world, device) == []
    cases += 1
    if device != "cpu":
        cases += _gpu_cases(rank, world, device)
    return {"ok": True, "cases": cases}


def scenario_beside(rank, world, device):
    """Every call with the moves beside a collective on 2 programs (the CPU otherwise launches full grids),
    the capped launches counted."""
    from tileflip.distributed import chunks, ops
    from tileflip.kernels.triton import pack as triton_pack
    from tileflip.kernels.triton import transpose as triton_transpose

    capped = []
    chunks.beside_programs = lambda device: 2
    for module, name in ((triton_pack, "launch"), (triton_pack, "launch_rows"), (triton_transpose, "launch_looped")):
        def spy(*args, _real=getattr(module, name), _name=name, **kwargs):
            if kwargs.get("programs", args[-1] if _name == "launch_looped" else 0):
                capped.append(_name)
            return _real(*args, **kwargs)

        setattr(module, name, spy)
    for k in (1, 3):
        _check_transpose(rank, world, device, [150, 97], 150, "float32", k, seed=k)
        _check_transpose(rank, world, device, [70, 130], 99, "int16", k, "reversed", seed=k + 1)
        _check_ulysses(rank, world, device, 2, [600, 500], 2 * world, 8, "float32", k, seed=k + 2)
    # chunks="auto" on the weights of a large call (3/4 and 1/4 of each rank's rows), here at any size.
    chunks.AUTO_SPLIT_BYTES = 1
    pieces = []
    plans = ops.transpose_plan, ops.seq_to_head_plan
    ops.transpose_plan = lambda *a: pieces.append(a[5]) or plans[0](*a)
    ops.seq_to_head_plan = lambda *a: pieces.append(a[4]) or plans[1](*a)
    _check_transpose(rank, world, device, [150, 97], 152, "float32", "auto", seed=7)  # rows of 608 bytes
    _check_ulysses(rank, world, device, 2, [600, 500], 2 * world, 8, "bfloat16", "auto", seed=8)
    assert pieces == [(3, 1), (3, 1)], pieces
    return {"cases": 8, "capped": sorted(set(capped)) == ["launch", "launch_looped", "launch_rows"]}


def _gpu_cases(rank, world, device):
    """Enough work per kernel that the streams really overlap (a missing event shows as wrong bits), a
    caller on a stream of its own, and the profile of whole calls: tileflip's kernels and NCCL's only."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from tileflip import distributed

    rows = [1024 + 64 * i for i in range(world)]
    _check_transpose(rank, world, device, rows, 4097, "float32", 4, seed=1)
    _check_ulysses(rank, world, device, 4, [512 + 8 * i for i in range(world)], 8 * world, 64, "bfloat16", 3, seed=2)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        _check_transpose(rank, world, device, [2048] * world, 2048, "float32", 2, seed=3)
        _check_ulysses(rank, world, device, 2, [256] * world, 4 * world, 128, "float16", "auto", seed=4)
    torch.cuda.synchronize()
    local = torch.ones(2048, 2048, device=device)
    x = torch.ones(2, 256, 4 * world, 128, device=device, dtype=torch.bfloat16)
    for call in (lambda: distributed.transpose(local, chunks=2), lambda: distributed.seq_to_head(x, chunks=2),
                 lambda: distributed.head_to_seq(x, chunks=1)):  # fmt: skip
        call()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            call()
            torch.cuda.synchronize()
        kernels = {e.name for e in prof.events() if e.device_type == DeviceType.CUDA}
        copies = [e.name for e in prof.events() if e.name in ("aten::copy_", "aten::clone", "aten::contiguous")]
        assert not copies, copies
        ours = ("transpose_2d_kernel", "transpose_naive_u", "transpose_tiled_u", "segments_kernel", "rows_kernel",
                "permute_", "nccl")  # fmt: skip
        assert all(k.startswith(ours) for k in kernels), kernels
    return 7


def scenario_single(rank, world, device):
    from tileflip import distributed

    assert world == 1
    for chunks in (1, 3, "auto"):
        _check_transpose(rank, world, device, [5], 7, "float32", chunks)
        _check_ulysses(rank, world, device, 2, [4], 3, 2, "bfloat16", chunks)
    assert distributed.transpose(torch.ones(0, 3, device=device)).shape == (3, 0)
    return {"ok": True}


def _fault_call(rank, world, device, chunks=1):
    from tileflip import distributed

    t0 = time.monotonic()
    try:
        distributed.transpose(torch.ones(3, 4, device=device), chunks=chunks)
    except distributed.DistributedError as e:
        return {"error": type(e).__name__, "message": str(e), "cause": repr(e.__cause__),
                "seconds": time.monotonic() - t0, "rank": rank}  # fmt: skip
    return {"error": None}


def scenario_never_arrives(rank, world, device, store):
    if rank == 0:
        report = _fault_call(rank, world, device)
        Path(f"{store}.done").touch()
        return report
    try:
        raise RuntimeError("simulated failure in the user's code before the collective")
    except RuntimeError:
        # Stay alive without calling (a process that exits is noticed at once: that is the next test).
        deadline = time.monotonic() + FAULT_TIMEOUT_S + 30
        while not Path(f"{store}.done").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    return {}


def scenario_peer_dies(rank, world, device, when):
    from tileflip.distributed import moves

    if rank == world - 1:
        if when == "exits-before":
            os._exit(3)
        moves.transpose_pack = lambda *args, **kwargs: lambda: os._exit(3)
    return _fault_call(rank, world, device, chunks=2 if when.endswith("-2") else 1)


def _rank_main(scenario, rank, world, store, backend):
    import torch.distributed as dist

    device = "cpu"
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
    timeout = 60 if scenario in ("exact", "single", "beside") else FAULT_TIMEOUT_S
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout))  # fmt: skip
    if scenario == "exact":
        report = scenario_exact(rank, world, device)
    elif scenario == "single":
        report = scenario_single(rank, world, device)
    elif scenario == "beside":
        report = scenario_beside(rank, world, device)
    elif scenario == "never-arrives":
        report = scenario_never_arrives(rank, world, device, store)
    else:
        report = scenario_peer_dies(rank, world, device, scenario)
    print("RESULT " + json.dumps({"ok": True, **report}), flush=True)
    if scenario in ("exact", "single", "beside"):
        dist.destroy_process_group()
    # A group with a failed peer may block in its teardown; and after torch.profiler has run (the exact
    # scenario profiles the sizes exchange) the interpreter's own teardown aborts about one time in
    # three ("terminate called without an active exception", torch 2.13 CPU). The work is done and
    # reported by now, so the child leaves without that teardown.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    _rank_main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
