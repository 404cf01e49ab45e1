"""The staged permute's plan (the CUDA kernel of ``kernels/cuda/permute_staged.cu``): a block moves one box
of the tensor through shared memory, read as whole runs of the input and written as whole runs of the
output.

The Triton tile kernel moves a 2-D tile, one axis folding the input's fastest dimensions and the other
the output's. Where a side's fastest dimension is short and the next one in that side's order is in the
other axis (bf16 (32,48,47,18,10,3) by (0,4,1,3,5,2): 3-element input runs, 47-element output runs;
int8 (42,9,11,29,38,29) by (2,1,4,5,3,0): runs of 1102 and 42 bytes, both off every 16-byte boundary),
each tile row is a short piece, stored or loaded a few bytes a lane. A box over several dimensions can
hold long runs on both sides at once: over (47,18,10,3) of the bf16 case the input is one run of 50760
bytes and the output ten runs of 5076; over 42 x 29 x c of the int8 case the output is one run of
1218 c bytes and the input 1218 runs of c.

A box is the union of a prefix of the input's contiguous chain of dimensions (strides 1, n0, n0 n1, ...)
and a prefix of the output's (its fastest dimensions), at most ``MAX_TILE_DIMS`` dimensions, at most
one of them cut into chunks to fit ``SMEM_BYTES``; a side's run ends at the cut dimension (a block at
the tensor's edge moves a shorter chunk, so nothing past it continues the run).

A block holds its box twice in shared memory: IN, one slot a input run, its aligned 16-byte window as
read; OUT, one row an output run, at the shift mod 16 its block's output runs share (so every output
dimension of the box outside its output run steps by a multiple of 16 bytes), written out as aligned
16-byte words. Between the two a thread moves one line at a time: the elements along the output's
fastest dimension of the box, contiguous in OUT, a fixed step apart in IN. This module imports no CUDA.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from tileflip.plan import PermutePlan, cdiv, contiguous_strides

MAX_TILE_DIMS = 4  # the .cu file's Params hold four box dimensions: the line's and three more
MAX_OUTER_DIMS = 6  # and six outer ones (the grid's decode)
SMEM_BYTES = 56 * 1024  # shared memory a block may take (four blocks, with 1 KiB each reserved, fill an SM's 228 KiB)
MIN_RUN_BYTES = 32  # both sides' runs at least this long, else the box is not worth staging
VECTOR = 16  # bytes a thread moves with one access


@dataclass(frozen=True)
class StagedLaunch:
    """A box and its grid, in the plan's merged dimensions (indices into ``plan.sizes``); places are byte
    offsets in shared memory.

    ``dims``: the box's dimensions, input-fastest first; ``extents``: each one's extent in a block (the
    chunk, for ``chunk``, the index into ``dims`` of the dimension cut in chunks, or -1; ``chunks`` of
    them); ``in_run``: how many leading ``dims`` form the input run; ``out_run``: indices into ``dims``
    of the output run, output-fastest first; ``rows``: the other indices, output-fastest first (they
    enumerate OUT's rows); ``in_pitch`` / ``out_pitch``: bytes of an IN slot / an OUT row; ``in_place``
    / ``out_place``: each box dimension's step in IN (within a slot for run dimensions, slots for the
    others) and in OUT (within a row for output-run dimensions, rows for the others); ``in_bytes``: IN's
    size, where OUT starts; ``line``: the index into ``dims`` of the line dimension (``out_run[0]``);
    ``enum``: the other indices, input-fastest first (they enumerate the lines); a line moves in ``segs``
    pieces of ``seg_len`` elements (``_pieces``); ``outer``: the
    dimensions outside the box (the grid's decode, output-fastest first); ``blocks``: chunks times the
    outer dimensions' product; ``smem``: bytes of shared memory a block; ``runs``: (input, output) run
    lengths in bytes on whole boxes; ``element_size``: bytes an element."""

    dims: tuple
    extents: tuple
    chunk: int
    chunks: int
    in_run: int
    out_run: tuple
    rows: tuple
    in_pitch: int
    out_pitch: int
    in_place: tuple
    out_place: tuple
    in_bytes: int
    line: int
    enum: tuple
    segs: int
    seg_len: int
    outer: tuple
    blocks: int
    smem: int
    runs: tuple
    element_size: int


def _product(values) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def input_chain(sizes, in_strides) -> list:
    """The merged dimensions that form the input's contiguous chain: stride 1, then each next one
    stepping over the previous exactly."""
    chain, step = [], 1
    while True:
        nxt = [d for d in range(len(sizes)) if in_strides[d] == step and d not in chain and sizes[d] > 1]
        if not nxt:
            return chain
        chain.append(nxt[0])
        step *= sizes[nxt[0]]


def _run(chain, box, cut) -> list:
    """The leading dimensions of ``chain`` that are all in ``box``, up to the cut one: a side's run
    within the box (a chunk at the tensor's edge shortens the run, so nothing past it continues it)."""
    run = []
    for d in chain:
        if d not in box:
            break
        run.append(d)
        if d == cut:
            break
    return run


def _candidate(sizes, in_strides, es, box, chunk_dim, chunk_ext):
    """A StagedLaunch for ``box`` (a set of merged dimensions) with ``chunk_dim`` cut to ``chunk_ext``
    (or None), or None where the kernel cannot take it."""
    out_strides = contiguous_strides(sizes)
    ext = {d: sizes[d] for d in box}
    if chunk_dim is not None:
        ext[chunk_dim] = chunk_ext
    in_chain = input_chain(sizes, in_strides)
    out_chain = list(range(len(sizes) - 1, -1, -1))
    in_run, out_run = _run(in_chain, box, chunk_dim), _run(out_chain, box, chunk_dim)
    if not in_run or not out_run:
        return None
    rows = [d for d in out_chain if d in box and d not in out_run]
    if any(out_strides[d] * es % VECTOR for d in rows):
        return None  # OUT's rows share one shift: they must step by whole 16-byte words
    dims = in_run + sorted((d for d in box if d not in in_run), key=lambda d: (in_strides[d], -d))
    outer = [d for d in range(len(sizes) - 1, -1, -1) if d not in box]
    if len(dims) > MAX_TILE_DIMS or len(outer) > MAX_OUTER_DIMS:
        return None
    run_in = _product(ext[d] for d in in_run) * es
    run_out = _product(ext[d] for d in out_run) * es
    in_pitch = (cdiv(run_in, VECTOR) + 1) * VECTOR  # a window at any misalignment
    out_pitch = cdiv(run_out + VECTOR - 1, VECTOR) * VECTOR  # a run at any shift
    in_place, step = {}, es
    for d in in_run:
        in_place[d] = step
        step *= ext[d]
    step = in_pitch
    for d in dims[len(in_run) :]:
        in_place[d] = step
        step *= ext[d]
    in_bytes = step
    out_place, step = {}, es
    for d in out_run:
        out_place[d] = step
        step *= ext[d]
    step = out_pitch
    for d in rows:
        out_place[d] = step
        step *= ext[d]
    smem = in_bytes + step
    chunks = cdiv(sizes[chunk_dim], chunk_ext) if chunk_dim is not None else 1
    index = {d: i for i, d in enumerate(dims)}
    line = index[out_run[0]]
    lines = _product(ext[d] for d in dims if d != out_run[0])
    segs, seg_len = _pieces(lines, ext[out_run[0]])
    return StagedLaunch(
        dims=tuple(dims), extents=tuple(ext[d] for d in dims),
        chunk=index[chunk_dim] if chunk_dim is not None else -1, chunks=chunks, in_run=len(in_run),
        out_run=tuple(index[d] for d in out_run), rows=tuple(index[d] for d in rows), in_pitch=in_pitch,
        out_pitch=out_pitch, in_place=tuple(in_place[d] for d in dims), out_place=tuple(out_place[d] for d in dims),
        in_bytes=in_bytes, line=line, enum=tuple(k for k in range(len(dims)) if k != line), segs=segs,
        seg_len=seg_len, outer=tuple(outer),
        blocks=chunks * _product(sizes[d] for d in outer), smem=smem, runs=(run_in, run_out), element_size=es,
    )  # fmt: skip


THREADS = 256  # the .cu file's block
PIECE_OVERHEAD = 6  # instructions a piece of a line costs, in elements moved (its decode against a copy's ~4)


def _pieces(lines: int, length: int) -> tuple[int, int]:
    """(pieces a line, elements a piece) that spread a box's lines over the block's threads most evenly:
    the fewest rounds of pieces times each piece's length plus its decode."""
    best = None
    for segs in range(1, 9):
        seg_len = cdiv(length, segs)
        if segs > 1 and (segs - 1) * seg_len >= length:
            break
        cost = cdiv(lines * segs, THREADS) * (seg_len + PIECE_OVERHEAD)
        if best is None or cost < best[0]:
            best = (cost, segs, seg_len)
    return best[1], best[2]


def _cost(go: StagedLaunch) -> float:
    """Sectors touched per byte moved, both sides (a run of L bytes off a boundary touches about
    L / 32 + 1 sectors), the fewer the better."""
    return sum((r + 32) / r for r in go.runs)


def _boxes(sizes, in_strides):
    """The boxes to weigh: each union of a prefix of the input chain and a prefix of the output's order."""
    in_chain = input_chain(sizes, in_strides)
    out_chain = list(range(len(sizes) - 1, -1, -1))
    seen = set()
    for i in range(1, len(in_chain) + 1):
        for j in range(1, len(out_chain) + 1):
            box = frozenset(in_chain[:i]) | frozenset(out_chain[:j])
            if len(box) <= MAX_TILE_DIMS and box not in seen:
                seen.add(box)
                yield box


@functools.lru_cache(maxsize=256)
def staged_box(sizes: tuple, in_strides: tuple, es: int, smem_bytes: int, min_run: int):
    """The cheapest box (``_cost``) for these merged sizes and input strides that fits ``smem_bytes``,
    whole or with one dimension cut in chunks, whose runs are at least ``min_run`` bytes, or None."""
    best = None
    for box in _boxes(sizes, in_strides):
        options = [(None, None)]
        for d in box:
            options += [(d, e) for e in _chunk_extents(sizes[d])]
        for chunk_dim, ext in options:
            go = _candidate(sizes, in_strides, es, box, chunk_dim, ext)
            if go is None or go.smem > smem_bytes or min(go.runs) < min_run:
                continue
            key = (_cost(go), -go.smem)
            if best is None or key < best[0]:
                best = (key, go)
    return best[1] if best else None


def _chunk_extents(size: int) -> list:
    """Chunk lengths to try for a dimension of ``size``: powers of two below it and size / k."""
    out = {1 << k for k in range(size.bit_length()) if 1 << k < size}
    out |= {cdiv(size, k) for k in range(2, 17) if cdiv(size, k) < size}
    return sorted(out)


def staged_launch(p: PermutePlan, es: int, smem_bytes: int | None = None) -> StagedLaunch | None:
    """The staged launch of a ``tiles`` plan within ``smem_bytes`` (default SMEM_BYTES), or None (see
    ``staged_box``; a broadcast input, a stride of 0, is left to the tile kernel)."""
    if p.kind != "tiles" or any(s == 0 for s in p.in_strides):
        return None
    budget = SMEM_BYTES if smem_bytes is None else smem_bytes
    return staged_box(tuple(p.sizes), tuple(p.in_strides), es, budget, MIN_RUN_BYTES)
