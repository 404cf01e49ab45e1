"""The staged permute (tileflip.staged, kernels/cuda/permute_staged.cu): the planner's boxes, the rule that
gives it launches, a CPU replay of the kernel's three phases from the launcher's parameters, and (GPU)
exact results through the CUDA kernel."""

import ctypes
import random
import re

import numpy as np
import pytest
import torch

import tileflip
from tileflip import plan, staged, tuning
from tileflip.kernels import cuda_permute

DTYPES = {1: torch.int8, 2: torch.bfloat16, 4: torch.float32, 8: torch.float64}


def _plan(shape, dims, es, strides=None):
    strides = plan.contiguous_strides(shape) if strides is None else strides
    return plan.plan_permute(tuple(shape), tuple(strides), tuple(dims), es)


def test_boxes_of_the_suite_cases_that_motivate_it():
    # bf16 (32,48,47,18,10,3) (0,4,1,3,5,2): a box over (47, 18, 10, 3), 18 cut in two chunks of 9 to fit
    # IN and OUT: input runs of 270 elements (540 bytes), output runs of 47 x 3 x 9 (2538 bytes); lines
    # along 47, the output's fastest dimension.
    go = staged.staged_launch(_plan((32, 48, 47, 18, 10, 3), (0, 4, 1, 3, 5, 2), 2), 2)
    assert go.runs == (540, 2538) and go.extents[go.chunk] == 9 and go.blocks == 32 * 48 * 2
    assert go.extents[go.line] == 47 and go.smem <= staged.SMEM_BYTES
    # int8 (28,86,14,2,40,28) (0,2,4,3,5,1): 28 x 20 of the input's chain (560-byte runs) by 86
    go = staged.staged_launch(_plan((28, 86, 14, 2, 40, 28), (0, 2, 4, 3, 5, 1), 1), 1)
    assert go.runs == (280, 2408) and go.extents[go.line] == 86


def test_box_fits_the_shared_budget_and_keeps_runs_whole():
    rng = random.Random(3)
    seen = 0
    for _ in range(300):
        rank = rng.randint(3, 6)
        shape = [rng.randint(2, 40) for _ in range(rank)]
        dims = list(range(rank))
        rng.shuffle(dims)
        es = rng.choice((1, 2, 4, 8))
        p = _plan(shape, dims, es)
        if p.kind != "tiles":
            continue
        for budget in (1024, 8192, staged.SMEM_BYTES):
            go = staged.staged_launch(p, es, budget)
            if go is None:
                continue
            seen += 1
            assert go.smem <= budget and min(go.runs) >= staged.MIN_RUN_BYTES
            assert len(go.dims) <= staged.MAX_TILE_DIMS and len(go.outer) <= staged.MAX_OUTER_DIMS
            out_strides = plan.contiguous_strides(p.sizes)
            # OUT's rows step by whole 16-byte words (one shift for all of a block's rows)
            assert all(out_strides[go.dims[k]] * es % 16 == 0 for k in go.rows)
            # the input run is contiguous: strides 1, e0, e0 e1, ...; the line is the output's fastest
            step = 1
            for k in range(go.in_run):
                assert p.in_strides[go.dims[k]] == step
                step *= p.sizes[go.dims[k]]
            assert go.dims[go.line] == len(p.sizes) - 1 and go.line == go.out_run[0]
            # a line's pieces cover it once
            assert (go.segs - 1) * go.seg_len < go.extents[go.line] <= go.segs * go.seg_len
    assert seen > 50


def test_rule_takes_the_short_run_cases_and_leaves_wide_vectors():
    assert tuning.staged_rule(_plan((32, 48, 47, 18, 10, 3), (0, 4, 1, 3, 5, 2), 2), 2) is not None
    # 16-byte vectors on both sides of the tile kernel: left to it
    assert tuning.staged_rule(_plan((8, 4096, 32, 128), (0, 3, 2, 1), 2), 2) is None
    # the realigned-store kernel's case stays there
    p = _plan((11, 39, 29, 21, 42, 24), (5, 4, 2, 3, 1, 0), 1)
    assert tuning.realign_launch(p, 1) is not None and tuning.staged_rule(p, 1) is None


# ----------------------------------------------------------------------------------------------------
# A replay of permute_staged.cu, block by block and phase by phase, from the launcher's parameters, on a
# byte array standing for device memory.
# ----------------------------------------------------------------------------------------------------


def _divide(n: int, magic: int, shift: int) -> int:
    """The kernel's division: a multiply-high by the host's magic number (shift -1: by 1)."""
    assert 0 <= n < 2**31
    return n if shift < 0 else (n * magic >> 32) >> shift


def _decode_into(index, magics, shifts, extents):
    """Coordinates of ``index`` over a decode's dimensions (fastest first), as the kernel divides."""
    coords = []
    for magic, shift, ext in zip(magics, shifts, extents):
        q = _divide(index, magic, shift)
        coords.append(index - q * ext)
        index = q
    return coords


def _dot(a, b):
    return sum(x * y for x, y in zip(a, b))


def replay(memory: np.ndarray, in_addr: int, out_addr: int, p, blocks: int, es: int, x_span, smem: int) -> None:
    for block in range(blocks):
        bid, ck = block, 0
        if p.chunks > 1:
            q = _divide(bid, p.chunk_magic, p.chunk_shift)
            ck, bid = bid - q * p.chunks, q
        in_base = out_base = 0
        for d in range(p.nn):
            q = _divide(bid, p.n_magic[d], p.n_shift[d])
            r = bid - q * p.n_size[d]
            in_base, out_base, bid = in_base + r * p.n_in[d], out_base + r * p.n_out[d], q
        cut_e = min(p.cut_ext, p.cut_size - ck * p.cut_ext)
        in_base += ck * p.cut_ext * p.cut_in
        out_base += ck * p.cut_ext * p.cut_out
        run_len = p.run_len // p.cut_ext * cut_e if p.cut_run else p.run_len
        out_len = p.out_len // p.cut_ext * cut_e if p.cut_out_run else p.out_len
        m = (out_addr + out_base * es) & 15
        shared = np.full(smem, 0xEE, np.uint8)
        sout = p.in_bytes
        # 1. fill: every word of every live run's window into its slot
        for r in range(p.runs):
            c = _decode_into(r, p.load_magic, p.load_shift, p.load_ext)
            if p.cut_load >= 0 and c[p.cut_load] >= cut_e:
                continue
            g = in_addr + (in_base + _dot(c, p.load_in)) * es
            mis, slot = g & 15, _dot(c, p.load_place)
            for w in range((mis + run_len * es + 15) // 16):
                at = g - mis + 16 * w
                assert x_span[0] <= at and at + 16 <= x_span[1], "a word read outside x's 16-byte span"
                assert slot + 16 * w + 16 <= sout, "a word filled past IN"
                shared[slot + 16 * w : slot + 16 * w + 16] = memory[at : at + 16]
        # 2. lines, piece by piece
        line_n = cut_e if p.cut_line else p.line_ext
        for li in range(p.lines * p.segs):
            j = _divide(li, p.segs_magic, p.segs_shift)
            x0 = (li - j * p.segs) * p.seg_len
            x1 = min(x0 + p.seg_len, line_n)
            c = _decode_into(j, p.enum_magic, p.enum_shift, p.enum_ext)
            if p.cut_enum >= 0 and c[p.cut_enum] >= cut_e:
                continue
            g = in_addr + (in_base + _dot(c, p.enum_in)) * es
            for x in range(x0, x1):
                src = _dot(c, p.enum_in_place) + x * p.line_in_step + ((g + x * p.line_in * es) & 15)
                dst = sout + m + _dot(c, p.enum_out_place) + x * es
                assert src + es <= sout and dst + es <= smem
                shared[dst : dst + es] = shared[src : src + es]
        # 3. drain
        out_bytes = out_len * es
        for item in range(p.rows * p.owords):
            j = _divide(item, p.owords_magic, p.owords_shift)
            w = item - j * p.owords
            first = 16 * w - m
            if first >= out_bytes:
                continue
            c = _decode_into(j, p.row_magic, p.row_shift, p.row_ext)
            if p.cut_row >= 0 and c[p.cut_row] >= cut_e:
                continue
            off, place = out_base + _dot(c, p.row_out), sout + _dot(c, p.row_place)
            dst = out_addr + off * es - m + 16 * w
            for s in range(16):
                if 0 <= first + s < out_bytes:
                    memory[dst + s] = shared[place + 16 * w + s]


def _replay_case(shape, dims, es, budget, in_shift=0, out_shift=0, view=None):
    """Lay x (a seeded, nonzero tensor, or ``view`` of it) and a poisoned output in a byte array at the
    given offsets from 16-byte boundaries, replay every block, and compare with torch's permute."""
    gen = torch.Generator().manual_seed(sum(shape) + es)
    base = torch.randint(1, 255, (int(np.prod(shape)) * es,), generator=gen, dtype=torch.uint8)
    x = base.view(DTYPES[es]).view(shape)
    if view is not None:
        x = view(x)
    p = plan.plan_permute(tuple(x.shape), tuple(x.stride()), tuple(dims), es)
    go = staged.staged_launch(p, es, budget)
    assert go is not None, (shape, dims, es, budget)
    params = cuda_permute.staged_params(p, go)
    in_addr = 4096 + in_shift
    out_addr = -(-(in_addr + base.numel()) // 16) * 16 + 4096 + out_shift
    memory = np.full(out_addr + base.numel() + 4096, 0xA5, np.uint8)
    x_bytes = base.numpy()
    memory[in_addr : in_addr + x_bytes.size] = x_bytes
    span = ((in_addr // 16) * 16, -(-(in_addr + x_bytes.size) // 16) * 16)
    replay(memory, in_addr + x.storage_offset() * es, out_addr, params, go.blocks, es, span, go.smem)
    want = x.permute(dims).contiguous().view(torch.uint8).reshape(-1).numpy()
    got = memory[out_addr : out_addr + want.size]
    assert np.array_equal(got, want), (shape, dims, es, budget)
    assert (memory[out_addr - 2048 : out_addr] == 0xA5).all() and (memory[out_addr + want.size :] == 0xA5).all()
    return go


@pytest.mark.parametrize("in_shift,out_shift", [(0, 0), (6, 2), (2, 10)])
def test_replay_bf16_short_input_run(in_shift, out_shift):
    # the suite case's pattern at a smaller size: a 3-element input run, output runs over 3 dimensions
    go = _replay_case((2, 3, 8, 6, 4, 3), (0, 4, 1, 3, 5, 2), 2, 4096, in_shift, out_shift)
    assert len(go.rows) == 1


@pytest.mark.parametrize("budget", [3000, 4096])
def test_replay_int8_cut_runs_with_a_partial_chunk(budget):
    # both runs off 16-byte boundaries; the 91-byte input run cut in chunks, the last one partial; the line
    # (the output's fastest dimension, 6) picks input runs, each element with its own misalignment
    shape, dims = (6, 2, 3, 5, 7, 13), (2, 1, 4, 5, 3, 0)
    go = _replay_case(shape, dims, 1, budget, in_shift=3, out_shift=5)
    assert go.chunk == 0 and 91 % go.extents[0] != 0
    assert cuda_permute.staged_params(_plan(shape, dims, 1), go).line_in % 16 != 0


@pytest.mark.parametrize("es", [1, 2, 4, 8])
def test_replay_every_element_size(es):
    _replay_case((8, 8, 2, 6), (3, 1, 2, 0), es, 2048, in_shift=es % 16, out_shift=(3 * es) % 16)


@pytest.mark.parametrize("dims", [(0, 3, 1, 2), (1, 3, 0, 2)])
def test_replay_strided_view(dims):
    # a sliced input: the storage offset and the padded strides go through the box decode
    _replay_case((4, 9, 10, 24), dims, 2, 2048, in_shift=4, view=lambda t: t[1:, :, 1:9, 4:])


def test_replay_random_sweep():
    rng = random.Random(11)
    done = 0
    for _ in range(600):
        if done == 16:
            break
        rank = rng.randint(3, 5)
        shape = tuple(rng.randint(2, 9) for _ in range(rank))
        dims = tuple(rng.sample(range(rank), rank))
        es = rng.choice((1, 2, 4))
        p = _plan(shape, dims, es)
        budget = rng.choice((512, 1024, 4096))
        if p.kind != "tiles" or staged.staged_launch(p, es, budget) is None:
            continue
        _replay_case(shape, dims, es, budget, rng.randrange(0, 16, es), rng.randrange(0, 16, es))
        done += 1
    assert done == 16


@pytest.mark.parametrize("field", ["line_in_step", "enum_out_place", "row_place"])
def test_replay_catches_a_wrong_place(field):
    # the replay is a real check: parameters off by one element fail it
    shape, dims = (2, 3, 8, 6, 4, 3), (0, 4, 1, 3, 5, 2)
    p = _plan(shape, dims, 2)
    go = staged.staged_launch(p, 2, 4096)
    params = cuda_permute.staged_params(p, go)
    if field == "line_in_step":
        params.line_in_step += 2
    else:
        getattr(params, field)[0] += 2
    n = int(np.prod(shape))
    memory = np.zeros(1 << 16, np.uint8)
    memory[: n * 2] = np.arange(n * 2) % 251 + 1
    try:
        replay(memory, 0, 32768, params, go.blocks, 2, (0, 1 << 16), go.smem)
    except (AssertionError, ValueError):
        return  # it ran out of its buffer: caught too
    want = torch.from_numpy(memory[: n * 2].copy()).view(torch.bfloat16).view(shape)
    want = want.permute(dims).contiguous().view(torch.uint8).reshape(-1).numpy()
    assert not np.array_equal(memory[32768 : 32768 + want.size], want)


# ----------------------------------------------------------------------------------------------------
# GPU
# ----------------------------------------------------------------------------------------------------

gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _nonzero(shape, dtype, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    n = int(np.prod(shape)) * torch.empty((), dtype=dtype).element_size()
    return torch.randint(1, 255, (n,), device="cuda", dtype=torch.uint8, generator=gen).view(dtype).view(shape)


def _exact(got, want):
    return torch.equal(got.contiguous().view(torch.uint8), want.contiguous().view(torch.uint8))


@gpu
@needs_cuda
@pytest.mark.parametrize(
    "dtype,shape,dims",
    [
        (torch.bfloat16, (32, 48, 47, 18, 10, 3), (0, 4, 1, 3, 5, 2)),
        (torch.int8, (28, 86, 14, 2, 40, 28), (0, 2, 4, 3, 5, 1)),
        (torch.int8, (6, 2, 3, 5, 7, 37), (2, 1, 4, 5, 3, 0)),
        (torch.float32, (5, 6, 7, 8), (3, 1, 0, 2)),
        (torch.float64, (9, 6, 17, 8), (3, 1, 0, 2)),
    ],
)
def test_gpu_staged_exact(dtype, shape, dims, monkeypatch):
    calls = []
    real = cuda_permute.nvrtc.launch
    monkeypatch.setattr(cuda_permute.nvrtc, "launch", lambda *a, **k: calls.append(a) or real(*a, **k))
    monkeypatch.setattr(tuning, "STAGED_ALL", True)
    cuda_permute.staged_params_of.cache_clear()
    try:
        x = _nonzero(shape, dtype)
        p = plan.plan_permute(tuple(x.shape), tuple(x.stride()), dims, x.element_size())
        assert tuning.staged_rule(p, x.element_size()) is not None
        out = torch.full_like(x.permute(dims).contiguous().view(torch.uint8), 0x5A).view(dtype)
        out = out.view(x.permute(dims).shape)
        tileflip.permute(x, dims, out)
        torch.cuda.synchronize()
        assert calls, "the staged kernel was not launched"
        assert _exact(out, x.permute(dims))
    finally:
        cuda_permute.staged_params_of.cache_clear()


@gpu
@needs_cuda
@pytest.mark.parametrize("offset", [1, 3, 8, 13])
def test_gpu_staged_output_offsets_and_nothing_around(offset):
    dims = (2, 1, 4, 5, 3, 0)
    x = _nonzero((6, 4, 5, 7, 9, 37), torch.int8, seed=offset)
    n = x.numel()
    buf = torch.full((n + 64,), 0x33, device="cuda", dtype=torch.int8)
    out = buf[offset : offset + n].view(x.permute(dims).shape)
    p = plan.plan_permute(tuple(x.shape), tuple(x.stride()), dims, 1)
    assert tuning.staged_rule(p, 1) is not None
    tileflip.permute(x, dims, out)
    assert _exact(out, x.permute(dims))
    assert (buf[:offset] == 0x33).all() and (buf[offset + n :] == 0x33).all()


@gpu
@needs_cuda
def test_gpu_staged_misaligned_and_strided_input():
    dims = (2, 1, 4, 5, 3, 0)
    base = _nonzero((6, 4, 5, 7, 9, 38), torch.int8, seed=5)
    x = base[..., 1:]  # 37-byte input runs 38 bytes apart, the first one byte past a boundary
    p = plan.plan_permute(tuple(x.shape), tuple(x.stride()), dims, 1)
    assert tuning.staged_rule(p, 1) is not None
    out = torch.full(x.permute(dims).shape, -7, dtype=x.dtype, device="cuda")
    tileflip.permute(x, dims, out)
    assert _exact(out, x.permute(dims))


@gpu
@needs_cuda
def test_gpu_staged_side_stream_and_triton_backend():
    dims = (0, 4, 1, 3, 5, 2)
    x = _nonzero((8, 12, 47, 18, 10, 3), torch.bfloat16, seed=2)
    want = x.permute(dims).contiguous()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        got = tileflip.permute(x, dims)
    s.synchronize()
    assert _exact(got, want)
    assert _exact(tileflip.permute(x, dims, backend="triton"), want)


def test_params_struct_matches_the_cu_file():
    # the .cu file's Params, field for field: names, order, array lengths and types
    text = cuda_permute.STAGED_CU_FILE.read_text()
    start = text.index("struct Params {")
    body = re.sub(r"//[^\n]*", "", text[start : text.index("};", start)])
    declared = []
    for kind, names in re.findall(r"\b(tf_i64|int|unsigned)\s+([^;]+);", body):
        for name in names.split(","):
            match = re.fullmatch(r"\s*(\w+)(?:\[(\d+)\])?\s*", name)
            declared.append((match[1], kind, int(match[2] or 1)))
    fields = []
    for name, ctype in cuda_permute._StagedParams._fields_:
        length = getattr(ctype, "_length_", 1)
        base = ctype._type_ if hasattr(ctype, "_length_") else ctype
        kind = {ctypes.c_int64: "tf_i64", ctypes.c_int32: "int", ctypes.c_uint32: "unsigned"}[base]
        fields.append((name, kind, length))
    assert fields == declared
    assert ctypes.sizeof(cuda_permute._StagedParams) % 8 == 0
