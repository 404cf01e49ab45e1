"""One-thread-per-element transposes, CUDA style, with the common indexing pitfalls, beside the right ones.

Each program is one CUDA block of 16x16 threads: ``program_id(0)`` is blockIdx.x (along N, the
columns), ``program_id(1)`` is blockIdx.y (along M), and the 16x16 ``tl.arange`` broadcast stands for
threadIdx, so every slot of the block is one thread moving one element, exactly as a naive CUDA
transpose kernel launched with ``dim3 block(16, 16)``. Writing a block as one program keeps
the interpreter at one step per block rather than per thread.

The ``smem_*`` kernels are the shared-memory version of the same block: each thread reads one
element into the block's tile, then writes one element of the transposed tile with the roles of
threadIdx.x and threadIdx.y exchanged; its pitfall is the read guard reused for the write.

Every public function is a `tileflip check` target ``f(x, out)``, except ``naive_right_alloc``,
which returns its output (the ``f(x) -> y`` form).

On a GPU the integer arguments are not specialized (``do_not_specialize``): each kernel compiles once,
not once per class of shapes, which keeps a check of them on the device short.
"""

import torch
import triton
import triton.language as tl

BLOCK = 16


@triton.jit(do_not_specialize=["M", "N", "sxm", "sxn"])
def _naive_right_kernel(x, out, M, N, sxm, sxn, B: tl.constexpr):
    col = tl.program_id(0) * B + tl.arange(0, B)[None, :]
    row = tl.program_id(1) * B + tl.arange(0, B)[:, None]
    inside = (row < M) & (col < N)
    value = tl.load(x + row * sxm + col * sxn, mask=inside)
    tl.store(out + col * M + row, value, mask=inside)


@triton.jit(do_not_specialize=["M", "N", "sxm", "sxn"])
def _naive_leading_dim_kernel(x, out, M, N, sxm, sxn, B: tl.constexpr):
    col = tl.program_id(0) * B + tl.arange(0, B)[None, :]
    row = tl.program_id(1) * B + tl.arange(0, B)[:, None]
    inside = (row < M) & (col < N)
    value = tl.load(x + row * sxm + col * sxn, mask=inside)
    tl.store(out + col * N + row, value, mask=inside)


@triton.jit(do_not_specialize=["M", "N", "sxm", "sxn"])
def _naive_swapped_bounds_kernel(x, out, M, N, sxm, sxn, B: tl.constexpr):
    col = tl.program_id(0) * B + tl.arange(0, B)[None, :]
    row = tl.program_id(1) * B + tl.arange(0, B)[:, None]
    inside = (row < N) & (col < M)
    value = tl.load(x + row * sxm + col * sxn, mask=inside)
    tl.store(out + col * M + row, value, mask=inside)


@triton.jit(do_not_specialize=["M", "N", "sxm", "sxn"])
def _naive_no_store_mask_kernel(x, out, M, N, sxm, sxn, B: tl.constexpr):
    col = tl.program_id(0) * B + tl.arange(0, B)[None, :]
    row = tl.program_id(1) * B + tl.arange(0, B)[:, None]
    inside = (row < M) & (col < N)
    value = tl.load(x + row * sxm + col * sxn, mask=inside)
    tl.store(out + col * M + row, value)


@triton.jit(do_not_specialize=["M", "N", "sxm", "sxn"])
def _naive_copy_kernel(x, out, M, N, sxm, sxn, B: tl.constexpr):
    col = tl.program_id(0) * B + tl.arange(0, B)[None, :]
    row = tl.program_id(1) * B + tl.arange(0, B)[:, None]
    inside = (row < M) & (col < N)
    value = tl.load(x + row * sxm + col * sxn, mask=inside)
    tl.store(out + row * N + col, value, mask=inside)


@triton.jit(do_not_specialize=["numel"])
def _flat_copy_kernel(x, out, numel, B: tl.constexpr):
    offs = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(out + offs, tl.load(x + offs, mask=offs < numel), mask=offs < numel)


@triton.jit(do_not_specialize=["M", "N", "sxm", "sxn"])
def _smem_right_kernel(x, out, M, N, sxm, sxn, B: tl.constexpr):
    tx = tl.arange(0, B)[None, :]
    ty = tl.arange(0, B)[:, None]
    row = tl.program_id(1) * B + ty
    col = tl.program_id(0) * B + tx
    tile = tl.load(x + row * sxm + col * sxn, mask=(row < M) & (col < N))
    # Write phase: thread (ty, tx) writes out[bx*B + ty, by*B + tx] = tile[tx][ty].
    out_row = tl.program_id(0) * B + ty
    out_col = tl.program_id(1) * B + tx
    tl.store(out + out_row * M + out_col, tl.trans(tile), mask=(out_row < N) & (out_col < M))


@triton.jit(do_not_specialize=["M", "N", "sxm", "sxn"])
def _smem_reused_mask_kernel(x, out, M, N, sxm, sxn, B: tl.constexpr):
    tx = tl.arange(0, B)[None, :]
    ty = tl.arange(0, B)[:, None]
    row = tl.program_id(1) * B + ty
    col = tl.program_id(0) * B + tx
    read_guard = (row < M) & (col < N)
    tile = tl.load(x + row * sxm + col * sxn, mask=read_guard)
    out_row = tl.program_id(0) * B + ty
    out_col = tl.program_id(1) * B + tx
    tl.store(out + out_row * M + out_col, tl.trans(tile), mask=read_guard)


def _launch(kernel, x, out, grid=None):
    M, N = x.shape
    grid = grid or (triton.cdiv(N, BLOCK), triton.cdiv(M, BLOCK))
    kernel[grid](x, out, M, N, x.stride(0), x.stride(1), B=BLOCK)


def naive_right(x, out):
    """The right kernel: out[col*M + row] = x[row, col] when row < M && col < N."""
    _launch(_naive_right_kernel, x, out)


def naive_right_alloc(x):
    """The same, allocating and returning its output: the f(x) -> y form."""
    out = torch.empty((x.shape[1], x.shape[0]), dtype=x.dtype, device=x.device)
    naive_right(x, out)
    return out


def naive_leading_dim(x, out):
    """out[col*N + row]: the output's leading dimension taken from the input."""
    _launch(_naive_leading_dim_kernel, x, out)


def naive_swapped_bounds(x, out):
    """The bounds test row < N && col < M."""
    _launch(_naive_swapped_bounds_kernel, x, out)


def naive_no_store_mask(x, out):
    """The load is guarded, the store is not: threads past the matrix still write."""
    _launch(_naive_no_store_mask_kernel, x, out)


def naive_square_only(x, out):
    """Right kernel, but the grid is cdiv(M, 16) blocks in both directions, as if every matrix were square."""
    M, _ = x.shape
    _launch(_naive_right_kernel, x, out, grid=(triton.cdiv(M, BLOCK), triton.cdiv(M, BLOCK)))


def naive_copy(x, out):
    """A copy kernel in the transpose's place: out[row*N + col] = x[row, col], x's elements in x's order."""
    _launch(_naive_copy_kernel, x, out)


def flat_copy(x, out):
    """A flat copy of M*N elements from x's pointer, one thread each: x's memory as it lies, strides unread."""
    numel = x.shape[0] * x.shape[1]
    _flat_copy_kernel[(triton.cdiv(numel, BLOCK * BLOCK),)](x, out, numel, B=BLOCK * BLOCK)


def smem_right(x, out):
    """Shared-memory block: read guard row<M && col<N, write guard on the exchanged coordinates."""
    _launch(_smem_right_kernel, x, out)


def smem_reused_mask(x, out):
    """Shared-memory block whose write phase reuses the read guard (the input mask reused for the store)."""
    _launch(_smem_reused_mask_kernel, x, out)
