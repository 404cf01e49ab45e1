"""The fused block-scaled quantizer: kernel and launcher.

One program owns one BLOCK_M x BLOCK_K tile of x and reads it once. From the tile in registers it
writes the row-wise output (groups of B along K) and the column-wise output (groups of B along M,
stored transposed), each with its block scales, in the arithmetic of ``tileflip.ops.quantize_reference``
bit for bit. Where the column-wise output is asked for, the tile is read as four row sets (rows 4i + k)
so that its transpose moves 32-bit words. Block maxima are integer maxima of the fp32 bit patterns with
the sign cleared, so a NaN wins on every device. Divisions are IEEE on every device (inline PTX on the
GPU, where Triton's ``/`` is an approximation). Rules and measurements: ``docs/design.md``
(Block-scaled quantization).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from tileflip.kernels.dtypes import as_uint
from tileflip.kernels.triton import launch as launcher
from tileflip.kernels.triton.fp8 import fp32_to_fp8_bits, fp32_to_fp8_hw, has_hw_cvt, words_hw
from tileflip.kernels.triton.launch import is_interpreted_kernel, spec_key
from tileflip.plan.scales import QuantizeLaunch

DIV_ASM = tl.constexpr("div.rn.f32 $0, $1, $2;")
RCP_ASM = tl.constexpr("rcp.approx.f32 $0, $1;")
# One fp32 value to its e4m3 byte (cvt packs two: the other is 0, in the upper byte).
CVT_ONE_ASM = tl.constexpr("{ .reg .b16 h; cvt.rn.satfinite.e4m3x2.f32 h, 0f00000000, $1; cvt.u32.u16 $0, h; }")


@triton.jit
def _div(a, b, HW: tl.constexpr):
    """The IEEE quotient a / b in fp32 (the interpreter's numpy division is IEEE already)."""
    if HW:
        return tl.inline_asm_elementwise(DIV_ASM, "=r,r,r", [a, b], dtype=tl.float32, is_pure=True, pack=1)
    else:
        return a / b


@triton.jit
def _recip(b, HW: tl.constexpr):
    """1 / b rounded to nearest for b whose reciprocal is a normal float: on the GPU the approximate
    reciprocal and two Newton steps in FMAs (a GPU test checks every such fp32 b against the IEEE
    quotient), about a third of ``div.rn.f32``'s instructions."""
    if HW:
        y = tl.inline_asm_elementwise(RCP_ASM, "=f,f", [b], dtype=tl.float32, is_pure=True, pack=1)
        y = tl.fma(tl.fma(-b, y, 1.0), y, y)
        return tl.fma(tl.fma(-b, y, 1.0), y, y)
    else:
        return 1.0 / b


@triton.jit
def _fp8_multiplier(amax, HW: tl.constexpr):
    """(m, s) of the fp8 recipes for a non-NaN block max: m = 448 / a and s = 1 / m, both rounded to
    nearest, with a = max(amax, 1e-12). The quotient is q = 448 * (1 / a) with one FMA correction, which
    rounds correctly given the correctly rounded reciprocal (Markstein). a above 2^100 is first scaled by
    2^-64 (exact), so that 1 / a stays normal; a = inf gives m = 0 and s = inf."""
    a = tl.maximum(amax, 1e-12)
    if HW:
        big = a > 1.2676506002282294e30  # 2^100
        a2 = tl.where(big, a * 5.421010862427522e-20, a)  # 2^-64
        r = _recip(a2, HW)
        q = 448.0 * r
        m = tl.fma(tl.fma(-a2, q, 448.0), r, q)
        m = tl.where(big, m * 5.421010862427522e-20, m)
        m = tl.where(a == float("inf"), 0.0, m)
        s = tl.where(m == 0.0, float("inf"), _recip(m, HW))
    else:
        m = _div(tl.full(a.shape, 448.0, tl.float32), a, HW)
        s = _div(tl.full(a.shape, 1.0, tl.float32), m, HW)
    return m, s


@triton.jit
def _e4m3(y, HW: tl.constexpr):
    """e4m3 bytes (uint8) of ``clamp(y, +-448)``, rounded to nearest even, NaN as 0x7F. The GPU's fp32
    arithmetic gives NaN as the positive 0x7FFFFFFF, which the hardware conversion (HW == 2) writes as
    0x7F; the interpreter's keeps a sign."""
    if HW == 2:
        return fp32_to_fp8_hw(y, 3)
    else:
        q = fp32_to_fp8_bits(y, 7, 3, 0x43E00000).to(tl.uint8)
        return tl.where(y != y, 0x7F, q).to(tl.uint8)


@triton.jit
def _e2m1(y):
    """fp4 e2m1 codes (int32, 0..15) of ``clamp(y, +-6)``, rounded to nearest even; the sign bit kept (-0.0
    too); NaN as 4. Below 1 the grid is 0, 0.5, 1: an fp32 add of 1.5 * 2^23 rounds 2|y| to an integer in
    the low mantissa bits. From 1 up the fp32 pattern is rounded to one mantissa bit, and its exponent
    and that bit are the code."""
    u = y.to(tl.int32, bitcast=True)
    a = u & 0x7FFFFFFF
    sub = (a.to(tl.float32, bitcast=True) * 2.0 + 12582912.0).to(tl.int32, bitcast=True) - 0x4B400000
    normal = tl.minimum((a + ((a >> 22) & 1) + (0x1FFFFF - (252 << 22))) >> 22, 7)
    code = tl.where(a < 0x3F800000, sub, normal) | ((u >> 28) & 8)
    return tl.where(a > 0x7F800000, 4, code)


@triton.jit
def _block_scale(top, gs, inv_gs, RULE: tl.constexpr, UE8M0: tl.constexpr, GLOBAL: tl.constexpr, HW: tl.constexpr):
    """From each block's max|x| as int32 bits (a NaN pattern for a NaN block): the multiplier applied to x
    (fp32), and the stored scale (fp32 bits as int32 for the fp8 recipes, the e8m0 or e4m3 byte as int32).
    RULE (``plan.scales``): 0 the fp8 recipes, 1 mxfp8 floor, 2 mxfp8 rceil, 3 nvfp4."""
    nan = top > 0x7F800000
    amax = top.to(tl.float32, bitcast=True)
    if RULE == 0:
        m, s = _fp8_multiplier(amax, HW)
        if UE8M0:
            # s rounded up to a power of two (inf stays); m its exact reciprocal, from the bits.
            sb = s.to(tl.int32, bitcast=True)
            up = ((sb & 0x7FFFFF) != 0) & ((sb & 0x7F800000) != 0x7F800000)
            sb = tl.where(up, (sb & 0x7F800000) + (1 << 23), sb)
            s = sb.to(tl.float32, bitcast=True)
            m = tl.where(sb == 0x7F800000, 0.0, ((254 << 23) - sb).to(tl.float32, bitcast=True))
        mult = tl.where(nan, float("nan"), m)
        stored = tl.where(nan, 0x7FC00000, s.to(tl.int32, bitcast=True))
    elif RULE == 1:
        field = top >> 23
        biased = tl.minimum(tl.maximum(field - 135, -127), 128) + 127
        # x / 2^(biased - 127), the divisor at least 2^-126, as a product with its exact reciprocal.
        r = ((254 - tl.maximum(biased, 1)) << 23).to(tl.float32, bitcast=True)
        mult = tl.where(nan, 0.0, r)
        stored = tl.where(nan, 255, biased)
    elif RULE == 2:
        # The smallest power of two >= amax / 448, from the bits: amax = 1.f * 2^E lies above 448 * 2^(E-8)
        # exactly when its mantissa exceeds 1.75's.
        field = top >> 23
        e = field - 135 + ((top & 0x7FFFFF) > 0x600000).to(tl.int32)
        e = tl.where(field == 0, -127, tl.where(field == 255, 127, e))
        biased = tl.minimum(tl.maximum(e, -127), 127) + 127
        r = ((254 - biased) << 23).to(tl.float32, bitcast=True)
        tiny = tl.full(r.shape, 1 << 22, tl.int32).to(tl.float32, bitcast=True)  # 2^-127, subnormal
        r = tl.where(biased == 0, 1.0, tl.where(biased == 254, tiny, r))
        mult = tl.where(nan, float("nan"), r)
        stored = tl.where(nan, 255, biased)
    else:
        block = _div(amax, tl.full(amax.shape, 6.0, tl.float32), HW)
        if GLOBAL:
            block = _div(block, tl.full(amax.shape, 0.0, tl.float32) + gs, HW)
        clamped = tl.minimum(tl.maximum(block, 0.015625), 448.0)
        if HW == 2:
            u = clamped.to(tl.int32, bitcast=True)
            s8 = tl.inline_asm_elementwise(CVT_ONE_ASM, "=r,r", [u], dtype=tl.int32, is_pure=True, pack=1)
        else:
            s8 = fp32_to_fp8_bits(clamped, 7, 3, 0x43E00000)
        # s8 is a normal e4m3 (at least 2^-6): its fp32 value from the bits.
        s = (((s8 >> 3) + 120) << 23 | (s8 & 7) << 20).to(tl.float32, bitcast=True)
        one = tl.full(amax.shape, 1.0, tl.float32)
        if GLOBAL:
            r = _div(tl.full(amax.shape, 0.0, tl.float32) + inv_gs, s, HW)
        else:
            r = _div(one, s, HW)
        bad = block != block
        mult = tl.where(bad, float("nan"), r)
        stored = tl.where(bad, 0x7F, s8)
    return mult, stored


@triton.jit
def _blocked(row, col, tiles_per_row):
    """Offset of scale (row, col) in cuBLAS's blocked layout (``plan.scales.blocked_offset``)."""
    tile = (row // 128) * tiles_per_row + col // 4
    return tile * 512 + (row % 32) * 16 + ((row % 128) // 32) * 4 + col % 4


@triton.jit
def _f32(x):
    if x.dtype == tl.bfloat16:
        # bf16 is the upper half of an fp32: one shift per value, where the generic conversion costs more.
        return (x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
    else:
        return x.to(tl.float32)


@triton.jit
def _store(ptr, value, mask, EVEN: tl.constexpr):
    """A store, masked unless the tiles cover x exactly (EVEN): unused, the mask's arithmetic is dropped."""
    if EVEN:
        tl.store(ptr, value)
    else:
        tl.store(ptr, value, mask=mask)


@triton.jit
def _load(x_ptr, rows, rk, M, K, stride_xm, stride_xk, EVEN: tl.constexpr):
    """The tile's rows ``rows`` as fp32 (masked slots 0)."""
    ptr = x_ptr + rows[:, None] * stride_xm + rk[None, :] * stride_xk
    if EVEN:
        return _f32(tl.load(ptr))
    else:
        return _f32(tl.load(ptr, mask=(rows[:, None] < M) & (rk[None, :] < K), other=0.0))


@triton.jit
def _abs_bits(xf):
    return xf.to(tl.int32, bitcast=True) & 0x7FFFFFFF


@triton.jit
def _store_rows(y, rows, rk, k0, M, K, data_ptr, PACK: tl.constexpr, HW: tl.constexpr, C: tl.constexpr,
                EVEN: tl.constexpr):  # fmt: skip
    """The row-wise data of the scaled rows ``y`` (R x C, first column ``k0``), into the row-major output."""
    row_ok = rows[:, None] < M
    if PACK == 2:
        lo, hi = tl.split(tl.reshape(_e2m1(y), (y.shape[0], C // 2, 2)))
        pc = k0 // 2 + tl.arange(0, C // 2)
        _store(data_ptr + rows[:, None] * (K // 2) + pc[None, :], (lo | (hi << 4)).to(tl.uint8),
               row_ok & (pc[None, :] < K // 2), EVEN)  # fmt: skip
    else:
        _store(data_ptr + rows[:, None] * K + rk[None, :], _e4m3(y, HW), row_ok & (rk[None, :] < K), EVEN)


@triton.jit
def _rows(xf, rows, rk, k0, M, K, group0, data_ptr, scale_ptr, scale_m, scale_g, gs, inv_gs, RULE: tl.constexpr,
          B: tl.constexpr, PACK: tl.constexpr, UE8M0: tl.constexpr, GLOBAL: tl.constexpr, BLOCKED: tl.constexpr,
          HW: tl.constexpr, R: tl.constexpr, C: tl.constexpr, EVEN: tl.constexpr):  # fmt: skip
    """Row-wise output of the R x C fp32 rows ``xf``: groups of B along the rows, the data and scales."""
    G: tl.constexpr = C // B
    m, s = _block_scale(tl.max(tl.reshape(_abs_bits(xf), (R, G, B)), 2), gs, inv_gs, RULE, UE8M0, GLOBAL, HW)
    _store_rows(tl.reshape(tl.reshape(xf, (R, G, B)) * m[:, :, None], (R, C)), rows, rk, k0, M, K, data_ptr, PACK,
                HW, C, EVEN)  # fmt: skip
    g = group0 + tl.arange(0, G)
    if BLOCKED:
        offs = _blocked(rows[:, None], g[None, :], scale_m)
    else:
        offs = rows[:, None] * scale_m + g[None, :] * scale_g
    _store(scale_ptr + offs, s, (rows[:, None] < M) & (g[None, :] * B < K), EVEN)


@triton.jit
def _column_scaled(xf, m, H: tl.constexpr, Q: tl.constexpr, C: tl.constexpr):
    """One row set (rows 4i + k of H groups, Q rows each) times its groups' multipliers ``m`` (H x C)."""
    return tl.reshape(tl.reshape(xf, (H, Q, C)) * m[:, None, :], (H * Q, C))


@triton.jit
def _column_top(b0, b1, b2, b3, H: tl.constexpr, Q: tl.constexpr, C: tl.constexpr):
    """Each column group's max|x| bits (H x C) from the four row sets' bits."""
    top = tl.maximum(tl.maximum(b0, b1), tl.maximum(b2, b3))
    return tl.max(tl.reshape(top, (H, Q, C)), 1)


@triton.jit(do_not_specialize=["grid_k"])
def quantize_kernel(
    x_ptr,
    data_ptr,
    scale_ptr,
    data_t_ptr,
    scale_t_ptr,
    gs_ptr,
    M,
    K,
    stride_xm,
    stride_xk,
    grid_k,
    row_scale_m,
    row_scale_g,
    col_scale_k,
    col_scale_g,
    RULE: tl.constexpr,
    B: tl.constexpr,
    SQUARE: tl.constexpr,
    PACK: tl.constexpr,
    UE8M0: tl.constexpr,
    GLOBAL: tl.constexpr,
    BLOCKED: tl.constexpr,
    ROWWISE: tl.constexpr,
    COLWISE: tl.constexpr,
    HW: tl.constexpr,
    OFF64: tl.constexpr,
    EVEN: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid = tl.program_id(0)
    pid_m = pid // grid_k
    pid_k = pid % grid_k
    if OFF64:
        pid_m = pid_m.to(tl.int64)
        pid_k = pid_k.to(tl.int64)
    k0 = pid_k * BLOCK_K
    rk = k0 + tl.arange(0, BLOCK_K)
    gs = 1.0
    inv_gs = 1.0
    if GLOBAL:
        gs = tl.load(gs_ptr)
        # 1 / global_scale, once a program (an IEEE quotient, as every division here).
        inv_gs = tl.sum(_div(tl.full((1,), 1.0, tl.float32), tl.full((1,), 0.0, tl.float32) + gs, HW))
    if not (COLWISE or SQUARE):
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        xf = _load(x_ptr, rm, rk, M, K, stride_xm, stride_xk, EVEN)
        _rows(xf, rm, rk, k0, M, K, pid_k * (BLOCK_K // B), data_ptr, scale_ptr, row_scale_m, row_scale_g, gs,
              inv_gs, RULE, B, PACK, UE8M0, GLOBAL, BLOCKED, HW, BLOCK_M, BLOCK_K, EVEN)  # fmt: skip
    else:
        # The tile as four row sets, rows 4i + k (k = 0..3): each thread holds the same (i, column) of all
        # four, so the column-wise output's four bytes (or fp4 pairs) of rows 4i..4i+3 meet in one thread
        # as one word of data_t, and the transpose moves words, not bytes (as in cast_transpose).
        R: tl.constexpr = BLOCK_M // 4
        ri = pid_m * R + tl.arange(0, R)
        x0 = _load(x_ptr, 4 * ri, rk, M, K, stride_xm, stride_xk, EVEN)
        x1 = _load(x_ptr, 4 * ri + 1, rk, M, K, stride_xm, stride_xk, EVEN)
        x2 = _load(x_ptr, 4 * ri + 2, rk, M, K, stride_xm, stride_xk, EVEN)
        x3 = _load(x_ptr, 4 * ri + 3, rk, M, K, stride_xm, stride_xk, EVEN)
        H: tl.constexpr = 1 if SQUARE else BLOCK_M // B
        Q: tl.constexpr = R // H
        top = _column_top(_abs_bits(x0), _abs_bits(x1), _abs_bits(x2), _abs_bits(x3), H, Q, BLOCK_K)
        if SQUARE:
            top = tl.max(top, 1, keep_dims=True)
        m, s = _block_scale(top, gs, inv_gs, RULE, UE8M0, GLOBAL, HW)
        y0 = _column_scaled(x0, m, H, Q, BLOCK_K)
        y1 = _column_scaled(x1, m, H, Q, BLOCK_K)
        y2 = _column_scaled(x2, m, H, Q, BLOCK_K)
        y3 = _column_scaled(x3, m, H, Q, BLOCK_K)
        t_ok = (rk[:, None] < K) & (ri[None, :] < M // 4)
        if PACK == 2:
            # Rows 4i..4i+3 as four nibbles: one 16-bit word of data_t (passed as int16, K x M/4).
            h = _e2m1(y0) | (_e2m1(y1) << 4) | (_e2m1(y2) << 8) | (_e2m1(y3) << 12)
            _store(data_t_ptr + rk[:, None] * (M // 4) + ri[None, :], tl.trans(h.to(tl.int16)), t_ok, EVEN)
        else:
            q0, q1, q2, q3 = _e4m3(y0, HW), _e4m3(y1, HW), _e4m3(y2, HW), _e4m3(y3, HW)
            if COLWISE:
                if HW:
                    w = words_hw(q0, q1, q2, q3)
                else:
                    w = q0.to(tl.int32) | (q1.to(tl.int32) << 8) | (q2.to(tl.int32) << 16) | (q3.to(tl.int32) << 24)
                # data_t passed as int32 words, K x M/4.
                _store(data_t_ptr + rk[:, None] * (M // 4) + ri[None, :], tl.trans(w), t_ok, EVEN)
            if SQUARE and ROWWISE:
                tl.store(data_ptr + (4 * ri)[:, None] * K + rk[None, :], q0)
                tl.store(data_ptr + (4 * ri + 1)[:, None] * K + rk[None, :], q1)
                tl.store(data_ptr + (4 * ri + 2)[:, None] * K + rk[None, :], q2)
                tl.store(data_ptr + (4 * ri + 3)[:, None] * K + rk[None, :], q3)
        if SQUARE:
            if ROWWISE:
                tl.store(scale_ptr + pid_m * row_scale_m + pid_k * row_scale_g + tl.zeros_like(s), s)
            if COLWISE:
                tl.store(scale_t_ptr + pid_k * col_scale_k + pid_m * col_scale_g + tl.zeros_like(s), s)
        else:
            gm = pid_m * H + tl.arange(0, H)
            if BLOCKED:
                offs = _blocked(rk[:, None], gm[None, :], col_scale_k)
            else:
                offs = rk[:, None] * col_scale_k + gm[None, :] * col_scale_g
            _store(scale_t_ptr + offs, tl.trans(s), (rk[:, None] < K) & (gm[None, :] * B < M), EVEN)
            if ROWWISE:
                g0 = pid_k * (BLOCK_K // B)
                _rows(x0, 4 * ri, rk, k0, M, K, g0, data_ptr, scale_ptr, row_scale_m, row_scale_g, gs, inv_gs,
                      RULE, B, PACK, UE8M0, GLOBAL, BLOCKED, HW, R, BLOCK_K, EVEN)  # fmt: skip
                _rows(x1, 4 * ri + 1, rk, k0, M, K, g0, data_ptr, scale_ptr, row_scale_m, row_scale_g, gs, inv_gs,
                      RULE, B, PACK, UE8M0, GLOBAL, BLOCKED, HW, R, BLOCK_K, EVEN)  # fmt: skip
                _rows(x2, 4 * ri + 2, rk, k0, M, K, g0, data_ptr, scale_ptr, row_scale_m, row_scale_g, gs, inv_gs,
                      RULE, B, PACK, UE8M0, GLOBAL, BLOCKED, HW, R, BLOCK_K, EVEN)  # fmt: skip
                _rows(x3, 4 * ri + 3, rk, k0, M, K, g0, data_ptr, scale_ptr, row_scale_m, row_scale_g, gs, inv_gs,
                      RULE, B, PACK, UE8M0, GLOBAL, BLOCKED, HW, R, BLOCK_K, EVEN)  # fmt: skip


_INTERPRETED = is_interpreted_kernel(quantize_kernel)


def is_interpreted() -> bool:
    """True when TRITON_INTERPRET=1 was set before this module was imported (the kernel then runs on CPU)."""
    return _INTERPRETED


def _hw_level(x: torch.Tensor) -> int:
    """The kernel's HW: 0 in the interpreter; on a GPU 1 (inline PTX for IEEE division and reciprocals), 2
    where the GPU also converts fp32 to e4m3 in hardware (compute capability 8.9 and later)."""
    if _INTERPRETED or not x.is_cuda:
        return 0
    return 2 if has_hw_cvt(x.device.index) else 1


def launch(x, data, scale, data_t, scale_t, global_scale, plan: QuantizeLaunch) -> None:
    """Quantize the non-empty 2-D x (fp32/fp16/bf16, any strides) by ``plan`` into the given outputs
    (None where not asked for; the blocked scales already zeroed where they hold padding). The caller
    has checked every argument; ``global_scale`` is a 0-d fp32 tensor on x's device or None."""
    M, K = x.shape
    sxm, sxk = x.stride()
    hw = _hw_level(x)
    outs = [None if t is None else (as_uint(t).view(torch.int32) if t.dtype == torch.float32 else as_uint(t))
            for t in (data, scale, data_t, scale_t)]  # fmt: skip
    if data_t is not None:
        # Column-wise data goes out as 32-bit words (fp8) or 16-bit words (fp4) of four rows of x.
        outs[2] = outs[2].view(torch.int16 if plan.pack == 2 else torch.int32)
    filler = next(t for t in outs if t is not None)
    ptrs = (x, *(filler if t is None else t for t in outs), filler if global_scale is None else global_scale)
    p = plan
    flags = (p.rule, p.block, p.square, p.pack, p.ue8m0, global_scale is not None, p.blocked, p.rowwise,
             p.columnwise, hw, p.off64, p.even, p.block_m, p.block_k)  # fmt: skip
    ints = (M, K, sxm, sxk, p.grid_k, *p.row_scale_strides, *p.col_scale_strides)
    if _INTERPRETED:
        quantize_kernel[(p.programs,)](*ptrs, *ints, *flags, num_warps=p.num_warps)
        return
    device = x.device.index
    specialized = (*ints[:4], *ints[5:])  # grid_k is not specialized
    key = ("quantize", device, x.dtype, flags, p.num_warps, *(spec_key(v) for v in specialized),
           *(t.data_ptr() % 16 == 0 for t in ptrs))  # fmt: skip
    args = (*ints, *flags)
    launcher.launch(quantize_kernel, key, (p.programs, 1), device, ptrs, lambda: ptrs, args, {"num_warps": p.num_warps})


_TRITON_DTYPE = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def compile_for_target(x_dtype, plan: QuantizeLaunch, *, arch: int = 90, global_scale: bool = False, hw: int = 2):
    """Compile the kernel of ``plan`` ahead of time for ``sm_<arch>`` without a GPU, for a contiguous x
    (i32 sizes and strides divisible by 16) at HW level ``hw`` (``_hw_level``), in a process without the
    interpreter. Returns triton's compiled kernel (``asm["ptx"]``, ``metadata``)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if _INTERPRETED:
        raise RuntimeError("compile_for_target needs a process where TRITON_INTERPRET is not set")
    p = plan
    fn = quantize_kernel
    scale_ty = "*i32" if p.rule == 0 else "*u8"
    data_t_ty = "*i16" if p.pack == 2 else "*i32"
    pointers = {"x_ptr": "*" + _TRITON_DTYPE[x_dtype], "data_ptr": "*u8", "scale_ptr": scale_ty,
                "data_t_ptr": data_t_ty, "scale_t_ptr": scale_ty, "gs_ptr": "*fp32"}  # fmt: skip
    ints = ["M", "K", "stride_xm", "grid_k", "row_scale_m", "row_scale_g", "col_scale_k", "col_scale_g"]
    constexprs = {"stride_xk": 1, "RULE": p.rule, "B": p.block, "SQUARE": p.square, "PACK": p.pack,
                  "UE8M0": p.ue8m0, "GLOBAL": global_scale, "BLOCKED": p.blocked, "ROWWISE": p.rowwise,
                  "COLWISE": p.columnwise, "HW": hw, "OFF64": p.off64, "EVEN": p.even, "BLOCK_M": p.block_m,
                  "BLOCK_K": p.block_k}  # fmt: skip
    signature = pointers | dict.fromkeys(ints, "i32") | dict.fromkeys(constexprs, "constexpr")
    names = fn.arg_names
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in [*pointers, "M", "K", "stride_xm"]}
    source = ASTSource(fn=fn, signature={n: signature[n] for n in names}, constexprs=constexprs, attrs=attrs)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options={"num_warps": p.num_warps})
