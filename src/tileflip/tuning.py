"""Tile configurations and the ``auto`` backend, chosen per element size and shape class.

The table is measured on the GPU machine (``python -m tileflip.tune`` for the Triton tiles,
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

from tileflip.plan import cdiv

TABLE_FILE = Path(__file__).with_name("data") / "tuning-h200.json"


@dataclass(frozen=True)
class TileConfig:
    block_m: int
    block_n: int
    num_warps: int
    group_m: int = 1  # program order: 1 walks rows of tiles; G > 1 walks bands of G tile rows


DEFAULT_TILES = {
    1: TileConfig(128, 256, 16),
    2: TileConfig(128, 128, 16),
    4: TileConfig(64, 64, 8),
    8: TileConfig(64, 64, 8),
}

# Below this many bytes a transpose is launch- and host-bound rather than bandwidth-bound.
TINY_BYTES = 4 << 20


def shape_class(M: int, N: int, element_size: int) -> str:
    if M * N * element_size < TINY_BYTES:
        return "tiny"
    if min(M, N) < 64:
        return "thin"
    return "large"


@lru_cache(maxsize=1)
def _table() -> dict:
    if TABLE_FILE.exists():
        return json.loads(TABLE_FILE.read_text())
    return {"triton": {}, "auto": {}}


@lru_cache(maxsize=256)
def _config(element_size: int, cls: str) -> TileConfig:
    entry = _table()["triton"].get(f"{element_size}:{cls}") or _table()["triton"].get(f"{element_size}:large")
    return TileConfig(*entry["config"]) if entry else DEFAULT_TILES[element_size]


def triton_config(element_size: int, shape: tuple | None = None) -> TileConfig:
    """The Triton tile configuration for an element size, and for a shape's class when one is given."""
    return _config(element_size, shape_class(*shape, element_size) if shape else "large")


def auto_backend(x) -> str:
    """The backend ``backend="auto"`` picks for a CUDA tensor: the measured fastest for its case class."""
    if x.dim() != 2:  # the table is measured on 2-D cases; N-D data moves through the Triton kernels
        return "triton"
    M, N = x.shape
    return _auto(x.element_size(), shape_class(M, N, x.element_size()))


@lru_cache(maxsize=64)
def _auto(element_size: int, cls: str) -> str:
    return _table()["auto"].get(f"{element_size}:{cls}", "triton")


# Block shapes of the N-D permute kernels (tileflip.kernels.triton_permute), kept here, free of triton,
# so that the planner's explanations show what the launcher runs.


def _pow2_at_most(n: int, cap: int) -> int:
    p = 1
    while p < n and p < cap:
        p *= 2
    return p


def rows_blocks(L: int, element_size: int) -> tuple[int, int, int]:
    """(BLOCK_R, BLOCK_L, warps): 16 KiB tiles, rows as long as the run allows."""
    tile = 16384 // element_size
    block_l = _pow2_at_most(L, tile)
    return max(1, tile // block_l), block_l, 8


def tiles_blocks(size_b: int, size_a: int, config) -> tuple[int, int, int]:
    """(BLOCK_B, BLOCK_A, warps): the 2-D tile of the tuning table, reshaped to fit a short dimension."""
    area = config.block_m * config.block_n
    block_a = _pow2_at_most(size_a, config.block_n)
    block_b = _pow2_at_most(size_b, min(area // block_a, 512))
    block_a = _pow2_at_most(size_a, max(block_a, area // block_b))
    return block_b, block_a, config.num_warps


GENERAL_BLOCK = 1024


@dataclass(frozen=True)
class PermuteLaunch:
    """How an N-D permute plan is launched: block shape, warps, and the 1-D grid's parts.

    ``blocks`` and ``grid`` are (BLOCK_R, BLOCK_L) and (row tiles, column tiles) for rows/copy,
    (BLOCK_B, BLOCK_A) and (b tiles, a tiles) for tiles, (BLOCK,) and (programs,) for general;
    ``batch`` multiplies the grid for the tiles kernel (one group of programs per batch element).
    """

    blocks: tuple
    num_warps: int
    grid: tuple
    batch: int = 1

    @property
    def programs(self) -> int:
        n = self.batch
        for g in self.grid:
            n *= g
        return n


def permute_launch(p, element_size: int) -> PermuteLaunch:
    """The launch of ``p`` (a ``tileflip.plan.PermutePlan`` of kind rows, copy, tiles or general)."""
    sizes = p.sizes
    if p.kind in ("rows", "copy"):
        L = sizes[-1]
        R = _product(sizes[:-1])
        block_r, block_l, warps = rows_blocks(L, element_size)
        return PermuteLaunch((block_r, block_l), warps, (cdiv(R, block_r), cdiv(L, block_l)))
    if p.kind == "tiles":
        size_a, size_b = sizes[p.a], sizes[-1]
        block_b, block_a, warps = tiles_blocks(size_b, size_a, triton_config(element_size))
        batch = _product(sizes[d] for d in p.batch)
        return PermuteLaunch((block_b, block_a), warps, (cdiv(size_b, block_b), cdiv(size_a, block_a)), batch)
    if p.kind == "general":
        return PermuteLaunch((GENERAL_BLOCK,), 4, (cdiv(_product(sizes), GENERAL_BLOCK),))
    raise ValueError(f"plan kind {p.kind!r} has no permute-kernel launch")


def _product(values) -> int:
    n = 1
    for v in values:
        n *= v
    return n
