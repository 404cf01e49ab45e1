"""tileflip.enable(): the override of aten::copy_, what it takes and declines, and PyTorch's results bit for bit.

The CPU tests register the same override for the CPU dispatch key, so that PyTorch's own copies of CPU
tensors run through it into Triton's interpreter; the GPU tests run the CUDA registration itself."""

import os
import subprocess
import sys

import pytest
import torch

import tileflip
from tileflip.ops import enable as E

POISON = {1: 0x5A, 2: 0x5A5A, 4: 0x5A5A5A5A}


def bits(t):
    return t.contiguous().view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


@pytest.fixture
def on_cpu(monkeypatch):
    """The override on the CPU key, taking every layout change it can (the speed rule left out: tiny CPU
    tensors never gain on a GPU's model)."""
    monkeypatch.setattr(E, "ADDED_HOST_S", 0.0)
    monkeypatch.setattr(E, "_slower", lambda *args: False)
    E._install("CPU")
    try:
        yield E.counts
    finally:
        tileflip.disable()


def reference(fn, *args):
    was = E._installed.get("key")
    tileflip.disable()
    try:
        return fn(*args)
    finally:
        if was:
            E._install(was)


LAYOUTS = [
    ("permute.contiguous", lambda x: x.permute(2, 0, 1).contiguous()),
    ("transpose.reshape", lambda x: x.transpose(0, 1).reshape(x.shape[1], -1)),
    ("t.contiguous", lambda x: x[0].t().contiguous()),
    ("channels_last", lambda x: x.unsqueeze(0).to(memory_format=torch.channels_last)),
    ("clone of a permuted view", lambda x: x.permute(1, 2, 0).clone(memory_format=torch.contiguous_format)),
]


@pytest.mark.parametrize("dtype", [torch.int8, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("name,fn", LAYOUTS, ids=[n for n, _ in LAYOUTS])
def test_pytorch_layout_copies_run_on_tileflip_bit_for_bit(on_cpu, name, fn, dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-120, 120, (6, 20, 12), generator=g).to(dtype)
    want = reference(fn, x)
    before = on_cpu["taken"]
    got = fn(x)
    assert on_cpu["taken"] == before + 1, dict(on_cpu)
    assert got.shape == want.shape and got.stride() == want.stride()
    assert torch.equal(bits(got), bits(want))


def test_copy_into_a_poisoned_destination_and_a_broadcast_source(on_cpu):
    x = torch.arange(7 * 9 * 5, dtype=torch.int16).reshape(7, 9, 5) * 3 + 1
    out = torch.full((5, 7, 9), POISON[2], dtype=torch.int16)
    out.copy_(x.permute(2, 0, 1))
    row = torch.arange(9 * 5, dtype=torch.int16).reshape(9, 5).t()  # (5, 9), broadcast over 7
    out2 = torch.full((7, 5, 9), POISON[2], dtype=torch.int16)
    out2.copy_(row)
    assert on_cpu["taken"] == 2, dict(on_cpu)
    assert torch.equal(out, reference(lambda: x.permute(2, 0, 1).contiguous()))
    assert torch.equal(out2, reference(lambda: row.expand(7, 5, 9).contiguous()))


DECLINED = {
    "non_blocking": lambda x: torch.empty(12, 6, 20).copy_(x.permute(2, 0, 1), non_blocking=True),
    "dtype cast": lambda x: torch.empty(12, 6, 20, dtype=torch.float64).copy_(x.permute(2, 0, 1)),
    "conjugate or negative bit": lambda x: torch.empty(12, 6, 20, dtype=torch.complex64).copy_(
        torch.complex(x, -x)._neg_view().permute(2, 0, 1)),
    "strided destination": lambda x: torch.zeros(12, 6, 40)[:, :, ::2].copy_(x.permute(2, 0, 1)),
    "no layout change": lambda x: torch.empty(6, 20, 12).copy_(x),
}


@pytest.mark.parametrize("reason", list(DECLINED))
def test_declined_calls_go_to_pytorch_unchanged(on_cpu, reason):
    x = torch.arange(6 * 20 * 12, dtype=torch.float32).reshape(6, 20, 12)
    want = reference(DECLINED[reason], x)
    on_cpu.clear()
    got = DECLINED[reason](x)
    assert on_cpu[reason] >= 1 and on_cpu["taken"] == 0, dict(on_cpu)
    assert torch.equal(got, want)


def test_bool_layout_change_is_taken(on_cpu):
    b = torch.arange(6 * 20 * 12).reshape(6, 20, 12) % 3 == 0
    want = reference(lambda: b.permute(2, 0, 1).contiguous())
    on_cpu.clear()
    assert torch.equal(b.permute(2, 0, 1).contiguous(), want) and on_cpu["taken"] == 1


def test_small_tensors_are_declined_at_the_measured_host_cost():
    E._install("CPU")
    try:
        x = torch.arange(6 * 20 * 12, dtype=torch.float32).reshape(6, 20, 12)
        x.permute(2, 0, 1).contiguous()
        assert E.counts["small"] == 1 and E.counts["taken"] == 0
    finally:
        tileflip.disable()


def test_speed_rule_takes_gathers_and_leaves_coalesced_rows_to_pytorch():
    from tileflip.plan import plan_permute

    transpose = plan_permute((4096, 4096), (4096, 1), (1, 0), 1)
    assert not E._slower(transpose, 1, None, E.ADDED_HOST_S)  # PyTorch reads a sector an element
    rows = plan_permute((64, 2, 65536), (131072, 65536, 1), (1, 0, 2), 8)
    assert E._slower(rows, 8, None, E.ADDED_HOST_S)  # 512 KiB runs: PyTorch copies at DRAM speed


def test_overlapping_copy_keeps_pytorchs_own_error(on_cpu):
    x = torch.arange(64.0).reshape(8, 8)
    with pytest.raises(RuntimeError, match="overlap|memory location"):
        x.copy_(x.t())
    assert on_cpu["shared storage"] == 1


def test_autograd_through_a_taken_copy(on_cpu):
    x = torch.randn(6, 20, 12, requires_grad=True)
    y = x.permute(2, 0, 1).contiguous()
    (y * torch.arange(y.numel()).reshape(y.shape)).sum().backward()
    assert on_cpu["taken"] >= 1
    want = torch.arange(y.numel(), dtype=torch.float32).reshape(12, 6, 20).permute(1, 2, 0)
    assert torch.equal(x.grad, want)


def test_tileflip_own_torch_backend_while_enabled(on_cpu):
    x = torch.arange(6 * 20 * 12, dtype=torch.int32).reshape(6, 20, 12)
    got = tileflip.permute(x, (2, 0, 1), backend="torch")
    assert torch.equal(got, x.permute(2, 0, 1).contiguous())


def test_enable_registers_the_cuda_kernel_and_disable_restores_it():
    assert E._foreign_kernel("CUDA") is None
    tileflip.enable()
    try:
        assert E.is_enabled() and E._foreign_kernel("CUDA") is not None
        tileflip.enable()  # a second call does nothing
    finally:
        tileflip.disable()
    assert not E.is_enabled() and E._foreign_kernel("CUDA") is None
    tileflip.disable()  # nothing to restore


def test_context_manager_restores_the_state_before_it():
    with tileflip.enabled():
        assert E.is_enabled()
    assert not E.is_enabled()
    tileflip.enable()
    try:
        with tileflip.enabled():
            pass
        assert E.is_enabled()  # it was on before the block
    finally:
        tileflip.disable()


def test_another_librarys_override_is_not_replaced():
    other = torch.library.Library("aten", "IMPL")
    other.impl("copy_", lambda dst, src, non_blocking=False: dst, "CUDA")
    try:
        with pytest.raises(E.EnableError, match="another library overrides it"):
            tileflip.enable()
        assert not E.is_enabled()
    finally:
        other._destroy()


@pytest.mark.parametrize("value,expect", [("1", "True"), ("0", "False"), ("", "False")])
def test_environment_variable(value, expect):
    env = {**os.environ, "TILEFLIP_ENABLE": value}
    code = "import tileflip; from tileflip.ops import enable; print(enable.is_enabled())"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expect


def test_environment_variable_refuses_other_values():
    env = {**os.environ, "TILEFLIP_ENABLE": "yes"}
    done = subprocess.run([sys.executable, "-c", "import tileflip"], env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode != 0 and "TILEFLIP_ENABLE must be 1" in done.stderr


def test_torch_compile_fullgraph_traces_with_it_on():
    def f(x):
        return x.permute(2, 0, 1).contiguous() + 1

    x = torch.randn(6, 20, 12)
    with tileflip.enabled():
        got = torch.compile(f, fullgraph=True, backend="aot_eager")(x)
    assert torch.equal(got, f(x))


def test_enabled_stats_count_taken_and_declined_calls(on_cpu):
    x = torch.arange(6 * 20 * 12, dtype=torch.float32).reshape(6, 20, 12)
    x.permute(2, 0, 1).contiguous()
    torch.empty(6, 20, 12, dtype=torch.float64).copy_(x)
    torch.empty(6, 20, 12, dtype=torch.float64).copy_(x)
    assert tileflip.enabled_stats() == {"taken": 1, "declined": {"dtype cast": 2}}


def test_a_repeated_signature_is_decided_once(on_cpu, monkeypatch):
    calls = []
    route = E._route
    monkeypatch.setattr(E, "_route", lambda *args: calls.append(1) or route(*args))
    x = torch.arange(6 * 20 * 12, dtype=torch.float32).reshape(6, 20, 12)
    y = torch.arange(6 * 20 * 12, dtype=torch.float32).reshape(6, 20, 12) + 1
    for t in (x, y, x):
        t.permute(2, 0, 1).contiguous()
        torch.empty(6, 20, 12, dtype=torch.float64).copy_(t)
    assert len(calls) == 2 and on_cpu["taken"] == 3 and on_cpu["dtype cast"] == 3
    x.permute(1, 0, 2).contiguous()  # another signature
    assert len(calls) == 3


def test_each_new_decision_is_logged_at_debug_level(on_cpu, caplog):
    x = torch.arange(6 * 20 * 12, dtype=torch.float32).reshape(6, 20, 12)
    with caplog.at_level("DEBUG", logger="tileflip.enable"):
        x.permute(2, 0, 1).contiguous()
        x.permute(2, 0, 1).contiguous()
        torch.empty(6, 20, 12, dtype=torch.float64).copy_(x)
    lines = [r.getMessage() for r in caplog.records if r.name == "tileflip.enable"]
    assert len(lines) == 2 and "taken" in lines[0] and lines[1].endswith("dtype cast"), lines


OPINFO_OPS = ("clone", "contiguous", "reshape", "permute", "transpose", "to")
OPINFO_DTYPES = (torch.bool, torch.int8, torch.bfloat16, torch.float32, torch.int64, torch.complex64)


def opinfo_samples(device):
    """(name, function) of every OpInfo sample of the ops that lay tensors out, each followed by
    ``contiguous()``, in OPINFO_DTYPES."""
    pytest.importorskip("expecttest")
    from torch.testing._internal.common_methods_invocations import op_db

    ops = {o.name: o for o in op_db if o.name in OPINFO_OPS and o.variant_test_name == ""}
    assert set(ops) == set(OPINFO_OPS)
    out = []
    for name in OPINFO_OPS:
        for dtype in OPINFO_DTYPES:
            for i, s in enumerate(ops[name].sample_inputs(device, dtype)):
                label = f"{name}-{dtype}-{i}"
                out.append((label, lambda o=ops[name], s=s: o(s.input, *s.args, **s.kwargs).contiguous()))
    return out


def layouts_of(t):
    """Dense tensors holding t's values in other layouts: contiguous, dimensions reversed in memory, the
    last two swapped in memory."""
    t = t.contiguous()
    out = [t]
    if t.dim() >= 2:
        rev = tuple(range(t.dim() - 1, -1, -1))
        out.append(t.permute(rev).contiguous().permute(rev))
        swap = (*range(t.dim() - 2), t.dim() - 1, t.dim() - 2)
        out.append(t.permute(swap).contiguous().permute(swap))
    return out


def check_opinfo(device, counts):
    taken, compared = 0, 0
    for label, fn in opinfo_samples(device):
        want = reference(fn)
        before = counts["taken"]
        got = fn()
        taken += counts["taken"] - before
        assert got.shape == want.shape and got.stride() == want.stride(), label
        assert torch.equal(bits(got), bits(want)), label
        compared += 1
        for src in layouts_of(want):
            for dst_layout in layouts_of(want):
                nbytes = want.numel() * want.element_size()
                poisoned = torch.full((nbytes,), POISON[1], dtype=torch.uint8, device=device)
                dst = poisoned.view(want.dtype).as_strided(dst_layout.shape, dst_layout.stride())
                dst.copy_(src)
                assert torch.equal(bits(dst), bits(want)), (label, src.stride(), dst.stride())
    return taken, compared


# OpInfo's samples of ``to`` include complex-to-real casts, which PyTorch warns about.
OPINFO_WARNING = "ignore:Casting complex values to real discards the imaginary part:UserWarning"


@pytest.mark.filterwarnings(OPINFO_WARNING)
def test_opinfo_samples_and_copies_between_their_layouts_are_identical_with_it_on(on_cpu):
    taken, compared = check_opinfo("cpu", on_cpu)
    assert compared > 200 and taken > 50, (taken, compared)


# --- the CUDA registration itself ------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float8_e4m3fn, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("name,fn", LAYOUTS, ids=[n for n, _ in LAYOUTS])
def test_gpu_layout_copies_bit_for_bit(monkeypatch, name, fn, dtype):
    monkeypatch.setattr(E, "ADDED_HOST_S", 0.0)
    monkeypatch.setattr(E, "_slower", lambda *args: False)
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randint(0, 255, (33, 257, 70), generator=g, device="cuda", dtype=torch.uint8)
    x = x.view(dtype) if dtype.itemsize == 1 else torch.randn(33, 257, 70, device="cuda", generator=g).to(dtype)
    want = fn(x)
    with tileflip.enabled():
        got = fn(x)
        taken = E.counts["taken"]
    assert taken == 1, dict(E.counts)
    assert got.stride() == want.stride()
    assert torch.equal(bits(got), bits(want))


@pytest.mark.gpu
def test_gpu_declines_host_device_casts_and_non_blocking(monkeypatch):
    monkeypatch.setattr(E, "ADDED_HOST_S", 0.0)
    x = torch.randn(64, 96, 80, device="cuda")
    with tileflip.enabled():
        host = x.permute(2, 0, 1).cpu()
        cast = torch.empty(80, 64, 96, device="cuda", dtype=torch.float16)
        cast.copy_(x.permute(2, 0, 1))
        nb = torch.empty(80, 64, 96, device="cuda")
        nb.copy_(x.permute(2, 0, 1), non_blocking=True)
        counts = dict(E.counts)
    assert counts.get("taken", 0) == 0, counts
    assert torch.equal(host, x.permute(2, 0, 1).cpu())
    assert torch.equal(cast, x.permute(2, 0, 1).half())
    assert torch.equal(nb, x.permute(2, 0, 1))


@pytest.mark.gpu
def test_gpu_autograd(monkeypatch):
    monkeypatch.setattr(E, "ADDED_HOST_S", 0.0)
    monkeypatch.setattr(E, "_slower", lambda *args: False)
    x = torch.randn(40, 64, 72, device="cuda", requires_grad=True)
    with tileflip.enabled():
        y = x.transpose(1, 2).contiguous()
        y.backward(torch.ones_like(y) * 2)
        assert E.counts["taken"] >= 1
    assert torch.equal(x.grad, torch.full_like(x, 2))


GRAPH_CHILD = r"""
import torch, tileflip
from tileflip.ops import enable as E
E.ADDED_HOST_S = 0.0
E._slower = lambda *args: False
x = torch.randn(48, 130, 72, device="cuda")
tileflip.enable()
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):  # caches cold: the first call of this plan goes to PyTorch's kernel
        y = x.permute(2, 0, 1).contiguous()
    g.replay()
torch.cuda.synchronize()
assert torch.equal(y, x.permute(2, 0, 1).contiguous())
z = x.permute(2, 0, 1).contiguous()  # taken: compiles and loads the kernel
g2 = torch.cuda.CUDAGraph()
with torch.cuda.graph(g2):
    w = x.permute(2, 0, 1).contiguous()  # taken inside the capture now
x.add_(1)
g2.replay()
torch.cuda.synchronize()
assert torch.equal(w, x.permute(2, 0, 1).contiguous()), "replay"
print(dict(E.counts))
"""


@pytest.mark.gpu
def test_gpu_cuda_graph_capture_with_cold_caches(tmp_path):
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "triton"), "TILEFLIP_CACHE_DIR": str(tmp_path / "nvrtc")}
    done = subprocess.run([sys.executable, "-c", GRAPH_CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = eval(done.stdout.strip().splitlines()[-1])
    assert counts.get("not compiled while capturing") == 1 and counts.get("taken", 0) >= 2, counts


@pytest.mark.gpu
def test_gpu_einops_rearrange(monkeypatch):
    einops = pytest.importorskip("einops")
    monkeypatch.setattr(E, "ADDED_HOST_S", 0.0)
    monkeypatch.setattr(E, "_slower", lambda *args: False)
    x = torch.randn(4, 3, 64, 48, device="cuda")
    pattern = "b c (h p1) (w p2) -> b (h w) (p1 p2 c)"
    want = einops.rearrange(x, pattern, p1=16, p2=16)
    with tileflip.enabled():
        got = einops.rearrange(x, pattern, p1=16, p2=16)
        assert E.counts["taken"] == 1, dict(E.counts)
    assert torch.equal(bits(got), bits(want))


@pytest.mark.gpu
@pytest.mark.filterwarnings(OPINFO_WARNING)
def test_gpu_opinfo_samples_and_copies_between_their_layouts(monkeypatch):
    monkeypatch.setattr(E, "ADDED_HOST_S", 0.0)
    monkeypatch.setattr(E, "_slower", lambda *args: False)
    with tileflip.enabled():
        taken, compared = check_opinfo("cuda", E.counts)
    assert compared > 200 and taken > 50, (taken, compared)


@pytest.mark.gpu
def test_gpu_repeated_calls_take_the_cached_decision():
    x = torch.randn(64, 512, 512, device="cuda", dtype=torch.bfloat16)
    with tileflip.enabled():
        for _ in range(3):
            y = x.transpose(1, 2).contiguous()
        stats = tileflip.enabled_stats()
    assert stats["taken"] == 3, stats
    assert torch.equal(bits(y), bits(x.transpose(1, 2).contiguous()))
