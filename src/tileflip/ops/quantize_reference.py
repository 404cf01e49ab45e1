"""The plain-torch reference of ``tileflip.quantize`` (``backend="torch"``): every recipe, bit-exact.

Each function quantizes row-wise (groups along the last dimension); the column-wise outputs are the same
functions applied to x's transpose. Every division is ``torch.div`` of two tensors: ``c / t`` with a
Python ``c`` is ``t.reciprocal() * c`` in torch, and on CUDA ``t / c`` is ``t * (1 / c)``; neither is the
IEEE quotient the references compute. NaN outputs are written canonically (e4m3 0x7F, fp32 0x7FC00000,
e8m0 0xFF, the fp4 nibble 0x4), so that every device gives the same bytes. The rules, and where they
differ from torchao's: ``docs/design.md`` (Block-scaled quantization).
"""

from __future__ import annotations

import torch

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0
E2M1_MAX = 6.0
FP8_BLOCK_EPS = 1e-12  # torchao's blockwise kernels clamp the block's amax at fp32(1e-12)
E4M3_MIN_NORMAL = 2.0**-6  # nvfp4 block scales are clamped to [2^-6, 448] before their cast to e4m3
F32_MIN_NORMAL = 2.0**-126
MX_FLOOR_OFFSET = 8  # floor(log2(448)): the e4m3 element's largest power of two
E2M1_NAN_CODE = 4  # what torchao's fp4 conversion gives for the canonical NaN 0x7FFFFFFF


def _full(t: torch.Tensor, value: float, dtype=None) -> torch.Tensor:
    return torch.full((), value, dtype=dtype or t.dtype, device=t.device)


def _to_e4m3(y: torch.Tensor) -> torch.Tensor:
    """fp32 -> e4m3 (round to nearest even, saturating; callers clamp first), with NaN as 0x7F."""
    return torch.where(y.isnan(), _full(y, float("nan")), y).to(E4M3)


def _canonical_nan(t: torch.Tensor) -> torch.Tensor:
    return torch.where(t.isnan(), _full(t, float("nan")), t)


def _groups(x: torch.Tensor, block: int) -> torch.Tensor:
    """x as fp32 (exact for every input dtype), shaped (rows, groups, block)."""
    rows, cols = x.shape
    return x.float().reshape(rows, cols // block, block)


def ceil_pow2(s: torch.Tensor) -> torch.Tensor:
    """The smallest power of two >= s for positive normal fp32 s (the fp8 scales are >= 2^-49), from the
    bits: a non-zero mantissa carries into the exponent (inf and NaN stay as they are)."""
    bits = s.view(torch.int32)
    exponent = bits & 0x7F800000
    up = (bits & 0x007FFFFF) != 0
    finite = exponent != 0x7F800000
    return torch.where(up & finite, exponent + (1 << 23), bits).view(torch.float32)


def fp8_blocks(x: torch.Tensor, rows: int, cols: int, ue8m0: bool = False):
    """(data, scale) of x in ``rows`` x ``cols`` blocks, as torchao 0.18's blockwise Triton kernels compute
    them: amax = max|x| over the block, at least fp32(1e-12); multiplier m = fp32(448 / amax) with the
    quotient in float64; data = e4m3(clamp(fp32(x) * m, +-448)); scale = fp32 1 / m (the dequantization
    factor). ``ue8m0``: the scale is rounded up to a power of two first and m is its exact reciprocal.
    Returns contiguous data (M, K) and scale (M / rows, K / cols)."""
    M, K = x.shape
    blocks = x.float().reshape(M // rows, rows, K // cols, cols)
    amax = blocks.abs().amax(dim=(1, 3))  # NaN-propagating
    amax = torch.maximum(amax, _full(amax, FP8_BLOCK_EPS))  # NaN stays NaN
    amax64 = amax.double()
    m = torch.div(_full(amax64, E4M3_MAX), amax64).float()
    scale = torch.div(_full(m, 1.0), m)
    if ue8m0:
        scale = ceil_pow2(scale)
        m = torch.div(_full(scale, 1.0), scale)  # exact: a power of two
    y = (blocks * m[:, None, :, None]).clamp(-E4M3_MAX, E4M3_MAX)
    return _to_e4m3(y).reshape(M, K), _canonical_nan(scale)


def mx_exponent_floor(amax: torch.Tensor) -> torch.Tensor:
    """OCP MX v1.0's biased e8m0 exponent (int32): floor(log2(amax)) - 8 from amax's exponent bits, clamped
    at -127; 255 for NaN. An amax of 0 or an fp32 subnormal counts as exponent -127."""
    biased = ((amax.view(torch.int32) >> 23) & 0xFF) - 127 - MX_FLOOR_OFFSET
    biased = torch.clamp(biased, min=-127, max=128) + 127
    return torch.where(amax.isnan(), 255, biased)


def mx_exponent_rceil(amax: torch.Tensor) -> torch.Tensor:
    """The biased e8m0 exponent (int32) of the smallest power of two >= amax / 448, exactly: the quotient
    in float64 (never subnormal there, and exact enough that rounding never lands on a power of two it
    was above), its exponent bits plus one where its mantissa is not zero; clamped to [-127, 127], so
    inf gives 254 and 0 gives 0; 255 for NaN."""
    q = torch.div(amax.double(), _full(amax, E4M3_MAX, torch.float64))
    bits = q.view(torch.int64)
    field = (bits >> 52) & 0x7FF
    exponent = field - 1023 + ((bits & ((1 << 52) - 1)) != 0).long()
    exponent = torch.where(field == 0, -127, exponent)  # q == 0
    biased = (torch.clamp(exponent, min=-127, max=127) + 127).int()
    return torch.where(amax.isnan(), 255, biased)


def _pow2(biased: torch.Tensor) -> torch.Tensor:
    """2^(biased - 127) as fp32 for biased exponents 1..254 (a normal float), from the bits."""
    return (biased << 23).view(torch.float32)


def mxfp8(x: torch.Tensor, rule: str = "floor"):
    """(data e4m3 (M, K), scale e8m0 (M, K/32)) of x in 1 x 32 groups.

    ``floor``: torchao 0.18 ``to_mx(x.float(), e4m3, 32, FLOOR)``: scale 2^(biased - 127) (taken as 2^-126
    at biased 0), data = e4m3(clamp(x / scale)); a NaN block's scale is inf there, so its finite elements
    give +-0. ``rceil``: the exact round-up exponent (``mx_exponent_rceil``), data = e4m3(clamp(x * r))
    with torchao's and TransformerEngine's r: 2^(127 - biased), 1 at biased 0, 2^-127 at 254, NaN at 255."""
    g = _groups(x, 32)
    amax = g.abs().amax(-1)
    if rule == "floor":
        biased = mx_exponent_floor(amax)
        scale = torch.clamp((biased << 23).view(torch.float32), min=F32_MIN_NORMAL)  # 255 -> inf
        y = torch.div(g, scale[..., None])
    else:
        biased = mx_exponent_rceil(amax)
        r = _pow2(torch.clamp(254 - biased, 1, 254))
        r = torch.where(biased == 0, _full(r, 1.0), r)
        r = torch.where(biased == 254, _full(r, 2.0**-127), r)
        r = torch.where(biased == 255, _full(r, float("nan")), r)
        y = g * r[..., None]
    y = y.clamp(-E4M3_MAX, E4M3_MAX)
    return _to_e4m3(y).reshape(x.shape), biased.to(torch.uint8).view(torch.float8_e8m0fnu)


def e2m1_codes(v: torch.Tensor) -> torch.Tensor:
    """fp32 -> fp4 e2m1 codes (uint8, 0..15), round to nearest even, saturating at +-6; the sign of -0.0
    and of values that round to 0 is kept; NaN gives ``E2M1_NAN_CODE``. The magnitudes are 0, 0.5, 1, 1.5,
    2, 3, 4, 6: the code counts the midpoints below |v|, a tie counting when the code above it is even."""
    a = v.abs()
    code = torch.zeros(v.shape, dtype=torch.uint8, device=v.device)
    for mid, tie_up in ((0.25, False), (0.75, True), (1.25, False), (1.75, True),
                        (2.5, False), (3.5, True), (5.0, False)):  # fmt: skip
        code += (a >= mid) if tie_up else (a > mid)
    code |= torch.signbit(v).to(torch.uint8) << 3
    return torch.where(v.isnan(), E2M1_NAN_CODE, code).to(torch.uint8)


def pack_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """Pairs of codes along the last dimension into float4_e2m1fn_x2, the even element in the low nibble."""
    return (codes[..., ::2] | (codes[..., 1::2] << 4)).view(torch.float4_e2m1fn_x2)


def nvfp4(x: torch.Tensor, global_scale: torch.Tensor | None):
    """(data float4_e2m1fn_x2 (M, K/2), scale e4m3 (M, K/16)) of x in 1 x 16 groups, as torchao 0.18
    ``nvfp4_quantize(x.float(), 16, global_scale)``: block scale amax / 6, divided by ``global_scale``
    if given, clamped to [2^-6, 448] and cast to e4m3 (s); data = e2m1(clamp(x * r, +-6)) with
    r = 1 / s, or (1 / global_scale) / s."""
    g = _groups(x, 16)
    amax = g.abs().amax(-1)
    block = torch.div(amax, _full(amax, E2M1_MAX))
    if global_scale is not None:
        block = torch.div(block, global_scale)
    s8 = torch.clamp(block, min=E4M3_MIN_NORMAL, max=E4M3_MAX).to(E4M3)
    s = s8.float()
    r = torch.div(_full(s, 1.0), s) if global_scale is None else torch.div(torch.div(_full(s, 1.0), global_scale), s)
    y = (g * r[..., None]).clamp(-E2M1_MAX, E2M1_MAX)
    data = pack_e2m1(e2m1_codes(y).reshape(x.shape))
    return data, _to_e4m3(s)


def nvfp4_global_scale(x: torch.Tensor) -> torch.Tensor:
    """torchao's ``per_tensor_amax_to_scale(max|x|)``: amax / (448 * 6) in fp32 (IEEE division); 0-d.
    A NaN in x makes it NaN; an all-zero (or empty) x gives 0."""
    amax = x.abs().amax().float() if x.numel() else torch.zeros((), device=x.device)
    return torch.div(amax, _full(amax, E4M3_MAX * E2M1_MAX))


def to_blocked(scale: torch.Tensor) -> torch.Tensor:
    """torchao's ``to_blocked``: the (rows, cols) scales in cuBLAS's 128 x 4 tiles, zero-padded, as a
    contiguous (32 * ceil(rows / 128), 16 * ceil(cols / 4)) tensor."""
    rows, cols = scale.shape
    row_tiles, col_tiles = -(-rows // 128), -(-cols // 4)
    raw = scale.view(torch.uint8) if scale.element_size() == 1 else scale
    padded = raw.new_zeros((row_tiles * 128, col_tiles * 4))
    padded[:rows, :cols] = raw
    tiles = padded.view(row_tiles, 128, col_tiles, 4).permute(0, 2, 1, 3)
    out = tiles.reshape(-1, 4, 32, 4).transpose(1, 2).reshape(row_tiles * 32, col_tiles * 16)
    return out.view(scale.dtype) if raw is not scale else out
