"""Launch geometry of the N-D permute kernels: how a plan's merged dimensions become a tile's two axes and a
batch, the tile's block sizes and grid, vector widths, and offset bounds.

``PermuteLaunch`` is the launch description the kernels receive. The functions here take the tile and
the policy numbers as arguments; ``tileflip.tuning`` chooses them (``docs/design.md``, Planner).
"""

from __future__ import annotations

from dataclasses import dataclass

from tileflip.plan.grid import cdiv, magic_divisor
from tileflip.plan.permute import contiguous_strides

MAX_AXIS_DIMS = 4  # merged dimensions an axis decodes (the kernel's decode holds up to four)
MAX_BATCH_DIMS = 6
FOLD_FACTOR = 4  # an axis folds dimensions until it spans this many tile widths (fewer masked tails)
VECTOR_BYTES = 16
SECTOR_BYTES = 32  # the memory system's write unit: a store of part of one costs a partial-sector write
GENERAL_BLOCK = 1024
INT32_LIMIT = 2**31

# The realigned-store CUDA kernel's block (kernels/cuda/permute_realign.cu's TA and STEP, and its HALO):
# (bytes of each input row, indices along B) a block moves, and the rows it loads before its first B index.
REALIGN_TILE = (64, 256)
REALIGN_HALO = 32


# The thin-transpose CUDA kernel (kernels/cuda/permute_words.cu): a warp's piece of each row (16 bytes a
# lane), the output's fastest dimension it turns around in registers (at most 16 bytes), its warps a
# block, and the batch dimensions its decode holds.
THIN_ROW_BYTES = 512
THIN_MAX_S_BYTES = 16
THIN_WARPS = 4
THIN_BATCH_DIMS = 6

# The split-transpose CUDA kernel (kernels/cuda/permute_words.cu, permute_split_*): the thin kernel's
# mirror, whose input blocks interleave S output rows (S at most 8 bytes, held in registers a lane).
SPLIT_MAX_S_BYTES = 8
SPLIT_WARPS = THIN_WARPS  # the same file's WARPS
SPLIT_BATCH_DIMS = 6

# The realigned row copy (kernels/cuda/permute_words.cu, permute_shift_rows): output bytes a warp item
# writes (32 lanes x 4 words of 16 bytes), its warps a block, the outer dimensions its decode holds, and
# its row lengths (a 16-byte word spans at most two rows; a row's byte index and 2 KiB past it fit 31 bits).
SHIFT_ITEM_BYTES = 2048
SHIFT_WARPS = 4
SHIFT_OUTER_DIMS = 6
SHIFT_ROW_BYTES = (16, 2**30)


def realign_tile(element_size: int) -> tuple[int, int]:
    """(A, B) in elements of a realigned-store block: 64 bytes of each input row, 256 rows."""
    return REALIGN_TILE[0] // element_size, REALIGN_TILE[1]


def product(values) -> int:
    n = 1
    for v in values:
        n *= v
    return n


def pow2_at_most(n: int, cap: int) -> int:
    """The smallest power of two >= n, capped at cap."""
    p = 1
    while p < n and p < cap:
        p *= 2
    return p


def pow2_ceil(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def pow2_part(n: int, cap: int) -> int:
    """The largest power of two <= cap dividing n (n == 0 counts as divisible by anything)."""
    p = 1
    while p < cap and n % (2 * p) == 0:
        p *= 2
    return p


@dataclass(frozen=True)
class PermuteLaunch:
    """How an N-D permute plan is launched: block shape, warps, the 1-D grid's parts and the tile's axes.

    rows/copy/tiles: ``blocks`` = (BLOCK_B, BLOCK_A), ``grid`` = (b tiles, a tiles), ``batch`` = batch
    elements; ``a_dims`` / ``b_dims`` / ``batch_dims`` are merged dimensions (indices into the plan's
    sizes), innermost first; ``vec`` = (load, store) vector widths in elements, which divide the run
    along each axis and every other stride involved; ``kept``: the output's fastest dimension is also
    the input's, so stores run along A (no transpose in registers); ``wide``: tile indices need 64
    bits; ``b_fast``: consecutive programs step along B (else along A); ``offsets64``: an element offset
    the kernel forms, masked tail lanes included, may reach 2**31 (``offsets_need_64``), so offsets are
    int64 (B tiles shifted onto sectors, ``store_shift``, also mask lanes whose offsets lie outside these
    bounds; no masked offset is accessed); ``maxnreg``: a register cap per thread for the compiler (0:
    none); ``evict_last``: loads carry Triton's ``evict_last`` cache policy; ``magic``: indices are
    divided by host-computed magic numbers where every index is int32 (else by Triton's integer division).
    general: ``blocks`` = (BLOCK,), ``grid`` = (programs,).
    ``flat`` (rows): the flat rows kernel; ``blocks`` = (vectors per program,), ``grid`` = (programs,),
    ``vec`` = (VEC, VEC), ``a_dims`` = (the kept dimension,).
    Tests set fields (``dataclasses.replace``) to reach a kernel path that no plan of theirs takes.
    """

    blocks: tuple
    num_warps: int
    grid: tuple
    batch: int = 1
    a_dims: tuple = ()
    b_dims: tuple = ()
    batch_dims: tuple = ()
    vec: tuple = (1, 1)
    kept: bool = False
    wide: bool = False
    b_fast: bool = False
    offsets64: bool = True
    maxnreg: int = 0
    flat: bool = False
    evict_last: bool = False
    magic: bool = True

    @property
    def options(self) -> dict:
        """Compile options of the launch besides its constexprs."""
        return {"num_warps": self.num_warps} | ({"maxnreg": self.maxnreg} if self.maxnreg else {})

    @property
    def programs(self) -> int:
        n = self.batch
        for g in self.grid:
            n *= g
        return n


def by_input_stride(in_strides) -> list:
    """The dimensions but the output's fastest (the last) that the input steps through, fastest first."""
    last = len(in_strides) - 1
    return sorted((i for i in range(last) if in_strides[i] > 0), key=lambda i: (in_strides[i], -i))


def fold_axes(sizes, in_strides, kept: bool, cap_a: int, cap_b: int, whole_b_waste: float):
    """Split merged dimensions into axis A (input-fastest first), axis B (output-fastest first) and batch.

    Both axes start from their side's fastest dimension; then, turn about (B first, so a dimension both
    want goes to the output's axis), each takes its side's next fastest dimension while it spans fewer
    than FOLD_FACTOR tile widths and holds fewer than MAX_AXIS_DIMS. A transposed tile's A, once its input
    run spans a tile width, takes dimensions in output order, so that its rows are consecutive output
    rows. An axis passes over a dimension that would continue the other axis's contiguous run but not its
    own. B holds only the output's fastest dimension when the output's next one is A's first and it spans
    a quarter to one tile width with at most ``whole_b_waste`` of its power-of-two block masked: a
    program then writes one contiguous piece of output. Dimensions of input stride 0 stay in the batch,
    which is ordered innermost first and folded back into B past MAX_BATCH_DIMS.
    Returns (a_dims, b_dims, batch_dims)."""
    n = len(sizes)
    last = n - 1
    by_stride = by_input_stride(in_strides)
    if kept:
        a_order = [last] + by_stride
        b_order = list(range(last - 1, -1, -1))
    else:
        a_order = _a_output_order(sizes, in_strides, by_stride, cap_a)
        b_order = list(range(last, -1, -1))
    a_dims, b_dims = [a_order[0]], [] if kept else [last]
    if kept and n > 1:
        b_dims = [b_order[0]] if b_order[0] != a_dims[0] else []
    used = set(a_dims) | set(b_dims)
    out_strides = contiguous_strides(sizes)
    b0 = b_dims[0] if b_dims and not kept and len(b_dims) == 1 else None
    first_b = sizes[b0] if b0 is not None and b0 - 1 == a_dims[0] else 0
    whole_b = (cap_b <= 4 * first_b and first_b <= cap_b
               and pow2_ceil(first_b) - first_b <= whole_b_waste * pow2_ceil(first_b))  # fmt: skip

    def open_(dims, cap):
        return len(dims) < MAX_AXIS_DIMS and product(sizes[d] for d in dims) < FOLD_FACTOR * cap

    def chain(dims, strides, cap):
        """The free dimensions that would continue, one after another, the contiguous run ``dims`` form
        on the side of ``strides``, as far as the axis can still grow (none where they form no run)."""
        run, found = 1, []
        for e in dims:
            if strides[e] != run:
                return found
            run *= sizes[e]
        while run < FOLD_FACTOR * cap and len(dims) + len(found) < MAX_AXIS_DIMS:
            nxt = [d for d in range(n) if d not in used and d not in found and strides[d] == run and sizes[d] > 1]
            if not nxt:
                break
            found.append(nxt[0])
            run *= sizes[nxt[0]]
        return found

    def grow(dims, order, cap, strides, other, other_strides, other_cap):
        if not open_(dims, cap) or (dims is b_dims and whole_b):
            return False
        theirs = chain(other, other_strides, other_cap)
        mine = chain(dims, strides, cap) if theirs else []
        for d in order:
            if d in used:
                continue
            if d in theirs and d not in mine:
                continue  # left to the other axis, whose contiguous run it continues
            dims.append(d)
            used.add(d)
            return True
        return False

    while True:
        grew_b = grow(b_dims, b_order, cap_b, out_strides, a_dims, in_strides, cap_a)
        grew_a = grow(a_dims, a_order, cap_a, in_strides, b_dims, out_strides, cap_b)
        if not (grew_a or grew_b):
            break
    batch = [d for d in range(last, -1, -1) if d not in used]
    while len(batch) > MAX_BATCH_DIMS:  # only when both axes are full
        b_dims.append(batch.pop(0))
    return tuple(a_dims), tuple(b_dims), tuple(batch)


def _a_output_order(sizes, in_strides, by_stride, cap_a: int) -> list:
    """A transposed tile's A candidates: the input's fastest dimension and those that continue its
    contiguous run until it spans a tile width (``cap_a``), then the others (of non-zero input stride) in
    output order, innermost first."""
    order, run = [by_stride[0]], sizes[by_stride[0]]
    for d in by_stride[1:]:
        if in_strides[d] != run or run >= cap_a:
            break
        order.append(d)
        run *= sizes[d]
    return order + [d for d in range(len(sizes) - 2, -1, -1) if d not in order and in_strides[d] > 0]


def axis_block(size: int, first: int, cap: int) -> int:
    """A tile width along an axis: up to cap, or a whole first dimension of up to 2 * cap when it is
    (nearly) a power of two, so that a program covers it without a masked tail (e.g. 256 channels)."""
    ceil = pow2_ceil(first)
    if cap < first <= 2 * cap and (ceil - first) * 8 <= first:
        return ceil
    return pow2_at_most(size, cap)


def tile_launch(sizes, in_strides, kept: bool, vec: tuple, block_b: int, block_a: int, num_warps: int, *,
                whole_b_waste: float, maxnreg: int = 0, offsets32: bool = True, whole_dim_warps: int = 0,
                b_first: bool = False) -> PermuteLaunch:  # fmt: skip
    """The tile kernel's launch (plan kinds rows, copy and tiles) on a tile of about ``block_b`` x
    ``block_a`` elements, for merged sizes and input strides, with (load, store) vector widths that hold
    on the axes it folds (``run_vector_widths``). ``offsets32`` False keeps int64 offsets even where
    ``offset_bounds`` would allow int32; ``whole_dim_warps``, when not 0, the warps of a tile that spans a
    whole first dimension; ``b_first``: a transposed tile's programs step along B whatever the tile
    counts (else along the axis of fewer tiles, so that the programs running at once cover whole runs)."""
    area = block_b * block_a
    cap_a, cap_b = block_a, block_b
    a_dims, b_dims, batch_dims = fold_axes(sizes, in_strides, kept, cap_a, cap_b, whole_b_waste)
    size_a = product(sizes[d] for d in a_dims)
    size_b = product(sizes[d] for d in b_dims)
    block_a = axis_block(size_a, sizes[a_dims[0]], cap_a)
    block_b = axis_block(size_b, sizes[b_dims[0]], cap_b) if b_dims else 1
    if block_a > cap_a:  # a whole first dimension along A: B gets the rest of the area
        block_b = pow2_at_most(size_b, max(1, area // block_a))
    elif block_b > cap_b:
        block_a = pow2_at_most(size_a, max(1, area // block_b))
    else:  # a short axis gives its share of the area to the other one
        block_b = pow2_at_most(size_b, max(block_b, area // block_a))
        block_a = pow2_at_most(size_a, max(block_a, area // block_b))
    warps = whole_dim_warps if whole_dim_warps and (block_a > cap_a or block_b > cap_b) else num_warps
    load, store = min(vec[0], block_a), min(vec[1], block_a if kept else block_b)
    wide = max(size_a, size_b) + max(block_a, block_b) >= INT32_LIMIT
    grid = (cdiv(size_b, block_b), cdiv(size_a, block_a))
    b_fast = (b_first and not kept) or grid[0] < grid[1]
    offsets64 = wide or not offsets32 or offsets_need_64(sizes, in_strides, ((a_dims, block_a), (b_dims, block_b)))
    return PermuteLaunch(
        (block_b, block_a), warps, grid, product(sizes[d] for d in batch_dims),
        a_dims, b_dims, batch_dims, (load, store), kept, wide, b_fast, offsets64, maxnreg, evict_last=True,
    )  # fmt: skip


def store_shift(sizes, out_strides, go: PermuteLaunch, element_size: int, phase: int) -> int:
    """Elements by which a transposed tile launch's B tiles start early (``B_SHIFT``) where the output
    starts ``phase`` bytes past a 32-byte sector, so that every tile's stores still begin on one: two
    tiles then never write halves of one sector, each a partial-sector write (up to twice the time;
    docs/design.md, the stability suite). 0 where the phase is 0 or not a whole number of store vectors, the launch
    stores along A, its B tile is not whole sectors, its output rows lie at more than one phase (an
    output stride past the B axis's contiguous run, or that run, is not whole sectors), or the B tiles
    already cover whole runs and the shift would add one."""
    if go.kept or go.flat or not go.b_dims or phase == 0 or phase % (go.vec[1] * element_size):
        return 0
    if go.blocks[0] * element_size % SECTOR_BYTES:
        return 0
    strides = [out_strides[d] for d in (*go.a_dims, *go.batch_dims)]
    run, k = 1, 0
    while k < len(go.b_dims) and out_strides[go.b_dims[k]] == run:  # the B axis's contiguous run
        run *= sizes[go.b_dims[k]]
        k += 1
    if k < len(go.b_dims):
        strides += [run, *(out_strides[d] for d in go.b_dims[k:])]
    if any(s * element_size % SECTOR_BYTES for s in strides):
        return 0
    shift = phase // element_size
    size_b = product(sizes[d] for d in go.b_dims)
    # Where a B tile holds a whole run, the shift only pays where it adds no B tile (the tile already
    # writes the run in one piece; half-empty extra tiles cost more than they save).
    if run <= go.blocks[0] and cdiv(size_b + shift, go.blocks[0]) > cdiv(size_b, go.blocks[0]):
        return 0
    return shift


def rows_flat_launch(sizes, in_strides, element_size: int, elements: int, num_warps: int) -> PermuteLaunch:
    """The flat rows kernel's launch: the output walked as one contiguous run of 16-byte vectors,
    ``elements`` per program, each vector's input offset decoded from its row (every row holds whole
    vectors)."""
    cap = VECTOR_BYTES // element_size
    block, numel = elements // cap, product(sizes)
    vectors = numel // cap
    top = sum((s - 1) * st for s, st in zip(sizes, in_strides))  # masked vectors decode vector 0
    wide = top >= INT32_LIMIT or numel + block * cap >= INT32_LIMIT
    return PermuteLaunch((block,), num_warps, (cdiv(vectors, block),), a_dims=(len(sizes) - 1,),
                         vec=(cap, cap), kept=True, offsets64=wide, flat=True, evict_last=True)  # fmt: skip


def general_launch(sizes) -> PermuteLaunch:
    """The gather kernel's launch: one lane per output element, GENERAL_BLOCK a program."""
    return PermuteLaunch((GENERAL_BLOCK,), 4, (cdiv(product(sizes), GENERAL_BLOCK),))


def offset_bounds(sizes, in_strides, axes) -> tuple[int, int]:
    """Bounds (input, output) on the element offsets the tile kernel forms for these merged sizes and
    input strides, masked tail lanes included, where ``axes`` holds (dims, block) for each tile axis.

    The largest in-range offset of a side is sum((size - 1) * stride). A masked tail lane decodes a
    linear index past its axis's size by at most ``pad`` = (tiles * block - size) elements; only the
    axis's outermost dimension (which takes no ``%``) then runs over, by at most ``pad`` steps of its
    stride, so the axis adds at most ``pad * max(stride)``."""
    bounds = []
    for strides in (in_strides, contiguous_strides(sizes)):
        top = sum((size - 1) * stride for size, stride in zip(sizes, strides))
        for dims, block in axes:
            size = product(sizes[d] for d in dims)
            top += (cdiv(size, block) * block - size) * max((strides[d] for d in dims), default=0)
        bounds.append(top)
    return bounds[0], bounds[1]


def offsets_need_64(sizes, in_strides, axes) -> bool:
    """Whether an offset of the tile kernel may reach 2**31 on either side (``offset_bounds``)."""
    return max(offset_bounds(sizes, in_strides, axes)) >= INT32_LIMIT


def vector_widths(sizes, in_strides, kept: bool, element_size: int) -> tuple[int, int]:
    """Load and store vector widths (elements) from each side's fastest dimension alone."""
    last = len(sizes) - 1
    a0 = last if kept else by_input_stride(in_strides)[0]
    return run_vector_widths(sizes, in_strides, kept, (a0,), (last,), element_size)


def run_vector_widths(sizes, in_strides, kept: bool, a_dims, b_dims, element_size: int) -> tuple[int, int]:
    """Load and store vector widths (elements) of a tile launch whose axes are ``a_dims`` and ``b_dims``:
    powers of two up to 16 bytes that divide the contiguous run the axis's first dimensions form on that
    side (A's on the input; the stored axis's on the output) and, for loads, every input stride outside
    that run. Wider than ``vector_widths`` where a side's fastest dimension is odd but its run is not."""
    cap = max(1, VECTOR_BYTES // element_size)
    out_strides = contiguous_strides(sizes)

    def run(dims, strides) -> tuple[int, list]:
        length, members = 1, []
        for d in dims:
            if strides[d] != length:
                break
            length *= sizes[d]
            members.append(d)
        return length, members

    length, members = run(a_dims, in_strides)
    load = pow2_part(length, cap) if members else 1
    for d in range(len(sizes)):
        if d not in members:
            load = min(load, pow2_part(in_strides[d], cap))
    store = pow2_part(run(a_dims if kept else b_dims, out_strides)[0], cap)
    return load, store


def b_output_run(sizes, b_dims) -> int:
    """Elements in the output's contiguous run along axis B: B's dimensions (innermost first) for as long
    as each is the output's next outer one."""
    run, last = 1, None
    for d in b_dims:
        if last is not None and d != last - 1:
            break
        run, last = run * sizes[d], d
    return run


def realign_axes(sizes, in_strides, cap_a: int, cap_b: int, align: int = VECTOR_BYTES):
    """The realigned-store kernel's axes for merged sizes and input strides: A the input's contiguous run
    from its stride-1 dimension, B the output's from its fastest dimension, each grown by the dimensions
    that continue its run (B first, so that a dimension both runs want goes to the output's) while it
    spans fewer than ``cap_a`` / ``cap_b`` elements (A also while its run is not a multiple of ``align``:
    the strides past it then are, and the kernel reads every piece with one aligned load) and holds fewer
    than MAX_AXIS_DIMS; the rest is the batch, innermost first. None where there is no such tile: the
    output's fastest dimension is the input's too, no dimension has input stride 1, or the batch holds
    more than MAX_BATCH_DIMS."""
    last = len(sizes) - 1
    by_stride = by_input_stride(in_strides)
    if last < 1 or in_strides[last] == 1 or not by_stride or in_strides[by_stride[0]] != 1:
        return None
    a_dims, b_dims = [by_stride[0]], [last]
    run_a, run_b = sizes[by_stride[0]], sizes[last]
    used = {by_stride[0], last}
    grew = True
    while grew:
        grew = False
        nxt = b_dims[-1] - 1
        if run_b < cap_b and len(b_dims) < MAX_AXIS_DIMS and nxt >= 0 and nxt not in used:
            b_dims.append(nxt)  # (the output is contiguous: nxt's stride there is run_b)
            used.add(nxt)
            run_b *= sizes[nxt]
            grew = True
        if (run_a < cap_a or run_a % align) and len(a_dims) < MAX_AXIS_DIMS:
            more = [d for d in range(last) if d not in used and in_strides[d] == run_a]
            if more:
                a_dims.append(more[0])
                used.add(more[0])
                run_a *= sizes[more[0]]
                grew = True
    batch = [d for d in range(last, -1, -1) if d not in used]
    if len(batch) > MAX_BATCH_DIMS:
        return None
    return tuple(a_dims), tuple(b_dims), tuple(batch)


def realign_aligned(in_strides, go: PermuteLaunch, element_size: int) -> bool:
    """Whether every input piece of the realigned-store launch ``go`` starts on a 16-byte boundary of the
    tensor's start (the strides of B and the batch multiples of 16 bytes; A's pieces start at multiples of
    64 bytes)."""
    return all(in_strides[d] * element_size % VECTOR_BYTES == 0 for d in (*go.b_dims, *go.batch_dims))


def realign_grid(sizes, go: PermuteLaunch, element_size: int) -> tuple[int, int, int]:
    """(A tiles, B tiles, blocks) of the realigned-store kernel on launch ``go``'s axes: B tiles reach past
    the row's end by as many elements as a row's start may lie off a 32-byte boundary, where the last
    rows' pieces end."""
    size_a, size_b = product(sizes[d] for d in go.a_dims), product(sizes[d] for d in go.b_dims)
    step, ta = go.blocks  # (B, A) in elements: realign_tile's
    tiles_a, tiles_b = cdiv(size_a, ta), cdiv(size_b + (REALIGN_HALO - 1) // element_size, step)
    return tiles_a, tiles_b, tiles_a * tiles_b * go.batch


@dataclass(frozen=True)
class ThinLaunch:
    """A thin transpose's launch on the CUDA kernel of ``permute_words.cu``: the output (batch, N, S) is
    contiguous, each of its S input rows per batch index holds N contiguous elements.

    ``rows`` = S (compiled into the kernel); ``lanes`` a row takes (a power of two: a warp moves the rows
    of 32 // lanes consecutive batch indices); ``chunks`` pieces of THIN_ROW_BYTES a row takes; ``batch``
    indices over ``batch_dims`` (merged dimensions, innermost first); ``items`` warp items (chunks x row
    groups); ``blocks`` of THIN_WARPS warps, each striding over the items.
    """

    rows: int
    lanes: int
    chunks: int
    batch: int
    batch_dims: tuple
    items: int
    blocks: int


def thin_refusal(sizes, in_strides, element_size: int) -> str | None:
    """Why the thin-transpose kernel cannot take merged ``sizes`` / ``in_strides`` (output order), or None."""
    last = len(sizes) - 1
    if element_size not in (1, 2):
        return f"it moves 1- and 2-byte elements, got {element_size}-byte ones"
    if last < 1 or in_strides[last] == 1:
        return "it transposes: the output's fastest dimension must not be the input's"
    if in_strides[last - 1] != 1:
        return "the output's second-fastest dimension must have input stride 1"
    s, row = sizes[last], sizes[last - 1] * element_size
    if s < 2 or s * element_size > THIN_MAX_S_BYTES:
        return f"the output's fastest dimension must span 2 to {THIN_MAX_S_BYTES} bytes, not {s * element_size}"
    if row * s < 16:  # a batch index's output shorter than the 16-byte words that write it
        return f"each index of the outer dimensions must own 16 bytes of output or more, not {row * s}"
    if last - 1 > THIN_BATCH_DIMS:
        return f"the outer dimensions must merge to at most {THIN_BATCH_DIMS}, not {last - 1}"
    lanes = 32 if row >= THIN_ROW_BYTES else pow2_ceil(cdiv(row, 16))
    batch = product(sizes[:last - 1])
    items = cdiv(sizes[last - 1], THIN_ROW_BYTES // element_size) * cdiv(batch, 32 // lanes)
    if batch >= INT32_LIMIT or items >= INT32_LIMIT // 2:
        return "its indices must fit 32 bits"
    return None


def thin_launch(sizes, in_strides, element_size: int, max_blocks: int) -> ThinLaunch | None:
    """The thin-transpose launch of merged ``sizes`` / ``in_strides`` (output order), or None where the
    kernel cannot take them (``thin_refusal`` says why): the output's fastest dimension S must be
    transposed (input stride not 1), 2 <= S and S * element_size <= THIN_MAX_S_BYTES, the next one (N)
    must have input stride 1, a batch index's output (N x S) must span 16 bytes or more, the batch at
    most THIN_BATCH_DIMS dimensions, and its indices and the warp items within 32 bits."""
    if thin_refusal(sizes, in_strides, element_size) is not None:
        return None
    last = len(sizes) - 1
    s, n = sizes[last], sizes[last - 1]
    row = n * element_size
    lanes = 32 if row >= THIN_ROW_BYTES else pow2_ceil(cdiv(row, 16))
    chunks = cdiv(n, THIN_ROW_BYTES // element_size)
    batch = product(sizes[:last - 1])
    items = chunks * cdiv(batch, 32 // lanes)
    blocks = min(cdiv(items, THIN_WARPS), max_blocks)
    return ThinLaunch(s, lanes, chunks, batch, tuple(range(last - 2, -1, -1)), items, blocks)


def thin_fill(sizes, go: ThinLaunch, element_size: int) -> float:
    """The share of the lanes' 16-byte pieces of launch ``go`` that hold elements of a row: a row's last
    piece of THIN_ROW_BYTES, or its row groups' lanes where a row is shorter (and the last group's unused
    batch indices)."""
    n = sizes[-2]
    if go.chunks > 1:
        return n / (go.chunks * (THIN_ROW_BYTES // element_size))
    per_group = 32 // go.lanes
    return n * element_size / (16 * go.lanes) * go.batch / (cdiv(go.batch, per_group) * per_group)


def thin_fields(sizes, in_strides, go: ThinLaunch) -> tuple:
    """The kernel's ``ThinParams`` (permute_words.cu), field for field: N, S's input stride, batch, chunks,
    items, lanes, batch dimensions, and their sizes and input strides (innermost first, padded to
    THIN_BATCH_DIMS)."""
    pad = (0,) * (THIN_BATCH_DIMS - len(go.batch_dims))
    return (
        sizes[-2], in_strides[-1], go.batch, go.chunks, go.items, go.lanes, len(go.batch_dims),
        tuple(sizes[d] for d in go.batch_dims) + pad, tuple(in_strides[d] for d in go.batch_dims) + pad,
    )  # fmt: skip


@dataclass(frozen=True)
class SplitLaunch:
    """A split transpose's launch on the CUDA kernels ``permute_split_*`` of ``permute_words.cu``: the
    output's fastest dimension (N elements a row) reads the input at stride S, and its dimension
    ``s_dim`` (S elements, compiled into the kernel as ``rows``) at stride 1, so that each batch index's
    S output rows come from N x S contiguous input elements. ``chunks`` pieces of THIN_ROW_BYTES a row;
    ``batch`` indices over ``batch_dims`` (the other dimensions, innermost first); ``items`` warp items
    (chunks x batch), ``blocks`` of SPLIT_WARPS warps striding over them."""

    rows: int
    s_dim: int
    chunks: int
    batch: int
    batch_dims: tuple
    items: int
    blocks: int


def split_refusal(sizes, in_strides, element_size: int) -> str | None:
    """Why the split-transpose kernel cannot take merged ``sizes`` / ``in_strides`` (output order), or None."""
    last = len(sizes) - 1
    if element_size not in (1, 2):
        return f"it moves 1- and 2-byte elements, got {element_size}-byte ones"
    if last < 1 or in_strides[last] == 1:
        return "it transposes: the output's fastest dimension must not be the input's"
    unit = [d for d in range(last) if in_strides[d] == 1]
    if not unit or sizes[unit[0]] != in_strides[last]:
        return ("the output's fastest dimension must read the input at stride S, where S is the size of "
                "the output dimension of input stride 1")  # fmt: skip
    s = sizes[unit[0]]
    if s * element_size > SPLIT_MAX_S_BYTES:
        return f"the dimension of input stride 1 must span 2 to {SPLIT_MAX_S_BYTES} bytes, not {s * element_size}"
    if last - 1 > SPLIT_BATCH_DIMS:
        return f"the other dimensions must merge to at most {SPLIT_BATCH_DIMS}, not {last - 1}"
    batch = product(sizes[:last]) // s
    if batch >= INT32_LIMIT or cdiv(sizes[last], THIN_ROW_BYTES // element_size) * batch >= INT32_LIMIT // 2:
        return "its indices must fit 32 bits"
    return None


def split_launch(sizes, in_strides, element_size: int, max_blocks: int) -> SplitLaunch | None:
    """The split-transpose launch of merged ``sizes`` / ``in_strides`` (output order), or None where the
    kernel cannot take them (``split_refusal`` says why)."""
    if split_refusal(sizes, in_strides, element_size) is not None:
        return None
    last = len(sizes) - 1
    s_dim = next(d for d in range(last) if in_strides[d] == 1)
    chunks = cdiv(sizes[last], THIN_ROW_BYTES // element_size)
    batch = product(sizes[:last]) // sizes[s_dim]
    items = chunks * batch
    return SplitLaunch(sizes[s_dim], s_dim, chunks, batch, tuple(d for d in range(last - 1, -1, -1) if d != s_dim),
                       items, min(cdiv(items, SPLIT_WARPS), max_blocks))  # fmt: skip


def split_fill(sizes, go: SplitLaunch, element_size: int) -> float:
    """The share of the lanes' 16-byte pieces of launch ``go`` that hold elements of a row (a row's last
    piece of THIN_ROW_BYTES is partly empty)."""
    return sizes[-1] / (go.chunks * (THIN_ROW_BYTES // element_size))


def split_fields(sizes, in_strides, go: SplitLaunch) -> tuple:
    """The kernel's ``SplitParams`` (permute_words.cu), field for field: N, the S dimension's output stride,
    chunks, items, the batch dimensions, padding, and their sizes, input and output strides (innermost
    first, padded to SPLIT_BATCH_DIMS)."""
    out_strides = contiguous_strides(sizes)
    pad = (0,) * (SPLIT_BATCH_DIMS - len(go.batch_dims))
    return (
        sizes[-1], out_strides[go.s_dim], go.chunks, go.items, len(go.batch_dims), 0,
        tuple(sizes[d] for d in go.batch_dims) + pad, tuple(in_strides[d] for d in go.batch_dims) + pad,
        tuple(out_strides[d] for d in go.batch_dims) + pad,
    )  # fmt: skip


@dataclass(frozen=True)
class ShiftLaunch:
    """A realigned row copy's launch on ``permute_words.cu``'s ``permute_shift_rows``: the output, ``rows``
    rows of ``row`` bytes, contiguous; each row's bytes contiguous in the input, the rows' input offsets
    decoded over ``outer_dims`` (merged dimensions, innermost first); ``items`` warp items of
    SHIFT_ITEM_BYTES of output (enough for any output alignment), ``blocks`` of SHIFT_WARPS warps striding
    over them."""

    row: int
    rows: int
    outer_dims: tuple
    items: int
    blocks: int


def shift_refusal(sizes, in_strides, element_size: int) -> str | None:
    """Why the realigned row copy cannot take merged ``sizes`` / ``in_strides`` (output order), or None."""
    last = len(sizes) - 1
    if last < 1 or in_strides[last] != 1:
        return "it copies rows: the output's fastest dimension must be the input's contiguous one"
    row = sizes[last] * element_size
    if not SHIFT_ROW_BYTES[0] <= row < SHIFT_ROW_BYTES[1]:
        return f"rows must span {SHIFT_ROW_BYTES[0]} bytes to 2**30 bytes, not {row}"
    if last > SHIFT_OUTER_DIMS:
        return f"the outer dimensions must merge to at most {SHIFT_OUTER_DIMS}, not {last}"
    if min(sizes[:last]) < 2:  # (the planner drops them; the row decode divides by each size)
        return "the outer dimensions must have sizes of 2 or more"
    if product(sizes[:last]) >= INT32_LIMIT:
        return "its row indices must fit 31 bits"
    return None


def shift_launch(sizes, in_strides, element_size: int, max_blocks: int) -> ShiftLaunch | None:
    """The realigned row copy's launch of merged ``sizes`` / ``in_strides`` (output order), or None where
    it cannot take them (``shift_refusal`` says why)."""
    if shift_refusal(sizes, in_strides, element_size) is not None:
        return None
    last = len(sizes) - 1
    row, rows = sizes[last] * element_size, product(sizes[:last])
    items = cdiv(cdiv(row * rows + 30, 16), SHIFT_ITEM_BYTES // 16)  # words from any of 16 output alignments
    blocks = min(cdiv(items, SHIFT_WARPS), max_blocks)
    return ShiftLaunch(row, rows, tuple(range(last - 1, -1, -1)), items, blocks)


def shift_fields(sizes, in_strides, go: ShiftLaunch, element_size: int) -> tuple:
    """The kernel's ``ShiftParams`` (permute_words.cu), field for field: R, the output's bytes, items, the
    grid's stride in rows and bytes past them, the outer dimensions, R's division constants, each outer
    size's (its outermost's unused), and the outer sizes and input strides in bytes (innermost first,
    padded to SHIFT_OUTER_DIMS)."""
    step_rows, step_cols = divmod(SHIFT_ITEM_BYTES * SHIFT_WARPS * go.blocks, go.row)
    nn = len(go.outer_dims)
    outer = [sizes[d] for d in go.outer_dims]
    divisors = [magic_divisor(s) for s in outer[:-1]] + [(0, 0)]
    pad = SHIFT_OUTER_DIMS - nn
    row_magic, row_shift = magic_divisor(go.row)
    return (
        go.row, go.row * go.rows, go.items, step_rows, step_cols, nn, row_magic, row_shift,
        tuple(m for m, _ in divisors) + (0,) * pad, tuple(s for _, s in divisors) + (0,) * pad,
        tuple(outer) + (0,) * pad, tuple(in_strides[d] * element_size for d in go.outer_dims) + (0,) * pad,
    )  # fmt: skip
