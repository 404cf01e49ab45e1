"""The staged permute's launch (``kernels/cuda/permute_staged.cu``): the box of the tensor a block moves
through shared memory, its segments, vector widths and buffer layout, and the grid of boxes.

A permute plan (merged sizes and input strides, in output order) is moved box by box. A box takes the
input's fastest dimensions until the input segment (the contiguous input run inside the box) reaches a
target length, and the output's fastest dimensions until the output segment does, cutting the last
dimension of each side's chain to the extent the target needs (``staged_box``). Every box has the same
shape, so a thread's offsets in it are computed once per block (``staged_slots`` gives them, as the kernel
computes them). Vector widths are the widest powers of two, 4 to 16 bytes, that divide every segment's
start, its length and the pointers (``vector_bytes``). Pure Python, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tileflip.plan.grid import cdiv, magic_divisor
from tileflip.plan.launch import pow2_part as _pow2_dividing
from tileflip.plan.launch import product as _product
from tileflip.plan.permute import contiguous_strides

THREADS = 256  # permute_staged.cu's STAGED_THREADS
BOX_BYTES = 8192  # STAGED_BOX_BYTES: the vectors of a box on each side fill at most this many bytes
BUF_BYTES = 9216  # STAGED_BUF_BYTES: a box's buffer, segment padding included
STAGES = 3  # STAGED_STAGES: buffers a block cycles through
DIMS = 8  # STAGED_DIMS
UNCUT = 65535  # STAGED_UNCUT
VECTOR_BYTES = 16
ALIGN_BYTES = 32  # pointers' alignment as the plan sees it: a sector's, beyond which no count changes
MIN_VECTOR_BYTES = 4  # narrower accesses meet the memory system's request rate before its bandwidth
INT32_LIMIT = 2**31
# Segment lengths (bytes) a box may aim at on each side; every pair is tried and the cost model scores it.
SEGMENT_TARGETS = (64, 128, 256, 512, 1024, 2048, 4096)
SECTOR_BYTES = 32  # a store instruction's lanes on one segment write whole sectors


@dataclass(frozen=True)
class StagedLaunch:
    """A staged permute's launch.

    ``extents``: the box's extent along each merged dimension (1 outside the box); ``seg_in`` /
    ``seg_out``: the dimensions of the input / output segment, fastest first; ``cut_in`` / ``cut_out``:
    the dimension each side's chain cuts (its extent in the box is below its size), or -1; ``vi`` / ``vo``:
    load and store vector widths in bytes; ``seg_order``: the box dimensions outside the input segment, in
    the order the buffer's rows (one input segment each) count them, fastest first; ``pitch``: buffer
    elements from one row to the next; row r is turned by ``(r >> shift) * rot`` elements; ``lanes_seg``:
    the lanes of a warp that store consecutive vectors of one output segment (``buffer_layout``);
    ``vector_gather``: every store vector lies in order in the buffer, aligned, and is read whole;
    ``tiles``: the boxes, counted over ``tile_dims`` (fastest first)."""

    element_size: int
    extents: tuple
    seg_in: tuple
    seg_out: tuple
    cut_in: int
    cut_out: int
    vi: int
    vo: int
    seg_order: tuple
    pitch: int
    rot: int
    shift: int
    lanes_seg: int
    tile_dims: tuple
    tiles: int
    vector_gather: bool = False

    @property
    def box_elements(self) -> int:
        return _product(self.extents)

    @property
    def kernel(self) -> str:
        return f"permute_staged_e{self.element_size}_i{self.vi}_o{self.vo}{'_v' if self.vector_gather else ''}"

    def len_in(self) -> int:
        return _product(self.extents[d] for d in self.seg_in)

    def len_out(self) -> int:
        return _product(self.extents[d] for d in self.seg_out)


def _segment(sizes, strides, extents, order) -> tuple:
    """The dimensions (from ``order``, fastest first) of the contiguous run a box's extents make on the side
    of ``strides``: each next dimension steps over the run so far, which is whole; the first has stride 1."""
    dims, run = [], 1
    for d in order:
        if (extents[d] == 1 and sizes[d] > 1) or strides[d] != run or (dims and extents[dims[-1]] < sizes[dims[-1]]):
            break
        dims.append(d)
        run *= sizes[d]
    return tuple(dims)


def _chain(sizes, strides, order, element_size: int, target: int) -> dict:
    """The extents a side's chain asks for: its fastest dimensions whole until the run reaches ``target``
    bytes, the one that reaches it cut to the fewest whole 16-byte steps that do."""
    want, run = {}, 1
    for d in order:
        if strides[d] != run:
            break
        if run * sizes[d] * element_size < target or sizes[d] == 1:
            want[d] = sizes[d]
            run *= sizes[d]
            continue
        step = VECTOR_BYTES // _pow2_dividing(run * element_size, VECTOR_BYTES)  # extents of whole vectors
        need = cdiv(target, run * element_size)
        t = min(sizes[d], cdiv(need, step) * step)
        if t < sizes[d]:  # as few boxes along d, with the cut spread evenly between them
            t = min(sizes[d], cdiv(cdiv(sizes[d], cdiv(sizes[d], t)), step) * step)
        want[d] = t
        break
    return want


def vector_bytes(sizes, strides, extents, seg, cut, element_size: int, alignment: int) -> int:
    """The widest vector, a power of two of 16 bytes at most, whose starts every segment of every box
    meets: it divides the segment's length (and, where the segment is cut, the length it would have with
    the cut dimension whole, so that the last box along it holds whole vectors), every stride outside the
    segment, and ``alignment`` (the pointer's)."""
    es = element_size
    v = _pow2_dividing(alignment, VECTOR_BYTES)
    length = _product(extents[d] for d in seg) * es
    v = min(v, _pow2_dividing(length, VECTOR_BYTES))
    if cut >= 0 and cut in seg:
        whole = _product(extents[d] for d in seg[: seg.index(cut)]) * sizes[cut] * es
        v = min(v, _pow2_dividing(whole, VECTOR_BYTES))
    for d in range(len(sizes)):
        if d not in seg and sizes[d] > 1:
            v = min(v, _pow2_dividing(strides[d] * es, VECTOR_BYTES))
    return v


def staged_boxes(sizes, in_strides, element_size: int) -> list:
    """The distinct boxes of SEGMENT_TARGETS' pairs of targets: each the extents along every merged
    dimension (1 outside the box); none where the input has no dimension of stride 1."""
    n = len(sizes)
    in_order = sorted((d for d in range(n) if in_strides[d] > 0), key=lambda d: (in_strides[d], -d))
    if not in_order or in_strides[in_order[0]] != 1:
        return []
    out_strides = contiguous_strides(sizes)
    out_order = list(range(n - 1, -1, -1))
    wants_in = {tuple(_chain(sizes, in_strides, in_order, element_size, t).items()) for t in SEGMENT_TARGETS}
    wants_out = {tuple(_chain(sizes, out_strides, out_order, element_size, t).items()) for t in SEGMENT_TARGETS}
    boxes = set()
    for want_in in wants_in:
        for want_out in wants_out:
            extents = [1] * n
            for d, t in (*want_out, *want_in):
                extents[d] = max(extents[d], t)
            boxes.add(tuple(extents))
    return sorted(boxes)


def in_order(sizes, go: StagedLaunch) -> bool:
    """Whether every store vector of ``go``'s boxes lies in order in the buffer from a VO-aligned byte."""
    import numpy as np

    rows, cols, live = store_places(sizes, go)
    es = go.element_size
    at = es * (rows * go.pitch + (cols + (rows >> go.shift) * go.rot) % go.pitch)
    at = at[live]
    return bool(np.all(at[:, :1] % go.vo == 0) and np.all(at - at[:, :1] == es * np.arange(at.shape[1])))


def launch_for(sizes, in_strides, es, in_align, out_align, extents):
    n = len(sizes)
    if _product(extents) * es > BOX_BYTES:
        return None
    out_strides = contiguous_strides(sizes)
    in_order = sorted((d for d in range(n) if in_strides[d] > 0), key=lambda d: (in_strides[d], -d))
    seg_in = _segment(sizes, in_strides, extents, in_order)
    seg_out = _segment(sizes, out_strides, extents, range(n - 1, -1, -1))
    if not seg_in or not seg_out:
        return None
    cut_in = seg_in[-1] if extents[seg_in[-1]] < sizes[seg_in[-1]] else -1
    cut_out = seg_out[-1] if extents[seg_out[-1]] < sizes[seg_out[-1]] else -1
    box_dims = [d for d in range(n) if extents[d] > 1 or d in seg_in or d in seg_out]
    cuts = {d for d in box_dims if extents[d] < sizes[d]}
    if not cuts <= {cut_in, cut_out}:
        return None  # a dimension cut that neither segment ends on
    vi = vector_bytes(sizes, in_strides, extents, seg_in, cut_in, es, in_align)
    vo = vector_bytes(sizes, out_strides, extents, seg_out, cut_out, es, out_align)
    if min(vi, vo) < max(MIN_VECTOR_BYTES, es):
        return None
    # the buffer's rows are the input segments, counted over the other box dimensions in output order
    seg_order = tuple(d for d in reversed(range(n)) if d in box_dims and d not in seg_in)
    len_in = _product(extents[d] for d in seg_in)
    if _product(extents[d] for d in seg_order) * len_in * es > BUF_BYTES:
        return None
    if any(d >= 0 and (extents[d] >= UNCUT or sizes[d] >= INT32_LIMIT) for d in (cut_in, cut_out)):
        return None
    # offsets inside a box are 32-bit
    span_in = sum((extents[d] - 1) * in_strides[d] for d in box_dims) + 1
    span_out = sum((extents[d] - 1) * out_strides[d] for d in box_dims) + 1
    if span_in >= INT32_LIMIT or span_out >= INT32_LIMIT:
        return None
    # Boxes along the cut dimensions count fastest: neighbours that share a line or a sector at the cut are
    # taken by neighbouring blocks at the same time, so L2 joins their parts before DRAM sees them.
    tile_dims = tuple(sorted((d for d in reversed(range(n)) if cdiv(sizes[d], extents[d]) > 1),
                             key=lambda d: (d not in (cut_in, cut_out), -d)))  # fmt: skip
    tiles = _product(cdiv(sizes[d], extents[d]) for d in tile_dims)
    if tiles >= INT32_LIMIT:
        return None
    return StagedLaunch(es, tuple(extents), seg_in, seg_out, cut_in, cut_out, vi, vo, seg_order, len_in, 0, 0, 32,
                        tile_dims, tiles)  # fmt: skip


def staged_fields(sizes, in_strides, go: StagedLaunch) -> dict:
    """The kernel's ``StagedParams`` of launch ``go``, field by field (lists padded to DIMS)."""
    es = go.element_size
    n = len(sizes)
    out_strides = contiguous_strides(sizes)
    ext = go.extents
    ve_in, ve_out = go.vi // es, go.vo // es
    len_in, len_out = go.len_in(), go.len_out()
    rows, cols = buffer_strides(go, n)
    oout = outside_out(go, n)

    def inner(seg, cut):
        return _product(ext[d] for d in seg[: seg.index(cut)]) if cut >= 0 and cut in seg else 0

    def pad(values):
        values = list(values)
        return values + [0] * (DIMS - len(values))

    same = go.cut_in >= 0 and go.cut_in == go.cut_out
    magics = [magic_divisor(cdiv(sizes[d], ext[d])) for d in go.tile_dims]
    return {
        "tiles": go.tiles,
        "nl": len_in // ve_in * _product(ext[d] for d in go.seg_order),
        "ns": len_out // ve_out * _product(ext[d] for d in oout),
        "vps_in": len_in // ve_in, "vps_out": len_out // ve_out,
        "inner_in": inner(go.seg_in, go.cut_in), "inner_out": inner(go.seg_out, go.cut_out),
        "n_oin": len(go.seg_order),
        "k_os_in": go.seg_order.index(go.cut_out) if go.cut_out in go.seg_order else -1,
        "n_sout": len(go.seg_out), "n_oout": len(oout),
        "lanes_seg": go.lanes_seg, "nseg": _product(ext[d] for d in oout),
        "vps_pad": cdiv(len_out // ve_out, go.lanes_seg) * go.lanes_seg,
        "k_is_out": oout.index(go.cut_in) if go.cut_in in oout else -1,
        "same_cut": int(same),
        "n_tile": len(go.tile_dims),
        "ti_is": go.tile_dims.index(go.cut_in) if go.cut_in in go.tile_dims else -1,
        "ti_os": go.tile_dims.index(go.cut_out) if go.cut_out in go.tile_dims else -1,
        "cut_is": ext[go.cut_in] if go.cut_in >= 0 else UNCUT, "size_is": sizes[go.cut_in] if go.cut_in >= 0 else UNCUT,
        "cut_os": ext[go.cut_out] if go.cut_out >= 0 else UNCUT,
        "size_os": sizes[go.cut_out] if go.cut_out >= 0 else UNCUT,
        "pitch": go.pitch, "rot": go.rot, "shift": go.shift,
        "oin_ext": pad(ext[d] for d in go.seg_order), "oin_in": pad(in_strides[d] for d in go.seg_order),
        "oin_row": pad(rows[d] for d in go.seg_order),
        "sout_ext": pad(ext[d] for d in go.seg_out), "sout_row": pad(rows[d] for d in go.seg_out),
        "sout_col": pad(cols[d] for d in go.seg_out),
        "oout_ext": pad(ext[d] for d in oout), "oout_out": pad(out_strides[d] for d in oout),
        "oout_row": pad(rows[d] for d in oout), "oout_col": pad(cols[d] for d in oout),
        "tile_count": pad(cdiv(sizes[d], ext[d]) for d in go.tile_dims),
        "tile_magic": pad(m for m, _ in magics), "tile_shift": pad(s for _, s in magics),
        "tile_in": pad(ext[d] * in_strides[d] for d in go.tile_dims),
        "tile_out": pad(ext[d] * out_strides[d] for d in go.tile_dims),
    }  # fmt: skip


def buffer_strides(go: StagedLaunch, n: int) -> tuple[list, list]:
    """Each dimension's strides in the buffer: in rows (the box dimensions outside the input segment, in
    ``seg_order``) and in columns (the input segment's, packed); 0 outside the box and on the other axis."""
    rows, cols = [0] * n, [0] * n
    acc = 1
    for d in go.seg_in:
        cols[d] = acc
        acc *= go.extents[d]
    acc = 1
    for d in go.seg_order:
        rows[d] = acc
        acc *= go.extents[d]
    return rows, cols


def _decode(index, extents, strides_list):
    """Mixed-radix digits of ``index`` (a numpy array) over ``extents`` (fastest first), each multiplied by
    its strides in every list of ``strides_list``: one summed array per list."""
    import numpy as np

    sums = [np.zeros_like(index) for _ in strides_list]
    rest = index.copy()
    for k, e in enumerate(extents):
        c = rest % e
        rest //= e
        for total, strides in zip(sums, strides_list):
            total += c * strides[k]
    return sums


def store_slots(go: StagedLaunch) -> int:
    """Store slots of a box: every thread's share of BOX_BYTES in store vectors."""
    return THREADS * (BOX_BYTES // (THREADS * go.vo))


def order_fits(go: StagedLaunch, lanes: int) -> bool:
    """Whether the store order with ``lanes`` lanes on each output segment puts every store vector of a box
    in a slot (``store_order``)."""
    vps = go.len_out() // (go.vo // go.element_size)
    nseg = go.box_elements // go.len_out()
    return cdiv(nseg, 32 // lanes) * (32 // lanes) * cdiv(vps, lanes) * lanes <= store_slots(go)


def outside_out(go: StagedLaunch, n: int) -> list:
    """The box dimensions outside the output segment, in output order, fastest first (the kernel's oout)."""
    ext = go.extents
    return [d for d in reversed(range(n)) if (ext[d] > 1 or d in go.seg_in or d in go.seg_out) and d not in go.seg_out]


def _slots_of(go: StagedLaunch, n: int) -> tuple:
    """(oout, segment, position): which output segment (over ``outside_out``) and which vector of it each
    store slot of a box takes (``store_order``), -1 for none."""
    oout = outside_out(go, n)
    vps = go.len_out() // (go.vo // go.element_size)
    g, k = store_order(go, _product(go.extents[d] for d in oout), vps, store_slots(go))
    return oout, g, k


def store_order(go: StagedLaunch, nseg: int, vps: int, slots: int):
    """(segment, vector) each store slot takes (``store_order`` of the kernel), -1 where it takes none."""
    import numpy as np

    u = np.arange(slots, dtype=np.int64)
    lanes = go.lanes_seg
    groups = 32 // lanes
    chunks = cdiv(vps, lanes)
    t = u // lanes
    k = (t // groups % chunks) * lanes + u % lanes
    g = (t // groups // chunks) * groups + t % groups
    live = (g < nseg) & (k < vps)
    return np.where(live, g, -1), np.where(live, k, -1)


def store_places(sizes, go: StagedLaunch):
    """(rows, cols, live) of every element a box's store slots gather, as the kernel finds them: arrays of
    shape (slots, elements a vector), slot u taken by thread u % THREADS; ``live`` marks the slots that take
    a vector."""
    import numpy as np

    n = len(sizes)
    rows, cols = buffer_strides(go, n)
    es, ext = go.element_size, go.extents
    ve = go.vo // es
    oout, g, k = _slots_of(go, n)
    live = g >= 0
    base_r, base_c = _decode(np.maximum(g, 0), [ext[d] for d in oout], ([rows[d] for d in oout],
                                                                          [cols[d] for d in oout]))  # fmt: skip
    q = np.maximum(k, 0)[:, None] * ve + np.arange(ve, dtype=np.int64)[None, :]
    seg_r, seg_c = _decode(q, [ext[d] for d in go.seg_out], ([rows[d] for d in go.seg_out],
                                                             [cols[d] for d in go.seg_out]))  # fmt: skip
    return base_r[:, None] + seg_r, base_c[:, None] + seg_c, live


def store_offsets(sizes, go: StagedLaunch):
    """(offsets, live): every store slot's vector's byte offset in the output from its box's first element,
    slot u taken by thread u % THREADS, and which slots take a vector."""
    import numpy as np

    n = len(sizes)
    es, ext = go.element_size, go.extents
    ve = go.vo // es
    out_strides = contiguous_strides(sizes)
    oout, g, k = _slots_of(go, n)
    (base,) = _decode(np.maximum(g, 0), [ext[d] for d in oout], ([out_strides[d] for d in oout],))
    (along,) = _decode(np.maximum(k, 0) * ve, [ext[d] for d in go.seg_out], ([out_strides[d] for d in go.seg_out],))
    return (base + along) * es, g >= 0


def segment_runs(sizes, strides, go: StagedLaunch, side: str, align: int) -> tuple:
    """A side's segments as the memory sees them: ((length in bytes, share of the tensor's elements), ...)
    (the last box along a cut inside the segment has shorter ones), and the byte steps between their
    starts (the pointer's alignment, the strides of the other dimensions, a box along the cut)."""
    es, ext = go.element_size, go.extents
    seg, cut = (go.seg_in, go.cut_in) if side == "read" else (go.seg_out, go.cut_out)
    length = _product(ext[d] for d in seg) * es
    steps = [align] + [strides[d] * es for d in range(len(sizes)) if d not in seg and sizes[d] > 1]
    runs = [(length, 1.0)]
    if cut >= 0 and cut in seg and sizes[cut] > ext[cut]:
        steps.append(ext[cut] * strides[cut] * es)
        last = sizes[cut] - (cdiv(sizes[cut], ext[cut]) - 1) * ext[cut]
        if last < ext[cut]:
            share = last / sizes[cut]
            runs = [(length, 1.0 - share), (length // ext[cut] * last, share)]
    return tuple(runs), tuple(steps)


def load_places(sizes, go: StagedLaunch):
    """(rows, cols) of every load vector of a box (its first element), in the order threads take them."""
    import numpy as np

    n = len(sizes)
    rows, _ = buffer_strides(go, n)
    ve = go.vi // go.element_size
    vps = go.len_in() // ve
    count = vps * _product(go.extents[d] for d in go.seg_order)
    v = np.arange(count, dtype=np.int64)
    (row,) = _decode(v // vps, [go.extents[d] for d in go.seg_order], ([rows[d] for d in go.seg_order],))
    return row, (v % vps) * ve


def wavefronts(addresses, width: int) -> int:
    """Shared-memory wavefronts of warp-wide accesses of ``width`` bytes: ``addresses`` (bytes) of shape
    (..., 32), each row of 32 lanes one instruction. A wavefront serves each of the 32 four-byte banks one
    word (lanes that read one word share it); an access of 8 bytes takes two banks, of 16 bytes four, and
    an instruction whose accesses are wider than 4 bytes takes at least width / 4 wavefronts."""
    import numpy as np

    a = np.asarray(addresses, dtype=np.int64).reshape(-1, 32)
    words = max(1, width // 4)
    word = (a // 4)[:, :, None] + np.arange(words)[None, None, :]  # every word each lane touches
    word = word.reshape(a.shape[0], -1)
    key = np.sort((word % 32) << 40 | word, axis=1)  # by bank, then word
    fresh = np.ones(key.shape, dtype=bool)
    fresh[:, 1:] = key[:, 1:] != key[:, :-1]
    bank = key >> 40
    # distinct words a bank holds in each instruction: the fresh keys of each bank, counted
    starts = np.ones(key.shape, dtype=bool)
    starts[:, 1:] = bank[:, 1:] != bank[:, :-1]
    run = np.cumsum(fresh, axis=1)
    before = np.where(starts, run - fresh, 0)
    np.maximum.accumulate(before, axis=1, out=before)
    return int(np.maximum((run - before).max(axis=1), words).sum())


def _gather_addresses(places, pitch: int, rot: int, shift: int, es: int):
    """Byte addresses of the gathered elements of ``store_places``, in instruction order: shape (slot, warp,
    element, lane); a lane whose slot takes no vector, which issues nothing, takes a live lane's address."""
    import numpy as np

    rows, cols, live = places
    at = es * (rows * pitch + (cols + (rows >> shift) * rot) % pitch)
    slots, ve = at.shape
    lanes = at.reshape(slots // THREADS, THREADS // 32, 32, ve).transpose(0, 1, 3, 2)
    alive = np.broadcast_to(live.reshape(slots // THREADS, THREADS // 32, 32)[:, :, None, :], lanes.shape)
    fill = np.where(alive, lanes, -1).max(axis=-1, keepdims=True)
    return np.where(alive, lanes, fill)


def gather_wavefronts(sizes, go: StagedLaunch, warps: int | None = None) -> int:
    """Shared-memory wavefronts of one box's gathers (``warps``: only the first warp of the first that many
    slots of each thread, the pattern the others repeat)."""
    places = store_places(sizes, go)
    lanes = _gather_addresses(places, go.pitch, go.rot, go.shift, go.element_size)
    if warps is not None:
        lanes = lanes[:warps, :1]
    return wavefronts(lanes, go.element_size)


# Turns the layout search tries: (shift, rot in load vectors); shifts past 0 turn whole groups of rows.
TURNS = ((0, 0),) + tuple((shift, k) for shift in (0, 2, 4, 5) for k in (1, 2, 3))


def buffer_layout(sizes, go: StagedLaunch) -> StagedLaunch:
    """``go`` with the store order and buffer layout that give its gathers the fewest shared-memory
    wavefronts, or None where no store order fits the box's slots: ``lanes_seg`` a power of two whose vectors
    make whole sectors (or a whole segment); the pitch at most three load vectors past the input segment;
    rows turned by ``(r >> shift) * rot``, rot a multiple of a load vector (TURNS). Ties go to the more
    coalesced order, then the plain layout. The count is taken over the first warp of each thread's first
    two slots (the others repeat their pattern)."""
    es = go.element_size
    ve = go.vi // es
    rows = _product(go.extents[d] for d in go.seg_order)
    vps = go.len_out() // (go.vo // es)
    best, best_cost = None, None
    for lanes in (32, 16, 8, 4, 2, 1):
        if lanes * go.vo < SECTOR_BYTES and lanes < vps:
            break
        if lanes > 1 and lanes // 2 >= vps:
            continue  # a narrower group holds the whole segment as well
        if not order_fits(go, lanes):
            continue
        ordered = replace(go, lanes_seg=lanes)
        places = store_places(sizes, ordered)
        for pad in range(3 if rows > 1 else 1):
            pitch = go.len_in() + pad * ve
            if rows * pitch * es > BUF_BYTES:
                break
            for shift, k in TURNS if rows > 1 else ((0, 0),):
                rot = k * ve
                if rot >= pitch:
                    continue
                lanes_at = _gather_addresses(places, pitch, rot, shift, es)[:2, :1]
                cost = wavefronts(lanes_at, es)
                if best_cost is None or cost < best_cost:
                    best, best_cost = replace(ordered, pitch=pitch, rot=rot, shift=shift), cost
                if cost <= lanes_at[..., 0].size * max(1, es // 4):
                    return best  # no layout does better than a wavefront an instruction
    return best
