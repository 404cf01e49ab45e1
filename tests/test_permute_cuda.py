"""The CUDA C++ permute kernel (``permute_vec``, ``backend="cuda-vec"``): the launch ``tileflip.tuning``
builds for it, checked on the CPU by replaying the offsets it decodes, and the kernel itself on a GPU,
bit for bit against ``x.permute(dims).contiguous()``, with the output inside a larger poisoned buffer
(so that a missed byte and a write past either end both show) and at every alignment."""

from __future__ import annotations

import random

import pytest
import torch
from conftest import HAS_GPU
from helpers import assert_bits_equal, random_bits

import tileflip
from tileflip import plan, tuning

POISON = 0xA5
GUARD = 64  # poisoned bytes on each side of the output

# The random suite's int8 cases whose runs are under 16 bytes or not whole 16-byte vectors on one side
# (the tile kernel's stores or loads move 1 to 4 bytes there).
ODD_RUNS = [
    ((11, 39, 29, 21, 42, 24), (5, 4, 2, 3, 1, 0)),
    ((28, 86, 14, 2, 40, 28), (0, 2, 4, 3, 5, 1)),
    ((42, 9, 11, 29, 38, 29), (2, 1, 4, 5, 3, 0)),
]


def _plan(shape, dims, element_size, strides=None):
    strides = strides or plan.contiguous_strides(shape)
    return plan.plan_permute(tuple(shape), tuple(strides), tuple(dims), element_size)


def _decode(index, sizes, strides):
    off = 0
    for i, (size, stride) in enumerate(zip(sizes, strides)):
        if i == len(sizes) - 1:
            off += index * stride
        else:
            off += (index % size) * stride
            index //= size
    return off


def _replay(x: torch.Tensor, dims) -> torch.Tensor:
    """The output permute_vec writes, from the offsets its launch decodes: input element
    b_off(b) + n_in(n) + a to output element a_off(a) + n_out(n) + b, for every (n, b, a)."""
    p = _plan(x.shape, dims, x.element_size(), x.stride())
    go = tuning.permute_vec_launch(p, x.element_size())
    flat_in = torch.as_strided(x, (x.untyped_storage().nbytes() // x.element_size(),), (1,), 0)
    out = torch.full((x.numel(),), -1, dtype=torch.int64)
    values = flat_in.to(torch.int64)
    for n in range(go.batch):
        n_in, n_out = _decode(n, go.n[0], go.n[1]), _decode(n, go.n[0], go.n[2])
        for b in range(go.size_b):
            src = _decode(b, *go.b) + n_in + x.storage_offset()
            for a in range(go.size_a):
                dst = _decode(a, *go.a) + n_out + b
                assert out[dst] == -1, "an output element written twice"
                out[dst] = values[src + a]
    return out.view(tuple(x.shape[d] for d in dims))


def _small_case(rng: random.Random):
    rank = rng.randint(3, 5)
    shape = [rng.choice([2, 3, 5, 7, 9, 13, 20]) for _ in range(rank)]
    dims = list(range(rank))
    while dims[-1] == rank - 1:
        rng.shuffle(dims)
    return tuple(shape), tuple(dims)


def test_launch_decodes_every_element_once_to_its_place():
    """On the CPU: the offsets permute_vec's launch decodes move each input element to its place in
    x.permute(dims), for contiguous, sliced and expanded inputs."""
    rng = random.Random(3)
    taken = 0
    for i in range(40):
        shape, dims = _small_case(rng)
        x = random_bits(shape, torch.int8, seed=i)
        view = rng.choice(["contiguous", "sliced", "expanded"])
        if view == "sliced":
            x = random_bits((shape[0] + 1, *shape[1:]), torch.int8, seed=i)[1:]
        elif view == "expanded":
            x = random_bits((1, *shape[1:]), torch.int8, seed=i).expand(shape)
        p = _plan(x.shape, dims, 1, x.stride())
        if tuning.permute_vec_launch(p, 1) is None:
            continue
        taken += 1
        assert torch.equal(_replay(x, dims), x.permute(dims).contiguous().to(torch.int64))
    assert taken >= 25


# (output run on B, input run on A) of ODD_RUNS' launches, in elements
ODD_RUN_AXES = [(11 * 39 * 609, 24 * 42), (86, 28 * 40 * 2 * 14), (42 * 29, 1102)]


@pytest.mark.parametrize("case, axes", list(zip(ODD_RUNS, ODD_RUN_AXES)))
def test_axes_of_the_odd_run_cases(case, axes):
    """B holds the output's contiguous run up to a tile-row count, A the input's contiguous run."""
    go = tuning.permute_vec_launch(_plan(*case, 1), 1)
    assert (go.size_b, go.size_a) == axes
    assert go.programs == go.batch * -(-go.size_b // 128) * -(-go.size_a // 128)


def test_auto_picks_permute_vec_only_under_its_rule(monkeypatch):
    for shape, dims in ODD_RUNS:  # measured: never faster than the tile kernel, so the rule is off
        assert tuning.permute_backend(_plan(shape, dims, 1), 1) == "triton"
    monkeypatch.setattr(tuning, "PERMUTE_VEC_BELOW", 16)
    for shape, dims in ODD_RUNS:
        assert tuning.permute_backend(_plan(shape, dims, 1), 1) == "cuda-vec"
    # 16-byte vectors on both sides: the tile kernel
    assert tuning.permute_backend(_plan((8, 4096, 32, 128), (0, 3, 2, 1), 2), 2) == "triton"
    # 4-byte elements, and a kept inner dimension: never permute_vec
    assert tuning.permute_vec_launch(_plan((11, 39, 29), (2, 1, 0), 4), 4) is None
    assert tuning.permute_vec_launch(_plan((11, 39, 29), (1, 0, 2), 1), 1) is None


def test_cuda_vec_refuses_a_cpu_tensor():
    x = random_bits((3, 5, 7), torch.int8)
    with pytest.raises(ValueError, match="backend='cuda-vec' needs a CUDA tensor"):
        tileflip.permute(x, (2, 1, 0), backend="cuda-vec")


# ------------------------------------------------------------------------------------------------
# On a GPU
# ------------------------------------------------------------------------------------------------


def _out_at(shape, dtype, shift: int):
    """A contiguous output ``shift`` bytes past a 16-byte boundary, inside a poisoned buffer."""
    size = torch.empty((), dtype=dtype).element_size()
    numel = 1
    for s in shape:
        numel *= s
    buf = torch.full((2 * GUARD + numel * size + 16,), POISON, dtype=torch.uint8, device="cuda")
    start = GUARD + (shift - (buf.data_ptr() + GUARD)) % 16
    out = buf[start : start + numel * size].view(dtype).view(shape)
    return buf, start, out


def _check_guards(buf, start, nbytes):
    assert bool((buf[:start] == POISON).all()), "a write before the output"
    assert bool((buf[start + nbytes :] == POISON).all()), "a write past the output"


def _gpu_case(rng: random.Random, i: int, device: str = "cuda"):
    """A permute that moves the inner dimension, of 1- or 2-byte elements, with odd sizes, a storage
    offset, a step or an expanded dimension."""
    dtype = rng.choice([torch.int8, torch.bfloat16])
    rank = rng.randint(2, 6)
    shape = [rng.choice([2, 3, 5, 7, 11, 17, 31, 45, 129, 200, 300]) for _ in range(rank)]
    while torch.Size(shape).numel() > 3_000_000:
        shape[rng.randrange(rank)] = max(2, shape[rng.randrange(rank)] // 3)
    dims = list(range(rank))
    while dims[-1] == rank - 1:
        rng.shuffle(dims)
    view = rng.choice(["contiguous", "offset", "step", "expanded"])
    if view == "offset":
        numel = int(torch.Size(shape).numel())
        skip = rng.randint(1, 15)
        x = random_bits((numel + skip,), dtype, device, seed=i)[skip:].view(shape)
    elif view == "step" and rank >= 3:
        x = random_bits((2 * shape[0], *shape[1:]), dtype, device, seed=i)[1::2]
    elif view == "expanded" and rank >= 3:
        x = random_bits((1, *shape[1:]), dtype, device, seed=i).expand(shape)
    else:
        x = random_bits(shape, dtype, device, seed=i)
    return x, tuple(dims)


@pytest.mark.gpu
def test_permute_vec_sweep():
    """Random permutes through backend='cuda-vec', at every output alignment: bits equal, nothing outside
    the output written."""
    rng = random.Random(11)
    taken = 0
    for i in range(120):
        x, dims = _gpu_case(rng, i)
        p = _plan(x.shape, dims, x.element_size(), x.stride())
        if tuning.permute_vec_launch(p, x.element_size()) is None:
            continue
        taken += 1
        shift = rng.randrange(0, 16, x.element_size())
        buf, start, out = _out_at(tuple(x.shape[d] for d in dims), x.dtype, shift)
        tileflip.permute(x, dims, out, backend="cuda-vec")
        assert_bits_equal(out, x.permute(dims))
        _check_guards(buf, start, out.numel() * out.element_size())
    assert taken >= 60


@pytest.mark.gpu
@pytest.mark.parametrize("shape, dims", ODD_RUNS)
@pytest.mark.parametrize("shift", [0, 1, 8, 15])
def test_permute_vec_odd_run_cases(shape, dims, shift):
    x = random_bits(shape, torch.int8, "cuda", seed=shift)
    buf, start, out = _out_at(tuple(x.shape[d] for d in dims), x.dtype, shift)
    tileflip.permute(x, dims, out, backend="cuda-vec")
    assert_bits_equal(out, x.permute(dims))
    _check_guards(buf, start, out.numel())


@pytest.mark.gpu
def test_cuda_vec_refuses_a_plan_it_cannot_take():
    x = random_bits((30, 40, 50), torch.float32, "cuda")
    with pytest.raises(ValueError, match="backend='cuda-vec' cannot take this permute"):
        tileflip.permute(x, (2, 1, 0), backend="cuda-vec")
    x = random_bits((30, 40, 50), torch.int8, "cuda")
    with pytest.raises(ValueError, match="plan kind 'rows'"):
        tileflip.permute(x, (1, 0, 2), backend="cuda-vec")


@pytest.mark.skipif(HAS_GPU, reason="on a GPU machine the gpu cases run")
def test_gpu_cases_exist_for_the_sweep():
    """The sweep's case generator yields enough permute_vec plans (checked where the sweep cannot run)."""
    rng = random.Random(11)
    taken = 0
    for i in range(120):
        x, dims = _gpu_case(rng, i, "cpu")
        p = _plan(x.shape, dims, x.element_size(), x.stride())
        taken += tuning.permute_vec_launch(p, x.element_size()) is not None
    assert taken >= 60

