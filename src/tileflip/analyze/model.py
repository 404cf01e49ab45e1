"""What each warp of a transpose asks of memory, and how long that takes — CPU only.

This module imports numpy, the standard library and :mod:`tileflip.plan` (the planner the kernels
launch from), nothing else: no torch, no triton, no matplotlib.

Part 1 — requests (exact, per warp)
-----------------------------------
For a kernel variant, a shape, a dtype and the input strides, every warp instruction that touches
memory is enumerated from the planner's grid (``plan.transpose_grid``: 1-D launch, program ``pid``
handles tile ``grid.tile_of(pid)``) and the variant's thread mapping:

* global memory: the 32 lanes' byte addresses, the distinct 32-byte sectors and 128-byte lines they
  touch, and useful bytes / (sectors x 32), the access's sector efficiency;
* shared memory: each lane's bank (32 banks of 4 bytes) and the access's n-way conflict. A warp
  access is served in phases of at most 128 bytes: all 32 lanes for accesses of up to 4 bytes,
  half-warps for 8 bytes, quarter-warps for 16 bytes. Within a phase the degree is the largest
  number of *distinct* 4-byte words in one bank (lanes reading one word are a broadcast);
  wavefronts (cycles of the shared-memory pipe) = the sum of the phases' degrees.

Thread mappings (a warp is 32 consecutive threads in x-then-y order), as in kernels/cuda/transpose.cu
and kernels/triton_transpose.py:

* ``naive``: one thread per element, block ``threads = (tx, ty)`` (16x16, seed 002's). Thread (x, y)
  of program (pid_m, pid_n) reads x[pid_m*ty + y, pid_n*tx + x] and writes it at ``col*M + row``.
  Seed 002 says a warp has one row and writes 32 sectors (12.5%); that holds for 32-wide blocks
  once M >= 8 (32 / itemsize rows per sector). With its own 16x16 blocks a warp is two half-rows,
  lanes x and x+16 write rows r and r+1 of one column into one sector: 16 sectors, 25%. The seed
  also reads 12.5% as DRAM efficiency; it is L1 -> L2 traffic: L2 merges the partial sectors, and
  DRAM moves the minimum (Part 2).
* ``tiled`` / ``tiled_nopad``: a 32x32 tile of the element type in shared memory, rows 33 or 32
  elements wide; 32x8 threads, 4 elements each; coalesced loads into ``tile[y][x]``, barrier,
  coalesced stores from ``tile[x][y]``. For 4-byte types the unpadded column read puts 32 lanes in
  one bank (32-way), the padded one in 32 banks. For 8-byte types: 16-way / 1-way (half-warps).
  For 2- and 1-byte types the padding leaves a 2-way conflict on half the column reads.
* ``triton``: BLOCK_M x BLOCK_N tiles. Global accesses follow the blocked layouts Triton 3.6 gives
  the project's kernel for sm_90: ``triton_blocked_layout`` mirrors its coalescing rule, the test
  ``test_triton_layouts_match_compiled_kernel`` re-derives them (and registers, shared bytes) from
  the TTGIR and cubin of the kernel compiled here, and ``TRITON_SM90_LAYOUTS`` records them. A
  masked vector access stays a vector only when the bound is divisible by 16 (Triton's hint). The
  conversion behind ``tl.trans`` goes through shared memory; the model *assumes* it conflict-free
  (Triton swizzles it) and charges tile_bytes / 128 wavefronts each way: it does not derive those
  banks.

Large launches are sampled: programs fall in interior / last-row / last-column / corner classes; at
most ``sample`` programs are enumerated, evenly spread in each class, weighted by class size. The
report says so (``sampled``, ``programs_analyzed``).

Part 2 — from requests to DRAM bytes
------------------------------------
Stores are not merged in L1, but L2 keeps per-byte masks, so partial sectors written by neighbouring
warps are merged there before write-back. For each partial sector of the sample the model finds
every program touching it (inverse index math through the planner's tiles and launch order) and
merges it when span (programs) x bytes a program moves fits in half the L2 (the other half streams
the reads). Merged sectors cost the tensor's footprint once; unmerged ones 32 bytes per program.
Loads are merged per program by L1. For all four kernels at these shapes ``dram_bytes == min_bytes``.

Part 3 — from requests and bytes to time
----------------------------------------
t = max(memory, global requests, write sectors, read sectors, L1/shared wavefronts) + t0, every term
from the device constants of data/h200.json and the enumerated accesses, none per variant:

* memory (Little's law over CTA slots): every kernel here is one tile per CTA, not persistent. The
  busiest SM runs its CTAs in ``rounds`` = (its DRAM load bytes) / Q, where Q = resident CTAs per SM x
  the load bytes a CTA has in flight before it first waits (naive: one element per thread; tiled: its
  32x32 tile; Triton: its tile); residency from threads, shared memory and registers. Each round a
  slot pays, besides moving its bytes, L (``cta_latency_s``: how long its loads stay outstanding,
  measured with persistent CTAs) and a turnaround: the CTA's own shared-memory phase between its loads
  landing and its stores (``smem_wavefronts_per_cta / sm_clock_hz``, from the enumerated smem
  accesses) plus ``cta_turnaround_s`` (retire and relaunch; measured as the difference per round
  between one-block-per-CTA and persistent copies: ~0 on the H200, 2026-11-30, the one-block copies
  were no slower). memory = dram_bytes / copy_bw + rounds x (L + turnaround).
* global requests: every warp-wide global load or store instruction is one request, whatever its
  width, and the memory system serves at most ``global_requests_per_s`` of them. Measured by a
  persistent copy whose lanes move one 2-byte element per instruction (64-byte requests): 4.5e10/s,
  68% of copy, where the same copy with 4-byte elements and the same bytes in flight reaches 90%
  (``measurements.request_size_check``). This is issue 4's bf16 miss: the CUDA ``tiled`` kernel moves
  one element per lane per instruction, so bf16 issues twice the requests per byte of fp32. bf16
  16384^2: 2 x 512 MiB / 64 B = 16.8 M requests / 4.5e10/s = 372 us against 252 us of DRAM time ->
  68.0% (measured 65.7%); fp32's 16.8 M requests of 128 B stay under its 504 us of DRAM time. Triton's
  16-byte vectors make 512-byte requests, far from this limit. (The previous model, without this
  term, predicted 83.5%.)
* write sectors: sectors that store instructions write only in part (fewer than 32 of their bytes),
  each counted once per instruction / ``l2_write_sectors_per_s``, the rate measured with one
  4-byte element per sector. Fully written sectors are not merged in L2 and are priced by the
  memory term; counting them too (the first version of this model) made every coalesced kernel,
  the copy included, look write-sector bound.
* read sectors: distinct sectors per CTA of the loads / ``l2_read_sectors_per_s`` (for strided inputs).
* L1/shared pipe: one wavefront per clock per SM (``sm_clock_hz``); a global access costs one per
  distinct 128-byte line, a shared access its bank-conflict wavefronts.

predicted_fraction_of_copy = (min_bytes / copy_bw + t0) / t, with t0 = ``launch_overhead_s``.

Why each variant lands where it does (fp32 16384^2, committed constants, measured 2026-11-30):

* naive 16x16: 4x the minimum write sectors -> write-sector bound, ~22% (measured ~24%).
* tiled_nopad: 1 + 1 + 32 + 1 = 35 wavefronts per 32 elements -> 2.2 M cycles per SM -> 45% at
  1.98 GHz (~38%); 36.6% if the clock sits at the 1.6 GHz base.
* tiled: every access ideal; Q = 8 CTAs x 4 KB = 32 KB in flight and 248 rounds of latency -> ~90%
  (~83%); for bf16 the request rate binds (above).
* triton: 16-byte vectors, large tiles, Q of 64-128 KB per SM -> 93-96% (95%).

Assumed: a slot's turnaround does not overlap its own loads, so it adds to L; the request limit is one
device-wide rate for loads and stores alike, whatever the bytes per request.

Not modelled: DRAM page locality and read/write turnaround, ECC read-modify-write of unmerged
partial sectors, L2 partition crossing, clock throttling, instruction issue limits, and the host
launch cost of small calls (t0 is the GPU-side cost measured under do_bench).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tileflip.plan import TransposeGrid, cdiv, check_tile, transpose_grid

WARP = 32
SECTOR = 32
LINE = 128
BANKS = 32
BANK_WIDTH = 4
KERNELS = ("naive", "tiled_nopad", "tiled", "triton")
# Only the bytes in between have to fit for a merge; half the L2 leaves room for the reads that
# stream through it at the same time.
L2_MERGE_FRACTION = 0.5

DEVICE_FILE = Path(__file__).resolve().parents[1] / "data" / "h200.json"

_DTYPE_SIZES = {
    "float64": 8, "double": 8, "fp64": 8, "int64": 8, "long": 8, "uint64": 8, "complex64": 8,
    "float32": 4, "float": 4, "fp32": 4, "int32": 4, "int": 4, "uint32": 4,
    "float16": 2, "half": 2, "fp16": 2, "bfloat16": 2, "bf16": 2, "int16": 2, "short": 2, "uint16": 2,
    "int8": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "fp8": 1,
    "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
}

# Triton tiles assumed when none is given: tileflip.tuning's defaults (64x64 with 8 warps for 4- and
# 8-byte types, 128x128 / 16 warps for 2-byte and 128x256 / 16 warps for 1-byte types).
TRITON_DEFAULTS = {8: (64, 64, 8), 4: (64, 64, 8), 2: (128, 128, 16), 1: (128, 256, 16)}

# Layouts of the project's Triton transpose compiled for sm_90 (triton 3.6, GROUP_M = 1), read from
# its TTGIR by tileflip.kernels.triton_layout; registers from cuobjdump, shared bytes from the metadata.
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


# ---------------------------------------------------------------------------------------------------
# dtypes and device constants
# ---------------------------------------------------------------------------------------------------


def itemsize_of(dtype) -> int:
    """Bytes per element of a dtype given by name ("float32", "torch.bfloat16", "bf16") or size."""
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        if dtype not in (1, 2, 4, 8):
            raise ValueError(f"an element size must be 1, 2, 4 or 8 bytes, got {dtype}")
        return dtype
    name = str(dtype).removeprefix("torch.").lower()
    if name not in _DTYPE_SIZES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(sorted(_DTYPE_SIZES))}")
    return _DTYPE_SIZES[name]


def load_device(device=None) -> dict:
    """Device constants: the committed H200 file by default, or a path, or a dict used as is."""
    if isinstance(device, dict):
        return device
    path = Path(device) if device is not None else DEVICE_FILE
    with open(path, encoding="utf-8") as f:
        try:
            constants = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"device file {str(path)!r} is not JSON ({e})") from None
    if not isinstance(constants, dict):
        raise ValueError(f"device file {str(path)!r} must hold a JSON object of device constants")
    return constants


# ---------------------------------------------------------------------------------------------------
# One warp access
# ---------------------------------------------------------------------------------------------------


def _shared_phases(width: int) -> int:
    """Lanes served together: a wavefront carries at most 128 bytes (8-byte -> half-warps)."""
    return min(WARP, LINE // max(width, BANK_WIDTH))


def bank_conflicts(addresses, width: int) -> dict:
    """Banks, n-way conflict and wavefronts of one shared-memory warp access.

    ``addresses`` holds up to 32 byte addresses (None or negative for inactive lanes). Lanes are
    served in phases of ``_shared_phases(width)``; within a phase the degree is the largest number
    of distinct 4-byte words in one bank, so lanes reading one word (a broadcast) cost nothing.
    """
    lanes = [None if a is None or a < 0 else int(a) for a in addresses]
    per_phase = _shared_phases(width)
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
        """Lane addresses in elements (the seed's 'output linear index')."""
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
# Triton's blocked layouts
# ---------------------------------------------------------------------------------------------------


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


def _layout_instructions(shape, layout: dict, num_warps: int, vec: int) -> np.ndarray:
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


# ---------------------------------------------------------------------------------------------------
# Kernel variants as address generators
# ---------------------------------------------------------------------------------------------------


@dataclass
class _Batch:
    """One access of every sampled program: addresses (programs, instructions, 32), -1 = masked lane."""

    name: str
    space: str
    op: str
    width: int
    addr: np.ndarray
    instr_per_warp: int
    coords: np.ndarray | None = None
    tensor: str = "smem"


@dataclass(frozen=True)
class _Variant:
    kernel: str
    M: int
    N: int
    itemsize: int
    x_strides: tuple
    out_strides: tuple
    grid: TransposeGrid
    threads: tuple
    threads_per_cta: int
    smem_bytes: int
    regs_per_thread: int | None
    load_bytes_per_cta: int
    pad: int = 0
    num_warps: int = 0
    layouts: dict | None = None
    vec: tuple = (1, 1)
    notes: tuple = ()

    def tiles(self, pids) -> tuple[np.ndarray, np.ndarray]:
        """(pid_m, pid_n) of each program, by the planner's own decoding."""
        pids = np.asarray(pids, dtype=np.int64)
        if self.grid.group_m in (-1, 0, 1):
            return self.grid.tile_of(pids)
        pairs = np.array([self.grid.tile_of(int(p)) for p in pids], dtype=np.int64).reshape(-1, 2)
        return pairs[:, 0], pairs[:, 1]

    def pid_of(self, pid_m, pid_n):
        """Inverse of ``tiles``: the launch position of tile (pid_m, pid_n)."""
        g = self.grid
        if g.group_m == 1:
            return pid_m * g.grid_n + pid_n
        if g.group_m in (0, -1):
            return pid_n * g.grid_m + pid_m
        first_m = (pid_m // g.group_m) * g.group_m
        rows = np.minimum(g.grid_m - first_m, g.group_m)
        return first_m * g.grid_n + pid_n * rows + (pid_m - first_m)

    def accesses(self, pids: np.ndarray) -> list[_Batch]:
        pid_m, pid_n = self.tiles(pids)
        if self.kernel == "naive":
            return self._naive(pid_m, pid_n)
        if self.kernel == "triton":
            return self._triton(pid_m, pid_n)
        return self._tiled(pid_m, pid_n)

    def _x_addr(self, row, col, active):
        return np.where(active, (row * self.x_strides[0] + col * self.x_strides[1]) * self.itemsize, -1)

    def _out_addr(self, row, col, active):
        return np.where(active, (row * self.out_strides[0] + col * self.out_strides[1]) * self.itemsize, -1)

    def _naive(self, pid_m, pid_n) -> list[_Batch]:
        tx, ty = self.threads
        warps = cdiv(tx * ty, WARP)
        t = np.arange(warps * WARP)
        x, y = t % tx, t // tx
        row = pid_m[:, None] * ty + y[None, :]
        col = pid_n[:, None] * tx + x[None, :]
        active = (t < tx * ty)[None, :] & (row < self.M) & (col < self.N)
        shape = (len(pid_m), warps, WARP)
        in_coords = np.stack([row, col], axis=-1).reshape(*shape, 2)
        return [
            _Batch("global_load", "global", "load", self.itemsize, self._x_addr(row, col, active).reshape(shape), 1,
                   in_coords, "x"),
            _Batch("global_store", "global", "store", self.itemsize, self._out_addr(col, row, active).reshape(shape), 1,
                   in_coords[..., ::-1], "out"),
        ]

    def _tiled(self, pid_m, pid_n) -> list[_Batch]:
        tile, ty = self.threads
        es, width = self.itemsize, tile + self.pad
        warps = tile * ty // WARP
        t = np.arange(tile * ty)
        x, y = t % tile, t // tile
        loads, sts, lds, stores, in_c, out_c = [], [], [], [], [], []
        for k in range(tile // ty):
            r = y + k * ty
            row = pid_m[:, None] * tile + r[None, :]
            col = pid_n[:, None] * tile + x[None, :]
            ok_in = (row < self.M) & (col < self.N)
            orow = pid_n[:, None] * tile + r[None, :]
            ocol = pid_m[:, None] * tile + x[None, :]
            ok_out = (orow < self.N) & (ocol < self.M)
            loads.append(self._x_addr(row, col, ok_in))
            sts.append(np.where(ok_in, (r * width + x)[None, :] * es, -1))
            lds.append(np.where(ok_out, (x * width + r)[None, :] * es, -1))
            stores.append(self._out_addr(orow, ocol, ok_out))
            in_c.append(np.stack([row, col], axis=-1))
            out_c.append(np.stack([orow, ocol], axis=-1))
        k_iters = tile // ty

        def order(parts, extra=()):
            # (k, programs, threads) -> (programs, warps * k, 32): warp-major, then the loop.
            a = np.stack(parts, axis=0).reshape(k_iters, len(pid_m), warps, WARP, *extra)
            return np.moveaxis(a, 0, 2).reshape(len(pid_m), warps * k_iters, WARP, *extra)

        return [
            _Batch("global_load", "global", "load", es, order(loads), k_iters, order(in_c, (2,)), "x"),
            _Batch("smem_store", "shared", "store", es, order(sts), k_iters),
            _Batch("smem_load", "shared", "load", es, order(lds), k_iters),
            _Batch("global_store", "global", "store", es, order(stores), k_iters, order(out_c, (2,)), "out"),
        ]

    def _triton(self, pid_m, pid_n) -> list[_Batch]:
        bm, bn = self.grid.block_m, self.grid.block_n
        es, nw, n = self.itemsize, self.num_warps, len(pid_m)
        batches = []
        for name, op, shape, layout, vec in (
                ("global_load", "load", (bm, bn), self.layouts["load"], self.vec[0]),
                ("global_store", "store", (bn, bm), self.layouts["store"], self.vec[1])):
            start = _layout_instructions(shape, layout, nw, vec)
            v = max(1, min(vec, layout["sizePerThread"][layout["order"][0]]))
            ipw = start.shape[1]
            if name == "global_load":
                row = pid_m[:, None, None, None] * bm + start[None, ..., 0]
                col = pid_n[:, None, None, None] * bn + start[None, ..., 1]
                ok = (row < self.M) & (col < self.N)
                addr, tensor = self._x_addr(row, col, ok), "x"
            else:
                row = pid_n[:, None, None, None] * bn + start[None, ..., 0]
                col = pid_m[:, None, None, None] * bm + start[None, ..., 1]
                ok = (row < self.N) & (col < self.M)
                addr, tensor = self._out_addr(row, col, ok), "out"
            coords = np.stack([row, col], axis=-1).reshape(n, nw * ipw, WARP, 2)
            batches.append(_Batch(name, "global", op, v * es,
                                  addr.reshape(n, nw * ipw, WARP), ipw, coords, tensor))
        # The conversion behind tl.trans, taken as conflict-free: 128 bytes per warp instruction.
        per_warp = max(1, cdiv(bm * bn * es, nw * LINE))
        base = (np.arange(nw * per_warp)[:, None] * LINE + np.arange(WARP)[None, :] * BANK_WIDTH)
        smem = np.broadcast_to(base, (n, nw * per_warp, WARP)).copy()
        batches.insert(1, _Batch("smem_store", "shared", "store", BANK_WIDTH, smem, per_warp))
        batches.insert(2, _Batch("smem_load", "shared", "load", BANK_WIDTH, smem.copy(), per_warp))
        return batches

    def owner(self, coords: np.ndarray, tensor: str) -> np.ndarray:
        """Program id that touches tensor element ``coords`` (the planner's tile, in launch order)."""
        i, j = (coords[..., 0], coords[..., 1]) if tensor == "x" else (coords[..., 1], coords[..., 0])
        return self.pid_of(i // self.grid.block_m, j // self.grid.block_n)


def _parse_pair(value, what: str) -> tuple[int, int]:
    if isinstance(value, str):
        parts = value.lower().replace(",", "x").split("x")
        try:
            if len(parts) != 2:
                raise ValueError
            value = tuple(int(p) for p in parts)
        except ValueError:
            raise ValueError(f"{what} must look like 16x16, got {value!r}") from None
    a, b = value
    return int(a), int(b)


def _check_threads(tx: int, ty: int) -> None:
    if tx <= 0 or ty <= 0 or tx * ty > 1024:
        raise ValueError(f"threads must be positive with at most 1024 in a block (CUDA's limit), got {tx}x{ty}")


def _triton_record(itemsize, block, num_warps, divisible):
    for rec in TRITON_SM90_LAYOUTS:
        if (rec["itemsize"], tuple(rec["block"]), rec["num_warps"], rec["divisible"]) == (
                itemsize, tuple(block), num_warps, divisible):
            return rec
    return None


def _build_variant(kernel, M, N, itemsize, *, threads, block, num_warps, strides, out_strides, layouts,
                   group_m=1) -> _Variant:
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    x_strides = tuple(int(s) for s in (strides or (N, 1)))
    o_strides = tuple(int(s) for s in (out_strides or (M, 1)))
    if min(x_strides + o_strides) < 0:
        raise ValueError("negative strides are not modelled")
    common = {"kernel": kernel, "M": M, "N": N, "itemsize": itemsize, "x_strides": x_strides,
              "out_strides": o_strides}
    if kernel == "naive":
        tx, ty = _parse_pair(threads or (16, 16), "threads")
        _check_threads(tx, ty)
        grid = transpose_grid(M, N, ty, tx)
        notes = (
            (f"naive: block {tx}x{ty} threads covers {ty} input rows x {tx} columns; the kernel's 1-D grid is "
             "decoded as divmod(blockIdx.x, grid_n) (seed 002 used a 2-D grid: same warps, other launch order)"),
            "naive: registers assumed <= 32 per thread, so 2048 threads per SM are resident",
        )
        return _Variant(grid=grid, threads=(tx, ty), threads_per_cta=tx * ty, smem_bytes=0, regs_per_thread=None,
                        load_bytes_per_cta=tx * ty * itemsize, notes=notes, **common)
    if kernel in ("tiled", "tiled_nopad"):
        tile, ty = _parse_pair(threads or (32, 8), "threads")
        _check_threads(tile, ty)
        if tile % ty or (tile * ty) % WARP:
            raise ValueError(f"tiled kernels need threads TILExROWS with ROWS dividing TILE, got {tile}x{ty}")
        pad = 1 if kernel == "tiled" else 0
        grid = transpose_grid(M, N, tile, tile)
        notes = (
            (f"{kernel}: {tile}x{tile + pad} shared tile of the element type, {tile}x{ty} threads, "
             f"{tile // ty} elements per thread; the whole tile's loads are in flight before the barrier"),
            f"{kernel}: registers assumed <= 32 per thread, so 2048 threads per SM are resident",
        )
        return _Variant(grid=grid, threads=(tile, ty), threads_per_cta=tile * ty,
                        smem_bytes=tile * (tile + pad) * itemsize, regs_per_thread=None,
                        load_bytes_per_cta=tile * tile * itemsize, pad=pad, notes=notes, **common)
    d_bm, d_bn, d_nw = TRITON_DEFAULTS[itemsize]
    bm, bn = _parse_pair(block, "block") if block else (d_bm, d_bn)
    check_tile(bm, bn, num_warps)
    nw = int(num_warps or (d_nw if (bm, bn) == (d_bm, d_bn) else 4 if bm * bn <= 2048 else 8))
    grid = transpose_grid(M, N, bm, bn, 1 if group_m is None else int(group_m))
    # Triton specializes a stride of 1 and hints divisibility by 16; both decide the vector width.
    in_dim = 1 if x_strides[1] == 1 else 0 if x_strides[0] == 1 else None
    in_aligned = all(s % 16 == 0 for s in x_strides if s != 1)
    out_aligned = o_strides[1] == 1 and o_strides[0] % 16 == 0
    rec = _triton_record(itemsize, (bm, bn), nw, in_aligned and out_aligned) if in_dim == 1 else None
    given = dict(layouts or {})
    layouts = {
        "load": given.get("load") or triton_blocked_layout((bm, bn), itemsize, nw, contiguous_dim=in_dim,
                                                           aligned=in_aligned),
        "store": given.get("store") or triton_blocked_layout((bn, bm), itemsize, nw, aligned=out_aligned,
                                                             contiguous_dim=1 if o_strides[1] == 1 else None),
    }
    # A masked vector access needs the mask constant over the vector: bounds divisible by 16.
    vec_in = layouts["load"]["sizePerThread"][layouts["load"]["order"][0]]
    bound_in = N if layouts["load"]["order"][0] == 1 else M
    vec_out = layouts["store"]["sizePerThread"][layouts["store"]["order"][0]]
    bound_out = M if layouts["store"]["order"][0] == 1 else N
    vec = (vec_in if bound_in % 16 == 0 else 1, vec_out if bound_out % 16 == 0 else 1)
    # Registers and shared bytes: given with the layouts (read from a compiled kernel), else recorded.
    regs = given.get("regs") or (rec["regs"] if rec else None)
    smem = given.get("shared") or (rec["shared"] if rec else bm * bn * itemsize)
    notes = (
        (f"triton: {bm}x{bn} tile, {nw} warps; load layout {layouts['load']}, store layout {layouts['store']} "
         f"({'given' if 'load' in given else 'as compiled for sm_90 (rule checked against TTGIR)'}); "
         f"vector widths {vec}"),
        "triton: the layout conversion behind tl.trans is assumed conflict-free (swizzled shared memory)",
        (f"triton: {regs if regs else 'assumed <= 65536 / threads'} registers per thread, "
         f"{smem} bytes of shared memory"),
    )
    return _Variant(grid=grid, threads=(WARP * nw, 1), threads_per_cta=WARP * nw, smem_bytes=smem,
                    regs_per_thread=regs, load_bytes_per_cta=bm * bn * itemsize, num_warps=nw, layouts=layouts,
                    vec=vec, notes=notes, **common)


# ---------------------------------------------------------------------------------------------------
# Counting over many warps (vectorized)
# ---------------------------------------------------------------------------------------------------


def _count_distinct(values: np.ndarray) -> np.ndarray:
    """Distinct non-negative values per row of a 2-D array (negative = absent)."""
    if values.shape[1] == 0:
        return np.zeros(values.shape[0], dtype=np.int64)
    s = np.sort(values, axis=1)
    fresh = (np.diff(s, axis=1) != 0) & (s[:, 1:] >= 0)
    return fresh.sum(axis=1) + (s[:, 0] >= 0)


def _global_rows(addr: np.ndarray, width: int) -> dict:
    """Per-instruction sectors, lines and useful bytes of global accesses, rows = instructions."""
    sec = np.where(addr >= 0, addr // SECTOR, -1)
    lines = np.where(addr >= 0, addr // LINE, -1)
    # Vectors of up to 16 bytes are aligned to their size, so a lane never straddles a sector.
    return {
        "sectors": _count_distinct(sec),
        "lines": _count_distinct(lines),
        "useful": _count_distinct(addr) * width,
        "partial": _partial_sectors(addr, width),
    }


def _partial_sectors(addr: np.ndarray, width: int) -> np.ndarray:
    """Per instruction: sectors the instruction covers only in part (fewer than 32 bytes of it)."""
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


def _shared_rows(addr: np.ndarray, width: int) -> dict:
    """Per-instruction conflict degree and wavefronts of shared accesses, rows = instructions."""
    rows = addr.shape[0]
    per_phase = _shared_phases(width)
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


def _sample_programs(variant: _Variant, sample: int) -> tuple[np.ndarray, np.ndarray, bool]:
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


def _footprint_bytes(shape, strides, itemsize: int) -> int:
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


# ---------------------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------------------


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


@dataclass
class Report:
    """What a launch asks of memory and the time the device model predicts for it."""

    kernel: str
    shape: tuple
    dtype: str
    itemsize: int
    strides: tuple
    threads: tuple
    block: tuple
    num_warps: int
    programs: int
    programs_analyzed: int
    sampled: bool
    accesses: list
    read_efficiency: float
    write_efficiency: float
    smem_conflict_ways: int
    dram_read_bytes: float
    dram_write_bytes: float
    min_bytes: int
    l2_merge: dict
    occupancy: dict
    resources: dict
    bound: str
    predicted_time_s: float
    predicted_copy_time_s: float
    predicted_fraction_of_copy: float
    device: str
    device_source: str
    assumptions: list = field(default_factory=list)

    @property
    def dram_bytes(self) -> float:
        return self.dram_read_bytes + self.dram_write_bytes

    def access(self, name: str) -> AccessStats:
        for a in self.accesses:
            if a.name == name:
                return a
        raise KeyError(f"{self.kernel} has no access {name!r}; it has {[a.name for a in self.accesses]}")

    def to_dict(self) -> dict:
        return {
            "kernel": self.kernel, "shape": list(self.shape), "dtype": self.dtype, "itemsize": self.itemsize,
            "strides": list(self.strides), "threads": list(self.threads), "block": list(self.block),
            "num_warps": self.num_warps, "programs": self.programs, "programs_analyzed": self.programs_analyzed,
            "sampled": self.sampled,
            "read_efficiency": self.read_efficiency, "write_efficiency": self.write_efficiency,
            "smem_conflict_ways": self.smem_conflict_ways,
            "dram_bytes": self.dram_bytes, "dram_read_bytes": self.dram_read_bytes,
            "dram_write_bytes": self.dram_write_bytes, "min_bytes": self.min_bytes,
            "l2_merge": self.l2_merge, "occupancy": self.occupancy, "resources_s": self.resources,
            "bound": self.bound, "predicted_time_s": self.predicted_time_s,
            "predicted_copy_time_s": self.predicted_copy_time_s,
            "predicted_fraction_of_copy": self.predicted_fraction_of_copy,
            "device": self.device, "device_source": self.device_source,
            "accesses": [a.to_dict() for a in self.accesses], "assumptions": list(self.assumptions),
        }


def _example_warp(batch: _Batch, program_index: int = 0) -> WarpAccess:
    row = batch.addr[program_index, 0]
    return WarpAccess(batch.name, batch.space, batch.op, batch.width,
                      tuple(None if a < 0 else int(a) for a in row))


def _summarize(batch: _Batch, weights: np.ndarray) -> AccessStats:
    n, k, _ = batch.addr.shape
    flat = batch.addr.reshape(n * k, WARP)
    live = (flat >= 0).any(axis=1).reshape(n, k)
    stats = AccessStats(batch.name, batch.space, batch.op, batch.width, batch.instr_per_warp,
                        requests=float(weights @ live.sum(axis=1)))
    if batch.space == "global":
        rows = {key: v.reshape(n, k).sum(axis=1) for key, v in _global_rows(flat, batch.width).items()}
        stats.useful_bytes = float(weights @ rows["useful"])
        stats.sectors = float(weights @ rows["sectors"])
        stats.lines = float(weights @ rows["lines"])
        stats.partial_sectors = float(weights @ rows["partial"])
        stats.wavefronts = stats.lines
        sec = np.where(batch.addr >= 0, batch.addr // SECTOR, -1).reshape(n, k * WARP)
        stats.cta_sectors = float(weights @ _count_distinct(sec))
    else:
        rows = _shared_rows(flat, batch.width)
        ways = rows["ways"].reshape(n, k)
        stats.wavefronts = float(weights @ rows["wavefronts"].reshape(n, k).sum(axis=1))
        stats.conflict_ways = int(max(1, ways.max(initial=0)))
        stats.mean_conflict_ways = float(weights @ (ways * live).sum(axis=1)) / stats.requests if stats.requests else 1
    stats.example = _example_warp(batch)
    return stats


def _partial_sector_spans(variant: _Variant, batch: _Batch, limit: int = 4096) -> np.ndarray:
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


def _dram_bytes(variant: _Variant, stats: list, batches: list, bytes_per_program: float, l2_bytes: float):
    """DRAM bytes of reads and writes after L2 merging, and how the merge was judged."""
    fp_in = _footprint_bytes((variant.M, variant.N), variant.x_strides, variant.itemsize)
    fp_out = _footprint_bytes((variant.N, variant.M), variant.out_strides, variant.itemsize)
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


def _occupancy(variant: _Variant, dev: dict) -> dict:
    limits = {
        "ctas": dev["max_ctas_per_sm"],
        "threads": dev["max_threads_per_sm"] // variant.threads_per_cta,
    }
    if variant.smem_bytes:
        limits["shared"] = dev["smem_per_sm_bytes"] // (variant.smem_bytes + dev["smem_reserved_per_cta_bytes"])
    if variant.regs_per_thread:
        # Registers are allocated per warp in units of 256, i.e. 8 per thread.
        regs = cdiv(variant.regs_per_thread, 8) * 8
        limits["registers"] = dev["regs_per_sm"] // (regs * variant.threads_per_cta)
    resident = max(1, min(limits.values()))
    return {"resident_ctas_per_sm": resident, "limits": limits, "limited_by": min(limits, key=limits.get)}


def _predict(variant: _Variant, stats: list, dram: dict, dev: dict) -> dict:
    """Seconds each resource needs; the kernel takes the longest, plus the launch overhead."""
    sms, programs = dev["sm_count"], variant.grid.programs
    copy_bw = dev["copy_bandwidth_bytes_per_s"]
    occ = _occupancy(variant, dev)
    per_sm = cdiv(programs, sms)
    busiest = per_sm / programs
    # Masked lanes issue nothing: what a CTA has in flight is the load bytes it really asks for.
    useful = sum(s.useful_bytes for s in stats if s.space == "global" and s.op == "load") / programs
    in_flight = min(occ["resident_ctas_per_sm"], per_sm) * max(min(variant.load_bytes_per_cta, useful), 1.0)
    dram_read, dram_write = dram["load"]["dram_bytes"], dram["store"]["dram_bytes"]
    t_dram = (dram_read + dram_write) / copy_bw
    # Rounds: how many times the busiest SM's CTA slots each fill with loads (its load bytes / Q).
    rounds = dram_read * busiest / in_flight
    t_latency = dev["cta_latency_s"] * rounds
    # Turnaround: per round, each slot also spends time with no load in flight: the CTA's shared-memory
    # phase (its own wavefronts through the SM's one-per-clock pipe, from the enumerated accesses) and the
    # retire + launch of the next CTA (a device constant). Same per CTA whatever the element size, so
    # per byte it doubles when the element halves (bf16 vs fp32 tiled).
    smem_wavefronts_per_cta = sum(s.wavefronts for s in stats if s.space == "shared") / programs
    turnaround = dev.get("cta_turnaround_s", 0.0) + smem_wavefronts_per_cta / dev["sm_clock_hz"]
    t_turnaround = turnaround * rounds
    # Only partially written sectors go through L2's byte-masked merge; full sectors stream to DRAM.
    store_sectors = sum(s.partial_sectors for s in stats if s.space == "global" and s.op == "store")
    load_sectors = sum(s.cta_sectors for s in stats if s.space == "global" and s.op == "load")
    wavefronts = sum(s.wavefronts for s in stats)
    resources = {
        "dram": t_dram,
        "latency": t_latency,
        "turnaround": t_turnaround,
        "memory": t_dram + t_latency + t_turnaround,
        "l2_write_sectors": store_sectors / dev["l2_write_sectors_per_s"],
        "l2_read_sectors": load_sectors / dev["l2_read_sectors_per_s"],
        "l1_shared_wavefronts": wavefronts * busiest / dev["sm_clock_hz"],
    }
    if dev.get("global_requests_per_s"):
        # Every warp-wide global load or store instruction is one request, whatever its width: a kernel of
        # narrow accesses (a 2-byte element per lane: 64 B per request) meets the memory system's request
        # rate before its bandwidth (measured: a 2-byte one-element-per-lane copy reaches ~68% of copy).
        requests = sum(s.requests for s in stats if s.space == "global")
        resources["global_requests"] = requests / dev["global_requests_per_s"]
    contenders = {k: v for k, v in resources.items() if k not in ("dram", "latency", "turnaround")}
    bound = max(contenders, key=contenders.get)
    t0 = dev["launch_overhead_s"]
    occ["bytes_in_flight_per_sm"] = in_flight
    occ["rounds"] = rounds
    occ["turnaround_per_cta_s"] = turnaround
    occ["smem_wavefronts_per_cta"] = smem_wavefronts_per_cta
    return {"resources": resources, "bound": bound, "time": contenders[bound] + t0, "occupancy": occ}


def analyze(kernel: str, shape, dtype="float32", *, threads=None, block=None, strides=None, out_strides=None,
            num_warps=None, group_m: int = 1, layouts=None, sample: int = 512, device=None) -> Report:
    """Enumerate a transpose launch's warp accesses and predict its fraction of a copy.

    ``shape`` is the input (M, N) or "MxN"; ``dtype`` a name or an element size; ``threads`` the
    CUDA block ("16x16"; tiled kernels take "32x8"); ``block`` and ``num_warps`` the Triton tile;
    ``group_m`` the Triton kernel's program order (``plan.transpose_grid``; launch order only moves
    the L2 merge distance); ``strides`` the input's strides in elements (default contiguous),
    ``out_strides`` the output's;
    ``layouts`` overrides Triton's {"load": ..., "store": ...} blocked layouts; ``sample`` caps the
    programs enumerated; ``device`` is a constants dict or JSON path (default: data/h200.json).
    """
    M, N = _parse_pair(shape, "shape")
    if M < 0 or N < 0:
        raise ValueError(f"shape must be non-negative, got {M}x{N}")
    if type(sample) is not int or sample < 1:
        raise ValueError(f"sample must be a positive int (programs enumerated at most), got {sample!r}")
    es = itemsize_of(dtype)
    dev = load_device(device)
    variant = _build_variant(kernel, M, N, es, threads=threads, block=block, num_warps=num_warps,
                             strides=strides, out_strides=out_strides, layouts=layouts, group_m=group_m)
    min_bytes = 2 * M * N * es
    t0 = dev["launch_overhead_s"]
    copy_time = min_bytes / dev["copy_bandwidth_bytes_per_s"] + t0
    pids, weights, sampled = _sample_programs(variant, sample)
    batches = variant.accesses(pids) if len(pids) else []
    stats = [_summarize(b, weights) for b in batches]
    global_bytes = sum(s.cta_sectors if s.op == "load" else s.sectors for s in stats if s.space == "global")
    per_program = SECTOR * global_bytes / max(variant.grid.programs, 1)
    if stats:
        dram = _dram_bytes(variant, stats, batches, per_program, dev["l2_cache_bytes"])
        pred = _predict(variant, stats, dram, dev)
    else:
        dram = {op: {"dram_bytes": 0.0, "footprint_bytes": 0, "partial_sectors_sampled": 0, "merged_fraction": 1.0,
                     "max_span_programs": 0} for op in ("load", "store")}
        pred = {"resources": {}, "bound": "launch", "time": t0, "occupancy": {}}

    def efficiency(op):
        useful = sum(s.useful_bytes for s in stats if s.space == "global" and s.op == op)
        fetched = sum(s.sectors for s in stats if s.space == "global" and s.op == op) * SECTOR
        return useful / fetched if fetched else 1.0

    g = variant.grid
    return Report(
        kernel=kernel, shape=(M, N), dtype=str(dtype), itemsize=es, strides=variant.x_strides,
        threads=variant.threads, block=(g.block_m, g.block_n), num_warps=variant.num_warps or cdiv(
            variant.threads_per_cta, WARP),
        programs=g.programs, programs_analyzed=len(pids), sampled=sampled, accesses=stats,
        read_efficiency=efficiency("load"), write_efficiency=efficiency("store"),
        smem_conflict_ways=max([s.conflict_ways for s in stats if s.space == "shared"], default=1),
        dram_read_bytes=dram["load"]["dram_bytes"], dram_write_bytes=dram["store"]["dram_bytes"],
        min_bytes=min_bytes, l2_merge={op: dram[op] for op in ("load", "store")}, occupancy=pred["occupancy"],
        resources=pred["resources"], bound=pred["bound"], predicted_time_s=pred["time"],
        predicted_copy_time_s=copy_time, predicted_fraction_of_copy=copy_time / pred["time"],
        device=dev.get("device", "?"), device_source=dev.get("source", "?"),
        assumptions=list(variant.notes) + _device_notes(dev),
    )


def _device_notes(dev: dict) -> list[str]:
    """What the report should say about device constants that are not measurements."""
    if "cta_turnaround_s" not in dev:
        return ["device constants have no cta_turnaround_s: the turnaround counts only each CTA's shared-memory "
                "phase (run benchmarks/measure_device.py)"]
    how = str(dev.get("provenance", {}).get("cta_turnaround_s", ""))
    if how.startswith("PLACEHOLDER"):
        return [f"cta_turnaround_s = {dev['cta_turnaround_s'] * 1e9:.0f} ns is a placeholder, not a measurement "
                "(benchmarks/measure_device.py measures it on the GPU)"]
    return []


def warp_access(kernel: str, shape, dtype="float32", access: str = "write", *, pid: int = 0, warp: int = 0,
                instruction: int = 0, threads=None, block=None, num_warps=None, strides=None, out_strides=None,
                layouts=None) -> WarpAccess:
    """The 32 lanes of one warp instruction: program ``pid``, warp ``warp``, its ``instruction``-th access.

    ``access`` is "read"/"write" (global load/store) or "smem_store"/"smem_load".
    """
    M, N = _parse_pair(shape, "shape")
    variant = _build_variant(kernel, M, N, itemsize_of(dtype), threads=threads, block=block, num_warps=num_warps,
                             strides=strides, out_strides=out_strides, layouts=layouts)
    name = {"read": "global_load", "write": "global_store"}.get(access, access)
    for batch in variant.accesses(np.array([pid])):
        if batch.name == name:
            row = batch.addr[0, warp * batch.instr_per_warp + instruction]
            return WarpAccess(name, batch.space, batch.op, batch.width, tuple(None if a < 0 else int(a) for a in row))
    raise ValueError(f"{kernel} has no access {access!r}")


# ---------------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------------


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)


def format_report(r: Report) -> str:
    """A plain-text table of a report."""
    lines = [
        f"{r.kernel}  {r.shape[0]}x{r.shape[1]} {r.dtype} ({r.itemsize} B)  strides {r.strides}  "
        f"threads {r.threads[0]}x{r.threads[1]}  tile {r.block[0]}x{r.block[1]}  {r.programs} programs"
        + (f"  (sampled {r.programs_analyzed})" if r.sampled else ""),
        "",
        (f"{'access':<13}{'width':>6}{'req/warp':>9}{'sectors/req':>12}{'lines/req':>10}{'efficiency':>11}"
         f"{'ways':>6}{'wavefronts/req':>15}"),
    ]
    for a in r.accesses:
        req = a.requests or 1
        if a.space == "global":
            lines.append(f"{a.name:<13}{a.width:>6}{a.instructions_per_warp:>9}{a.sectors / req:>12.2f}"
                         f"{a.lines / req:>10.2f}{a.efficiency:>11.1%}{'':>6}{a.wavefronts / req:>15.2f}")
        else:
            lines.append(f"{a.name:<13}{a.width:>6}{a.instructions_per_warp:>9}{'':>12}{'':>10}{'':>11}"
                         f"{a.conflict_ways:>6}{a.wavefronts / req:>15.2f}")
    lines += [
        "",
        (f"read efficiency   {r.read_efficiency:.1%}     write efficiency   {r.write_efficiency:.1%}     "
         f"shared-memory conflict {r.smem_conflict_ways}-way"),
        (f"DRAM bytes        {_fmt_bytes(r.dram_bytes)} (min {_fmt_bytes(r.min_bytes)}; "
         f"L2 merged {r.l2_merge['store']['merged_fraction']:.0%} of partial write sectors)"),
    ]
    if r.occupancy:
        lines.append(f"occupancy         {r.occupancy['resident_ctas_per_sm']} CTAs/SM "
                     f"(limited by {r.occupancy['limited_by']}), "
                     f"{_fmt_bytes(r.occupancy['bytes_in_flight_per_sm'])} of loads in flight per SM")
    for name, t in r.resources.items():
        mark = "  <- bound" if name == r.bound else ""
        lines.append(f"  {name:<22}{t * 1e6:>12.1f} us{mark}")
    lines += [
        (f"predicted {r.predicted_time_s * 1e6:.1f} us vs copy {r.predicted_copy_time_s * 1e6:.1f} us: "
         f"{r.predicted_fraction_of_copy:.1%} of copy bandwidth"),
        f"device: {r.device} ({r.device_source})",
        "assumptions:",
        *[f"  - {a}" for a in r.assumptions],
    ]
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tileflip analyze", description=(
        "Warp-level coalescing, sector, bank-conflict and time model of tileflip's transposes (CPU only)."))
    p.add_argument("--kernel", choices=(*KERNELS, "all"), default=None,
                   help="kernel variant (default naive; with --measure, all)")
    p.add_argument("--shape", default="1024x512", help="input MxN (default 1024x512)")
    p.add_argument("--dtype", default="float32", help="element type name (float32, bfloat16, int8, ...)")
    p.add_argument("--threads", default=None, help="CUDA block, e.g. 16x16 (naive) or 32x8 (tiled)")
    p.add_argument("--block", default=None, help="Triton tile BLOCK_MxBLOCK_N, e.g. 64x64")
    p.add_argument("--num-warps", type=int, default=None, help="Triton num_warps")
    p.add_argument("--group-m", type=int, default=1, help="Triton GROUP_M program order (default 1)")
    p.add_argument("--strides", default=None, help="input strides in elements, e.g. 512,1")
    p.add_argument("--sample", type=int, default=512, help="programs enumerated at most (default 512)")
    p.add_argument("--device", default=None, help="device constants JSON (default: the committed H200 file)")
    p.add_argument("--png", default=None, help="draw the warp accesses (and bank map) to this PNG")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--measure", action="store_true", help="GPU only: measure each variant against a copy")
    p.add_argument("--no-ncu", action="store_true", help="with --measure: skip Nsight Compute even if installed")
    return p


def cli(argv: list[str]) -> int:
    """``tileflip analyze ...``; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.measure:
        from tileflip.bench.measure import measure_analyzer

        return measure_analyzer(args)
    kernels = KERNELS if args.kernel == "all" else (args.kernel or "naive",)
    try:
        strides = tuple(int(s) for s in args.strides.split(",")) if args.strides else None
        if strides is not None and len(strides) != 2:
            raise ValueError
    except ValueError:
        raise ValueError(f"strides must look like 512,1 (elements, two of them), got {args.strides!r}") from None
    reports = [
        # --threads shapes the naive block; it reaches a tiled kernel only when that kernel alone is asked for.
        analyze(k, args.shape, args.dtype,
                threads=args.threads if k == "naive" or args.kernel == k != "triton" else None,
                block=args.block if k == "triton" else None, num_warps=args.num_warps,
                group_m=args.group_m if k == "triton" else 1, strides=strides,
                sample=args.sample, device=args.device)
        for k in kernels
    ]
    if args.json:
        payload = reports[0].to_dict() if len(reports) == 1 else {"reports": [r.to_dict() for r in reports]}
        print(json.dumps(payload, indent=2, default=float))
    else:
        print("\n\n".join(format_report(r) for r in reports))
    if args.png:
        from tileflip.analyze.pictures import draw_report

        path = draw_report(reports, args.png)
        print(f"wrote {path}", file=sys.stderr if args.json else sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(cli(sys.argv[1:]))
