"""The checker's cases: how each dtype carries element codes, and the suite of shapes and layouts.

Every element of x carries a code of its own index and every other slot of x's buffer a code of its
position, so the output tells where each value came from; poison marks what was never written. The
dtype names are those of ``tileflip.plan.dtypes``; only the bit patterns are the checker's own.
Plain numpy: the parent process imports neither torch nor triton.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tileflip.plan.dtypes import ELEMENT_SIZE, dtype_name

# ---------------------------------------------------------------------------------------------------
# Codes: what each element of x carries, what poison and guards look like
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BitCodes:
    """Codes for types too narrow to number every element: they cycle through ``period`` bit patterns from
    ``first``, and every guard slot holds the one ``guard`` pattern."""

    first: int
    period: int
    guard: int
    poison: int


# Positive normal numbers in both float16 and bfloat16: no code is a NaN or a subnormal that a float
# path could canonicalize or flush.
TWO_BYTE = BitCodes(0x0400, 0x7C00 - 0x0400, 0xBC00, 0xFFFF)
ONE_BYTE = BitCodes(1, 253, 254, 255)
# Positive normal finite numbers in all five float8 types (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz, e8m0fnu);
# the guard 0xFB is a finite number in all of them.
FLOAT8 = BitCodes(0x08, 0x7C - 0x08, 0xFB, 0xFF)


@dataclass(frozen=True)
class Encoding:
    """How one dtype carries element codes, guard codes and poison, all as unsigned bit patterns.

    Value codes (4- and 8-byte types): element k holds the number k + 1 and buffer slot s the number
    -(s + 2) in ``value_type``, whose bits the dtype carries; -1 is skipped, because it is the all-ones
    pattern torch fills new unsigned tensors with. Bit codes (1- and 2-byte types): see ``BitCodes``.
    """

    name: str
    size: int
    value_type: str | None  # numpy type whose values are the codes; None: the codes are ``bits``
    out_poison: int | None  # the poison of value-coded types; bit-coded ones use ``bits.poison``
    return_fill: int  # what torch's deterministic mode writes into a new tensor of this dtype
    bits: BitCodes | None = None

    @property
    def carrier(self) -> np.dtype:
        return np.dtype(f"u{self.size}")

    @property
    def period(self) -> int | None:
        return None if self.value_type else self.bits.period

    @property
    def poison(self) -> int:
        return self.out_poison if self.value_type else self.bits.poison

    def codes(self, index: np.ndarray) -> np.ndarray:
        if self.value_type:
            return (index + 1).astype(self.value_type).view(self.carrier)
        return (self.bits.first + index % self.bits.period).astype(self.carrier)

    def guards(self, slot: np.ndarray) -> np.ndarray:
        if self.value_type:
            return (-(slot + 2)).astype(self.value_type).view(self.carrier)
        return np.full(slot.shape, self.bits.guard, self.carrier)

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
            slot = np.where(whole & (ints <= -2), -ints - 2, -1)
            return src, slot
        first, period = self.bits.first, self.bits.period
        wide = bits.astype(np.int64)
        is_code = (wide >= first) & (wide < first + period)
        src = (
            np.where(is_code & (wide - first < numel), wide - first, -1)
            if numel <= period
            else np.where(is_code, -2, -1)
        )
        return src, np.where(wide == self.bits.guard, -2, -1)


def _value(name: str, size: int, value_type: str, poison: int, fill: int) -> Encoding:
    return Encoding(name, size, value_type, poison, fill)


def _bits(name: str, codes: BitCodes, fill: int) -> Encoding:
    return Encoding(name, ELEMENT_SIZE[name], None, None, fill, codes)


# Keyed by the names of tileflip.plan.dtypes; the fills are torch's (tests/test_check.py compares them).
ENCODINGS = {
    e.name: e
    for e in (
        _value("float32", 4, "f4", 0x7FF0DEAD, 0x7FC00000),
        _value("float64", 8, "f8", 0x7FF0DEAD0BADF00D, 0x7FF8000000000000),
        _value("int32", 4, "i4", 0x80000000, 0x7FFFFFFF),
        _value("int64", 8, "i8", 0x8000000000000000, 0x7FFFFFFFFFFFFFFF),
        _value("uint32", 4, "i4", 0x80000000, 0xFFFFFFFF),
        _value("uint64", 8, "i8", 0x8000000000000000, 0xFFFFFFFFFFFFFFFF),
        _bits("float16", TWO_BYTE, 0x7E00),
        _bits("bfloat16", TWO_BYTE, 0x7FC0),
        _bits("int16", TWO_BYTE, 0x7FFF),
        _bits("uint16", TWO_BYTE, 0xFFFF),
        _bits("int8", ONE_BYTE, 0x7F),
        _bits("uint8", ONE_BYTE, 0xFF),
        _bits("float8_e4m3fn", FLOAT8, 0x7F),
        _bits("float8_e4m3fnuz", FLOAT8, 0x80),
        _bits("float8_e5m2", FLOAT8, 0x7F),
        _bits("float8_e5m2fnuz", FLOAT8, 0x80),
        _bits("float8_e8m0fnu", FLOAT8, 0xFF),
    )
}
# The dtypes of the table the checker has no codes for, and why.
UNCHECKABLE = {
    "bool": "a bool holds only 0 or 1, too few values to tell elements apart",
    "complex32": "no codes whose two halves every float path keeps bit for bit",
    "complex64": "no codes whose two halves every float path keeps bit for bit",
}


def encoding(dtype) -> Encoding:
    """The encoding of ``dtype`` (any spelling ``tileflip.plan.dtypes.dtype_name`` takes)."""
    name = dtype_name(dtype)
    if name not in ENCODINGS:
        why = UNCHECKABLE.get(name, "no element codes for it")
        raise ValueError(f"dtype {name} cannot be checked ({why}); tileflip check takes {', '.join(ENCODINGS)}")
    return ENCODINGS[name]


# ---------------------------------------------------------------------------------------------------
# The suite
# ---------------------------------------------------------------------------------------------------

CATEGORIES = ("normal", "boundary", "non-square", "non-contiguous")

# (M, N, why). Every shape has a reason; the per-thread kernels of the tests run 16x16 blocks in the
# interpreter at ~2 ms per block, which is what keeps the whole suite near 600 blocks.
SHAPES = {
    "normal": [
        (64, 64, "square, whole tiles of every usual size"),
        (128, 96, "rectangular, M > N, whole tiles up to 32"),
        (96, 128, "the same, other orientation"),
        (64, 256, "4:1 made of whole 64-tiles: a grid sized from one dimension misses tiles"),
    ],
    "boundary": [
        (1, 1, "a single element"),
        (2, 3, "smaller than any tile, M != N"),
        (31, 65, "tails in both dimensions"),
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
    raise ValueError(f"layout must be contiguous, transposed, padded-rows or strided, got {layout!r}")


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
    """Every case to run, numbered: each category's shapes in each dtype, then the large case if asked for."""
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
