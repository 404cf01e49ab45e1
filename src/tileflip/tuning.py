"""Tile configurations and the ``auto`` backend, chosen per element size and shape class.

The table is measured on the GPU machine (``python -m tileflip.bench.tune`` for the Triton tiles,
``tileflip bench`` for the backend ``auto`` picks) and committed as ``data/tuning-h200.json``: GPU
machines start bare and CI has no GPU, so nothing is tuned at run time. Until a case is measured the
defaults below apply (tile shapes seen on an H200 for plain tiles: 64x64 with 8 warps for 4- and
8-byte types, 128x128 with 16 warps for 2-byte types, 128x256 with 16 warps for 1-byte types).

A shape class only depends on sizes, never on values that Triton specializes differently, so a new
shape of a known class reuses the compiled kernel of its class.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

from tileflip.plan import cdiv, contiguous_strides

TABLE_FILE = Path(__file__).with_name("data") / "tuning-h200.json"


class TileConfig(NamedTuple):
    """A Triton tile: BLOCK_M x BLOCK_N elements, ``num_warps``, the program order ``group_m`` (0 walks
    columns of tiles; 1 walks rows of tiles; G > 1 walks bands of G tile rows), ``interior`` (1:
    interior tiles take an unmasked branch, at the price of the registers of two code paths; 0: every
    tile is masked),
    ``maxnreg`` (a cap on registers per thread passed to the compiler, 0 for none; a kernel that
    honours it says so) and ``out_tile`` (1: the 2-D kernel holds the tile in the output's orientation,
    loads through transposed addresses and lets the compiler's layout conversion transpose, instead of
    ``tl.trans``) and ``evict_last`` (1: the 2-D kernel's loads carry Triton's ``evict_last`` cache
    policy, as torch.compile's transposes do). A tuple, so that hashing it on the launch path is done in C."""

    block_m: int
    block_n: int
    num_warps: int
    group_m: int = 1
    interior: int = 1
    maxnreg: int = 0
    out_tile: int = 0
    evict_last: int = 0


DEFAULT_TILES = {
    1: TileConfig(128, 256, 16),
    2: TileConfig(128, 128, 16),
    4: TileConfig(64, 64, 8),
    8: TileConfig(64, 64, 8),
}

# Below this many bytes a transpose is launch-bound rather than bandwidth-bound.
TINY_BYTES = 4 << 20
# A side shorter than this makes a shape "thin": a square tile would be mostly masked off.
THIN_SIDE = 64
# Under TINY_BYTES a side shorter than this makes a shape thin. From 16 up the tiny entries' 32 x 32 tiles
# (every element size since session 11) are at least half used (e.g. 31 x 65, 3 tiles).
TINY_THIN_SIDE = 16
# A large shape with a side shorter than this is "skinny" (e.g. 65536 x 256): a column of tiles spans
# the whole short side, so it has its own measured tile.
SKINNY_SIDE = 1024
# Elements in a thin tile: enough for 16-byte accesses along the long side and a few hundred programs
# on the suite's thin shapes, with 4 warps.
THIN_TILE_ELEMENTS = 4096
THIN_WARPS = 4


def shape_class(M: int, N: int, element_size: int, row_stride: int = 0) -> str:
    """The class ``auto`` is tabled by. Under TINY_BYTES (launch-bound): ``sliver`` (a side under 8),
    ``thin`` (a side under TINY_THIN_SIDE) or ``tiny``; else ``thin-large`` (a side under THIN_SIDE),
    ``unaligned`` (an input ``row_stride`` that is not a multiple of 16 elements, as ``triton_config``
    has it: e.g. 8192 x 8191, and any transposed view, whose row stride is 1), ``skinny`` (a side under
    SKINNY_SIDE) or ``large``."""
    short = M if M < N else N
    if M * N * element_size < TINY_BYTES:
        return "sliver" if short < 8 else ("thin" if short < TINY_THIN_SIDE else "tiny")
    if short < THIN_SIDE:
        return "thin-large"
    if row_stride % 16:
        return "unaligned"
    return "skinny" if short < SKINNY_SIDE else "large"


def _pow2_at_least(n: int) -> int:
    return 1 << max(n - 1, 1).bit_length()


def thin_config(M: int, N: int) -> TileConfig:
    """The tile of a thin shape: the short side covered by one power of two (>= 2), the long side as
    long as THIN_TILE_ELEMENTS allows. Its block sizes depend only on that power of two and on which
    side is short, so each thin class (side, power of two, Triton's specialization keys) compiles once."""
    return _thin(M < N, _pow2_at_least(M if M < N else N))


@lru_cache(maxsize=64)
def _thin(wide: bool, short: int) -> TileConfig:
    long = max(THIN_TILE_ELEMENTS // short, 16)
    return TileConfig(short, long, THIN_WARPS) if wide else TileConfig(long, short, THIN_WARPS)


@lru_cache(maxsize=1)
def _table() -> dict:
    if TABLE_FILE.exists():
        return json.loads(TABLE_FILE.read_text())
    return {"triton": {}, "auto": {}}


@lru_cache(maxsize=256)
def _config(element_size: int, cls: str) -> TileConfig:
    entry = _table()["triton"].get(f"{element_size}:{cls}") or _table()["triton"].get(f"{element_size}:large")
    return TileConfig(*entry["config"]) if entry else DEFAULT_TILES[element_size]


def triton_config(element_size: int, shape: tuple | None = None, row_stride: int = 0) -> TileConfig:
    """The Triton tile configuration for an element size, and for a shape's class when one is given:
    the table's entry for its ``shape_class`` (``tiny``, ``unaligned``: rows not 16-aligned, so no vector
    loads, ``skinny``, ``large``; the ``large`` entry where the table has none), or ``thin_config`` for
    a thin class (``sliver``, ``thin``, ``thin-large``).
    (The fast path of ``tileflip.ops.core`` calls it once per call signature; the checked path per call.)"""
    if shape is None:
        return _config(element_size, "large")
    M, N = shape
    cls = shape_class(M, N, element_size, row_stride)
    if cls in _THIN_CLASSES:
        return thin_config(M, N)
    return _config(element_size, cls)


_THIN_CLASSES = frozenset({"sliver", "thin", "thin-large"})  # tiled by thin_config, not by the table


def auto_backend(x) -> str:
    """The backend ``backend="auto"`` picks for a CUDA tensor: the measured fastest for its case class."""
    if x.dim() != 2:  # the table is measured on 2-D cases; N-D data moves through the Triton kernels
        return "triton"
    M, N = x.shape
    return _auto(x.element_size(), shape_class(M, N, x.element_size(), x.stride(0)))


def auto_for(M: int, N: int, element_size: int, row_stride: int = 0) -> str:
    """``auto_backend`` from sizes already read (the launch path's form)."""
    return _auto(element_size, shape_class(M, N, element_size, row_stride))


@lru_cache(maxsize=64)
def _auto(element_size: int, cls: str) -> str:
    return _table()["auto"].get(f"{element_size}:{cls}", "triton")


# Block shapes of the N-D permute kernels (tileflip.kernels.triton_permute), kept here, free of triton,
# so that the planner's explanations show what the launcher runs.
#
# The rows and tiles kinds run one kernel on a BLOCK_B x BLOCK_A tile. Axis A is built from the input's
# fastest dimensions (in input-stride order; past a tile width of run, in output order: ``fold_axes``),
# axis B from the output's fastest (in output order), each
# of up to MAX_AXIS_DIMS merged dimensions folded into one linear index; the remaining dimensions are
# the batch, decoded once per program. A tile's row and column offsets are decoded once per row and
# per column vector (``//`` and ``%`` by runtime sizes, int32), never per element, so short runs cost
# no more decoding than long ones, and a tile spans dimension boundaries: only the last tile of each
# axis is masked.

MAX_AXIS_DIMS = 4
MAX_BATCH_DIMS = 6
FOLD_FACTOR = 4  # fold dimensions into an axis until it spans this many tile widths (fewer masked tails)
# fold_axes: in each turn B takes its next dimension before A does, so a dimension both sides want next
# goes to the output's axis. Measured on the permute suites, H200, 2026-12-01 session 9 (experiments/
# h200-2026-12-01-permute-variants-short.json, variant bgrow): it changed 8 of the 45 cases' launches;
# int8 (3840,360,56) (0,2,1) 0.75 -> 0.88 of copy, fp32 (38,17,20,13,14,13) 0.60 -> 0.72, fp32
# (23,21,112,32,16) 0.76 -> 0.84, int8 (11,8,80,264,44) 0.64 -> 0.70; the others moved by 0.01 or less.
FOLD_B_FIRST = True
# fold_axes: an axis passes over a dimension that would continue the other axis's contiguous run (on the
# other side, within the dimensions that axis may still take) but not its own. Measured on the permute
# suites, H200, 2026-12-01 session 9 (experiments/h200-2026-12-01-permute-variants-contig.json): it
# changes one suite launch, bf16 (32,48,47,18,10,3) (0,4,1,3,5,2), whose A now holds the input's whole
# 540-element run instead of 30 elements and a far dimension: 0.34 -> 0.43 of copy. (Without the "may
# still take" bound it also moved int8 (28,86,14,2,40,28), 0.59 -> 0.54.)
FOLD_CONTIG = True
# fold_axes: a transposed tile's A takes, once its input run spans a tile width, the dimensions in output
# order (innermost first) instead of input-stride order, so that A's rows are consecutive output rows
# where they can be, as in torch.compile's kernel for fp32 (23,21,112,32,16) (2,1,4,3,0), whose rows
# run over the output's (16, 21, 112) where A held (16, 112) (False: input-stride order). Measured on the
# permute suites, H200, 2026-12-01 session 13 run 4 (experiments/h200-2026-12-01-permute-variants-aout-
# s13run4.json, twice each, interleaved): it changes 4 suite launches, fp32 (38,17,20,13,14,13) 0.76 ->
# 0.86 of copy, (23,21,112,32,16) 0.89 -> 0.95 (torch.compile 0.93-0.94 in runs 1 and 8 of sessions
# 13 and 12), int8 (11,8,80,264,44) 0.68 -> 0.78, fp32 (62,10,8,32,44,3) 0.93 -> 0.94.
FOLD_A_OUTPUT_ORDER = True
# (Its mirror, B taking the input's order once it spans a tile width of output, changed 2 suite launches and
# lost on both: bf16 (21,23,45,11,12,42) 0.84 -> 0.81, int8 (64,80,208,64) 0.97 -> 0.67; run 5,
# experiments/h200-2026-12-01-permute-variants-bin-s13run5.json.)
# fold_axes: a transposed tile's B holds only the output's fastest dimension when the output's next one is
# A's first (nothing can continue B's output run) and it spans a quarter to one tile width with at most
# this fraction of its power-of-two block masked (0: off; B folds as A does). A program then writes one
# contiguous piece of output (A's block of rows of it) instead of pieces of two or more. Measured on the
# permute suites, H200, 2026-12-01 session 9 (experiments/h200-2026-12-01-permute-variants-wholeb.json,
# measured without the "next is A's first" condition): bf16 (39,28,16,72,39) (2,0,3,4,1) 0.81 -> 0.99 of
# copy (28 of 32 lanes), int8 (26,60,104,39,20) 0.78 -> 0.86, bf16 (320,50,28,88) 0.79 -> 0.83. It lost on
# int8 (48,30,464,180) (3,2,1,0) 0.87 -> 0.42 and, at 0.3, on fp32 (23,21,112,32,16) 0.84 -> 0.58, whose
# output runs B's folding continued (the condition keeps both), and bf16 (32,48,47,18,10,3) 0.43 -> 0.31
# (27% masked: above the bound).
WHOLE_B_WASTE = 0.25
GENERAL_BLOCK = 1024
VECTOR_BYTES = 16
B_FAST_RULE = True  # tile_launch: consecutive programs along the axis of fewer tiles
# Element sizes whose transposed tiles (kind tiles) always step along B, down a column of input tiles
# as the 2-D kernel's column order does (before the rule above). Measured on the permute suites, H200,
# 2026-12-01 session 7 (experiments/h200-2026-12-01-permute-variants-order.json): for 1-byte elements,
# with the 128 x 256 tile below, the random suite's median went from 0.888 to 0.901 of copy (int8
# (80,704,2048) and (128,112,6144) (2,1,0): 0.87 -> 0.94 and 0.90 -> 0.96; no case lost more than 0.01);
# for every element size it lost (median 0.885 -> 0.878; fp16 NCHW->NHWC 0.98 -> 0.91; run 1,
# experiments/h200-2026-12-01-permute-variants-order-all.json, whose variant "b2" was this rule for every
# size, written bfast=2 then).
B_FIRST_SIZES: frozenset = frozenset({1})
NARROW_RULE = True  # permute_config: smaller tiles on fewer warps when a side's vectors are under 16 bytes
OFFSETS32_RULE = True  # tile_launch: int32 offsets wherever offset_bounds allows (False: always int64)
# (vector bytes below which, tile halvings, warps, int32 offsets allowed), first match; tiles and warps
# measured on the permute suites, H200, 2026-11-30 (benchmarks/results/experiments/
# h200-2026-11-30-permute-variants-*.json). Offsets, H200, 2026-12-01 (h200-2026-12-01-permute-variants.json):
# int32 offsets cut the registers of the 4-warp quarter tiles from ~220 to ~128 per thread, twice the
# programs per SM, and won on all 5 suite cases of that step (median 0.58 of copy against 0.37); on the
# 8-warp half tiles they also doubled the programs per SM (e.g. 66 -> 40 registers) but lost on 10 of
# 16 cases (median 0.72 against 0.82; the cause was not profiled), so that step keeps int64 offsets.
NARROW_STEPS = ((3, 2, 4, True), (VECTOR_BYTES, 1, 8, False))
# Transposed tiles whose loads move 16-byte vectors and whose stores move narrower ones take this step
# (halvings, warps, int32 offsets allowed) before NARROW_STEPS (None: off). Measured on the permute suites,
# H200, 2026-12-01 session 12 run 7 (experiments/h200-2026-12-01-permute-variants-narrow-s12run7.json,
# variant h2w8: this step for every vector under 16 bytes), on the seven suite launches it covers: bf16
# (46,188,88,88) 0.86 -> 0.98 of copy, bf16 (320,50,28,88) 0.82 -> 0.93, int8 (28,86,14,2,40,28) 0.56 ->
# 0.63, int8 (60,2816,416) 0.85 -> 0.91, int8 (7,46,8,72,38,10) 0.82 -> 0.86, int8 (11,39,29,21,42,24)
# 0.44 -> 0.42 (1-byte stores), bf16 (39,28,16,72,39) 1.03 -> 1.02. Where the loads are the narrower
# side it lost (int8 (26,60,104,39,20) 0.87 -> 0.61, (3840,360,56) 0.90 -> 0.61, bf16 (21,23,45,11,12,42)
# 0.84 -> 0.67), hence the condition. The bench afterwards (run 8, against run 6) agreed: 0.85 -> 0.98,
# 0.83 -> 0.95, 0.56 -> 0.64, 0.87 -> 0.91, 0.83 -> 0.86, 0.44 -> 0.41. In run 7 a half tile on 4 warps
# (variant h1w4) was faster still on three of the seven (int8 (28,86,...) 0.72, the two bf16 cases 1.02
# and 0.96) and slower on the other four (int8 (7,46,...) 0.59, (60,2816,416) 0.76, (11,39,...) 0.29,
# bf16 (39,28,...) 1.00): not taken.
WIDE_LOAD_STEP = (VECTOR_BYTES, 2, 8, True)
# Tiles of their own, (B, A, warps), for the launches of WIDE_LOAD_STEP whose stores move 1 or 2 bytes of
# 1-byte elements or 4 bytes of 2-byte ones, keyed by (element size, store bytes); the step's int32
# offsets are kept. Measured on the permute suites, H200, 2026-12-01 session 14 runs 1-6
# (experiments/h200-2026-12-01-permute-variants-wide-load-tiles-s14.json): int8 (11,39,29,21,42,24)
# (5,4,2,3,1,0), 1-byte stores: 0.41 of copy under the step's 64 (B) x 128 (A) on 8 warps, 0.59 (twice)
# under 512 x 64 on 4 (0.55 on 2 warps at 256 x 64; 512 x 64 on 8 warps 0.38, 1024 x 64 0.21-0.24);
# since session 15, stepping along A (WIDE_LOAD_A_FAST), 1024 x 32 on 4 warps: 0.67 of copy in three
# rounds against 512 x 64's 0.65 (runs 5 and 6; 32 x 512 0.62-0.65, 2048 x 32 on 8 warps 0.47);
# int8 (28,86,14,2,40,28) (0,2,4,3,5,1), 2-byte stores: 0.63-0.66 -> 0.75-0.76 under 256 x 64 on 4 (five
# runs; 128 x 128 on 4, run 7's h1w4 of session 12, 0.71-0.72); bf16 (46,188,88,88) (1,2,3,0) and
# (320,50,28,88) (0,2,3,1), 4-byte stores: 0.98 / 0.96 -> 1.01 / 0.99 under 64 x 128 on 4 (h1w4; 256 x 64
# on 4: 1.00 / 0.88). Tiles of 256 x 64 on 4 warps for the other int8 launches of the step lost (4-byte
# stores, (60,2816,416): 0.92 -> 0.76; 8-byte stores, (7,46,8,72,38,10): 0.86 -> 0.36). The int8
# (11,39,...) launch keeps int64 offsets (under 512 x 64 its B tail decoded past 2**31; since session 15
# WIDE_LOAD_OFFSETS64 keeps them on every launch of the 1-byte-store tile); with its
# tail lanes clamped to B's last index and int32 offsets it ran at 0.20 (run 7, code not kept:
# 255 registers and 920 bytes of stack per thread against 254 and none).
WIDE_LOAD_TILES = {(1, 1): (1024, 32, 4), (1, 2): (256, 64, 4), (2, 4): (64, 128, 4)}
# WIDE_LOAD_TILES keys whose launches step along A (consecutive programs take the same B rows' next
# piece of A) even where B_FIRST_SIZES would step along B. A tile 64 bytes wide along A leaves each input
# row's run to many programs (16 for a 1008-byte run), and pieces 16-aligned cross 32-byte sectors that
# their neighbours along A read too; stepping along B put those neighbours a wave or more apart. Measured
# on the permute suites, H200, 2026-12-01 session 15 (experiments/h200-2026-12-01-permute-variants-
# wide-load-order-s15.json): int8 (11,39,29,21,42,24) (5,4,2,3,1,0), the only suite launch with the key,
# ran at 0.59-0.60 of copy stepping along B and 0.65-0.66 along A (runs 4 and 5, three rounds);
# (1, 2)'s int8 (28,86,14,2,40,28) was level (0.75 either way), and the int8 launches outside
# WIDE_LOAD_TILES lost up to 21 points along A (B_FIRST_SIZES above).
WIDE_LOAD_A_FAST = frozenset({(1, 1)})
# A launch takes WIDE_LOAD_TILES' tile only where axis B is one run of the output or the output's
# contiguous run along B (``b_output_run``) is at least this fraction of the tile's B side; else the
# step's own tile. Where B folds short runs, each tile row decodes many of them. Measured, H200, session
# 15 (experiments/h200-2026-12-01-permute-variants-wide-load-runs-s15run{8,9}.json, twice each): the
# 1-byte-store tile (1024 x 32) ran at 0.07-0.09 of copy against the step tile's 0.40-0.72 on six int8
# shapes whose runs were 15 to 231 elements ((2400,5,9,480) (0,3,1,2): 45), at 0.67-0.73 against
# 0.42-0.49 on runs of 32760 to 261261; the 2-byte-store tile (256 x 64) lost 3 to 16 points on runs of
# 14 and 30 and won 2 and 10 on runs of 86 and 90 (int8 (28,86,14,2,40,28): 0.75 against 0.66); the bf16
# 4-byte-store tile (64 x 128) lost 3 to 10 points on runs of 6 to 42 that B folds with more, and won 2
# and 3 where B is one run of 46 or 50 (the suite's bf16 (46,188,88,88) and (320,50,28,88)).
WIDE_LOAD_MIN_RUN = {(1, 1): 1.0, (1, 2): 0.25, (2, 4): 1.0}
# WIDE_LOAD_TILES keys whose launches keep int64 offsets (the step allows int32). On 1-byte stores the
# tile's 64-bit store addresses fit: int8 (11,39,29,5,42,24) (5,4,2,3,1,0), 60 MiB, compiled to 250
# registers and no stack with int64 offsets, to 255 registers and a 904-byte stack (or, without
# REGISTER_CAP, 32 and 3280 bytes) with int32 ones, and ran at 0.70 of copy against 0.06 (session 15
# run 7); (13,41,300,64) (3,2,1,0) likewise (254 registers, none; 255 and 920 bytes).
WIDE_LOAD_OFFSETS64 = frozenset({(1, 1)})
# Transposed tiles (kind tiles) of 4-byte elements whose narrower side moves 4 or 16 bytes: a tile of
# their own, in place of the 2-D tile (16-byte vectors) or the narrow step's tile and warps (4-byte
# vectors; its int64 offsets are kept). 16-byte vectors: half the 2-D tile's area on 16 warps, measured on
# the permute suites, H200, 2026-12-01 (benchmarks/results/experiments/
# h200-2026-12-01-permute-variants-warps-area.json, variant a05 against base): faster on all 4 suite cases
# (+0.1 to +2.3 points of copy). 4-byte vectors (all three suite cases load them): 32 (A) x 64 (B) on 4
# warps, session 13 runs 2 and 3 (experiments/h200-2026-12-01-permute-variants-tiles4b-s13run{2,3}.json,
# variant a32b64w4 against the earlier 64 x 64 on 16 warps): fp32 (38,17,20,13,14,13) 0.71 -> 0.76 and
# 0.72 -> 0.77 of copy, (62,10,8,32,44,3) 0.94 -> 0.93 in both runs, (4,18,34,33,27,21) 0.90 -> 0.89;
# 32 x 128 on 4 warps reached 0.79 on the first but lost 3 points on (62,10,...), 32 x 32 and 64 x 32
# lost 20 to 30 points on two of the three.
TILES_4B = {4: (64, 32, 4), 16: (64, 64, 16)}  # narrower side's vector bytes -> (B, A, warps)
# Warps of a transposed tile of 16-byte vectors that spans a whole first dimension (``_axis_block``: e.g.
# 256 channels, a 64x256 tile), by element size. Measured on the permute suites, H200, 2026-12-01
# (experiments/h200-2026-12-01-permute-variants-warps-area.json, variant w4 against base): the three
# 2-byte suite cases with such tiles ran at 0.986 / 0.957 / 0.928 of copy on 4 warps against 0.973 /
# 0.944 / 0.929 on 16 (fp16 NCHW->NHWC, NHWC->NCHW, bf16 (256,752,256) (2,1,0)).
WHOLE_DIM_WARPS = {2: 4}
# ``short_kept_run``: a kept inner dimension shorter than this (bytes) is tiled as moved (0: off).
SHORT_RUN_BYTES = 16
# ``rows_flat_launch``: rows plans with 16-byte vectors on both sides and kept runs of at least
# ROWS_FLAT_MIN_BYTES run the flat rows kernel (the output as one run of vectors, the form of
# torch.compile's kernel for such a permute), ROWS_FLAT_ELEMENTS elements per program on ROWS_FLAT_WARPS
# warps. Measured on the permute suites, H200, 2026-12-01 session 9 (experiments/
# h200-2026-12-01-permute-variants-flat.json, variant f2k4 against base): fp32 (37,16,24,29,44)
# (0,2,1,3,4), 5104-byte runs, 0.98 -> 1.03 of copy; fp32 (68,38,72,92) (2,0,1,3), 368 bytes, 0.94 ->
# 0.99; bf16 (320,128,1344) (1,0,2) 0.94 -> 0.97; bf16 (8,4096,32,128) (0,2,1,3), 256 bytes, 0.97 either
# way; bf16 (124,24,84,12,16) (3,2,0,1,4), 32-byte runs, 0.92 -> 0.62 (the tile kernel's loads run
# across the input's next dimensions there), hence the minimum. 1024 to 4096 elements on 4 or 8 warps
# were within 0.01 of one another then (under the earlier zero_ flush); under timing's "l2" flush
# (session 14 run 10, experiments/h200-2026-12-01-permute-variants-flat-s14run10.json, twice each,
# interleaved) 1024 elements on 4 warps took fp32 (68,38,72,92) from 1.01-1.02 to 1.05 of copy and
# (37,16,24,29,44) from 1.07-1.08 to 1.10, the two bf16 cases level at 1.00; 2048 on 8 warps 1.05 and
# 1.08-1.10; 4096 on 4 warps 0.98 and 1.06; 1024 on 8 warps lost 20 to 26 points on the bf16 cases.
ROWS_FLAT = True
ROWS_FLAT_MIN_BYTES = 256
ROWS_FLAT_ELEMENTS = 1024
ROWS_FLAT_WARPS = 4
# ``permute_launch``: vector widths from the runs the tile's axes form (``run_vector_widths``) where they
# are wider than those of each side's fastest dimension alone (False: the latter only); the tile follows
# the wider vectors where both sides reach 16 bytes (VECTOR_RUNS_TILE_ALL: wherever they widen). Measured
# on the permute suites, H200, 2026-12-01 session 10 (experiments/h200-2026-12-01-permute-variants-vrun.json,
# variant v2 against v0): 10 of the 45 launches widen; int8 (28,86,14,2,40,28) 0.59 -> 0.68 of copy,
# fp32 (62,10,8,32,44,3) 0.83 -> 0.88, bf16 (32,48,47,18,10,3) 0.43 -> 0.47, int8 (16,16,152,48,44)
# 0.84 -> 0.88, bf16 (8,82,18,36,94) 0.92 -> 0.95; fp32 (38,17,20,13,14,13) 0.71 -> 0.69 (0.72 -> 0.70 in
# the run before). With the tile following every widening (v1), int8 (7,46,8,72,38,10) fell 0.83 -> 0.64
# (0.85 as it is). The bench before and after agrees: session 9 run 9 against session 10 run 9
# (results/h200-2026-12-01-permute-random-s9run9.json and -s10run9.json): 0.58 -> 0.66, 0.44 -> 0.47,
# 0.84 -> 0.89, 0.86 -> 0.90, 0.93 -> 0.96 on the cases above, fp32 (38,17,20,13,14,13) 0.72 -> 0.70.
VECTOR_RUNS = True
VECTOR_RUNS_TILE_ALL = False
# The permute kernels' loads under Triton's evict_last cache policy, as torch.compile's permutes load: a
# tile's input lines stay in L2 while the output's stores stream through it, for the neighbouring tiles that
# read the rest of those lines. On the permute suites (H200, 2026-12-01 session 11 run 5, under
# tileflip.timing's "l2" flush, experiments/h200-2026-12-01-permute-variants-evict-s11run5.json): median
# 0.924 -> 0.947 of copy, 33 of 45 cases up by more than half a point (fp32 (23,21,112,32,16) 0.86 -> 0.91,
# (736,152,224) 0.97 -> 0.99), one down (bf16 (30,360,4608) by (0,2,1), 0.865 -> 0.839). (Under the earlier
# zero_ flush it could not be measured: a setting timed after it read part of its input from L2.)
PERMUTE_EVICT_LAST = True
# The permute tile kernel divides its indices by the dimension sizes with host-computed magic numbers (a
# multiply-high and a shift, ``plan.magic_divisor``) wherever its indices are int32 (False: Triton's signed
# division by a runtime int32, about ten instructions a division). Nsight Compute on the random suite's
# slow cases (H200, 2026-12-01 session 12 run 4, experiments/h200-2026-12-01-permute-ncu-s12run4.json)
# found them issue-bound (69-78% of issue slots busy at a quarter to a half of the DRAM bandwidth), with
# the decodes' divisions most of the instructions: int8 (11,39,29,21,42,24) by (5,4,2,3,1,0) ran 228 M
# warp instructions, 131 M with magic numbers (run 5). On the permute suites (run 5,
# experiments/h200-2026-12-01-permute-variants-magic-s12run5.json, twice each, interleaved): bf16
# (32,48,47,18,10,3) 0.44 -> 0.65 of copy, int8 (42,9,11,29,38,29) 0.56 -> 0.65, fp32 (62,10,8,32,44,3)
# 0.89 -> 0.93, int8 (11,39,29,21,42,24) 0.39 -> 0.43, fp32 (38,17,20,13,14,13) and bf16
# (21,23,45,11,12,42) +2 points; int8 (28,86,14,2,40,28) 0.63 -> 0.56 and (11,8,80,264,44) 0.70 -> 0.67
# (both faster with it under Nsight Compute's fixed clocks: 80 -> 67 and 65 -> 57 us; not explained);
# the other 37 within 1.2 points.
PERMUTE_MAGIC = True
# Register caps (``maxnreg``) of tile launches whose both sides move 16-byte vectors, by element size
# (none where absent).
PERMUTE_MAXNREG: dict = {}
# The register cap (``maxnreg``) of the launches on WIDE_LOAD_TILES keys in WIDE_LOAD_CAPPED (of every
# tile launch with REGISTER_CAP_ALL) that set none of their own: ptxas's own limit, 255, made explicit.
# Without it ptxas 12.8 (Triton 3.6's) can answer a demand above 255 registers with 32 registers and
# kilobytes of spills: int8 (11,39,29,5,42,24) (5,4,2,3,1,0) on the 1024 x 32 tile with int32 offsets
# compiled to 32 registers and a 3280-byte stack, (6,5,9,48) (0,3,1,2) on 512 x 64 to 32 registers and
# 3424 bytes (255 and 1440 under the cap; cuobjdump of the sm_90 cubins, session 15); int8 (600,5,9,480)
# (0,3,1,2) ran at 0.05 of copy without the cap, 0.11 with it (run 7). An explicit cap also moves ptxas's
# choice where a launch fits: most suite launches took more registers under it (bf16 (32,48,47,18,10,3)
# 96 -> 121), and over the two suites (REGISTER_CAP_ALL, run 7, twice) the median went from 0.954 to
# 0.945-0.948 of copy, int8 (60,2816,416) 0.92 -> 0.81, (26,60,104,39,20) 0.88 -> 0.79, bf16
# (21,23,45,11,12,42) 0.85 -> 0.74 (bf16 (30,360,4608) 0.85 -> 0.92); on the 2- and 4-byte-store tiles it
# cost int8 (28,86,14,2,40,28) 0.76 -> 0.72, bf16 (320,50,28,88) 0.98 -> 0.95. The 1-byte-store tile's
# int8 (11,39,29,21,42,24) launch is compiled the same with or without it.
REGISTER_CAP = 255
REGISTER_CAP_ALL = False
WIDE_LOAD_CAPPED = frozenset({(1, 1)})


def _pow2_at_most(n: int, cap: int) -> int:
    """The smallest power of two >= n, capped at cap."""
    p = 1
    while p < n and p < cap:
        p *= 2
    return p


def _pow2_ceil(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _pow2_part(n: int, cap: int) -> int:
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
    sizes), innermost first; ``vec`` = (load, store) vector widths in elements that the kernel may
    assume on full tiles (``run_vector_widths``: they divide the run along the axis and every other
    stride involved, so the axis's size too); ``kept``: the output's fastest
    dimension is also the input's, so stores run along A (no transpose in registers); ``wide``: tile
    indices need 64 bits; ``b_fast``: consecutive programs step along B (else along A);
    ``offsets64``: some element offset the kernel forms, masked tail lanes included, may reach 2**31,
    so offsets are computed in 64 bits (else in 32: on a tile of 1- or 2-byte scalars the 64-bit
    offsets took about 40% more registers, halving the programs an SM holds; see ``offsets_need_64``).
    ``maxnreg``: a cap on registers per thread for the compiler (0: none). ``evict_last``: loads carry
    Triton's ``evict_last`` cache policy (PERMUTE_EVICT_LAST).
    general: ``blocks`` = (BLOCK,), ``grid`` = (programs,).
    ``flat`` (rows, ``rows_flat_launch``): the flat rows kernel; ``blocks`` = (vectors per program,),
    ``grid`` = (programs,), ``vec`` = (VEC, VEC), ``a_dims`` = (the kept dimension,).
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


def _by_input_stride(in_strides) -> list:
    """The dimensions but the output's fastest (the last) that the input steps through, fastest first."""
    last = len(in_strides) - 1
    return sorted((i for i in range(last) if in_strides[i] > 0), key=lambda i: (in_strides[i], -i))


def fold_axes(sizes, in_strides, kept: bool, cap_a: int, cap_b: int) -> tuple[tuple, tuple, tuple]:
    """Split merged dimensions into axis A (input-fastest first), axis B (output-fastest first) and batch.

    Both axes start from their side's fastest dimension; then, one dimension at a time and turn about
    (B first: FOLD_B_FIRST), each axis takes its side's next fastest dimension (for a transposed tile's A,
    once its input run spans a tile width, the output's next: FOLD_A_OUTPUT_ORDER) while it spans fewer than
    FOLD_FACTOR tile widths (and holds fewer than MAX_AXIS_DIMS), passing over one that only continues the
    other axis's run (FOLD_CONTIG); B may hold one whole dimension alone (WHOLE_B_WASTE). Dimensions of
    input stride 0 stay in the batch. The batch is ordered innermost (output order) first, and folded
    back into B when it would exceed MAX_BATCH_DIMS.
    """
    n = len(sizes)
    last = n - 1
    by_stride = _by_input_stride(in_strides)
    if kept:
        a_order = [last] + by_stride
        b_order = [i for i in range(last - 1, -1, -1)]
    else:
        a_order = _a_output_order(sizes, in_strides, by_stride, cap_a) if FOLD_A_OUTPUT_ORDER else by_stride
        b_order = list(range(last, -1, -1))
    a_dims, b_dims = [a_order[0]], [] if kept else [last]
    if kept and n > 1:
        b_dims = [b_order[0]] if b_order[0] != a_dims[0] else []
    used = set(a_dims) | set(b_dims)
    out_strides = contiguous_strides(sizes)
    # B's first dimension alone, in one power-of-two block with at most WHOLE_B_WASTE of it masked, where
    # the output's next dimension is A's first (so no dimension could continue B's output run)
    b0 = b_dims[0] if b_dims and not kept and len(b_dims) == 1 else None
    first_b = sizes[b0] if b0 is not None and b0 - 1 == a_dims[0] else 0
    whole_b = (cap_b <= 4 * first_b and first_b <= cap_b
               and _pow2_ceil(first_b) - first_b <= WHOLE_B_WASTE * _pow2_ceil(first_b))  # fmt: skip

    def open_(dims, cap):
        return len(dims) < MAX_AXIS_DIMS and _product(sizes[d] for d in dims) < FOLD_FACTOR * cap

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
        theirs = chain(other, other_strides, other_cap) if FOLD_CONTIG else []
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

    def grow_a():
        return grow(a_dims, a_order, cap_a, in_strides, b_dims, out_strides, cap_b)

    def grow_b():
        return grow(b_dims, b_order, cap_b, out_strides, a_dims, in_strides, cap_a)

    while True:
        if FOLD_B_FIRST:
            grew_b = grow_b()
            grew_a = grow_a()
        else:
            grew_a = grow_a()
            grew_b = grow_b()
        if not (grew_a or grew_b):
            break
    batch = [d for d in range(last, -1, -1) if d not in used]
    while len(batch) > MAX_BATCH_DIMS:  # only when both axes are full: rank 8 with all axes at 4 cannot happen
        b_dims.append(batch.pop(0))
    return tuple(a_dims), tuple(b_dims), tuple(batch)


def _a_output_order(sizes, in_strides, by_stride, cap_a: int) -> list:
    """A transposed tile's A candidates for FOLD_A_OUTPUT_ORDER: the input's fastest dimension and those
    that continue its contiguous run until it spans a tile width (``cap_a``), then the others (of
    non-zero input stride) in output order, innermost first."""
    order, run = [by_stride[0]], sizes[by_stride[0]]
    for d in by_stride[1:]:
        if in_strides[d] != run or run >= cap_a:
            break
        order.append(d)
        run *= sizes[d]
    return order + [d for d in range(len(sizes) - 2, -1, -1) if d not in order and in_strides[d] > 0]


def _axis_block(size: int, first: int, cap: int) -> int:
    """A tile width along an axis: up to cap, or a whole first dimension of up to 2 * cap when it is
    (nearly) a power of two, so that a program covers it without a masked tail (e.g. 256 channels)."""
    ceil = _pow2_ceil(first)
    if cap < first <= 2 * cap and (ceil - first) * 8 <= first:
        return ceil
    return _pow2_at_most(size, cap)


def tile_launch(sizes, in_strides, kept: bool, vec: tuple, config, offsets32: bool = True,
                whole_dim_warps: int = 0, b_first: bool = False) -> PermuteLaunch:  # fmt: skip
    """The tile kernel's launch (plan kinds rows, copy and tiles) for merged sizes and input strides,
    with (load, store) vector widths that hold on the axes it folds (``run_vector_widths``: ``permute_launch``
    checks); ``offsets32`` False keeps int64 offsets
    even where ``offset_bounds`` would allow int32 (a narrow step measured faster so);
    ``whole_dim_warps``, when not 0, the warps of a tile that spans a whole first dimension;
    ``b_first``: a transposed tile's programs step along B whatever the tile counts."""
    area = config.block_m * config.block_n
    cap_a, cap_b = config.block_n, config.block_m
    a_dims, b_dims, batch_dims = fold_axes(sizes, in_strides, kept, cap_a, cap_b)
    size_a = _product(sizes[d] for d in a_dims)
    size_b = _product(sizes[d] for d in b_dims)
    block_a = _axis_block(size_a, sizes[a_dims[0]], cap_a)
    block_b = _axis_block(size_b, sizes[b_dims[0]], cap_b) if b_dims else 1
    if block_a > cap_a:  # a whole first dimension along A: B gets the rest of the area
        block_b = _pow2_at_most(size_b, max(1, area // block_a))
    elif block_b > cap_b:
        block_a = _pow2_at_most(size_a, max(1, area // block_b))
    else:  # a short axis gives its share of the area to the other one
        block_b = _pow2_at_most(size_b, max(block_b, area // block_a))
        block_a = _pow2_at_most(size_a, max(block_a, area // block_b))
    warps = whole_dim_warps if whole_dim_warps and (block_a > cap_a or block_b > cap_b) else config.num_warps
    load, store = min(vec[0], block_a), min(vec[1], block_a if kept else block_b)
    wide = max(size_a, size_b) + max(block_a, block_b) >= 2**31
    grid = (cdiv(size_b, block_b), cdiv(size_a, block_a))
    # Consecutive programs step along the axis of fewer tiles, so the programs running at once cover
    # whole runs of the output (and input) rather than one column of tiles across many rows.
    b_fast = (b_first and not kept) or (B_FAST_RULE and grid[0] < grid[1])
    offsets64 = (
        wide
        or not (offsets32 and OFFSETS32_RULE)
        or offsets_need_64(sizes, in_strides, ((a_dims, block_a), (b_dims, block_b)))
    )
    return PermuteLaunch(
        (block_b, block_a), warps, grid, _product(sizes[d] for d in batch_dims),
        a_dims, b_dims, batch_dims, (load, store), kept, wide, b_fast, offsets64, config.maxnreg,
        evict_last=PERMUTE_EVICT_LAST,
    )  # fmt: skip


# Realigned stores of 1-byte elements (``realign_launch``, the CUDA kernel of
# kernels/cuda/permute_realign.cu, on ``backend="auto"``): a transposed tile launch that loads 16-byte
# vectors along A (one input run) and stores B (one long output run) a byte a lane, because its output
# rows start at any byte. The CUDA kernel writes each row as whole aligned 16-byte pieces (the tile held
# transposed in shared memory, each piece funnel-shifted into place). Measured (session 16 runs 8-10,
# experiments/h200-2026-12-02-permute-variants-realign-cuda-s16run*.json, fractions of copy): int8
# (11,39,29,21,42,24) (5,4,2,3,1,0) 0.68 -> 0.73-0.74, its fifth (11,39,29,5,42,24) 0.69 -> 0.73,
# (6,300,37,2000) (0,3,1,2), B of 11100, 0.57 -> 0.76-0.77; (5,37,9,40000) (0,3,2,1), whose B is a row of
# 333 bytes, 0.66 -> 0.44 (each row's pieces are mostly its ragged ends), hence REALIGN_MIN_B.
REALIGN_STORES = True
REALIGN_TILE = (64, 256)  # (A bytes, B bytes of each row) a block moves: the .cu file's TA and STEP
REALIGN_HALO = 32  # rows a block loads before its first B index (a row's start is off by less): the .cu file's HALO
REALIGN_MIN_B = 2048  # output rows at least this long (between the 333 that lost and the 11100 that won)


def realign_launch(p, element_size: int) -> PermuteLaunch | None:
    """The tile launch of plan ``p`` (a ``permute_launch``) where the realigned-store CUDA kernel takes it
    instead (REALIGN_STORES), else None: 1-byte elements, a transposed tile whose axis A is one run of the
    input with every input row piece 16-byte aligned (the strides of B and the batch multiples of 16;
    the input's address is checked per call), axis B one run of the output of at least REALIGN_MIN_B,
    stores narrower than 16 bytes, and indices within 32 bits."""
    if not REALIGN_STORES or element_size != 1 or p.kind != "tiles":
        return None
    go = permute_launch(p, element_size)
    if go.kept or go.flat or go.vec[0] < VECTOR_BYTES or go.vec[1] >= VECTOR_BYTES:
        return None
    sizes, in_strides = p.sizes, p.in_strides
    size_a, size_b = _product(sizes[d] for d in go.a_dims), _product(sizes[d] for d in go.b_dims)
    run = 1
    for d in go.a_dims:  # A one input run, innermost first
        if in_strides[d] != run:
            return None
        run *= sizes[d]
    if size_b < REALIGN_MIN_B or b_output_run(sizes, go.b_dims) < size_b:
        return None
    if any(in_strides[d] % VECTOR_BYTES for d in (*go.b_dims, *go.batch_dims)):
        return None
    return go if max(size_a, size_b) < 2**31 and realign_grid(sizes, go)[2] < 2**31 else None


def realign_grid(sizes, go: PermuteLaunch) -> tuple[int, int, int]:
    """(A tiles, B tiles, blocks) of the realigned-store kernel on launch ``go``'s axes: B tiles reach one
    halo past the row's end, where the last rows' pieces end."""
    size_a, size_b = _product(sizes[d] for d in go.a_dims), _product(sizes[d] for d in go.b_dims)
    tiles_a, tiles_b = cdiv(size_a, REALIGN_TILE[0]), cdiv(size_b + REALIGN_HALO - 1, REALIGN_TILE[1])
    return tiles_a, tiles_b, tiles_a * tiles_b * go.batch


def offset_bounds(sizes, in_strides, axes) -> tuple[int, int]:
    """Bounds (input, output) on the element offsets the tile kernel forms for these merged sizes and
    input strides, masked tail lanes included, where ``axes`` holds (dims, block) for each tile axis.

    The largest in-range offset of a side is sum((size - 1) * stride). A masked tail lane decodes a
    linear index past its axis's size by at most ``pad`` = (tiles * block - size) elements; only the
    axis's outermost dimension (which takes no ``%``) then runs over, by at most ``pad`` steps of its
    stride, so the axis adds at most ``pad * max(stride)`` (also where a side merges the axis's
    dimensions)."""
    bounds = []
    for strides in (in_strides, contiguous_strides(sizes)):
        top = sum((size - 1) * stride for size, stride in zip(sizes, strides))
        for dims, block in axes:
            size = _product(sizes[d] for d in dims)
            top += (cdiv(size, block) * block - size) * max((strides[d] for d in dims), default=0)
        bounds.append(top)
    return bounds[0], bounds[1]


def offsets_need_64(sizes, in_strides, axes) -> bool:
    """Whether an offset of the tile kernel may reach 2**31 on either side (``offset_bounds``)."""
    return max(offset_bounds(sizes, in_strides, axes)) >= 2**31


def vector_widths(sizes, in_strides, kept: bool, element_size: int) -> tuple[int, int]:
    """Load and store vector widths (elements) of the tile kernel from each side's fastest dimension
    alone: ``run_vector_widths`` of axes that hold only their first dimensions (A's is the input's
    fastest, ``fold_axes``)."""
    last = len(sizes) - 1
    a0 = last if kept else _by_input_stride(in_strides)[0]
    return run_vector_widths(sizes, in_strides, kept, (a0,), (last,), element_size)


def narrow_step(vector_bytes: int, load_bytes: int = 0, kept: bool = True, element_size: int = 0):
    """The step (below, halvings, warps, int32 offsets allowed) for a launch whose narrower side moves
    ``vector_bytes`` per vector and whose loads ``load_bytes``: WIDE_LOAD_STEP for a transposed tile
    (not ``kept``) that loads 16-byte vectors and stores narrower ones (but where TILES_4B sets the
    tile), else the first NARROW_STEPS entry that applies; None for 16-byte vectors on both sides, or
    with the narrow rule off."""
    if NARROW_RULE:
        wide_load = not kept and load_bytes >= VECTOR_BYTES > vector_bytes
        if WIDE_LOAD_STEP and wide_load and tiles_4b(element_size, vector_bytes, kept) is None:
            return WIDE_LOAD_STEP
        for step in NARROW_STEPS:
            if vector_bytes < step[0]:
                return step
    return None


# The N-D tile kernel's base tiles (area and warps; the kernel has its own program order). They are the
# 2-D large-class tiles of the 2026-11-30 table, on which every permute rule below was measured, but for
# 1-byte elements, which take the later table's 128 x 256 (wider along A, the input's fastest axis).
PERMUTE_TILES = {
    1: TileConfig(128, 256, 16),  # the 2-D table's int8 tile since session 7, with B_FIRST_SIZES (above)
    2: TileConfig(128, 128, 16),
    4: TileConfig(64, 128, 16),
    8: TileConfig(32, 128, 8, 1, 0),
}


def permute_config(element_size: int, vector_bytes: int = VECTOR_BYTES, kept: bool = True,
                   load_bytes: int = 0, store_bytes: int = 0, wide_tiles: bool = True) -> TileConfig:  # fmt: skip
    """The tile area and warps of the N-D tile kernel: PERMUTE_TILES when both sides move 16-byte
    vectors; with narrower vectors (``vector_bytes``, the narrower side's; ``load_bytes`` and
    ``store_bytes``, the loads' and stores' as launched) the step ``narrow_step`` gives: a quarter tile on
    8 warps for 16-byte loads and narrower stores of a transposed tile (or WIDE_LOAD_TILES' tile where
    it has one for the element size and the stores), else a half tile on 8 warps, a quarter on 4 under 3
    bytes. Transposed (not ``kept``) 4-byte tiles follow TILES_4B where it has an entry. ``wide_tiles``
    False: the step's own tile in place of WIDE_LOAD_TILES'."""
    config = PERMUTE_TILES[element_size]
    step = narrow_step(vector_bytes, load_bytes, kept, element_size)
    tile = tiles_4b(element_size, vector_bytes, kept)
    wide_key = wide_load_key(step, element_size, vector_bytes, kept, store_bytes) if wide_tiles else None
    if wide_key is not None:  # by the stores as launched, where given
        tile = WIDE_LOAD_TILES[wide_key]
    if tile is not None:
        return config._replace(block_m=tile[0], block_n=tile[1], num_warps=tile[2])
    if step is None:
        return config._replace(maxnreg=PERMUTE_MAXNREG.get(element_size, 0))
    _, halvings, warps, _ = step
    return _halve(config, halvings)._replace(num_warps=warps)


def wide_load_key(step, element_size: int, vector_bytes: int, kept: bool, store_bytes: int) -> tuple | None:
    """The WIDE_LOAD_TILES key whose tile a launch of narrow step ``step`` takes (``permute_config``'s
    choice, by the stores as launched), else None."""
    if step is not WIDE_LOAD_STEP or tiles_4b(element_size, vector_bytes, kept) is not None:
        return None
    key = (element_size, store_bytes or vector_bytes)
    return key if key in WIDE_LOAD_TILES else None


def b_output_run(sizes, b_dims) -> int:
    """Elements in the output's contiguous run along axis B: B's dimensions (innermost first) for as long
    as each is the output's next outer one (the output is contiguous in the merged ``sizes``' order)."""
    run, last = 1, None
    for d in b_dims:
        if last is not None and d != last - 1:
            break
        run, last = run * sizes[d], d
    return run


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


def short_kept_run(sizes, in_strides, element_size: int) -> bool:
    """Whether the output's fastest dimension is also the input's contiguous one (an inner dimension kept)
    but runs shorter than SHORT_RUN_BYTES (e.g. 3 floats): the launch then transposes, axis B starting from
    it as for a moved inner dimension, and A from the input's next dimension.

    Kept on axis A, such a run is stored a few bytes at a time all over the output. On axis B the stores
    run over it and the output's next dimensions together, and the loads, along the input's next
    dimensions, step over it: strided, but the tile's other rows fill the gaps from the same lines.
    Measured on the permute suites, H200, 2026-12-01 session 9 (experiments/
    h200-2026-12-01-permute-variants-short.json): fp32 (62,10,8,32,44,3) (3,1,4,0,2,5), 12-byte runs,
    0.38 -> 0.83 of copy. The same move for an input-contiguous dimension that is the output's second
    fastest lost on both suite cases it applied to (bf16 3-element, 0.34 -> 0.29; int8 10-element,
    0.83 -> 0.26), so it is not made."""
    last = len(sizes) - 1
    if SHORT_RUN_BYTES == 0 or last < 1 or in_strides[last] != 1:
        return False
    return sizes[last] * element_size < SHORT_RUN_BYTES and bool(_by_input_stride(in_strides))


def rows_flat_launch(sizes, in_strides, element_size: int, vec: tuple) -> PermuteLaunch | None:
    """The flat rows kernel's launch for a rows plan whose both sides move 16-byte vectors, with kept runs
    of at least ROWS_FLAT_MIN_BYTES (ROWS_FLAT on), else None: the output walked as one contiguous run of
    VEC-element vectors, ROWS_FLAT_ELEMENTS per program, each vector's input offset decoded from its row
    (every row holds whole vectors)."""
    cap = VECTOR_BYTES // element_size
    if not ROWS_FLAT or vec != (cap, cap) or len(sizes) < 2 or sizes[-1] * element_size < ROWS_FLAT_MIN_BYTES:
        return None
    block, numel = ROWS_FLAT_ELEMENTS // cap, _product(sizes)
    vectors = numel // cap
    top = sum((s - 1) * st for s, st in zip(sizes, in_strides))  # masked vectors decode vector 0
    wide = not OFFSETS32_RULE or top >= 2**31 or numel + block * cap >= 2**31
    return PermuteLaunch((block,), ROWS_FLAT_WARPS, (cdiv(vectors, block),), a_dims=(len(sizes) - 1,),
                         vec=(cap, cap), kept=True, offsets64=wide, flat=True,
                         evict_last=PERMUTE_EVICT_LAST)  # fmt: skip


def run_vector_widths(sizes, in_strides, kept: bool, a_dims, b_dims, element_size: int) -> tuple[int, int]:
    """Load and store vector widths (elements) of a tile launch whose axes are ``a_dims`` and ``b_dims``:
    powers of two up to 16 bytes that divide the contiguous run the axis's first dimensions form on that
    side (A's on the input; the stored axis's on the output) and, for loads, every input stride outside
    that run. Output strides are products of the faster sizes, so the run's divides every other one.
    Wider than ``vector_widths`` where a side's fastest dimension is odd but its run is not (23 x 32
    floats: 736)."""
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
    load = _pow2_part(length, cap) if members else 1
    for d in range(len(sizes)):
        if d not in members:
            load = min(load, _pow2_part(in_strides[d], cap))
    store = _pow2_part(run(a_dims if kept else b_dims, out_strides)[0], cap)
    return load, store


def permute_launch(p, element_size: int) -> PermuteLaunch:
    """The launch of ``p`` (a ``tileflip.plan.PermutePlan`` of kind rows, copy, tiles or general)."""
    sizes = p.sizes
    if p.kind in ("rows", "copy", "tiles"):
        kept = p.kind == "copy" or (p.kind == "rows" and not short_kept_run(sizes, p.in_strides, element_size))
        vec = vector_widths(sizes, p.in_strides, kept, element_size)
        if p.kind == "rows" and kept:
            flat = rows_flat_launch(sizes, p.in_strides, element_size, vec)
            if flat is not None:
                return flat

        # the tile, its warps and offsets chosen as for vectors tile_vec, but WIDE_LOAD_STEP's condition on
        # the loads as launched (vec: after a widening, 16-byte loads over a tile chosen for narrower ones)
        def launch(vec, tile_vec, wide_tiles=True):
            vector_bytes = min(tile_vec) * element_size
            load_bytes, store_bytes = vec[0] * element_size, vec[1] * element_size  # the vectors as launched
            step = narrow_step(vector_bytes, load_bytes, kept, element_size)  # offsets: also for TILES_4B's
            config = permute_config(element_size, vector_bytes, kept, load_bytes, store_bytes, wide_tiles)
            whole = WHOLE_DIM_WARPS.get(element_size, 0) if step is None and not kept else 0
            wide_key = wide_load_key(step, element_size, vector_bytes, kept, store_bytes) if wide_tiles else None
            if REGISTER_CAP and not config.maxnreg and (REGISTER_CAP_ALL or wide_key in WIDE_LOAD_CAPPED):
                config = config._replace(maxnreg=REGISTER_CAP)
            b_first = element_size in B_FIRST_SIZES and wide_key not in WIDE_LOAD_A_FAST
            offsets32 = (step is None or step[3]) and wide_key not in WIDE_LOAD_OFFSETS64
            go = tile_launch(sizes, p.in_strides, kept, vec, config, offsets32, whole, b_first)
            if wide_key in WIDE_LOAD_MIN_RUN:
                run = b_output_run(sizes, go.b_dims)
                if run < _product(sizes[d] for d in go.b_dims) and run < go.blocks[0] * WIDE_LOAD_MIN_RUN[wide_key]:
                    return launch(vec, tile_vec, wide_tiles=False)  # B folds output runs short of the tile
            return go

        go = launch(vec, vec)
        if not VECTOR_RUNS:
            return go
        wider = run_vector_widths(sizes, p.in_strides, kept, go.a_dims, go.b_dims, element_size)
        if wider == vec or wider[0] < vec[0] or wider[1] < vec[1]:
            return go
        # the wider vectors choose the tile where both sides reach 16 bytes (VECTOR_RUNS_TILE_ALL: always);
        # the tile's axes must still form runs that hold them
        full = min(wider) * element_size >= VECTOR_BYTES
        go_wider = launch(wider, wider if full or VECTOR_RUNS_TILE_ALL else vec)
        held = run_vector_widths(sizes, p.in_strides, kept, go_wider.a_dims, go_wider.b_dims, element_size)
        return go_wider if held[0] >= wider[0] and held[1] >= wider[1] else go
    if p.kind == "general":
        return PermuteLaunch((GENERAL_BLOCK,), 4, (cdiv(_product(sizes), GENERAL_BLOCK),))
    raise ValueError(f"plan kind {p.kind!r} has no permute-kernel launch")


def _product(values) -> int:
    n = 1
    for v in values:
        n *= v
    return n
