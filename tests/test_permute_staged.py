"""The staged permute (tileflip.staged, kernels/cuda/permute_staged.cu): the planner's boxes, the rule that
gives it launches, a CPU replay of the kernel's addressing from the launcher's parameters, and (GPU)
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
    # bf16 (32,48,47,18,10,3) (0,4,1,3,5,2): the box over (47,18,10,3) reads one run of 50760 bytes and
    # writes ten runs of 5076 (whole dimensions, no chunk).
    go = staged.staged_launch(_plan((32, 48, 47, 18, 10, 3), (0, 4, 1, 3, 5, 2), 2), 2)
    assert go.runs == (50760, 5076) and go.chunk == -1 and go.blocks == 32 * 48
    # gathered: the output's fastest dimension (47) is longer than the input's (3); one slot holds the run's
    # aligned window, 3174 words
    assert go.gather and go.pitch == go.smem == 3174 * 16
    # int8 (42,9,11,29,38,29) (2,1,4,5,3,0): 42 x 29 x a chunk of the 1102-long input run; the output is
    # one run of 1218 * chunk bytes.
    go = staged.staged_launch(_plan((42, 9, 11, 29, 38, 29), (2, 1, 4, 5, 3, 0), 1), 1)
    chunk = go.extents[go.chunk]
    assert go.runs == (chunk, 1218 * chunk) and go.out_rows == () and not go.gather
    assert go.smem <= staged.SMEM_BYTES and go.blocks == 11 * 9 * -(-1102 // chunk)


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
            # scattered: output rows step by whole 16-byte words (one shift for all of a block's rows);
            # gathered: the output run lies within the input run
            assert go.gather or all(out_strides[go.dims[k]] * es % 16 == 0 for k in go.out_rows)
            assert not go.gather or all(k < go.in_run for k in go.out_run)
            # the input run is contiguous: strides 1, e0, e0 e1, ...
            step = 1
            for k in range(go.in_run):
                assert p.in_strides[go.dims[k]] == step
                step *= p.sizes[go.dims[k]]
    assert seen > 50


def test_rule_takes_the_two_short_run_cases_and_leaves_wide_vectors():
    assert tuning.staged_rule(_plan((32, 48, 47, 18, 10, 3), (0, 4, 1, 3, 5, 2), 2), 2) is not None
    assert tuning.staged_rule(_plan((42, 9, 11, 29, 38, 29), (2, 1, 4, 5, 3, 0), 1), 1) is not None
    # 16-byte vectors on both sides of the tile kernel: left to it
    assert tuning.staged_rule(_plan((8, 4096, 32, 128), (0, 3, 2, 1), 2), 2) is None
    # the realigned-store kernel's case stays there
    p = _plan((11, 39, 29, 21, 42, 24), (5, 4, 2, 3, 1, 0), 1)
    assert tuning.realign_launch(p, 1) is not None and tuning.staged_rule(p, 1) is None


# ----------------------------------------------------------------------------------------------------
# A replay of permute_staged.cu's addressing, block by block, from the launcher's parameters, on a byte
# array standing for device memory.
# ----------------------------------------------------------------------------------------------------


def _divide(n: int, magic: int, shift: int) -> int:
    """The kernel's division: a multiply-high by the host's magic number (shift -1: by 1)."""
    assert 0 <= n < 2**31
    return n if shift < 0 else (n * magic >> 32) >> shift


def _block(p, block, out_addr, es):
    """The kernel's block_of: (in_base, out_base, cut_e, run_len, out_len, m)."""
    bid, ck = block, 0
    if p.chunks > 1:
        q = _divide(bid, p.chunk_magic, p.chunk_shift)
        ck, bid = bid - q * p.chunks, q
    in_base = out_base = 0
    for d in range(6):
        if d < p.nn:
            q = _divide(bid, p.n_magic[d], p.n_shift[d])
            r = bid - q * p.n_size[d]
            in_base += r * p.n_in[d]
            out_base += r * p.n_out[d]
            bid = q
    cut_e = min(p.cut_ext, p.cut_size - ck * p.cut_ext)
    in_base += ck * p.cut_ext * p.cut_in
    out_base += ck * p.cut_ext * p.cut_out
    run_len = p.run_len // p.cut_ext * cut_e if p.cut_run else p.run_len
    out_len = p.out_len // p.cut_ext * cut_e if p.cut_out_run else p.out_len
    return in_base, out_base, cut_e, run_len, out_len, (out_addr + out_base * es) & 15


def _decode_into(index, magics, shifts, extents):
    """Coordinates of ``index`` over a decode's dimensions (fastest first), as the kernel divides."""
    coords = []
    for magic, shift, ext in zip(magics, shifts, extents):
        q = _divide(index, magic, shift)
        coords.append(index - q * ext)
        index = q
    return coords


def _run_words(memory, p, in_addr, es, in_base, cut_e, run_len, x_span):
    """Every (load-dimension place, word index, lo, hi, word) the load phase reads."""
    run_bytes = run_len * es
    for item in range(p.runs * p.words):
        r = _divide(item, p.words_magic, p.words_shift)
        w = item - r * p.words
        c = _decode_into(r, p.load_magic, p.load_shift, p.load_ext)
        if p.cut_load >= 0 and c[p.cut_load] >= cut_e:
            continue
        off = in_base + sum(ci * si for ci, si in zip(c, p.load_in))
        so = sum(ci * si for ci, si in zip(c, p.load_sm))
        g = in_addr + off * es
        mis = g & 15
        start = 16 * w - mis
        a, b = max(start, 0), min(start + 16, run_bytes)
        if a >= b:
            continue
        word_at = g - mis + 16 * w
        assert x_span[0] <= word_at and word_at + 16 <= x_span[1], "a word read outside x's 16-byte span"
        yield so, w, start, a, b, memory[word_at : word_at + 16].copy()


def replay(memory: np.ndarray, in_addr: int, out_addr: int, params, blocks: int, es: int, x_span,
           gather: bool = False) -> None:  # fmt: skip
    """permute_staged.cu's scatter (or gather) kernel, block by block, on a byte array for device memory."""
    p = params
    for block in range(blocks):
        in_base, out_base, cut_e, run_len, out_len, m = _block(p, block, out_addr, es)
        shared = np.full(p.pitch * 4096, 0xEE, np.uint8)
        words = _run_words(memory, p, in_addr, es, in_base, cut_e, run_len, x_span)
        if gather:
            for so, w, start, a, b, word in words:
                shared[so + 16 * w : so + 16 * w + 16] = word
        else:
            for so, w, start, a, b, word in words:
                i = a // es
                c = _decode_into(i, p.run_magic, p.run_shift, p.run_ext)
                for s in range(a - start, b - start, es):
                    pos = so + sum(ci * si for ci, si in zip(c, p.run_sm))
                    shared[pos * es + m : pos * es + m + es] = word[s : s + es]
                    i += 1
                    c = _decode_into(i, p.run_magic, p.run_shift, p.run_ext)
        out_bytes = out_len * es
        for item in range(p.rows * p.owords):
            j = _divide(item, p.owords_magic, p.owords_shift)
            w = item - j * p.owords
            c = _decode_into(j, p.row_magic, p.row_shift, p.row_ext)
            if p.cut_row >= 0 and c[p.cut_row] >= cut_e:
                continue
            off = out_base + sum(ci * si for ci, si in zip(c, p.row_out))
            row_m = (out_addr + off * es) & 15 if gather else m
            first = 16 * w - row_m
            dst = out_addr + off * es - row_m + 16 * w
            if gather:
                in_off = in_base + sum(ci * si for ci, si in zip(c, p.row_in))
                place = sum(ci * si for ci, si in zip(c, p.row_sm))
                for s in range(0, 16, es):
                    if 0 <= first + s < out_bytes:
                        e = _decode_into((first + s) // es, p.orun_magic, p.orun_shift, p.orun_ext)
                        at = place + sum(ci * si for ci, si in zip(e, p.orun_sm)) + ((in_addr + in_off * es) & 15)
                        memory[dst + s : dst + s + es] = shared[at : at + es]
            else:
                row = sum(ci * si for ci, si in zip(c, p.row_sm))
                val = shared[row * es + 16 * w : row * es + 16 * w + 16]
                for s in range(16):
                    if 0 <= first + s < out_bytes:
                        memory[dst + s] = val[s]


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
    x_offset = x.storage_offset() * es
    span = ((in_addr // 16) * 16, -(-(in_addr + x_bytes.size) // 16) * 16)
    replay(memory, in_addr + x_offset, out_addr, params, go.blocks, es, span, go.gather)
    want = x.permute(dims).contiguous().view(torch.uint8).reshape(-1).numpy()
    got = memory[out_addr : out_addr + want.size]
    assert np.array_equal(got, want), (shape, dims, es, budget)
    assert (memory[out_addr - 2048 : out_addr] == 0xA5).all() and (memory[out_addr + want.size :] == 0xA5).all()
    return go


@pytest.mark.parametrize("in_shift,out_shift", [(0, 0), (6, 2), (2, 10)])
def test_replay_bf16_short_input_run(in_shift, out_shift):
    # the suite case's pattern at a tenth of its size: a 3-element input run, output runs over 3 dims
    go = _replay_case((2, 3, 8, 6, 4, 3), (0, 4, 1, 3, 5, 2), 2, 4096, in_shift, out_shift)
    assert go.chunk == -1 and len(go.out_rows) == 1


@pytest.mark.parametrize("budget", [1500, 2048])
def test_replay_int8_chunked_input_run_with_a_partial_chunk(budget):
    # both runs off 16-byte boundaries; the 91-byte input run cut in chunks, the last one partial
    go = _replay_case((6, 2, 3, 5, 7, 13), (2, 1, 4, 5, 3, 0), 1, budget, in_shift=3, out_shift=5)
    assert go.chunk >= 0 and go.in_run == 1 and 91 % go.extents[go.chunk] != 0


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
    for _ in range(400):
        if done == 12:
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
    assert done == 12


@pytest.mark.parametrize("form", ["scatter", "gather"])
def test_replay_catches_a_wrong_shared_stride(form):
    # the replay is a real check: a box whose places are off by one element along the moving side fails it
    shape, dims = ((2, 3, 8, 6, 4, 3), (0, 4, 1, 3, 5, 2)) if form == "gather" else ((12, 4, 10, 11), (1, 0, 3, 2))
    p = _plan(shape, dims, 2)
    go = staged.staged_launch(p, 2, 4096)
    assert go.gather == (form == "gather")
    params = cuda_permute.staged_params(p, go)
    if go.gather:
        params.orun_sm[0] += 2
    else:
        params.run_sm[0] += 1
    n = int(np.prod(shape))
    memory = np.zeros(1 << 16, np.uint8)
    memory[: n * 2] = np.arange(n * 2) % 251 + 1
    replay(memory, 0, 32768, params, go.blocks, 2, (0, 1 << 16), go.gather)
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
        (torch.int8, (42, 9, 11, 29, 38, 29), (2, 1, 4, 5, 3, 0)),
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
