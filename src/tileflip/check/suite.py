"""`tileflip check`: run anyone's transpose through an adversarial suite and name the pitfall it fell into.

A target is ``path/to/file.py:function`` or ``package.module:function``: a function ``f(x, out)`` that
writes ``x.T`` into ``out`` (any function taking two positional arguments is called that way), or
``f(x) -> y`` that returns it. ``--form`` overrides the choice.

What a case guarantees
----------------------
* ``f(x, out)``: ``out`` is a contiguous N x M view in the middle of a flat buffer filled with a poison
  bit pattern, with ``guard_size(M, N)`` guard elements before and after it. An element left unwritten
  still holds poison; a write outside ``out`` changes a guard element. Both are seen after the call,
  whatever the device, even where the Triton interpreter writes through raw pointers without a check.
* ``f(x) -> y``: the check has no say in where ``y`` lives. The child turns on torch's deterministic
  mode, in which ``torch.empty`` fills new tensors with NaN (floats) or the largest integer, so an
  element never written is still caught when the target allocates with torch; a write outside ``y``
  is caught only if it kills the process. Pass an ``out`` argument for the full check.
* ``x`` itself lies inside a guarded buffer too: every slot around and between its elements holds a
  code of its own position, so a value read from outside ``x`` is recognized, and so is a write into
  ``x``'s buffer.

Every element of ``x`` carries a code of its own index (4- and 8-byte types exactly; 1- and 2-byte types
modulo a period), so the output tells which element of ``x`` each value came from. The hints are
inferred from that observed output only, never from the target's name or source (``_hypotheses``).

The suite
---------
``normal`` (whole-tile shapes, square and not), ``boundary`` (tails, 1xN, Nx1, primes, one past a tile
in one dimension), ``non-square`` (aspect ratios of 150 and 32, both orientations) and
``non-contiguous`` (transposed, padded-rows and stepped views), each shape with its reason in
``SHAPES``; every category runs in every dtype of ``--dtypes``. ``--square-only`` runs 1024x1024 alone,
to show what that hides; ``--large`` adds a case past 2**31 elements on a GPU.

Processes
---------
This module is the parent. It builds the cases, reads what comes back and explains it, with numpy and
``tileflip.plan`` only: it imports neither torch nor triton. The target runs in a child process
(``tileflip.check.child``), because an out-of-bounds access in the CPU interpreter can corrupt the heap
and abort the process (``free(): invalid size``). A child runs the cases in order and writes each
result before starting the next; when it dies, the case it was running is reported as failing with
the signal and the end of its stderr, and a fresh child goes on with the next case.

From Python: ``check(target, ...)`` returns a ``Report`` (``.passed``, ``.hints()``, ``.text()``,
``.to_json()``); ``check_many(targets, ...)`` runs several targets through shared children.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from tileflip.plan import cdiv, owner_of, tile_masks, transpose_grid

# ---------------------------------------------------------------------------------------------------
# Codes: what each element of x carries, what poison and guards look like
# ---------------------------------------------------------------------------------------------------

# 1- and 2-byte types cannot number every element; their codes cycle through a range that stays clear
# of the guard and poison patterns. The 2-byte range 0x0400..0x7BFF is made of positive normal numbers
# in both float16 and bfloat16, so no code is a NaN that a float path could canonicalize.
# size: (first code, period, guard pattern, poison pattern)
_BIT_CODES = {2: (0x0400, 0x7C00 - 0x0400, 0xBC00, 0xFFFF), 1: (1, 253, 254, 255)}


@dataclass(frozen=True)
class Encoding:
    """How one dtype carries element codes, guard codes and poison, all as unsigned bit patterns."""

    name: str
    size: int
    value_type: str | None  # numpy type whose values are the codes; None: the codes are raw bits
    out_poison: int | None  # None: the bit-code poison of the size
    return_fill: int  # what torch's deterministic mode writes into a new tensor of this dtype

    @property
    def carrier(self) -> np.dtype:
        return np.dtype(f"u{self.size}")

    @property
    def period(self) -> int | None:
        return None if self.value_type else _BIT_CODES[self.size][1]

    @property
    def poison(self) -> int:
        return self.out_poison if self.value_type else _BIT_CODES[self.size][3]

    def codes(self, index: np.ndarray) -> np.ndarray:
        if self.value_type:
            return (index + 1).astype(self.value_type).view(self.carrier)
        first, period, _, _ = _BIT_CODES[self.size]
        return (first + index % period).astype(self.carrier)

    def guards(self, slot: np.ndarray) -> np.ndarray:
        if self.value_type:
            return (-(slot + 1)).astype(self.value_type).view(self.carrier)
        return np.full(slot.shape, _BIT_CODES[self.size][2], self.carrier)

    def decode(self, bits: np.ndarray, numel: int) -> tuple[np.ndarray, np.ndarray]:
        """Per value: the index of the element of x it is (-2: some element, which one is unknown; -1: none)
        and the buffer slot outside x's elements it came from (-2: such a slot, unknown; -1: none)."""
        bits = np.ascontiguousarray(bits, dtype=self.carrier)
        if self.value_type:
            values = bits.view(self.value_type)
            with np.errstate(invalid="ignore", over="ignore"):
                whole = np.abs(values) < 2.0**52 if values.dtype.kind == "f" else np.ones(values.shape, bool)
                if values.dtype.kind == "f":
                    whole &= values == np.round(values)
                ints = np.where(whole, values, 0).astype(np.int64)
            # The int poison (the most negative value) would otherwise read as a slot far outside any buffer.
            whole &= bits != self.poison
            src = np.where(whole & (ints >= 1) & (ints <= numel), ints - 1, -1)
            slot = np.where(whole & (ints <= -1), -ints - 1, -1)
            return src, slot
        first, period, guard, _ = _BIT_CODES[self.size]
        wide = bits.astype(np.int64)
        is_code = (wide >= first) & (wide < first + period)
        src = (
            np.where(is_code & (wide - first < numel), wide - first, -1)
            if numel <= period
            else np.where(is_code, -2, -1)
        )
        return src, np.where(wide == guard, -2, -1)


ENCODINGS = {
    "float32": Encoding("float32", 4, "f4", 0x7FF0DEAD, 0x7FC00000),
    "float64": Encoding("float64", 8, "f8", 0x7FF0DEAD0BADF00D, 0x7FF8000000000000),
    "int32": Encoding("int32", 4, "i4", 0x80000000, 0x7FFFFFFF),
    "int64": Encoding("int64", 8, "i8", 0x8000000000000000, 0x7FFFFFFFFFFFFFFF),
    "float16": Encoding("float16", 2, None, None, 0x7E00),
    "bfloat16": Encoding("bfloat16", 2, None, None, 0x7FC0),
    "int16": Encoding("int16", 2, None, None, 0x7FFF),
    "int8": Encoding("int8", 1, None, None, 0x7F),
    "uint8": Encoding("uint8", 1, None, None, 0xFF),
}
ALIASES = {
    "fp32": "float32",
    "f32": "float32",
    "float": "float32",
    "fp64": "float64",
    "double": "float64",
    "fp16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
    "i8": "int8",
    "u8": "uint8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
}


def parse_dtypes(text: str) -> list[str]:
    names = []
    for raw in text.split(","):
        name = ALIASES.get(raw.strip().lower(), raw.strip().lower())
        if name not in ENCODINGS:
            raise ValueError(
                f"unsupported dtype {raw.strip()!r}; choose from {', '.join(ENCODINGS)} (or fp32, fp16, bf16, ...)"
            )
        if name not in names:
            names.append(name)
    return names


# ---------------------------------------------------------------------------------------------------
# The suite
# ---------------------------------------------------------------------------------------------------

CATEGORIES = ("normal", "boundary", "non-square", "non-contiguous")

# (M, N, why). Every shape has a reason; the per-thread kernels of the tests run 16x16 blocks in the
# interpreter at ~2 ms per block, which is what keeps the whole suite near 600 blocks.
SHAPES = {
    "normal": [
        (64, 64, "square, whole tiles of every usual size"),
        (128, 96, "the seed's rectangular case"),
        (96, 128, "the same, other orientation"),
        (64, 256, "4:1 made of whole 64-tiles: a grid sized from one dimension misses tiles"),
    ],
    "boundary": [
        (1, 1, "a single element"),
        (2, 3, "the seed's smallest case: smaller than any tile"),
        (31, 65, "tails in both dimensions (the seed's case)"),
        (65, 31, "the same, other orientation"),
        (1, 257, "1xN: one row, N one past 256"),
        (257, 1, "Nx1: one column"),
        (97, 89, "primes: no tile divides either side"),
        (89, 97, "primes, other orientation"),
        (16, 17, "one past a 16-tile in N only"),
        (33, 32, "one past a 32-tile in M only"),
        (64, 65, "one past a 64-tile in N only"),
        (129, 128, "one past a 128-tile in M only"),
    ],
    "non-square": [
        (2, 300, "flat: two rows"),
        (300, 2, "thin: two columns"),
        (16, 512, "whole tiles, N = 32 M"),
        (512, 16, "whole tiles, M = 32 N"),
    ],
}
# (M, N, layout, why)
NON_CONTIGUOUS = [
    (40, 72, "transposed", "x = base.t(): column-major, strides (1, M)"),
    (72, 40, "transposed", "the same, other orientation"),
    (31, 65, "padded-rows", "x = base[:, 2:2+N] of rows N+5 long: row stride != N, offset 2"),
    (33, 17, "strided", "x = base[1::2, ::2]: steps in both dimensions and an offset"),
]
SQUARE_ONLY = (1024, 1024, "the square trap: at 1024x1024, col*N+row equals col*M+row and row<N equals row<M")
# Past 2**31 elements in both orientations of tails: only a GPU holds and moves this in reasonable time.
LARGE_SHAPE = (65537, 32769)
INT32_LIMIT = 2**31
LARGE_GUARD = 2**24  # a large case looks for wrapped offsets, not for a wrong leading dimension: a small guard


@dataclass(frozen=True)
class Case:
    id: int
    category: str
    M: int
    N: int
    dtype: str
    layout: str = "contiguous"
    why: str = ""

    @property
    def label(self) -> str:
        return f"{self.M}x{self.N} {self.dtype} {self.layout}"

    @property
    def large(self) -> bool:
        return self.category == "large"


def geometry(layout: str, M: int, N: int) -> tuple[tuple[int, int], int, int]:
    """x's strides, its offset inside its base tensor, and the base tensor's size in elements."""
    if layout == "contiguous":
        return (N, 1), 0, M * N
    if layout == "transposed":
        return (1, M), 0, M * N
    if layout == "padded-rows":
        return (N + 5, 1), 2, M * (N + 5)
    if layout == "strided":
        return (4 * N, 2), 2 * N, 4 * M * N
    raise ValueError(f"unknown layout {layout!r}")


def guard_size(M: int, N: int) -> int:
    """Guard elements on each side of x and of out, L * (L + 256) for the longer side L.

    A wrong leading dimension places x[i, j] at j*L' + i for some L' <= L, up to L*L past the start, and
    a missing mask spills a tile of up to 256 rows past the end; both stay inside this guard.
    """
    longer = max(M, N)
    return longer * (longer + 256)


def build_suite(
    dtypes: list[str], *, square_only: bool = False, only: list[str] | None = None, large: tuple[int, int] | None = None
) -> list[Case]:
    rows = []
    if square_only:
        rows.append(("square", SQUARE_ONLY[0], SQUARE_ONLY[1], "contiguous", SQUARE_ONLY[2]))
    else:
        for category in only or CATEGORIES:
            if category == "non-contiguous":
                rows += [(category, M, N, layout, why) for M, N, layout, why in NON_CONTIGUOUS]
            else:
                rows += [(category, M, N, "contiguous", why) for M, N, why in SHAPES[category]]
    cases = [Case(0, cat, M, N, dt, lay, why) for dt in dtypes for cat, M, N, lay, why in rows]
    if large:
        why = "past 2**31 elements: offsets computed in 32-bit integers wrap"
        cases.append(Case(0, "large", large[0], large[1], dtypes[0], "contiguous", why))
    return [Case(k, c.category, c.M, c.N, c.dtype, c.layout, c.why) for k, c in enumerate(cases)]


def input_buffer(case: Case, enc: Encoding) -> tuple[np.ndarray, int]:
    """x's whole buffer as bits (elements carry their index codes, every other slot its position) and x's offset."""
    (s0, s1), rel, base = geometry(case.layout, case.M, case.N)
    guard = guard_size(case.M, case.N)
    buf = enc.guards(np.arange(2 * guard + base, dtype=np.int64))
    offset = guard + rel
    i, j = np.indices((case.M, case.N), dtype=np.int64)
    buf[offset + i * s0 + j * s1] = enc.codes(i * case.N + j)
    return buf, offset


# ---------------------------------------------------------------------------------------------------
# Running the target in child processes
# ---------------------------------------------------------------------------------------------------

RESTART_EXIT = 75  # the child asks for a fresh process (a CUDA error leaves its context unusable)
LOAD_ERROR_EXIT = 3
DEATHS_IN_A_ROW = 3  # a category whose child dies this often in a row is not run further


class TargetError(Exception):
    """The target could not be loaded: nothing was checked."""


@dataclass
class RunInfo:
    form: str = "?"
    device: str = "?"
    interpreter: bool = False
    prepoisoned: bool = False


def _child_env(device: str) -> dict:
    env = dict(os.environ)
    src_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src_root, env.get("PYTHONPATH", "")) if p)
    if device == "cpu":
        # Set here and not only in the child: triton reads it when kernels are decorated, at import.
        env["TRITON_INTERPRET"] = "1"
    return env


def _write_spec(workdir: str, targets: list[str], form: str, device: str, cases: list[Case]) -> None:
    """The child's work list: every case for the first target, then every case for the next, and so on."""
    specs = []
    for case in cases:
        enc = ENCODINGS[case.dtype]
        entry = {
            "id": case.id,
            "M": case.M,
            "N": case.N,
            "dtype": case.dtype,
            "large": case.large,
            "guard": LARGE_GUARD if case.large else guard_size(case.M, case.N),
            "poison": enc.poison,
            "size": enc.size,
        }
        if not case.large:
            buf, offset = input_buffer(case, enc)
            entry.update(x_file=f"x_{case.id}.npy", offset=offset, strides=geometry(case.layout, case.M, case.N)[0])
            np.save(os.path.join(workdir, entry["x_file"]), buf)
        specs.append(entry)
    jobs = [[t, c] for t in range(len(targets)) for c in range(len(cases))]
    spec = {"targets": targets, "form": form, "device": device, "cases": specs, "jobs": jobs}
    with open(os.path.join(workdir, "spec.json"), "w") as f:
        json.dump(spec, f)


def _read_json(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _tail(path: str, lines: int = 12) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:]).rstrip()
    except OSError:
        return ""


def _death_message(rc: int | None, timed_out: float | None, err_path: str) -> str:
    if timed_out is not None:
        what = f"timed out after {timed_out:g} s (the child was killed)"
    elif rc is not None and rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        what = f"the child process died with {name}"
    else:
        what = f"the child process exited with status {rc} before finishing the case"
    tail = _tail(err_path)
    return f"{what}; end of its stderr:\n{tail}" if tail else what


def _wait(proc: subprocess.Popen, workdir: str, timeout: float) -> float | None:
    """Wait for the child; kill it when one case runs longer than ``timeout``. Returns the timeout hit, if any."""
    progress_path = os.path.join(workdir, "progress")
    seen, since = None, time.monotonic()
    while True:
        try:
            proc.wait(timeout=0.2)
            return None
        except subprocess.TimeoutExpired:
            pass
        try:
            with open(progress_path) as f:
                now_running = f.read()
        except OSError:
            now_running = None
        if now_running != seen:
            seen, since = now_running, time.monotonic()
        elif time.monotonic() - since > timeout:
            proc.kill()
            proc.wait()
            return timeout


def run_targets(
    targets: list[str], cases: list[Case], *, form: str = "auto", device: str = "auto", timeout: float = 300.0
) -> tuple[list[RunInfo], list[dict[int, dict]]]:
    """Run every case of every target in child processes, in order; a child that dies is replaced by a fresh
    one that goes on with the next case. Returns, per target, how it ran and each case's raw result by id."""
    jobs = [(t, case) for t in range(len(targets)) for case in cases]
    results: list[dict[int, dict]] = [{} for _ in targets]
    infos = [RunInfo() for _ in targets]
    with tempfile.TemporaryDirectory(prefix="tileflip-check-") as workdir:
        _write_spec(workdir, targets, form, device, cases)
        start, launches = 0, 0
        while start < len(jobs):
            launches += 1
            err_path = os.path.join(workdir, f"child{launches}.err")
            with open(err_path, "w") as err, open(os.path.join(workdir, f"child{launches}.out"), "w") as out:
                command = [sys.executable, "-m", "tileflip.check.child", workdir, str(start)]
                proc = subprocess.Popen(command, stdout=out, stderr=err, env=_child_env(device), cwd=os.getcwd())
            timed_out = _wait(proc, workdir, timeout)
            while start < len(jobs):
                t, case = jobs[start]
                loaded = _read_json(os.path.join(workdir, f"loaded_{t}.json"))
                raw = _read_json(os.path.join(workdir, f"result_{start}.json"))
                if loaded is None:
                    problem = _read_json(os.path.join(workdir, "load_error.json"))
                    message = problem["message"] if problem else _death_message(proc.returncode, timed_out, err_path)
                    raise TargetError(f"could not load {targets[t]}: {message}")
                infos[t] = RunInfo(loaded["form"], loaded["device"], loaded["interpreter"], loaded["prepoisoned"])
                if raw is None:
                    break
                if raw.get("out_file"):
                    raw["out"] = np.load(os.path.join(workdir, raw["out_file"]))
                results[t][case.id] = raw
                start += 1
            if start >= len(jobs) or proc.returncode == RESTART_EXIT:
                continue
            t, case = jobs[start]
            outcome = "died" if timed_out is None else "timeout"
            results[t][case.id] = {"outcome": outcome, "message": _death_message(proc.returncode, timed_out, err_path)}
            start = _skip_after_deaths(jobs, start, results[t]) + 1
    return infos, results


def _skip_after_deaths(jobs: list[tuple[int, Case]], at: int, results: dict[int, dict]) -> int:
    """After DEATHS_IN_A_ROW deaths in a row in a category, mark the rest of it not run; returns the last job done."""
    target, category = jobs[at][0], jobs[at][1].category
    same = [case for t, case in jobs[: at + 1] if t == target and case.category == category]
    recent = same[-DEATHS_IN_A_ROW:]
    if len(recent) < DEATHS_IN_A_ROW or any(results[c.id]["outcome"] not in ("died", "timeout") for c in recent):
        return at
    message = f"not run: the child died on {DEATHS_IN_A_ROW} cases of this category in a row"
    while at + 1 < len(jobs) and jobs[at + 1][0] == target and jobs[at + 1][1].category == category:
        at += 1
        results[jobs[at][1].id] = {"outcome": "not-run", "message": message}
    return at


# ---------------------------------------------------------------------------------------------------
# What came back
# ---------------------------------------------------------------------------------------------------


@dataclass
class Hypothesis:
    key: str
    param: object
    score: float
    text: str


@dataclass
class Outcome:
    """One case as the parent judged it."""

    case: Case
    kind: str  # ok | mismatch | exception | died | timeout | bad-result | skipped | not-run
    message: str = ""
    counts: dict = field(default_factory=dict)
    mismatches: list = field(default_factory=list)
    hypotheses: list = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.kind in ("ok", "skipped")


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
        text += f"; out slot {tuple(note['out_slot'])}: in_mask there is {note['in_mask_at_out_slot']}"
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
                f"  [the address of out slot {tuple(slot['out_slot'])} of tile (pid_m, pid_n) = {tuple(slot['tile'])}, "
                f"row-major program {slot['program']}, past the output: its out_mask is False]"
            )
        return text + _note_text(row.get("writer"), "written by")
    j, i = row["out"]
    text = f"out[{j}, {i}] (flat {row['flat']}): expected {row['expected']}, got {row['got']}"
    return text + _note_text(row.get("expected_owner"), "owner:") + _note_text(row.get("writer"), "written by")


# ---------------------------------------------------------------------------------------------------
# Hints: which pitfall explains the observed output
# ---------------------------------------------------------------------------------------------------

# When two pitfalls explain the same cases, the one with fewer free parameters is named first.
PRIORITY = (
    "int32-overflow",
    "nothing-written",
    "leading-dimension",
    "input-strides",
    "swapped-bounds",
    "square-only-tiling",
    "reused-input-mask",
    "missing-mask",
    "input-written",
    "crash",
    "timeout",
    "exception",
    "bad-result",
    "unknown",
)
CONSISTENT = 0.9  # the least share of the evidence a pitfall must explain to be named
TIE = 0.001  # pitfalls scoring within this of a case's best count as explaining it too


def _tile_candidates(block: tuple[int, int] | None, axis: int) -> list[int]:
    if block:
        return [block[axis]]
    return [2**k for k in range(1, 11)]


def _leading_dimension(seen: Seen) -> list[Hypothesis]:
    """Values of x placed at j*L + i for one L != M: the output row stride (leading dimension) is wrong."""
    M, N = seen.case.M, seen.case.N
    src, _ = seen.decoded()
    positions, values = seen.guard_writes()
    wsrc, _ = seen.enc.decode(values, M * N)
    p = np.concatenate([np.arange(M * N), positions])
    s = np.concatenate([src, wsrc])
    i, j = s // N, s % N
    moved = (s >= 0) & (p != j * M + i) & (j > 0)
    if not moved.any():
        return []
    num, den = p[moved] - i[moved], j[moved]
    # The row stride each misplaced value implies; 0 where none does (0 is never a stride).
    implied = np.where(num % den == 0, num // den, 0)
    strides, counts = np.unique(implied[implied != 0], return_counts=True)
    if not strides.size:
        return []
    L = int(strides[counts.argmax()])
    score = counts.max() / moved.sum()
    k = np.flatnonzero(moved)[np.flatnonzero(implied == L)[0]]
    ei, ej, ep = int(i[k]), int(j[k]), int(p[k])
    name = " (= N, the input's row length)" if L == N else (" (= x.stride(0))" if L == seen.strides[0] else "")
    text = (
        f"leading dimension: in {seen.case.label}, x[{ei}, {ej}] was written at out flat {ep} = {ej}*{L} + {ei}, "
        f"not {ej}*{M} + {ei}: the output's row stride is {L}{name} instead of M = {M}; the output index must be "
        f"col*M+row, not col*N+row"
    )
    return [Hypothesis("leading-dimension", "N" if L == N else "other", float(score), text)]


def _leading_dimension_predicted(seen: Seen) -> list[Hypothesis]:
    """The same pitfall for codes that repeat (1- and 2-byte types): place every x[i, j] at j*N + i and compare
    the positions exactly one element would land on, and that are not its right place, with what is there."""
    M, N, G = seen.case.M, seen.case.N, seen.guard
    i, j = (a.ravel() for a in np.indices((M, N), dtype=np.int64))
    p = j * N + i
    inside = p < M * N + G
    single = np.bincount(p[inside], minlength=M * N + G) == 1
    keep = inside & (p != j * M + i) & single[np.minimum(p, M * N + G - 1)]
    if not keep.any():
        return []
    observed = np.concatenate([seen.region.reshape(-1), seen.after])[p[keep]]
    score = float((observed == seen.enc.codes(i[keep] * N + j[keep])).mean())
    text = (
        f"leading dimension: in {seen.case.label}, the values sit where an output row stride of N = {N} puts them, "
        f"not M = {M}: the output index must be col*M+row, not col*N+row"
    )
    return [Hypothesis("leading-dimension", "N", score, text)]


def _input_strides(seen: Seen) -> list[Hypothesis]:
    """Values read from x's buffer as if x had other strides (contiguous, or the two swapped)."""
    M, N = seen.case.M, seen.case.N
    s0, s1 = seen.strides
    src, slot = seen.decoded()
    wrong = seen.wrong.reshape(-1) & ((src >= 0) | (slot >= 0))
    if not wrong.any():
        return []
    p = np.flatnonzero(wrong)
    j, i = p // M, p % M
    si, sj = src[p] // N, src[p] % N
    read_at = np.where(src[p] >= 0, seen.x_offset + si * s0 + sj * s1, slot[p])
    found = []
    for a, c in sorted({(N, 1), (M, 1), (s1, s0)} - {(s0, s1)}):
        # Scored over every wrong element: a read bug leaves nothing unwritten, so all must be explained.
        share = (read_at == seen.x_offset + i * a + j * c).sum() / seen.wrong.sum()
        if share >= CONSISTENT:
            text = (
                f"input strides: in {seen.case.label}, out[j, i] holds what lies at x.data_ptr() + i*{a} + j*{c}: "
                f"x was read with strides ({a}, {c}) instead of x.stride() = ({s0}, {s1}); use the input's strides, "
                f"a view is not laid out as a contiguous M x N block"
            )
            found.append(Hypothesis("input-strides", (a, c) == (N, 1), float(share), text))
    return found


def _missing_sets(seen: Seen, block: tuple[int, int] | None) -> list[Hypothesis]:
    """Compare the elements left unwritten with the set each pitfall leaves unwritten.

    Score = min(share of the predicted set that is wrong, share of the unwritten elements predicted): a
    pitfall must leave out what it predicts and not much else. Stray writes of the same bug may cover
    predicted elements with garbage (masked-off loads), which is why the first share counts wrong
    elements, and why the wrong elements stand for the unwritten ones when garbage covered them all.
    """
    M, N = seen.case.M, seen.case.N
    unwritten, wrong = seen.unwritten.T, seen.wrong.T
    if not wrong.any():
        return []
    if not unwritten.any():
        unwritten = wrong
    i, j = np.indices((M, N))
    label = seen.case.label
    candidates = []
    if M != N:
        what = f"x's rows i >= N = {N}" if M > N else f"x's columns j >= M = {M}"
        text = (
            f"swapped bounds: in {label}, exactly {what} were never written: the bounds test is row<N && col<M "
            f"instead of row<M && col<N"
        )
        candidates.append(("swapped-bounds", None, (i >= N) | (j >= M), text))
    for b in _tile_candidates(block, 1):
        cut = cdiv(M, b) * b
        if cut < N:
            text = (
                f"square-only tiling: in {label}, x's columns j >= {cut} = cdiv(M, {b})*{b} were never written "
                f"although N = {N}: the grid along N is sized from M, as if the matrix were square (tiles of {b})"
            )
            candidates.append(("square-only-tiling", ("N", b), j >= cut, text))
    for b in _tile_candidates(block, 0):
        cut = cdiv(N, b) * b
        if cut < M:
            text = (
                f"square-only tiling: in {label}, x's rows i >= {cut} = cdiv(N, {b})*{b} were never written "
                f"although M = {M}: the grid along M is sized from N (tiles of {b})"
            )
            candidates.append(("square-only-tiling", ("M", b), i >= cut, text))
    squares = [block[0]] if block and block[0] == block[1] else ([] if block else _tile_candidates(None, 0))
    for B in squares:
        # A B x B store masked with the load's mask keeps output slot (a, b) of tile (pid_m, pid_n) where
        # the *input* slot (a, b) is inside: pid_m*B + a < M and pid_n*B + b < N, with a = j % B, b = i % B.
        kept = ((i // B) * B + j % B < M) & ((j // B) * B + i % B < N)
        text = (
            f"reused input mask: in {label}, the elements lost lie in tail tiles of {B}x{B} exactly where the "
            f"load's mask, read in output coordinates, is False: the store is masked with the input mask instead "
            f"of the transposed output mask (rn<N)&(rm<M)"
        )
        candidates.append(("reused-input-mask", B, ~kept, text))
    found = []
    for key, param, predicted, text in candidates:
        if not predicted.any():
            continue
        recall = (predicted & wrong).sum() / predicted.sum()
        precision = (predicted & unwritten).sum() / unwritten.sum()
        found.append(Hypothesis(key, param, float(min(recall, precision)), text))
    return found


def _missing_mask(seen: Seen) -> list[Hypothesis]:
    """Nothing left unwritten, but writes outside out or values that are no element of x: an unmasked access."""
    if seen.unwritten.any():
        return []
    c = seen.counts()
    outside = c["writes_before_out"] + c["writes_after_out"]
    garbage = c["other_values"] + c["read_outside_x"]
    if not (outside or garbage):
        return []
    seen_parts = []
    if outside:
        seen_parts.append(
            f"{outside} writes landed outside out ({c['writes_after_out']} past its end, "
            f"{c['writes_before_out']} before its start)"
        )
    if garbage:
        seen_parts.append(f"{garbage} elements hold values that are no element of x (masked-off loads)")
    text = (
        f"missing mask: in {seen.case.label}, {' and '.join(seen_parts)}, while none was left unwritten: a store "
        f"without mask, or a mask that does not bound both output dimensions"
    )
    return [Hypothesis("missing-mask", None, 1.0, text)]


def _nothing_written(seen: Seen) -> list[Hypothesis]:
    if not seen.unwritten.all():
        return []
    text = (
        f"nothing written: in {seen.case.label}, every element of the output still holds the poison: the kernel "
        f"stored nothing there (an empty grid, a mask always False, or a write into a copy of out)"
    )
    return [Hypothesis("nothing-written", None, 1.0, text)]


def _hypotheses(seen: Seen, block: tuple[int, int] | None) -> list[Hypothesis]:
    """Every pitfall that explains this case's output, scored by the share of the evidence it explains.

    * nothing-written: every output element still holds the poison.
    * leading-dimension: every misplaced value x[i, j] (decoded from its code, inside out or in its guard
      bands) sits at out flat j*L + i for one L != M; L = N is the lesson's col*N+row.
    * input-strides: every wrong value is what lies at x.data_ptr() + i*a + j*c for strides (a, c) other
      than x's: (N, 1) as if x were contiguous, (M, 1), or x's two strides exchanged.
    * swapped-bounds, square-only-tiling, reused-input-mask: the elements left unwritten are the set the
      pitfall leaves: i >= N or j >= M; the columns past cdiv(M, b)*b (or rows past cdiv(N, b)*b); the
      tail-tile slots where the load's B x B mask, read in output coordinates, is False.
    * missing-mask: nothing left unwritten, but writes in the guard bands, or values that are no element.

    Tile sizes are searched over powers of two unless ``block`` gives them; ``aggregate_hints`` then asks
    one tile size to explain all the cases of a target. int32-overflow comes from a large case's summary.
    """
    found = (
        _nothing_written(seen)
        + (_leading_dimension(seen) or _leading_dimension_predicted(seen))
        + _input_strides(seen)
        + _missing_sets(seen, block)
        + _missing_mask(seen)
    )
    if seen.x_changed and not seen.wrong.any():
        found.append(
            Hypothesis(
                "input-written",
                None,
                1.0,
                f"writes into x: {seen.x_changed} slots of x's buffer changed in {seen.case.label}",
            )
        )
    return found


def _best(found: list[Hypothesis], fallback: Hypothesis) -> list[Hypothesis]:
    good = [h for h in found if h.score >= CONSISTENT]
    if not good:
        return [fallback]
    top = max(h.score for h in good)
    best = [h for h in good if h.score >= top - TIE]
    return sorted(best, key=lambda h: PRIORITY.index(h.key))


def overflow_hypothesis(case: Case, summary: dict, limit: int = INT32_LIMIT) -> Hypothesis:
    """A large case's verdict from the child's summary: are all wrong elements past ``limit`` in x or out?"""
    first_out, first_src = summary.get("first_wrong_out_flat"), summary.get("first_wrong_x_flat")
    where = [
        f"out flat {first_out}" if first_out is not None and first_out >= limit else None,
        f"x flat {first_src}" if first_src is not None and first_src >= limit else None,
    ]
    if any(where):
        text = (
            f"int32 overflow: in {case.label}, all {summary['wrong']} wrong elements lie past flat index "
            f"{limit} (first at {' / '.join(w for w in where if w)}) and everything before is right: offsets "
            f"computed in 32-bit integers wrap; compute them in int64"
        )
        return Hypothesis("int32-overflow", None, 1.0, text)
    return Hypothesis(
        "unknown", None, 0.0, f"{case.label}: {summary['wrong']} wrong elements, the first at out flat {first_out}"
    )


def judge(
    case: Case,
    raw: dict,
    form: str,
    block: tuple[int, int] | None,
    limit: int,
    overflow_limit: int = INT32_LIMIT,
) -> Outcome:
    """Turn one raw result into an Outcome: pass/fail, counts, first mismatches and the hints that fit."""
    kind = raw.get("outcome", "no result")
    message = raw.get("message", "")
    if kind in ("skipped",):
        return Outcome(case, kind, message)
    if kind in ("died", "not-run"):
        # Cases skipped after repeated deaths count for the crash: the same fault, not yet reached.
        text = (
            f"crash: {message.splitlines()[0].split(';')[0]} while running {case.label}; an out-of-bounds "
            f"access that corrupts the heap (free(): invalid size) or hits unmapped memory does this"
        )
        return Outcome(case, kind, message, hypotheses=[Hypothesis("crash", None, 1.0, text)])
    if kind == "timeout":
        text = (
            f"timeout: {case.label} {message.split(';')[0]}: a kernel that does not end (a loop bound taken from "
            f"the wrong dimension), or one far too slow for this device"
        )
        return Outcome(case, kind, message, hypotheses=[Hypothesis("timeout", None, 1.0, text)])
    if kind in ("exception", "bad-result"):
        key = "exception" if kind == "exception" else "bad-result"
        first = message.strip().splitlines()[-1] if message.strip() else kind
        return Outcome(
            case,
            kind,
            message,
            hypotheses=[
                Hypothesis(
                    key, first, 1.0, f"{case.label} raised {first}" if kind == "exception" else f"{case.label}: {first}"
                )
            ],
        )
    if kind != "ok":
        return Outcome(
            case, kind, message or "no result came back", hypotheses=[Hypothesis("unknown", None, 0.0, kind)]
        )
    if case.large:
        summary = raw["summary"]
        if not summary["wrong"] and not summary.get("outside") and not raw.get("x_changed"):
            return Outcome(case, "ok", counts=summary)
        return Outcome(
            case, "mismatch", counts=summary, hypotheses=[overflow_hypothesis(case, summary, overflow_limit)]
        )
    enc = ENCODINGS[case.dtype]
    seen = Seen(case, raw, enc.poison if form == "out" else enc.return_fill, form)
    if not seen.failed:
        return Outcome(case, "ok")
    counts = seen.counts()
    fallback = Hypothesis("unknown", None, 0.0, f"{case.label}: matches no known pitfall: {_counts_text(counts)}")
    return Outcome(
        case,
        "mismatch",
        counts=counts,
        mismatches=mismatch_details(seen, block, limit),
        hypotheses=_best(_hypotheses(seen, block), fallback),
    )


def _counts_text(c: dict) -> str:
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


def _ident(h: Hypothesis) -> tuple:
    # A target has one tile size, so a tile-size pitfall must fit all its cases with the same one; a wrong
    # stride, an exception or a crash may show differently from case to case and still be one fault.
    per_case = ("leading-dimension", "input-strides", "exception", "crash")
    return (h.key, None if h.key in per_case else h.param)


def aggregate_hints(outcomes: list[Outcome]) -> list[dict]:
    """Greedy cover: name the pitfall that explains most failing cases, then the one that explains most of the
    rest, and so on; ties go to the pitfall with fewer free parameters (PRIORITY)."""
    support: dict[tuple, dict[int, Hypothesis]] = {}
    for o in outcomes:
        for h in [] if o.passed else o.hypotheses:
            support.setdefault(_ident(h), {}).setdefault(o.case.id, h)
    hints, covered = [], set()
    while support:

        def fresh(ident):
            return [cid for cid in support[ident] if cid not in covered]

        best = min(support, key=lambda ident: (-len(fresh(ident)), PRIORITY.index(ident[0])))
        ids = fresh(best)
        if not ids:
            break
        hints.append({"key": best[0], "cases": len(ids), "text": support[best][ids[0]].text})
        covered.update(ids)
    return hints


# ---------------------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------------------


@dataclass
class Report:
    target: str
    info: RunInfo
    cases: list[Case]
    outcomes: list[Outcome]
    dtypes: list[str]
    block: tuple[int, int] | None
    seconds: float
    rubric: bool = False

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outcomes)

    def categories(self) -> dict[str, dict]:
        table: dict[str, dict] = {}
        for o in self.outcomes:
            row = table.setdefault(o.case.category, {"cases": 0, "passed": 0, "skipped": 0})
            row["cases"] += 1
            row["passed"] += o.kind == "ok"
            row["skipped"] += o.kind == "skipped"
        for row in table.values():
            row["status"] = (
                "pass"
                if row["passed"] == row["cases"] - row["skipped"] and row["passed"]
                else ("skipped" if row["skipped"] == row["cases"] else "fail")
            )
        return table

    def hints(self) -> list[dict]:
        return aggregate_hints(self.outcomes)

    def rubric_scores(self) -> dict:
        """The seed lessons' code rubric: normal inputs 2 points, boundary inputs 1, explanation 1 (a person's)."""
        table = self.categories()
        normal = table.get("normal", {}).get("status") == "pass"
        edges = [c for c in ("boundary", "non-square", "non-contiguous") if c in table]
        boundary = bool(edges) and all(table[c]["status"] == "pass" for c in edges)
        return {
            "normal_inputs": 2 * normal,
            "boundary_inputs": int(boundary),
            "explanation": None,
            "automatic": 2 * normal + int(boundary),
            "out_of": 4,
            "boundary_categories": edges,
        }

    def to_json(self) -> dict:
        data = {
            "target": self.target,
            "form": self.info.form,
            "device": self.info.device,
            "interpreter": self.info.interpreter,
            "prepoisoned": self.info.prepoisoned,
            "dtypes": self.dtypes,
            "block": list(self.block) if self.block else None,
            "seconds": round(self.seconds, 3),
            "passed": self.passed,
            "categories": self.categories(),
            "hints": self.hints(),
            "cases": [_outcome_json(o) for o in self.outcomes],
        }
        if self.rubric:
            data["rubric"] = self.rubric_scores()
        return data

    def text(self, show: int = 3) -> str:
        lines = [f"tileflip check {self.target}", "  " + self._how()]
        lines.append("")
        for name, row in self.categories().items():
            status = {"pass": "PASS", "fail": "FAIL", "skipped": "SKIP"}[row["status"]]
            skipped = f", {row['skipped']} skipped" if row["skipped"] else ""
            lines.append(f"  {status}  {name:<15} {row['passed']}/{row['cases']} cases passed{skipped}")
        failing = [o for o in self.outcomes if not o.passed]
        lines.append("")
        lines.append(
            f"verdict: {'PASS' if self.passed else 'FAIL'} ({len(failing)} of {len(self.outcomes)} cases failed)"
        )
        for hint in self.hints():
            lines.append(f"hint [{hint['key']}, {hint['cases']} cases]: {hint['text']}")
        if failing:
            lines.append("")
            lines.append(f"failures (first {show} per category; --json gives all):")
            lines += self._failure_lines(failing, show)
        if self.rubric:
            lines += [""] + self._rubric_lines()
        return "\n".join(lines)

    def _how(self) -> str:
        if self.info.form == "out":
            form = "form f(x, out): out lies inside a poisoned buffer with guard bands"
        else:
            form = (
                "form f(x) -> y: unwritten elements caught through torch's pre-filled allocations"
                if self.info.prepoisoned
                else "form f(x) -> y: new tensors could not be pre-filled, unwritten elements may go unseen"
            )
        where = f"{self.info.device}{' (Triton interpreter)' if self.info.interpreter else ''}"
        block = f", block {self.block[0]}x{self.block[1]}" if self.block else ""
        cases = f"{len(self.outcomes)} cases in {self.seconds:.1f} s"
        return f"{form}; device {where}; dtypes {', '.join(self.dtypes)}{block}; {cases}"

    def _failure_lines(self, failing: list[Outcome], show: int) -> list[str]:
        lines, per_category = [], Counter()
        for o in failing:
            per_category[o.case.category] += 1
            if per_category[o.case.category] > show:
                continue
            lines.append(f"  {o.case.category} {o.case.label} ({o.case.why}): {o.kind}")
            if o.kind == "mismatch":
                lines.append(f"    {_counts_text(o.counts)}")
                lines += [f"    {mismatch_text(row)}" for row in o.mismatches[:5]]
            elif o.message:
                lines += [f"    {line}" for line in o.message.strip().splitlines()[-8:]]
            lines += [f"    hint: {h.text}" for h in o.hypotheses[:1] if h.key not in ("exception", "crash", "timeout")]
        return lines

    def _rubric_lines(self) -> list[str]:
        r = self.rubric_scores()
        return [
            "rubric (the code part, as the seed lessons score it):",
            f"  normal inputs    {r['normal_inputs']}/2   (category normal)",
            f"  boundary inputs  {r['boundary_inputs']}/1   (categories {', '.join(r['boundary_categories'])})",
            "  explanation: 0/1, a person's to give",
            f"  code: {r['automatic']}/3 automatic + explanation, out of {r['out_of']}",
        ]


def _outcome_json(o: Outcome) -> dict:
    return {
        "id": o.case.id,
        "category": o.case.category,
        "shape": [o.case.M, o.case.N],
        "dtype": o.case.dtype,
        "layout": o.case.layout,
        "why": o.case.why,
        "status": "pass" if o.kind == "ok" else ("skipped" if o.kind == "skipped" else "fail"),
        "outcome": o.kind,
        "message": o.message,
        "counts": o.counts,
        "mismatches": o.mismatches,
        "hints": [{"key": h.key, "score": round(h.score, 4), "text": h.text} for h in o.hypotheses],
    }


def check_many(
    targets: list[str],
    *,
    dtypes: list[str] | None = None,
    block: tuple[int, int] | None = None,
    square_only: bool = False,
    only: list[str] | None = None,
    form: str = "auto",
    device: str = "auto",
    large: tuple[int, int] | None = None,
    timeout: float = 300.0,
    rubric: bool = False,
    limit: int = 20,
    overflow_limit: int = INT32_LIMIT,
) -> dict[str, Report]:
    """Run the suite against each target and judge every case; raises TargetError when a target cannot be loaded.

    The targets share child processes, one after the other (a child costs an import of torch); a child that
    dies is still replaced and the next case goes on in a fresh one, but a target that corrupts memory
    without dying could disturb the targets after it in the same child: ``check`` gives each its own.
    """
    dtypes = dtypes or ["float32"]
    started = time.monotonic()
    cases = build_suite(dtypes, square_only=square_only, only=only, large=large)
    infos, results = run_targets(targets, cases, form=form, device=device, timeout=timeout)
    seconds = time.monotonic() - started
    reports = {}
    for target, info, raw in zip(targets, infos, results):
        outcomes = [judge(c, raw.get(c.id, {}), info.form, block, limit, overflow_limit) for c in cases]
        reports[target] = Report(target, info, cases, outcomes, dtypes, block, seconds, rubric)
    return reports


def check(target: str, **options) -> Report:
    """Run the suite against one target, in child processes of its own; options as for ``check_many``."""
    return check_many([target], **options)[target]


# ---------------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------------


def _shape(text: str) -> tuple[int, int]:
    try:
        a, b = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected AxB with positive integers, got {text!r}") from None
    if a <= 0 or b <= 0:
        raise argparse.ArgumentTypeError(f"expected AxB with positive integers, got {text!r}")
    return a, b


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tileflip check",
        description="Run a transpose f(x) -> y or f(x, out) through adversarial inputs and name the indexing pitfall "
        "behind any failure. Exit status 0 only when every case passes.",
    )
    p.add_argument("target", help="path/to/file.py:function or package.module:function")
    p.add_argument(
        "--dtypes", default="float32", help="comma-separated dtypes (default float32; e.g. fp32,fp16,bf16,int8)"
    )
    p.add_argument(
        "--block", type=_shape, metavar="BMxBN", help="the target's tile: map mismatches to the tiles that own them"
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--rubric", action="store_true", help="score the code part like the seed lessons (normal 2, boundary 1)"
    )
    p.add_argument(
        "--square-only", action="store_true", help="run only 1024x1024: the square trap, to show what it hides"
    )
    p.add_argument("--only", help=f"comma-separated categories to run, from {', '.join(CATEGORIES)}")
    p.add_argument(
        "--form",
        choices=("auto", "out", "return"),
        default="auto",
        help="f(x, out) or f(x) -> y (default: from the signature)",
    )
    p.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default="auto", help="cpu runs Triton in its interpreter"
    )
    p.add_argument(
        "--large",
        nargs="?",
        const=LARGE_SHAPE,
        type=_shape,
        metavar="MxN",
        help=f"add a case past 2**31 elements (default {LARGE_SHAPE[0]}x{LARGE_SHAPE[1]}, GPU only)",
    )
    p.add_argument("--timeout", type=float, default=300.0, help="seconds one case may run (default 300)")
    p.add_argument("--show", type=int, default=3, help="failing cases shown per category (default 3)")
    # Lets the tests walk the large-case path on small shapes; not a user-facing knob.
    p.add_argument("--overflow-limit", type=int, default=INT32_LIMIT, help=argparse.SUPPRESS)
    return p


def cli(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        dtypes = parse_dtypes(args.dtypes)
        only = [c.strip() for c in args.only.split(",")] if args.only else None
        if not args.timeout > 0:  # (NaN too)
            raise ValueError(f"--timeout must be a positive number of seconds, got {args.timeout}")
        if only and set(only) - set(CATEGORIES):
            raise ValueError(
                f"unknown categories {sorted(set(only) - set(CATEGORIES))}; choose from {', '.join(CATEGORIES)}"
            )
    except ValueError as e:
        print(f"tileflip check: {e}", file=sys.stderr)
        return 2
    try:
        report = check(
            args.target,
            dtypes=dtypes,
            block=args.block,
            square_only=args.square_only,
            only=only,
            form=args.form,
            device=args.device,
            large=args.large,
            timeout=args.timeout,
            rubric=args.rubric,
            overflow_limit=args.overflow_limit,
        )
    except TargetError as e:
        print(f"tileflip check: {e}", file=sys.stderr)
        return 2
    print(json.dumps(report.to_json(), indent=1) if args.json else report.text(args.show))
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
