"""The CUDA kernel for 1-byte permutes whose output rows start at any byte (kernels/cuda/permute_realign.cu):
which launches it takes (``tuning.realign_launch``), its parameters checked by an emulation of its
addressing on the CPU, and exact bits on the GPU."""

import pytest
import torch
from helpers import assert_bits_equal, poisoned, random_bits

import tileflip
from tileflip import plan, tuning
from tileflip.kernels.cuda import permute as cuda_permute
from tileflip.plan.launch import REALIGN_TILE

# (shape, dims) of int8 permutes the kernel takes: the suite's case at a smaller size (A of 1008 bytes: a
# tail tile of 48), a batch of one dimension, a batch of two
TAKEN = [
    ((3, 13, 11, 7, 42, 24), (5, 4, 2, 3, 1, 0)),
    ((3, 9, 250, 2048), (0, 3, 1, 2)),
    ((3, 2, 9, 250, 1024), (1, 0, 4, 2, 3)),
]


def _plan(shape, dims, element_size=1):
    strides = tuple(torch.empty(shape).stride()) if shape else ()
    return plan.plan_permute(tuple(shape), strides, tuple(dims), element_size)


@pytest.mark.parametrize("shape, dims", TAKEN)
def test_the_kernel_takes_long_odd_output_rows_of_bytes(shape, dims):
    p = _plan(shape, dims)
    go = tuning.realign_launch(p, 1)
    assert go is not None and go.vec[0] == 16 and go.vec[1] < 16
    assert cuda_permute.params_of(p, go) is not None


def test_the_suite_case_takes_it():
    assert tuning.realign_launch(_plan((11, 39, 29, 21, 42, 24), (5, 4, 2, 3, 1, 0)), 1) is not None


@pytest.mark.parametrize(
    "shape, dims, element_size, why",
    [
        ((5, 37, 9, 40000), (0, 3, 2, 1), 1, "output rows of 333 bytes: below REALIGN_MIN_B"),
        ((3, 13, 11, 7, 42, 24), (5, 4, 2, 3, 1, 0), 2, "2-byte elements"),
        ((9, 1003, 48, 64), (0, 3, 2, 1), 1, "output rows 16-byte aligned: Triton stores 16-byte vectors"),
        ((3, 70, 37, 48), (0, 3, 1, 2), 1, "axis A folds a second dimension: not one input run"),
        ((3, 13, 11, 7, 42, 23), (5, 4, 2, 3, 1, 0), 1, "input rows of 966 bytes: pieces off 16-byte boundaries"),
        ((3, 4096, 24), (0, 2, 1), 1, "the inner dimension kept is no transposed tile"),
    ],
)  # fmt: skip
def test_the_kernel_leaves_other_launches_to_triton(shape, dims, element_size, why):
    p = _plan(shape, dims, element_size)
    assert p.kind != "tiles" or tuning.realign_launch(p, element_size) is None, why


def test_output_rows_shorter_than_the_minimum_stay_with_triton():
    p = _plan(*TAKEN[0])
    go = tuning.realign_launch(p, 1)
    size_b = 1
    for d in go.b_dims:
        size_b *= p.sizes[d]
    assert tuning.realign_launch(p, 1, min_b=size_b) is not None
    assert tuning.realign_launch(p, 1, min_b=size_b + 1) is None


def _decode(i, sizes, strides):
    """The kernel's decode of linear indices ``i`` (a tensor) over dimensions innermost first."""
    off = torch.zeros_like(i)
    for d, (s, st) in enumerate(zip(sizes, strides)):
        off += (i % s if d < len(sizes) - 1 else i) * st
        i = i // s
    return off


def _emulated(p, out_address: int) -> torch.Tensor:
    """The input offset of every output byte as the kernel's blocks write it, worked out from the
    launcher's parameters as its blocks do (block order, tiles, row tables, pieces from the row start's
    misalignment); -1 where no block writes, and a byte written twice fails."""
    params, blocks = cuda_permute.params_of(p, tuning.realign_launch(p, 1, min_b=1))
    f = {name: getattr(params, name) for name, _ in cuda_permute._Params._fields_}
    ta, step = REALIGN_TILE
    a_dec = (f["a_sizes"][: f["na"]], f["a_out"][: f["na"]])
    b_dec = (f["b_sizes"][: f["nb"]], f["b_in"][: f["nb"]])
    n_dec = f["n_sizes"][: f["nn"]]
    numel = f["asz"] * f["bsz"] * (blocks // (f["tiles_a"] * f["tiles_b"]))
    writes = torch.full((numel,), -1, dtype=torch.int64)
    q = torch.arange(step)  # byte of the block's piece of a row: 16 * j + s
    for block in range(blocks):
        rest = block // f["tiles_a"]
        a0, b0, n = (block % f["tiles_a"]) * ta, (rest % f["tiles_b"]) * step, torch.tensor([rest // f["tiles_b"]])
        in_n = _decode(n, n_dec, f["n_in"][: f["nn"]]) if n_dec else 0
        out_n = _decode(n, n_dec, f["n_out"][: f["nn"]]) if n_dec else 0
        a = torch.arange(a0, min(a0 + ta, f["asz"]))
        start = out_n + _decode(a, *a_dec)
        b = b0 - ((out_address + start) % 32)[:, None] + q[None, :]
        ok = (b >= 0) & (b < f["bsz"])
        o = (start[:, None] + b)[ok]
        assert bool((writes[o] == -1).all()) and o.unique().numel() == o.numel(), "a byte written twice"
        writes[o] = (in_n + _decode(b.clamp(min=0), *b_dec) + a[:, None])[ok]
    return writes


@pytest.mark.parametrize("out_address", [0, 13, 31])
@pytest.mark.parametrize("shape, dims", TAKEN[:1] + [((2, 2, 3, 41, 576), (0, 4, 1, 2, 3))])
def test_emulated_blocks_write_every_output_byte_from_its_input_byte(shape, dims, out_address):
    # the second case's rows are 246 bytes: short, to emulate quickly, and their last pieces lie past
    # size_b / STEP tiles (the grid's extra tile for the rows' shift)
    p = _plan(shape, dims)
    assert tuning.realign_launch(p, 1, min_b=1) is not None
    writes = _emulated(p, out_address)
    numel = torch.Size(shape).numel()
    expected = torch.arange(numel).view(shape).permute(dims).reshape(-1)  # output offset -> input offset
    assert torch.equal(writes, expected)


def test_plan_text_names_the_cuda_kernel():
    from tileflip import explain

    text = explain.permute_text((11, 39, 29, 21, 42, 24), (5, 4, 2, 3, 1, 0), dtype="int8")
    assert "CUDA realigned-store kernel" in text and "one output run" in text
    assert "CUDA" not in explain.permute_text((11, 39, 29, 21, 42, 24), (5, 4, 2, 3, 1, 0), dtype="bfloat16")


# --------------------------------------------------------------------------------------------------
# On the GPU
# --------------------------------------------------------------------------------------------------


def _forbid(monkeypatch, module, name):
    def refuse(*args, **kwargs):
        raise AssertionError(f"{module.__name__}.{name} was called")

    monkeypatch.setattr(module, name, refuse)


@pytest.mark.gpu
@pytest.mark.parametrize("shape, dims", TAKEN)
def test_exact_bits_through_the_cuda_kernel(shape, dims, monkeypatch):
    from tileflip.kernels.triton import permute as triton_permute

    _forbid(monkeypatch, triton_permute, "launch")  # the call must take the CUDA kernel
    x = random_bits(shape, torch.int8, "cuda", seed=1)
    out = poisoned(tuple(shape[d] for d in dims), torch.int8, "cuda")
    tileflip.permute(x, dims, out)
    assert_bits_equal(out, x.permute(dims).contiguous())


@pytest.mark.gpu
@pytest.mark.parametrize("offset", [1, 7, 16, 29])
def test_output_off_any_boundary(offset, monkeypatch):
    from tileflip.kernels.triton import permute as triton_permute

    _forbid(monkeypatch, triton_permute, "launch")
    shape, dims = TAKEN[0]
    x = random_bits(shape, torch.int8, "cuda", seed=2)
    out_shape = tuple(shape[d] for d in dims)
    buf = poisoned((x.numel() + 64,), torch.int8, "cuda")
    out = buf[offset : offset + x.numel()].view(out_shape)
    tileflip.permute(x, dims, out)
    assert_bits_equal(out, x.permute(dims).contiguous())
    assert_bits_equal(buf[:offset], poisoned((offset,), torch.int8, "cuda"))  # nothing written around it
    rest = buf[offset + x.numel() :]
    assert_bits_equal(rest, poisoned(tuple(rest.shape), torch.int8, "cuda"))


@pytest.mark.gpu
def test_input_off_a_16_byte_boundary_takes_triton(monkeypatch):
    shape, dims = TAKEN[0]
    base = random_bits((torch.Size(shape).numel() + 16,), torch.int8, "cuda", seed=3)
    x = base[1 : 1 + torch.Size(shape).numel()].view(shape)
    assert x.data_ptr() % 16 and tuning.realign_launch(_plan(shape, dims), 1) is not None
    _forbid(monkeypatch, cuda_permute, "launch")
    out = tileflip.permute(x, dims)
    assert_bits_equal(out, x.permute(dims).contiguous())


@pytest.mark.gpu
def test_backend_triton_keeps_the_triton_kernel(monkeypatch):
    _forbid(monkeypatch, cuda_permute, "launch")
    shape, dims = TAKEN[0]
    x = random_bits(shape, torch.int8, "cuda", seed=4)
    assert_bits_equal(tileflip.permute(x, dims, backend="triton"), x.permute(dims).contiguous())


@pytest.mark.gpu
def test_runs_on_the_current_stream():
    shape, dims = TAKEN[1]
    x = random_bits(shape, torch.int8, "cuda", seed=5)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out = tileflip.permute(x, dims)
        expected = x.permute(dims).contiguous()
    stream.synchronize()
    assert_bits_equal(out, expected)
