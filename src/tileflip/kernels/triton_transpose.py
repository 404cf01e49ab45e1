"""The Triton 2-D transpose: kernel and launcher.

The kernel is the seed lesson's tile transpose made production-ready:

* shapes and strides are runtime arguments, not ``constexpr``, so a new shape does not compile a new
  kernel. Triton still specializes integer arguments (see ``tileflip.plan.specialization_class``):
  an argument equal to 1 becomes a constant, each argument is typed i32 or i64 by range, and one
  divisible by 16 carries that hint. We keep that bounded set on purpose: ``stride_xn == 1`` is what
  lets the compiler vectorize the row loads, and divisibility by 16 of ``N``, ``M`` and the strides
  is what lets masked accesses stay vectorized. A class of shapes is therefore the tuple of those
  keys over (M, N, stride_xm, stride_xn, stride_om), and 20 new shapes of one class reuse one
  compiled kernel. ``grid_n`` (tiles per row, used only to decode the program id) is not specialized.
* offsets are computed in int64 (the program's tile origin is cast before multiplying), so tensors
  past 2**31 elements index correctly;
* the grid is 1-D (``tileflip.plan.transpose_grid``): gridDim.y and gridDim.z stay 1 for any shape.
"""

from __future__ import annotations

import triton
import triton.language as tl

from tileflip.dtypes import as_uint
from tileflip.kernels.triton_common import current_stream, is_interpreted_kernel, spec_key
from tileflip.plan import cdiv


# grid_m and grid_n only decode the program id: their divisibility buys nothing, and leaving them
# specialized would compile a new kernel whenever a tile count happens to be 1 or a multiple of 16.
@triton.jit(do_not_specialize=["grid_m", "grid_n"])
def transpose_2d_kernel(
    x_ptr,
    out_ptr,
    M,
    N,
    stride_xm,
    stride_xn,
    stride_om,
    grid_m,
    grid_n,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    # Program order: tileflip.plan.TransposeGrid.tile_of is the same decoding, for the CPU tools.
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
    # int64 before any multiply: pid_m * BLOCK_M * stride_xm passes 2**31 on large tensors.
    rm = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    in_ptrs = x_ptr + rm[:, None] * stride_xm + rn[None, :] * stride_xn
    in_mask = (rm[:, None] < M) & (rn[None, :] < N)
    tile = tl.load(in_ptrs, mask=in_mask)
    # The output tile is BLOCK_N x BLOCK_M: its pointers and its mask are built from swapped offsets,
    # never reused from the input side.
    out_ptrs = out_ptr + rn[:, None] * stride_om + rm[None, :]
    out_mask = (rn[:, None] < N) & (rm[None, :] < M)
    tl.store(out_ptrs, tl.trans(tile), mask=out_mask)


def is_interpreted() -> bool:
    """True when TRITON_INTERPRET=1 was set before this module was imported (the kernel then runs on CPU)."""
    return _INTERPRETED


_INTERPRETED = is_interpreted_kernel(transpose_2d_kernel)


# (device, element size, config, keys of M, N, stride_xm, stride_xn, stride_om, pointer alignments)
# -> triton's compiled kernel. Once a class is compiled, its launches skip triton's binder and
# cache lookup (about 10 us of Python a call) and call the compiled launcher directly.
_compiled: dict = {}


def launch(x, out, config) -> None:
    """Transpose the 2-D integer view ``x`` (any strides) into the contiguous ``out`` (N x M).

    ``config`` is a ``tileflip.tuning.TileConfig``; the caller has checked every argument and
    handles empty tensors. ``x`` and ``out`` may be given in their own dtype on the fast path: the
    compiled kernel only takes their addresses.
    """
    M, N = x.shape
    sxm, sxn = x.stride()
    som = out.stride(0)
    grid_m = cdiv(M, config.block_m)
    grid_n = cdiv(N, config.block_n)
    sizes = (M, N, sxm, sxn, som, grid_m, grid_n, config.block_m, config.block_n, config.group_m)
    if _INTERPRETED:
        transpose_2d_kernel[(grid_m * grid_n,)](as_uint(x), as_uint(out), *sizes, num_warps=config.num_warps)
        return
    device = x.device.index
    key = (device, x.element_size(), config, spec_key(M), spec_key(N), spec_key(sxm), spec_key(sxn), spec_key(som),
           x.data_ptr() % 16 == 0, out.data_ptr() % 16 == 0)  # fmt: skip
    kernel = _compiled.get(key)
    if kernel is None:
        # Compiled on the unsigned-integer views: one kernel per element size serves every dtype.
        _compiled[key] = transpose_2d_kernel[(grid_m * grid_n,)](
            as_uint(x), as_uint(out), *sizes, num_warps=config.num_warps
        )
        return
    kernel.run(grid_m * grid_n, 1, 1, current_stream(device), kernel.function, kernel.packed_metadata,
               None, None, None, x, out, *sizes)  # fmt: skip


def launches_compiled() -> int:
    """How many kernel classes the fast path holds (for tests)."""
    return len(_compiled)


_UINT_SIG = {1: "*u8", 2: "*u16", 4: "*u32", 8: "*u64"}


def compile_for_target(element_size: int, config, *, arch: int = 90, unit_inner_stride: bool = True):
    """Compile the kernel ahead of time for ``sm_<arch>`` without a GPU (for tests and the analyzer).

    Sizes and strides are given the common specialization: i32, divisible by 16, and the input's inner
    stride equal to 1 when ``unit_inner_stride``. Returns triton's compiled kernel, whose ``metadata``
    holds the shared memory and ``asm`` the TTGIR, PTX and cubin.
    """
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    fn = transpose_2d_kernel if isinstance(transpose_2d_kernel, JITFunction) else JITFunction(transpose_2d_kernel.fn)
    ptr = _UINT_SIG[element_size]
    names = ["x_ptr", "out_ptr", "M", "N", "stride_xm", "stride_xn", "stride_om", "grid_m", "grid_n"]
    signature = dict.fromkeys(names, "i32") | {"x_ptr": ptr, "out_ptr": ptr}
    constexprs = {"BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "GROUP_M": config.group_m}
    signature |= dict.fromkeys(constexprs, "constexpr")
    if unit_inner_stride:
        signature["stride_xn"] = "constexpr"
        constexprs["stride_xn"] = 1
    divisible = [names.index(n) for n in ("x_ptr", "out_ptr", "M", "N", "stride_xm", "stride_om")]
    attrs = {(i,): [["tt.divisibility", 16]] for i in divisible}
    source = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options={"num_warps": config.num_warps})
