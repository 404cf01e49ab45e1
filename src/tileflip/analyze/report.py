"""The analyzer's report: what a launch asks of memory and the predicted time, as an object, JSON or text."""

from __future__ import annotations

from dataclasses import dataclass, field

from tileflip.analyze.traffic import AccessStats


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


def program_order(group_m: int, two_d: bool = True) -> str:
    """``group_m`` in words: the order in which consecutive programs take tiles (``TransposeGrid.tile_of``).

    ``two_d``: whether a ``group_m == -1`` launch gets its 2-D grid (grid_n within gridDim.y's limit;
    past it the launcher runs the same order on a 1-D grid)."""
    if group_m == 1:
        return "row by row of tiles"
    if group_m == 0:
        return "column by column of tiles"
    if group_m == -1:
        return ("column by column of tiles, on a 2-D grid" if two_d
                else "column by column of tiles, on a 1-D grid since grid_n passes gridDim.y's limit")
    return f"bands of {group_m} tile rows, column by column"


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
