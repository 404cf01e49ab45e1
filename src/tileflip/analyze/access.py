"""What one warp instruction asks of memory: global sectors and lines, shared-memory banks and wavefronts.

``WarpAccess`` and ``bank_conflicts`` describe a single warp access (32 lanes' byte addresses); the
``*_rows`` functions count the same quantities for many instructions at once, one row of an array
each (numpy, vectorized). docs/design.md (The access analyzer) gives the rules (phases, broadcasts).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tileflip.plan import cdiv
from tileflip.plan.sectors import partial_sectors

WARP = 32
SECTOR = 32
LINE = 128
BANKS = 32
BANK_WIDTH = 4


def shared_phases(width: int) -> int:
    """Lanes served together: a wavefront carries at most 128 bytes (8-byte -> half-warps)."""
    return min(WARP, LINE // max(width, BANK_WIDTH))


def bank_conflicts(addresses, width: int) -> dict:
    """Banks, n-way conflict and wavefronts of one shared-memory warp access.

    ``addresses`` holds up to 32 byte addresses (None or negative for inactive lanes). Lanes are
    served in phases of ``shared_phases(width)``; within a phase the degree is the largest number
    of distinct 4-byte words in one bank, so lanes reading one word (a broadcast) cost nothing.
    """
    lanes = [None if a is None or a < 0 else int(a) for a in addresses]
    per_phase = shared_phases(width)
    ways, wavefronts = [], 0
    for start in range(0, len(lanes), per_phase):
        words_by_bank: dict[int, set] = {}
        for a in lanes[start:start + per_phase]:
            if a is None:
                continue
            for word in range(a // BANK_WIDTH, (a + width - 1) // BANK_WIDTH + 1):
                words_by_bank.setdefault(word % BANKS, set()).add(word)
        degree = max((len(w) for w in words_by_bank.values()), default=0)
        ways.append(degree)
        wavefronts += degree
    banks = [None if a is None else (a // BANK_WIDTH) % BANKS for a in lanes]
    return {"banks": banks, "ways": max(ways, default=0), "phase_ways": ways, "wavefronts": wavefronts}


@dataclass(frozen=True)
class WarpAccess:
    """The 32 lanes of one warp instruction and what they ask of memory.

    ``addresses`` are byte addresses from the tensor's base (or the shared tile's start), None for
    lanes the mask turns off; ``width`` is the bytes each lane moves.
    """

    name: str
    space: str
    op: str
    width: int
    addresses: tuple

    @property
    def active(self) -> list[int]:
        return [a for a in self.addresses if a is not None]

    @property
    def sectors(self) -> list[int]:
        return sorted({s for a in self.active for s in range(a // SECTOR, (a + self.width - 1) // SECTOR + 1)})

    @property
    def lines(self) -> list[int]:
        return sorted({s for a in self.active for s in range(a // LINE, (a + self.width - 1) // LINE + 1)})

    @property
    def useful_bytes(self) -> int:
        return len(set(self.active)) * self.width

    @property
    def fetched_bytes(self) -> int:
        return len(self.sectors) * SECTOR

    @property
    def efficiency(self) -> float:
        return self.useful_bytes / self.fetched_bytes if self.fetched_bytes else 1.0

    def element_offsets(self, itemsize: int) -> list:
        """Lane addresses in elements (for a store: the output's linear index)."""
        return [None if a is None else a // itemsize for a in self.addresses]

    def to_dict(self) -> dict:
        d = {
            "name": self.name, "space": self.space, "op": self.op, "width": self.width,
            "addresses": list(self.addresses), "active_lanes": len(self.active),
        }
        if self.space == "global":
            d.update(sectors=self.sectors, lines=self.lines, useful_bytes=self.useful_bytes,
                     fetched_bytes=self.fetched_bytes, efficiency=self.efficiency)
        else:
            b = bank_conflicts(self.addresses, self.width)
            d.update(banks=b["banks"], conflict_ways=b["ways"], wavefronts=b["wavefronts"])
        return d


# ---------------------------------------------------------------------------------------------------
# Counting over many warps (vectorized): one row per warp instruction, -1 = masked lane
# ---------------------------------------------------------------------------------------------------


def count_distinct(values: np.ndarray) -> np.ndarray:
    """Distinct non-negative values per row of a 2-D array (negative = absent)."""
    if values.shape[1] == 0:
        return np.zeros(values.shape[0], dtype=np.int64)
    s = np.sort(values, axis=1)
    fresh = (np.diff(s, axis=1) != 0) & (s[:, 1:] >= 0)
    return fresh.sum(axis=1) + (s[:, 0] >= 0)


def global_rows(addr: np.ndarray, width: int) -> dict:
    """Per-instruction sectors, lines, useful bytes and partially covered sectors of global accesses."""
    sec = np.where(addr >= 0, addr // SECTOR, -1)
    lines = np.where(addr >= 0, addr // LINE, -1)
    # Vectors of up to 16 bytes are aligned to their size, so a lane never straddles a sector.
    return {
        "sectors": count_distinct(sec),
        "lines": count_distinct(lines),
        "useful": count_distinct(addr) * width,
        "partial": partial_sectors(addr, width),
    }


def shared_rows(addr: np.ndarray, width: int) -> dict:
    """Per-instruction conflict degree and wavefronts of shared accesses."""
    rows = addr.shape[0]
    per_phase = shared_phases(width)
    nwords = max(1, cdiv(width, BANK_WIDTH))
    words = np.where(addr[..., None] >= 0, addr[..., None] // BANK_WIDTH + np.arange(nwords), -1)
    phases = WARP // per_phase
    words = words.reshape(rows * phases, per_phase * nwords)
    s = np.sort(words, axis=1)
    first = np.ones_like(s, dtype=bool)
    first[:, 1:] = s[:, 1:] != s[:, :-1]
    keep = first & (s >= 0)
    group = np.repeat(np.arange(rows * phases), s.shape[1]).reshape(s.shape)
    counts = np.bincount((group * BANKS + s % BANKS)[keep], minlength=rows * phases * BANKS)
    degree = counts.reshape(rows, phases, BANKS).max(axis=2)
    return {"ways": degree.max(axis=1), "wavefronts": degree.sum(axis=1)}
