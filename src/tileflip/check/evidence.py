"""What came back from one case, decoded: which element of x each output value is, what lies where.

``Seen`` reads a finished case's output buffer (out with its guard bands, or the returned y) through
the dtype's codes; ``mismatch_details`` lists the first wrong elements and stray writes, each mapped
to the planner's tile that owns it when the target's block is known.
"""

from __future__ import annotations

import numpy as np

from tileflip.check.cases import ENCODINGS, Case, geometry, guard_size
from tileflip.plan import owner_of, tile_masks, transpose_grid


class Seen:
    """The output of one finished case, decoded: which element of x (or which slot around it) each value is."""

    def __init__(self, case: Case, raw: dict, poison: int, form: str):
        self.case, self.form, self.poison = case, form, poison
        self.enc = ENCODINGS[case.dtype]
        M, N = case.M, case.N
        flat = np.ascontiguousarray(raw["out"]).view(self.enc.carrier).reshape(-1)
        self.guard = guard_size(M, N) if form == "out" else 0
        self.region = flat[self.guard : self.guard + M * N].reshape(N, M)
        self.before = flat[: self.guard]
        self.after = flat[self.guard + M * N :]
        self.x_changed = int(raw.get("x_changed", 0))
        self.expected = self.enc.codes(np.arange(M * N, dtype=np.int64)).reshape(M, N).T
        self.wrong = self.region != self.expected
        self.unwritten = self.wrong & (self.region == poison)
        self.outside = np.concatenate([self.before, self.after]) != poison
        self.strides, rel, _ = geometry(case.layout, M, N)
        self.x_offset = guard_size(M, N) + rel
        self._decoded = None

    @property
    def failed(self) -> bool:
        return bool(self.wrong.any() or self.outside.any() or self.x_changed)

    def decoded(self) -> tuple[np.ndarray, np.ndarray]:
        if self._decoded is None:
            self._decoded = self.enc.decode(self.region.reshape(-1), self.case.M * self.case.N)
        return self._decoded

    def guard_writes(self) -> tuple[np.ndarray, np.ndarray]:
        """Out flat positions (relative to out[0, 0]) of writes outside out, and their bits."""
        positions = np.concatenate(
            [np.arange(-self.guard, 0), np.arange(self.region.size, self.region.size + self.guard)]
        )
        values = np.concatenate([self.before, self.after])
        return positions[self.outside], values[self.outside]

    def counts(self) -> dict:
        src, slot = self.decoded()
        wrong = self.wrong.reshape(-1)
        unwritten = self.unwritten.reshape(-1)
        element = wrong & (src != -1)
        read_outside = wrong & (slot != -1)
        positions, _ = self.guard_writes()
        return {
            "elements": int(self.region.size),
            "wrong": int(wrong.sum()),
            "never_written": int(unwritten.sum()),
            "another_element": int(element.sum()),
            "read_outside_x": int(read_outside.sum()),
            "other_values": int((wrong & ~unwritten & ~element & ~read_outside).sum()),
            "writes_before_out": int((positions < 0).sum()),
            "writes_after_out": int((positions >= 0).sum()),
            "guarded": self.form == "out",
            "x_changed": self.x_changed,
        }

    def describe(self, bits: int, src: int, slot: int) -> str:
        if bits == self.poison:
            return "never written (poison)" if self.form == "out" else "never written (torch's fill value)"
        if src >= 0:
            i, j = divmod(src, self.case.N)
            return f"x[{i}, {j}]"
        if src == -2:
            return "another element of x"
        if slot >= 0:
            return f"x's memory outside its elements (slot {slot - self.x_offset:+d} from x[0, 0])"
        if slot == -2:
            return "x's memory outside its elements"
        return "0" if bits == 0 else f"bits 0x{bits:0{2 * self.enc.size}x}"


def counts_text(c: dict) -> str:
    if "elements" not in c:
        return f"{c.get('wrong', 0)} wrong"
    text = (
        f"{c['wrong']} of {c['elements']} elements wrong ({c['never_written']} never written, {c['another_element']} "
        f"hold another element, {c['read_outside_x']} read from outside x, {c['other_values']} other values); "
    )
    if c["guarded"]:
        text += f"{c['writes_before_out']} writes before out, {c['writes_after_out']} after it"
    else:
        text += "writes outside y cannot be seen in the f(x) -> y form"
    return text + (f"; {c['x_changed']} slots of x's buffer changed" if c["x_changed"] else "")


def _tile_note(case: Case, block: tuple[int, int] | None, i: int, j: int, missing: bool) -> dict | None:
    """Which tile (from the planner) owns x[i, j], and for a missing element what the input mask says at its slot."""
    if not block or not (0 <= i < case.M and 0 <= j < case.N):
        return None
    BM, BN = block
    pid_m, pid_n = owner_of(case.M, case.N, BM, BN, i, j)
    note = {"tile": [pid_m, pid_n], "program": pid_m * transpose_grid(case.M, case.N, BM, BN).grid_n + pid_n}
    if missing and BM == BN:
        masks = tile_masks(case.M, case.N, BM, BN, pid_m, pid_n)
        slot = (j - pid_n * BN, i - pid_m * BM)
        note["out_slot"] = list(slot)
        note["in_mask_at_out_slot"] = bool(masks.in_mask[slot])
    return note


def _note_text(note: dict | None, who: str) -> str:
    if not note:
        return ""
    text = f"  [{who} tile (pid_m, pid_n) = ({note['tile'][0]}, {note['tile'][1]}), row-major program {note['program']}"
    if "in_mask_at_out_slot" in note:
        a, b = note["out_slot"]
        text += (f"; at row {a}, column {b} of that tile's output block the load's mask, read there, is "
                 f"{note['in_mask_at_out_slot']}")  # fmt: skip
    return text + "]"


def mismatch_details(seen: Seen, block: tuple[int, int] | None, limit: int) -> list[dict]:
    """The first wrong elements in output order, then the first writes outside out."""
    M, N = seen.case.M, seen.case.N
    src, slot = seen.decoded()
    rows = []
    for p in np.flatnonzero(seen.wrong.reshape(-1))[:limit]:
        j, i = divmod(int(p), M)
        bits = int(seen.region.reshape(-1)[p])
        got = seen.describe(bits, int(src[p]), int(slot[p]))
        missing = bits == seen.poison
        entry = {
            "out": [j, i],
            "flat": int(p),
            "expected": f"x[{i}, {j}]",
            "got": got,
            "expected_owner": _tile_note(seen.case, block, i, j, missing),
        }
        if src[p] >= 0:
            entry["writer"] = _tile_note(seen.case, block, *divmod(int(src[p]), N), False)
        rows.append(entry)
    positions, values = seen.guard_writes()
    wsrc, wslot = seen.enc.decode(values, M * N)
    for p, bits, s, g in list(zip(positions, values, wsrc, wslot))[:limit]:
        where = f"{-int(p)} before out[0, 0]" if p < 0 else f"{int(p) - M * N + 1} past the end of out"
        entry = {"outside": where, "flat": int(p), "got": seen.describe(int(bits), int(s), int(g))}
        if s >= 0:
            entry["writer"] = _tile_note(seen.case, block, *divmod(int(s), N), False)
        elif p >= 0:
            entry["address_of"] = _slot_of_address(seen.case, block, int(p))
        rows.append(entry)
    return rows


def _slot_of_address(case: Case, block: tuple[int, int] | None, p: int) -> dict | None:
    """Past the end, out flat p is output row p // M, column p % M: the slot of the tile whose store, with row
    stride M, lands there. A value with no element behind it (a masked-off load) has no other way to a writer."""
    if not block:
        return None
    BM, BN = block
    row, col = divmod(p, case.M)
    grid = transpose_grid(case.M, case.N, BM, BN)
    pid_m, pid_n = col // BM, row // BN
    if pid_n >= grid.grid_n:
        return None
    return {
        "tile": [pid_m, pid_n],
        "program": pid_m * grid.grid_n + pid_n,
        "out_slot": [row - pid_n * BN, col - pid_m * BM],
    }


def mismatch_text(row: dict) -> str:
    if "outside" in row:
        text = f"write outside out, {row['outside']} (flat {row['flat']}): {row['got']}"
        slot = row.get("address_of")
        if slot:
            text += (
                f"  [the address of row {slot['out_slot'][0]}, column {slot['out_slot'][1]} of the output block of "
                f"tile (pid_m, pid_n) = {tuple(slot['tile'])}, row-major program {slot['program']}, past the output: "
                f"a store mask must be False there]"
            )
        return text + _note_text(row.get("writer"), "its value is an element of")
    j, i = row["out"]
    text = f"out[{j}, {i}] (flat {row['flat']}): expected {row['expected']}, got {row['got']}"
    owner = _note_text(row.get("expected_owner"), "should be written by")
    return text + owner + _note_text(row.get("writer"), "its value is an element of")
