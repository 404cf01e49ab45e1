"""Block-scaled quantization geometry: each recipe's blocks, the sizes it accepts, the shape and strides
of every output, and the cuBLAS blocked scale layout (128 x 4 tiles of scales, zero-padded).

Pure Python, no torch: the op's checks, its fake implementation (symbolic sizes under ``torch.compile``)
and the kernels' launchers share it. Layouts and rules: ``docs/design.md`` (Block-scaled quantization).
"""

from __future__ import annotations

from typing import NamedTuple

from tileflip.plan.grid import cdiv


class Recipe(NamedTuple):
    """``block``: elements per scale along the quantized dimension; ``square``: one scale per block x block
    tile (else per 1 x block group); ``pack``: values per stored data element; ``blocked``: whether the
    scales may take the blocked layout; ``data`` and ``scale``: torch dtype names of the outputs."""

    block: int
    square: bool
    pack: int
    blocked: bool
    data: str
    scale: str


RECIPES = {
    "fp8_1x128": Recipe(128, False, 1, False, "float8_e4m3fn", "float32"),
    "fp8_128x128": Recipe(128, True, 1, False, "float8_e4m3fn", "float32"),
    "mxfp8": Recipe(32, False, 1, True, "float8_e4m3fn", "float8_e8m0fnu"),
    "nvfp4": Recipe(16, False, 2, True, "float4_e2m1fn_x2", "float8_e4m3fn"),
}

# A blocked scale tile: 128 rows x 4 columns of scales, stored as 32 x 16 (512 contiguous scales).
TILE_ROWS, TILE_COLS = 128, 4


class Layout(NamedTuple):
    shape: tuple
    strides: tuple


class Layouts(NamedTuple):
    """Each output's layout, or None where it is not asked for."""

    data: Layout | None
    scale: Layout | None
    data_t: Layout | None
    scale_t: Layout | None


def check_sizes(recipe: str, M, K, rowwise: bool, columnwise: bool) -> None:
    """Refuse sizes outside the recipe's table (``ValueError`` naming x): row-wise output groups along K,
    column-wise output along M; ``fp8_128x128`` needs both."""
    spec = RECIPES[recipe]
    b = spec.block
    if spec.square:
        if M % b or K % b:
            raise ValueError(f"x's sizes must both be multiples of {b} for recipe {recipe!r} ({b}x{b} blocks), "
                             f"got shape ({M}, {K})")  # fmt: skip
        return
    if rowwise and K % b:
        raise ValueError(f"x's column count must be a multiple of {b} for row-wise output of recipe {recipe!r} "
                         f"(1x{b} groups along rows), got shape ({M}, {K})")  # fmt: skip
    if columnwise and M % b:
        raise ValueError(f"x's row count must be a multiple of {b} for column-wise output of recipe {recipe!r} "
                         f"(groups of {b} along columns), got shape ({M}, {K})")  # fmt: skip


def blocked_shape(rows, cols) -> tuple:
    """The blocked layout of a (rows, cols) scale matrix, as a contiguous 2-D tensor: whole 128 x 4 tiles,
    each stored as 32 x 16, so (32 * ceil(rows / 128), 16 * ceil(cols / 4))."""
    return (32 * cdiv(rows, TILE_ROWS), 16 * cdiv(cols, TILE_COLS))


def blocked_offset(row: int, col: int, cols: int) -> int:
    """Where scale (row, col) of a matrix with ``cols`` columns lies in the blocked layout (in elements).
    Tiles are stored row of tiles by row of tiles; inside a tile, row r sits at (r % 32) * 16 + (r // 32) * 4."""
    tile = (row // TILE_ROWS) * cdiv(cols, TILE_COLS) + col // TILE_COLS
    r = row % TILE_ROWS
    return tile * TILE_ROWS * TILE_COLS + (r % 32) * 16 + (r // 32) * 4 + col % TILE_COLS


def _contiguous(shape) -> Layout:
    return Layout(tuple(shape), (shape[1], 1))


def _scale(rows, cols, blocked: bool) -> Layout:
    return _contiguous(blocked_shape(rows, cols)) if blocked else _contiguous((rows, cols))


def layouts(recipe: str, M, K, rowwise: bool, columnwise: bool, blocked: bool) -> Layouts:
    """The shapes and strides of the outputs for an (M, K) x (sizes already checked).

    ``fp8_1x128``'s scales are group-major, the layout ``torch._scaled_mm`` reads: (M, K/128) with strides
    (1, M), and (K, M/128) with strides (1, K). ``fp8_128x128``'s are row-major, ``scale_t`` being the
    transpose of ``scale``. The MX and NV scales are row-major, or blocked."""
    spec = RECIPES[recipe]
    b, p = spec.block, spec.pack
    data = scale = data_t = scale_t = None
    if spec.square:
        if rowwise:
            data, scale = _contiguous((M, K)), _contiguous((M // b, K // b))
        if columnwise:
            data_t, scale_t = _contiguous((K, M)), _contiguous((K // b, M // b))
    elif recipe == "fp8_1x128":
        if rowwise:
            data, scale = _contiguous((M, K)), Layout((M, K // b), (1, M))
        if columnwise:
            data_t, scale_t = _contiguous((K, M)), Layout((K, M // b), (1, K))
    else:
        if rowwise:
            data, scale = _contiguous((M, K // p)), _scale(M, K // b, blocked)
        if columnwise:
            data_t, scale_t = _contiguous((K, M // p)), _scale(K, M // b, blocked)
    return Layouts(data, scale, data_t, scale_t)


# The kernel's block rules, by recipe and option (``QuantizeLaunch.rule``).
RULE_FP8, RULE_FLOOR, RULE_RCEIL, RULE_NVFP4 = 0, 1, 2, 3


class QuantizeLaunch(NamedTuple):
    """How the fused quantizer runs on one x: one program per ``block_m`` x ``block_k`` tile, programs in
    row-major tile order (``grid_m`` x ``grid_k``). ``row_scale_strides`` and ``col_scale_strides`` place
    scale (row, group) of each output: element strides, or, for the blocked layout, (tiles per row of
    tiles, 0). ``off64``: some element offset may reach 2**31, so the kernel computes them in int64.
    ``even``: the tiles cover x exactly, so no load or store needs a mask."""

    rule: int
    block: int
    square: bool
    pack: int
    ue8m0: bool
    blocked: bool
    rowwise: bool
    columnwise: bool
    block_m: int
    block_k: int
    num_warps: int
    grid_m: int
    grid_k: int
    row_scale_strides: tuple
    col_scale_strides: tuple
    off64: bool
    even: bool

    @property
    def programs(self) -> int:
        return self.grid_m * self.grid_k


def _scale_strides(layout: Layout | None, blocked: bool, groups: int) -> tuple:
    if layout is None:
        return (0, 0)
    return (cdiv(groups, TILE_COLS), 0) if blocked else layout.strides


def quantize_launch(recipe: str, M: int, K: int, stride_xm: int, stride_xk: int, rowwise: bool, columnwise: bool,
                    blocked: bool, ue8m0: bool, rule: str, tile: tuple) -> QuantizeLaunch:  # fmt: skip
    """The launch of ``recipe`` on a non-empty (M, K) x with the given strides (sizes already checked),
    with ``tile`` = (block_m, block_k, num_warps). The tile must hold whole blocks: block_m a multiple of
    the block where column-wise output is asked for, block_k where row-wise is, both equal to it for
    the square recipe."""
    spec = RECIPES[recipe]
    b = spec.block
    block_m, block_k, num_warps = tile
    if spec.square and (block_m != b or block_k != b):
        raise ValueError(f"recipe {recipe!r} takes a {b}x{b} tile, got {block_m}x{block_k}")
    if (rowwise and block_k % b) or (columnwise and block_m % b) or block_k % 2 or block_m % 2:
        raise ValueError(f"a {block_m}x{block_k} tile does not hold whole {b}-element groups of recipe {recipe!r}")
    lay = layouts(recipe, M, K, rowwise, columnwise, blocked)
    if recipe == "nvfp4":
        code = RULE_NVFP4
    elif recipe == "mxfp8":
        code = RULE_RCEIL if rule == "rceil" else RULE_FLOOR
    else:
        code = RULE_FP8
    grid_m, grid_k = cdiv(M, block_m), cdiv(K, block_k)
    pad_m, pad_k = grid_m * block_m - 1, grid_k * block_k - 1
    top = max(pad_m * abs(stride_xm) + pad_k * abs(stride_xk), pad_m * K + pad_k, pad_k * M + pad_m)
    return QuantizeLaunch(
        rule=code, block=b, square=spec.square, pack=spec.pack, ue8m0=ue8m0, blocked=blocked and spec.blocked,
        rowwise=rowwise, columnwise=columnwise, block_m=block_m, block_k=block_k, num_warps=num_warps,
        grid_m=grid_m, grid_k=grid_k, row_scale_strides=_scale_strides(lay.scale, blocked, K // b),
        col_scale_strides=_scale_strides(lay.scale_t, blocked, M // b), off64=top >= 2**31,
        even=M % block_m == 0 and K % block_k == 0,
    )  # fmt: skip
