"""What went wrong: the pitfall that explains a failing case's output, and the hints over all cases.

``judge`` turns one case's raw result into an ``Outcome`` (pass or fail, counts, first mismatches and
the hypotheses that fit); ``aggregate_hints`` names the pitfalls that explain a target's failures.
Hypotheses are inferred from the observed output only, never from the target's name or source.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tileflip.check.cases import ENCODINGS, INT32_LIMIT, Case, input_buffer
from tileflip.check.evidence import Seen, counts_text, mismatch_details
from tileflip.plan import cdiv


@dataclass
class Hypothesis:
    """One pitfall that may explain a case: its key, its free parameter, the share of the evidence it explains.

    ``text`` is the whole hint, ``detail`` a short clause of what this case shows (the report prints the
    whole hint once and the clause under each case). ``weak``: nothing in the case contradicts the pitfall,
    but the case holds none of the misplaced values it predicts, only the lost elements it leaves; such a
    hypothesis joins a hint, it never starts one."""

    key: str
    param: object
    score: float
    text: str
    detail: str = ""
    weak: bool = False


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
        return self.kind == "ok"

    @property
    def failed(self) -> bool:
        """A skipped case neither passed nor failed: it was not checked."""
        return self.kind not in ("ok", "skipped")


# When two pitfalls explain the same cases, the one with fewer free parameters is named first.
PRIORITY = (
    "int32-overflow",
    "nothing-written",
    "reshape",
    "buffer-copy",
    "leading-dimension",
    "input-strides",
    "swapped-bounds",
    "square-only-tiling",
    "reused-input-mask",
    "untransposed-tile",
    "tiles-in-place",
    "sub-block",
    "missing-mask",
    "input-written",
    "crash",
    "timeout",
    "exception",
    "bad-result",
    "unknown",
)
CONSISTENT = 0.9  # the least share of the evidence a pitfall must explain to be named
# Pitfalls whose prediction is fitted to the case itself (the block holding every right element): they fit
# as well as any pitfall they resemble, so their score ranks them against none.
FITTED = ("sub-block",)
TIE = 0.001  # pitfalls scoring within this of a case's best count as explaining it too


def _tile_candidates(block: tuple[int, int] | None, axis: int) -> list[int]:
    if block:
        return [block[axis]]
    return [2**k for k in range(1, 11)]


def _read_outside(seen: Seen) -> int:
    """Wrong output elements holding a value from x's buffer outside its elements: only a wrong read puts them there."""
    _, slot = seen.decoded()
    return int((seen.wrong.reshape(-1) & (slot != -1)).sum())


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
    # A store with the wrong row stride moves x's values but cannot bring in values from outside x:
    # those are a read fault, so they count against this pitfall.
    score = counts.max() / (moved.sum() + _read_outside(seen))
    k = np.flatnonzero(moved)[np.flatnonzero(implied == L)[0]]
    ei, ej, ep = int(i[k]), int(j[k]), int(p[k])
    name = " (= N, the input's row length)" if L == N else (" (= x.stride(0))" if L == seen.strides[0] else "")
    fix = "col*M+row, not col*N+row" if L == N else f"col*M+row, not col*{L}+row"
    text = (
        f"leading dimension: in {seen.case.label}, x[{ei}, {ej}] was written at out flat {ep} = {ej}*{L} + {ei}, "
        f"not {ej}*{M} + {ei}: the output's row stride is {L}{name} instead of M = {M}; the output index must be "
        f"{fix}"
    )
    detail = f"output row stride {L}, not M = {M}"
    return [Hypothesis("leading-dimension", "N" if L == N else "other", float(score), text, detail)]


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
    matched = (observed == seen.enc.codes(i[keep] * N + j[keep])).sum()
    score = float(matched / (keep.sum() + _read_outside(seen)))  # as in _leading_dimension: reads are not stores
    text = (
        f"leading dimension: in {seen.case.label}, the values sit where an output row stride of N = {N} puts them, "
        f"not M = {M}: the output index must be col*M+row, not col*N+row"
    )
    return [Hypothesis("leading-dimension", "N", score, text, f"output row stride N = {N}, not M = {M}")]


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
            if (a, c) == (N, 1):
                why = "as if x were a contiguous M x N block, which a view is not"
            elif (a, c) == (M, 1):
                why = f"x's row stride taken as M = {M}, the output's row length"
            else:
                why = "x's two strides exchanged"
            text = (
                f"input strides: in {seen.case.label}, out[j, i] holds what lies at x.data_ptr() + i*{a} + j*{c}: "
                f"x was read with strides ({a}, {c}) instead of x.stride() = ({s0}, {s1}), {why}; the load must "
                f"use the input's strides, x + row*x.stride(0) + col*x.stride(1)"
            )
            detail = f"x read with strides ({a}, {c}), not ({s0}, {s1})"
            found.append(Hypothesis("input-strides", (a, c) == (N, 1), float(share), text, detail))
    return found


def _missing_sets(seen: Seen, block: tuple[int, int] | None) -> list[Hypothesis]:
    """Compare the elements lost with the set each pitfall leaves unwritten.

    Score = min(share of the predicted set that is wrong, share of the lost elements predicted, share of the
    wrong elements that hold no element of x): a pitfall must leave out what it predicts and not much else,
    and these pitfalls drop elements, they do not move them. The lost elements are those never written;
    where stray writes of the same bug (masked-off loads) covered all of them, those holding a value that is
    no element of x stand for them.
    """
    M, N = seen.case.M, seen.case.N
    src, _ = seen.decoded()
    garbage = (seen.wrong & (src.reshape(N, M) == -1)).T
    unwritten, wrong = seen.unwritten.T, seen.wrong.T
    lost = unwritten if unwritten.any() else garbage
    if not lost.any():
        return []
    dropped = (garbage | unwritten).sum() / wrong.sum()
    i, j = np.indices((M, N))
    label = seen.case.label

    def fate(predicted: np.ndarray) -> str:
        # In the counts' own terms, so that the hint never claims more than the counts show.
        total, never = int(predicted.sum()), int((predicted & unwritten).sum())
        if never == total:
            return "were never written"
        junk = int((predicted & garbage & ~unwritten).sum())
        rest = total - never - junk
        return (
            f"were lost (of those {total} elements {never} were never written, {junk} hold values that are no "
            f"element of x{f', {rest} hold elements of x' if rest else ''})"
        )

    candidates = []
    if M != N:
        predicted = (i >= N) | (j >= M)
        what = f"x's rows i >= N = {N}" if M > N else f"x's columns j >= M = {M}"
        text = (
            f"swapped bounds: in {label}, exactly {what} {fate(predicted)}: the bounds test is row<N && col<M "
            f"instead of row<M && col<N"
        )
        candidates.append(("swapped-bounds", None, predicted, text, f"{what} lost"))
    for b in _tile_candidates(block, 1):
        cut = cdiv(M, b) * b
        if cut < N:
            text = (
                f"square-only tiling: in {label}, x's columns j >= {cut} = cdiv(M, {b})*{b} {fate(j >= cut)} "
                f"although N = {N}: the grid along N is sized from M, as if the matrix were square (tiles of {b})"
            )
            candidates.append(("square-only-tiling", ("N", b), j >= cut, text, f"x's columns j >= {cut} lost"))
    for b in _tile_candidates(block, 0):
        cut = cdiv(N, b) * b
        if cut < M:
            text = (
                f"square-only tiling: in {label}, x's rows i >= {cut} = cdiv(N, {b})*{b} {fate(i >= cut)} "
                f"although M = {M}: the grid along M is sized from N (tiles of {b})"
            )
            candidates.append(("square-only-tiling", ("M", b), i >= cut, text, f"x's rows i >= {cut} lost"))
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
        candidates.append(("reused-input-mask", B, ~kept, text, f"tail-tile slots of {B}x{B} lost"))
    found = []
    for key, param, predicted, text, detail in candidates:
        if not predicted.any():
            continue
        recall = (predicted & wrong).sum() / predicted.sum()
        precision = (predicted & lost).sum() / lost.sum()
        found.append(Hypothesis(key, param, float(min(recall, precision, dropped)), text, detail))
    return found


def _untransposed_tile(seen: Seen, block: tuple[int, int] | None) -> list[Hypothesis]:
    """Tiles stored where their transpose belongs, but with their values as loaded: out[c0 + a, r0 + b] holds
    x[r0 + a, c0 + b] instead of x[r0 + b, c0 + a]. Compared by value, so repeating codes (int8) count too."""
    M, N = seen.case.M, seen.case.N
    if not seen.wrong.any():
        return []
    r, c = np.indices((N, M))  # out[r, c] should hold x[c, r]
    squares = [block[0]] if block and block[0] == block[1] else ([] if block else _tile_candidates(None, 0))
    src = seen.decoded()[0].reshape(N, M)
    found = []
    for B in squares:
        pi, pj = (c // B) * B + r % B, (r // B) * B + c % B
        inside = (pi < M) & (pj < N)
        judged = seen.wrong & inside
        if not judged.any():
            continue  # nothing but tail slots: no evidence for the exchange itself
        held = (seen.region == seen.enc.codes(np.where(inside, pi * N + pj, 0)))[judged].sum()
        # Where the exchanged source lies outside x, the tile's masked-off load writes a value that is no
        # element (in 1-byte codes it may read as the poison): evidence only once the exchanged values
        # themselves make the case.
        garbage = (seen.wrong & ~inside & (src == -1)).sum()
        matched = held / judged.sum()
        score = matched if matched < CONSISTENT else (held + garbage) / seen.wrong.sum()
        text = (
            f"untransposed tile: in {seen.case.label}, each {B}x{B} tile lands where its transpose belongs, but "
            f"with its values as loaded: out[c0 + a, r0 + b] holds x[r0 + a, c0 + b] instead of x[r0 + b, c0 + a]; "
            f"transpose the tile's values (tl.trans(tile)), not only its offsets"
        )
        found.append(Hypothesis("untransposed-tile", B, float(score), text, f"tiles of {B}x{B}"))
    return found


def _share_held(seen: Seen, predicted: np.ndarray) -> float:
    """The share of the wrong elements (and of the writes outside out, which a copy never makes) that hold the
    bits ``predicted`` gives for their place: compared by value, so repeating codes count too."""
    held = (seen.wrong & (seen.region == predicted)).sum()
    return float(held / (seen.wrong.sum() + seen.outside.sum()))


def _reshape(seen: Seen) -> list[Hypothesis]:
    """out.view(-1) == x.reshape(-1): x's elements in x's own row-major order, laid out N x M; what a reshape,
    a view or a copy in the place of a transpose writes. With M or N = 1 this is the transpose itself."""
    M, N = seen.case.M, seen.case.N
    if not seen.wrong.any() or min(M, N) == 1:
        return []
    predicted = seen.enc.codes(np.arange(M * N, dtype=np.int64)).reshape(N, M)
    text = (
        f"reshape, not a transpose: in {seen.case.label}, out holds x's elements in x's own order, "
        f"out.view(-1) == x.reshape(-1): x was reshaped or copied as it is (x.reshape(N, M), x.view(N, M), "
        f"a copy element by element) instead of transposed; out[j, i] must be x[i, j], as x.t() gives"
    )
    return [Hypothesis("reshape", None, _share_held(seen, predicted), text)]


def _buffer_copy(seen: Seen) -> list[Hypothesis]:
    """out flat p holds what lies at x.data_ptr() + p: x's memory copied as it lies, neither transposed nor
    read through x's strides. For a contiguous x the same as a reshape; x's views tell the two apart."""
    M, N = seen.case.M, seen.case.N
    if not seen.wrong.any():
        return []
    buf, offset = input_buffer(seen.case, seen.enc)
    predicted = buf[offset : offset + M * N].reshape(N, M)
    text = (
        f"buffer copy: in {seen.case.label}, out flat p holds what lies at x.data_ptr() + p: M*N slots of x's "
        f"memory were copied as they lie, neither transposed nor read through x.stride() = {seen.strides}; "
        f"out[j, i] must be x[i, j], read at x + i*x.stride(0) + j*x.stride(1)"
    )
    return [Hypothesis("buffer-copy", None, _share_held(seen, predicted), text)]


def _sub_block(seen: Seen) -> list[Hypothesis]:
    """One block of x transposed right, every other element never written: a grid, a loop or a bound that
    covers part of x. The block is the smallest one holding every right element."""
    M, N = seen.case.M, seen.case.N
    right, unwritten = ~seen.wrong.T, seen.unwritten.T  # in x's coordinates
    if not right.any() or right.all():
        return []
    rows, cols = np.flatnonzero(right.any(axis=1)), np.flatnonzero(right.any(axis=0))
    r0, r1, c0, c1 = int(rows[0]), int(rows[-1]) + 1, int(cols[0]), int(cols[-1]) + 1
    inside = np.zeros((M, N), bool)
    inside[r0:r1, c0:c1] = True
    if inside.all():
        return []
    score = min(right[inside].mean(), unwritten[~inside].mean())
    others, never = int((~inside).sum()), int(unwritten[~inside].sum())
    fate = f"the other {others} elements" if never == others else f"{never} of the other {others} elements"
    block = f"x[{r0}:{r1}, {c0}:{c1}]"
    text = (
        f"sub-block: in {seen.case.label}, only the block {block} (out[{c0}:{c1}, {r0}:{r1}]) was transposed, "
        f"rightly, and {fate} were never written: the grid, a loop bound or the mask covers {r1 - r0} of x's "
        f"M = {M} rows and {c1 - c0} of its N = {N} columns, not all of them"
    )
    return [Hypothesis("sub-block", None, float(score), text, f"only {block} written")]


def _tiles_in_place(seen: Seen, block: tuple[int, int] | None) -> list[Hypothesis]:
    """Tiles transposed within themselves but stored at their own tile position: x's tile (pid_m, pid_n) goes to
    output block (pid_m, pid_n), not (pid_n, pid_m), so out[r0 + b, c0 + a] holds x[r0 + a, c0 + b].

    Three predictions, all checked: inside x's tile grid those values (compared by value); the output blocks
    no tile of the grid is stored at never written; slots whose value would come from outside x lost (never
    written, or a masked-off load). Where no value lands off its place (thin shapes: the only tiles stored
    in range are those on the diagonal), the hypothesis stands on the lost blocks alone and is weak."""
    M, N = seen.case.M, seen.case.N
    if not seen.wrong.any():
        return []
    r, c = np.indices((N, M))  # out[r, c] should hold x[c, r]
    squares = [block[0]] if block and block[0] == block[1] else ([] if block else _tile_candidates(None, 0))
    src = seen.decoded()[0].reshape(N, M)
    lost = seen.unwritten | (seen.wrong & (src == -1))
    found = []
    for B in squares:
        pi, pj = (r // B) * B + c % B, (c // B) * B + r % B
        gm, gn = cdiv(M, B), cdiv(N, B)
        stored = (r // B < gm) & (c // B < gn)
        inside = stored & (pi < M) & (pj < N)
        moved = inside & ((pi != c) | (pj != r))  # where the value predicted is not the right one
        dropped = ~inside
        if not (moved.any() or dropped.any()):
            continue  # tiles as large as x: this is the transpose
        held = moved & (seen.region == seen.enc.codes(np.where(inside, pi * N + pj, 0)))
        explained = held | (dropped & lost)
        shares = [explained[seen.wrong].mean(), (seen.wrong & (moved | dropped)).sum() / (moved | dropped).sum()]
        if moved.any():
            shares.append(held.sum() / moved.sum())
        score = float(min(shares)) * seen.wrong.sum() / (seen.wrong.sum() + seen.outside.sum())
        text = (
            f"tiles in place: in {seen.case.label}, each {B}x{B} tile is transposed within itself but stored at "
            f"its own tile position: out[r0 + b, c0 + a] holds x[r0 + a, c0 + b] (tile (pid_m, pid_n) written to "
            f"output block (pid_m, pid_n)) instead of out[c0 + b, r0 + a]; the output block of tile "
            f"(pid_m, pid_n) starts at row pid_n*{B}, column pid_m*{B}"
        )
        detail = f"tiles of {B}x{B}"
        if not moved.any():
            # The counts' own words: "never written" only where the poison is still there.
            fate = "never written" if not (seen.wrong & ~seen.unwritten).any() else "lost"
            text += (
                f"; in this shape such tiles store every element they hold in its right place, and the "
                f"{int(seen.wrong.sum())} elements {fate} are those they leave: the output blocks past the "
                f"{gm}x{gn} grid of tiles, where no tile is stored, and the slots whose values would lie outside x"
            )
            detail += f", output blocks past the {gm}x{gn} tile grid {fate}"
        found.append(Hypothesis("tiles-in-place", B, score, text, detail, weak=not moved.any()))
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
      bands) sits at out flat j*L + i for one L != M; L = N is col*N+row, the input's row length used.
    * input-strides: every wrong value is what lies at x.data_ptr() + i*a + j*c for strides (a, c) other
      than x's: (N, 1) as if x were contiguous, (M, 1), or x's two strides exchanged.
    * swapped-bounds, square-only-tiling, reused-input-mask: the elements left unwritten are the set the
      pitfall leaves: i >= N or j >= M; the columns past cdiv(M, b)*b (or rows past cdiv(N, b)*b); the
      tail-tile slots where the load's B x B mask, read in output coordinates, is False.
    * untransposed-tile: the wrong values are those of the right tile with its local row and column
      exchanged (a tile stored at transposed offsets without transposing its values).
    * reshape: out.view(-1) == x.reshape(-1), x's elements in x's order (a reshape or a copy for a transpose).
    * buffer-copy: out flat p is what lies at x.data_ptr() + p (x's memory copied as it lies).
    * tiles-in-place: each tile transposed within itself but stored at its own tile position.
    * sub-block: one block of x transposed right, everything else never written.
    * missing-mask: nothing left unwritten, but writes in the guard bands, or values that are no element
      (the latter alone only where nothing else explains the case).

    Tile sizes are searched over powers of two unless ``block`` gives them; ``aggregate_hints`` then asks
    one tile size to explain all the cases of a target. int32-overflow comes from a large case's summary.
    """
    found = (
        _nothing_written(seen)
        + (_leading_dimension(seen) or _leading_dimension_predicted(seen))
        + _input_strides(seen)
        + _reshape(seen)
        + _buffer_copy(seen)
        + _missing_sets(seen, block)
        + _untransposed_tile(seen, block)
        + _tiles_in_place(seen, block)
        + _sub_block(seen)
    )
    # Values that are no element, with no write outside out, are what any misplaced store of a masked
    # load leaves: a missing mask is named for them only where nothing more specific explains the case.
    masked = _missing_mask(seen)
    outside = seen.outside.any()
    if outside or not any(h.score >= CONSISTENT and not h.weak for h in found):
        found += masked
    if seen.x_changed and not seen.wrong.any():
        found.append(
            Hypothesis(
                "input-written",
                None,
                1.0,
                f"writes into x: {seen.x_changed} slots of x's buffer changed in {seen.case.label}",
                f"{seen.x_changed} slots of x changed",
            )
        )
    return found


def _best(found: list[Hypothesis], fallback: Hypothesis) -> list[Hypothesis]:
    """The case's best-scoring hypotheses, fewest free parameters first, then every other one that fits but is
    not ranked on its score: a block fitted to the data (FITTED) scores best wherever it fits, and a weak
    one scores on the lost elements alone; ``cover`` weighs them over all the cases instead."""
    fits = [h for h in found if h.score >= CONSISTENT]
    ranked = [h for h in fits if not h.weak and h.key not in FITTED]
    kept = sorted((h for h in fits if h not in ranked), key=lambda h: (h.weak, PRIORITY.index(h.key)))
    if not ranked:
        return kept or [fallback]
    top = max(h.score for h in ranked)
    best = [h for h in ranked if h.score >= top - TIE]
    return sorted(best, key=lambda h: PRIORITY.index(h.key)) + kept


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
        return Hypothesis("int32-overflow", None, 1.0, text, f"all wrong past flat {limit}")
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
    fallback = Hypothesis("unknown", None, 0.0, f"{case.label}: matches no known pitfall: {counts_text(counts)}")
    return Outcome(
        case,
        "mismatch",
        counts=counts,
        mismatches=mismatch_details(seen, block, limit),
        hypotheses=_best(_hypotheses(seen, block), fallback),
    )


def _ident(h: Hypothesis) -> tuple:
    # A target has one tile size, so a tile-size pitfall must fit all its cases with the same one; a wrong
    # stride, an exception or a crash may show differently from case to case and still be one fault.
    per_case = ("leading-dimension", "input-strides", "exception", "crash")
    return (h.key, None if h.key in per_case else h.param)


def cover(outcomes: list[Outcome]) -> tuple[list[dict], dict[int, Hypothesis]]:
    """Greedy cover: name the pitfall that explains most failing cases, then the one that explains most of the
    rest, and so on; ties go to the pitfall with fewer free parameters (PRIORITY). A pitfall is named only
    where some case left holds evidence of its own for it; weak fits then join it. Cases that only weak fits
    explain are covered last, the same way.

    Returns the hints, numbered from 1 in order, each with the ids of the cases it covers, and per failing
    case id the hypothesis of the hint that covers it: a case's own hint is taken from there, so that it
    never names another pitfall than the summary does for it."""
    support: dict[tuple, dict[int, Hypothesis]] = {}
    for o in outcomes:
        for h in o.hypotheses if o.failed else []:
            support.setdefault(_ident(h), {}).setdefault(o.case.id, h)
    hints, chosen = [], {}
    while True:
        fresh = {ident: [cid for cid in by_case if cid not in chosen] for ident, by_case in support.items()}
        strong = [ident for ident, ids in fresh.items() if any(not support[ident][cid].weak for cid in ids)]
        eligible = strong or [ident for ident, ids in fresh.items() if ids]
        if not eligible:
            break
        best = min(eligible, key=lambda ident: (-len(fresh[ident]), PRIORITY.index(ident[0])))
        ids = fresh[best]
        # The summary words the hint as a case with evidence of its own shows it.
        example = next((cid for cid in ids if not support[best][cid].weak), ids[0])
        hints.append(
            {
                "ref": len(hints) + 1,
                "key": best[0],
                "cases": len(ids),
                "case_ids": ids,
                "text": support[best][example].text,
            }
        )
        chosen.update((cid, support[best][cid]) for cid in ids)
    return hints, chosen


def aggregate_hints(outcomes: list[Outcome]) -> list[dict]:
    """The hints of ``cover``: the pitfalls that explain a target's failing cases, most cases first."""
    return cover(outcomes)[0]
