"""tileflip.quantize: layouts, bit-exactness, special values, errors and torch.compile.

The plain-torch reference (``backend="torch"``) is pinned three ways. On the CPU: against torchao 0.18
(``to_mx``, ``nvfp4_quantize``, ``to_blocked``, its fp4 conversion) and, for the fp8 block recipes,
whose torchao kernels need a GPU, against an independent numpy model of those kernels' arithmetic.
On a GPU (marked ``gpu``): against torchao's blockwise fp8 Triton kernels, and the reference on CUDA
against itself on the CPU. The fused kernel (``backend="triton"``, what ``"auto"`` runs here under
Triton's interpreter and on a GPU) is compared with the reference on every recipe, option and output
set; on a GPU also with torchao's kernels, and in ``torch._scaled_mm`` GEMMs. Outputs are compared as
bytes; where torchao's bytes depend on a NaN's payload or sign, the comparison says so and checks the
NaN positions instead.
"""

import functools
import math

import numpy as np
import pytest
import torch
import torch._dynamo.testing
from helpers import without_interpreter

import tileflip
from tileflip.ops import quantize_reference as ref
from tileflip.ops.quantize import Quantized
from tileflip.plan import scales

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy: inf * 0 in the model's NaN cases

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
DTYPES = [pytest.param(BF16, id="bf16"), pytest.param(FP16, id="fp16"), pytest.param(FP32, id="fp32")]
RECIPES = ["fp8_1x128", "fp8_128x128", "mxfp8", "nvfp4"]
SIDES = {"row": (True, False), "col": (False, True), "both": (True, True)}
E2M1_MAGNITUDES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def u8(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8)


def i32(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32)


def assert_bytes(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Same shape and dtype, and the same bytes (1-byte types) or bits (fp32)."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    a = u8(actual.contiguous()) if actual.element_size() == 1 else i32(actual)
    e = u8(expected.contiguous()) if expected.element_size() == 1 else i32(expected)
    diff = (a.cpu() != e.cpu()).nonzero()
    assert diff.numel() == 0, (
        f"{len(diff)} of {a.numel()} differ; first at {diff[:5].tolist()}: "
        f"{[a[tuple(i)].item() for i in diff[:5]]} != {[e[tuple(i)].item() for i in diff[:5]]}"
    )


def assert_fp8_like(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """e4m3 bytes equal where ``expected`` is not NaN, and NaN in the same places (torchao's NaN byte keeps
    the sign its arithmetic gave, 0x7F or 0xFF; tileflip's is 0x7F)."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    nan_e = expected.float().isnan()
    assert torch.equal(actual.float().isnan(), nan_e), (actual.float().isnan() != nan_e).nonzero()[:5].tolist()
    assert torch.equal(u8(actual.contiguous())[~nan_e], u8(expected.contiguous())[~nan_e])
    assert (u8(actual.contiguous())[nan_e] == 0x7F).all()


def quantize_ref(x, recipe, **options):
    """The plain-torch reference (``backend="torch"``), which the torchao and model tests pin."""
    return tileflip.quantize(x, recipe, backend="torch", **options)


# --------------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------------


def sample(M, K, dtype, seed=0, spread=None) -> torch.Tensor:
    """Non-zero normal values whose magnitude changes every 8 rows and 16 columns by up to 2^+-spread
    (by default as far as the dtype allows): groups and blocks mix magnitudes, so small elements round
    to fp8 subnormals and zero."""
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(M, K, generator=g, dtype=torch.float64)
    spread = spread or (10 if dtype == FP16 else 60)
    lo, hi = -spread, spread
    e = torch.randint(lo, hi, (M // 8 + 1, K // 16 + 1), generator=g)
    e = e.repeat_interleave(8, 0).repeat_interleave(16, 1)[:M, :K]
    x = (v * 2.0**e).to(dtype)
    x[x == 0] = 1.0
    return x


def e4m3_midpoints() -> torch.Tensor:
    """The positive e4m3 values and the midpoints between neighbours (the ties), up to 448."""
    grid = torch.arange(127, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn).double()
    return torch.cat([grid, (grid[:-1] + grid[1:]) / 2]).sort().values


def special_blocks(dtype) -> torch.Tensor:
    """256 x 512: eight 128 x 128 blocks, each a case for every recipe's groups (the 1 x 32 and 1 x 16
    groups inside a block see the same case): zeros, the dtype's subnormals, an inf among normal
    values, a NaN among normal values, e4m3 ties at scale 1 (448 opens every 16-group), values near the
    dtype's max, tiny normal values (below the fp8 recipes' 1e-12 floor where the dtype has them), and
    e2m1 ties at nvfp4 scale 1 (6 opens every 16-group)."""
    info = torch.finfo(dtype)
    x = sample(256, 512, dtype, seed=7).float()
    blocks = [x[r : r + 128, c : c + 128] for r in (0, 128) for c in range(0, 512, 128)]
    blocks[0].zero_()
    steps = torch.arange(1, 129, dtype=torch.float64)
    blocks[1].copy_((info.smallest_normal * steps / 256 * (-1) ** steps).float().expand(128, 128))
    blocks[2][5, 7], blocks[2][70, 100] = float("inf"), -float("inf")
    blocks[3][9, 33] = float("nan")
    ties = e4m3_midpoints()
    row = torch.cat([ties, -ties])[torch.randperm(2 * ties.numel(), generator=torch.Generator().manual_seed(3))]
    blocks[4].copy_(row[:128].float().expand(128, 128))
    blocks[4][:, ::16] = 448.0
    blocks[5].copy_((info.max * torch.linspace(-1, 1, 128)).float().expand(128, 128).t())
    tiny = max(1e-20, info.smallest_normal)
    blocks[6].mul_(0).add_(torch.linspace(-tiny * 3, tiny * 5, 128 * 128).reshape(128, 128))
    e2m1 = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 0.2, 0.3, 1.3, 2.4, 2.6, 5.1, 4.9, 6.0]
    blocks[7].copy_(torch.tensor([6.0] + e2m1, dtype=torch.float32).repeat(8).expand(128, 128))
    blocks[7][::2].neg_()
    return x.to(dtype)


# --------------------------------------------------------------------------------------------------
# Independent models: numpy, value tables, math.frexp; no torch arithmetic on the values
# --------------------------------------------------------------------------------------------------

_E4M3_GRID = np.array([(m / 8) * 2.0**-6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
                       for e in range(16) for m in range(8)][:127])  # fmt: skip


def e4m3_encode(v: np.ndarray) -> np.ndarray:
    """fp32 values with |v| <= 448 (or NaN) -> e4m3 bytes: nearest grid value, ties to the even code."""
    a = np.abs(v).astype(np.float64)
    hi = np.clip(np.searchsorted(_E4M3_GRID, a), 0, 126)
    lo = np.clip(hi - 1, 0, 126)
    d_lo, d_hi = a - _E4M3_GRID[lo], _E4M3_GRID[hi] - a
    code = np.where(d_hi < d_lo, hi, np.where(d_lo < d_hi, lo, np.where(hi % 2 == 0, hi, lo)))
    code = code | (np.signbit(v).astype(np.int64) << 7)
    return np.where(np.isnan(v), 0x7F, code).astype(np.uint8)


def model_fp8_blocks(x: torch.Tensor, rows: int, cols: int, ue8m0: bool):
    """torchao's blockwise kernels' arithmetic, block by block in numpy (NaN in a block: all outputs NaN)."""
    x32 = x.float().numpy()
    M, K = x32.shape
    data = np.empty((M, K), np.uint8)
    scale = np.empty((M // rows, K // cols), np.float32)
    for i in range(M // rows):
        for j in range(K // cols):
            b = x32[i * rows : (i + 1) * rows, j * cols : (j + 1) * cols]
            amax = np.max(np.abs(b))
            if np.isnan(amax):
                data[i * rows : (i + 1) * rows, j * cols : (j + 1) * cols] = 0x7F
                scale[i, j] = np.float32("nan")
                continue
            amax = max(amax, np.float32(1e-12))
            m = np.float32(448.0 / float(amax))  # a float64 quotient rounded to fp32
            s = np.float32(1.0) / m
            if ue8m0 and np.isfinite(s):
                mantissa, exponent = math.frexp(float(s))
                s = np.float32(s if mantissa == 0.5 else math.ldexp(1.0, exponent))
                m = np.float32(1.0) / s
            y = np.clip(b * m, np.float32(-448), np.float32(448))
            data[i * rows : (i + 1) * rows, j * cols : (j + 1) * cols] = e4m3_encode(y)
            scale[i, j] = s
    return (torch.from_numpy(data).view(torch.float8_e4m3fn), torch.from_numpy(scale))


def e2m1_values(codes: torch.Tensor) -> torch.Tensor:
    table = torch.tensor(E2M1_MAGNITUDES + [-v for v in E2M1_MAGNITUDES])
    return table[codes.long()]


def unpack_fp4(data: torch.Tensor) -> torch.Tensor:
    """float4_e2m1fn_x2 (R, C/2) -> codes (R, C): the low nibble is the even element."""
    raw = u8(data)
    return torch.stack([raw & 0xF, raw >> 4], dim=-1).reshape(raw.shape[0], -1)


# --------------------------------------------------------------------------------------------------
# torchao (a test dependency; its CPU functions pin the MX and NV references)
# --------------------------------------------------------------------------------------------------


def torchao_mx():
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.mx_tensor import to_mx

    return to_mx, ScaleCalculationMode


def torchao_nv():
    from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize, per_tensor_amax_to_scale

    return nvfp4_quantize, per_tensor_amax_to_scale


def torchao_to_blocked(scale: torch.Tensor) -> torch.Tensor:
    from torchao.prototype.mx_formats.utils import to_blocked

    rows, cols = scale.shape
    return to_blocked(scale).view(scales.blocked_shape(rows, cols))


def ao_mxfp8(x: torch.Tensor, rule: str):
    """torchao's (data, scale) of x in 1 x 32 groups; fp16 is referenced as x.float()."""
    to_mx, mode = torchao_mx()
    xa = (x.float() if x.dtype == FP16 else x).contiguous()
    scale, data = to_mx(xa, torch.float8_e4m3fn, 32, mode.FLOOR if rule == "floor" else mode.RCEIL)
    return data, scale


def ao_nvfp4(x: torch.Tensor, g):
    nvfp4_quantize, _ = torchao_nv()
    scale, data = nvfp4_quantize(x.float().contiguous(), 16, g)
    return data.view(torch.float4_e2m1fn_x2), scale


def assert_nvfp4_like(data, scale, x, g, ao_data, ao_scale) -> None:
    """Scales as e4m3 (NaN by position); data bytes equal except where torchao converted a NaN, whose
    nibble follows the NaN's payload (3 for 0x7FC00000, 4 for 0x7FFFFFFF, 0xB for 0xFFC00000): there
    tileflip writes 4. Where torchao converts a NaN is computed from its own scale: x * (1/s), or
    x * ((1/g)/s)."""
    assert_fp8_like(scale, ao_scale)
    s = ao_scale.float()
    r = 1.0 / s if g is None else (1.0 / g) / s
    converted_nan = (x.float().reshape(s.shape[0], -1, 16) * r[..., None]).isnan().reshape(x.shape)
    mine, theirs = unpack_fp4(data), unpack_fp4(ao_data)
    assert torch.equal(mine[~converted_nan], theirs[~converted_nan])
    assert (mine[converted_nan] == ref.E2M1_NAN_CODE).all()


# --------------------------------------------------------------------------------------------------
# Layouts
# --------------------------------------------------------------------------------------------------

M0, K0 = 256, 384
# recipe -> (data, scale, data_t, scale_t) as (shape, strides, dtype) for x of (256, 384), from the table.
E4, E8, F4 = torch.float8_e4m3fn, torch.float8_e8m0fnu, torch.float4_e2m1fn_x2
TABLE = {
    "fp8_1x128": (((256, 384), (384, 1), E4), ((256, 3), (1, 256), FP32),
                  ((384, 256), (256, 1), E4), ((384, 2), (1, 384), FP32)),
    "fp8_128x128": (((256, 384), (384, 1), E4), ((2, 3), (3, 1), FP32),
                    ((384, 256), (256, 1), E4), ((3, 2), (2, 1), FP32)),
    "mxfp8": (((256, 384), (384, 1), E4), ((256, 12), (12, 1), E8),
              ((384, 256), (256, 1), E4), ((384, 8), (8, 1), E8)),
    "nvfp4": (((256, 192), (192, 1), F4), ((256, 24), (24, 1), E4),
              ((384, 128), (128, 1), F4), ((384, 16), (16, 1), E4)),
}  # fmt: skip
BLOCKED = {"mxfp8": ((64, 48), (96, 32)), "nvfp4": ((64, 96), (96, 64))}


def check_layout(t, want):
    shape, strides, dtype = want
    assert t is not None and tuple(t.shape) == shape and t.stride() == strides and t.dtype == dtype, (
        tuple(t.shape),
        t.stride(),
        t.dtype,
        want,
    )


@functools.cache
def table_outputs(recipe: str, rowwise: bool, columnwise: bool, scale_layout: str = "plain") -> Quantized:
    """``tileflip.quantize`` of the table's x (256 x 384), computed once per distinct call: the three sides of
    a recipe all compare with its both-sides outputs."""
    return tileflip.quantize(sample(M0, K0, BF16), recipe, rowwise=rowwise, columnwise=columnwise,
                             scale_layout=scale_layout)  # fmt: skip


@pytest.mark.parametrize("side", list(SIDES))
@pytest.mark.parametrize("recipe", RECIPES)
def test_layouts_follow_the_table(recipe, side):
    rowwise, columnwise = SIDES[side]
    q = table_outputs(recipe, rowwise, columnwise)
    assert isinstance(q, Quantized) and q._fields == ("data", "scale", "data_t", "scale_t", "global_scale")
    for t, want, asked in zip(q[:4], TABLE[recipe], (rowwise, rowwise, columnwise, columnwise)):
        if asked:
            check_layout(t, want)
        else:
            assert t is None
    if recipe == "nvfp4":
        assert q.global_scale.shape == () and q.global_scale.dtype == FP32
    else:
        assert q.global_scale is None
    both = table_outputs(recipe, True, True)
    for t, full in zip(q[:4], both[:4]):
        if t is not None:
            assert_bytes(t, full)
    if recipe in BLOCKED:
        b = table_outputs(recipe, rowwise, columnwise, "blocked")
        for t, shape, asked in zip((b.scale, b.scale_t), BLOCKED[recipe], (rowwise, columnwise)):
            if asked:
                assert tuple(t.shape) == shape and t.is_contiguous() and t.dtype == TABLE[recipe][1][2]


def test_fp8_128x128_transposed_outputs_are_the_transposes():
    q = tileflip.quantize(sample(M0, K0, FP32, seed=2), "fp8_128x128", columnwise=True)
    assert_bytes(q.data_t, q.data.t())
    assert_bytes(q.scale_t, q.scale.t())


# Two shapes per recipe, with no size-1 scale dimension (torch specializes those); the 1 x 32 and 1 x 16
# group recipes, whose interpreted kernels cost the most per element, take smaller ones.
DYNAMIC_SHAPES = {"fp8_1x128": ((256, 384), (384, 256)), "fp8_128x128": ((256, 384), (384, 256)),
                  "mxfp8": ((128, 192), (192, 128)), "nvfp4": ((128, 192), (192, 128))}  # fmt: skip


@pytest.mark.parametrize("recipe", RECIPES)
def test_compiled_with_dynamic_shapes(recipe):
    """The fake implementation's geometry (plan.scales) takes symbolic sizes: one graph serves two shapes."""
    torch._dynamo.reset()
    options = {"scale_layout": "blocked"} if scales.RECIPES[recipe].blocked else {}

    def f(x):
        return tileflip.quantize(x, recipe, rowwise=True, columnwise=True, **options)

    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(f, fullgraph=True, dynamic=True, backend=counter)
    for shape in DYNAMIC_SHAPES[recipe]:
        x = sample(*shape, BF16, seed=25)
        for a, b in zip(compiled(x), f(x)):
            if b is not None:
                assert a.stride() == b.stride()
                assert_bytes(a, b)
    assert counter.frame_count == 1


# --------------------------------------------------------------------------------------------------
# fp8 block recipes: the numpy model of torchao's kernels
# --------------------------------------------------------------------------------------------------


def fp8_model(x, recipe, ue8m0):
    """Model (data, scale, data_t, scale_t) in the table's layouts."""
    if recipe == "fp8_128x128":
        d, s = model_fp8_blocks(x, 128, 128, ue8m0)
        return d, s, d.t(), s.t()
    d, s = model_fp8_blocks(x, 1, 128, ue8m0)
    dt, st = model_fp8_blocks(x.t(), 1, 128, ue8m0)
    return d, s, dt, st


@pytest.mark.parametrize("scale", ["fp32", "ue8m0"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("recipe", ["fp8_1x128", "fp8_128x128"])
@pytest.mark.parametrize("case", ["random", "special"])
def test_fp8_blocks_match_the_model(case, recipe, dtype, scale):
    x = sample(M0, 512, dtype, seed=1) if case == "random" else special_blocks(dtype)
    q = quantize_ref(x, recipe, rowwise=True, columnwise=True, scale=scale)
    for got, want in zip(q[:4], fp8_model(x, recipe, scale == "ue8m0")):
        assert_bytes(got, want)
    if scale == "ue8m0":
        s = q.scale[q.scale.isfinite()]
        assert torch.equal(s, 2.0 ** torch.log2(s).round()), "ue8m0 scales are powers of two"


def test_default_scale_is_fp32():
    x = sample(128, 256, BF16, seed=3)
    for recipe in ("fp8_1x128", "fp8_128x128"):
        a = tileflip.quantize(x, recipe, columnwise=True)
        b = tileflip.quantize(x, recipe, columnwise=True, scale="fp32")
        for t, u in zip(a[:4], b[:4]):
            assert_bytes(t, u)


def test_ceil_pow2_from_bits():
    """Every exponent with mantissas 0, 1 ulp, half and all ones, against math.frexp."""
    bits = [(e << 23) | m for e in range(1, 255) for m in (0, 1, 0x400000, 0x7FFFFF)]
    s = torch.tensor(np.array(bits, dtype=np.int64).astype(np.int32)).view(torch.float32)
    want = []
    for v in s.tolist():
        mantissa, exponent = math.frexp(v)
        want.append(v if mantissa == 0.5 else math.ldexp(1.0, exponent))
    assert torch.equal(ref.ceil_pow2(s), torch.tensor(want, dtype=torch.float32))
    specials = torch.tensor([float("inf"), float("nan")])
    assert ref.ceil_pow2(specials)[0].isinf() and ref.ceil_pow2(specials)[1].isnan()


# --------------------------------------------------------------------------------------------------
# mxfp8 and nvfp4 against torchao on the CPU
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["plain", "blocked"])
@pytest.mark.parametrize("rule", ["floor", "rceil"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ["random", "special"])
def test_mxfp8_matches_torchao(case, dtype, rule, layout):
    x = sample(224, 320, dtype, seed=4) if case == "random" else special_blocks(dtype)
    q = quantize_ref(x, "mxfp8", rowwise=True, columnwise=True, rule=rule, scale_layout=layout)
    for data, scale, t in ((q.data, q.scale, x), (q.data_t, q.scale_t, x.t())):
        ao_data, ao_scale = ao_mxfp8(t, rule)
        assert_fp8_like(data, ao_data)
        assert_bytes(scale, ao_scale if layout == "plain" else torchao_to_blocked(ao_scale))
    if layout == "blocked" and dtype != FP16:
        to_mx, mode = torchao_mx()
        swizzled, _ = to_mx(x.contiguous(), torch.float8_e4m3fn, 32, getattr(mode, rule.upper()), True)
        assert_bytes(q.scale, swizzled)


def test_mxfp8_default_rule_is_floor():
    x = special_blocks(BF16)
    assert_bytes(tileflip.quantize(x, "mxfp8").scale, tileflip.quantize(x, "mxfp8", rule="floor").scale)


@pytest.mark.parametrize("k", [-60, -20, -5, 4, 10, 60])
def test_mxfp8_rceil_is_exact_where_torchao_rounds_through_log2(k):
    """amax one fp32 ulp above 448 * 2^k: amax / 448 lies just above 2^k, so the smallest power of two at
    or above it is 2^(k+1). torchao's eager RCEIL takes ceil(log2(.)) in fp32, where log2 rounds to k
    exactly (for every k outside -4..3), and picks 2^k: its largest element then saturates at 448."""
    a = torch.nextafter(torch.tensor(448 * 2.0**k), torch.tensor(float("inf")))
    x = torch.full((1, 32), 1.0) * a / 3
    x[0, 0] = a
    q = quantize_ref(x, "mxfp8", rule="rceil")
    assert u8(q.scale).item() == 127 + k + 1
    assert q.data[0, 0].float().item() == 224.0
    ao_data, ao_scale = ao_mxfp8(x, "rceil")
    assert u8(ao_scale).item() == 127 + k
    assert ao_data[0, 0].float().item() == 448.0
    assert torch.log2(a / 448).item() == k  # the fp32 log2 that loses it


@pytest.mark.parametrize("k", [-4, 0, 3])
def test_mxfp8_rceil_agrees_with_torchao_where_its_log2_keeps_the_ulp(k):
    a = torch.nextafter(torch.tensor(448 * 2.0**k), torch.tensor(float("inf")))
    x = torch.full((1, 32), 3.0 * 2.0**k)
    x[0, 0] = a
    q = quantize_ref(x, "mxfp8", rule="rceil")
    assert u8(q.scale).item() == 127 + k + 1
    ao_data, ao_scale = ao_mxfp8(x, "rceil")
    assert_bytes(q.scale, ao_scale)
    assert_fp8_like(q.data, ao_data)


@pytest.mark.parametrize("layout", ["plain", "blocked"])
@pytest.mark.parametrize("mode", ["auto", "given", "none"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ["random", "special"])
def test_nvfp4_matches_torchao(case, dtype, mode, layout):
    x = sample(224, 320, dtype, seed=6) if case == "random" else special_blocks(dtype)
    _, amax_to_scale = torchao_nv()
    auto = amax_to_scale(x.abs().amax().float())
    g = {"auto": auto, "given": auto * 3.7, "none": None}[mode]
    arg = {"auto": "auto", "given": g, "none": None}[mode]
    q = quantize_ref(x, "nvfp4", rowwise=True, columnwise=True, global_scale=arg, scale_layout=layout)
    if g is None:
        assert q.global_scale is None
    else:
        assert_bytes(q.global_scale, g)
    plain = q if layout == "plain" else quantize_ref(x, "nvfp4", rowwise=True, columnwise=True,
                                                          global_scale=arg)  # fmt: skip
    for data, scale, t in ((q.data, plain.scale, x), (q.data_t, plain.scale_t, x.t())):
        ao_data, ao_scale = ao_nvfp4(t, g)
        assert_nvfp4_like(data, scale, t, g, ao_data, ao_scale)
    if layout == "blocked":
        assert_bytes(q.scale, torchao_to_blocked(plain.scale))
        assert_bytes(q.scale_t, torchao_to_blocked(plain.scale_t))


def test_nvfp4_divisions_are_ieee():
    """amax / 6 and block / global_scale are IEEE quotients, as torchao computes them on the CPU (on CUDA,
    torch computes t / c as t * (1 / c)). The amax values are chosen next to e4m3 ties of the block
    scale, where the reciprocal's product rounds to the other side; the test first shows that it does."""
    six, g = torch.tensor(6.0), torch.tensor(0.3)
    grid = torch.arange(127, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn).float()
    ties = (grid[8:-1] + grid[9:]) / 2  # between normal e4m3 values

    def e4m3(v):
        return u8(v.clamp(2.0**-6, 448.0).to(torch.float8_e4m3fn))

    for two_level in (False, True):
        target = ties.double() * 6 * (0.3 if two_level else 1.0)
        near = target.float().view(torch.int32)
        amax = torch.cat([(near + k).view(torch.float32) for k in range(-6, 7)])
        block = torch.div(amax, six)
        if two_level:
            ieee, product = e4m3(torch.div(block, g)), e4m3(block * torch.div(torch.tensor(1.0), g))
        else:
            ieee, product = e4m3(block), e4m3(amax * torch.div(torch.tensor(1.0), six))
        amax = amax[ieee != product]
        assert amax.numel() >= 10
        x = amax[:, None] * torch.linspace(1.0, -0.3, 16)
        q = quantize_ref(x, "nvfp4", global_scale=g if two_level else None)
        ao_data, ao_scale = ao_nvfp4(x, g if two_level else None)
        assert_bytes(q.scale, ao_scale)
        assert_bytes(q.data, ao_data)


def test_nvfp4_nan_block():
    """A NaN in a block: its scale is NaN (0x7F) and each of its fp4 nibbles is 4 (fp4 has no NaN; 4 is
    what torchao's conversion gives for the canonical NaN, and what torchao writes here too); the other
    blocks are unaffected. With a NaN global scale (a NaN anywhere under "auto") every block is NaN,
    where torchao's nibbles follow its NaN's payload (3 on the CPU) and tileflip's stay 4."""
    x = sample(16, 64, FP32, seed=8)
    x[3, 20] = float("nan")
    q = quantize_ref(x, "nvfp4", global_scale=None)
    assert u8(q.scale)[3, 1].item() == 0x7F and (u8(q.data)[3, 8:16] == 0x44).all()
    ao_data, ao_scale = ao_nvfp4(x, None)
    assert_bytes(q.data, ao_data)
    assert_fp8_like(q.scale, ao_scale)
    q = quantize_ref(x, "nvfp4")  # "auto": the global scale is NaN
    assert q.global_scale.isnan() and (u8(q.scale) == 0x7F).all() and (u8(q.data) == 0x44).all()
    ao_data, _ = ao_nvfp4(x, q.global_scale)
    assert (u8(ao_data) == 0x33).all()


def test_nvfp4_global_scale_auto_is_torchaos_per_tensor_scale():
    _, amax_to_scale = torchao_nv()
    for dtype in (BF16, FP16, FP32):
        x = sample(64, 96, dtype, seed=9)
        assert_bytes(tileflip.quantize(x, "nvfp4").global_scale, amax_to_scale(x.abs().amax().float()))
    zero = tileflip.quantize(torch.zeros(16, 32), "nvfp4")
    assert zero.global_scale.item() == 0.0 and (u8(zero.scale) == 0x7F).all(), "0 / 0 block scales are NaN"


def test_nvfp4_given_global_scale_is_copied_not_aliased():
    x = sample(32, 64, BF16, seed=10)
    g = torch.tensor(0.01)
    q = tileflip.quantize(x, "nvfp4", global_scale=g)
    assert q.global_scale.item() == g.item() and q.global_scale.data_ptr() != g.data_ptr()


def test_e2m1_codes_match_torchao():
    """Every e2m1 midpoint and grid value, one and two fp32 ulps either side, saturation and random
    values, both signs, against torchao's f32_to_f4_unpacked."""
    from torchao.prototype.mx_formats.kernels import f32_to_f4_unpacked

    mids = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]
    base = torch.tensor(mids + E2M1_MAGNITUDES + [6.5, 7.0, 1e30, float("inf"), 1e-30, 1e-45])
    near = [base]
    for step in (1, 2):
        bits = base.view(torch.int32)
        near += [(bits + step).view(torch.float32), (bits - step).clamp(min=0).view(torch.float32)]
    g = torch.Generator().manual_seed(11)
    values = torch.cat(near + [torch.rand(100000, generator=g) * 7])
    values = torch.cat([values, -values])
    values = values[~values.isnan()]  # inf's bits plus one
    assert torch.equal(ref.e2m1_codes(values), f32_to_f4_unpacked(values))
    assert ref.e2m1_codes(torch.tensor([float("nan"), -float("nan")])).tolist() == [4, 4]
    assert f32_to_f4_unpacked(torch.tensor([0x7FFFFFFF], dtype=torch.int32).view(torch.float32)).item() == 4


def test_pack_puts_the_even_element_in_the_low_nibble():
    x = torch.tensor([[0.5, 6.0] * 8 + [1.0, -6.0] * 8])  # each group's amax is 6: scale 1
    q = tileflip.quantize(x, "nvfp4", global_scale=None)
    assert (u8(q.data)[0, :8] == 0x71).all() and (u8(q.data)[0, 8:] == 0xF2).all()


# --------------------------------------------------------------------------------------------------
# The blocked layout
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rows, cols", [(1, 1), (128, 4), (130, 5), (300, 9), (256, 12), (64, 2)])
def test_to_blocked_matches_torchao_and_the_plan(rows, cols):
    values = torch.arange(1, rows * cols + 1, dtype=torch.int32).reshape(rows, cols)
    for t in (values.float(), (values % 250 + 1).to(torch.uint8).view(torch.float8_e8m0fnu)):
        blocked = ref.to_blocked(t)
        assert tuple(blocked.shape) == scales.blocked_shape(rows, cols) and blocked.is_contiguous()
        assert_bytes(blocked, torchao_to_blocked(t))
    flat = ref.to_blocked(values.float()).flatten()
    placed = torch.zeros_like(flat)
    for r in range(rows):
        for c in range(cols):
            placed[scales.blocked_offset(r, c, cols)] = values[r, c].float()
    assert torch.equal(flat, placed), "every scale at its offset, zeros in the padding"


# --------------------------------------------------------------------------------------------------
# NaN, strides, odd rows, empty inputs
# --------------------------------------------------------------------------------------------------


def test_nan_propagates_per_recipe():
    """A NaN in a block makes its scale NaN. fp8 block recipes and mxfp8 rceil: every output of the block
    is NaN (0x7F). mxfp8 floor, as to_mx: the block's scale is 0xFF, which is inf as a divisor, so its
    finite elements give +-0 and the NaN gives NaN. Blocks without the NaN are unchanged."""
    x = sample(128, 256, BF16, seed=12)
    clean = {r: tileflip.quantize(x, r) for r in ("fp8_1x128", "fp8_128x128")}
    y = x.clone()
    y[5, 130] = float("nan")
    q = tileflip.quantize(y, "fp8_1x128", columnwise=True)
    assert i32(q.scale[5:6, 1:2]).item() == 0x7FC00000 and (u8(q.data)[5, 128:] == 0x7F).all()
    assert (u8(q.data_t)[130] == 0x7F).all() and i32(q.scale_t[130:131]).item() == 0x7FC00000
    keep = torch.ones(128, 256, dtype=torch.bool)
    keep[5, 128:] = False
    assert torch.equal(u8(q.data)[keep], u8(clean["fp8_1x128"].data)[keep])
    q = tileflip.quantize(y, "fp8_128x128", columnwise=True)
    assert i32(q.scale)[0, 1].item() == 0x7FC00000 and (u8(q.data)[:, 128:] == 0x7F).all()
    assert torch.equal(u8(q.data)[:, :128], u8(clean["fp8_128x128"].data)[:, :128])
    q = tileflip.quantize(y, "mxfp8", rule="rceil")
    assert u8(q.scale)[5, 4].item() == 0xFF and (u8(q.data)[5, 128:160] == 0x7F).all()
    q = tileflip.quantize(y, "mxfp8", rule="floor")
    block = q.data[5, 128:160].float()
    assert u8(q.scale)[5, 4].item() == 0xFF and block[2].isnan() and (block[:2] == 0).all()
    assert torch.equal(block[[0, 1]].signbit(), y[5, 128:130].float().signbit())
    q = tileflip.quantize(y, "nvfp4", global_scale=None)
    assert u8(q.scale)[5, 8].item() == 0x7F and (u8(q.data)[5, 64:72] == 0x44).all()


def strided_views(M, K, dtype):
    """(name, view) pairs of an (M, K) x with other strides: a transpose, a step along both dimensions,
    an offset inside a larger tensor, and a negative view."""
    base = sample(2 * K, 2 * M, dtype, seed=13)
    yield "transposed", base[:K, :M].t()
    yield "stepped", sample(2 * M, 2 * K, dtype, seed=14)[::2, ::2]
    yield "offset", sample(M + 3, K + 5, dtype, seed=15)[3:, 5:]
    yield "negative", torch._neg_view(sample(M, K, dtype, seed=16))


@pytest.mark.parametrize("recipe", ["fp8_1x128", "mxfp8", "nvfp4"])
def test_odd_row_counts_row_wise(recipe):
    x = sample(33, 256, FP32, seed=17)
    q = quantize_ref(x, recipe)
    assert q.data.shape[0] == 33 and q.scale.shape[0] == 33
    if recipe == "fp8_1x128":
        want = model_fp8_blocks(x, 1, 128, False)
        assert_bytes(q.data, want[0])
        assert_bytes(q.scale, want[1])
    elif recipe == "mxfp8":
        ao_data, ao_scale = ao_mxfp8(x, "floor")
        assert_fp8_like(q.data, ao_data)
        assert_bytes(q.scale, ao_scale)
        blocked = quantize_ref(x, recipe, scale_layout="blocked").scale
        assert tuple(blocked.shape) == (32, 32)  # one row of tiles, two columns: 33 x 8 scales, zero-padded
        assert_bytes(blocked, torchao_to_blocked(ao_scale))
    else:
        q = quantize_ref(x, recipe, global_scale=None)
        ao_data, ao_scale = ao_nvfp4(x, None)
        assert_nvfp4_like(q.data, q.scale, x, None, ao_data, ao_scale)
    with pytest.raises(ValueError, match="row count must be a multiple of"):
        quantize_ref(x, recipe, columnwise=True)


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("shape", [(0, 256), (128, 0), (0, 0)])
def test_empty_inputs(recipe, shape):
    q = tileflip.quantize(torch.empty(shape, dtype=BF16), recipe, rowwise=True, columnwise=True)
    M, K = shape
    lay = scales.layouts(recipe, M, K, True, True, False)
    for t, layout in zip(q[:4], lay):
        assert tuple(t.shape) == layout.shape and t.numel() == 0


# --------------------------------------------------------------------------------------------------
# The fused kernel against the reference (interpreter here; the same tests run on a GPU)
# --------------------------------------------------------------------------------------------------

KERNEL_OPTIONS = {
    "fp8_1x128": [{}, {"scale": "ue8m0"}],
    "fp8_128x128": [{}, {"scale": "ue8m0"}],
    "mxfp8": [{"rule": "floor"}, {"rule": "rceil", "scale_layout": "blocked"}],
    "nvfp4": [{}, {"global_scale": None, "scale_layout": "blocked"}, {"global_scale": "given"}],
}
KERNEL_CASES = [(r, i) for r, opts in KERNEL_OPTIONS.items() for i in range(len(opts))]
# Shapes whose sizes are not multiples of the kernel's tiles (where the recipe allows it); fp8_1x128's K = 384
# is one and a half of its row-wise tile's 256 columns, and M = 256 two of its 128-row tiles.
EDGE_SHAPES = {"fp8_1x128": (256, 384), "fp8_128x128": (384, 256), "mxfp8": (96, 160), "nvfp4": (48, 208)}


def kernel_options(recipe: str, index: int, table: dict = KERNEL_OPTIONS) -> dict:
    options = dict(table[recipe][index])
    if options.get("global_scale") == "given":
        options["global_scale"] = torch.tensor(0.0123)
    return options


def on(device, options: dict) -> dict:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in options.items()}


def assert_same_results(got: Quantized, want: Quantized) -> None:
    for a, b in zip(got, want):
        assert (a is None) == (b is None)
        if a is not None:
            assert a.stride() == b.stride()
            assert_bytes(a.cpu(), b.cpu())


def check_kernel(x: torch.Tensor, recipe: str, device, **options) -> None:
    """The kernel on ``device`` (the GPU where there is one, else the interpreter) against the reference on
    the CPU."""
    got = tileflip.quantize(x.to(device), recipe, backend="triton", **on(device, options))
    assert_same_results(got, quantize_ref(x, recipe, **options))


# Every input dtype with both outputs; the single output sets (other tiles, other code paths) in bf16: the
# conversion of x to fp32 is shared by every path.
SIDE_DTYPES = [pytest.param("both", d, id=f"both-{n}") for d, n in ((BF16, "bf16"), (FP16, "fp16"), (FP32, "fp32"))]
SIDE_DTYPES += [pytest.param(side, BF16, id=f"{side}-bf16") for side in ("row", "col")]


@pytest.mark.parametrize("side, dtype", SIDE_DTYPES)
@pytest.mark.parametrize("recipe, index", KERNEL_CASES, ids=[f"{r}-{i}" for r, i in KERNEL_CASES])
def test_kernel_matches_the_reference(recipe, index, dtype, side, device):
    """Special blocks (zeros, subnormals, inf, NaN, ties, the dtype's max, tiny values) and sizes off the
    kernel's tiles, for each output set."""
    rowwise, columnwise = SIDES[side]
    for x in (special_blocks(dtype), sample(*EDGE_SHAPES[recipe], dtype, seed=27)):
        check_kernel(x, recipe, device, rowwise=rowwise, columnwise=columnwise, **kernel_options(recipe, index))


@pytest.mark.parametrize("recipe", ["fp8_1x128", "mxfp8", "nvfp4"])
def test_kernel_odd_row_counts_row_wise(recipe, device):
    x = sample(33, 256, BF16, seed=28)
    for index in range(len(KERNEL_OPTIONS[recipe])):
        check_kernel(x, recipe, device, **kernel_options(recipe, index))


@pytest.mark.parametrize("recipe", RECIPES)
def test_kernel_strided_inputs(recipe, device):
    for name, x in strided_views(128, 256, BF16):
        if name == "negative":
            got = tileflip.quantize(x.to(device), recipe, rowwise=True, columnwise=True, backend="triton")
            assert_same_results(got, quantize_ref(x.resolve_neg(), recipe, rowwise=True, columnwise=True))
        else:
            base = x._base if x._base is not None else x
            moved = base.to(device).as_strided(x.shape, x.stride(), x.storage_offset())
            got = tileflip.quantize(moved, recipe, rowwise=True, columnwise=True, backend="triton")
            assert_same_results(got, quantize_ref(x, recipe, rowwise=True, columnwise=True))


def test_kernel_int64_offsets(device):
    """The kernel's int64 offsets (chosen where an offset may reach 2**31), forced on a small x."""
    from tileflip import tuning
    from tileflip.kernels.triton import quantize as kernel
    from tileflip.ops.quantize import _output_dtypes

    x = sample(128, 256, BF16, seed=29)[:, :160]
    data_dtype, scale_dtype = _output_dtypes("mxfp8")
    lay = scales.layouts("mxfp8", 128, 160, True, True, False)
    outs = [torch.empty_strided(lo.shape, lo.strides, dtype=d, device=device)
            for lo, d in zip(lay, (data_dtype, scale_dtype) * 2)]  # fmt: skip
    plan = scales.quantize_launch("mxfp8", 128, 160, *x.stride(), True, True, False, False, "floor",
                                  tuning.quantize_tile(32, False, True, True))  # fmt: skip
    assert not plan.off64
    base = x._base.to(device)
    kernel.launch(base.as_strided(x.shape, x.stride(), x.storage_offset()), *outs, None, plan._replace(off64=True))
    for a, b in zip(outs, quantize_ref(x, "mxfp8", columnwise=True)):
        assert_bytes(a.cpu(), b)


@without_interpreter
def test_kernel_code_divides_exactly_on_every_gpu():
    """The compiled kernel never uses Triton's approximate division (div.full.f32) nor flushes
    denormals; the hardware e4m3 conversion appears only where the GPU has it (sm_89 and later: HW 2;
    an A100, sm_80, gets HW 1 and the integer conversion)."""
    import re

    from tileflip import tuning
    from tileflip.kernels.triton import quantize as kernel

    for recipe in RECIPES:
        spec = scales.RECIPES[recipe]
        tile = tuning.quantize_tile(spec.block, spec.square, True, True)
        plan = scales.quantize_launch(recipe, 1024, 2048, 2048, 1, True, True, False, False, "floor", tile)
        for arch, hw in ((90, 2), (80, 1)):
            ptx = kernel.compile_for_target(BF16, plan, arch=arch, hw=hw, global_scale=recipe == "nvfp4").asm["ptx"]
            assert "div.full" not in ptx and not re.search(r"\.ftz", ptx), (recipe, arch)
            assert ("cvt.rn.satfinite.e4m3x2" in ptx) == (hw == 2), (recipe, arch)


def test_plan_picks_int64_offsets_past_2_31():
    tile = (128, 128, 8)
    small = scales.quantize_launch("fp8_1x128", 8192, 28672, 28672, 1, True, True, False, False, "floor", tile)
    assert not small.off64 and small.grid_m == 64 and small.grid_k == 224
    big = scales.quantize_launch("fp8_1x128", 65536, 32896, 32896, 1, True, True, False, False, "floor", tile)
    assert big.off64, "65536 x 32896 elements: past 2**31"
    exact = scales.quantize_launch("fp8_1x128", 65536, 32768, 32768, 1, True, True, False, False, "floor", tile)
    assert not exact.off64, "the largest offset is 2**31 - 1"
    strided = scales.quantize_launch("fp8_1x128", 2048, 1024, 2**21, 1, True, False, False, False, "floor", tile)
    assert strided.off64, "x's own offsets reach 2**31"
    with pytest.raises(ValueError, match="does not hold whole"):
        scales.quantize_launch("mxfp8", 64, 64, 64, 1, True, True, False, False, "floor", (48, 64, 4))
    with pytest.raises(ValueError, match="takes a 128x128 tile"):
        scales.quantize_launch("fp8_128x128", 128, 128, 128, 1, True, True, False, False, "floor", (64, 128, 4))


def test_kernel_refuses_cpu_without_the_interpreter(monkeypatch):
    from tileflip.kernels.triton import quantize as kernel

    monkeypatch.setattr(kernel, "_INTERPRETED", False)
    with pytest.raises(ValueError, match="backend='triton' got a CPU tensor"):
        tileflip.quantize(X, "mxfp8", backend="triton")
    q = tileflip.quantize(X, "mxfp8")  # "auto" falls back to the reference
    assert_same_results(q, quantize_ref(X, "mxfp8"))


# --------------------------------------------------------------------------------------------------
# Dequantization
# --------------------------------------------------------------------------------------------------


def block_scales(q: Quantized, recipe: str, side: str) -> torch.Tensor:
    """Each element's dequantization factor in float64: its block's scale (times the global scale)."""
    scale = q.scale if side == "row" else q.scale_t
    s = scale.double()
    if recipe == "nvfp4" and q.global_scale is not None:
        s = s * q.global_scale.double()
    if recipe == "fp8_128x128":
        s = s.repeat_interleave(128, 0)
    return s.repeat_interleave(scales.RECIPES[recipe].block, 1)


def dequantize(q: Quantized, recipe: str, side: str) -> torch.Tensor:
    """data * scale in float64 (plain layouts)."""
    data = q.data if side == "row" else q.data_t
    values = e2m1_values(unpack_fp4(data)).double() if recipe == "nvfp4" else data.double()
    return values * block_scales(q, recipe, side)


@pytest.mark.parametrize("recipe, options", [
    ("fp8_1x128", {}), ("fp8_1x128", {"scale": "ue8m0"}), ("fp8_128x128", {}), ("fp8_128x128", {"scale": "ue8m0"}),
    ("mxfp8", {"rule": "floor"}), ("mxfp8", {"rule": "rceil"}),
    ("nvfp4", {}), ("nvfp4", {"global_scale": None}),
])  # fmt: skip
def test_dequantized_values_are_within_half_a_step(recipe, options):
    """data * scale is x rounded to the element format's grid at its block's scale S: within half a step
    (2^-4 |x| for e4m3, |x| / 4 for e2m1; half the smallest subnormal step, 2^-10 S or S / 4, below),
    plus what saturation clips (mxfp8 floor's blocks reach 512 S, past e4m3's 448). Magnitudes within
    2^+-8, so that single-level nvfp4 (scales up to 448, values up to 2688) holds them."""
    x = sample(256, 256, FP32, seed=18, spread=8)
    q = tileflip.quantize(x, recipe, rowwise=True, columnwise=True, **options)
    half_step, tiny, top = (0.25, 0.25, 6.0) if recipe == "nvfp4" else (2.0**-4, 2.0**-10, 448.0)
    for side, t in (("row", x), ("col", x.t())):
        exact, block = t.double(), block_scales(q, recipe, side)
        bound = torch.maximum(exact.abs() * half_step, block * tiny) * (1 + 2.0**-10)
        bound = bound + (exact.abs() - top * block).clamp(min=0)
        err = (dequantize(q, recipe, side) - exact).abs()
        assert (err <= bound).all(), (err - bound).max()
        assert (err.norm() / exact.norm()).item() < (0.15 if recipe == "nvfp4" else 0.05)


# --------------------------------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------------------------------

X = sample(128, 256, BF16, seed=19)
ERRORS = [
    ({"x": X.float().numpy()}, TypeError, "x must be a torch.Tensor"),
    ({"x": X[0]}, ValueError, "x must be 2-D"),
    ({"x": X.to(torch.float64)}, TypeError, "x must have dtype float32, float16 or bfloat16"),
    ({"x": X.to(torch.int32)}, TypeError, "x must have dtype"),
    ({"x": X.to_sparse()}, TypeError, "x must be a dense tensor"),
    ({"recipe": "fp8"}, ValueError, "recipe must be one of"),
    ({"recipe": None}, ValueError, "recipe must be one of"),
    ({"rowwise": 1}, TypeError, "rowwise must be a bool"),
    ({"columnwise": None}, TypeError, "columnwise must be a bool"),
    ({"rowwise": False}, ValueError, "rowwise and columnwise are both False"),
    ({"scale": "e8m0"}, ValueError, "scale must be one of"),
    ({"recipe": "mxfp8", "scale": "ue8m0"}, ValueError, "scale applies to recipe fp8_1x128 and fp8_128x128"),
    ({"recipe": "nvfp4", "scale": "fp32"}, ValueError, "scale applies to recipe"),
    ({"scale_layout": "blocked"}, ValueError, "scale_layout applies to recipe mxfp8 and nvfp4 only"),
    ({"recipe": "mxfp8", "scale_layout": "swizzled"}, ValueError, "scale_layout must be one of"),
    ({"recipe": "mxfp8", "global_scale": None}, ValueError, "global_scale applies to recipe nvfp4 only"),
    ({"global_scale": torch.tensor(1.0)}, ValueError, "global_scale applies to recipe nvfp4 only"),
    ({"recipe": "nvfp4", "global_scale": "max"}, ValueError, "global_scale must be 'auto'"),
    ({"recipe": "nvfp4", "global_scale": 0.5}, TypeError, "global_scale must be 'auto', a 0-d float32 tensor"),
    ({"recipe": "nvfp4", "global_scale": torch.ones(1)}, ValueError, "global_scale must be a 0-d tensor"),
    ({"recipe": "nvfp4", "global_scale": torch.tensor(1.0, dtype=torch.float64)}, TypeError,
     "global_scale must have dtype float32"),
    ({"recipe": "nvfp4", "global_scale": torch.tensor(1.0, device="meta")}, ValueError,
     "global_scale must be on cpu"),
    ({"recipe": "mxfp8", "rule": "ceil"}, ValueError, "rule must be one of"),
    ({"rule": "floor"}, ValueError, "rule applies to recipe mxfp8 only"),
    ({"backend": "cuda-tiled"}, ValueError, "backend must be one of"),
    ({"backend": "cuda"}, ValueError, "backend=.cuda. cannot take this call: it needs a CUDA tensor"),
    ({"x": X[:, :200]}, ValueError, "column count must be a multiple of 128 for row-wise output"),
    ({"x": X[:100], "rowwise": False, "columnwise": True}, ValueError, "row count must be a multiple of 128"),
    ({"x": X[:100], "recipe": "fp8_128x128"}, ValueError, "sizes must both be multiples of 128"),
    ({"x": X[:, :48], "recipe": "mxfp8"}, ValueError, "multiple of 32 for row-wise output of recipe 'mxfp8'"),
    ({"x": X[:24], "recipe": "nvfp4", "columnwise": True}, ValueError, "row count must be a multiple of 16"),
]  # fmt: skip


@pytest.mark.parametrize("kwargs, error, match", ERRORS, ids=[str(i) for i in range(len(ERRORS))])
def test_errors_name_the_argument(kwargs, error, match):
    kwargs = dict(kwargs)
    x = kwargs.pop("x", X)
    recipe = kwargs.pop("recipe", "fp8_1x128")
    before = X.clone()
    g = kwargs.get("global_scale")
    g_before = g.clone() if isinstance(g, torch.Tensor) and g.device.type != "meta" else None
    with pytest.raises(error, match=match):
        tileflip.quantize(x, recipe, **kwargs)
    assert torch.equal(X, before)
    if g_before is not None:
        assert torch.equal(g, g_before)


def test_not_differentiable():
    x = X.float().requires_grad_()
    with pytest.raises(ValueError, match="quantize is not differentiable, but x requires grad"):
        tileflip.quantize(x, "mxfp8")
    g = torch.tensor(0.01, requires_grad=True)
    with pytest.raises(ValueError, match="global_scale requires grad"):
        tileflip.quantize(X, "nvfp4", global_scale=g)
    with torch.no_grad():
        q = tileflip.quantize(x, "mxfp8")
        assert not q.data.requires_grad


def test_auto_backend_runs_the_kernel_where_it_can(monkeypatch, device):
    """On a GPU, and on the CPU under the interpreter, "auto" runs the fused kernel; "torch" never does."""
    from tileflip.kernels.triton import quantize as kernel

    launches = []
    real = kernel.launch
    monkeypatch.setattr(kernel, "launch", lambda *a: launches.append(1) or real(*a))
    x = sample(128, 256, BF16, seed=26).to(device)
    a = tileflip.quantize(x, "mxfp8", columnwise=True)
    assert len(launches) == 1
    b = tileflip.quantize(x, "mxfp8", columnwise=True, backend="torch")
    assert len(launches) == 1
    assert_same_results(a, b)


# --------------------------------------------------------------------------------------------------
# The CUDA C++ kernel (GPU; its refusals and index arithmetic on the CPU too)
# --------------------------------------------------------------------------------------------------

FP8_RECIPES = ["fp8_1x128", "fp8_128x128"]
# Every option of each recipe that changes what the kernel computes or where it writes.
CUDA_OPTIONS = {
    "fp8_1x128": [{}, {"scale": "ue8m0"}],
    "fp8_128x128": [{}, {"scale": "ue8m0"}],
    "mxfp8": [{"rule": rule, "scale_layout": layout} for rule in ("floor", "rceil") for layout in ("plain", "blocked")],
    "nvfp4": [{"global_scale": g, "scale_layout": layout} for g in ("given", None, "auto")
              for layout in ("plain", "blocked")],
}  # fmt: skip
CUDA_CASES = [(r, i) for r, opts in CUDA_OPTIONS.items() for i in range(len(opts))]


def padded_rows(M, K, dtype, seed):
    """An (M, K) view whose rows lie K + 24 elements apart, 8 elements into each row: still 16-byte aligned."""
    return sample(M, K + 24, dtype, seed=seed)[:, 8 : 8 + K]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("side", list(SIDES))
@pytest.mark.parametrize("recipe, index", CUDA_CASES, ids=[f"{r}-{i}" for r, i in CUDA_CASES])
def test_cuda_kernel_matches_the_reference_gpu(recipe, index, side, dtype):
    """Special blocks (zeros, subnormals, inf, NaN, ties, the dtype's max, tiny values), a random x of
    several tiles each way, and rows padded apart, for each output set and option."""
    rowwise, columnwise = SIDES[side]
    options = kernel_options(recipe, index, CUDA_OPTIONS)
    for x in (special_blocks(dtype), sample(384, 256, dtype, seed=31), padded_rows(256, 384, dtype, seed=32)):
        got = tileflip.quantize(x.cuda(), recipe, rowwise=rowwise, columnwise=columnwise, backend="cuda",
                                **on("cuda", options))  # fmt: skip
        assert_same_results(got, quantize_ref(x, recipe, rowwise=rowwise, columnwise=columnwise, **options))


@pytest.mark.gpu
@pytest.mark.parametrize("value", [0.0, -0.0, -0.5, float("inf"), float("-inf"), float("nan"), 1e-40, 1e-38, 3e30])
def test_cuda_nvfp4_unusual_global_scales_gpu(value):
    """Global scales that make the multipliers 0, infinite, negative or NaN, or the block scales NaN: the
    CUDA kernel's per-block table of 1 / s and its choice of e2m1 conversion give the reference's bits."""
    x = special_blocks(BF16)
    gs = torch.tensor(value)
    for rowwise, columnwise in SIDES.values():
        got = tileflip.quantize(x.cuda(), "nvfp4", rowwise=rowwise, columnwise=columnwise, global_scale=gs.cuda(),
                                backend="cuda")  # fmt: skip
        assert_same_results(got, quantize_ref(x, "nvfp4", rowwise=rowwise, columnwise=columnwise, global_scale=gs))


def assert_kernel_says(*expressions):
    """Each expression stands in quantize.cu as written: the numpy models below follow them."""
    from tileflip.kernels.cuda import quantize as cuda_kernel

    source = cuda_kernel.CU_FILE.read_text()
    for expression in expressions:
        assert expression in source, expression


# The kernel's thread mapping, modelled in numpy: what quantize.cu's index arithmetic does, checked
# here without a GPU (256 threads: warp w, half h, lane v of the half; rows 16w + 8h + i, columns 8v + k).


def test_cuda_model_is_the_kernels_arithmetic():
    """The expressions the models below follow, as they stand in the kernel's source."""
    assert_kernel_says(
        # the recipes' groups and the thread's rows and columns
        "static constexpr int G = R <= FP8_128X128 ? 128 : (R == NVFP4 ? 16 : 32);",
        "static constexpr int PACK = R == NVFP4 ? 2 : 1;",
        "GROUPS = TILE / G;",
        "const int t = threadIdx.x, w = t >> 5, lane = t & 31, h = lane >> 4, v = lane & 15;",
        "const int r0 = 16 * w + 8 * h;",
        # reduce_rows and the row multipliers
        "constexpr int L = G / 8;",
        "for (int bit = L / 2; bit >= 1 && n > 1; bit >>= 1)",
        "const int half = n / 2;",
        "const bool up = v & bit;",
        "const tf_u32 keep = up ? rmax[j + half] : rmax[j], send = up ? rmax[j] : rmax[j + half];",
        "rmax[j] = max(keep, __shfl_xor_sync(0xFFFFFFFFu, send, bit));",
        "if (L == 16) rmax[0] = max(rmax[0], __shfl_xor_sync(0xFFFFFFFFu, rmax[0], 1));",
        "constexpr int L = G / 8, N = G == 128 ? 1 : 64 / G;",
        "const int mine = G == 128 ? v >> 1 : (v & (L - 1)) * N;",
        "rowscale_b[(r0 + mine + j) * GROUPS + v / L] = (tf_u8)stored;",
        "rowscale[r0 + mine] = stored;",
        "const int src = G == 128 ? 2 * i : (v & ~(L - 1)) + i / N;",
        "rsel[i] = __shfl_sync(0xFFFFFFFFu, m[i % N], (h << 4) + src);",
        # the column groups
        "constexpr int CW = G == 16 ? 1 : G / 16;",
        "cmax[k] = max(cmax[k], __shfl_xor_sync(0xFFFFFFFFu, cmax[k], 16));",
        "block_scale<R, COUNTED>(group_top<IN, COUNTED>(h ? cmax[4 + j] : cmax[j]), ctx, mult, stored);",
        "colscale[(8 * v + 4 * h + j) * GROUPS + w] = (tf_u8)stored;",
        "const tf_u32 other = __shfl_xor_sync(0xFFFFFFFFu, m[j], 16);",
        "csel[j] = h ? other : m[j];",
        "csel[4 + j] = h ? m[j] : other;",
        "} else if (h == 0) {",
        "colmax[w * TILE + 8 * v + k] = cmax[k];",
        "for (int idx = t; idx < GROUPS * TILE; idx += THREADS)",
        "const int c = idx & (TILE - 1), q = idx >> 7;",
        "tf_u32 top = colmax[q * CW * TILE + c];",
        "for (int p = 1; p < CW; ++p) top = max(top, colmax[(q * CW + p) * TILE + c]);",
        "colmult[q * TILE + c] = m;",
        "colscale[c * GROUPS + q] = (tf_u8)stored;",
        "csel[k] = __float_as_uint(colmult[(w / CW) * TILE + 8 * v + k]);",
        # the column stage: e4m3 (8-byte chunks) and fp4 (4-byte chunks)
        "constexpr int TROW = TILE / PACK;",
        "const int chunk = (r0 >> 3) ^ v;",
        "for (int k = 0; k < 8; ++k) out += e2m1_not_nan(__fmul_rn(v.v[k], m)) << (4 * k);",
        "for (int k = 0; k < 8; ++k) out |= e2m1(__fmul_rn(v.v[k], m)) << (4 * k);",
        "for (int i = 0; i < 8; ++i) column.v[i] = f[i].v[k];",
        "*reinterpret_cast<tf_u32*>(stage + (8 * v + k) * TROW + 4 * chunk) = e2m1x8(column, m);",
        "*reinterpret_cast<uint2*>(stage + (8 * v + k) * TROW + 8 * chunk) = out;",
        "constexpr int PIECES = TROW / 16;",
        "for (int j = 0; j < TILE * PIECES / THREADS; ++j)",
        "const int g = t + THREADS * j, c = g / PIECES, p = g % PIECES, sw = (c >> 3) & 15;",
        "piece = *reinterpret_cast<const uint4*>(stage + c * TROW + 16 * (p ^ (sw >> 2)));",
        "if (sw & 1) piece = make_uint4(piece.y, piece.x, piece.w, piece.z);",
        "if (sw & 2) piece = make_uint4(piece.z, piece.w, piece.x, piece.y);",
        "stage + c * TROW + 8 * ((2 * p) ^ (sw & ~1))",
        "piece = make_uint4(s.z, s.w, s.x, s.y);",
        "data_t + (col0 + c) * (M / PACK) + row0 / PACK + 16 * p",
        # the fp8 recipes' scales
        "reinterpret_cast<float*>(scale)[kb * M + row0 + (t - TILE)]",
        "reinterpret_cast<float*>(scale_t)[mb * K + col0 + c]",
        "reinterpret_cast<float*>(scale)[mb * tiles_k + kb]",
        "reinterpret_cast<float*>(scale_t)[kb * tiles_m + mb]",
        # the byte scales: a block's tile, its shared scale bytes, their words
        "const tf_i64 tiles_k = K / TILE, mb = blockIdx.x / tiles_k, kb = blockIdx.x - mb * tiles_k;",
        "const tf_i64 row0 = mb * TILE, col0 = kb * TILE;",
        "if (!blocked) return row * groups + g0 + 4 * q;",
        "const tf_i64 r = row & 127;",
        "return 512 * ((row >> 7) * (groups >> 2) + (g0 >> 2) + q) + (r & 31) * 16 + (r >> 5) * 4;",
        "constexpr int WORDS = GROUPS >= 4 ? GROUPS / 4 : 1, ROWS = ROW ? TILE * WORDS : 0;",
        "constexpr int TOTAL = ROWS + (COL ? TILE * WORDS : 0);",
        "for (int idx = t; idx < TOTAL; idx += THREADS)",
        "const bool col_side = idx >= ROWS;",
        "const int j = col_side ? idx - ROWS : idx, r = j / WORDS, q = j - r * WORDS;",
        "(col_side ? colscale : rowscale_b) + r * GROUPS + 4 * q",
        "scale_word(blocked, col0 + r, row0 / G, M / G, q)",
        "scale_word(blocked, row0 + r, col0 / G, K / G, q)",
    )


def reduce_rows_model(rmax: np.ndarray, G: int) -> list:
    """reduce_rows<G> over the 16 lanes of a half-warp, as written: lane v's registers after it."""
    L = G // 8
    regs = [list(r) for r in rmax]
    n, bit = 8, L // 2
    while bit >= 1 and n > 1:
        half = n // 2
        send = [[regs[v][j] if v & bit else regs[v][j + half] for j in range(half)] for v in range(16)]
        new = [list(r) for r in regs]
        for v in range(16):
            for j in range(half):
                keep = regs[v][j + half] if v & bit else regs[v][j]
                new[v][j] = max(keep, send[v ^ bit][j])  # __shfl_xor_sync(send, bit)
        regs, n, bit = new, half, bit >> 1
    if L == 16:
        regs = [[max(regs[v][0], regs[v ^ 1][0])] + regs[v][1:] for v in range(16)]
    return regs


@pytest.mark.parametrize("G", [16, 32, 128])
def test_cuda_row_maxima_reduce_and_scatter_model(G):
    """reduce_rows<G>: lane v ends with rows mine .. mine + N - 1 (N = 64 / G, at least 1), each the max over
    the G / 8 lanes of its group; the lane the multiplier of row i is then taken from holds row i's max;
    and the byte scale of row mine + j goes to the lane's group, v / L, whose columns are the lane's."""
    L, N = G // 8, max(64 // G, 1)
    rmax = np.random.default_rng(G).permutation(16 * 8).reshape(16, 8)  # lane v's max of its 8 rows; distinct
    regs = reduce_rows_model(rmax, G)
    for v in range(16):
        lanes = range(v & ~(L - 1), (v & ~(L - 1)) + L)  # the lanes of v's group
        mine = v >> 1 if G == 128 else (v & (L - 1)) * N
        for j in range(N):
            assert regs[v][j] == max(rmax[u, mine + j] for u in lanes), (v, j)
        for i in range(8):
            src = 2 * i if G == 128 else (v & ~(L - 1)) + i // N
            assert src in lanes
            assert regs[src][i % N] == max(rmax[u, i] for u in lanes), (v, i)
        assert {(8 * v + k) // G for k in range(8)} == {v // L}


def column_maxima_model(x: np.ndarray, G: int):
    """The column side of a 128 x 128 tile of maxima ``x``, as the kernel's threads compute it (the scale rule
    stands in as the identity): the shared colscale bytes, and each thread's cmult, by thread."""
    GROUPS, CW, TILE = 128 // G, max(G // 16, 1), 128
    cmax = {}
    for t in range(256):
        w, h, v = t >> 5, (t >> 4) & 1, t & 15
        r0 = 16 * w + 8 * h
        cmax[t] = [x[r0 : r0 + 8, 8 * v + k].max() for k in range(8)]
    cmax = {t: [max(cmax[t][k], cmax[t ^ 16][k]) for k in range(8)] for t in range(256)}  # shfl_xor 16
    colscale = np.full(TILE * GROUPS, -1, dtype=np.int64)
    cmult = {}
    if G == 16:
        m = {t: [cmax[t][4 + j] if (t >> 4) & 1 else cmax[t][j] for j in range(4)] for t in range(256)}
        for t in range(256):
            w, h, v = t >> 5, (t >> 4) & 1, t & 15
            for j in range(4):
                at = (8 * v + 4 * h + j) * GROUPS + w
                assert colscale[at] == -1
                colscale[at] = m[t][j]
            other = m[t ^ 16]
            cmult[t] = [other[j] if h else m[t][j] for j in range(4)] + [m[t][j] if h else other[j] for j in range(4)]
        return colscale, cmult
    colmax = np.full(8 * TILE, -1, dtype=np.int64)
    for t in range(256):
        w, h, v = t >> 5, (t >> 4) & 1, t & 15
        if h == 0:
            for k in range(8):
                assert colmax[w * TILE + 8 * v + k] == -1
                colmax[w * TILE + 8 * v + k] = cmax[t][k]
    colmult = np.full(GROUPS * TILE, -1, dtype=np.int64)
    for t in range(256):
        for idx in range(t, GROUPS * TILE, 256):
            c, q = idx & (TILE - 1), idx >> 7
            top = max(colmax[(q * CW + p) * TILE + c] for p in range(CW))
            at = c * GROUPS + q
            assert colmult[q * TILE + c] == -1 and colscale[at] == -1
            colmult[q * TILE + c] = colscale[at] = top
    for t in range(256):
        w, v = t >> 5, t & 15
        cmult[t] = [colmult[(w // CW) * TILE + 8 * v + k] for k in range(8)]
    return colscale, cmult


@pytest.mark.parametrize("G", [16, 32, 128])
def test_cuda_column_groups_model(G):
    """Column group q of column c is the max over tile rows qG .. qG + G - 1 (G = 16: the warp's two halves
    share out the 8 columns of each lane; G = 32, 128: the CW = G / 16 warps' maxima in shared memory),
    stored once at shared byte c * GROUPS + q, and each thread's multipliers are its own rows' groups."""
    GROUPS = 128 // G
    x = np.random.default_rng(G).permutation(128 * 128).reshape(128, 128)  # distinct maxima
    colscale, cmult = column_maxima_model(x, G)
    want = np.array([[x[q * G : q * G + G, c].max() for q in range(GROUPS)] for c in range(128)]).reshape(-1)
    assert (colscale == want).all()
    for t in range(256):
        r0, v = 16 * (t >> 5) + 8 * ((t >> 4) & 1), t & 15
        group = slice(r0 // G * G, r0 // G * G + G)
        assert (r0 + 7) // G == r0 // G  # a thread's 8 rows lie in one group
        assert cmult[t] == [x[group, 8 * v + k].max() for k in range(8)], t


def _staged_columns(row_bytes: int, chunk_bytes: int) -> np.ndarray:
    """The stage after every thread's column-wise writes: thread (w, h, v) writes its rows r0 .. r0 + 7
    of column c = 8v + k as chunk (r0 / 8) ^ v of the stage's row c. Checks that no chunk is written
    twice and that a warp's writes hit no bank (4-byte banks, or 8-byte bank pairs for 8-byte chunks)
    more than twice; returns [row c][chunk][i] = the tile row held."""
    stage = -np.ones((128, row_bytes // chunk_bytes, 8), dtype=np.int64)
    banks_of = 32 * 4 // chunk_bytes
    for w in range(8):
        for k in range(8):
            banks = []
            for lane in range(32):
                h, v = lane >> 4, lane & 15
                r0, c = 16 * w + 8 * h, 8 * v + k
                chunk = (r0 >> 3) ^ v
                assert (stage[c, chunk] == -1).all()
                stage[c, chunk] = np.arange(r0, r0 + 8)
                banks.append(((c * row_bytes + chunk_bytes * chunk) // chunk_bytes) % banks_of)
            assert max(np.bincount(banks, minlength=banks_of)) == 2
    return stage


def test_cuda_column_stage_model():
    """The column-wise bytes: each thread's 8 rows of column c go to chunk (row / 8) ^ (c / 8) of the stage's
    row c; the read of 16 bytes (chunks 2p, 2p + 1, their halves swapped where c / 8 is odd) gives
    data_t's row c, bytes 16p .. 16p + 15, in order; each warp's 8-byte writes fall on distinct bank pairs
    but for the two a 256-byte write needs."""
    stage = _staged_columns(row_bytes=128, chunk_bytes=8)  # [row c][chunk][byte]: the tile row it holds
    for g in range(1024):
        c, p, sw = g >> 3, g & 7, ((g >> 3) >> 3) & 15
        lower = (2 * p) ^ (sw & ~1)
        piece = np.concatenate([stage[c, lower], stage[c, lower + 1]])
        if sw & 1:
            piece = np.concatenate([piece[8:], piece[:8]])
        assert (piece == np.arange(16 * p, 16 * p + 16)).all(), (c, p)


def test_cuda_fp4_column_stage_model():
    """nvfp4's column-wise bytes (4-byte chunks, rows of 64 bytes): each thread's 8 rows of column c, the
    even row in the low nibble, go to chunk (row / 8) ^ (c / 8) of the stage's row c, each chunk once; the
    read of 16 bytes (piece p ^ (sw >> 2), its words swapped in pairs where sw & 1, its halves where sw & 2,
    so that logical word e is word e ^ (sw & 3)) gives data_t's row c, bytes 16p .. 16p + 15, in order; a
    warp's 4-byte writes hit no bank more than twice."""
    TROW, PIECES = 64, 4
    stage = _staged_columns(row_bytes=TROW, chunk_bytes=4)  # [row c][chunk][nibble]: row r0 + i in bits 4i
    assert (stage >= 0).all()
    read = set()
    for t in range(256):
        for j in range(128 * PIECES // 256):
            g = t + 256 * j
            c, p, sw = g // PIECES, g % PIECES, (g // PIECES >> 3) & 15
            px, py, pz, pw = stage[c].reshape(PIECES, 4, 8)[p ^ (sw >> 2)]  # 16 bytes: uint4 of 8-nibble words
            if sw & 1:
                px, py, pz, pw = py, px, pw, pz
            if sw & 2:
                px, py, pz, pw = pz, pw, px, py
            piece = np.concatenate([px, py, pz, pw])
            # data_t's bytes 16p .. 16p + 15 of row c: nibbles 32p .. 32p + 31, x's rows in order
            assert (piece == np.arange(32 * p, 32 * p + 32)).all(), (c, p)
            read.add((c, p))
    assert len(read) == 128 * PIECES


def test_cuda_scale_addresses_follow_the_layouts():
    """Where the kernel writes a scale (element offsets from the tensor's start) against the layouts of the
    table: fp8_1x128's scale[r, kb] at kb * M + r and scale_t[c, mb] at mb * K + c; fp8_128x128's at
    mb * (K / 128) + kb and its transpose at kb * (M / 128) + mb."""
    M, K = 384, 256
    lay = scales.layouts("fp8_1x128", M, K, True, True, False)
    for r, kb in ((5, 1), (300, 0)):
        assert kb * M + r == r * lay.scale.strides[0] + kb * lay.scale.strides[1]
    for c, mb in ((7, 2), (255, 1)):
        assert mb * K + c == c * lay.scale_t.strides[0] + mb * lay.scale_t.strides[1]
    sq = scales.layouts("fp8_128x128", M, K, True, True, False)
    for mb, kb in ((2, 1), (1, 0)):
        assert mb * (K // 128) + kb == mb * sq.scale.strides[0] + kb * sq.scale.strides[1]
        assert kb * (M // 128) + mb == kb * sq.scale_t.strides[0] + mb * sq.scale_t.strides[1]


def scale_word(blocked: bool, row: int, g0: int, groups: int, q: int) -> int:
    """quantize.cu's scale_word: where word q (4 byte scales) of scale row ``row`` goes, groups from g0."""
    if not blocked:
        return row * groups + g0 + 4 * q
    r = row & 127
    return 512 * ((row >> 7) * (groups >> 2) + (g0 >> 2) + q) + (r & 31) * 16 + (r >> 5) * 4


@pytest.mark.parametrize("side", list(SIDES))
@pytest.mark.parametrize("layout", ["plain", "blocked"])
@pytest.mark.parametrize("M, K", [(384, 256), (256, 640)])
@pytest.mark.parametrize("recipe", ["mxfp8", "nvfp4"])
def test_cuda_byte_scale_words_follow_the_layouts(recipe, M, K, layout, side):
    """The byte scales, as the kernel's blocks write them: block (mb, kb)'s scale of its row r, group g sits
    at shared byte r * GROUPS + g (of its column c, group q: c * GROUPS + q), and leaves in 4-byte words at
    scale_word's offsets. Every byte of scale and scale_t is the scale the table's layout puts there,
    written once."""
    G, blocked = scales.RECIPES[recipe].block, layout == "blocked"
    GROUPS, TILE = 128 // G, 128
    ROW, COL = SIDES[side]
    lay = scales.layouts(recipe, M, K, ROW, COL, blocked)
    # scale (row, group) of either side is labelled row * groups + group
    sides = {False: (lay.scale, M, K // G), True: (lay.scale_t, K, M // G)}
    out = {col_side: np.full(math.prod(lo.shape), -1, dtype=np.int64) for col_side, (lo, _, _) in sides.items() if lo}
    tiles_k = K // TILE
    for block in range(M // TILE * tiles_k):
        mb = block // tiles_k
        kb = block - mb * tiles_k
        row0, col0 = mb * TILE, kb * TILE
        rowscale_b = np.full(TILE * GROUPS, -1, dtype=np.int64)
        colscale = np.full(TILE * GROUPS, -1, dtype=np.int64)
        for r in range(TILE):  # the tile's row (and column) r, each with its GROUPS scales
            for g in range(GROUPS):
                rowscale_b[r * GROUPS + g] = (row0 + r) * (K // G) + col0 // G + g
                colscale[r * GROUPS + g] = (col0 + r) * (M // G) + row0 // G + g
        WORDS = max(GROUPS // 4, 1)
        ROWS = TILE * WORDS if ROW else 0
        TOTAL = ROWS + (TILE * WORDS if COL else 0)
        for t in range(256):
            for idx in range(t, TOTAL, 256):
                col_side = idx >= ROWS
                j = idx - ROWS if col_side else idx
                r = j // WORDS
                q = j - r * WORDS
                shared = (colscale if col_side else rowscale_b)[r * GROUPS + 4 * q : r * GROUPS + 4 * q + 4]
                if col_side:
                    at = scale_word(blocked, col0 + r, row0 // G, M // G, q)
                else:
                    at = scale_word(blocked, row0 + r, col0 // G, K // G, q)
                assert (out[col_side][at : at + 4] == -1).all(), (block, idx)
                out[col_side][at : at + 4] = shared
    for col_side, (lo, rows, groups) in sides.items():
        if lo is None:
            continue
        assert (out[col_side] >= 0).all()  # whole 128 x 4 tiles of scales: the blocked layout has no padding here
        for row in range(rows):
            for group in range(groups):
                plain = row * lo.strides[0] + group * lo.strides[1]
                at = scales.blocked_offset(row, group, groups) if blocked else plain
                assert out[col_side][at] == row * groups + group, (col_side, row, group)


# (x from a tensor on the GPU: views are made there, since moving a view copies it; recipe; the reason)
CUDA_REFUSALS = [
    (lambda d: sample(256, 384, BF16, seed=33).to(d)[:, :256], "fp8_1x128", None),  # rows 768 bytes apart
    (lambda d: sample(384, 256, BF16, seed=33).to(d).t(), "fp8_1x128", "rows contiguous"),
    (lambda d: sample(256, 392, BF16, seed=33).to(d)[:, 1:257], "fp8_1x128", "16-byte boundary"),
    (lambda d: sample(256, 260, BF16, seed=33).to(d)[:, :256], "fp8_1x128", "16-byte boundary"),
    (lambda d: sample(200, 384, BF16, seed=33).to(d), "fp8_1x128", "multiples of 128"),
    (lambda d: sample(256, 384, BF16, seed=33).to(d)[:, :256], "mxfp8", None),
    (lambda d: sample(256, 384, BF16, seed=33).to(d)[:, :256], "nvfp4", None),
    (lambda d: sample(384, 256, BF16, seed=33).to(d).t(), "nvfp4", "rows contiguous"),
    (lambda d: sample(256, 384, torch.float64, seed=33).to(d), "fp8_1x128", "x must have dtype"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("index", range(len(CUDA_REFUSALS)))
def test_cuda_kernel_refusals_gpu(index):
    """backend='cuda' refuses, with the reason, what the kernel cannot take; what it takes is exact."""
    make, recipe, reason = CUDA_REFUSALS[index]
    x = make("cuda")
    if reason is None:
        assert_same_results(tileflip.quantize(x, recipe, columnwise=True, backend="cuda"),
                            quantize_ref(x.cpu(), recipe, columnwise=True))  # fmt: skip
        return
    with pytest.raises((ValueError, TypeError), match=reason):
        tileflip.quantize(x, recipe, rowwise=True, backend="cuda")


@pytest.mark.gpu
def test_cuda_kernel_refused_without_hardware_fp8_conversion_gpu(monkeypatch):
    """A GPU before compute capability 8.9 has no fp8 conversion instruction: backend='cuda' is refused
    with the reason, and auto runs the Triton kernel (its integer conversion), with the same bits."""
    from tileflip.kernels.cuda import quantize as cuda_kernel

    monkeypatch.setattr(cuda_kernel, "has_hw_cvt", lambda device: False)
    x = sample(256, 384, BF16, seed=36).cuda()
    with pytest.raises(ValueError, match="compute capability 8.9 or later"):
        tileflip.quantize(x, "fp8_1x128", columnwise=True, backend="cuda")
    assert_same_results(tileflip.quantize(x, "fp8_1x128", columnwise=True),
                        quantize_ref(x.cpu(), "fp8_1x128", columnwise=True))  # fmt: skip


@pytest.mark.parametrize("rows, cols", [(128, 4), (256, 12), (384, 8)])
def test_plain_scales_from_the_blocked_layout(rows, cols):
    """The permute that puts plain mxfp8 scales in place after the CUDA kernel wrote them blocked: the
    bytes of ``to_blocked(plain)`` come back as ``plain``, through the op's own permute launch (the
    Triton kernel; here in the interpreter), into an output poisoned first."""
    from tileflip.ops.quantize import _blocked_to_plain

    plain = torch.randint(0, 256, (rows, cols), dtype=torch.uint8, generator=torch.Generator().manual_seed(rows))
    out = torch.full((rows, cols), 0xA5, dtype=torch.uint8)
    _blocked_to_plain(ref.to_blocked(plain), out)
    assert torch.equal(out, plain)


def test_cuda_e2m1_short_conversion_model():
    """The kernel's e2m1 conversion for products that are not NaN, as numpy float32 arithmetic (one
    rounding add, as ``__fadd_rn``), against the reference's codes: random fp32 patterns, every 29th
    pattern from 0.125 to 7, the grid's midpoints and their neighbours, each in both signs."""
    assert_kernel_says("const float a = fminf(fabsf(y), 6.0f);",
                       "const tf_u32 jb = min(max(__float_as_uint(a) >> 23, 127u), 129u);",
                       "__fadd_rn(a, __uint_as_float((jb << 23) + 0x0B400000u))",
                       "return ((sum + 2 * jb + 2) & 7u) | ((__float_as_uint(y) >> 28) & 8u);",
                       "if (fabsf(m) <= 3.402823466e38f) {")  # fmt: skip
    rng = np.random.default_rng(7)
    steps = np.arange(0x3E000000, 0x40E00000, 29, dtype=np.uint32)
    mids = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 0.0, 0.5, 1.0, 2.0, 4.0, 7.0, 1e30, np.inf],
                    dtype=np.float32).view(np.uint32)  # fmt: skip
    bits = np.concatenate([rng.integers(0, 2**32, 1_000_000, dtype=np.uint64).astype(np.uint32), steps,
                           mids, mids + 1, mids - 1])  # fmt: skip
    bits = np.concatenate([bits, bits ^ np.uint32(0x80000000)])
    y = bits.view(np.float32)
    y = y[~np.isnan(y)]
    a = np.minimum(np.abs(y), np.float32(6.0))
    jb = np.clip(a.view(np.uint32) >> 23, 127, 129).astype(np.uint32)
    total = (a + ((jb << 23) + np.uint32(0x0B400000)).view(np.float32)).view(np.uint32)
    code = ((total + 2 * jb + 2) & 7) | ((y.view(np.uint32) >> 28) & 8)
    want = ref.e2m1_codes(torch.from_numpy(y.copy())).numpy()
    assert len(y) > 2_000_000
    np.testing.assert_array_equal(code, want)


# nvfp4 of bf16 and fp16 x: codes counted against per-scale thresholds (quantize.cu's e2m1_thresholds,
# e2m1x2_counted, e2m1x8_counted), modelled in numpy with the kernel's roundings.
E2M1_MIDS = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], dtype=np.float32)
HALF_INF = {"bf16": 0x7F80, "fp16": 0x7C00}


def half_values(bits: np.ndarray, half: str) -> np.ndarray:
    """half_value<IN>: the fp32 values of bf16 or fp16 bit patterns."""
    bits = np.asarray(bits, dtype=np.int64)
    if half == "bf16":
        return (bits.astype(np.uint32) << 16).view(np.float32)
    return bits.astype(np.uint16).view(np.float16).astype(np.float32)


def half_below(q: np.ndarray, half: str) -> np.ndarray:
    """half_below<IN>: the bits of the largest bf16 or fp16 value at or below q >= 0 (cvt.rz for fp16, which
    gives the largest finite value past it, and inf for inf)."""
    if half == "bf16":
        return (q.view(np.uint32) >> 16).astype(np.int64)
    with np.errstate(over="ignore"):
        rounded = q.astype(np.float16)
    bits = rounded.view(np.uint16).astype(np.int64)
    bits = np.where(rounded.astype(np.float32) > q, bits - 1, bits)
    return np.where(np.isinf(rounded) & ~np.isinf(q), 0x7BFF, bits)


def thresholds_model(m: np.ndarray, half: str) -> np.ndarray:
    """e2m1_thresholds<IN> for each multiplier in m: (7, len(m)) bit patterns."""
    inf = HALF_INF[half]
    with np.errstate(all="ignore"):
        q1 = (np.float32(0.25) / m).astype(np.float32)
    rows = []
    for k, mid in enumerate(E2M1_MIDS):
        c = np.minimum(half_below((np.float32(4 * mid) * q1).astype(np.float32), half), inf)
        fails = 0
        for cand in (c, np.minimum(c + 1, inf)):
            y = (half_values(cand, half) * m).astype(np.float32)
            fails = fails + ((y < mid) if k & 1 else (y <= mid))
        rows.append(np.minimum(c + fails, inf))
    return np.stack(rows)


def nvfp4_multipliers(global_scale):
    """The kernel's recip table for the normal e4m3 scale bytes 0x08..0x7E: 1 / s or (1 / gs) / s."""
    s8 = np.arange(0x08, 0x7F)
    s = torch.from_numpy(s8.astype(np.uint8)).view(torch.float8_e4m3fn).float().numpy()
    with np.errstate(all="ignore"):
        num = np.float32(1) if global_scale is None else (np.float32(1) / np.float32(global_scale)).astype(np.float32)
        return (num / s).astype(np.float32)


@pytest.mark.parametrize("half", ["bf16", "fp16"])
def test_cuda_e2m1_thresholds_model_every_value(half):
    """For every multiplier the kernel can meet (every e4m3 scale, with and without global scales from
    tiny to huge, random ones among them), the thresholds' count gives the reference's code for every
    bf16 (fp16) magnitude that is not NaN: T_k lies at c, c + 1 or c + 2 from the estimate."""
    assert_kernel_says("const float q1 = __fdiv_rn(0.25f, m);",
                       "tf_u32 c = min(half_below<IN>(__fmul_rn(mid[k] * 4.0f, q1)), inf);",
                       "c += (even ? y0 < mid[k] : y0 <= mid[k]) + (even ? y1 < mid[k] : y1 <= mid[k]);",
                       "if (m > 0.0f && m <= 3.402823466e38f) return e2m1x8_counted<IN>")  # fmt: skip
    rng = np.random.default_rng(11)
    scales = [None, 1.0, 0.37, 3e-3, 1e-30, 3e30, 1.7e38, 2.0**-126, 1.234567e-20]
    scales += list(np.exp(rng.uniform(np.log(1e-37), np.log(1e37), 24)).astype(np.float32))
    bits = np.arange(0, HALF_INF[half] + 1)
    values = half_values(bits, half)
    checked = 0
    for gs in scales:
        m = nvfp4_multipliers(gs)
        fast = (m > 0) & (m <= np.finfo(np.float32).max)
        thr = thresholds_model(m, half)
        assert (np.diff(thr[:, fast], axis=0) >= 0).all()  # rising, as the kernel's search needs
        for i in np.nonzero(fast)[0]:
            with np.errstate(over="ignore"):
                y = np.clip((values * m[i]).astype(np.float32), -6, 6)
            want = ref.e2m1_codes(torch.from_numpy(y)).numpy()
            got = (bits[None, :] >= thr[:, i][:, None]).sum(0)
            np.testing.assert_array_equal(got, want, err_msg=f"{half} gs={gs} m={m[i]}")
            checked += 1
    assert checked > 30 * 100


def prmt(a, b, sel):
    """prmt.b32 in its default mode: byte j of the result is byte (sel >> 4j) & 7 of {b, a}, its sign
    replicated where bit 3 of that selector is set."""
    src = [(a >> (8 * i)) & 0xFF for i in range(4)] + [(b >> (8 * i)) & 0xFF for i in range(4)]
    out = np.zeros_like(a)
    for j in range(4):
        nib = (sel >> (4 * j)) & 0xF
        byte = src[nib & 7]
        if nib & 8:
            byte = np.where(byte & 0x80, 0xFF, 0)
        out |= byte << (8 * j)
    return out


def counted_model(p, q, halves, thr, half):
    """e2m1x8_counted<IN>: eight codes from x's words p[j], q[j] (uint32 arrays) against the thresholds, by
    the kernel's search over them (T4, then T2 or T6, then the odd one between)."""

    def ge(a, t):  # set.ge.u32.x2: 0xFFFF in each half where |x| >= T
        lo = np.where(half_values(a & 0xFFFF, half) >= half_values(t & 0xFFFF, half), 0xFFFF, 0)
        hi = np.where(half_values(a >> 16, half) >= half_values(t >> 16, half), 0xFFFF0000, 0)
        return lo | hi

    def pick(m, a, b):
        return (m & a) | (~m & b & 0xFFFFFFFF)

    t = [k | (k << 16) for k in thr]  # each threshold in both halves, as the kernel's table holds them
    out = np.zeros_like(p[0])
    for j in range(4):
        high = (halves >> j) & 1
        mag = prmt(p[j] & 0x7FFF7FFF, q[j] & 0x7FFF7FFF, 0x7632 if high else 0x5410)
        sgn = prmt(p[j], q[j], 0x0F0B if high else 0x0D09)
        m4 = ge(mag, t[3])
        m2 = ge(mag, pick(m4, t[5], t[1]))
        m1 = ge(mag, pick(m4, pick(m2, t[6], t[4]), pick(m2, t[2], t[0])))
        out |= ((m4 & 0x40004) | (m2 & 0x20002) | (m1 & 0x10001) | (sgn & 0x80008)) << (4 * j)
    return out & 0xFFFFFFFF


@pytest.mark.parametrize("half", ["bf16", "fp16"])
def test_cuda_e2m1_counted_model(half):
    """The pairs a thread's row and column words make (prmt), the search over the thresholds and the sign
    bits: the nibbles of a row (values 0..7 of its 4 words) and of a column (half k & 1 of one word of rows
    0..7) are the reference's codes, for random values of every sign and magnitude and a random multiplier
    each."""
    assert_kernel_says('const tf_u32 mag = prmt(ap[j], aq[j], high ? 0x7632u : 0x5410u);',
                       'const tf_u32 sgn = prmt(p[j], q[j], high ? 0x0F0Bu : 0x0D09u);',
                       'const tf_u32 m4 = ge2<IN>(mag, lo.w);',
                       'const tf_u32 m2 = ge2<IN>(mag, pick(m4, hi.y, lo.y));',
                       'const tf_u32 m1 = ge2<IN>(mag, pick(m4, pick(m2, hi.z, hi.x), pick(m2, lo.z, lo.x)));',
                       'return (m4 & 0x40004u) | (m2 & 0x20002u) | (m1 & 0x10001u) | (sgn & 0x80008u);',
                       'out |= e2m1x2_counted<IN>(mag, sgn, lo, hi) << (4 * j);',
                       'xa[i][q] = words[q] & 0x7FFF7FFFu;',
                       'e2m1x8_kept<IN>(p, q, ap, aq, 0b1010, m, ctx.thr + 2 * rsel[i]);',
                       'e2m1x8_kept<IN>(p, q, ap, aq, k & 1 ? 0b1111 : 0, m, ctx.thr + 2 * csel[k]);',
                       'const tf_u32 p[4] = {xw[i][0], xw[i][0], xw[i][1], xw[i][1]};',
                       'const tf_u32 q[4] = {xw[i][2], xw[i][2], xw[i][3], xw[i][3]};',
                       'const tf_u32 p[4] = {xw[0][k / 2], xw[1][k / 2], xw[2][k / 2], xw[3][k / 2]};',
                       'const tf_u32 q[4] = {xw[4][k / 2], xw[5][k / 2], xw[6][k / 2], xw[7][k / 2]};')  # fmt: skip
    rng = np.random.default_rng(12)
    n = 4000
    m = nvfp4_multipliers(None)[rng.integers(0, 119, n)]
    thr = thresholds_model(m, half)
    top = HALF_INF[half]
    bits = rng.integers(0, top, (8, 8, n)) | (rng.integers(0, 2, (8, 8, n)) << 15)  # rows i, columns k
    words = (bits[:, 0::2] | (bits[:, 1::2] << 16)).astype(np.int64)  # (8 rows, 4 words, n)
    with np.errstate(over="ignore"):
        y = np.clip((half_values(bits, half) * m).astype(np.float32), -6, 6)
    want = ref.e2m1_codes(torch.from_numpy(y)).numpy().astype(np.int64)
    nibbles = np.arange(8)[:, None] * 4
    for i in range(8):
        w = words[i]
        got = counted_model([w[0], w[0], w[1], w[1]], [w[2], w[2], w[3], w[3]], 0b1010, thr, half)
        np.testing.assert_array_equal((got[None, :] >> nibbles) & 0xF, want[i])
    for k in range(8):
        col = words[:, k // 2]
        got = counted_model([col[0], col[1], col[2], col[3]], [col[4], col[5], col[6], col[7]],
                            0b1111 if k & 1 else 0, thr, half)  # fmt: skip
        np.testing.assert_array_equal((got[None, :] >> nibbles) & 0xF, want[:, k])


def test_cuda_nvfp4_block_scale_quotients_model():
    """div6_short: top / 6 as the product by 1/6 and one FMA correction equals the IEEE quotient for every
    bf16 and fp16 top (the FMA's exact sum fits a float64). div_gs: block * (1 / gs) gives the IEEE
    quotient's e4m3 byte wherever it lies more than 4 ulps from every value of 5 significant bits."""
    assert_kernel_says("const float y = 0.16666667163372039795f;",
                       "return top <= 3.402823466e38f ? __fmaf_rn(__fmaf_rn(-q, 6.0f, top), y, q) : q;",
                       "const float v = __fmul_rn(block, ctx.rgs);",
                       "const tf_u32 low = (__float_as_uint(v) + 4u) & 0x7FFFFu;",
                       "return ctx.gs_normal && low > 8u ? v : __fdiv_rn(block, ctx.gs);")  # fmt: skip
    b = np.arange(0, 0x7F80, dtype=np.uint32)
    tops = np.concatenate([(b << 16).view(np.float32), half_values(b[b < 0x7C00], "fp16")])
    y = np.float32(1) / np.float32(6)
    q = (tops * y).astype(np.float32)
    r = tops.astype(np.float64) - 6.0 * q.astype(np.float64)  # fma(-q, 6, top): exact
    got = (q.astype(np.float64) + r * np.float64(y)).astype(np.float32)  # one rounding: the sum is exact
    np.testing.assert_array_equal(got, (tops / np.float32(6)).astype(np.float32))

    rng = np.random.default_rng(13)
    n = 2_000_000
    gs = np.exp(rng.uniform(np.log(1e-30), np.log(1e30), n)).astype(np.float32)
    block = np.exp(rng.uniform(np.log(1e-30), np.log(1e30), n)).astype(np.float32)
    # blocks whose quotient sits on or beside an e4m3 value or midpoint
    grid = (rng.integers(16, 32, n // 4) * 2.0 ** rng.integers(-10, 10, n // 4)).astype(np.float32) / 16
    near = (grid.view(np.uint32).astype(np.int64) + rng.integers(-12, 13, n // 4)).astype(np.uint32).view(np.float32)
    block[: n // 4] = (near * gs[: n // 4]).astype(np.float32)
    with np.errstate(all="ignore"):
        exact = (block / gs).astype(np.float32)
        fast = (block * (np.float32(1) / gs).astype(np.float32)).astype(np.float32)
    low = (fast.view(np.uint32) + np.uint32(4)) & np.uint32(0x7FFFF)
    chosen = np.where(low > 8, fast, exact)

    def byte(v):
        return torch.from_numpy(np.clip(v, 2.0**-6, 448.0)).to(torch.float8_e4m3fn).view(torch.uint8)

    assert torch.equal(byte(chosen), byte(exact))
    assert (low <= 8).sum() > 1000  # the IEEE quotient is taken near the midpoints


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", RECIPES)
def test_cuda_backend_compiles_fullgraph_gpu(recipe):
    x = sample(256, 384, BF16, seed=37).cuda()
    f = torch.compile(lambda t: tileflip.quantize(t, recipe, columnwise=True, backend="cuda"), fullgraph=True)
    assert_same_results(f(x), quantize_ref(x.cpu(), recipe, columnwise=True))


def test_cuda_backend_refuses_cpu_tensors_of_every_recipe():
    """Every recipe is the kernel's: on the CPU each is refused for the tensor, not the recipe."""
    from tileflip.kernels.cuda import quantize as cuda_kernel

    x = sample(128, 256, BF16, seed=34)
    for recipe in RECIPES:
        with pytest.raises(ValueError, match="backend='cuda' cannot take this call: it needs a CUDA tensor"):
            tileflip.quantize(x, recipe, rowwise=True, columnwise=True, backend="cuda")
    assert cuda_kernel.refusal(x, "fp8_2x2") == "it runs the recipes fp8_1x128, fp8_128x128, mxfp8, nvfp4 only"
    with pytest.raises(ValueError, match="column count must be a multiple of 128"):  # the recipe's sizes first
        tileflip.quantize(x[:, :200], "fp8_1x128", backend="cuda")


@pytest.mark.gpu
def test_auto_runs_the_cuda_kernel_where_the_table_names_it_gpu(monkeypatch):
    """auto gives the CUDA C++ kernel the calls the tuning table names, where it can take them; the rest
    run the Triton kernel, with the same bits."""
    from tileflip import tuning
    from tileflip.kernels.cuda import quantize as cuda_kernel
    from tileflip.kernels.triton import quantize as triton_kernel

    ran = []
    for name, module in (("cuda", cuda_kernel), ("triton", triton_kernel)):
        real = module.launch
        monkeypatch.setattr(module, "launch", lambda *a, _n=name, _r=real: ran.append(_n) or _r(*a))
    x = sample(256, 384, BF16, seed=35).cuda()
    for recipe in RECIPES:
        for side, (rowwise, columnwise) in SIDES.items():
            for view, fits in ((x, True), (x[:, 8:264], True), (x[:, 1:257], False)):
                ran.clear()
                got = tileflip.quantize(view, recipe, rowwise=rowwise, columnwise=columnwise)
                want = "cuda" if fits and tuning.quantize_prefers_cuda(recipe, rowwise, columnwise) else "triton"
                assert ran == [want], (recipe, side, fits)
                assert_same_results(got, quantize_ref(view.cpu(), recipe, rowwise=rowwise, columnwise=columnwise))


# --------------------------------------------------------------------------------------------------
# The registered op and torch.compile
# --------------------------------------------------------------------------------------------------


def test_registered_op_has_fixed_outputs():
    outs = torch.ops.tileflip.quantize(X, "mxfp8", False, True, None, "blocked", "auto", None, "rceil", "torch")
    assert len(outs) == 5
    assert outs[0].shape == (0,) and outs[0].dtype == E4 and outs[1].shape == (0,) and outs[1].dtype == E8
    assert outs[4].shape == (0,) and outs[4].dtype == FP32
    want = tileflip.quantize(X, "mxfp8", rowwise=False, columnwise=True, scale_layout="blocked", rule="rceil")
    assert_bytes(outs[2], want.data_t)
    assert_bytes(outs[3], want.scale_t)


COMPILED = [
    ("fp8_1x128", {"rowwise": True, "columnwise": True}),
    ("fp8_128x128", {"rowwise": False, "columnwise": True, "scale": "ue8m0"}),
    ("mxfp8", {"rowwise": True, "columnwise": True, "scale_layout": "blocked", "rule": "rceil"}),
    ("nvfp4", {"rowwise": True, "columnwise": False}),
    ("nvfp4", {"rowwise": True, "columnwise": True, "global_scale": None, "scale_layout": "blocked"}),
]


@pytest.mark.parametrize("recipe, options", COMPILED, ids=[f"{r}-{i}" for i, (r, _) in enumerate(COMPILED)])
def test_compiled_fullgraph(recipe, options):
    torch._dynamo.reset()

    def f(x):
        return tileflip.quantize(x * 2, recipe, **options)

    x = sample(128, 256, BF16, seed=20)
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(x)
    want = f(x)
    assert isinstance(got, Quantized)
    for a, b in zip(got, want):
        assert (a is None) == (b is None)
        if a is not None:
            assert a.stride() == b.stride()
            assert_bytes(a, b)


def test_compiled_with_a_given_global_scale():
    torch._dynamo.reset()

    def f(x, g):
        q = tileflip.quantize(x, "nvfp4", columnwise=True, global_scale=g)
        return q.data, q.scale_t, q.global_scale

    x, g = sample(64, 128, FP32, seed=21), torch.tensor(0.003)
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(x, g)
    for a, b in zip(got, f(x, g)):
        assert_bytes(a, b)


def test_compiled_refusal_names_the_argument():
    torch._dynamo.reset()
    with pytest.raises(Exception, match="column count must be a multiple of 128"):
        torch.compile(lambda x: tileflip.quantize(x, "fp8_1x128"), fullgraph=True, backend="aot_eager")(X[:, :200])


# --------------------------------------------------------------------------------------------------
# GPU: torchao's blockwise fp8 Triton kernels, and the reference on CUDA
# --------------------------------------------------------------------------------------------------


def no_nan_or_inf(dtype):
    """The special blocks with the NaN and inf blocks replaced by random values (torchao's kernels drop
    a NaN from the max, and clamp a NaN product to a bound: see the next test)."""
    x = special_blocks(dtype)
    x[:128, 256:512] = sample(128, 256, dtype, seed=22)
    return x


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [pytest.param(BF16, id="bf16"), pytest.param(FP32, id="fp32")])
@pytest.mark.parametrize("case", ["random", "special"])
@pytest.mark.parametrize("backend", ["triton", "cuda", "torch"])
def test_fp8_blocks_match_torchao_kernels_gpu(case, dtype, backend):
    from torchao.prototype.blockwise_fp8_training import kernels as ao

    x = (sample(512, 768, dtype, seed=23) if case == "random" else no_nan_or_inf(dtype)).cuda()
    q = tileflip.quantize(x, "fp8_1x128", columnwise=True, backend=backend)
    for (data, scale), (ao_data, ao_scale) in (
        ((q.data, q.scale), ao.triton_fp8_blockwise_act_quant_lhs(x, 128)),
        ((q.data_t, q.scale_t), ao.triton_fp8_blockwise_act_quant_transposed_lhs(x, 128)),
    ):
        assert data.stride() == ao_data.stride() and scale.stride() == ao_scale.stride()
        assert_bytes(data, ao_data)
        assert_bytes(scale, ao_scale)
    q = tileflip.quantize(x, "fp8_128x128", columnwise=True, backend=backend)
    for (data, scale), (ao_data, ao_scale) in (
        ((q.data, q.scale), ao.triton_fp8_blockwise_weight_quant_rhs(x, 128)),
        ((q.data_t, q.scale_t), ao.triton_fp8_blockwise_weight_quant_transposed_rhs(x, 128)),
    ):
        assert_bytes(data, ao_data)  # values: torchao's are column-major
        assert_bytes(scale, ao_scale)


@pytest.mark.gpu
def test_fp8_nan_differs_from_torchao_kernels_gpu():
    """torchao's kernels drop a NaN from the block's max and write the NaN element as +448 (0x7E), the
    block's scale staying finite; tileflip writes NaN for the whole block and its scale."""
    from torchao.prototype.blockwise_fp8_training import kernels as ao

    x = sample(128, 256, BF16, seed=24).cuda()
    x[3, 5] = float("nan")
    q = tileflip.quantize(x, "fp8_1x128")
    ao_data, ao_scale = ao.triton_fp8_blockwise_act_quant_lhs(x, 128)
    assert (u8(q.data)[3, :128] == 0x7F).all() and q.scale[3, 0].isnan()
    assert u8(ao_data)[3, 5].item() == 0x7E and ao_scale[3, 0].isfinite()
    keep = torch.ones(128, 256, dtype=torch.bool, device="cuda")
    keep[3, :128] = False
    assert torch.equal(u8(q.data)[keep], u8(ao_data)[keep])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_on_cuda_equals_the_cpu_gpu(dtype):
    x = special_blocks(dtype)
    calls = [(r, {}) for r in RECIPES] + [("fp8_1x128", {"scale": "ue8m0"}), ("mxfp8", {"rule": "rceil"}),
                                          ("mxfp8", {"scale_layout": "blocked"}), ("nvfp4", {"global_scale": None}),
                                          ("nvfp4", {"global_scale": torch.tensor(0.02)})]  # fmt: skip
    for recipe, options in calls:
        cuda_options = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in options.items()}
        a = tileflip.quantize(x, recipe, rowwise=True, columnwise=True, **options)
        b = tileflip.quantize(x.cuda(), recipe, rowwise=True, columnwise=True, backend="torch", **cuda_options)
        for t, u in zip(a, b):
            if t is not None:
                assert u.is_cuda and u.stride() == t.stride()
                assert_bytes(u.cpu(), t)


# --------------------------------------------------------------------------------------------------
# GPU: the outputs feed torch._scaled_mm
# --------------------------------------------------------------------------------------------------


def rel_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def linear_operands(M, K, N, seed=30):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(M, K, device="cuda", generator=g).to(BF16)
    w = (torch.randn(N, K, device="cuda", generator=g) / K**0.5).to(BF16)
    dy = torch.randn(M, N, device="cuda", generator=g).to(BF16)
    return x, w, dy


@pytest.mark.gpu
def test_blockwise_fp8_linear_gemms_gpu():
    """A linear layer's three GEMMs with tileflip's outputs, against bf16 matmuls (relative error <= 0.05):
    forward x w^T (x 1x128 row-wise, w 128x128; sm_90 takes the weight's scales transposed), dgrad dy w
    (dy 1x128 row-wise, w's column-wise 128x128 output), wgrad dy^T x (dy and x column-wise 1x128, x's
    scale through .t() as the row-major (M/128, K) tensor). Every contraction dimension (K, N and M in
    turn) is a multiple of 512 (see the next test)."""
    M, K, N = 512, 512, 1024
    x, w, dy = linear_operands(M, K, N)
    qx = tileflip.quantize(x, "fp8_1x128", rowwise=True, columnwise=True)
    qw = tileflip.quantize(w, "fp8_128x128", rowwise=True, columnwise=True)
    qdy = tileflip.quantize(dy, "fp8_1x128", rowwise=True, columnwise=True)
    y = torch._scaled_mm(qx.data, qw.data.t(), qx.scale, qw.scale.t(), out_dtype=BF16)
    assert rel_error(y, x @ w.t()) <= 0.05
    dx = torch._scaled_mm(qdy.data, qw.data_t.t(), qdy.scale, qw.scale_t.t(), out_dtype=BF16)
    assert rel_error(dx, dy @ w) <= 0.05
    dw = torch._scaled_mm(qdy.data_t, qx.data_t.t(), qdy.scale_t, qx.scale_t.t(), out_dtype=BF16)
    assert rel_error(dw, dy.t() @ x) <= 0.05


@pytest.mark.gpu
def test_blockwise_fp8_gemm_needs_k_blocks_in_fours_gpu():
    """torch 2.11's _scaled_mm accepts a 1x128 x 128x128 call whose K / 128 is not a multiple of 4 and
    returns a wrong product (cuBLAS reads the 128x128 scales with K padded to whole groups of four):
    pad K to a multiple of 512. Shown here with K / 128 = 5 against the same call at K = 512."""
    for K, ok in ((512, True), (640, False)):
        x, w, _ = linear_operands(256, K, 512, seed=31)
        qx = tileflip.quantize(x, "fp8_1x128")
        qw = tileflip.quantize(w, "fp8_128x128")
        y = torch._scaled_mm(qx.data, qw.data.t(), qx.scale, qw.scale.t(), out_dtype=BF16)
        assert (rel_error(y, x @ w.t()) <= 0.05) == ok, (K, rel_error(y, x @ w.t()))


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", ["mxfp8", "nvfp4"])
def test_mx_and_nv_dequantize_to_the_reference_gpu(recipe):
    """MXFP8 and NVFP4 GEMMs need Blackwell; on other GPUs the outputs are checked through their
    dequantized values: the kernel's, computed on the GPU, equal the reference's on the CPU."""
    x = sample(256, 512, BF16, seed=32)
    got = tileflip.quantize(x.cuda(), recipe, rowwise=True, columnwise=True)
    want = quantize_ref(x, recipe, rowwise=True, columnwise=True,
                        **({"global_scale": got.global_scale.cpu()} if recipe == "nvfp4" else {}))  # fmt: skip
    for side in ("row", "col"):
        a = dequantize(Quantized(*(t.cpu() if t is not None else None for t in got)), recipe, side)
        assert torch.equal(a, dequantize(want, recipe, side))


# --------------------------------------------------------------------------------------------------
# GPU: the fp8 recipes' division, on every fp32 block max
# --------------------------------------------------------------------------------------------------


def fp8_scale_probe():
    """A Triton kernel that runs the quantize kernel's block-scale rule (fp8 recipes) on given block
    maxima (fp32 bits): (multiplier, stored scale) as bits."""
    import triton
    import triton.language as tl

    from tileflip.kernels.triton import quantize as kernel

    @triton.jit
    def probe(top_ptr, m_ptr, s_ptr, n, UE8M0: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        top = tl.load(top_ptr + offs, mask=offs < n, other=0)
        m, s = kernel._block_scale(top, 1.0, 1.0, 0, UE8M0, False, True)
        tl.store(m_ptr + offs, m.to(tl.int32, bitcast=True), mask=offs < n)
        tl.store(s_ptr + offs, s, mask=offs < n)

    return probe


@pytest.mark.gpu
@pytest.mark.parametrize("scale", ["fp32", "ue8m0"])
def test_fp8_scale_is_exact_for_every_block_max_gpu(scale):
    """On the GPU the kernel takes 448 / a and 1 / m from an approximate reciprocal and FMA corrections,
    not ``div.rn.f32``. Checked here against the IEEE quotients (448 / a in float64, rounded once to
    fp32, as torchao does) for every fp32 a from 1e-12 to inf: about 1.4e9 values."""
    probe = fp8_scale_probe()
    lo = int(torch.tensor(1e-12, dtype=FP32).view(torch.int32))
    hi = 0x7F800000  # inf
    step = 1 << 27
    for start in range(lo, hi + 1, step):
        bits = torch.arange(start, min(start + step, hi + 1), dtype=torch.int32, device="cuda")
        n = bits.numel()
        m, s = torch.empty_like(bits), torch.empty_like(bits)
        probe[(triton_cdiv(n, 1024),)](bits, m, s, n, UE8M0=scale == "ue8m0", BLOCK=1024)
        a = bits.view(FP32)
        want_m = torch.div(torch.full((), 448.0, dtype=torch.float64, device="cuda"), a.double()).float()
        want_s = torch.div(torch.ones((), device="cuda"), want_m)
        if scale == "ue8m0":
            want_s = ref.ceil_pow2(want_s)
            want_m = torch.div(torch.ones((), device="cuda"), want_s)
        bad = (m != want_m.view(torch.int32)) | (s != want_s.view(torch.int32))
        assert not bad.any(), (a[bad][:4].tolist(), m[bad][:4].tolist(), want_m.view(torch.int32)[bad][:4].tolist())


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)
