"""tileflip.transpose_in_place: the planner's maps (pure Python), the kernels on small shapes (the
interpreter on a CPU, the GPU where there is one), refusals, autograd's version counter, torch.compile,
and large shapes on the GPU."""

import itertools
import random
import re

import pytest
import torch
from helpers import assert_bits_equal, bits, random_bits, without_interpreter

import tileflip
from tileflip.ops.inplace import plan_for
from tileflip.plan import inplace as P

DTYPES = (torch.uint8, torch.bfloat16, torch.float32, torch.int64, torch.complex64, torch.bool)


def raw(t):
    return t.detach().contiguous().view(-1).view(torch.uint8)


def expected_order(batch, m, n):
    return [b * m * n + i * n + j for b in range(batch) for j in range(n) for i in range(m)]


@pytest.mark.parametrize("on_chip", [None, 5])
def test_plans_transpose_every_small_shape(on_chip):
    """Every shape up to 19 x 19, batched too, on chip and staged (groups over 5 elements staged)."""
    staged = 0
    for m, n in itertools.product(range(1, 20), range(1, 20)):
        for batch in (1, 2):
            plan = P.plan_in_place(batch, m, n, 4, on_chip_elements=on_chip, scratch_bytes=None)
            staged += sum(p.mode == "staged" for p in plan.passes)
            got = P.apply_plan(plan, list(range(batch * m * n)))
            assert got == expected_order(batch, m, n), (batch, m, n, plan.describe())
    assert (staged > 100) == (on_chip is not None), staged


def test_both_grids_are_planned():
    """Where rows of the (N, M) grid hold more passes on chip, the plan scatters on that grid."""
    tall = P.plan_in_place(1, 3000, 300, 4)
    wide = P.plan_in_place(1, 300, 3000, 4)
    assert tall.orientation == "columns" and all(p.scatter for p in tall.passes)
    assert wide.orientation == "rows" and not any(p.scatter for p in wide.passes)
    assert [p.mode for p in tall.passes] == [p.mode for p in wide.passes] == ["on chip"] * 3


def trace_back(plan, R, S):
    """The input position whose element a gather plan's last pass writes to (R, S)."""
    for p in reversed(plan.passes):
        R, S = P.source(p.name, p.params, R, S)
    return R, S


@pytest.mark.parametrize("shape", [(3, 5_000_000_001), (65_521, 131_071), (46_341, 46_345 * 4), (2, 2**40 + 6)])
def test_maps_are_exact_past_32_bits(shape):
    """Sampled positions of large shapes trace back to their source, in exact integers."""
    m, n = shape
    plan = P.plan_in_place(1, m, n, 1, scratch_bytes=2**62)
    assert not any(p.scatter for p in plan.passes) or plan.orientation == "columns"
    gm, gn = plan.passes[0].grid
    rng = random.Random(0)
    for _ in range(200):
        L = rng.randrange(m * n)
        R, S = divmod(L, gn)
        if plan.orientation == "columns":  # a scatter plan: follow an input element forward instead
            i, j = divmod(L, n)  # the element input (i, j) starts at grid position L of the (gn) grid
            r, s = divmod(L, gn)
            for p in plan.passes:
                r, s = P.source(p.name, p.params, r, s)
            assert r * gn + s == j * m + i
            continue
        r, s = trace_back(plan, R, S)
        j, i = divmod(L, m)  # the output holds input (i, j) at j m + i
        assert r * gn + s == i * n + j, (L, (R, S), (r, s))


def test_map_limit_picks_the_short_rows():
    plan = P.plan_in_place(1, 3, 5_000_000_002, 1, scratch_bytes=2**62)  # coprime: b = n on the rows grid
    assert all(p.params["b"] < P.MAP_LIMIT for p in plan.passes)
    assert plan.orientation == "columns"


def test_scratch_is_bounded_by_the_largest_staged_group_or_the_budget():
    for m, n, es in ((30000, 70001, 4), (3, 10**9, 1), (20000, 30000, 2), (5, 7, 8)):
        plan = P.plan_in_place(1, m, n, es)
        staged = [p.group_elements * es for p in plan.passes if p.mode == "staged"]
        assert plan.scratch_bytes <= max(staged + [P.DEFAULT_L2_BYTES // 2]), plan.describe()
        assert plan.scratch_bytes <= 32 * max(m, n) * es or plan.scratch_bytes <= P.DEFAULT_L2_BYTES // 2
        if staged:
            low = P.plan_in_place(1, m, n, es, scratch_bytes=max(staged))
            assert low.scratch_bytes == max(staged)
            with pytest.raises(P.InPlaceError, match="scratch_bytes=.*below one staged group"):
                P.plan_in_place(1, m, n, es, scratch_bytes=max(staged) - 1)


def test_plan_text_names_every_pass():
    from tileflip import explain

    text = explain.in_place_text((1000, 3000), dtype="bfloat16")
    for name in ("rotate columns", "shuffle rows", "shuffle columns", "predicted on the", "of a copy"):
        assert name in text, text
    assert "swap tiles" in explain.in_place_text((4, 512, 512), dtype="int8")


# --- the kernels --------------------------------------------------------------------------------------

SMALL = [(1, 9, 9), (2, 33, 33), (1, 1, 17), (1, 17, 1), (1, 4, 6), (1, 6, 4), (1, 7, 13), (1, 13, 7), (1, 12, 18),
         (3, 5, 9), (1, 64, 48), (2, 10, 15), (1, 2, 31)]  # fmt: skip


def check_in_place(x0, **kwargs):
    x = x0.clone()
    want = x0.transpose(-1, -2).contiguous()
    version, ptr = x._version, x.data_ptr()
    y = tileflip.transpose_in_place(x, **kwargs)
    assert y.data_ptr() == ptr and y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert x._version > version
    assert_bits_equal(y, want)
    return y


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_small_shapes_are_exact(device, dtype):
    for k, shape in enumerate(SMALL):
        x0 = random_bits(shape if shape[0] > 1 else shape[1:], dtype, device, seed=k)
        check_in_place(x0)


def test_staged_passes_are_exact_with_a_small_budget(device, monkeypatch):
    monkeypatch.setattr(P, "ON_CHIP_ELEMENTS", 8)
    for k, (shape, dtype) in enumerate([((7, 13), torch.float32), ((13, 7), torch.int16), ((2, 6, 10), torch.uint8),
                                        ((12, 18), torch.float64), ((5, 9), torch.bfloat16)]):  # fmt: skip
        x0 = random_bits(shape, dtype, device, seed=10 + k)
        plan = plan_for(x0)
        assert any(p.mode == "staged" for p in plan.passes), plan.describe()
        smallest = max(p.group_elements * x0.element_size() for p in plan.passes if p.mode == "staged")
        check_in_place(x0)  # the default budget: one wave
        check_in_place(x0, scratch_bytes=smallest)  # the least: one group a wave


def test_empty_tensors_get_the_view(device):
    for shape in ((0, 5), (3, 0), (2, 0, 4)):
        x = torch.empty(shape, device=device)
        y = tileflip.transpose_in_place(x)
        assert y.shape == (*shape[:-2], shape[-1], shape[-2]) and y.data_ptr() == x.data_ptr()


def test_other_views_see_the_new_bytes(device):
    x = random_bits((6, 10), torch.int32, device, seed=3)
    want = x.t().contiguous()
    old_view = x.view(-1)
    y = tileflip.transpose_in_place(x)
    assert_bits_equal(old_view.view(10, 6), want)
    assert_bits_equal(x.view(10, 6), y)
    assert x.shape == (6, 10)  # x keeps its shape and strides: it reads the transposed bytes as 6 x 10


REFUSALS = [
    (lambda d: random_bits((8, 12), torch.float32, d).t(), ValueError, "x must be contiguous"),
    (lambda d: random_bits((8, 12), torch.float32, d)[1:], ValueError, "x must span its whole storage"),
    (lambda d: random_bits((9, 12), torch.float32, d).view(-1)[:96].view(8, 12), ValueError, "whole storage"),
    (lambda d: random_bits((8, 12), torch.float32, d).requires_grad_(), ValueError, "x requires grad"),
    (lambda d: torch.zeros(8, 12, dtype=torch.complex128, device=d), TypeError, "complex128"),
    (lambda d: random_bits((2, 2, 8, 12), torch.float32, d), ValueError, "x must be 2-D"),
    (lambda d: random_bits((12,), torch.float32, d), ValueError, "x must be 2-D"),
]


@pytest.mark.parametrize("case", range(len(REFUSALS)))
def test_refusals_name_the_argument_and_write_nothing(device, case):
    make, error, words = REFUSALS[case]
    x = make(device)
    before = x.detach().clone()
    with pytest.raises(error, match=words):
        tileflip.transpose_in_place(x)
    assert torch.equal(raw(x), raw(before))


def test_scratch_budget_refusals(device, monkeypatch):
    monkeypatch.setattr(P, "ON_CHIP_ELEMENTS", 8)
    x = random_bits((7, 13), torch.float32, device, seed=4)
    before = x.clone()
    with pytest.raises(ValueError, match="scratch_bytes=4 is below one staged group"):
        tileflip.transpose_in_place(x, scratch_bytes=4)
    for bad in (2.5, True, "1"):
        with pytest.raises(TypeError, match="scratch_bytes must be an int or None"):
            tileflip.transpose_in_place(x, scratch_bytes=bad)
    for bad in (-1, -5):
        with pytest.raises(ValueError, match="scratch_bytes must be 0 or more"):
            tileflip.transpose_in_place(x, scratch_bytes=bad)
    with pytest.raises(ValueError, match="x must be contiguous"):  # the op itself checks, called directly
        torch.ops.tileflip.transpose_in_place_(x.t(), -1)
    assert torch.equal(bits(x), bits(before))


def test_scratch_that_cannot_be_allocated_is_refused_before_writing(device, monkeypatch):
    monkeypatch.setattr(P, "ON_CHIP_ELEMENTS", 8)
    x = random_bits((7, 13), torch.float32, device, seed=5)
    before = x.clone()
    real_empty = torch.empty

    def no_memory(*args, **kwargs):
        if kwargs.get("dtype") is torch.uint8:
            raise torch.OutOfMemoryError("no memory")
        return real_empty(*args, **kwargs)

    monkeypatch.setattr(torch, "empty", no_memory)
    with pytest.raises(MemoryError, match="scratch, which could not be allocated.*nothing was written"):
        tileflip.transpose_in_place(x)
    monkeypatch.undo()
    assert torch.equal(bits(x), bits(before))


def test_autograd_sees_the_version_bump(device):
    w = random_bits((6, 10), torch.float32, device, seed=6).abs() + 1
    a = w.clone().requires_grad_()
    b = a * 1.0  # b is saved by the next op
    c = (b * b).sum()
    tileflip.transpose_in_place(b.detach())  # shares b's storage, and bumps the version counter they share
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        c.backward()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_call_traces_the_mutation(device, backend):
    if device == "cpu" and backend == "inductor":
        pytest.skip("inductor on the CPU needs a C++ compiler run; aot_eager traces the same graph")
    torch._dynamo.reset()

    def f(x):
        y = tileflip.transpose_in_place(x)
        return y + 1

    x0 = random_bits((6, 10), torch.int32, device, seed=7)
    x = x0.clone()
    got = torch.compile(f, fullgraph=True, backend=backend)(x)
    assert_bits_equal(got, x0.t().contiguous() + 1)
    assert_bits_equal(x.view(10, 6), x0.t().contiguous())


# --- the GPU: large, odd and past 2**31 ---------------------------------------------------------------

GPU_SHAPES = [
    ((4096, 4096), torch.float32), ((4099, 4099), torch.uint8), ((3, 2000, 2000), torch.float64),
    ((4096, 8192), torch.bfloat16), ((9973, 4099), torch.float32), ((20000, 3), torch.int16),
    ((3, 200000), torch.float32), ((1000, 30000), torch.uint8), ((30000, 1000), torch.int64),
    ((8, 1000, 3000), torch.float32), ((2, 4100, 2050), torch.float16), ((1, 12345), torch.float32),
    ((5000, 70001), torch.float32), ((70001, 5000), torch.bfloat16),
]  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("case", range(len(GPU_SHAPES)))
def test_gpu_large_and_odd_shapes(case):
    shape, dtype = GPU_SHAPES[case]
    check_in_place(random_bits(shape, dtype, "cuda", seed=20 + case))


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(46349, 46351), (2, 2**30 + 3), (46341, 46341)])
def test_gpu_past_2_31_elements(shape):
    """Index formula check (no out-of-place copy of 2 GiB): every element where the fill put it."""
    from tileflip.bench.inplace import fill, mismatches

    x = torch.empty(shape, dtype=torch.uint8, device="cuda")
    fill(x)
    y = tileflip.transpose_in_place(x)
    m, n = shape
    assert mismatches(y.view(1, n, m), 1, m, n) == 0


@pytest.mark.gpu
def test_gpu_cuda_graph_replays():
    x = random_bits((700, 1900), torch.float32, "cuda", seed=30)
    want = x.t().contiguous()
    buf = x.clone()
    tileflip.transpose_in_place(buf)  # compiled before the capture
    buf.copy_(x)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        tileflip.transpose_in_place(buf)
    buf.copy_(x)
    g.replay()
    torch.cuda.synchronize()
    assert_bits_equal(buf.view(1900, 700), want)



@pytest.mark.parametrize("index_64", [False, True])
@pytest.mark.parametrize("staged", [False, True])
@pytest.mark.parametrize("map_index", [0, 1, 2])
@without_interpreter
def test_pass_kernel_compiles_for_sm90(staged, map_index, index_64):
    """Every map, on chip and staged, in 32- and 64-bit indexing, builds for sm_90 without a GPU, with no
    spills; the 32-bit form divides its elements' indices by multiply-high only."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from tileflip.kernels.triton.inplace import group_pass_kernel as kernel
    names = ["ptr", "slot", "gm", "gn", "c", "b", "ainv", "groups", "first", "count", "mat", "tiles_s", "a", "lift",
             "gm_magic", "gm_shift", "c_magic", "c_shift", "b_magic", "b_shift"]  # fmt: skip
    block = (32, 64) if staged else (1, 16384)
    constexprs = {"MAP": map_index, "SCATTER": staged, "ROWS": True, "STAGED": staged, "BLOCK_R": block[0],
                  "BLOCK_S": block[1], "INDEX_64": index_64}  # fmt: skip
    width = "i64" if index_64 else "i32"
    signature = dict.fromkeys(names, width) | {"ptr": "*u32", "slot": "*u32"} | dict.fromkeys(constexprs, "constexpr")
    compiled = triton.compile(ASTSource(fn=kernel, signature=signature, constexprs=constexprs),
                              target=GPUTarget("cuda", 90, 32), options={"num_warps": 4 if staged else 16})  # fmt: skip
    assert "st.local" not in compiled.asm["ptx"]
    assert "bar.sync" in compiled.asm["ptx"] or "barrier.sync" in compiled.asm["ptx"] or staged
    divisions = len(re.findall(r"\b(?:div|rem)\.[su]32", compiled.asm["ptx"]))
    assert index_64 or divisions <= 2, divisions  # the program's own decode: one divide and one remainder
