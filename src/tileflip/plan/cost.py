"""The staged permute's cost model: time from its launch's traffic, shared-memory wavefronts and issued
instructions, with the card's device constants (``tileflip.plan.device``). Pure Python and numpy.

A launch's time is its longest resource, plus the launch overhead:

* ``dram``: the bytes of the DRAM granules its segments touch, at the card's copy bandwidth. A segment of
  whole granules that starts on one touches no more; another, on average, half a granule more at each end.
* ``issue``: warp instructions, at four a clock on every SM. A box's come from the kernel's sm_90 machine
  code (``data/sass-staged.json``): the loop, less the store slots the box leaves empty, and the one thread
  that finds the next box's place; a block's setup once.
* ``shared``: wavefronts of the gathers (counted from the box's own addresses, bank conflicts included) and
  of the copies into the buffer, one a clock on every SM.
* ``partial writes``: stores that fill part of a sector (an output segment's ends off a sector boundary) go
  through L2's byte-masked merge, at the card's measured rate of partial sector writes.

``predict`` returns every term and the fraction of a same-size copy it predicts.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from tileflip.plan.grid import cdiv
from tileflip.plan.staged import BOX_BYTES, THREADS, StagedLaunch, gather_wavefronts, store_places

SASS_FILE = Path(__file__).resolve().parents[1] / "data" / "sass-staged.json"
SECTOR = 32
GRANULE = 64  # bytes L2 fetches from DRAM at a time
WARP_ISSUE_PER_CLOCK = 4  # an SM's four schedulers, one warp instruction each a clock
WAVEFRONTS_PER_CLOCK = 1  # an SM's shared-memory pipe


@lru_cache(maxsize=1)
def sass_table() -> dict:
    return json.loads(SASS_FILE.read_text())["kernels"]


def segment_efficiency(length: int, width: int) -> float:
    """Useful bytes over the bytes of the DRAM granules a segment of ``length`` bytes touches, its starts on
    multiples of ``width`` bytes."""
    if length % GRANULE == 0 and width == 16 and length >= GRANULE:
        return 1.0
    return length / (GRANULE * cdiv(length, GRANULE) + GRANULE / 2)


def partial_sectors(length: int, width: int) -> float:
    """Sectors a segment's store writes in part, on average: none where it is whole sectors from a sector
    boundary, else about one at each end."""
    if length % SECTOR == 0 and width >= 16:
        return 0.0
    return 2.0 * min(1.0, (SECTOR - width) / SECTOR + (0.5 if length % SECTOR else 0.0))


def predict(sizes, go: StagedLaunch, dev: dict, blocks: int | None = None) -> dict:
    """The model's time (seconds) of launch ``go`` of a plan's merged ``sizes``, each term, and the fraction
    of a same-run copy it predicts; ``blocks``: the persistent grid (default: three a SM)."""
    es = go.element_size
    numel = 1
    for s in sizes:
        numel *= s
    nbytes = numel * es
    sms, clock = dev["sm_count"], dev["sm_clock_hz"]
    copy_bw = dev["copy_bandwidth_bytes_per_s"]
    blocks = min(go.tiles, blocks or 3 * sms)

    eff_in = segment_efficiency(go.len_in() * es, go.vi)
    eff_out = segment_efficiency(go.len_out() * es, go.vo)
    t_dram = nbytes / copy_bw * (1 / eff_in + 1 / eff_out)

    counts = sass_table()[go.kernel]
    rows, _, live = store_places(sizes, go)
    per_slot = live.reshape(-1, THREADS).mean(axis=1)  # the share of threads each store slot keeps busy
    warps = THREADS // 32
    loop = counts["loop"] - sum(size * (1 - used) for size, used in zip(counts["slots"], per_slot))
    box_instr = warps * loop + counts["next_box"] + counts["next_box_dim"] * len(go.tile_dims)
    instructions = go.tiles * box_instr + blocks * warps * counts["setup"]
    t_issue = instructions / (sms * WARP_ISSUE_PER_CLOCK * clock)

    copies = go.box_elements * es / 512 * 4 / max(1, 16 // go.vi)  # cp.async: 4 wavefronts a 512-byte warp copy
    gathers = gather_wavefronts(sizes, go)
    t_shared = go.tiles * (copies + gathers) / (sms * WAVEFRONTS_PER_CLOCK * clock)

    segments_out = go.box_elements // go.len_out()
    partial = go.tiles * segments_out * partial_sectors(go.len_out() * es, go.vo)
    t_partial = partial / dev["l2_write_sectors_per_s"]

    t0 = dev["launch_overhead_s"]
    terms = {"dram": t_dram, "issue": t_issue, "shared": t_shared, "partial writes": t_partial}
    bound = max(terms, key=terms.get)
    time = terms[bound] + t0
    copy_time = 2 * nbytes / copy_bw + t0
    return {"terms": terms, "bound": bound, "time": time, "fraction_of_copy": copy_time / time,
            "instructions_per_byte": 32 * instructions / (2 * nbytes), "wavefronts_per_box": copies + gathers,
            "box_bytes": go.box_elements * es, "rows": int(rows.shape[0]), "capacity": BOX_BYTES}  # fmt: skip
