"""Triton's blocked layouts on sm_90: the rule its coalescing pass follows, and the layouts it compiled.

``triton_blocked_layout`` mirrors Triton 3.6's coalescing rule for a 2-D tile access;
``TRITON_SM90_LAYOUTS`` records what the project's transpose compiled to (tests re-derive both from a
fresh compile); ``layout_instructions`` turns a layout into each lane's start coordinates.
"""

from __future__ import annotations

import numpy as np

from tileflip.analyze.access import WARP
from tileflip.plan import cdiv

# Triton tiles assumed when none is given: tileflip.tuning's defaults (64x64 with 8 warps for 4- and
# 8-byte types, 128x128 / 16 warps for 2-byte and 128x256 / 16 warps for 1-byte types).
TRITON_DEFAULTS = {8: (64, 64, 8), 4: (64, 64, 8), 2: (128, 128, 16), 1: (128, 256, 16)}

# Layouts of the project's Triton transpose compiled for sm_90 (triton 3.6, GROUP_M = 1), read from
# its TTGIR by tileflip.kernels.triton.layout; registers from cuobjdump, shared bytes from the metadata.
# tests/test_analyze.py re-derives them from a fresh compile and from triton_blocked_layout.
TRITON_SM90_LAYOUTS = (
    {
        "itemsize": 4, "block": (64, 64), "num_warps": 8, "divisible": True, "regs": 32, "shared": 16384,
        "load": {"sizePerThread": [1, 4], "threadsPerWarp": [2, 16], "warpsPerCTA": [8, 1], "order": [1, 0]},
        "store": {"sizePerThread": [1, 4], "threadsPerWarp": [2, 16], "warpsPerCTA": [8, 1], "order": [1, 0]},
    },
    {
        "itemsize": 4, "block": (32, 32), "num_warps": 4, "divisible": True, "regs": 28, "shared": 4096,
        "load": {"sizePerThread": [1, 4], "threadsPerWarp": [4, 8], "warpsPerCTA": [4, 1], "order": [1, 0]},
        "store": {"sizePerThread": [1, 4], "threadsPerWarp": [4, 8], "warpsPerCTA": [4, 1], "order": [1, 0]},
    },
    {
        "itemsize": 4, "block": (64, 64), "num_warps": 8, "divisible": False, "regs": 92, "shared": 16384,
        "load": {"sizePerThread": [1, 1], "threadsPerWarp": [1, 32], "warpsPerCTA": [4, 2], "order": [1, 0]},
        "store": {"sizePerThread": [1, 1], "threadsPerWarp": [1, 32], "warpsPerCTA": [4, 2], "order": [1, 0]},
    },
    {
        "itemsize": 8, "block": (64, 64), "num_warps": 8, "divisible": True, "regs": 64, "shared": 32768,
        "load": {"sizePerThread": [1, 2], "threadsPerWarp": [1, 32], "warpsPerCTA": [8, 1], "order": [1, 0]},
        "store": {"sizePerThread": [1, 2], "threadsPerWarp": [1, 32], "warpsPerCTA": [8, 1], "order": [1, 0]},
    },
    {
        "itemsize": 2, "block": (128, 128), "num_warps": 16, "divisible": True, "regs": 49, "shared": 32768,
        "load": {"sizePerThread": [1, 8], "threadsPerWarp": [2, 16], "warpsPerCTA": [16, 1], "order": [1, 0]},
        "store": {"sizePerThread": [1, 8], "threadsPerWarp": [2, 16], "warpsPerCTA": [16, 1], "order": [1, 0]},
    },
    {
        "itemsize": 2, "block": (64, 64), "num_warps": 8, "divisible": True, "regs": 30, "shared": 8192,
        "load": {"sizePerThread": [1, 8], "threadsPerWarp": [4, 8], "warpsPerCTA": [8, 1], "order": [1, 0]},
        "store": {"sizePerThread": [1, 8], "threadsPerWarp": [4, 8], "warpsPerCTA": [8, 1], "order": [1, 0]},
    },
    {
        "itemsize": 1, "block": (128, 256), "num_warps": 16, "divisible": True, "regs": 40, "shared": 32768,
        "load": {"sizePerThread": [1, 16], "threadsPerWarp": [2, 16], "warpsPerCTA": [16, 1], "order": [1, 0]},
        "store": {"sizePerThread": [1, 16], "threadsPerWarp": [4, 8], "warpsPerCTA": [16, 1], "order": [1, 0]},
    },
)


def triton_record(itemsize: int, block, num_warps: int, divisible: bool) -> dict | None:
    """The recorded compile of this tile, warps and divisibility, or None."""
    for rec in TRITON_SM90_LAYOUTS:
        if (rec["itemsize"], tuple(rec["block"]), rec["num_warps"], rec["divisible"]) == (
                itemsize, tuple(block), num_warps, divisible):
            return rec
    return None


def triton_blocked_layout(shape, itemsize: int, num_warps: int, *, contiguous_dim: int | None = 1,
                          aligned: bool = True) -> dict:
    """The blocked layout Triton 3.6's coalescing pass gives a 2-D tile access on sm_90.

    Elements per thread along the contiguous dimension: 16 bytes' worth when the pointer is known
    16-byte aligned (strides divisible by 16), else one; never more than the tile spreads over the
    threads. Lanes, then warps, are laid out along the contiguous dimension first.
    """
    threads = num_warps * WARP
    order = [1, 0] if contiguous_dim in (1, None) else [0, 1]
    spt = [1, 1]
    if contiguous_dim is not None:
        per_thread = (16 // itemsize) if aligned else 1
        per_thread = min(per_thread, shape[order[0]], max(shape[0] * shape[1] // threads, 1))
        spt[order[0]] = max(per_thread, 1)
    tpw, wpc = [1, 1], [1, 1]
    lanes_left, warps_left, threads_left = WARP, num_warps, threads
    for d in order:
        per_cta = min(max(threads_left, 1), max(1, shape[d] // spt[d]))
        tpw[d] = min(per_cta, lanes_left)
        wpc[d] = min(max(per_cta // tpw[d], 1), warps_left)
        lanes_left //= tpw[d]
        warps_left //= wpc[d]
        threads_left //= per_cta
    # Whatever lanes and warps are left go to the slowest dimension (they replicate if it is short).
    last = order[-1]
    tpw[last] *= lanes_left
    wpc[last] *= warps_left
    return {"sizePerThread": spt, "threadsPerWarp": tpw, "warpsPerCTA": wpc, "order": order}


def layout_instructions(shape, layout: dict, num_warps: int, vec: int) -> np.ndarray:
    """Start coordinates (warps, instructions, 32, 2) of each lane's vector under a blocked layout."""
    spt, tpw, wpc, order = layout["sizePerThread"], layout["threadsPerWarp"], layout["warpsPerCTA"], layout["order"]
    fast, slow = order
    per_cta = [spt[d] * tpw[d] * wpc[d] for d in (0, 1)]
    reps = [max(1, cdiv(shape[d], per_cta[d])) for d in (0, 1)]
    lane = np.arange(WARP)
    lane_c = {fast: lane % tpw[fast], slow: (lane // tpw[fast]) % tpw[slow]}
    warp = np.arange(num_warps)
    warp_c = {fast: warp % wpc[fast], slow: (warp // wpc[fast]) % wpc[slow]}
    vec = max(1, min(vec, spt[fast]))
    starts = []
    for r0 in range(reps[0]):
        for r1 in range(reps[1]):
            rep = (r0, r1)
            for k_slow in range(spt[slow]):
                for k_fast in range(0, spt[fast], vec):
                    k = {slow: k_slow, fast: k_fast}
                    coord = [
                        (rep[d] * per_cta[d] + warp_c[d][:, None] * spt[d] * tpw[d] + lane_c[d][None, :] * spt[d]
                         + k[d]) % shape[d]
                        for d in (0, 1)
                    ]
                    starts.append(np.stack(coord, axis=-1))
    return np.stack(starts, axis=1)
