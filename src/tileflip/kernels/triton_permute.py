"""Triton kernels for N-D permutes, one per plan kind (``tileflip.plan.plan_permute``), with their launcher.

All three are fixed-rank in the sense that matters: the dimensions outside the tile come in as tuples
of sizes and strides whose length is a compile-time constant (at most 7 after merging), walked with
``tl.static_range``, so no kernel source is generated. Dimension tuples are ordered innermost first.
Offsets are int64 throughout.
"""

from __future__ import annotations

import triton
import triton.language as tl

from tileflip import tuning
from tileflip.dtypes import as_uint


@triton.jit
def _offset(index, sizes, strides, NDIM: tl.constexpr):
    """Decompose a linear index (innermost-first dims) into an input offset."""
    off = index * 0
    for i in tl.static_range(NDIM):
        off += (index % sizes[i]) * strides[i]
        index = index // sizes[i]
    return off


@triton.jit
def permute_rows_kernel(
    x_ptr, out_ptr, R, L, grid_l, outer_sizes, outer_in_strides,
    NOUTER: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_L: tl.constexpr,
):  # fmt: skip
    """Inner dimension kept: output row r (length L, contiguous) is an input row at a gathered offset."""
    pid = tl.program_id(0)
    pid_r = pid // grid_l
    pid_l = pid % grid_l
    r = pid_r.to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = pid_l.to(tl.int64) * BLOCK_L + tl.arange(0, BLOCK_L)
    row_in = _offset(r, outer_sizes, outer_in_strides, NOUTER)
    mask = (r[:, None] < R) & (c[None, :] < L)
    v = tl.load(x_ptr + row_in[:, None] + c[None, :], mask=mask)
    tl.store(out_ptr + r[:, None] * L + c[None, :], v, mask=mask)


@triton.jit
def permute_tiles_kernel(
    x_ptr, out_ptr, size_b, size_a, stride_b, stride_a, out_stride_a, grid_b, grid_a,
    batch_sizes, batch_in_strides, batch_out_strides,
    NBATCH: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_A: tl.constexpr,
):  # fmt: skip
    """Inner dimension moved: a BLOCK_B x BLOCK_A tile, loaded along a (the input's fastest dimension)
    and stored transposed along b (the output's fastest), one batch element per group of programs."""
    pid = tl.program_id(0)
    tiles = grid_b * grid_a
    batch = (pid // tiles).to(tl.int64)
    t = pid % tiles
    pid_b = t // grid_a
    pid_a = t % grid_a
    base_in = _offset(batch, batch_sizes, batch_in_strides, NBATCH)
    base_out = _offset(batch, batch_sizes, batch_out_strides, NBATCH)
    rb = pid_b.to(tl.int64) * BLOCK_B + tl.arange(0, BLOCK_B)
    ra = pid_a.to(tl.int64) * BLOCK_A + tl.arange(0, BLOCK_A)
    in_mask = (rb[:, None] < size_b) & (ra[None, :] < size_a)
    tile = tl.load(x_ptr + base_in + rb[:, None] * stride_b + ra[None, :] * stride_a, mask=in_mask)
    out_mask = (ra[:, None] < size_a) & (rb[None, :] < size_b)
    tl.store(out_ptr + base_out + ra[:, None] * out_stride_a + rb[None, :], tl.trans(tile), mask=out_mask)


@triton.jit
def permute_general_kernel(x_ptr, out_ptr, numel, sizes, in_strides, NDIM: tl.constexpr, BLOCK: tl.constexpr):
    """Fallback: each output element (contiguous) gathered from its input offset."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    v = tl.load(x_ptr + _offset(offs, sizes, in_strides, NDIM), mask=mask)
    tl.store(out_ptr + offs, v, mask=mask)


def launch(x, out, plan) -> None:
    """Run ``plan`` (kind rows, copy, tiles or general) from ``x`` into the contiguous ``out``."""
    xi, oi = as_uint(x), as_uint(out)
    sizes, strides = plan.sizes, plan.in_strides
    go = tuning.permute_launch(plan, x.element_size())
    if plan.kind in ("rows", "copy"):
        outer = tuple(reversed(sizes[:-1]))
        outer_strides = tuple(reversed(strides[:-1]))
        permute_rows_kernel[(go.programs,)](
            xi, oi, out.numel() // sizes[-1], sizes[-1], go.grid[1], outer, outer_strides, NOUTER=len(outer),
            BLOCK_R=go.blocks[0], BLOCK_L=go.blocks[1], num_warps=go.num_warps,
        )  # fmt: skip
    elif plan.kind == "tiles":
        a, b = plan.a, len(sizes) - 1
        out_strides = plan.out_strides
        batch = tuple(reversed(plan.batch))
        permute_tiles_kernel[(go.programs,)](
            xi, oi, sizes[b], sizes[a], strides[b], strides[a], out_strides[a], go.grid[0], go.grid[1],
            tuple(sizes[d] for d in batch), tuple(strides[d] for d in batch), tuple(out_strides[d] for d in batch),
            NBATCH=len(batch), BLOCK_B=go.blocks[0], BLOCK_A=go.blocks[1], num_warps=go.num_warps,
        )  # fmt: skip
    else:
        permute_general_kernel[(go.programs,)](
            xi, oi, out.numel(), tuple(reversed(sizes)), tuple(reversed(strides)), NDIM=len(sizes),
            BLOCK=go.blocks[0], num_warps=go.num_warps,
        )  # fmt: skip
