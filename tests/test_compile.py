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
    tileflip.transpose  # a public name's first use registers every op
    for name in ("transpose", "transpose_out", "permute", "permute_out", "cast_transpose", "quantize"):
        assert hasattr(torch.ops.tileflip, name), name
    x = random_bits((5, 7), torch.float32, seed=3)
    assert_bits_equal(torch.ops.tileflip.transpose(x, "torch"), x.t())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_out_overlapping_x_is_refused_when_traced(device, backend):
    """An ``out`` that overlaps ``x`` is refused while the call is traced, through the fake tensors'
    shared storage (the compiled op may be handed a copy of ``out``, where the real call's check would
    not see the overlap); ``x`` is left as it was. An ``out`` apart from ``x`` in the same storage runs."""
    buf = random_bits((24,), torch.float32, device, seed=4)
    before = buf.clone()
    for op in (lambda t, o: tileflip.transpose(t, o), lambda t, o: tileflip.permute(t, (1, 0), o)):
        torch._dynamo.reset()
        with pytest.raises(RuntimeError, match="out overlaps x in memory"):
            torch.compile(op, fullgraph=True, backend=backend)(buf[:12].view(3, 4), buf[4:16].view(4, 3))
        assert_bits_equal(buf, before)
    torch._dynamo.reset()
    torch.compile(lambda t, o: tileflip.permute(t, (1, 0), o), fullgraph=True, backend=backend)(
        buf[:12].view(3, 4), buf[12:].view(4, 3))
    assert_bits_equal(buf[12:].view(4, 3), before[:12].view(3, 4).t())


@pytest.mark.parametrize(
    "kwargs, error",
    [
        (dict(scale=True), "scale must be a real number"),
        (dict(dtype=torch.float16), "dtype must be torch.float8_e4m3fn or torch.float8_e5m2"),
        (dict(transpose=1), "transpose must be a bool"),
    ],
)
def test_compiled_cast_transpose_refuses_what_eager_refuses(kwargs, error):
    """Under torch.compile the arguments the schema would coerce (True as a scale of 1.0) or reject with
    the dispatcher's own message are refused with the eager call's named error."""
    torch._dynamo.reset()
    x = random_bits((16, 16), torch.float32, seed=5)
    call = dict(dtype=torch.float8_e4m3fn) | kwargs

    def f(x):
        return tileflip.cast_transpose(x, **call)[0]

    with pytest.raises(Exception, match=error):
        torch.compile(f, fullgraph=True, backend="aot_eager")(x)
