"""The fused fp8 cast-transpose: kernel and launcher.

One program owns one BLOCK_M x BLOCK_N tile of x: it reads the tile once, scales it in fp32, converts
it once to fp8 bytes, and stores the bytes twice, row-major into ``y`` and through ``tl.trans`` into
``y_t``. The same tile also yields the program's partial of ``max|x|``, so the amax needs no second
pass over x, only a reduction over one int32 per program (``finalize_amax``).

Conversion rule (fp32 product ``p`` to fp8 byte): torch's ``p.clamp(-fmax, fmax).to(dtype)``, bit for
bit, computed with integer bit arithmetic that is exact in Triton's interpreter (whose own fp8 casts do
not round like torch) and on any GPU alike:

  - ``a = bits(p) & 0x7fffffff``. Non-negative fp32 values order like their bit patterns, so the
    clamp is ``min(a, bits(fmax))``; it turns +-inf and every finite value above fmax into fmax
    *before* rounding, which is why nothing can round past fmax afterwards.
  - fp8 normals (``a`` at or above the format's smallest normal): rebias the exponent and drop
    ``23 - MAN`` mantissa bits with round-to-nearest-even, as one integer add on the whole bit
    pattern (a mantissa carry walks into the exponent, as rounding up a binade must).
  - fp8 subnormals and below: the result is the integer ``RNE(significand >> shift)``, the value in
    units of the smallest subnormal; a result of ``2**MAN`` is exactly the smallest normal's encoding.
    Values at or below half the smallest subnormal become zero (the halfway tie goes to the even 0).
  - NaN becomes 0x7f (a NaN in both formats); the sign bit is copied for every value, so -0.0 gives
    0x80.

  Triton's own ``.to(tl.float8e4nv / tl.float8e5)`` (the hardware's ``cvt.rn.satfinite``) was tried
  on an H200 and gave wrong bytes in this kernel (signs and neighbours mixed up), so it is not used.

The amax partial of a program is ``max(bits(x) & 0x7fffffff)`` over its tile, as int32: the same
ordering argument makes it the bits of ``max|x|`` exactly, and every NaN pattern sits above inf's,
so a NaN anywhere wins the max (``tl.max`` on floats would drop it). Masked slots load 0.

Launch style mirrors ``triton_transpose``: sizes and strides are runtime arguments, a 1-D grid from
``tileflip.plan.transpose_grid``, int64 offsets, and a cache of compiled kernels that skips Triton's
binder after the first launch of a class. The outputs are passed as uint8 views (fp8 bytes), so the
interpreter never runs its own fp8 casts.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from tileflip.dtypes import as_uint
from tileflip.kernels.triton_common import current_stream, is_interpreted_kernel, spec_key
from tileflip.plan import transpose_grid
from tileflip.tuning import TileConfig

# fp8 formats: exponent bias, mantissa bits, and the fp32 bit pattern of the largest finite value.
FORMATS = {
    torch.float8_e4m3fn: (7, 3, int(np.float32(448.0).view(np.int32))),
    torch.float8_e5m2: (15, 2, int(np.float32(57344.0).view(np.int32))),
}

# Tiles by input element size. Not measured yet (chosen on a machine without a GPU, to be tuned on
# the H200): a 128x128 tile keeps every y and y_t row segment at 128 contiguous bytes (a full line)
# and each x row segment at 256 or 512 bytes; 8 warps give a 2-byte input 64 values (128 bytes) per
# thread, and fp32 gets 16 warps for the same 128 bytes per thread. In the sm_90 code every thread
# loads and stores in 16-byte vectors; Triton moves the tile between layouts through shared memory
# (ldmatrix.trans on the input) and converts each layout's copy, which costs instructions, not bytes.
TILES = {
    2: TileConfig(128, 128, 8),
    4: TileConfig(128, 128, 16),
}


def tile_config(element_size: int) -> TileConfig:
    return TILES[element_size]


@triton.jit
def _fp32_to_fp8_bits(p, BIAS: tl.constexpr, MAN: tl.constexpr, FMAX_BITS: tl.constexpr):
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


# grid_m and grid_n only decode the program id (see triton_transpose): not worth a specialization.
@triton.jit(do_not_specialize=["grid_m", "grid_n"])
def cast_transpose_kernel(
    x_ptr,
    y_ptr,
    yt_ptr,
    amax_ptr,
    scale_ptr,
    scale_value,
    M,
    N,
    stride_xm,
    stride_xn,
    grid_m,
    grid_n,
    BIAS: tl.constexpr,
    MAN: tl.constexpr,
    FMAX_BITS: tl.constexpr,
    SCALE_FROM_PTR: tl.constexpr,
    STORE_T: tl.constexpr,
    WITH_AMAX: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    # Program order: the transpose kernel's (tileflip.plan.TransposeGrid.tile_of).
    pid = tl.program_id(0)
    if GROUP_M == 1:
        pid_m = pid // grid_n
        pid_n = pid % grid_n
    else:
        band = GROUP_M * grid_n
        first_m = (pid // band) * GROUP_M
        rows = tl.minimum(grid_m - first_m, GROUP_M)
        within = pid % band
        pid_m = first_m + within % rows
        pid_n = within // rows
    rm = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    xf = tl.load(x_ptr + rm[:, None] * stride_xm + rn[None, :] * stride_xn, mask=mask, other=0.0).to(tl.float32)
    if SCALE_FROM_PTR:
        # Read on the device: a scale computed by an earlier kernel never makes the host wait.
        s = tl.load(scale_ptr)
    else:
        s = scale_value
    p = xf * s
    q = _fp32_to_fp8_bits(p, BIAS, MAN, FMAX_BITS).to(tl.uint8)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], q, mask=mask)
    if STORE_T:
        t_mask = (rn[:, None] < N) & (rm[None, :] < M)
        tl.store(yt_ptr + rn[:, None] * M + rm[None, :], tl.trans(q), mask=t_mask)
    if WITH_AMAX:
        tl.store(amax_ptr + pid, tl.max(xf.to(tl.int32, bitcast=True) & 0x7FFFFFFF))


def is_interpreted() -> bool:
    """True when TRITON_INTERPRET=1 was set before this module was imported (the kernel then runs on CPU)."""
    return _INTERPRETED


_INTERPRETED = is_interpreted_kernel(cast_transpose_kernel)


def fp32_value(scale: float) -> float:
    """``scale`` rounded to fp32 (to nearest, overflow to inf) as torch's ``x.float() * scale`` rounds it,
    so that no later conversion of the argument can round it differently."""
    with np.errstate(over="ignore"):
        return float(np.float32(scale))


# (device, x dtype, fp8 dtype, config, flags, integer keys, pointer alignments) -> compiled kernel.
_compiled: dict = {}


def launch(x, y, y_t, partials, scale, dtype, config: TileConfig | None = None) -> None:
    """Cast the 2-D x (fp32/fp16/bf16, any strides, non-empty) into the contiguous fp8 ``y`` (M x N)
    and, when ``y_t`` is not None, ``y_t`` (N x M); when ``partials`` is not None, write each
    program's amax partial into it (int32, one per program, ``num_programs`` of them).

    ``scale`` is a Python float or a 0-d fp32 tensor on x's device. The caller has checked every
    argument; ``dtype`` is a key of ``FORMATS``.
    """
    config = config or tile_config(x.element_size())
    M, N = x.shape
    sxm, sxn = x.stride()
    grid = transpose_grid(M, N, config.block_m, config.block_n, config.group_m)
    from_ptr = isinstance(scale, torch.Tensor)
    # Unused pointer slots get tensors of the same dtype as when used, so the signature never changes.
    scale_t = scale if from_ptr else (partials if partials is not None else _scratch(x.device)).view(torch.float32)
    scale_v = 1.0 if from_ptr else fp32_value(scale)
    y_u = as_uint(y)
    yt_u = as_uint(y_t) if y_t is not None else y_u
    amax_t = partials if partials is not None else scale_t.view(torch.int32)
    flags = (*FORMATS[dtype], from_ptr, y_t is not None, partials is not None)
    args = (M, N, sxm, sxn, grid.grid_m, grid.grid_n, *flags, config.block_m, config.block_n, config.group_m)
    programs = grid.programs
    if _INTERPRETED:
        cast_transpose_kernel[(programs,)](x, y_u, yt_u, amax_t, scale_t, scale_v, *args, num_warps=config.num_warps)
        return
    device = x.device.index
    ptrs = (x, y_u, yt_u, amax_t, scale_t)
    key = (device, x.dtype, dtype, config, flags[3:], spec_key(M), spec_key(N), spec_key(sxm), spec_key(sxn),
           *(t.data_ptr() % 16 == 0 for t in ptrs))  # fmt: skip
    kernel = _compiled.get(key)
    if kernel is None:
        _compiled[key] = cast_transpose_kernel[(programs,)](*ptrs, scale_v, *args, num_warps=config.num_warps)
        return
    kernel.run(programs, 1, 1, current_stream(device), kernel.function, kernel.packed_metadata,
               None, None, None, *ptrs, scale_v, *args)  # fmt: skip


_scratch_by_device: dict = {}


def _scratch(device) -> torch.Tensor:
    # A 4-byte placeholder for the scale pointer when the scale is a float and there is no amax buffer;
    # the kernel never reads it.
    t = _scratch_by_device.get(device)
    if t is None:
        t = _scratch_by_device[device] = torch.empty(1, dtype=torch.int32, device=device)
    return t


def num_programs(M: int, N: int, element_size: int, config: TileConfig | None = None) -> int:
    config = config or tile_config(element_size)
    return transpose_grid(M, N, config.block_m, config.block_n, config.group_m).programs


def finalize_amax(partials: torch.Tensor) -> torch.Tensor:
    """max|x| as a 0-d fp32 tensor from the per-program partials (bits of non-negative floats as int32:
    their integer max is the float max, NaN included). One partial needs no reduction kernel."""
    top = partials[0] if partials.numel() == 1 else partials.amax()
    return top.view(torch.float32)


def launches_compiled() -> int:
    """How many kernel classes the fast path holds (for tests)."""
    return len(_compiled)


_TRITON_DTYPE = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def compile_for_target(
    x_dtype,
    dtype=torch.float8_e4m3fn,
    config: TileConfig | None = None,
    *,
    arch: int = 90,
    scale_from_ptr: bool = True,
    transpose: bool = True,
    amax: bool = True,
):
    """Compile the kernel ahead of time for ``sm_<arch>`` without a GPU, with the common specialization of
    a contiguous input (i32 sizes divisible by 16, unit inner stride), in a process without the
    interpreter. Returns triton's compiled kernel: ``asm["ptx"]`` is what the GPU runs, ``metadata.shared``
    its shared memory."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if _INTERPRETED:
        # TRITON_INTERPRET=1 also turns triton's own jit helpers (tl.max's combine function) into
        # interpreter wrappers, which the compiler cannot lower.
        raise RuntimeError("compile_for_target needs a process where TRITON_INTERPRET is not set")
    config = config or tile_config(torch.empty((), dtype=x_dtype).element_size())
    fn = cast_transpose_kernel
    pointers = {"x_ptr": "*" + _TRITON_DTYPE[x_dtype], "y_ptr": "*u8", "yt_ptr": "*u8", "amax_ptr": "*i32",
                "scale_ptr": "*fp32"}  # fmt: skip
    ints = ["M", "N", "stride_xm", "grid_m", "grid_n"]
    bias, man, fmax_bits = FORMATS[dtype]
    constexprs = {"stride_xn": 1, "BIAS": bias, "MAN": man, "FMAX_BITS": fmax_bits,
                  "SCALE_FROM_PTR": scale_from_ptr, "STORE_T": transpose, "WITH_AMAX": amax,
                  "BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "GROUP_M": config.group_m}  # fmt: skip
    signature = pointers | {"scale_value": "fp32"} | dict.fromkeys(ints, "i32") | dict.fromkeys(constexprs, "constexpr")
    names = fn.arg_names
    divisible = [*pointers, "M", "N", "stride_xm"]
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in divisible}
    source = ASTSource(fn=fn, signature={n: signature[n] for n in names}, constexprs=constexprs, attrs=attrs)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options={"num_warps": config.num_warps})
