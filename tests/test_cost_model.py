"""The staged permute's cost model (``tileflip.plan.cost``) and the sector counts it shares with the
analyzer (``tileflip.plan.sectors``), against sectors counted by hand or one address at a time."""

import math

import numpy as np
import pytest

from tileflip.plan import cost, device, sectors
from tileflip.plan.choose import staged_launch
from tileflip.plan.permute import contiguous_strides, plan_permute
from tileflip.plan.staged import THREADS, store_offsets


def test_partial_sectors_by_hand():
    whole = np.arange(32, dtype=np.int64)[None, :] * 4  # 128 bytes from a sector boundary: four whole sectors
    shifted = whole + 4  # bytes 4..131: sector 0 holds 28 of them, sector 4 holds 4
    some = np.where(np.arange(32) < 12, whole, -1)  # 48 bytes: sector 1 is half covered
    assert sectors.partial_sectors(np.concatenate([whole, shifted, some]), 4).tolist() == [0, 2, 1]


def test_residues_and_touched_bytes_by_hand():
    assert sectors.residues([16, 64]) == (0, 16)
    assert sectors.residues([4]) == tuple(range(0, 32, 4))
    assert sectors.residues([96, 256]) == (0,)
    assert sectors.touched_bytes(64, (0,)) == 64
    assert sectors.touched_bytes(64, (0, 16)) == (64 + 96) / 2  # from 16: sectors 0, 1 and 2
    assert sectors.touched_bytes(8, (0, 8, 16, 24)) == 32


def test_run_efficiency_interpolates_in_log2_and_holds_beyond_the_table():
    dev = {"run_efficiency": {"read": {"64": 0.5, "256": 0.9}}}
    assert device.run_efficiency(dev, "read", 64) == 0.5
    assert device.run_efficiency(dev, "read", 128) == pytest.approx(0.7)
    assert device.run_efficiency(dev, "read", 32) == 0.5
    assert device.run_efficiency(dev, "read", 4096) == 0.9
    assert device.run_efficiency(dev, "write", 64) == 1.0  # no table for the side: sectors alone
    assert device.run_efficiency({}, "read", 64) == 1.0


def _staged(shape, perm, es):
    p = plan_permute(shape, contiguous_strides(shape), perm, es)
    return p, staged_launch(p.sizes, p.in_strides, es, card="h100")


def test_dram_term_is_each_sides_sectors_over_its_run_efficiency():
    # (64, 4096) fp16 -> (4096, 64): every input segment is a whole number of sectors from a sector start
    p, go = _staged((64, 4096), (1, 0), 2)
    base = {"copy_bandwidth_bytes_per_s": 1e12}
    nbytes = 64 * 4096 * 2
    len_in, len_out = go.len_in() * 2, go.len_out() * 2
    assert len_in % 32 == 0 and len_out % 32 == 0
    assert cost.side_time(p.sizes, p.in_strides, go, base, "read", 32) == pytest.approx(nbytes / 1e12)
    table = {**base, "run_efficiency": {"read": {str(len_in): 0.25}}}
    assert cost.side_time(p.sizes, p.in_strides, go, table, "read", 32) == pytest.approx(4 * nbytes / 1e12)
    # an input 16 bytes past a sector: half the segments start mid-sector and touch one sector more
    shifted = cost.side_time(p.sizes, p.in_strides, go, base, "read", 16)
    assert shifted == pytest.approx(nbytes / 1e12 * sectors.touched_bytes(len_in, (0, 16)) / len_in)


def _partial_one_at_a_time(sizes, go, out_align):
    """Partial sectors of a box's store instructions, each lane's bytes added to its sectors one by one."""
    at, live = store_offsets(sizes, go)
    out_strides = contiguous_strides(sizes)
    g = 32
    for s in [out_align] + [go.extents[d] * out_strides[d] * go.element_size for d in go.tile_dims]:
        g = math.gcd(g, s)
    total = 0
    for r in range(0, 32, g):
        for start in range(0, len(at), 32):
            filled = {}
            for lane in range(start, start + 32):
                if live[lane]:
                    for b in range(at[lane] + r, at[lane] + r + go.vo):
                        filled[b // 32] = filled.get(b // 32, 0) + 1
            total += sum(1 for v in filled.values() if v < 32)
    return go.tiles * total / len(range(0, 32, g))


@pytest.mark.parametrize("shape, perm, es", [((20, 26, 23), (2, 0, 1), 4), ((7, 30, 12), (1, 2, 0), 2),
                                             ((3, 40, 64), (2, 0, 1), 1), ((64, 4096), (1, 0), 2)])  # fmt: skip
def test_partial_writes_match_a_count_one_byte_at_a_time(shape, perm, es):
    p, go = _staged(shape, perm, es)
    assert go is not None
    assert len(store_offsets(p.sizes, go)[0]) % THREADS == 0
    assert cost.partial_writes(p.sizes, go, 32) == pytest.approx(_partial_one_at_a_time(p.sizes, go, 32))


def test_whole_sector_stores_write_no_partial_sector():
    p, go = _staged((64, 4096), (1, 0), 2)
    assert cost.partial_writes(p.sizes, go, 32) == 0
    assert cost.partial_writes(p.sizes, go, 16) > 0  # out 16 bytes past a sector


def test_the_box_choice_takes_the_least_modelled_time():
    from dataclasses import replace

    from tileflip.plan import choose, staged

    p, go = _staged((4, 512, 512, 128), (0, 3, 1, 2), 2)
    dev = device.constants("h100")[0]

    def score(g):
        t = cost.traffic(p.sizes, p.in_strides, replace(g, lanes_seg=choose.widest_lanes(g)), dev)
        return max(t["dram"] + t["partial writes"], t["issue"])

    boxes = staged.staged_boxes(p.sizes, p.in_strides, 2)
    others = [staged.launch_for(p.sizes, p.in_strides, 2, 32, 32, e) for e in boxes]
    others = [g for g in others if g is not None and staged.buffer_layout(p.sizes, g) is not None]
    assert len(others) > 1
    assert score(go) == pytest.approx(min(score(g) for g in others))
