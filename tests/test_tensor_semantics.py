"""What a torch user expects beyond the bits: conjugate and negative views, layouts the kernels cannot
read, autograd (gradients, ``out=`` under autograd, the version counter of a written ``out``), and the
command line's refusals."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import HAS_GPU
from helpers import assert_bits_equal, bits, poisoned, random_bits

import tileflip

DEVICES = [pytest.param("cpu", marks=pytest.mark.skipif(HAS_GPU, reason="on a GPU machine the gpu cases run")),
           pytest.param("cuda", marks=pytest.mark.gpu)]  # fmt: skip


def _complex(shape, device, seed=0):
    return torch.complex(random_bits(shape, torch.float32, device, seed), random_bits(shape, torch.float32, device,
                                                                                      seed + 1))  # fmt: skip


def _calls():
    return [("transpose", lambda t: tileflip.transpose(t), lambda t: t.t()),
            ("permute", lambda t: tileflip.permute(t, (1, 0)), lambda t: t.permute(1, 0))]  # fmt: skip


# --------------------------------------------------------------------------------------------------
# Conjugate and negative views: resolved values for x, a refusal for out.
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_conjugate_and_negative_views_give_their_values(device):
    c = _complex((33, 65), device)
    for name, call, ref in _calls():
        for view in (c.conj(), c.conj().imag, torch._neg_view(c.real)):
            assert view.is_conj() or view.is_neg()
            call(view.resolve_conj().resolve_neg())  # the plain layout's kernel is compiled (and prepared) first
            got = call(view)
            want = ref(view).resolve_conj().resolve_neg().contiguous()
            assert_bits_equal(torch.view_as_real(got) if got.is_complex() else got,
                              torch.view_as_real(want) if want.is_complex() else want)  # fmt: skip


@pytest.mark.gpu
def test_conjugate_view_on_a_prepared_signature():
    """The CUDA fast path keys its prepared launches by sizes, strides and dtype; a conjugate view of the
    same signature must not reuse the plain launch on the raw bits."""
    c = _complex((40, 72), "cuda")
    for _ in range(3):
        out = torch.empty((72, 40), dtype=torch.complex64, device="cuda")
        tileflip.transpose(c, out)
    tileflip.transpose(c.conj(), out)
    assert_bits_equal(torch.view_as_real(out), torch.view_as_real(c.conj().t().resolve_conj().contiguous()))


@pytest.mark.parametrize("device", DEVICES)
def test_complex32_conjugate_views(device):
    c = _complex((9, 17), device).to(torch.complex32)
    for name, call, ref in _calls():
        got = call(c.conj())
        assert not got.is_conj()
        assert_bits_equal(torch.view_as_real(got), torch.view_as_real(ref(c.conj()).resolve_conj().contiguous()))


@pytest.mark.parametrize("device", DEVICES)
def test_conjugate_or_negative_out_is_refused(device):
    x = _complex((3, 4), device)
    for out in (torch.zeros((4, 3), dtype=torch.complex64, device=device).conj(),
                torch._neg_view(torch.zeros((4, 3), dtype=torch.complex64, device=device))):  # fmt: skip
        before = torch.view_as_real(out.resolve_conj().resolve_neg()).clone()
        with pytest.raises(ValueError, match="out must not be a conjugate or negative view"):
            tileflip.transpose(x, out)
        with pytest.raises(ValueError, match="out must not be a conjugate or negative view"):
            tileflip.permute(x, (1, 0), out)
        assert torch.equal(torch.view_as_real(out.resolve_conj().resolve_neg()), before)


@pytest.mark.parametrize("device", DEVICES)
def test_inference_out_is_written_only_in_inference_mode(device):
    """torch refuses to write an inference tensor outside inference mode (``out.copy_`` raises); so does
    tileflip, on the prepared fast path too, and writes it under ``torch.inference_mode()``."""
    x = random_bits((5, 7), torch.float32, device)
    tileflip.transpose(x, poisoned((7, 5), torch.float32, device))  # the signature's launch is prepared
    with torch.inference_mode():
        out = poisoned((7, 5), torch.float32, device)
        out3 = poisoned((7, 2, 5), torch.float32, device)
    before, before3 = out.clone(), out3.clone()
    x3 = random_bits((5, 2, 7), torch.float32, device)
    with pytest.raises(ValueError, match="out is an inference tensor"):
        tileflip.transpose(x, out)
    with pytest.raises(ValueError, match="out is an inference tensor"):
        tileflip.permute(x3, (2, 1, 0), out3)
    assert_bits_equal(out, before)
    assert_bits_equal(out3, before3)
    with torch.inference_mode():
        assert tileflip.transpose(x, out) is out
        assert tileflip.permute(x3, (2, 1, 0), out3) is out3
    assert_bits_equal(out, x.t())
    assert_bits_equal(out3, x3.permute(2, 1, 0))


# --------------------------------------------------------------------------------------------------
# Layouts
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_sparse_and_nested_tensors_are_refused_by_name(device):
    dense = random_bits((4, 6), torch.float32, device)
    sparse = [dense.to_sparse(), dense.to_sparse_csr()]
    for x in sparse:
        for call in (lambda t: tileflip.transpose(t), lambda t: tileflip.permute(t, (1, 0)),
                     lambda t: tileflip.cast_transpose(t)):  # fmt: skip
            with pytest.raises(TypeError, match=r"x must be a dense tensor \(layout torch.strided\)"):
                call(x)
        with pytest.raises(TypeError, match=r"out must be a dense tensor"):
            tileflip.transpose(dense, dense.t().contiguous().to_sparse())
    nested = torch.nested.nested_tensor([dense, dense[:2]])
    with pytest.raises(TypeError, match="x must be a dense tensor .* a nested tensor"):
        tileflip.transpose(nested)


# --------------------------------------------------------------------------------------------------
# Autograd
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_gradients_flow_through_transpose_and_permute(device):
    w = random_bits((5, 7), torch.float32, device).requires_grad_()
    weight = random_bits((7, 5), torch.float32, device, seed=2)
    (tileflip.transpose(w) * weight).sum().backward()
    assert_bits_equal(w.grad, weight.t())
    v = random_bits((2, 3, 4), torch.float32, device).requires_grad_()
    weight = random_bits((4, 2, 3), torch.float32, device, seed=3)
    y = tileflip.permute(v, (2, 0, -2))
    assert y.grad_fn is not None
    (y * weight).sum().backward()
    assert_bits_equal(v.grad, weight.permute(1, 2, 0))
    with torch.no_grad():
        assert tileflip.transpose(w).grad_fn is None


def test_gradients_flow_through_the_compiled_ops():
    x = random_bits((5, 7), torch.float32).requires_grad_()
    f = torch.compile(lambda t: tileflip.transpose(t) * 2, fullgraph=True, backend="aot_eager")
    f(x).sum().backward()
    assert torch.equal(x.grad, torch.full((5, 7), 2.0))
    weight = random_bits((4, 2, 3), torch.float32, seed=3)
    for dims in ((2, 0, 1), (-1, 0, -2)):
        v = random_bits((2, 3, 4), torch.float32).requires_grad_()
        torch._dynamo.reset()
        g = torch.compile(lambda t, d=dims: tileflip.permute(t, d) * weight, fullgraph=True, backend="aot_eager")
        g(v).sum().backward()
        assert_bits_equal(v.grad, weight.permute(1, 2, 0))


@pytest.mark.parametrize("device", DEVICES)
def test_forward_mode_tangents_follow_the_op(device):
    import torch.autograd.forward_ad as fwAD

    x = random_bits((5, 7), torch.float32, device)
    t = random_bits((5, 7), torch.float32, device, seed=4)
    with fwAD.dual_level():
        y = tileflip.transpose(fwAD.make_dual(x, t))
        assert_bits_equal(fwAD.unpack_dual(y).tangent, t.t())
        v, w = x.view(5, 7, 1), t.view(5, 7, 1)
        z = tileflip.permute(fwAD.make_dual(v, w), (2, -2, 0))
        assert_bits_equal(fwAD.unpack_dual(z).tangent, w.permute(2, 1, 0))
        with pytest.raises(ValueError, match=r"transpose\(\) with out= does not support autograd"):
            tileflip.transpose(fwAD.make_dual(x, t), poisoned((7, 5), torch.float32, device))


def test_torch_func_grad_through_transpose_and_permute():
    weight = random_bits((7, 5), torch.float32, seed=2)
    g = torch.func.grad(lambda t: (tileflip.transpose(t) * weight).sum())(random_bits((5, 7), torch.float32))
    assert_bits_equal(g, weight.t())
    weight = random_bits((4, 2, 3), torch.float32, seed=3)
    v = random_bits((2, 3, 4), torch.float32)
    g = torch.func.grad(lambda t: (tileflip.permute(t, (-1, 0, 1)) * weight).sum())(v)
    assert_bits_equal(g, weight.permute(1, 2, 0))


def test_torch_func_jvp_and_vmap():
    x, t = random_bits((5, 7), torch.float32), random_bits((5, 7), torch.float32, seed=1)
    _, tangent = torch.func.jvp(tileflip.transpose, (x,), (t,))
    assert_bits_equal(tangent, t.t())
    batch = random_bits((4, 5, 7), torch.float32, seed=2)
    assert_bits_equal(torch.vmap(tileflip.transpose)(batch), batch.transpose(1, 2))
    assert_bits_equal(torch.vmap(tileflip.transpose, in_dims=2)(batch.permute(1, 2, 0)), batch.transpose(1, 2))
    z = random_bits((3, 2, 4, 5), torch.float32, seed=3)
    assert_bits_equal(torch.vmap(lambda a: tileflip.permute(a, (2, 0, -2)))(z), z.permute(0, 3, 1, 2))
    # A permute of the largest rank (8): vmap's batch dimension makes it 9, one past the planner's limit.
    dims = (7, 2, 5, 0, 6, 1, 4, 3)
    big = random_bits((3, 2, 3, 2, 2, 3, 2, 2, 2), torch.float32, seed=4)
    assert_bits_equal(torch.vmap(lambda a: tileflip.permute(a, dims))(big), big.permute(0, *(d + 1 for d in dims)))
    assert_bits_equal(torch.vmap(lambda a: tileflip.permute(a, dims), in_dims=4)(big),
                      big.movedim(4, 0).permute(0, *(d + 1 for d in dims)))  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
def test_out_under_autograd_is_refused(device):
    x = random_bits((3, 4), torch.float32, device)
    out = poisoned((4, 3), torch.float32, device)
    with pytest.raises(ValueError, match=r"transpose\(\) with out= does not support autograd, but x requires grad"):
        tileflip.transpose(x.clone().requires_grad_(), out)
    with pytest.raises(ValueError, match=r"permute\(\) with out= .* but out requires grad"):
        tileflip.permute(x, (1, 0), out.clone().requires_grad_())
    assert_bits_equal(out, poisoned((4, 3), torch.float32, device))
    with torch.no_grad():  # as torch allows it
        tileflip.transpose(x.clone().requires_grad_(), out)
    assert_bits_equal(out, x.t())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["transpose", "permute"])
def test_a_written_out_counts_as_changed_for_autograd(device, op):
    """A tensor saved for backward and then overwritten through out= must make backward fail, as torch's
    in-place writes do, not give a gradient of the new values. Repeated so the CUDA fast path is covered."""
    for _ in range(3):
        saved = random_bits((5, 3), torch.float32, device)
        w = random_bits((5, 3), torch.float32, device, seed=1).requires_grad_()
        loss = (w * saved).sum()
        version = saved._version
        x = random_bits((3, 5), torch.float32, device, seed=2)
        tileflip.transpose(x, saved) if op == "transpose" else tileflip.permute(x, (1, 0), saved)
        assert saved._version > version
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            loss.backward()


def test_a_refused_call_leaves_out_unchanged_for_autograd(monkeypatch):
    """A call refused after the argument checks (here: cuda-vec's own conditions, reached through a
    stand-in for a CUDA tensor's backend) moves neither out's bits nor its version counter."""
    from tileflip.ops import transpose as ops

    x = random_bits((3, 5), torch.int8)
    out = poisoned((5, 3), torch.int8)
    monkeypatch.setattr(ops, "resolve_backend", lambda x, backend: "cuda-vec")
    version = out._version
    with pytest.raises(ValueError, match="backend='cuda-vec' cannot take this call"):
        tileflip.transpose(x, out, backend="cuda-vec")
    assert out._version == version
    assert_bits_equal(out, poisoned((5, 3), torch.int8))


# --------------------------------------------------------------------------------------------------
# cast_transpose
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_cast_transpose_reads_negative_views_as_values(device):
    gen = torch.Generator().manual_seed(0)
    c = torch.randn((16, 24), dtype=torch.complex64, generator=gen).to(device)  # finite: amax compares equal
    x = c.conj().imag
    assert x.is_neg()
    y, y_t, amax = tileflip.cast_transpose(x, scale=torch._neg_view(torch.tensor(2.0, device=device)))
    want = (x.resolve_neg().float() * -2.0).clamp(-448, 448).to(torch.float8_e4m3fn)
    assert_bits_equal(y, want)
    assert_bits_equal(y_t, want.t())
    assert amax.item() == x.abs().amax().item()


@pytest.mark.parametrize("device", DEVICES)
def test_cast_transpose_scales_and_refusals(device):
    x = random_bits((16, 24), torch.float32, device)
    y, _, _ = tileflip.cast_transpose(x, scale=np.float32(0.5))
    y_ref, _, _ = tileflip.cast_transpose(x, scale=0.5)
    assert torch.equal(bits(y), bits(y_ref))
    with pytest.raises(ValueError, match="scale must be within float range"):
        tileflip.cast_transpose(x, scale=10**400)
    with pytest.raises(TypeError, match="scale must be a real number"):
        tileflip.cast_transpose(x, scale="2")
    with pytest.raises(ValueError, match="cast_transpose is not differentiable, but x requires grad"):
        tileflip.cast_transpose(x.clone().requires_grad_())
    with torch.no_grad():
        tileflip.cast_transpose(x.clone().requires_grad_())
    scale = torch.tensor(0.5, device=device, requires_grad=True)
    with pytest.raises(ValueError, match="cast_transpose is not differentiable, but scale requires grad"):
        tileflip.cast_transpose(x, scale=scale)  # (its gradient would be dropped without a word)
    with torch.no_grad():
        y_ng, _, _ = tileflip.cast_transpose(x, scale=scale)
    assert torch.equal(bits(y_ng), bits(y_ref))


# --------------------------------------------------------------------------------------------------
# The command line: a refused argument is one line on stderr and exit status 2, never a traceback.
# --------------------------------------------------------------------------------------------------

CLI_REFUSALS = [
    (["plan", "--shape", "8x4x3", "--perm", "0,0,1"], "dims must be a permutation"),
    (["plan", "--shape", "8x4", "--dtype", "nope"], "dtype must be a torch dtype name such as float32"),
    (["plan", "--shape", "31x65", "--block", "0x32"], "block sides must be positive powers of two"),
    (["plan", "--shape", "31x65", "--block", "33x32"], "block sides must be positive powers of two"),
    (["plan", "--shape", "31x65", "--block", "4096x4096"], "block must hold at most 1048576 elements"),
    (["plan", "--shape=-8x4"], "shape must be non-negative"),
    (["analyze", "--kernel", "triton", "--num-warps", "3"], r"num_warps must be one of"),
    (["analyze", "--threads", "64x64"], "threads must be positive with at most 1024"),
    (["analyze", "--sample", "0"], "sample must be a positive int"),
    (["analyze", "--strides", "a,b"], "strides must look like 512,1"),
    (["analyze", "--strides", "1"], "strides must look like 512,1"),
    (["bench", "--plot", "/nonexistent/results.json"], "No such file"),
    (["bench", "--plot", __file__], "is not JSON"),
    (["bench", "--plot", str(Path(tileflip.__file__).parent / "data" / "h200.json")],
     "is not a results file of tileflip bench"),
    (["analyze", "--device", __file__], "is not JSON"),
    (["analyze", "--shape", "8x"], "shape must look like 31x65, got '8x'"),
    (["analyze", "--threads", "8x"], "threads must look like 32x8, got '8x'"),
    (["plan", "--shape", "3x4", "--programs", "-1"], "argument --programs: programs must be 0 or more"),
    (["plan", "--shape", "3x4x5", "--perm", "2,1,0", "--block", "32x32"], "--block is for a 2-D transpose"),
    (["check", f"{Path(__file__).parent / 'wrong' / 'misc.py'}:right", "--timeout", "0"],
     "--timeout must be a positive number"),
    (["demo", "--png", ""], "argument --png: expected a file name such as tiles.png"),
    (["demo", "--png", str(Path(__file__).parent)], "is a folder; give a file name such as tiles.png"),
    (["demo", "--png", f"{__file__}/tiles.png"], "is a file, so"),
    (["demo", "--png"], "argument --png: expected one argument"),
    (["demo", "--all-dtypes=yes"], "argument --all-dtypes: ignored explicit argument 'yes'"),
    (["demo", "now"], "unrecognized arguments: now"),
    (["analyze", "--png", ""], "argument --png: expected a file name such as analyze.png"),
]


@pytest.mark.parametrize("argv,message", CLI_REFUSALS, ids=[" ".join(a) for a, _ in CLI_REFUSALS])
def test_cli_refusals_are_one_line(argv, message):
    code = f"import sys; from tileflip.cli import main; sys.exit(main({argv!r}))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    assert message in run.stderr.strip().splitlines()[-1]


def test_bench_cast_suite_option_anywhere():
    argv = ["bench", "--quick", "--suite", "cast", "--help"]
    code = f"import sys; from tileflip.cli import main; sys.exit(main({argv!r}))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "tileflip bench --suite cast" in run.stdout
