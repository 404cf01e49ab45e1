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

from tileflip.plan import transpose_grid


# grid_n only decodes the program id: its divisibility buys nothing, and leaving it specialized would
# compile a new kernel whenever the number of column tiles happens to be 1 or a multiple of 16.
@triton.jit(do_not_specialize=["grid_n"])
def transpose_2d_kernel(
    x_ptr,
    out_ptr,
    M,
    N,
    stride_xm,
    stride_xn,
    stride_om,
    grid_n,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid = tl.program_id(0)
    pid_m = pid // grid_n
    pid_n = pid % grid_n
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
    return not isinstance(transpose_2d_kernel, triton.runtime.JITFunction)


def launch(x, out, config) -> None:
    """Transpose the 2-D integer view ``x`` (any strides) into the contiguous ``out`` (N x M).

    ``config`` is a ``tileflip.tuning.TileConfig``; the caller has checked every argument and
    handles empty tensors.
    """
    M, N = x.shape
    grid = transpose_grid(M, N, config.block_m, config.block_n)
    transpose_2d_kernel[grid.launch](
        x,
        out,
        M,
        N,
        x.stride(0),
        x.stride(1),
        out.stride(0),
        grid.grid_n,
        BLOCK_M=config.block_m,
        BLOCK_N=config.block_n,
        num_warps=config.num_warps,
    )


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
    names = ["x_ptr", "out_ptr", "M", "N", "stride_xm", "stride_xn", "stride_om", "grid_n", "BLOCK_M", "BLOCK_N"]
    signature = dict.fromkeys(names, "i32") | {"x_ptr": ptr, "out_ptr": ptr, "BLOCK_M": "constexpr", "BLOCK_N": "constexpr"}
    constexprs = {"BLOCK_M": config.block_m, "BLOCK_N": config.block_n}
    if unit_inner_stride:
        signature["stride_xn"] = "constexpr"
        constexprs["stride_xn"] = 1
    divisible = [names.index(n) for n in ("x_ptr", "out_ptr", "M", "N", "stride_xm", "stride_om")]
    attrs = {(i,): [["tt.divisibility", 16]] for i in divisible}
    source = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options={"num_warps": config.num_warps})
