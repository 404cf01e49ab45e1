"""Policy: the tile table per element size and shape class, ``auto``'s backend, and the N-D permute and
cast tiles, chosen among the planner's options (``tileflip.plan``).

The 2-D table is measured on the GPU machine (``tileflip bench --suite tune``; ``auto`` from
``tileflip bench --suite 2d``) and committed as ``data/tuning-h200.json``: nothing is tuned at run time.
Until a class is measured the defaults below apply. A shape class depends only on sizes, never on values
that Triton specializes differently, so a new shape of a known class reuses the compiled kernel of its
class. Where each number comes from: ``docs/design.md`` (Tuning table).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

from tileflip.plan import launch as geometry
from tileflip.plan.grid import TileConfig
from tileflip.plan.launch import (
    VECTOR_BYTES,
    PermuteLaunch,
    ShiftLaunch,
    SplitLaunch,
    ThinLaunch,
    product,
    realign_tile,
)

TABLE_FILE = Path(__file__).with_name("data") / "tuning-h200.json"

# ---------------------------------------------------------------------------------------------------
# 2-D transposes
# ---------------------------------------------------------------------------------------------------

DEFAULT_TILES = {
    1: TileConfig(128, 256, 16),
    2: TileConfig(128, 128, 16),
    4: TileConfig(64, 64, 8),
    8: TileConfig(64, 64, 8),
}

TINY_BYTES = 4 << 20  # below this a transpose is launch-bound rather than bandwidth-bound
THIN_SIDE = 64  # a side shorter than this makes a large shape "thin": a square tile would be mostly masked
TINY_THIN_SIDE = 16  # under TINY_BYTES: from 16 up a 32 x 32 tile is at least half used
SKINNY_SIDE = 1024  # a large shape with a side shorter than this is "skinny" (e.g. 65536 x 256)
THIN_TILE_ELEMENTS = 4096  # 16-byte accesses along the long side, a few hundred programs, on 4 warps
THIN_WARPS = 4


def shape_class(M: int, N: int, element_size: int, row_stride: int = 0) -> str:
    """The class ``auto`` is tabled by. Under TINY_BYTES (launch-bound): ``sliver`` (a side under 8),
    ``thin`` (a side under TINY_THIN_SIDE) or ``tiny``; else ``thin-large`` (a side under THIN_SIDE),
    ``unaligned`` (an input ``row_stride`` that is not a multiple of 16 elements: e.g. 8192 x 8191, and
    any transposed view, whose row stride is 1), ``skinny`` (a side under SKINNY_SIDE) or ``large``."""
    short = M if M < N else N
    if M * N * element_size < TINY_BYTES:
        return "sliver" if short < 8 else ("thin" if short < TINY_THIN_SIDE else "tiny")
    if short < THIN_SIDE:
        return "thin-large"
    if row_stride % 16:
        return "unaligned"
    return "skinny" if short < SKINNY_SIDE else "large"


def thin_config(M: int, N: int) -> TileConfig:
    """The tile of a thin shape: the short side covered by one power of two (>= 2), the long side as
    long as THIN_TILE_ELEMENTS allows. Its block sizes depend only on that power of two and on which
    side is short, so each thin class compiles once."""
    return _thin(M < N, 1 << max((M if M < N else N) - 1, 1).bit_length())


@lru_cache(maxsize=64)
def _thin(wide: bool, short: int) -> TileConfig:
    long = max(THIN_TILE_ELEMENTS // short, 16)
    return TileConfig(short, long, THIN_WARPS) if wide else TileConfig(long, short, THIN_WARPS)


@lru_cache(maxsize=1)
def table() -> dict:
    """The committed table: ``{"triton": {"<size>:<class>": {"config": [...]}}, "auto": {...}}``."""
    if TABLE_FILE.exists():
        return json.loads(TABLE_FILE.read_text())
    return {"triton": {}, "auto": {}}


@lru_cache(maxsize=256)
def table_config(element_size: int, cls: str) -> TileConfig:
    """The table's tile for a class (its ``large`` entry where the class has none, else the default)."""
    entries = table()["triton"]
    entry = entries.get(f"{element_size}:{cls}") or entries.get(f"{element_size}:large")
    return TileConfig(*entry["config"]) if entry else DEFAULT_TILES[element_size]


_THIN_CLASSES = frozenset({"sliver", "thin", "thin-large"})  # tiled by thin_config, not by the table


def triton_config(element_size: int, shape: tuple | None = None, row_stride: int = 0) -> TileConfig:
    """The Triton tile for an element size, and for a shape's class when one is given: the table's entry
    for its ``shape_class``, or ``thin_config`` for a thin class."""
    if shape is None:
        return table_config(element_size, "large")
    M, N = shape
    cls = shape_class(M, N, element_size, row_stride)
    if cls in _THIN_CLASSES:
        return thin_config(M, N)
    return table_config(element_size, cls)


def auto_backend(x) -> str:
    """The backend ``backend="auto"`` picks for a 2-D CUDA tensor: the measured fastest for its class."""
    if x.dim() != 2:  # the table is measured on 2-D cases; N-D data moves through the permute kernels
        return "triton"
    M, N = x.shape
    return auto_choice(x.element_size(), shape_class(M, N, x.element_size(), x.stride(0)))


def auto_for(M: int, N: int, element_size: int, row_stride: int = 0) -> str:
    """``auto_backend`` from sizes already read (the launch path's form)."""
    return auto_choice(element_size, shape_class(M, N, element_size, row_stride))


@lru_cache(maxsize=64)
def auto_choice(element_size: int, cls: str) -> str:
    return table()["auto"].get(f"{element_size}:{cls}", "triton")


# ---------------------------------------------------------------------------------------------------
# fp8 cast-transpose
# ---------------------------------------------------------------------------------------------------

# By input element size. 2-byte inputs walk programs in bands of 4 tile rows: 91.2% / 88.9% of copy on
# bf16 16384^2 / 8192 x 28672 against 90.2% / 88.0% row by row (H200); bands of 8 and 16 were no better.
CAST_TILES = {
    2: TileConfig(128, 128, 8, 4),
    4: TileConfig(128, 128, 16),
}


def cast_config(element_size: int) -> TileConfig:
    return CAST_TILES[element_size]


# ---------------------------------------------------------------------------------------------------
# Block-scaled quantization
# ---------------------------------------------------------------------------------------------------

# (block_m, block_k, num_warps) of the fused kernel by group size and the outputs asked for; a tile holds
# whole groups along each output's blocked dimension. Each is the fastest of a sweep of 3 to 7 tiles on
# bf16 8192 x 28672 (H200); 1 and 2 warps, and 8 or 16 where the column-wise output is asked for, lost.
QUANTIZE_TILES = {
    # group: (both outputs, row-wise only, column-wise only)
    128: ((128, 128, 4), (16, 256, 4), (128, 64, 4)),
    32: ((128, 64, 4), (32, 256, 8), (64, 64, 4)),
    16: ((64, 64, 4), (8, 256, 2), (32, 64, 4)),
}
SQUARE_TILE = (128, 128, 4)


# The outputs that auto gives the CUDA C++ quantizer (tileflip.kernels.cuda.quantize) where it can take the
# call; the rest run the Triton kernel. Fractions of copy, Triton -> CUDA C++, bf16 8192 x 28672 and
# 16384 x 16384 (H200; tileflip bench --suite quantize): fp8_1x128 both 0.52 -> 0.91, column-wise 0.92 ->
# 0.95; fp8_128x128 both 0.90 -> 0.91, column-wise 0.92 -> 0.95; mxfp8 both 0.71-0.74 -> 0.84-0.86 (blocked
# scales 0.66 -> 0.91), column-wise 0.81 -> 0.89-0.90; nvfp4 both 0.27 -> 0.40, row-wise 0.50 -> 0.65,
# column-wise 0.35 -> 0.62. Row-wise fp8_1x128 and mxfp8 stay with Triton: 1.01 against
# 1.01, 0.99 against 0.96-0.97.
QUANTIZE_CUDA = frozenset({("fp8_1x128", "both"), ("fp8_1x128", "columnwise"), ("fp8_128x128", "both"),
                           ("fp8_128x128", "columnwise"), ("fp8_128x128", "rowwise"), ("mxfp8", "both"),
                           ("mxfp8", "columnwise"), ("nvfp4", "both"), ("nvfp4", "rowwise"),
                           ("nvfp4", "columnwise")})  # fmt: skip


# The recipes whose plain scales the CUDA C++ quantizer writes in the blocked layout, for a permute of
# 4-byte words to put in place: a tile owns only 4 bytes of each mxfp8 scale row and column, and such
# partial-sector writes took mxfp8 both from 0.895 (the same bytes to blocked addresses) to 0.76 of copy
# (bf16 8192 x 28672, H200); this route 0.82-0.84. nvfp4's 8-byte rows cost nothing measurable, and the
# route took it from 0.39 to 0.37.
QUANTIZE_PLAIN_VIA_BLOCKED = frozenset({"mxfp8"})


def quantize_prefers_cuda(recipe: str, rowwise: bool, columnwise: bool) -> bool:
    outputs = "both" if rowwise and columnwise else ("rowwise" if rowwise else "columnwise")
    return (recipe, outputs) in QUANTIZE_CUDA


def quantize_tile(block: int, square: bool, rowwise: bool, columnwise: bool) -> tuple:
    if square:
        return SQUARE_TILE
    both, row, col = QUANTIZE_TILES[block]
    return both if rowwise and columnwise else (row if rowwise else col)


# ---------------------------------------------------------------------------------------------------
# N-D permutes: the tile kernel's tile, warps, offsets and program order per launch
# ---------------------------------------------------------------------------------------------------

# Base tiles (B x A, warps) when both sides move 16-byte vectors: the 2-D large-class tiles, but 1-byte
# elements take 128 x 256 (wider along A, the input's fastest axis).
PERMUTE_TILES = {
    1: TileConfig(128, 256, 16),
    2: TileConfig(128, 128, 16),
    4: TileConfig(64, 128, 16),
    8: TileConfig(32, 128, 8, 1, 0),
}
# Element sizes whose transposed tiles step along B, down a column of input tiles (int8 random-suite
# median 0.888 -> 0.901 of copy; for every size it lost, 0.885 -> 0.878).
B_FIRST_SIZES: frozenset = frozenset({1})
# Narrower vectors: (vector bytes below which, tile halvings, warps, int32 offsets allowed), first match.
# int32 offsets halve the 4-warp quarter tiles' registers (suite median 0.37 -> 0.58 of copy); on the
# 8-warp half tiles they lost (0.82 -> 0.72), so that step keeps int64.
NARROW_STEPS = ((3, 2, 4, True), (VECTOR_BYTES, 1, 8, False))
# Transposed tiles that load 16-byte vectors and store narrower ones (bf16 (46,188,88,88) 0.86 -> 0.98;
# where the loads are the narrower side the same step lost, e.g. int8 (3840,360,56) 0.90 -> 0.61).
WIDE_LOAD_STEP = (VECTOR_BYTES, 2, 8, True)
# Tiles of their own (B, A, warps) for WIDE_LOAD_STEP launches, by (element size, store bytes)
# (int8 (11,39,29,21,42,24): 0.41 -> 0.67 of copy on the 1-byte-store tile).
WIDE_LOAD_TILES = {(1, 1): (1024, 32, 4), (1, 2): (256, 64, 4), (2, 4): (64, 128, 4)}
# Keys whose launches step along A: a tile 64 bytes wide leaves each input row to many programs, whose
# neighbours along A share sectors (0.59 -> 0.65 of copy).
WIDE_LOAD_A_FAST = frozenset({(1, 1)})
# A launch takes WIDE_LOAD_TILES' tile only where B is one output run or B's output run is at least
# this fraction of the tile's B side (the 1-byte-store tile ran at 0.07-0.09 of copy on runs of 15-231).
WIDE_LOAD_MIN_RUN = {(1, 1): 1.0, (1, 2): 0.25, (2, 4): 1.0}
# Keys that keep int64 offsets: with int32 ones ptxas spilled the 1-byte-store tile (0.06 of copy, 0.70
# with int64).
WIDE_LOAD_OFFSETS64 = frozenset({(1, 1)})
# Keys that pass REGISTER_CAP, ptxas's own limit made explicit: without it ptxas 12.8 can answer a demand
# above 255 registers with 32 registers and kilobytes of spills. (Capping every launch lost: suite
# median 0.954 -> 0.946.)
WIDE_LOAD_CAPPED = frozenset({(1, 1)})
REGISTER_CAP = 255
# Transposed 4-byte tiles whose narrower side moves 4 or 16 bytes: (B, A, warps) by vector bytes.
TILES_4B = {4: (64, 32, 4), 16: (64, 64, 16)}
# Warps of a transposed 16-byte-vector tile that spans a whole first dimension (fp16 NCHW -> NHWC 0.973
# -> 0.986 of copy on 4 warps against 16).
WHOLE_DIM_WARPS = {2: 4}
# A transposed tile's B holds one whole output dimension with at most this fraction of its block masked
# (bf16 (39,28,16,72,39) 0.81 -> 0.99 of copy; at 0.3 fp32 (23,21,112,32,16) fell 0.84 -> 0.58).
WHOLE_B_WASTE = 0.25
# A kept inner dimension shorter than this many bytes, by element size, is tiled as moved (fp32 12-byte
# runs went from 0.38 to 0.83 of copy; fp32 runs of 16, 24 and 48 bytes from 0.28, 0.37, 0.52 to 0.96,
# 0.92, 0.92, where bf16 and int8 runs of 16 and 48 bytes would lose 0.17 to 0.35).
SHORT_RUN_BYTES = {1: 16, 2: 16, 4: 64, 8: 64}
# Kept runs of 4-byte elements (8-byte rows are moved as 4-byte words) under NARROW_RUN_BYTES that are not
# whole 16-byte vectors are tiled as moved too: the kept tile then moves narrower vectors (fp32 runs of
# 84 bytes 0.61 -> 0.83 of copy, of 120 bytes 0.76 -> 0.80; 64- and 128-byte runs keep their 16-byte
# vectors and lose as moved: 0.92 -> 0.75).
NARROW_RUN_BYTES = 128
# Rows plans are moved as elements of ROW_WORD_BYTES, or of 2 or 1 bytes where the kept run, a stride or
# a pointer is not a multiple of 4 bytes (OneFlow's permute reinterprets an unchanged innermost run as a
# wider element the same way; a run of the word's size becomes one element). On (n, n, R) by (1, 0, 2),
# H200: int8 runs of 256 B to 4 KiB 0.77 -> 0.99 of copy, of 2, 4 and 8 B 0.41, 0.68, 0.72 -> 0.72,
# 0.95, 0.98; bf16 runs of 4 and 8 B 0.80, 0.83 -> 0.96, 0.98; 8-byte words measured 0.01 under 4-byte
# ones on long runs, and a run of 8 bytes as one element transposes 8-byte elements, which lost on thin
# sides (bf16 (1088, 4672, 2, 4) by (0, 2, 1, 3): 0.68 -> 0.59).
ROW_WORD_BYTES = 4
# Rows plans with 16-byte vectors and kept runs of at least ROWS_FLAT_MIN_BYTES run the flat rows kernel,
# ROWS_FLAT_ELEMENTS a program on ROWS_FLAT_WARPS warps (bf16 runs of 32 bytes fell 0.92 -> 0.62 on it, fp32
# runs of 64 bytes 0.92 -> 0.71; runs of 128 and 192 bytes: 0.97-0.99 -> 0.98-1.01; of 96 bytes: 1.00 -> 0.96).
# Where the output starts off a 32-byte sector, shorter kept runs take it too: the kept tile's warps then
# write every run's first and last sector in halves (fp8 runs of 128 bytes: 0.69 against 1.02; fp32 runs of
# 64 bytes: 0.48 against 0.73; docs/design.md, the stability suite).
ROWS_FLAT_MIN_BYTES = 128
ROWS_FLAT_ELEMENTS = 1024
ROWS_FLAT_WARPS = 4
# The strategy model of 1- and 2-byte transposed tiles: each strategy's predicted fraction of copy, the
# larger taken; by element size. Each figure is the median over the cases of that size (H200; 1-byte: the
# permute-wide suite's; 2-byte: the permute-wide and stability suites' that the kernel can take): of the
# Triton tile kernel where it moves 16-byte vectors on both sides, or narrower ones (1-byte: 72 cases;
# 2-byte: 13 and 68); of the realigned-store CUDA kernel per share of its tiles filled (``realign_fill``;
# cases over half filled), where every input piece starts on a 16-byte boundary (1-byte: 16 cases;
# 2-byte: 20) or not (33; 27). Timed, auto is within 5% of the faster of the two on 61 of the 71 1-byte
# cases the kernel can take, and the 2-byte figures pick it on 77 of the 81 they were taken from
# (docs/design.md, Planner). Where only the tile's stores are 16-byte vectors, the medians of the strategy
# sweep's 8 1-byte and 8 2-byte cases of that class: 0.66 / 0.90 (fit on either half of the sweep's cases,
# scored on the other, auto came within 5% of the fastest on 0-2 more cases of ~147, never fewer).
TILE_FRACTION = {1: {"both": 0.95, "stores": 0.66, "narrower": 0.48},
                 2: {"both": 0.93, "stores": 0.90, "narrower": 0.64}}  # fmt: skip
REALIGN_FRACTION = {1: {True: 0.77, False: 0.74}, 2: {True: 0.81, False: 0.79}}
REALIGN_SIZES = (1, 2)  # element sizes the realigned-store and thin-transpose kernels move
REALIGN_WARPS = 9  # the kernel's 288 threads
# Thin transposes (plans the thin-transpose kernel can take: the output's fastest dimension at most 16
# bytes, against an input-contiguous one), by element size: the thin kernel's fraction of copy per share
# of its lanes' pieces filled (``thin_fill``), and the Triton tile kernel's, without a batch (the plan
# merges to (N, S)) or with one. Medians of the 14 1- and 2-byte permute-wide and stability cases of
# this class (H200): the tile kernel without a batch 0.04-0.89 (1-byte) and 0.90-1.05 (2-byte), with a
# batch 0.09-0.62 and 0.13-0.28; the thin kernel 0.53-0.91. Grid: 8 blocks of 4 warps for each of an
# H200's 132 SMs, striding over the items.
THIN_FRACTION = {1: 0.82, 2: 0.77}
TILE_THIN_FRACTION = {1: {False: 0.74, True: 0.18}, 2: {False: 0.95, True: 0.24}}
THIN_BLOCKS = 132 * 8
# Split transposes (the thin kernel's mirror: the input's contiguous dimension, at most 8 bytes, interleaves
# the output's rows), by element size: the split kernel's fraction of copy per share of its lanes' pieces
# filled (``split_fill``), and the Triton tile kernel's without a batch (one index of the other
# dimensions) or with one. Medians over the 11 permute-wide cases of this class and four image and
# complex-plane layouts (H200): the split kernel int8 0.73-0.94, bf16 0.71-0.97; the tile kernel with a
# batch int8 0.41-0.54, bf16 0.59-0.81, without one int8 0.44-0.96 (0.96 where S * E is 4), bf16 0.92-1.01.
SPLIT_FRACTION = {1: 0.84, 2: 0.90}
TILE_SPLIT_FRACTION = {1: {False: 0.54, True: 0.46}, 2: {False: 0.96, True: 0.68}}
# The thin kernel is weighed only where the tile kernel stores fewer bytes than this at a time: the thin
# figures come from such cases (1 to 4 bytes), and where the tile's axes form 8-byte stores it ran at 0.87
# against the thin kernel's 0.36 (int8 (7, 46, 8, 72, 38, 10) by (0, 3, 4, 1, 5, 2)).
THIN_TILE_STORE_BYTES = 8
# Rows plans (after element_width): the predicted fraction of copy of the Triton rows tile by the bytes
# every kernel access can take (row_alignment: 16, 8, 4, 2, 1), or ROWS_MOVED_FRACTION where the kept run is
# tiled as moved (short_kept_run), and of the realigned row copy (cuda-shift) by the kept run's bytes, from
# the largest bound at or under it. H200 medians over (n, n+3, R) by (1, 0, 2) and (n .. n+3, R) by
# (2, 0, 3, 1, 4), R from 17 to 4098 bytes, and the permute-wide suite's rows cases: the tile 0.95-1.09
# at 16, 0.77-0.96 at 8 (8 cases), 0.61-0.88 at 4 (3), 0.49-0.84 at 2, 0.29-0.55 at 1, 0.75-0.96 moved
# (8, of 4-byte elements); the row copy 0.40-0.87 up to 4 KiB, 0.86-0.94 on runs of 8 KiB and more
# (0.82-0.94 on rows that are 16-byte aligned, where the tile is ahead but for one 0.76 case). Narrow runs
# tiled as moved (NARROW_RUN_BYTES, 84 and 120 bytes) ran at 0.80-0.83, under 0.88 but far over the row copy.
ROWS_TILE_FRACTION = {16: 0.98, 8: 0.86, 4: 0.84, 2: 0.65, 1: 0.42}
ROWS_MOVED_FRACTION = 0.88
SHIFT_FRACTION = ((0, 0.44), (32, 0.48), (64, 0.51), (128, 0.54), (256, 0.57), (512, 0.60), (1024, 0.72),
                  (2048, 0.80), (4096, 0.84), (8192, 0.90))  # fmt: skip
# The realigned row copy's grid: two waves of the 6 blocks of 4 warps an SM holds, striding over 2 KiB items.
SHIFT_BLOCKS = 132 * 12


def narrow_step(vector_bytes: int, load_bytes: int = 0, kept: bool = True, element_size: int = 0):
    """The step (below, halvings, warps, int32 offsets allowed) for a launch whose narrower side moves
    ``vector_bytes`` per vector and whose loads ``load_bytes``: WIDE_LOAD_STEP for a transposed tile that
    loads 16-byte vectors and stores narrower ones (but where TILES_4B sets the tile), else the first
    NARROW_STEPS entry that applies; None for 16-byte vectors on both sides."""
    wide_load = not kept and load_bytes >= VECTOR_BYTES > vector_bytes
    if wide_load and tiles_4b(element_size, vector_bytes, kept) is None:
        return WIDE_LOAD_STEP
    for step in NARROW_STEPS:
        if vector_bytes < step[0]:
            return step
    return None


def permute_config(element_size: int, vector_bytes: int = VECTOR_BYTES, kept: bool = True,
                   load_bytes: int = 0, store_bytes: int = 0, wide_tiles: bool = True) -> TileConfig:  # fmt: skip
    """The tile area and warps of the N-D tile kernel: PERMUTE_TILES when both sides move 16-byte
    vectors; with narrower vectors the step ``narrow_step`` gives (WIDE_LOAD_TILES' tile where it has one
    for the element size and the stores as launched); transposed 4-byte tiles follow TILES_4B.
    ``wide_tiles`` False: the step's own tile in place of WIDE_LOAD_TILES'."""
    config = PERMUTE_TILES[element_size]
    step = narrow_step(vector_bytes, load_bytes, kept, element_size)
    tile = tiles_4b(element_size, vector_bytes, kept)
    wide_key = wide_load_key(step, element_size, vector_bytes, kept, store_bytes) if wide_tiles else None
    if wide_key is not None:
        tile = WIDE_LOAD_TILES[wide_key]
    if tile is not None:
        return config._replace(block_m=tile[0], block_n=tile[1], num_warps=tile[2])
    if step is None:
        return config
    _, halvings, warps, _ = step
    return _halve(config, halvings)._replace(num_warps=warps)


def wide_load_key(step, element_size: int, vector_bytes: int, kept: bool, store_bytes: int) -> tuple | None:
    """The WIDE_LOAD_TILES key whose tile a launch of narrow step ``step`` takes, else None."""
    if step is not WIDE_LOAD_STEP or tiles_4b(element_size, vector_bytes, kept) is not None:
        return None
    key = (element_size, store_bytes or vector_bytes)
    return key if key in WIDE_LOAD_TILES else None


def tiles_4b(element_size: int, vector_bytes: int, kept: bool) -> tuple | None:
    """TILES_4B's (B, A, warps) for a launch it covers (transposed 4-byte tiles), else None."""
    if kept or element_size != 4:
        return None
    return TILES_4B.get(vector_bytes)


def _halve(config: TileConfig, halvings: int) -> TileConfig:
    """``config`` with its larger side halved ``halvings`` times."""
    bm, bn = config.block_m, config.block_n
    for _ in range(halvings):
        if bm >= bn:
            bm //= 2
        else:
            bn //= 2
    return config._replace(block_m=bm, block_n=bn)


def row_alignment(p, element_size: int, alignment: int) -> int:
    """The largest power of two, at most 16, that divides rows plan ``p``'s kept run, every input stride and
    ``alignment`` (that of both pointers), in bytes: the widest access every row allows."""
    last = len(p.sizes) - 1
    g = math.gcd(p.sizes[last] * element_size, alignment, *(s * element_size for s in p.in_strides[:last]))
    return min(g & -g, VECTOR_BYTES)


def element_width(p, element_size: int, alignment: int) -> int:
    """The element size plan ``p`` is moved in: for a rows plan, ROW_WORD_BYTES or the row alignment where
    that is less (``tileflip.plan.regrouped`` re-plans it); else ``element_size``."""
    if p.kind != "rows":
        return element_size
    return min(ROW_WORD_BYTES, row_alignment(p, element_size, alignment))


def short_kept_run(sizes, in_strides, element_size: int) -> bool:
    """Whether the output's fastest dimension is also the input's contiguous one but runs shorter than
    SHORT_RUN_BYTES (or, for 4- and 8-byte elements, than NARROW_RUN_BYTES without being whole 16-byte
    vectors): the launch then transposes, axis B starting from it, so that stores run over it and the
    output's next dimensions together instead of a few bytes at a time."""
    last = len(sizes) - 1
    if last < 1 or in_strides[last] != 1:
        return False
    run = sizes[last] * element_size
    narrow = element_size >= 4 and run < NARROW_RUN_BYTES and run % VECTOR_BYTES
    return (run < SHORT_RUN_BYTES[element_size] or bool(narrow)) and bool(geometry.by_input_stride(in_strides))


def permute_launch(p, element_size: int, *, widen: bool = True, off_sector: bool = False) -> PermuteLaunch:
    """The launch of ``p`` (a ``tileflip.plan.PermutePlan`` of kind rows, copy, tiles or general);
    ``off_sector``: the output does not start on a 32-byte sector. ``widen`` False: vectors from each
    side's fastest dimension alone, never from the runs the axes form."""
    sizes = p.sizes
    if p.kind == "general":
        return geometry.general_launch(sizes)
    if p.kind not in ("rows", "copy", "tiles"):
        raise ValueError(f"plan kind {p.kind!r} has no permute-kernel launch")
    kept = p.kind == "copy" or (p.kind == "rows" and not short_kept_run(sizes, p.in_strides, element_size))
    vec = geometry.vector_widths(sizes, p.in_strides, kept, element_size)
    cap = VECTOR_BYTES // element_size
    if (p.kind == "rows" and kept and vec == (cap, cap) and len(sizes) >= 2
            and (sizes[-1] * element_size >= ROWS_FLAT_MIN_BYTES or off_sector)):  # fmt: skip
        return geometry.rows_flat_launch(sizes, p.in_strides, element_size, ROWS_FLAT_ELEMENTS, ROWS_FLAT_WARPS)

    def launch(vec, tile_vec, wide_tiles=True):
        """The launch of vectors ``vec`` on the tile chosen for vectors ``tile_vec``."""
        vector_bytes = min(tile_vec) * element_size
        load_bytes, store_bytes = vec[0] * element_size, vec[1] * element_size
        step = narrow_step(vector_bytes, load_bytes, kept, element_size)
        config = permute_config(element_size, vector_bytes, kept, load_bytes, store_bytes, wide_tiles)
        whole = WHOLE_DIM_WARPS.get(element_size, 0) if step is None and not kept else 0
        wide_key = wide_load_key(step, element_size, vector_bytes, kept, store_bytes) if wide_tiles else None
        maxnreg = config.maxnreg or (REGISTER_CAP if wide_key in WIDE_LOAD_CAPPED else 0)
        go = geometry.tile_launch(
            sizes, p.in_strides, kept, vec, config.block_m, config.block_n, config.num_warps,
            whole_b_waste=WHOLE_B_WASTE, maxnreg=maxnreg,
            offsets32=(step is None or step[3]) and wide_key not in WIDE_LOAD_OFFSETS64,
            whole_dim_warps=whole, b_first=element_size in B_FIRST_SIZES and wide_key not in WIDE_LOAD_A_FAST,
        )  # fmt: skip
        if wide_key in WIDE_LOAD_MIN_RUN:
            run = geometry.b_output_run(sizes, go.b_dims)
            if run < product(sizes[d] for d in go.b_dims) and run < go.blocks[0] * WIDE_LOAD_MIN_RUN[wide_key]:
                return launch(vec, tile_vec, wide_tiles=False)  # B folds output runs short of the tile
        return go

    go = launch(vec, vec)
    if not widen:
        return go
    wider = geometry.run_vector_widths(sizes, p.in_strides, kept, go.a_dims, go.b_dims, element_size)
    if wider == vec or wider[0] < vec[0] or wider[1] < vec[1]:
        return go
    # the wider vectors choose the tile where both sides reach 16 bytes; the tile's axes must still form
    # runs that hold them (a tile chosen for every widening lost: int8 (7,46,8,72,38,10) 0.83 -> 0.64)
    go_wider = launch(wider, wider if min(wider) * element_size >= VECTOR_BYTES else vec)
    held = geometry.run_vector_widths(sizes, p.in_strides, kept, go_wider.a_dims, go_wider.b_dims, element_size)
    return go_wider if held[0] >= wider[0] and held[1] >= wider[1] else go


def realign_candidate(p, element_size: int) -> PermuteLaunch | None:
    """The launch of plan ``p`` (kind tiles or transpose2d) on the realigned-store CUDA kernel where the
    kernel can take it, else None: 1- and 2-byte elements, axes from ``realign_axes`` (A one input run, B
    one output run), indices within 32 bits. ``blocks`` is the kernel's (B, A) tile in elements."""
    if element_size not in REALIGN_SIZES or p.kind not in ("tiles", "transpose2d"):
        return None
    sizes = p.sizes
    ta, step = realign_tile(element_size)
    axes = geometry.realign_axes(sizes, p.in_strides, 4 * ta, 4 * step, VECTOR_BYTES // element_size)
    if axes is None:
        return None
    a_dims, b_dims, batch_dims = axes
    if max(product(sizes[d] for d in a_dims), product(sizes[d] for d in b_dims)) >= 2**31:
        return None
    go = PermuteLaunch(
        (step, ta), REALIGN_WARPS, (0, 0), product(sizes[d] for d in batch_dims),
        a_dims, b_dims, batch_dims, (VECTOR_BYTES // element_size,) * 2,
    )  # fmt: skip
    tiles_a, tiles_b, blocks = geometry.realign_grid(sizes, go, element_size)
    return replace(go, grid=(tiles_b, tiles_a)) if blocks < 2**31 else None


def realign_fill(p, go) -> float:
    """The share of the realigned-store kernel's tiles that launch ``go``'s axes fill (A x B)."""
    size_a, size_b = product(p.sizes[d] for d in go.a_dims), product(p.sizes[d] for d in go.b_dims)
    tiles_b, tiles_a = go.grid
    step, ta = go.blocks
    return size_a / (tiles_a * ta) * size_b / (tiles_b * step)


def realign_aligned(p, go, element_size: int) -> bool:
    """Whether every input piece of launch ``go`` starts on a 16-byte boundary of the tensor's start."""
    return geometry.realign_aligned(p.in_strides, go, element_size)


def tile_vectors(p, element_size: int) -> str:
    """Where the Triton kernel that would run plan ``p`` moves 16-byte vectors: ``"both"`` sides,
    ``"stores"`` only, or ``"narrower"`` (the 2-D transpose kernel: both or narrower)."""
    cap = VECTOR_BYTES // element_size
    if p.kind == "transpose2d":
        wide = all(s % cap == 0 for s in p.sizes) and all(st == 1 or st % cap == 0 for st in p.in_strides)
        return "both" if wide else "narrower"
    load, store = permute_launch(p, element_size).vec
    return "both" if min(load, store) >= cap else ("stores" if store >= cap else "narrower")


def thin_candidate(p, element_size: int) -> ThinLaunch | None:
    """The launch of plan ``p`` (kind tiles or transpose2d) on the thin-transpose CUDA kernel where it
    can take it (``geometry.thin_launch``), else None."""
    if p.kind not in ("tiles", "transpose2d"):
        return None
    return geometry.thin_launch(p.sizes, p.in_strides, element_size, THIN_BLOCKS)


def split_candidate(p, element_size: int) -> SplitLaunch | None:
    """The launch of plan ``p`` (kind tiles or transpose2d) on the split-transpose CUDA kernel where it
    can take it (``geometry.split_launch``), else None."""
    if p.kind not in ("tiles", "transpose2d"):
        return None
    return geometry.split_launch(p.sizes, p.in_strides, element_size, THIN_BLOCKS)


def shift_candidate(p, element_size: int) -> ShiftLaunch | None:
    """The launch of plan ``p`` (kind rows) on the realigned row copy where it can take it
    (``geometry.shift_launch``), else None."""
    if p.kind != "rows":
        return None
    return geometry.shift_launch(p.sizes, p.in_strides, element_size, SHIFT_BLOCKS)


def _rows_fractions(p, element_size: int, alignment: int, shift) -> dict:
    if short_kept_run(p.sizes, p.in_strides, element_size):
        fractions = {"tile": ROWS_MOVED_FRACTION}
    else:
        fractions = {"tile": ROWS_TILE_FRACTION[row_alignment(p, element_size, alignment)]}
    if shift is not None:
        run = p.sizes[-1] * element_size
        fractions["shift"] = next(f for bound, f in reversed(SHIFT_FRACTION) if run >= bound)
    return fractions


def thin_weighed(p, element_size: int) -> ThinLaunch | None:
    """``thin_candidate`` where the model weighs it: where the tile kernel's stores are narrower than
    THIN_TILE_STORE_BYTES (its figures come from such cases)."""
    if p.kind == "tiles" and permute_launch(p, element_size).vec[1] * element_size >= THIN_TILE_STORE_BYTES:
        return None
    return thin_candidate(p, element_size)


def strategy_fractions(p, element_size: int, alignment: int = VECTOR_BYTES) -> dict:
    """The model's predicted fraction of copy of each strategy it weighs for plan ``p`` (with both pointers
    aligned to ``alignment`` bytes): for a rows plan, the Triton rows tile and, where it can take the plan,
    the realigned row copy (``"shift"``); for 1- and 2-byte transposed tiles, the Triton tile kernel and,
    where they can take it, the realigned-store, thin-transpose and split-transpose CUDA kernels; else none."""
    return _strategies(p, element_size, alignment)[0]


def _strategies(p, element_size: int, alignment: int) -> tuple[dict, dict]:
    """(predicted fractions, launches) of the strategies the model weighs for plan ``p``."""
    if p.kind == "rows":
        launches = {"tile": None, "shift": shift_candidate(p, element_size)}
        return _rows_fractions(p, element_size, alignment, launches["shift"]), launches
    if element_size in REALIGN_SIZES and p.kind in ("tiles", "transpose2d"):
        launches = {"tile": None, "realign": realign_candidate(p, element_size), "thin": thin_weighed(p, element_size),
                    "split": split_candidate(p, element_size)}  # fmt: skip
        return _fractions(p, element_size, launches), launches
    return {}, {}


def _fractions(p, element_size: int, launches: dict) -> dict:
    realign, thin, split = launches["realign"], launches["thin"], launches["split"]
    fractions = {"tile": TILE_FRACTION[element_size][tile_vectors(p, element_size)]}
    if realign is not None:
        aligned = realign_aligned(p, realign, element_size)
        fractions["realign"] = REALIGN_FRACTION[element_size][aligned] * realign_fill(p, realign)
    if thin is not None:
        fractions["tile"] = TILE_THIN_FRACTION[element_size][len(p.sizes) > 2]
        fractions["thin"] = THIN_FRACTION[element_size] * geometry.thin_fill(p.sizes, thin, element_size)
    if split is not None:
        fractions["tile"] = TILE_SPLIT_FRACTION[element_size][split.batch > 1]
        fractions["split"] = SPLIT_FRACTION[element_size] * geometry.split_fill(p.sizes, split, element_size)
    return fractions


def permute_strategy(p, element_size: int, alignment: int = VECTOR_BYTES) -> tuple:
    """(strategy, its launch) the model picks for plan ``p`` (with both pointers aligned to ``alignment``
    bytes): ``("tile", None)`` (the Triton kernels), ``("realign", PermuteLaunch)``, ``("thin", ThinLaunch)``,
    ``("split", SplitLaunch)`` or ``("shift", ShiftLaunch)``, the largest predicted fraction of copy (the
    tile kernel on a tie)."""
    fractions, launches = _strategies(p, element_size, alignment)
    if not fractions:
        return "tile", None
    best = max(fractions, key=lambda name: (fractions[name], name == "tile"))
    return best, launches[best]
