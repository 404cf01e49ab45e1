"""The staged permute's cost model: time from its launch's traffic, shared-memory wavefronts and issued
instructions, with the card's device constants (``tileflip.plan.device``). Pure Python and numpy.

A launch's time is its longest resource, plus the launch overhead:

* ``dram``: each side's segments as the sectors they touch (averaged over the offsets their starts take
  within a sector), at the card's copy bandwidth, divided by the card's measured efficiency of runs of that
  many bytes (``device.run_efficiency``: a run alone in its 128-byte lines costs more than its sectors);
* ``partial writes``: sectors a store instruction covers only in part, counted from the box's own store
  addresses, go through L2's byte-masked merge at the card's measured rate of partial sector writes. They
  add to ``dram``: the merge holds the same L2 slices the stream goes through;
* ``issue``: warp instructions, at four a clock on every SM. A box's come from the kernel's sm_90 machine
  code (``data/sass-staged.json``): the loop, less the store slots the box leaves empty, and the one thread
  that finds the next box's place; a block's setup once;
* ``shared``: wavefronts of the gathers (counted from the box's own addresses, bank conflicts included) and
  of the copies into the buffer, one a clock on every SM.

``traffic`` gives the first three (the box choice uses them); ``predict`` every term and the fraction of
a same-run copy it predicts.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from tileflip.plan.device import run_efficiency
from tileflip.plan.launch import product as _product
from tileflip.plan.permute import contiguous_strides
from tileflip.plan.sectors import partial_sectors, residues, touched_bytes
from tileflip.plan.staged import (
    ALIGN_BYTES,
    BOX_BYTES,
    THREADS,
    StagedLaunch,
    gather_wavefronts,
    segment_runs,
    store_offsets,
)

SASS_FILE = Path(__file__).resolve().parents[1] / "data" / "sass-staged.json"
WARP_ISSUE_PER_CLOCK = 4  # an SM's four schedulers, one warp instruction each a clock
WAVEFRONTS_PER_CLOCK = 1  # an SM's shared-memory pipe


@lru_cache(maxsize=1)
def sass_table() -> dict:
    return json.loads(SASS_FILE.read_text())["kernels"]


def side_time(sizes, strides, go: StagedLaunch, dev: dict, side: str, align: int) -> float:
    """Seconds one side's segments take at the card's copy bandwidth (``dram``, per side)."""
    es = go.element_size
    nbytes = es * _product(sizes)
    runs, steps = segment_runs(sizes, strides, go, side, align)
    starts = residues(steps)
    traffic = 0.0
    for length, share in runs:
        touched = touched_bytes(length, starts)
        traffic += share * nbytes / length * touched / run_efficiency(dev, side, touched)
    return traffic / dev["copy_bandwidth_bytes_per_s"]


def partial_writes(sizes, go: StagedLaunch, out_align: int, slots=None) -> float:
    """Sectors the stores of every box cover only in part, each box's store addresses counted at every
    offset within a sector that box starts take (``slots``: ``store_offsets(sizes, go)``, where the caller
    has them)."""
    import numpy as np

    at, live = slots if slots is not None else store_offsets(sizes, go)
    out_strides = contiguous_strides(sizes)
    starts = residues([out_align] + [go.extents[d] * out_strides[d] * go.element_size for d in go.tile_dims])
    lanes = np.where(live, at, -1).reshape(-1, 32)
    per_box = sum(int(partial_sectors(np.where(lanes >= 0, lanes + r, -1), go.vo).sum()) for r in starts)
    return go.tiles * per_box / len(starts)


def traffic(sizes, in_strides, go: StagedLaunch, dev: dict, in_align: int = ALIGN_BYTES, out_align: int = ALIGN_BYTES,
            blocks: int | None = None) -> dict:  # fmt: skip
    """The model's ``dram``, ``partial writes`` and ``issue`` seconds of launch ``go`` (``blocks``: the
    persistent grid, default three a SM)."""
    t_dram = (side_time(sizes, in_strides, go, dev, "read", in_align)
              + side_time(sizes, contiguous_strides(sizes), go, dev, "write", out_align))  # fmt: skip
    slots = store_offsets(sizes, go)
    t_partial = partial_writes(sizes, go, out_align, slots) / dev["l2_write_sectors_per_s"]

    sms, clock = dev["sm_count"], dev["sm_clock_hz"]
    blocks = min(go.tiles, blocks or 3 * sms)
    counts = sass_table()[go.kernel]
    per_slot = slots[1].reshape(-1, THREADS).mean(axis=1)  # the share of threads each store slot keeps busy
    warps = THREADS // 32
    loop = counts["loop"] - sum(size * (1 - used) for size, used in zip(counts["slots"], per_slot))
    box_instr = warps * loop + counts["next_box"] + counts["next_box_dim"] * len(go.tile_dims)
    instructions = go.tiles * box_instr + blocks * warps * counts["setup"]
    t_issue = instructions / (sms * WARP_ISSUE_PER_CLOCK * clock)
    return {"dram": t_dram, "partial writes": t_partial, "issue": t_issue, "instructions": instructions}


def predict(sizes, in_strides, go: StagedLaunch, dev: dict, in_align: int = ALIGN_BYTES, out_align: int = ALIGN_BYTES,
            blocks: int | None = None) -> dict:  # fmt: skip
    """The model's time (seconds) of launch ``go`` of a plan's merged ``sizes`` and ``in_strides``, with x
    and out aligned to ``in_align`` and ``out_align`` bytes; each term, and the fraction of a same-run copy it
    predicts (``blocks``: the persistent grid, default three a SM)."""
    es = go.element_size
    nbytes = _product(sizes) * es
    sms, clock = dev["sm_count"], dev["sm_clock_hz"]
    t = traffic(sizes, in_strides, go, dev, in_align, out_align, blocks)
    instructions = t.pop("instructions")

    copies = go.box_elements * es / 512 * 4 / max(1, 16 // go.vi)  # cp.async: 4 wavefronts a 512-byte warp copy
    gathers = gather_wavefronts(sizes, go)
    t_shared = go.tiles * (copies + gathers) / (sms * WAVEFRONTS_PER_CLOCK * clock)

    t0 = dev["launch_overhead_s"]
    terms = {**t, "shared": t_shared}
    paths = {"dram": t["dram"] + t["partial writes"], "issue": t["issue"], "shared": t_shared}
    bound = max(paths, key=paths.get)
    time = paths[bound] + t0
    copy_time = 2 * nbytes / dev["copy_bandwidth_bytes_per_s"] + t0
    bound = "dram and partial writes" if bound == "dram" and t["partial writes"] > 0 else bound
    return {"terms": terms, "bound": bound, "time": time, "fraction_of_copy": copy_time / time,
            "instructions_per_byte": 32 * instructions / (2 * nbytes), "wavefronts_per_box": copies + gathers,
            "box_bytes": go.box_elements * es, "capacity": BOX_BYTES}  # fmt: skip
