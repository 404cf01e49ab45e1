"""From a launch's accesses and DRAM bytes to time: device constants, occupancy, and the bound resource.

t = max(memory, global requests, write sectors, read sectors, L1/shared wavefronts) + t0, every term from
the device constants (``data/h200.json`` by default) and the enumerated accesses, none per kernel.
docs/design.md (The access analyzer) derives each term and gives its measured accuracy.
"""

from __future__ import annotations

from tileflip.analyze.variants import Variant
from tileflip.plan import cdiv
from tileflip.plan.device import DATA, DEFAULT_CARD, load_device  # noqa: F401 (the analyzer's API)

DEVICE_FILE = DATA / f"{DEFAULT_CARD}.json"


def device_notes(dev: dict) -> list[str]:
    """What the report should say about device constants that are not measurements."""
    if "cta_turnaround_s" not in dev:
        return ["device constants have no cta_turnaround_s: the turnaround counts only each CTA's shared-memory "
                "phase (`tileflip bench --suite device` measures it)"]
    how = str(dev.get("provenance", {}).get("cta_turnaround_s", ""))
    if how.startswith("PLACEHOLDER"):
        return [f"cta_turnaround_s = {dev['cta_turnaround_s'] * 1e9:.0f} ns is a placeholder, not a measurement "
                "(`tileflip bench --suite device` measures it on a GPU)"]
    return []


def occupancy(variant: Variant, dev: dict) -> dict:
    """Resident CTAs per SM and the resource that limits them (CTAs, threads, shared memory, registers)."""
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


def predict(variant: Variant, stats: list, dram: dict, dev: dict) -> dict:
    """Seconds each resource needs; the kernel takes the longest, plus the launch overhead."""
    sms, programs = dev["sm_count"], variant.grid.programs
    copy_bw = dev["copy_bandwidth_bytes_per_s"]
    occ = occupancy(variant, dev)
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
