"""Triton tile transposes with the common indexing pitfalls, one per kernel, beside the right one.

Each public function is a `tileflip check` target ``f(x, out)`` (``tileflip check
tests/wrong/triton_wrong.py:leading_dim``). The kernels use a 2-D grid of BM x BN tiles,
``program_id(0)`` along M and ``program_id(1)`` along N, and differ from ``right`` in one place only,
the one named in their docstring. Tiles are 64x64: at 1024x1024 that is 256 programs, a fraction of a
second in the interpreter, which keeps the ``--square-only`` runs cheap.

On a GPU the integer arguments are not specialized (``do_not_specialize``): each kernel compiles once,
not once per class of shapes, which keeps a check of them on the device short.
"""

import triton
import triton.language as tl

TILE = 64


@triton.jit(do_not_specialize=["M", "N", "sxm", "sxn"])
def _right_kernel(x, out, M, N, sxm, sxn, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    in_mask = (rm[:, None] < M) & (rn[None, :] < N)
    tile = tl.load(x + rm[:, None] * sxm + rn[None, :] * sxn, mask=in_mask)
    out_mask = (rn[:, None] < N) & (rm[None, :] < M)
    tl.store(out + rn[:, None] * M + rm[None, :], tl.trans(tile), mask=out_mask)


@triton.jit(do_not_specialize=["M", "N", "sxm", "sxn"])
def _leading_dim_kernel(x, out, M, N, sxm, sxn, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    in_mask = (rm[:, None] < M) & (rn[None, :] < N)
    tile = tl.load(x + rm[:, None] * sxm + rn[None, :] * sxn, mask=in_mask)
    out_mask = (rn[:, None] < N) & (rm[None, :] < M)
    tl.store(out + rn[:, None] * N + rm[None, :], tl.trans(tile), mask=out_mask)


@triton.jit(do_not_specialize=["M", "N", "sxm", "sxn"])
def _swapped_bounds_kernel(x, out, M, N, sxm, sxn, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    in_mask = (rm[:, None] < N) & (rn[None, :] < M)
    tile = tl.load(x + rm[:, None] * sxm + rn[None, :] * sxn, mask=in_mask)
    out_mask = (rn[:, None] < M) & (rm[None, :] < N)
    tl.store(out + rn[:, None] * M + rm[None, :], tl.trans(tile), mask=out_mask)


@triton.jit(do_not_specialize=["M", "N", "sxm", "sxn"])
def _reused_mask_kernel(x, out, M, N, sxm, sxn, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    in_mask = (rm[:, None] < M) & (rn[None, :] < N)
    tile = tl.load(x + rm[:, None] * sxm + rn[None, :] * sxn, mask=in_mask)
    tl.store(out + rn[:, None] * M + rm[None, :], tl.trans(tile), mask=in_mask)


@triton.jit(do_not_specialize=["M", "N", "sxm", "sxn"])
def _no_store_mask_kernel(x, out, M, N, sxm, sxn, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    in_mask = (rm[:, None] < M) & (rn[None, :] < N)
    tile = tl.load(x + rm[:, None] * sxm + rn[None, :] * sxn, mask=in_mask)
    tl.store(out + rn[:, None] * M + rm[None, :], tl.trans(tile))


@triton.jit(do_not_specialize=["M", "N", "sxm", "sxn"])
def _untransposed_tile_kernel(x, out, M, N, sxm, sxn, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    in_mask = (rm[:, None] < M) & (rn[None, :] < N)
    tile = tl.load(x + rm[:, None] * sxm + rn[None, :] * sxn, mask=in_mask)
    out_mask = (rn[:, None] < N) & (rm[None, :] < M)
    tl.store(out + rn[:, None] * M + rm[None, :], tile, mask=out_mask)


@triton.jit(do_not_specialize=["M", "N", "sxm", "sxn"])
def _tiles_in_place_kernel(x, out, M, N, sxm, sxn, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    in_mask = (rm[:, None] < M) & (rn[None, :] < N)
    tile = tl.load(x + rm[:, None] * sxm + rn[None, :] * sxn, mask=in_mask)
    out_mask = (rm[:, None] < N) & (rn[None, :] < M)
    tl.store(out + rm[:, None] * M + rn[None, :], tl.trans(tile), mask=out_mask)


def _launch(kernel, x, out, grid=None):
    M, N = x.shape
    grid = grid or (triton.cdiv(M, TILE), triton.cdiv(N, TILE))
    kernel[grid](x, out, M, N, x.stride(0), x.stride(1), BM=TILE, BN=TILE)


def right(x, out):
    """The right kernel: input mask on the load, the transposed output mask on the store, row stride M."""
    _launch(_right_kernel, x, out)


def leading_dim(x, out):
    """Output row stride N instead of M: ``out + rn * N + rm`` (col*N+row)."""
    _launch(_leading_dim_kernel, x, out)


def swapped_bounds(x, out):
    """Bounds with M and N exchanged on both sides: rows tested against N, columns against M."""
    _launch(_swapped_bounds_kernel, x, out)


def reused_mask(x, out):
    """The store reuses the load's BM x BN mask (it compiles because BM == BN)."""
    _launch(_reused_mask_kernel, x, out)


def untransposed_tile(x, out):
    """The tile is stored at the transposed offsets without ``tl.trans`` (it compiles because BM == BN)."""
    _launch(_untransposed_tile_kernel, x, out)


def no_store_mask(x, out):
    """The store has no mask: tail tiles write past the output."""
    _launch(_no_store_mask_kernel, x, out)


def tiles_in_place(x, out):
    """Each tile transposed (``tl.trans``) but stored at its own tile position, output rows ``rm`` and columns
    ``rn``, instead of rows ``rn`` and columns ``rm`` (it compiles because BM == BN)."""
    _launch(_tiles_in_place_kernel, x, out)


def single_tile(x, out):
    """Right kernel, but launched on a grid of one program: only the first TILE x TILE block is transposed."""
    _launch(_right_kernel, x, out, grid=(1, 1))


def square_only(x, out):
    """Right kernel, but the grid is cdiv(M, TILE) in both directions, as if every matrix were square."""
    M, _ = x.shape
    _launch(_right_kernel, x, out, grid=(triton.cdiv(M, TILE), triton.cdiv(M, TILE)))
