"""What a whole launch asks of memory: sampled programs, per-access totals, and DRAM bytes after L2.

Large launches are sampled (an even spread of programs per edge class, weighted by class size);
``summarize`` sums one access over them; ``dram_bytes`` decides which partially written sectors L2
merges before write-back (docs/design.md (The access analyzer), "From requests to DRAM bytes").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tileflip.analyze.access import SECTOR, WARP, WarpAccess, count_distinct, global_rows, shared_rows
from tileflip.analyze.variants import Batch, Variant

# Only the bytes in between have to fit for a merge; half the L2 leaves room for the reads that
# stream through it at the same time.
L2_MERGE_FRACTION = 0.5


@dataclass
class AccessStats:
    """One access of the kernel summed over the launch (sampled programs weighted by their class)."""

    name: str
    space: str
    op: str
    width: int
    instructions_per_warp: int
    requests: float
    useful_bytes: float = 0.0
    sectors: float = 0.0
    lines: float = 0.0
    cta_sectors: float = 0.0
    partial_sectors: float = 0.0
    wavefronts: float = 0.0
    conflict_ways: int = 1
    mean_conflict_ways: float = 1.0
    example: WarpAccess | None = None

    @property
    def efficiency(self) -> float:
        return self.useful_bytes / (self.sectors * SECTOR) if self.sectors else 1.0

    @property
    def sectors_per_request(self) -> float:
        return self.sectors / self.requests if self.requests else 0.0

    def to_dict(self) -> dict:
        d = {
            "name": self.name, "space": self.space, "op": self.op, "width": self.width,
            "instructions_per_warp": self.instructions_per_warp, "requests": self.requests,
            "wavefronts": self.wavefronts,
        }
        if self.space == "global":
            d.update(efficiency=self.efficiency, sectors=self.sectors, sectors_per_request=self.sectors_per_request,
                     lines=self.lines, useful_bytes=self.useful_bytes, cta_distinct_sectors=self.cta_sectors)
        else:
            d.update(conflict_ways=self.conflict_ways, mean_conflict_ways=self.mean_conflict_ways)
        if self.example is not None:
            d["example_warp"] = self.example.to_dict()
        return d


def sample_programs(variant: Variant, sample: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """Programs to enumerate and the weight of each: all of them, or an even spread per edge class."""
    g = variant.grid
    total = g.programs
    if total <= sample:
        return np.arange(total, dtype=np.int64), np.ones(total), False
    edge_m = int(variant.M % g.block_m != 0)
    edge_n = int(variant.N % g.block_n != 0)
    classes = []  # (first tile row, tile rows, first tile column, tile columns): ranges, never listed
    for last_m in {0, edge_m}:
        for last_n in {0, edge_n}:
            rows = (g.grid_m - 1, 1) if last_m else (0, g.grid_m - edge_m)
            cols = (g.grid_n - 1, 1) if last_n else (0, g.grid_n - edge_n)
            if rows[1] and cols[1]:
                classes.append((*rows, *cols))
    budget = max(1, sample // len(classes))
    pids, weights = [], []
    for r0, nr, c0, nc in classes:
        count = nr * nc
        k = min(count, budget)
        flat = np.unique(np.linspace(0, count - 1, k).round().astype(np.int64))
        pids.append(variant.pid_of(r0 + flat // nc, c0 + flat % nc))
        weights.append(np.full(len(flat), count / len(flat)))
    return np.concatenate(pids), np.concatenate(weights), True


def footprint_bytes(shape, strides, itemsize: int) -> int:
    """Bytes of the distinct 32-byte sectors a strided 2-D tensor occupies (what DRAM must move once)."""
    d0, d1 = shape
    if d0 == 0 or d1 == 0:
        return 0
    (n_in, s_in), (n_out, s_out) = sorted(((d1, strides[1]), (d0, strides[0])), key=lambda p: (p[1], -p[0]))
    b_in, b_out = s_in * itemsize, s_out * itemsize
    if b_in <= SECTOR:
        # No sector of a line's span is skipped: each line is one interval of sectors, and the intervals
        # move forward with the line (starts k * b_out, one length), so line k adds the sectors of its
        # interval past line k - 1's. That count repeats every `period` lines (they move the start by a
        # whole number of sectors): counted over one period (and the rest), whatever the line count.
        span = (n_in - 1) * b_in + itemsize
        period = SECTOR // math.gcd(b_out, SECTOR)

        def added(k):  # sectors line k adds (k >= 1)
            first, last = k * b_out // SECTOR, (k * b_out + span - 1) // SECTOR
            return max(0, last - max(first, ((k - 1) * b_out + span - 1) // SECTOR + 1) + 1)

        per = [added(k) for k in range(1, period + 1)]
        full, rest = divmod(n_out - 1, period)
        first_line = (span - 1) // SECTOR + 1
        return (first_line + full * sum(per) + sum(per[:rest])) * SECTOR
    if n_in * n_out <= 1 << 22:
        starts = np.arange(n_out, dtype=np.int64) * b_out
        addr = starts[:, None] + np.arange(n_in, dtype=np.int64)[None, :] * b_in
        return len(np.unique(addr // SECTOR)) * SECTOR
    return n_in * n_out * SECTOR


def _example_warp(batch: Batch, program_index: int = 0) -> WarpAccess:
    row = batch.addr[program_index, 0]
    return WarpAccess(batch.name, batch.space, batch.op, batch.width,
                      tuple(None if a < 0 else int(a) for a in row))


def summarize(batch: Batch, weights: np.ndarray) -> AccessStats:
    """One access's requests, sectors, lines, wavefronts and conflicts over the sampled programs, weighted."""
    n, k, _ = batch.addr.shape
    flat = batch.addr.reshape(n * k, WARP)
    live = (flat >= 0).any(axis=1).reshape(n, k)
    stats = AccessStats(batch.name, batch.space, batch.op, batch.width, batch.instr_per_warp,
                        requests=float(weights @ live.sum(axis=1)))
    if batch.space == "global":
        rows = {key: v.reshape(n, k).sum(axis=1) for key, v in global_rows(flat, batch.width).items()}
        stats.useful_bytes = float(weights @ rows["useful"])
        stats.sectors = float(weights @ rows["sectors"])
        stats.lines = float(weights @ rows["lines"])
        stats.partial_sectors = float(weights @ rows["partial"])
        stats.wavefronts = stats.lines
        sec = np.where(batch.addr >= 0, batch.addr // SECTOR, -1).reshape(n, k * WARP)
        stats.cta_sectors = float(weights @ count_distinct(sec))
    else:
        rows = shared_rows(flat, batch.width)
        ways = rows["ways"].reshape(n, k)
        stats.wavefronts = float(weights @ rows["wavefronts"].reshape(n, k).sum(axis=1))
        stats.conflict_ways = int(max(1, ways.max(initial=0)))
        stats.mean_conflict_ways = float(weights @ (ways * live).sum(axis=1)) / stats.requests if stats.requests else 1
    stats.example = _example_warp(batch)
    return stats


def _partial_sector_spans(variant: Variant, batch: Batch, limit: int = 4096) -> np.ndarray:
    """Launch-order span (in programs) of sectors that a program covers only in part."""
    n, k, _ = batch.addr.shape
    addr = batch.addr.reshape(n, k * WARP)
    coords = batch.coords.reshape(n, k * WARP, 2)
    prog = np.repeat(np.arange(n), k * WARP).reshape(n, k * WARP)
    live = addr >= 0
    addr, coords, prog = addr[live], coords[live], prog[live]
    if addr.size == 0:
        return np.zeros(0, dtype=np.int64)
    # Bytes each program writes into each sector; a sector it fills completely needs nobody else.
    keys, first = np.unique(prog * (1 << 40) + addr, return_index=True)
    sect_keys, inverse = np.unique(keys // (1 << 40) * (1 << 40) + (keys % (1 << 40)) // SECTOR,
                                   return_inverse=True)
    covered = np.bincount(inverse, minlength=len(sect_keys)) * batch.width
    partial = np.flatnonzero(covered < SECTOR)
    if partial.size == 0:
        return np.zeros(0, dtype=np.int64)
    partial = partial[np.linspace(0, partial.size - 1, min(limit, partial.size)).round().astype(np.int64)]
    rep = np.zeros(len(sect_keys), dtype=np.int64)
    rep[inverse] = first
    rep_coords = coords[rep[partial]]
    sector = addr[rep[partial]] // SECTOR
    shape = (variant.M, variant.N) if batch.tensor == "x" else (variant.N, variant.M)
    strides = variant.x_strides if batch.tensor == "x" else variant.out_strides
    es = variant.itemsize
    reach = [(SECTOR - 1) // (s * es) if s else 0 for s in strides]
    da, db = np.meshgrid(np.arange(-reach[0], reach[0] + 1), np.arange(-reach[1], reach[1] + 1), indexing="ij")
    cand = rep_coords[:, None, :] + np.stack([da.ravel(), db.ravel()], axis=-1)[None, :, :]
    inside = (cand[..., 0] >= 0) & (cand[..., 0] < shape[0]) & (cand[..., 1] >= 0) & (cand[..., 1] < shape[1])
    same = (cand[..., 0] * strides[0] + cand[..., 1] * strides[1]) * es // SECTOR == sector[:, None]
    owner = variant.owner(cand, batch.tensor)
    ok = inside & same
    hi = np.where(ok, owner, -1).max(axis=1)
    lo = np.where(ok, owner, np.iinfo(np.int64).max).min(axis=1)
    return hi - lo


def dram_bytes(variant: Variant, stats: list, batches: list, bytes_per_program: float, l2_bytes: float) -> dict:
    """DRAM bytes of reads and writes after L2 merging, and how the merge was judged."""
    fp_in = footprint_bytes((variant.M, variant.N), variant.x_strides, variant.itemsize)
    fp_out = footprint_bytes((variant.N, variant.M), variant.out_strides, variant.itemsize)
    result = {}
    for op, footprint in (("load", fp_in), ("store", fp_out)):
        requested = sum(s.cta_sectors for s in stats if s.space == "global" and s.op == op) * SECTOR
        spans = np.concatenate([_partial_sector_spans(variant, b) for b in batches
                                if b.space == "global" and b.op == op] or [np.zeros(0, dtype=np.int64)])
        if spans.size:
            merged = float(np.mean(spans * bytes_per_program <= L2_MERGE_FRACTION * l2_bytes))
            worst = int(spans.max())
        else:
            merged, worst = 1.0, 0
        dram = footprint + (1.0 - merged) * max(0.0, requested - footprint)
        result[op] = {"dram_bytes": dram, "footprint_bytes": footprint, "partial_sectors_sampled": int(spans.size),
                      "merged_fraction": merged, "max_span_programs": worst}
    return result
