"""Global-memory sectors of accesses, counted from their byte addresses: the sectors a store instruction
covers only in part, and the sectors a run of bytes touches. The planner's cost models and the access
analyzer share these. Pure numpy."""

from __future__ import annotations

import math

import numpy as np

SECTOR = 32  # bytes: the unit L2 keeps valid bits for and DRAM moves


def partial_sectors(addr: np.ndarray, width: int) -> np.ndarray:
    """Per instruction (a row of ``addr``: its lanes' byte addresses, -1 for a lane that issues nothing):
    the sectors the instruction covers only in part (fewer than 32 of their bytes). Every access is
    ``width`` bytes aligned to its width, so none straddles a sector."""
    rows, lanes = addr.shape
    s = np.sort(addr, axis=1)
    first = np.ones_like(s, dtype=bool)
    first[:, 1:] = s[:, 1:] != s[:, :-1]
    keep = first & (s >= 0)
    row_of = np.repeat(np.arange(rows, dtype=np.int64), lanes).reshape(rows, lanes)[keep]
    # (row, sector) as one key: sector indices stay below 2**36 for any tensor a GPU holds.
    keys, bytes_in = np.unique(row_of * (1 << 36) + s[keep] // SECTOR, return_counts=True)
    partial = bytes_in * width < SECTOR
    return np.bincount(keys[partial] >> 36, minlength=rows)


def residues(steps) -> tuple:
    """The byte offsets modulo a sector that starts reached by any sum of multiples of ``steps`` (bytes)
    take: the multiples of their greatest common divisor with the sector."""
    g = SECTOR
    for s in steps:
        g = math.gcd(g, int(s))
    return tuple(range(0, SECTOR, g))


def touched_bytes(length: int, starts) -> float:
    """The bytes of the sectors a run of ``length`` bytes touches, averaged over its start offsets modulo a
    sector (``starts``, as ``residues`` gives them)."""
    return SECTOR * sum(-(-(r + length) // SECTOR) for r in starts) / len(starts)
