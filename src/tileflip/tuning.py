"""Tile configurations for the Triton kernels, chosen per element size.

The starting table comes from tile shapes measured on an H200 (see ``../shared/anchors.md`` in the
project's records: 64x64 with 8 warps for 4- and 8-byte types, 128x128 with 16 warps for 2-byte
types, 128x256 with 16 warps for 1-byte types). Tiles are powers of two, as Triton requires.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TileConfig:
    block_m: int
    block_n: int
    num_warps: int


TRITON_TILES = {
    1: TileConfig(128, 256, 16),
    2: TileConfig(128, 128, 16),
    4: TileConfig(64, 64, 8),
    8: TileConfig(64, 64, 8),
}


def triton_config(element_size: int) -> TileConfig:
    return TRITON_TILES[element_size]


def auto_backend(x) -> str:
    """The backend ``backend="auto"`` picks for a CUDA tensor (to be replaced by the measured table)."""
    return "triton"
