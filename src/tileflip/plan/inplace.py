"""In-place transposition: the passes that rewrite a contiguous (M, N) matrix's storage to hold its
contiguous (N, M) transpose, with their index maps, their scratch and their traffic. Pure Python.

**Square** matrices take one pass of pairwise tile swaps: the program that owns tiles (I, J) and (J, I)
loads both, then stores each transposed in the other's place.

**Rectangular** matrices take the passes of a decomposition into permutations that each stay within one
row or within one column of a grid view of the buffer. In the (m, n) grid of the buffer (row-major, as
the input sits), with c = gcd(m, n), a = m / c, b = n / c and a' the inverse of a modulo b, element (i, j)
of the input must reach the grid position of linear index p = j m + i. Three gathers do it; each one
writes grid position (R, S) from the position given:

1. ``rotate columns`` (only where c > 1): ((R + floor(S / b)) mod m, S). Afterwards the elements a row
   holds must go to distinct columns.
2. ``shuffle rows``: (R, j0 + k b), where k = (S - R) mod c, v = (R + k) mod m, t = ((S - v) mod n) / c and
   j0 = t a' mod b: each row sends every element to its final column.
3. ``shuffle columns``: (((p mod m) - floor(floor(p / m) / b)) mod m, S), with p = R n + S: each column
   sends every element to its final row.

The same buffer is also an (n, m) grid (the output's rows). Transposing an (N, M) matrix is the inverse
permutation of transposing an (M, N) one, so the passes can run on the (N, M) grid too: the same three
maps, built for (m, n) = (N, M), applied in reverse order as scatters (each pass writes the position given
with the element at (R, S)). The plan picks the grid whose passes hold more of their groups on chip.

**A pass** permutes independent groups (a row, or a stripe of columns a sector wide), so it runs in place
without any global barrier:
- ``on chip``: one program loads a whole group into registers, waits for every lane of its block, then
  stores the group permuted. No scratch.
- ``staged``: groups too large for one program go in waves through a scratch buffer: a copy of the wave's
  groups into the scratch, then a kernel that writes each group permuted from it. Each launch is the
  barrier between the two. A wave fits the scratch, so the scratch's traffic stays in L2 where the
  scratch is at most half of it.

Scratch is the largest staged group, raised to the budget given (default: half the L2, at most half the
tensor): a row of the grid, or a stripe of 32 bytes by the grid's column length, each at most
max(M, N) elements or 32 bytes x max(M, N); O(max(M, N)) either way. No flags.

Index maps run in 64-bit arithmetic. t a' < b^2 must fit 63 bits, so a grid whose b = n / c reaches
3.03e9 is not planned; the other grid's b is at most its short side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# One program holds a group on chip where it has at most this many elements and bytes: registers of a
# block of up to 16 warps, 32 elements a lane.
ON_CHIP_ELEMENTS = 16384
ON_CHIP_BYTES = 64 * 1024
STRIPE_BYTES = 32  # a column stripe is one sector wide: each of its rows is one whole sector
SWAP_TILE_BYTES = 128  # a square's swap tile: rows of 128 bytes, as many rows as elements a row
MAP_LIMIT = 3_030_000_000  # b below this: t a' < b^2 fits 63 bits
DEFAULT_L2_BYTES = 50 * 1024 * 1024  # used where the card's file does not say
MAX_STAGED_WAVES = 1 << 20

PASS_MAPS = ("rotate columns", "shuffle rows", "shuffle columns")


class InPlaceError(ValueError):
    """A shape, element size or scratch budget the in-place transpose refuses."""


@dataclass(frozen=True)
class Pass:
    """One pass: which map, on which grid, gathering or scattering, and how its groups run."""

    name: str  # "swap tiles" or one of PASS_MAPS
    grid: tuple[int, int]  # the buffer viewed as (rows, columns) of each matrix
    problem: tuple[int, int]  # (m, n) whose maps it uses: the grid itself, or its transpose's
    scatter: bool  # True: the element at (R, S) goes to the map's position; False: (R, S) reads it
    group: str  # "tile pair", "row" or "stripe"
    mode: str  # "on chip" or "staged"
    group_elements: int  # elements of one group (a row, or a stripe's rows x width)
    stripe: int = 1  # columns of a stripe; rows: 1
    tile: int = 0  # a swap tile's side
    wave_groups: int = 0  # staged: groups a wave holds
    waves: int = 0  # staged: waves over the whole call
    params: dict = field(default_factory=dict, compare=False)  # m, n, c, b, ainv of the maps

    @property
    def map_index(self) -> int:
        return PASS_MAPS.index(self.name)


@dataclass(frozen=True)
class InPlacePlan:
    batch: int
    rows: int  # M: the input's rows
    cols: int  # N: the input's columns
    element_size: int
    passes: tuple[Pass, ...]
    scratch_bytes: int  # the scratch buffer a call allocates (0: none)
    orientation: str  # "square", "none" (a side of 1: the bytes already hold the transpose), "rows" or "columns"

    @property
    def nbytes(self) -> int:
        return self.batch * self.rows * self.cols * self.element_size

    def pass_traffic(self, p: Pass) -> dict:
        """DRAM bytes a pass reads and writes (each element once each way), and the scratch bytes it writes
        and reads again (staged passes)."""
        scratch = self.nbytes if p.mode == "staged" else 0
        return {"read_bytes": self.nbytes, "write_bytes": self.nbytes, "scratch_write_bytes": scratch,
                "scratch_read_bytes": scratch}  # fmt: skip

    def predicted_seconds(self, copy_bandwidth: float, launch_s: float, l2_bytes: int) -> list[float]:
        """Per pass: its DRAM traffic at ``copy_bandwidth`` (bytes read + written per second), the scratch's
        twice more where a wave does not stay in L2, plus each launch."""
        out = []
        for p in self.passes:
            t = self.pass_traffic(p)
            moved = t["read_bytes"] + t["write_bytes"]
            launches = 1
            if p.mode == "staged":
                launches = 2 * p.waves
                wave_bytes = p.wave_groups * p.group_elements * self.element_size
                if wave_bytes > l2_bytes // 2:
                    moved += t["scratch_write_bytes"] + t["scratch_read_bytes"]
            out.append(moved / copy_bandwidth + launches * launch_s)
        return out

    def describe(self) -> str:
        shape = (f"({self.batch}, {self.rows}, {self.cols})" if self.batch > 1 else f"({self.rows}, {self.cols})")
        head = [f"in-place transpose of {shape}, {self.element_size}-byte elements "
                f"({_size(self.nbytes)}): {len(self.passes)} pass{'es' if len(self.passes) != 1 else ''}, "
                f"scratch {_size(self.scratch_bytes)}"]  # fmt: skip
        if self.orientation == "none":
            head.append("  a side of 1: the storage already holds the transpose; only the shape changes")
        for k, p in enumerate(self.passes, 1):
            g = f"{p.grid[0]} x {p.grid[1]} grid"
            if p.name == "swap tiles":
                head.append(f"  {k}. swap tiles: {p.tile} x {p.tile} tiles of the {g}, each pair (I, J), (J, I) "
                            "loaded by one program and stored transposed in each other's place")  # fmt: skip
                continue
            m, n = p.problem
            prm = p.params
            how = "scatter" if p.scatter else "gather"
            maps = {
                "rotate columns": "(R, S) <- ((R + S // b) mod m, S)",
                "shuffle rows": "(R, S) <- (R, (t a' mod b) + k b), k = (S - R) mod c, v = (R + k) mod m, "
                                "t = ((S - v) mod n) // c",
                "shuffle columns": "(R, S) <- ((p mod m - (p // m) // b) mod m, S), p = R n + S",
            }[p.name]  # fmt: skip
            group = "rows" if p.group == "row" else f"stripes of {p.stripe} columns"
            run = ("on chip, one program a group" if p.mode == "on chip"
                   else f"staged: {p.waves} waves of {p.wave_groups} groups through the scratch")  # fmt: skip
            head.append(f"  {k}. {p.name} ({how}) on the {g}, {group}, {run}")
            head.append(f"     maps of (m, n) = ({m}, {n}), c = {prm['c']}, b = {prm['b']}, a' = {prm['ainv']}: {maps}")
        return "\n".join(head)


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def map_params(m: int, n: int) -> dict:
    c = math.gcd(m, n)
    a, b = m // c, n // c
    return {"m": m, "n": n, "c": c, "b": b, "ainv": pow(a, -1, b) if b > 1 else 0}


def source(name: str, prm: dict, R: int, S: int) -> tuple[int, int]:
    """The grid position a gather pass reads for (R, S) (a scatter pass writes there): exact integers."""
    m, n, c, b, ainv = prm["m"], prm["n"], prm["c"], prm["b"], prm["ainv"]
    if name == "rotate columns":
        return (R + S // b) % m, S
    if name == "shuffle rows":
        k = (S - R) % c
        v = (R + k) % m
        t = ((S - v) % n) // c
        return R, (t * ainv) % b + k * b
    if name == "shuffle columns":
        p = R * n + S
        return ((p % m) - (p // m) // b) % m, S
    raise ValueError(f"unknown pass {name!r}")


def _positive_int(value, arg: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InPlaceError(f"{arg} must be a positive int, got {value!r}")
    return value


def plan_in_place(batch: int, rows: int, cols: int, element_size: int, *, scratch_bytes: int | None = None,
                  l2_bytes: int = DEFAULT_L2_BYTES, on_chip_elements: int | None = None,
                  on_chip_bytes: int | None = None) -> InPlacePlan:  # fmt: skip
    """The passes that transpose ``batch`` contiguous (rows, cols) matrices in place.

    ``scratch_bytes``: the most scratch the call may allocate (default: the largest staged group, raised to
    half the card's L2 ``l2_bytes`` so that waves are large, but never past half the tensor). A budget
    below one staged group is refused. ``on_chip_*`` bound a group one program holds."""
    for value, arg in ((batch, "batch"), (rows, "rows"), (cols, "cols")):
        _positive_int(value, arg)
    if element_size not in (1, 2, 4, 8):
        raise InPlaceError(f"element_size must be 1, 2, 4 or 8 bytes, got {element_size!r}")
    if scratch_bytes is not None and (isinstance(scratch_bytes, bool) or not isinstance(scratch_bytes, int)
                                      or scratch_bytes < 0):  # fmt: skip
        raise InPlaceError(f"scratch_bytes must be a non-negative int or None, got {scratch_bytes!r}")
    es = element_size
    on_chip_elements = ON_CHIP_ELEMENTS if on_chip_elements is None else on_chip_elements
    on_chip_bytes = ON_CHIP_BYTES if on_chip_bytes is None else on_chip_bytes
    nbytes = batch * rows * cols * es
    if rows == 1 or cols == 1:
        return InPlacePlan(batch, rows, cols, es, (), 0, "none")
    if rows == cols:
        tile = max(8, SWAP_TILE_BYTES // es)
        p = Pass("swap tiles", (rows, cols), (rows, cols), False, "tile pair", "on chip", tile * tile, tile=tile)
        return InPlacePlan(batch, rows, cols, es, (p,), 0, "square")

    def fits(elements: int) -> bool:
        return elements <= on_chip_elements and elements * es <= on_chip_bytes

    stripe = max(1, STRIPE_BYTES // es)
    candidates = []
    for orientation, (gm, gn), scatter in (("rows", (rows, cols), False), ("columns", (cols, rows), True)):
        prm = map_params(gm, gn)
        if prm["b"] >= MAP_LIMIT:
            continue
        names = [n for n in PASS_MAPS if n != "rotate columns" or prm["c"] > 1]
        if scatter:
            names.reverse()
        shapes = []
        for name in names:
            if name == "shuffle rows":
                shapes.append((name, "row", gn, 1))
            else:
                shapes.append((name, "stripe", gm * min(stripe, gn), min(stripe, gn)))
        on_chip = sum(fits(e) for _, _, e, _ in shapes)
        staged_bytes = sum(e * es for _, _, e, _ in shapes if not fits(e))
        candidates.append((-on_chip, staged_bytes, orientation, (gm, gn), scatter, prm, shapes))
    candidates.sort(key=lambda c: c[:2])
    _, _, orientation, (gm, gn), scatter, prm, shapes = candidates[0]

    largest, kind = max(((e * es, g) for _, g, e, _ in shapes if not fits(e)), default=(0, ""))
    if largest and scratch_bytes is not None and scratch_bytes < largest:
        kind = "a row" if kind == "row" else "a column stripe"
        raise InPlaceError(f"scratch_bytes={scratch_bytes} is below one staged group of this plan ({largest} "
                           f"bytes: {kind} of the {gm} x {gn} grid); pass at least {largest}, or no budget for "
                           "the plan's own")  # fmt: skip
    if not largest:
        budget = 0
    elif scratch_bytes is None:
        budget = max(largest, min(l2_bytes // 2, nbytes // 2))
    else:
        budget = scratch_bytes
    passes = []
    used = 0
    for name, group, elements, width in shapes:
        if fits(elements):
            passes.append(Pass(name, (gm, gn), (gm, gn), scatter, group, "on chip", elements, stripe=width,
                               params=prm))  # fmt: skip
            continue
        group_bytes = elements * es
        per_matrix = gm if group == "row" else -(-gn // width)
        if group == "row":
            wave = max(1, min(budget // group_bytes, batch * per_matrix))
            waves = -(-batch * per_matrix // wave)
        else:
            wave = max(1, min(budget // group_bytes, per_matrix))  # a wave's stripes stay in one matrix
            waves = batch * -(-per_matrix // wave)
        if waves > MAX_STAGED_WAVES:
            least = group_bytes * -(-batch * per_matrix // MAX_STAGED_WAVES)
            raise InPlaceError(f"scratch_bytes={budget} makes {waves} waves of one pass; pass a larger budget "
                               f"(at least {least} bytes)")  # fmt: skip
        used = max(used, wave * group_bytes)
        passes.append(Pass(name, (gm, gn), (gm, gn), scatter, group, "staged", elements, stripe=width,
                           wave_groups=wave, waves=waves, params=prm))  # fmt: skip
    return InPlacePlan(batch, rows, cols, es, tuple(passes), used, orientation)


def apply_plan(plan: InPlacePlan, data: list) -> list:
    """The plan's passes applied to ``data`` (a flat list of one batch's worth of elements, or of all of
    them), element by element: the reference the kernels are tested against, and the check of the maps."""
    out = list(data)
    for p in plan.passes:
        gm, gn = p.grid
        size = gm * gn
        for base in range(0, len(out), size):
            old = out[base:base + size]
            new = [None] * size
            for R in range(gm):
                for S in range(gn):
                    if p.name == "swap tiles":
                        r, s = S, R
                        new[R * gn + S] = old[r * gn + s]
                        continue
                    r, s = source(p.name, p.params, R, S)
                    if p.scatter:
                        new[r * gn + s] = old[R * gn + S]
                    else:
                        new[R * gn + S] = old[r * gn + s]
            out[base:base + size] = new
    return out
