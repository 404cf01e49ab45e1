"""Segment packing for the distributed operations: Triton kernels, their launchers and torch references.

``launch`` converts between "interleaved" rows (each row cut into column segments, segment k for peer
k; rows addressed on two levels, ``(r // inner_rows) * stride_outer + (r % inner_rows) * stride_inner``)
and "blocked" ones (segment k of every row back to back, the blocks in peer order), in one pass either
way. Segments may be uneven; their starts and widths travel as tuple arguments in units of ``VEC``
elements, so every access vectorizes. ``launch_rows`` copies a rank's own block, strided on both sides,
straight to its place in the result. Design: ``docs/design.md`` (Distributed).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from tileflip.kernels.dtypes import as_uint
from tileflip.plan import cdiv, loop_rounds


@dataclass(frozen=True)
class Segments:
    """Where the segments of the interleaved side lie (all counts in elements)."""

    rows: int
    inner_rows: int
    stride_outer: int
    stride_inner: int
    starts: tuple
    widths: tuple

    @property
    def numel(self) -> int:
        return self.rows * sum(self.widths)


# The integer arguments are scaled by VEC or only decode the program id: Triton's specialization on 1 and
# on divisibility by 16 would multiply compiled variants without helping (the hints come from VEC).
# do_not_specialize does not reach the elements of a tuple argument (Triton 3.6), so those travel
# encoded as 16 * v + 3, which is never 1 nor a multiple of 16 (see _opaque).
@triton.jit(do_not_specialize=["rows", "inner_rows", "stride_outer", "stride_inner", "tiles_w"])
def segments_kernel(
    blk_ptr, itl_ptr, rows, inner_rows, stride_outer, stride_inner, tiles_w, starts, widths,
    NSEG: tl.constexpr, VEC: tl.constexpr, TO_BLOCKS: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_W: tl.constexpr,
    LOOP: tl.constexpr = 0,
):  # fmt: skip
    if LOOP:
        # Fewer programs than tiles (``programs`` of ``launch``): program p moves tiles p, p + G, ..., in
        # LOOP rounds (as in the 2-D transpose kernel's loop).
        for i in range(LOOP):
            t = tl.program_id(0).to(tl.int64) + i * tl.num_programs(0)
            if t < NSEG * tl.cdiv(rows, BLOCK_R) * tiles_w:
                _segments_tile(blk_ptr, itl_ptr, t, rows, inner_rows, stride_outer, stride_inner, tiles_w, starts,
                               widths, NSEG, VEC, TO_BLOCKS, BLOCK_R, BLOCK_W)  # fmt: skip
    else:
        _segments_tile(blk_ptr, itl_ptr, tl.program_id(0).to(tl.int64), rows, inner_rows, stride_outer, stride_inner,
                       tiles_w, starts, widths, NSEG, VEC, TO_BLOCKS, BLOCK_R, BLOCK_W)  # fmt: skip


@triton.jit
def _segments_tile(
    blk_ptr, itl_ptr, pid, rows, inner_rows, stride_outer, stride_inner, tiles_w, starts, widths,
    NSEG: tl.constexpr, VEC: tl.constexpr, TO_BLOCKS: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_W: tl.constexpr,
):  # fmt: skip
    per_segment = tl.cdiv(rows, BLOCK_R) * tiles_w
    k = pid // per_segment
    t = pid % per_segment
    pid_r = t // tiles_w
    pid_w = t % tiles_w
    # The program's segment selects its start and width; the widths of the segments before it give
    # where its block starts. A handful of scalar selects per program, unrolled over the segments.
    start = k * 0
    width = k * 0
    before = k * 0
    for j in tl.static_range(NSEG):
        start = tl.where(k == j, starts[j] >> 4, start)
        width = tl.where(k == j, widths[j] >> 4, width)
        before = tl.where(k > j, before + (widths[j] >> 4), before)
    width = width * VEC
    r = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    w = pid_w * BLOCK_W + tl.arange(0, BLOCK_W)
    # Programs past a narrower segment's width are fully masked: they touch no memory.
    mask = (r[:, None] < rows) & (w[None, :] < width)
    blk = blk_ptr + before * VEC * rows + r[:, None] * width + w[None, :]
    # int64 operands first: a stride in VEC units fits in i32 when the stride in elements may not.
    row = (r // inner_rows) * stride_outer * VEC + (r % inner_rows) * stride_inner * VEC
    itl = itl_ptr + row[:, None] + start * VEC + w[None, :]
    if TO_BLOCKS:
        tl.store(blk, tl.load(itl, mask=mask), mask=mask)
    else:
        tl.store(itl, tl.load(blk, mask=mask), mask=mask)


def _opaque(values) -> tuple:
    """Tuple elements that Triton specializes alike whatever their values (decoded with ``>> 4``)."""
    return tuple(16 * v + 3 for v in values)


def vector_width(element_size: int, values, pointers) -> int:
    """The widest VEC (a power of two, VEC * element_size <= 16) dividing every value and address."""
    vec = 16 // element_size
    while vec > 1 and (any(v % vec for v in values) or any(p % (vec * element_size) for p in pointers)):
        vec //= 2
    return vec


def _blocks(width: int, element_size: int) -> tuple[int, int, int]:
    """(BLOCK_R, BLOCK_W, warps): 16 KiB tiles, rows as long as the run allows (up to the whole tile)."""
    tile = 16384 // element_size
    block_w = 1
    while block_w < width and block_w < tile:
        block_w *= 2
    return max(1, tile // block_w), block_w, 8


def launch(blocked: torch.Tensor, interleaved: torch.Tensor, seg: Segments, *, to_blocks: bool,
           programs: int = 0) -> None:  # fmt: skip
    """Copy between ``blocked`` (contiguous, ``seg.numel`` elements) and the segments of ``interleaved``
    (a tensor whose first element is the interleaved side's origin), in the direction ``to_blocks``.
    ``programs`` > 0 caps the grid at that many programs, each looping over its share of the tiles."""
    if seg.rows == 0 or not any(seg.widths):
        return
    es = blocked.element_size()
    values = (*seg.starts, *seg.widths, seg.stride_outer, seg.stride_inner)
    vec = vector_width(es, values, (blocked.data_ptr(), interleaved.data_ptr()))
    block_r, block_w, warps = _blocks(max(seg.widths), es)
    tiles_w = cdiv(max(seg.widths), block_w)
    grid, rounds = loop_rounds(len(seg.widths) * cdiv(seg.rows, block_r) * tiles_w, programs)
    segments_kernel[(grid,)](
        as_uint(blocked), as_uint(interleaved), seg.rows, seg.inner_rows, seg.stride_outer // vec,
        seg.stride_inner // vec, tiles_w, _opaque(s // vec for s in seg.starts), _opaque(w // vec for w in seg.widths),
        NSEG=len(seg.widths), VEC=vec, TO_BLOCKS=to_blocks, BLOCK_R=block_r, BLOCK_W=block_w, LOOP=rounds,
        num_warps=warps,
    )  # fmt: skip


def reference(blocked: torch.Tensor, interleaved: torch.Tensor, seg: Segments, *, to_blocks: bool) -> None:
    """The same copy with torch views, one ``copy_`` per segment (the ``torch`` backend and the tests' oracle)."""
    outer = seg.rows // seg.inner_rows if seg.inner_rows else 0
    base = interleaved.storage_offset()
    offset = 0
    for start, width in zip(seg.starts, seg.widths):
        if seg.rows and width:
            block = blocked.view(-1)[offset : offset + seg.rows * width].view(outer, seg.inner_rows, width)
            view = interleaved.as_strided(
                (outer, seg.inner_rows, width), (seg.stride_outer, seg.stride_inner, 1), base + start
            )
            if to_blocks:
                block.copy_(view)
            else:
                view.copy_(block)
        offset += seg.rows * width


# --------------------------------------------------------------------------------------------------
# Strided rows to strided rows
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rows:
    """``rows`` runs of ``width`` unit-stride elements; run r starts at ``(r // inner_rows) * outer +
    (r % inner_rows) * inner`` elements from its side's origin, with (outer, inner) given per side."""

    rows: int
    inner_rows: int
    width: int
    src_outer: int
    src_inner: int
    dst_outer: int
    dst_inner: int

    @property
    def numel(self) -> int:
        return self.rows * self.width


@triton.jit(do_not_specialize=["rows", "inner_rows", "width", "src_outer", "src_inner", "dst_outer", "dst_inner",
                               "tiles_w"])  # fmt: skip
def rows_kernel(
    dst_ptr, src_ptr, rows, inner_rows, width, src_outer, src_inner, dst_outer, dst_inner, tiles_w,
    VEC: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_W: tl.constexpr, LOOP: tl.constexpr = 0,
):  # fmt: skip
    if LOOP:
        for i in range(LOOP):
            t = tl.program_id(0).to(tl.int64) + i * tl.num_programs(0)
            if t < tl.cdiv(rows, BLOCK_R) * tiles_w:
                _rows_tile(dst_ptr, src_ptr, t, rows, inner_rows, width, src_outer, src_inner, dst_outer, dst_inner,
                           tiles_w, VEC, BLOCK_R, BLOCK_W)  # fmt: skip
    else:
        _rows_tile(dst_ptr, src_ptr, tl.program_id(0).to(tl.int64), rows, inner_rows, width, src_outer, src_inner,
                   dst_outer, dst_inner, tiles_w, VEC, BLOCK_R, BLOCK_W)  # fmt: skip


@triton.jit
def _rows_tile(
    dst_ptr, src_ptr, pid, rows, inner_rows, width, src_outer, src_inner, dst_outer, dst_inner, tiles_w,
    VEC: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_W: tl.constexpr,
):  # fmt: skip
    pid_r = pid // tiles_w
    pid_w = pid % tiles_w
    r = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    w = pid_w * BLOCK_W + tl.arange(0, BLOCK_W)
    mask = (r[:, None] < rows) & (w[None, :] < width * VEC)
    outer = r // inner_rows
    inner = r % inner_rows
    src = src_ptr + (outer * src_outer * VEC + inner * src_inner * VEC)[:, None] + w[None, :]
    dst = dst_ptr + (outer * dst_outer * VEC + inner * dst_inner * VEC)[:, None] + w[None, :]
    tl.store(dst, tl.load(src, mask=mask), mask=mask)


def launch_rows(dst: torch.Tensor, src: torch.Tensor, spec: Rows, *, programs: int = 0) -> None:
    """Copy the runs of ``spec`` from ``src`` to ``dst`` (tensors whose first elements are the origins);
    ``programs`` as for ``launch``."""
    if spec.rows == 0 or spec.width == 0:
        return
    es = dst.element_size()
    values = (spec.width, spec.src_outer, spec.src_inner, spec.dst_outer, spec.dst_inner)
    vec = vector_width(es, values, (dst.data_ptr(), src.data_ptr()))
    block_r, block_w, warps = _blocks(spec.width, es)
    tiles_w = cdiv(spec.width, block_w)
    grid, rounds = loop_rounds(cdiv(spec.rows, block_r) * tiles_w, programs)
    rows_kernel[(grid,)](
        as_uint(dst), as_uint(src), spec.rows, spec.inner_rows, spec.width // vec, spec.src_outer // vec,
        spec.src_inner // vec, spec.dst_outer // vec, spec.dst_inner // vec, tiles_w,
        VEC=vec, BLOCK_R=block_r, BLOCK_W=block_w, LOOP=rounds, num_warps=warps,
    )  # fmt: skip


def reference_rows(dst: torch.Tensor, src: torch.Tensor, spec: Rows) -> None:
    """The same copy with one torch ``copy_`` (the ``torch`` backend and the tests' oracle)."""
    if spec.rows == 0 or spec.width == 0:
        return
    outer = spec.rows // spec.inner_rows
    shape = (outer, spec.inner_rows, spec.width)
    view = dst.as_strided(shape, (spec.dst_outer, spec.dst_inner, 1), dst.storage_offset())
    view.copy_(src.as_strided(shape, (spec.src_outer, spec.src_inner, 1), src.storage_offset()))
