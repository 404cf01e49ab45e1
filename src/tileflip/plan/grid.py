"""2-D geometry: how programs cover a tensor, which slots they mask, where each tile lands, and the tile
description (``TileConfig``) the 2-D kernels are launched with.

Pure Python and numpy, no triton and no GPU: the one source of index math that the kernels' launchers,
the analyzer, the checker and the pictures share. ``program_coverage``, ``tile_layout`` and
``program_offsets`` take strict arguments (positive ``int`` sizes, a program id in the minimal grid);
the planning the kernels use (``transpose_grid``, ``tile_masks``, ``specialization_class``) also accepts
empty sizes (0) and symbolic sizes (``torch.SymInt`` under ``torch.compile``), as a real launch must.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

# CUDA's launch limits (compute capability >= 3.0). The launchers use a 1-D grid along x, so gridDim.y
# and gridDim.z stay 1 whatever the shape; only the 2-D transpose's ``group_m == -1`` order (a table
# entry's choice) launches a 2-D grid, and only where its gridDim.y fits.
MAX_GRID_X = 2**31 - 1
MAX_GRID_YZ = 65535


class TileConfig(NamedTuple):
    """A Triton tile: BLOCK_M x BLOCK_N elements on ``num_warps`` warps, the program order ``group_m``
    (0 walks columns of tiles; 1 walks rows of tiles; G > 1 walks bands of G tile rows; -1 column order
    on a 2-D grid), ``interior`` (1: interior tiles take an unmasked branch; 0: every tile is masked),
    ``maxnreg`` (a register cap per thread for the compiler, 0 for none), ``out_tile`` (1: the 2-D kernel
    holds the tile in the output's orientation and lets the compiler's layout conversion transpose) and
    ``evict_last`` (1: loads carry Triton's ``evict_last`` cache policy). A tuple, so that hashing it on
    the launch path is done in C."""

    block_m: int
    block_n: int
    num_warps: int
    group_m: int = 1
    interior: int = 1
    maxnreg: int = 0
    out_tile: int = 0
    evict_last: int = 0



def _check_positive_ints(names_values: dict, what: str) -> None:
    for name, value in names_values.items():
        if type(value) is not int or value <= 0:
            raise ValueError(f"{name} must be a positive int ({what}), got {value!r} of type {type(value).__name__}")


# Triton's largest tensor (TRITON_MAX_TENSOR_NUMEL): a tile of more elements cannot be compiled.
MAX_TILE_ELEMENTS = 2**20
WARP_COUNTS = (1, 2, 4, 8, 16, 32)


def check_tile(block_m, block_n, num_warps=None, arg: str = "block") -> None:
    """Refuse a Triton tile that could not be compiled: sides that are not positive powers of two, more
    than MAX_TILE_ELEMENTS elements, or a warp count other than 1 to 32 in powers of two."""
    for side in (block_m, block_n):
        if type(side) is not int or side <= 0 or side & (side - 1):
            raise ValueError(f"{arg} sides must be positive powers of two (Triton's tile shapes), "
                             f"got {block_m}x{block_n}")  # fmt: skip
    if block_m * block_n > MAX_TILE_ELEMENTS:
        raise ValueError(f"{arg} must hold at most {MAX_TILE_ELEMENTS} elements (Triton's largest tensor), got "
                         f"{block_m}x{block_n}")  # fmt: skip
    if num_warps is not None and num_warps not in WARP_COUNTS:
        raise ValueError(f"num_warps must be one of {WARP_COUNTS}, got {num_warps!r}")


def cdiv(a, b):
    """Ceiling division that also works on symbolic sizes (only ``//`` and unary minus are used)."""
    return -(-a // b)


def loop_rounds(tiles: int, programs: int) -> tuple[int, int]:
    """(grid, rounds) of a launch of ``tiles`` tiles capped at ``programs`` programs: rounds is 0 (one
    program per tile, no loop) where the cap is not below the tile count, else the power of two at or
    above tiles / programs (a compiled variant per power of two, not per shape)."""
    if programs <= 0 or tiles <= programs:
        return max(tiles, 1), 0
    rounds = 1
    while rounds * programs < tiles:
        rounds *= 2
    return programs, rounds


# ---------------------------------------------------------------------------------------------------
# Coverage, layout and offsets of one program (strict validation)
# ---------------------------------------------------------------------------------------------------


def program_coverage(num_elements: int, block_size: int) -> dict:
    """Minimal 1-D grid: number of programs, slots covered, valid elements in the last program, masked slots."""
    _check_positive_ints({"num_elements": num_elements, "block_size": block_size}, "a 1-D coverage needs both")
    programs = cdiv(num_elements, block_size)
    covered_slots = programs * block_size
    return {
        "programs": programs,
        "covered_slots": covered_slots,
        "last_program_valid": num_elements - (programs - 1) * block_size,
        "masked_slots": covered_slots - num_elements,
    }


def tile_layout(rows: int, cols: int, block_rows: int, block_cols: int) -> dict:
    """2-D tiling of a rows x cols matrix: program grid, useful and covered slots, padding and its ratio."""
    _check_positive_ints(
        {"rows": rows, "cols": cols, "block_rows": block_rows, "block_cols": block_cols},
        "a 2-D layout needs a non-empty matrix and block",
    )
    grid = (cdiv(rows, block_rows), cdiv(cols, block_cols))
    useful = rows * cols
    covered = grid[0] * grid[1] * block_rows * block_cols
    return {
        "program_grid": grid,
        "useful_elements": useful,
        "covered_elements": covered,
        "padding_elements": covered - useful,
        "useful_ratio": useful / covered,
    }


def program_offsets(program_id: int, block_size: int, num_elements: int) -> dict:
    """Offsets and mask of one program of the minimal 1-D grid; valid offsets are the masked-in ones."""
    coverage = program_coverage(num_elements, block_size)
    if type(program_id) is not int or not 0 <= program_id < coverage["programs"]:
        raise ValueError(
            f"program_id must be an int in [0, {coverage['programs']}) (the minimal grid for "
            f"{num_elements} elements in blocks of {block_size}), got {program_id!r}"
        )
    offsets = [program_id * block_size + slot for slot in range(block_size)]
    mask = [0 <= off < num_elements for off in offsets]
    valid = [off for off, keep in zip(offsets, mask) if keep]
    return {
        "offsets": offsets,
        "mask": mask,
        "valid_offsets": valid,
        "valid_count": len(valid),
        "safe": all(0 <= off < num_elements for off in valid),
    }


# ---------------------------------------------------------------------------------------------------
# Kernel planning (accepts 0 and symbolic sizes)
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TransposeGrid:
    """How a 2-D transpose of an M x N input is cut into BLOCK_M x BLOCK_N tiles and launched.

    Programs are launched on a 1-D grid, which keeps gridDim.y and gridDim.z at 1 for any shape
    (gridDim.x allows 2**31 - 1 programs, far more tiles than any memory holds). With ``group_m == 1``
    program ``pid`` handles tile ``(pid // grid_n, pid % grid_n)``: consecutive programs walk along a
    row of input tiles. With ``group_m = G > 1`` consecutive programs walk down a band of G tile rows
    first, column of tiles by column of tiles, so the programs resident at one time read a G-tile-high
    band of the input and write a G-tile-wide band of the output (``tile_of`` is the kernels' decoding).
    ``group_m == 0`` is column order: tile ``(pid % grid_m, pid // grid_m)``, consecutive programs walk
    down a column of input tiles and write consecutive rows of the output. ``group_m == -1`` is the same
    order on a 2-D grid (grid_m x grid_n, x fastest: the kernel reads its tile from the program ids, no
    decoding), as torch.compile launches its transposes; where grid_n passes gridDim.y's limit the
    launcher falls back to ``group_m == 0``.
    """

    M: int
    N: int
    block_m: int
    block_n: int
    grid_m: int
    grid_n: int
    group_m: int = 1

    @property
    def programs(self):
        return self.grid_m * self.grid_n

    @property
    def launch(self) -> tuple:
        """The CUDA grid (x, y, z) of a launch: ``(programs, 1, 1)``, or ``(grid_m, grid_n, 1)`` for
        ``group_m == -1`` where grid_n fits gridDim.y."""
        if self.group_m == -1 and self.grid_n <= MAX_GRID_YZ:
            return (self.grid_m, self.grid_n, 1)
        return (self.programs, 1, 1)

    def tile_of(self, pid: int) -> tuple[int, int]:
        """The (pid_m, pid_n) tile a linear program id handles (the kernels' own decoding)."""
        if self.group_m == 1:
            return divmod(pid, self.grid_n)
        if self.group_m in (0, -1):  # -1: the same order, read from a 2-D grid's (x, y)
            pid_n, pid_m = divmod(pid, self.grid_m)
            return pid_m, pid_n
        band = self.group_m * self.grid_n
        first_m = (pid // band) * self.group_m
        rows = min(self.grid_m - first_m, self.group_m)
        within = pid % band
        return first_m + within % rows, within // rows


def transpose_grid(M, N, block_m: int, block_n: int, group_m: int = 1) -> TransposeGrid:
    """Plan the launch of an M x N transpose in block_m x block_n tiles; M or N may be 0 or symbolic."""
    for name, block in (("block_m", block_m), ("block_n", block_n)):
        if type(block) is not int or block <= 0:
            raise ValueError(f"{name} must be a positive int, got {block!r}")
    if type(group_m) is not int or group_m < -1:
        raise ValueError(f"group_m must be an int >= -1 (0: column order, -1: the same on a 2-D grid), got {group_m!r}")
    grid = TransposeGrid(M, N, block_m, block_n, cdiv(M, block_m), cdiv(N, block_n), group_m)
    if isinstance(grid.programs, int) and grid.programs > MAX_GRID_X:
        raise ValueError(
            f"a {M}x{N} transpose in {block_m}x{block_n} tiles needs {grid.programs} programs, "
            f"more than CUDA's gridDim.x limit of {MAX_GRID_X}"
        )
    return grid


@dataclass(frozen=True)
class TileMasks:
    """What one program of a 2-D transpose keeps and writes.

    ``in_mask`` (BM x BN) says which slots of the input tile lie inside the M x N input; ``out_mask``
    (BN x BM) says which slots of the transposed tile lie inside the N x M output. They are transposes
    of each other, which is why the store cannot reuse the input mask once BM != BN or M != N.
    Regions are half-open ``(start, stop)`` ranges; an empty region has ``start == stop``.
    """

    pid_m: int
    pid_n: int
    in_mask: np.ndarray
    out_mask: np.ndarray
    in_rows: tuple[int, int]
    in_cols: tuple[int, int]
    out_rows: tuple[int, int]
    out_cols: tuple[int, int]

    @property
    def valid(self) -> int:
        return int(self.in_mask.sum())

    @property
    def masked(self) -> int:
        return int(self.in_mask.size - self.in_mask.sum())


def tile_masks(M: int, N: int, BM: int, BN: int, pid_m: int, pid_n: int) -> TileMasks:
    """Input mask, transposed output mask and the regions program (pid_m, pid_n) reads and writes."""
    for name, value in {"M": M, "N": N}.items():
        if type(value) is not int or value < 0:
            raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    grid = transpose_grid(M, N, BM, BN)
    for name, pid, limit in (("pid_m", pid_m, grid.grid_m), ("pid_n", pid_n, grid.grid_n)):
        if type(pid) is not int or not 0 <= pid < limit:
            raise ValueError(
                f"{name} must be an int in [0, {limit}) for a {M}x{N} input in {BM}x{BN} tiles, got {pid!r}"
            )
    rm = pid_m * BM + np.arange(BM)
    rn = pid_n * BN + np.arange(BN)
    in_mask = (rm[:, None] < M) & (rn[None, :] < N)
    out_mask = (rn[:, None] < N) & (rm[None, :] < M)
    rows = (pid_m * BM, min((pid_m + 1) * BM, M))
    cols = (pid_n * BN, min((pid_n + 1) * BN, N))
    return TileMasks(pid_m, pid_n, in_mask, out_mask, rows, cols, cols, rows)


def owner_of(M: int, N: int, BM: int, BN: int, i: int, j: int) -> tuple[int, int]:
    """The tile (pid_m, pid_n) that reads input element (i, j) and writes output element (j, i)."""
    if not (0 <= i < M and 0 <= j < N):
        raise ValueError(f"element ({i}, {j}) is outside the {M}x{N} input")
    return i // BM, j // BN


# ---------------------------------------------------------------------------------------------------
# Triton's specialization of integer arguments
# ---------------------------------------------------------------------------------------------------


def specialization_class(value: int) -> tuple[str, str]:
    """The key Triton (3.x) derives from an integer kernel argument, mirrored here without importing it.

    An argument equal to 1 becomes a compile-time constant; otherwise its type is i32 when it fits in
    a signed 32-bit integer (else i64, or u64 above that) and it carries a divisibility-by-16 hint
    ("D") when ``value % 16 == 0``. Two launches whose arguments share these keys reuse one compiled
    kernel, so a class of shapes is the tuple of these keys over the size and stride arguments.
    """
    if type(value) is not int:
        raise TypeError(f"value must be an int, got {type(value).__name__}")
    if value == 1:
        return ("constexpr", "1")
    if -(2**31) <= value < 2**31:
        kind = "i32"
    elif -(2**63) <= value < 2**63:
        kind = "i64"
    else:
        kind = "u64"
    return (kind, "D" if value % 16 == 0 else "")


def magic_divisor(d: int) -> tuple[int, int]:
    """(magic, shift) with ``n // d == umulhi(n, magic) >> shift`` for every 0 <= n < 2**31, for 2 <= d < 2**31.

    The round-up method: l = ceil(log2 d), magic = ceil(2**(31 + l) / d), which is below 2**32 since
    d > 2**(l - 1); its error e = magic * d - 2**(31 + l) is below d, so e * n < d * 2**31 <= 2**(31 + l)
    never carries into the quotient. ``magic`` is returned as the int32 of the same bits (a kernel
    argument of one type whatever d is; the kernel reads it back as uint32), ``shift`` = l - 1."""
    if not 2 <= d < 2**31:
        raise ValueError(f"d must be in [2, 2**31), got {d}")
    bits = (d - 1).bit_length()  # l
    magic = -(-(1 << (31 + bits)) // d)
    return (magic - (1 << 32) if magic >= 1 << 31 else magic), bits - 1
