"""fp32 to fp8 conversion in Triton, shared by the cast-transpose and quantize kernels: the hardware's
``cvt.rn.satfinite`` on compute capability 8.9 and later, integer bit arithmetic in the interpreter and
on older GPUs. Both give the bits of torch's ``p.clamp(-fmax, fmax).to(dtype)`` (``docs/design.md``,
fp8 cast-transpose). Also the bytes of four row sets joined into 32-bit words for transposed stores.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

# fp8 formats: exponent bias, mantissa bits, and the fp32 bit pattern of the largest finite value.
FORMATS = {
    torch.float8_e4m3fn: (7, 3, int(np.float32(448.0).view(np.int32))),
    torch.float8_e5m2: (15, 2, int(np.float32(57344.0).view(np.int32))),
}

def _cvt_asm(fmt: str) -> str:
    # Four fp32 values ($1..$4) to four fp8 bytes in $0, element j in byte j (see fp32_to_fp8_hw).
    return (
        "{ .reg .b16 lo, hi;\n"
        f"cvt.rn.satfinite.{fmt}x2.f32 lo, $2, $1;\n"
        f"cvt.rn.satfinite.{fmt}x2.f32 hi, $4, $3;\n"
        "mov.b32 $0, {lo, hi}; }"
    )


# The PTX of the hardware path, as constexprs (the only globals a Triton kernel may read); the tests
# run them through a model of the PTX semantics, since no GPU is needed for that.
CVT_E4M3_ASM = tl.constexpr(_cvt_asm("e4m3"))
CVT_E5M2_ASM = tl.constexpr(_cvt_asm("e5m2"))
@triton.jit
def fp32_to_fp8_bits(p, BIAS: tl.constexpr, MAN: tl.constexpr, FMAX_BITS: tl.constexpr):
    """The fp8 byte (as int32) of ``clamp(p, -fmax, fmax)``, rounded to nearest even (module docstring)."""
    DROP: tl.constexpr = 23 - MAN
    u = p.to(tl.int32, bitcast=True)
    sign = (u >> 24) & 0x80
    a = u & 0x7FFFFFFF
    is_nan = a > 0x7F800000
    a = tl.minimum(a, FMAX_BITS)
    # Normal: round the whole pattern at bit DROP (ties to even), then move the exponent bias.
    normal = (a + ((1 << (DROP - 1)) - 1) + ((a >> DROP) & 1)) >> DROP
    normal = normal - ((127 - BIAS) << MAN)
    # Subnormal: significand in units of the smallest fp8 subnormal. Shifts past 26 all give 0 (the
    # 24-bit significand is below half a unit), and capping keeps the shift defined on every lane.
    e = a >> 23
    sig = (a & 0x7FFFFF) | 0x800000
    shift = tl.minimum(tl.maximum(151 - BIAS - MAN - e, 1), 26)
    q = sig >> shift
    rem = sig & ((1 << shift) - 1)
    half = 1 << (shift - 1)
    up = (rem > half) | ((rem == half) & ((q & 1) == 1))
    sub = q + up.to(tl.int32)
    mag = tl.where(e >= 128 - BIAS, normal, sub)
    return tl.where(is_nan, 0x7F, mag) | sign


@triton.jit
def fp32_to_fp8_hw(p, MAN: tl.constexpr):
    """The fp8 bytes (uint8) of ``clamp(p, -fmax, fmax)``, by the hardware's ``cvt.rn.satfinite`` (sm_89+).

    ``cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 d, a, b`` rounds a and b to nearest even (fp8 subnormals
    included; there is no .ftz, so nothing is flushed) and packs them, a into the upper byte of the
    16-bit d and b into the lower. .satfinite turns NaN into NaN and any value whose magnitude exceeds
    the format's largest finite value (+-inf included) into that value with its sign (PTX ISA, cvt and
    the saturation modifiers). That is the reference's clamp-then-round: the clamp gives +-fmax to
    exactly the values above fmax, which .satfinite also maps to +-fmax (whether it judges the value
    before or after rounding: a value that rounds past fmax is above it), and every value the clamp
    keeps is rounded by the same rule in both. The GPU tests check it on every 16-bit input.

    With pack=4 one asm instance gets four consecutive elements of a thread ($1..$4) and returns their
    four bytes in one 32-bit register, the first element in the lowest byte (the order Triton unpacks a
    packed result in); hence each cvt names the later element first. The inputs are passed as their bits
    ("r": 32-bit registers, which PTX accepts as .f32 operands), so no float register class is involved."""
    u = p.to(tl.int32, bitcast=True)
    if MAN == 3:
        q = tl.inline_asm_elementwise(CVT_E4M3_ASM, "=r,r,r,r,r", [u], dtype=tl.uint8, is_pure=True, pack=4)
    else:
        q = tl.inline_asm_elementwise(CVT_E5M2_ASM, "=r,r,r,r,r", [u], dtype=tl.uint8, is_pure=True, pack=4)
    return q


# Four byte tensors joined into 32-bit words (words_hw).
WORDS_ASM = tl.constexpr(
    "{ .reg .b32 t0, t1, t2, t3;\n"
    "prmt.b32 t0, $4, $5, 0x5140;\n"
    "prmt.b32 t1, $4, $5, 0x7362;\n"
    "prmt.b32 t2, $6, $7, 0x5140;\n"
    "prmt.b32 t3, $6, $7, 0x7362;\n"
    "prmt.b32 $0, t0, t2, 0x5410;\n"
    "prmt.b32 $1, t0, t2, 0x7632;\n"
    "prmt.b32 $2, t1, t3, 0x5410;\n"
    "prmt.b32 $3, t1, t3, 0x7632; }"
)


@triton.jit
def words_hw(q0, q1, q2, q3):
    """w = q0 | q1 << 8 | q2 << 16 | q3 << 24 (int32) for the uint8 tensors q0..q3, as 4x4 byte transposes.

    With pack=4 each input register ($4..$7, one per row k) holds the bytes of four consecutive
    elements, element j in byte j; the outputs $0..$3 are those elements' words. ``prmt.b32 d, a, b, sel``
    builds d from the eight bytes of b:a (a's are 0-3, b's 4-7), nibble j of sel picking d's byte j. The
    first four interleave rows 0,1 and 2,3 byte by byte, the last four join the halves: 8 instructions
    per 16 bytes, where generic shifts and ors cost about four per byte."""
    return tl.inline_asm_elementwise(
        WORDS_ASM, "=r,=r,=r,=r,r,r,r,r", [q0, q1, q2, q3], dtype=tl.int32, is_pure=True, pack=4
    )


_hw_cvt_by_device: dict = {}


def has_hw_cvt(device: int) -> bool:
    """Whether CUDA GPU ``device`` has cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 (sm_89, Ada, and later);
    cached, since launches ask on every call."""
    has = _hw_cvt_by_device.get(device)
    if has is None:
        has = _hw_cvt_by_device[device] = torch.cuda.get_device_capability(device) >= (8, 9)
    return has
