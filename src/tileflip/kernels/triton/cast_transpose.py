"""The fused fp8 cast-transpose: kernel and launcher.

One program owns one BLOCK_M x BLOCK_N tile of x: it reads the tile once (as four row sets, rows
4i + k), scales it in fp32, converts it once to fp8 bytes and stores them twice, row-major into ``y``
and, joined four rows at a time into 32-bit words, transposed into ``y_t``. The same tile gives the
program's partial of ``max|x|`` (an integer max of the fp32 bit patterns, so a NaN wins), folded into
one zeroed int32 with a relaxed atomic max (``amax_slot``), or written one per program for
``finalize_amax`` under CUDA graph capture. The conversion is torch's
``p.clamp(-fmax, fmax).to(dtype)`` bit for bit: the hardware's ``cvt.rn.satfinite`` on compute
capability 8.9 and later, integer bit arithmetic in the interpreter and on older GPUs
(``docs/design.md``, fp8 cast-transpose). Outputs are passed as uint8 views, so the interpreter never
runs its own fp8 casts; offsets are int32 unless one may reach 2**31 (``needs_offsets_64``).
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from tileflip.kernels.dtypes import as_uint
from tileflip.kernels.triton import launch as launcher
from tileflip.kernels.triton.fp8 import FORMATS, fp32_to_fp8_bits, fp32_to_fp8_hw, has_hw_cvt, words_hw
from tileflip.kernels.triton.launch import is_interpreted_kernel, spec_key
from tileflip.plan.grid import TileConfig, cdiv, transpose_grid


@triton.jit
def _row_bytes(x_ptr, s, rm, rn, M, N, stride_xm, stride_xn, BIAS: tl.constexpr, MAN: tl.constexpr,
               FMAX_BITS: tl.constexpr, HW_CVT: tl.constexpr):  # fmt: skip
    """Load the rows ``rm`` (BLOCK_M // 4 of them, 4 apart) of the tile; return their fp8 bytes (uint8)
    and the fp32 bits of x (int32, for the amax; masked slots load 0)."""
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = tl.load(x_ptr + rm[:, None] * stride_xm + rn[None, :] * stride_xn, mask=mask, other=0.0)
    if x.dtype == tl.bfloat16:
        # bf16 is the upper half of an fp32: one shift or mask per value, where the generic conversion
        # costs a permute and a multiply for every other value.
        xf = (x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
    else:
        xf = x.to(tl.float32)
    p = xf * s
    if HW_CVT:
        q = fp32_to_fp8_hw(p, MAN)
    else:
        q = fp32_to_fp8_bits(p, BIAS, MAN, FMAX_BITS).to(tl.uint8)
    return q, xf.to(tl.int32, bitcast=True)


# grid_m and grid_n only decode the program id (see kernels/triton/transpose.py): not worth a specialization.
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
    HW_CVT: tl.constexpr,
    T_WORDS: tl.constexpr,
    OFF64: tl.constexpr,
    AMAX_ATOMIC: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    # Program order: the transpose kernel's (tileflip.plan.TransposeGrid.tile_of).
    pid = tl.program_id(0)
    if GROUP_M == 1:
        pid_m = pid // grid_n
        pid_n = pid % grid_n
    elif GROUP_M == 0:
        pid_m = pid % grid_m
        pid_n = pid // grid_m
    else:
        band = GROUP_M * grid_n
        first_m = (pid // band) * GROUP_M
        rows = tl.minimum(grid_m - first_m, GROUP_M)
        within = pid % band
        pid_m = first_m + within % rows
        pid_n = within // rows
    if SCALE_FROM_PTR:
        # Read on the device: a scale computed by an earlier kernel never makes the host wait.
        s = tl.load(scale_ptr)
    else:
        s = scale_value
    # The tile is handled as four row sets, rows 4i + k for k = 0..3 (module docstring): the four loads
    # have one shape and one layout, so each thread holds the same (i, n) of all four, and the bytes of
    # rows 4i..4i+3 of column n meet in one thread as one 32-bit word of y_t.
    R: tl.constexpr = BLOCK_M // 4
    if OFF64:
        pid_m = pid_m.to(tl.int64)
        pid_n = pid_n.to(tl.int64)
    ri = pid_m * R + tl.arange(0, R)  # word index along M: rows 4 * ri + k
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = rn[None, :] < N
    q0, b0 = _row_bytes(x_ptr, s, 4 * ri, rn, M, N, stride_xm, stride_xn, BIAS, MAN, FMAX_BITS, HW_CVT)
    q1, b1 = _row_bytes(x_ptr, s, 4 * ri + 1, rn, M, N, stride_xm, stride_xn, BIAS, MAN, FMAX_BITS, HW_CVT)
    q2, b2 = _row_bytes(x_ptr, s, 4 * ri + 2, rn, M, N, stride_xm, stride_xn, BIAS, MAN, FMAX_BITS, HW_CVT)
    q3, b3 = _row_bytes(x_ptr, s, 4 * ri + 3, rn, M, N, stride_xm, stride_xn, BIAS, MAN, FMAX_BITS, HW_CVT)
    y_rows = y_ptr + (4 * ri)[:, None] * N + rn[None, :]
    tl.store(y_rows, q0, mask=((4 * ri)[:, None] < M) & n_ok)
    tl.store(y_rows + N, q1, mask=((4 * ri + 1)[:, None] < M) & n_ok)
    tl.store(y_rows + 2 * N, q2, mask=((4 * ri + 2)[:, None] < M) & n_ok)
    tl.store(y_rows + 3 * N, q3, mask=((4 * ri + 3)[:, None] < M) & n_ok)
    if STORE_T:
        # Byte k of w[i, n] is y[4i + k, n] = y_t[n, 4i + k]: little-endian, w^T is y_t as 32-bit words.
        if HW_CVT:
            w = words_hw(q0, q1, q2, q3)
        else:
            w = q0.to(tl.int32) | (q1.to(tl.int32) << 8) | (q2.to(tl.int32) << 16) | (q3.to(tl.int32) << 24)
        wt = tl.trans(w)  # [BLOCK_N, R]; the layout change is a 32-bit shared-memory transpose
        if T_WORDS:
            # M % 4 == 0: y_t is passed as int32 words, N x M/4; word i is whole or wholly outside.
            tl.store(yt_ptr + rn[:, None] * (M // 4) + ri[None, :], wt, mask=(rn[:, None] < N) & (ri[None, :] < M // 4))
        else:
            # Rows of y_t not word aligned: the same words, stored byte by byte (shapes with M % 4 != 0).
            yt_bytes = yt_ptr + rn[:, None] * M + (4 * ri)[None, :]
            for k in tl.static_range(4):
                t_mask = (rn[:, None] < N) & ((4 * ri + k)[None, :] < M)
                tl.store(yt_bytes + k, ((wt >> (8 * k)) & 0xFF).to(tl.uint8), mask=t_mask)
    if WITH_AMAX:
        # After the stores: placed before them, the partial's inputs die earlier and ptxas needs 62
        # registers instead of 115 (4 programs per SM instead of 2), but an H200 ran the kernel slower
        # (87.1% of copy against 89.2% on 8192x28672 bf16, same run, H200).
        # max|x| without an "and" per value: as signed int32, the largest pattern is the largest
        # non-negative x if there is one, else the negative x of largest magnitude; as uint32 it is the
        # negative x of largest magnitude if there is one, else the largest non-negative x. One of the
        # two holds max|x| once the sign is cleared, and neither can exceed it, so the max of the two
        # is it. NaN patterns lie above inf's, so a NaN wins (module docstring).
        top_s = tl.max(tl.maximum(tl.maximum(b0, b1), tl.maximum(b2, b3)))
        u0, u1 = b0.to(tl.uint32, bitcast=True), b1.to(tl.uint32, bitcast=True)
        u2, u3 = b2.to(tl.uint32, bitcast=True), b3.to(tl.uint32, bitcast=True)
        top_u = tl.max(tl.maximum(tl.maximum(u0, u1), tl.maximum(u2, u3))).to(tl.int32, bitcast=True)
        top = tl.maximum(top_s & 0x7FFFFFFF, top_u & 0x7FFFFFFF)
        if AMAX_ATOMIC:
            # Into one int32 that holds 0 before the launch (``amax_slot``). Relaxed: no fence, so the
            # program never waits for its stores; the result is read only after the kernel has ended.
            tl.atomic_max(amax_ptr, top, sem="relaxed")
        else:
            tl.store(amax_ptr + pid, top)


def is_interpreted() -> bool:
    """True when TRITON_INTERPRET=1 was set before this module was imported (the kernel then runs on CPU)."""
    return _INTERPRETED


_INTERPRETED = is_interpreted_kernel(cast_transpose_kernel)


def fp32_value(scale: float) -> float:
    """``scale`` rounded to fp32 (to nearest, overflow to inf) as torch's ``x.float() * scale`` rounds it,
    so that no later conversion of the argument can round it differently."""
    with np.errstate(over="ignore"):
        return float(np.float32(scale))


def launch(x, y, y_t, partials, scale, dtype, config: TileConfig, *, hw_cvt: bool | None = None,
           off64: bool | None = None, amax_atomic: bool = False) -> None:  # fmt: skip
    """Cast the 2-D x (fp32/fp16/bf16, any strides, non-empty) into the contiguous fp8 ``y`` (M x N)
    and, when ``y_t`` is not None, ``y_t`` (N x M); when ``partials`` is not None, write each
    program's amax partial into it (int32, one per program, ``num_programs`` of them), or, with
    ``amax_atomic``, fold every program's partial into its one int32, which must hold 0 (``amax_slot``).

    ``scale`` is a Python float or a 0-d fp32 tensor on x's device. ``hw_cvt`` picks the conversion:
    True the hardware's (GPUs of compute capability 8.9 and later), False the integer one, None the
    hardware's wherever it exists (``uses_hw_cvt``). ``off64`` picks the offsets' width: None int32
    unless ``needs_offsets_64``, True int64 (for tests and benchmarks; False is refused where int32
    would overflow). The caller has checked every argument; ``dtype`` is a key of ``FORMATS``.
    """
    if config.block_m % 4:
        raise ValueError(f"config.block_m must be a multiple of 4 (rows are handled in fours), got {config.block_m}")
    if config.group_m < 0:
        raise ValueError(f"config.group_m must be >= 0 (row, column or row-band order), got {config.group_m}")
    if hw_cvt is None:
        hw_cvt = uses_hw_cvt(x.device)
    elif hw_cvt and not (x.is_cuda and has_hw_cvt(x.device.index)):
        raise ValueError(f"hw_cvt=True needs a CUDA GPU of compute capability 8.9 or later, x is on {x.device}")
    M, N = x.shape
    sxm, sxn = x.stride()
    grid = transpose_grid(M, N, config.block_m, config.block_n, config.group_m)
    wide = needs_offsets_64(M, N, sxm, sxn, config)
    if off64 is None or wide:
        if off64 is False:
            raise ValueError(f"off64=False: offsets of a {M}x{N} x with strides {(sxm, sxn)} reach 2**31")
        off64 = wide
    from_ptr = isinstance(scale, torch.Tensor)
    # Unused pointer slots get tensors of the same dtype as when used, so the signature never changes.
    scale_t = scale if from_ptr else (partials if partials is not None else _scratch(x.device)).view(torch.float32)
    scale_v = 1.0 if from_ptr else fp32_value(scale)
    y_u = as_uint(y)
    # y_t's rows as 32-bit words when they are whole words (M % 4 == 0 and a 4-byte aligned start).
    t_words = y_t is not None and M % 4 == 0 and y_t.data_ptr() % 4 == 0
    yt_arg = y_u if y_t is None else (as_uint(y_t).view(torch.int32) if t_words else as_uint(y_t))
    amax_t = partials if partials is not None else scale_t.view(torch.int32)
    amax_atomic = amax_atomic and partials is not None
    if amax_atomic and partials.numel() != 1:
        raise ValueError(f"amax_atomic=True needs partials of one int32 (an amax_slot), got {partials.numel()}")
    with_t, with_amax = y_t is not None, partials is not None
    flags = (*FORMATS[dtype], from_ptr, with_t, with_amax, bool(hw_cvt), t_words, off64, amax_atomic)
    args = (M, N, sxm, sxn, grid.grid_m, grid.grid_n, *flags, config.block_m, config.block_n, config.group_m)
    programs = grid.programs
    if _INTERPRETED:
        import numpy as np

        # The cast multiplies NaN inputs as torch does; the interpreter's numpy would flag a signalling NaN
        # operand as an invalid operation, which the GPU's multiply does not.
        with np.errstate(invalid="ignore"):
            cast_transpose_kernel[(programs,)](x, y_u, yt_arg, amax_t, scale_t, scale_v, *args,
                                               num_warps=config.num_warps)  # fmt: skip
        return
    device = x.device.index
    ptrs = (x, y_u, yt_arg, amax_t, scale_t)
    key = ("cast", device, x.dtype, dtype, config, flags[3:], spec_key(M), spec_key(N), spec_key(sxm),
           spec_key(sxn), *(t.data_ptr() % 16 == 0 for t in ptrs))  # fmt: skip
    options = {"num_warps": config.num_warps} | ({"maxnreg": config.maxnreg} if config.maxnreg else {})
    launcher.launch(cast_transpose_kernel, key, (programs, 1), device, ptrs, lambda: ptrs, (scale_v, *args), options)


def needs_offsets_64(M: int, N: int, stride_xm: int, stride_xn: int, config: TileConfig) -> bool:
    """Whether an element offset the kernel forms may reach 2**31: into x, y or y_t, over the whole
    padded grid (a masked tail lane computes its offset too; int32 would wrap there). For bf16 input
    int64 offsets take 117 registers per thread on sm_90 against int32's 102, two programs per SM
    either way; an H200 ran both alike (91.2% / 93.5% of copy against 91.1% / 93.4%, H200)."""
    pad_m = cdiv(M, config.block_m) * config.block_m - 1
    pad_n = cdiv(N, config.block_n) * config.block_n - 1
    top = max(pad_m * stride_xm + pad_n * stride_xn, pad_m * N + pad_n, pad_n * M + pad_m)
    return top >= 2**31


def uses_hw_cvt(device) -> bool:
    """Whether ``launch`` converts with the hardware's instruction by default on ``device``: on CUDA
    GPUs that have it; never in the interpreter (inline PTX cannot run there)."""
    device = torch.device(device)
    return not _INTERPRETED and device.type == "cuda" and has_hw_cvt(device.index)


# One int32 per call for the atomic amax, each 0 until its kernel runs: slots are handed out of zeroed
# pools, one pool per (device, stream) so that a pool's zeroing is ordered before every kernel that
# uses its slots, and a slot is never handed out twice (a returned amax stays valid; a pool's memory
# lives as long as any of its slots is referenced).
AMAX_POOL = 4096
_amax_pools: dict = {}


def amax_slot(device) -> torch.Tensor:
    """A fresh int32 holding 0 on ``device``, ordered before the current stream's later work (one fill
    kernel per AMAX_POOL slots). Not for CUDA graph capture: a replay would reuse the slot unzeroed."""
    device = torch.device(device)
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (device, stream)
    pool = _amax_pools.get(key)
    if pool is None or pool[1] == AMAX_POOL:
        pool = _amax_pools[key] = [torch.zeros(4 * AMAX_POOL, dtype=torch.int32, device=device), 0]
    slot = pool[0][4 * pool[1]]  # 16 bytes apart: every slot has the pointer alignment of the first
    pool[1] += 1
    return slot


_scratch_by_device: dict = {}


def _scratch(device) -> torch.Tensor:
    # A 4-byte placeholder for the scale pointer when the scale is a float and there is no amax buffer;
    # the kernel never reads it.
    t = _scratch_by_device.get(device)
    if t is None:
        t = _scratch_by_device[device] = torch.empty(1, dtype=torch.int32, device=device)
    return t


def num_programs(M: int, N: int, config: TileConfig) -> int:
    return transpose_grid(M, N, config.block_m, config.block_n, config.group_m).programs


@triton.jit(do_not_specialize=["n"])
def amax_finalize_kernel(partials_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Each program: the integer max of its BLOCK of the ``n`` int32 partials (bits of non-negative
    floats) into out_ptr[program]."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + pid, tl.max(tl.load(partials_ptr + offs, mask=offs < n, other=0), axis=0))


FINALIZE_BLOCK = 16384  # partials per program (32 per thread on 16 warps): one program up to 16384


def finalize_amax(partials: torch.Tensor) -> torch.Tensor:
    """max|x| as a 0-d fp32 tensor from the per-program partials (bits of non-negative floats as int32:
    their integer max is the float max, NaN included). One partial needs no reduction kernel; more go
    through ``amax_finalize_kernel``, one program per FINALIZE_BLOCK partials, again on its results
    until one is left (a torch ``amax`` took ~5 us of an H200 for 14k partials). One compiled kernel
    serves every count."""
    top, n = partials, partials.numel()
    while n > 1:
        programs = triton.cdiv(n, FINALIZE_BLOCK)
        out = torch.empty(programs, dtype=torch.int32, device=partials.device)
        amax_finalize_kernel[(programs,)](top, out, n, BLOCK=FINALIZE_BLOCK, num_warps=16)
        top, n = out, programs
    return top.view(torch.float32)[0]


def launches_compiled() -> int:
    """How many classes of the cast kernel the launch path holds (for tests)."""
    return len(launcher.compiled_classes("cast"))


_TRITON_DTYPE = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def compile_for_target(
    x_dtype,
    dtype=torch.float8_e4m3fn,
    *,
    config: TileConfig,
    arch: int = 90,
    scale_from_ptr: bool = True,
    transpose: bool = True,
    amax: bool = True,
    hw_cvt: bool = True,
    t_words: bool = True,
    off64: bool = False,
    amax_atomic: bool = True,
):
    """Compile the kernel ahead of time for ``sm_<arch>`` without a GPU, with the common specialization of
    a contiguous input (i32 sizes divisible by 16, unit inner stride), in a process without the
    interpreter. ``hw_cvt`` picks the conversion and ``t_words`` the word stores of y_t (as ``launch``
    picks them for such an input). Returns triton's compiled kernel: ``asm["ptx"]`` is what the GPU
    runs, ``metadata.shared`` its shared memory."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if _INTERPRETED:
        # TRITON_INTERPRET=1 also turns triton's own jit helpers (tl.max's combine function) into
        # interpreter wrappers, which the compiler cannot lower.
        raise RuntimeError("compile_for_target needs a process where TRITON_INTERPRET is not set")
    fn = cast_transpose_kernel
    pointers = {"x_ptr": "*" + _TRITON_DTYPE[x_dtype], "y_ptr": "*u8", "yt_ptr": "*i32" if t_words else "*u8",
                "amax_ptr": "*i32", "scale_ptr": "*fp32"}  # fmt: skip
    ints = ["M", "N", "stride_xm", "grid_m", "grid_n"]
    bias, man, fmax_bits = FORMATS[dtype]
    constexprs = {"stride_xn": 1, "BIAS": bias, "MAN": man, "FMAX_BITS": fmax_bits,
                  "SCALE_FROM_PTR": scale_from_ptr, "STORE_T": transpose, "WITH_AMAX": amax,
                  "HW_CVT": hw_cvt, "T_WORDS": t_words, "OFF64": off64, "AMAX_ATOMIC": amax_atomic,
                  "BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "GROUP_M": config.group_m}  # fmt: skip
    signature = pointers | {"scale_value": "fp32"} | dict.fromkeys(ints, "i32") | dict.fromkeys(constexprs, "constexpr")
    names = fn.arg_names
    divisible = [*pointers, "M", "N", "stride_xm"]
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in divisible}
    source = ASTSource(fn=fn, signature={n: signature[n] for n in names}, constexprs=constexprs, attrs=attrs)
    options = {"num_warps": config.num_warps} | ({"maxnreg": config.maxnreg} if config.maxnreg else {})
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)
