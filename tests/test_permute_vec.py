"""The CUDA vec permute (``cuda/permute.cu``): its plans, its parameter block, its refusals, and on a GPU
exact bits for runs at every alignment, tails, batches and strided inputs, with the bytes around the
output untouched."""

import ctypes
import random
import re

import pytest
import torch
from helpers import assert_bits_equal, poisoned, random_bits

import tileflip
from tileflip import explain, ops, plan, tuning
from tileflip.kernels import cuda_permute


def _plan(shape, dims, element_size, strides=None):
    if strides is None:
        strides = torch.empty(shape, device="meta").stride()
    return plan.plan_permute(tuple(shape), tuple(strides), dims, element_size)


# (shape, dims, dtype): each one the vec permute takes; the comment says what it exercises
VEC_CASES = [
    ((5, 13, 7, 9, 20, 24), (5, 4, 2, 3, 1, 0), torch.int8),  # output rows of 4095 bytes: every alignment
    ((6, 5, 7, 29, 13, 131), (2, 1, 4, 5, 3, 0), torch.int8),  # odd input rows (1703 B) and output rows (174 B)
    ((3, 86, 4, 2, 40, 28), (0, 2, 4, 3, 5, 1), torch.int8),  # 86 rows of 128: a block part empty; 3-dim batch
    ((3, 200, 5, 70), (0, 3, 2, 1), torch.bfloat16),  # 140-byte input rows, misaligned output rows
    ((4, 5, 70, 3, 130), (1, 4, 0, 2, 3), torch.bfloat16),  # 2-byte elements, tails on both axes
    ((7, 300, 133), (2, 0, 1), torch.int8),  # A of one dimension (133 B), B of two
    ((257, 129), (1, 0), torch.int8),  # a thin 2-D transpose planned as tiles
]


@pytest.mark.parametrize("shape,dims,dtype", VEC_CASES, ids=[str(c[0]) for c in VEC_CASES])
def test_vec_cases_are_taken_and_preferred(shape, dims, dtype):
    es = torch.empty((), dtype=dtype).element_size()
    p = _plan(shape, dims, es)
    go = tuning.vec_permute_launch(p, es)
    assert go is not None
    assert go.size_a * es >= tuning.VEC_PERMUTE_ROW_BYTES and go.size_b >= tuning.VEC_PERMUTE_MIN_ROWS
    assert tuning.prefers_vec_permute(p, es)  # the tile kernel moves under 16 bytes a vector on a side
    assert min(tuning.permute_launch(p, es).vec) * es < tuning.VECTOR_BYTES


def test_axes_of_the_suites_misaligned_int8_case():
    # int8 (11,39,29,21,42,24) by (5,4,2,3,1,0): the input's 1008-byte run on A, the output's 261261 on B
    p = _plan((11, 39, 29, 21, 42, 24), (5, 4, 2, 3, 1, 0), 1)
    go = tuning.vec_permute_launch(p, 1)
    assert (go.a_dims, go.b_dims, go.batch_dims) == ((0, 1), (4, 3, 2), ())
    assert (go.size_a, go.size_b, go.tiles_a, go.tiles_b) == (1008, 261261, 8, 2042)


@pytest.mark.parametrize(
    "shape,dims,es,why",
    [
        ((64, 48, 40), (2, 1, 0), 4, "4-byte elements"),
        ((3, 130, 67), (0, 2, 1), 1, "A (the input's run) of 67 bytes"),
        ((5, 64, 70), (2, 1, 0), 1, "A of 70 bytes"),
        ((2, 3, 5, 200, 67), (4, 3, 1, 0, 2), 2, "B of 30 rows: the output's next dimension is A's"),
        ((4, 50, 128), (0, 2, 1), 1, "B of 50 rows"),
        ((8, 16, 64), (0, 1, 2), 1, "a copy"),
    ],
)
def test_plans_it_does_not_take(shape, dims, es, why):
    p = _plan(shape, dims, es)
    assert tuning.vec_permute_launch(p, es) is None, why
    assert not tuning.prefers_vec_permute(p, es)
    assert ops.vec_permute_refusal(p, es)


def test_no_unit_stride_input_dimension():
    # every input dimension strided (a view of every other element): no contiguous run for A
    p = _plan((40, 300), (1, 0), 1, strides=(600, 2))
    assert tuning.vec_permute_axes(p.sizes, p.in_strides, 1) is None
    assert tuning.vec_permute_launch(p, 1) is None


def _decode(index, sizes, magics, shifts, strides, n):
    """The kernel's decode (permute.cu), over its parameter block's arrays."""
    off = 0
    for d in range(n):
        if d + 1 >= n:
            return off + index * strides[d]
        q = ((index * magics[d]) >> 32) >> shifts[d]
        off += (index - q * sizes[d]) * strides[d]
        index = q
    return off


@pytest.mark.parametrize("shape,dims,dtype", VEC_CASES, ids=[str(c[0]) for c in VEC_CASES])
def test_parameter_block_moves_every_element_where_permute_puts_it(shape, dims, dtype):
    """Replays the kernel's index arithmetic over its parameter block: input offset a + in_b(b) + n_in(n)
    and output offset b + out_a(a) + n_out(n) for every (a, b, n) send each input element where
    x.permute(dims) puts it."""
    es = torch.empty((), dtype=dtype).element_size()
    x = torch.arange(torch.Size(shape).numel(), dtype=torch.int64).reshape(shape)
    p = _plan(shape, dims, es, x.stride())
    go = tuning.vec_permute_launch(p, es)
    a = cuda_permute._Args.from_buffer_copy(cuda_permute.args_of(p, go))
    assert (a.size_a, a.size_b, a.tiles_a, a.tiles_b) == (go.size_a, go.size_b, go.tiles_a, go.tiles_b)
    rows = [_decode(b, a.b_size, a.b_magic, a.b_shift, a.b_in, a.nb) for b in range(go.size_b)]
    cols = [_decode(c, a.a_size, a.a_magic, a.a_shift, a.a_out, a.na) for c in range(go.size_a)]
    n_in = [_decode(n, a.n_size, a.n_magic, a.n_shift, a.n_in, a.nn) for n in range(go.batch)]
    n_out = [_decode(n, a.n_size, a.n_magic, a.n_shift, a.n_out, a.nn) for n in range(go.batch)]
    src = torch.tensor(n_in)[:, None, None] + torch.tensor(rows)[None, :, None] + torch.arange(go.size_a)
    dst = torch.tensor(n_out)[:, None, None] + torch.arange(go.size_b)[None, :, None] + torch.tensor(cols)
    out = torch.full((x.numel(),), -1, dtype=torch.int64)
    out[dst.flatten()] = x.flatten()[src.flatten()]
    assert torch.equal(out, x.permute(dims).flatten())


def test_parameter_block_matches_the_kernels_struct():
    source = cuda_permute.CU_FILE.read_text()
    size = int(re.search(r"static_assert\(sizeof\(PermuteVecArgs\) == (\d+)", source).group(1))
    assert ctypes.sizeof(cuda_permute._Args) == size
    fields = re.search(r"struct PermuteVecArgs \{(.*?)\};", source, re.S).group(1)
    names = re.findall(r"(\w+)(?:\[\w+\])?[,;]", re.sub(r"//.*", "", fields))
    assert names == ["in", "out", *(n for n, _ in cuda_permute._Args._fields_[2:])]


def test_plan_text_names_the_cuda_kernel():
    text = explain.permute_text((11, 39, 29, 21, 42, 24), (5, 4, 2, 3, 1, 0), dtype="int8")
    assert "CUDA vec kernel (backend 'cuda-vec'; auto runs it" in text
    assert "B (contiguous output run): dim 4 (11) x dim 3 (39) x dim 2 (609) = 261261" in text
    assert "CUDA vec kernel" not in explain.permute_text((8, 64, 32, 128), (0, 2, 1, 3), dtype="bfloat16")


def test_cuda_vec_on_a_cpu_tensor_is_refused():
    x = torch.zeros(3, 200, 5, 70, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="backend='cuda-vec' needs a CUDA tensor"):
        tileflip.permute(x, (0, 3, 2, 1), backend="cuda-vec")


def test_auto_on_cpu_never_needs_cuda(monkeypatch):
    monkeypatch.setattr(cuda_permute, "launch", None)  # any call would fail
    x = random_bits((257, 129), torch.int8)
    assert_bits_equal(tileflip.permute(x, (1, 0), backend="auto"), x.t())


# --- on a GPU ---------------------------------------------------------------------------------------


def _guarded_out(shape, dtype, offset_elements):
    """A poisoned contiguous output that starts ``offset_elements`` into a poisoned buffer with 64 guard
    bytes on each side: (out, buffer)."""
    es = torch.empty((), dtype=dtype).element_size()
    numel = torch.Size(shape).numel()
    guard = 64 // es
    buffer = poisoned((numel + 2 * guard + offset_elements,), dtype, "cuda")
    return buffer[guard + offset_elements: guard + offset_elements + numel].view(shape), buffer


def _check_guards(buffer, out):
    raw = buffer.view(torch.uint8)
    start = (out.data_ptr() - buffer.data_ptr())
    stop = start + out.numel() * out.element_size()
    assert bool((raw[:start] == 0xA5).all()) and bool((raw[stop:] == 0xA5).all()), "bytes outside out were written"


@pytest.mark.gpu
@pytest.mark.parametrize("offset", [0, 1, 7])
@pytest.mark.parametrize("shape,dims,dtype", VEC_CASES, ids=[str(c[0]) for c in VEC_CASES])
def test_exact_at_every_output_alignment(shape, dims, dtype, offset):
    x = random_bits(shape, dtype, "cuda", seed=offset)
    out, buffer = _guarded_out(tuple(shape[d] for d in dims), dtype, offset)
    assert tileflip.permute(x, dims, out, backend="cuda-vec") is out
    assert_bits_equal(out, x.permute(dims))
    _check_guards(buffer, out)


@pytest.mark.gpu
@pytest.mark.parametrize("view", ["input_offset", "sliced_batch", "expanded_batch", "strided_b"])
def test_exact_on_strided_inputs(view):
    base = random_bits((4, 90, 3, 150), torch.int8, "cuda", seed=3)
    if view == "input_offset":  # every input row starts 1 byte later
        x = random_bits((4 * 90 * 3 * 150 + 1,), torch.int8, "cuda", seed=4)[1:].view(4, 90, 3, 150)
    elif view == "sliced_batch":
        x = base[::2]
    elif view == "expanded_batch":
        x = base[:1].expand(4, 90, 3, 150)
    else:  # B's dimension steps over every other row of the input
        x = random_bits((4, 180, 3, 150), torch.int8, "cuda", seed=5)[:, ::2]
    dims = (0, 3, 2, 1)
    p = _plan(x.shape, dims, 1, x.stride())
    assert tuning.vec_permute_launch(p, 1) is not None
    out = poisoned(tuple(x.shape[d] for d in dims), x.dtype, "cuda")
    tileflip.permute(x, dims, out, backend="cuda-vec")
    assert_bits_equal(out, x.permute(dims))


@pytest.mark.gpu
def test_auto_takes_it_where_preferred(monkeypatch):
    calls = []
    real = cuda_permute.launch
    monkeypatch.setattr(cuda_permute, "launch", lambda *a: calls.append(a) or real(*a))
    x = random_bits((6, 5, 7, 29, 13, 131), torch.int8, "cuda")
    y = tileflip.permute(x, (2, 1, 4, 5, 3, 0))
    assert len(calls) == 1
    assert_bits_equal(y, x.permute(2, 1, 4, 5, 3, 0))
    monkeypatch.setattr(tuning, "VEC_PERMUTE", False)
    tileflip.permute(x, (2, 1, 4, 5, 3, 0))
    assert len(calls) == 1


@pytest.mark.gpu
def test_refused_where_it_does_not_apply():
    x = torch.zeros(64, 48, 40, device="cuda")
    with pytest.raises(ValueError, match=r"backend='cuda-vec' cannot take this permute: it moves 1- and 2-byte"):
        tileflip.permute(x, (2, 1, 0), backend="cuda-vec")


@pytest.mark.gpu
def test_random_sweep():
    rng = random.Random(1)
    taken = 0
    for i in range(400):
        rank = rng.randint(2, 6)
        shape = [rng.choice([2, 3, 5, 7, 16, 31, 64, 67, 130]) for _ in range(rank)]
        while torch.Size(shape).numel() > 4_000_000:
            shape[rng.randrange(rank)] = 2
        dims = list(range(rank))
        rng.shuffle(dims)
        dtype = rng.choice([torch.int8, torch.bfloat16])
        x = random_bits(tuple(shape), dtype, "cuda", seed=i)
        if tuning.vec_permute_launch(_plan(shape, dims, x.element_size()), x.element_size()) is None:
            continue
        out = poisoned(tuple(shape[d] for d in dims), dtype, "cuda")
        tileflip.permute(x, dims, out, backend="cuda-vec")
        assert_bits_equal(out, x.permute(dims))
        taken += 1
    assert taken >= 40
