"""The analyzer's entry points: a transpose launch's warp accesses and predicted fraction of a copy (CPU only).

``analyze`` enumerates every warp access of a kernel variant (``variants``), sums them over the launch
and finds the DRAM bytes after L2 (``traffic``), then prices them with the device constants
(``timemodel``) into a ``Report``; ``warp_access`` returns the 32 lanes of one instruction.
The model, its assumptions and its measured accuracy: docs/design.md (The access analyzer).
"""

from __future__ import annotations

import numpy as np

from tileflip.analyze.access import SECTOR, WARP, WarpAccess
from tileflip.analyze.report import Report
from tileflip.analyze.timemodel import device_notes, load_device, predict
from tileflip.analyze.traffic import dram_bytes, sample_programs, summarize
from tileflip.analyze.variants import build_variant, pair_of
from tileflip.plan import cdiv
from tileflip.plan.dtypes import dtype_name, element_size


def itemsize_of(dtype) -> int:
    """Bytes per element of a dtype given by name ("float32", "torch.bfloat16", "bf16") or size (1, 2, 4, 8)."""
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        if dtype not in (1, 2, 4, 8):
            raise ValueError(f"an element size must be 1, 2, 4 or 8 bytes, got {dtype}")
        return dtype
    return element_size(dtype)


def _dtype_label(dtype) -> str:
    return str(dtype) if isinstance(dtype, int) and not isinstance(dtype, bool) else dtype_name(dtype)


def _shape(shape) -> tuple[int, int]:
    M, N = pair_of(shape, "shape")
    if M < 0 or N < 0:
        raise ValueError(f"shape must be non-negative, got {M}x{N}")
    return M, N


def analyze(kernel: str, shape, dtype="float32", *, threads=None, block=None, strides=None, out_strides=None,
            num_warps=None, group_m: int = 1, layouts=None, sample: int = 512, device=None) -> Report:
    """Enumerate a transpose launch's warp accesses and predict its fraction of a copy.

    ``shape`` is the input (M, N); ``dtype`` a name or an element size; ``threads`` the CUDA block
    ((16, 16); tiled kernels take (32, 8)); ``block`` and ``num_warps`` the Triton tile; ``group_m`` the
    Triton kernel's program order (``plan.transpose_grid``; launch order only moves the L2 merge
    distance); ``strides`` the input's strides in elements (default contiguous), ``out_strides`` the
    output's; ``layouts`` overrides Triton's {"load": ..., "store": ...} blocked layouts; ``sample``
    caps the programs enumerated; ``device`` is a constants dict or JSON path (default: data/h200.json).
    """
    M, N = _shape(shape)
    if type(sample) is not int or sample < 1:
        raise ValueError(f"sample must be a positive int (programs enumerated at most), got {sample!r}")
    es = itemsize_of(dtype)
    dev = load_device(device)
    variant = build_variant(kernel, M, N, es, threads=threads, block=block, num_warps=num_warps,
                            strides=strides, out_strides=out_strides, layouts=layouts, group_m=group_m)
    min_bytes = 2 * M * N * es
    t0 = dev["launch_overhead_s"]
    copy_time = min_bytes / dev["copy_bandwidth_bytes_per_s"] + t0
    pids, weights, sampled = sample_programs(variant, sample)
    batches = variant.accesses(pids) if len(pids) else []
    stats = [summarize(b, weights) for b in batches]
    global_bytes = sum(s.cta_sectors if s.op == "load" else s.sectors for s in stats if s.space == "global")
    per_program = SECTOR * global_bytes / max(variant.grid.programs, 1)
    if stats:
        dram = dram_bytes(variant, stats, batches, per_program, dev["l2_cache_bytes"])
        pred = predict(variant, stats, dram, dev)
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
        kernel=kernel, shape=(M, N), dtype=_dtype_label(dtype), itemsize=es, strides=variant.x_strides,
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
        assumptions=list(variant.notes) + device_notes(dev),
    )


def warp_access(kernel: str, shape, dtype="float32", access: str = "write", *, pid: int = 0, warp: int = 0,
                instruction: int = 0, threads=None, block=None, num_warps=None, strides=None, out_strides=None,
                layouts=None) -> WarpAccess:
    """The 32 lanes of one warp instruction: program ``pid``, warp ``warp``, its ``instruction``-th access.

    ``access`` is "read"/"write" (global load/store) or "smem_store"/"smem_load"; the other arguments
    are ``analyze``'s.
    """
    M, N = _shape(shape)
    variant = build_variant(kernel, M, N, itemsize_of(dtype), threads=threads, block=block, num_warps=num_warps,
                            strides=strides, out_strides=out_strides, layouts=layouts)
    name = {"read": "global_load", "write": "global_store"}.get(access, access)
    for batch in variant.accesses(np.array([pid])):
        if batch.name == name:
            row = batch.addr[0, warp * batch.instr_per_warp + instruction]
            return WarpAccess(name, batch.space, batch.op, batch.width, tuple(None if a < 0 else int(a) for a in row))
    raise ValueError(f"{kernel} has no access {access!r}")
