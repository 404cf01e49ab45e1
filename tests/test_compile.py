"""The registered ops under torch.compile(fullgraph=True), on the CPU (interpreter) and on a GPU."""

import pytest
import torch
from conftest import HAS_GPU
from helpers import assert_bits_equal, poisoned, random_bits

import tileflip

DEVICES = [pytest.param("cpu", marks=pytest.mark.skipif(HAS_GPU, reason="the GPU case covers it")),
           pytest.param("cuda", marks=pytest.mark.gpu)]  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_transpose(device):
    torch._dynamo.reset()

    def f(x):
        return tileflip.transpose(x * 2) + 1

    x = random_bits((33, 70), torch.int32, device, seed=1)
    got = torch.compile(f, fullgraph=True)(x)
    assert_bits_equal(got, (x * 2).t().contiguous() + 1)


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_transpose_out(device):
    torch._dynamo.reset()

    def f(x, out):
        tileflip.transpose(x, out)
        return out

    x = random_bits((31, 65), torch.float32, device, seed=2)
    out = poisoned((65, 31), torch.float32, device)
    torch.compile(f, fullgraph=True)(x, out)
    assert_bits_equal(out, x.t())


def test_registered_ops_exist():
    assert hasattr(torch.ops.tileflip, "transpose") and hasattr(torch.ops.tileflip, "transpose_out")
    x = random_bits((5, 7), torch.float32, seed=3)
    assert_bits_equal(torch.ops.tileflip.transpose(x, "torch"), x.t())
