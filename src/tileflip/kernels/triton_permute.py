"""Triton kernels for N-D permutes (``tileflip.plan.plan_permute``), with their launcher.

Two kernels. The tile kernel serves the plan kinds copy, rows and tiles: a BLOCK_B x BLOCK_A tile whose
axis A folds up to four of the input's fastest dimensions and axis B up to four of the output's fastest
into one linear index each, over a batch of up to six more (``tileflip.tuning.tile_launch`` picks them).
Row and column offsets are decoded once per row and column vector (int32 ``//`` and ``%`` by runtime
sizes) and broadcast into the 2-D pointer tile; the batch once per program. The general kernel gathers
each output element from its input offset (1-D gathers). Dimension tuples are ordered innermost first,
sizes and strides are runtime arguments (only ranks, blocks and vector widths are constexpr), and
memory offsets are int64.

Full tiles take an unmasked path on which the planner's vector widths (``PermuteLaunch.vec``: powers of
two that divide every size and stride involved) are asserted with ``tl.multiple_of`` and
``tl.max_contiguous``, so loads and stores use up to 16-byte vectors even when sizes are not multiples
of 16 (Triton's own argument specialization only knows divisibility by 16); the last tile of each axis
is masked.
"""

from __future__ import annotations

import triton
import triton.language as tl

from tileflip import tuning
from tileflip.dtypes import as_uint


@triton.jit
def _decode(index, sizes, strides, N: tl.constexpr):
    """Offset of a linear index over N dimensions (innermost first); the outermost takes no ``%``."""
    off = (index * 0).to(tl.int64)
    for i in tl.static_range(N):
        if i < N - 1:
            off += (index % sizes[i]).to(tl.int64) * strides[i]
            index = index // sizes[i]
        else:
            off += index.to(tl.int64) * strides[i]
    return off


@triton.jit
def permute_tile_kernel(
    x_ptr, out_ptr, size_a, size_b, grid_a, tiles,
    a_sizes, a_in, a_out, b_sizes, b_in, b_out, n_sizes, n_in, n_out,
    NA: tl.constexpr, NB: tl.constexpr, NN: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_A: tl.constexpr,
    VEC_LOAD: tl.constexpr, VEC_STORE: tl.constexpr, KEPT: tl.constexpr, WIDE: tl.constexpr,
):  # fmt: skip
    """One BLOCK_B x BLOCK_A tile of one batch element: loaded along A, stored along A (KEPT: the output's
    fastest dimension is the input's) or transposed and stored along B."""
    pid = tl.program_id(0)
    batch = pid // tiles
    t = pid % tiles
    pid_b = t // grid_a
    pid_a = t % grid_a
    if WIDE:
        pid_a = pid_a.to(tl.int64)
        pid_b = pid_b.to(tl.int64)
    ra = pid_a * BLOCK_A + tl.arange(0, BLOCK_A)
    rb = pid_b * BLOCK_B + tl.arange(0, BLOCK_B)
    in_a = _decode(ra, a_sizes, a_in, NA)
    out_a = _decode(ra, a_sizes, a_out, NA)
    in_b = _decode(rb, b_sizes, b_in, NB) + _decode(batch, n_sizes, n_in, NN)
    out_b = _decode(rb, b_sizes, b_out, NB) + _decode(batch, n_sizes, n_out, NN)
    load_offs = in_b[:, None] + in_a[None, :]
    if KEPT:
        store_offs = out_b[:, None] + out_a[None, :]
    else:
        store_offs = out_a[:, None] + out_b[None, :]
    if ((pid_a + 1) * BLOCK_A <= size_a) & ((pid_b + 1) * BLOCK_B <= size_b):
        # A full tile: the planner's vector widths hold (runs of VEC elements starting at multiples of VEC).
        if VEC_LOAD > 1:
            load_offs = tl.max_contiguous(tl.multiple_of(load_offs, [VEC_LOAD, VEC_LOAD]), [1, VEC_LOAD])
        if VEC_STORE > 1:
            store_offs = tl.max_contiguous(tl.multiple_of(store_offs, [VEC_STORE, VEC_STORE]), [1, VEC_STORE])
        tile = tl.load(x_ptr + load_offs)
        if KEPT:
            tl.store(out_ptr + store_offs, tile)
        else:
            tl.store(out_ptr + store_offs, tl.trans(tile))
    else:
        mask = (rb[:, None] < size_b) & (ra[None, :] < size_a)
        tile = tl.load(x_ptr + load_offs, mask=mask)
        if KEPT:
            tl.store(out_ptr + store_offs, tile, mask=mask)
        else:
            out_mask = (ra[:, None] < size_a) & (rb[None, :] < size_b)
            tl.store(out_ptr + store_offs, tl.trans(tile), mask=out_mask)


@triton.jit
def permute_general_kernel(x_ptr, out_ptr, numel, sizes, in_strides, NDIM: tl.constexpr, BLOCK: tl.constexpr):
    """Fallback: each output element (contiguous) gathered from its input offset."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    v = tl.load(x_ptr + _decode(offs, sizes, in_strides, NDIM), mask=mask)
    tl.store(out_ptr + offs, v, mask=mask)


def _axis(dims, sizes, in_strides, out_strides):
    """Sizes, input strides and output strides of a group of dims, padded to one dimension of size 1."""
    if not dims:
        return (1,), (0,), (0,)
    return (tuple(sizes[d] for d in dims), tuple(in_strides[d] for d in dims), tuple(out_strides[d] for d in dims))


def tile_args(plan, go) -> tuple[tuple, dict]:
    """Positional arguments (after the two pointers) and constexprs of the tile kernel for a launch ``go``."""
    sizes, in_strides, out_strides = plan.sizes, plan.in_strides, plan.out_strides
    a = _axis(go.a_dims, sizes, in_strides, out_strides)
    b = _axis(go.b_dims, sizes, in_strides, out_strides)
    n = _axis(go.batch_dims, sizes, in_strides, out_strides)
    size_a = tuning._product(a[0])
    size_b = tuning._product(b[0])
    args = (size_a, size_b, go.grid[1], go.grid[0] * go.grid[1], *a, *b, *n)
    constexprs = dict(
        NA=len(a[0]), NB=len(b[0]), NN=len(n[0]), BLOCK_B=go.blocks[0], BLOCK_A=go.blocks[1],
        VEC_LOAD=go.vec[0], VEC_STORE=go.vec[1], KEPT=go.kept, WIDE=go.wide,
    )  # fmt: skip
    return args, constexprs


def launch(x, out, plan) -> None:
    """Run ``plan`` (kind rows, copy, tiles or general) from ``x`` into the contiguous ``out``."""
    xi, oi = as_uint(x), as_uint(out)
    go = tuning.permute_launch(plan, x.element_size())
    if plan.kind == "general":
        permute_general_kernel[(go.programs,)](
            xi, oi, out.numel(), tuple(reversed(plan.sizes)), tuple(reversed(plan.in_strides)),
            NDIM=len(plan.sizes), BLOCK=go.blocks[0], num_warps=go.num_warps,
        )  # fmt: skip
        return
    args, constexprs = tile_args(plan, go)
    permute_tile_kernel[(go.programs,)](xi, oi, *args, **constexprs, num_warps=go.num_warps)
