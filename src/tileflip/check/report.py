"""The report of one target's check: verdicts per category, hints, failures, as text or JSON.

The verdict is PASS only when every case ran and passed, FAIL when one failed, and INCOMPLETE when none
failed but some could not run here (the large case without a GPU): what was not checked is not passed.

``Report.score()`` is the optional correctness score (``tileflip check --score``): 2 points when every
whole-tile case (category normal) passes, 1 when every edge case (boundary, non-square, non-contiguous)
passes, out of 3.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from tileflip.check.cases import Case
from tileflip.check.diagnose import Hypothesis, Outcome, cover
from tileflip.check.evidence import counts_text, mismatch_text

EDGE_CATEGORIES = ("boundary", "non-square", "non-contiguous")


@dataclass
class RunInfo:
    """How the child ran the target: its form, device, whether in the interpreter, whether y was pre-filled."""

    form: str = "?"
    device: str = "?"
    interpreter: bool = False
    prepoisoned: bool = False


@dataclass
class Report:
    target: str
    info: RunInfo
    cases: list[Case]
    outcomes: list[Outcome]
    dtypes: list[str]
    block: tuple[int, int] | None
    seconds: float
    scored: bool = False  # whether text() and to_json() carry score()

    @property
    def passed(self) -> bool:
        """Every case ran and passed: the verdict is PASS."""
        return all(o.passed for o in self.outcomes)

    @property
    def failing(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.failed]

    @property
    def skipped(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.kind == "skipped"]

    @property
    def verdict(self) -> str:
        """PASS, FAIL (a case failed, whatever else) or INCOMPLETE (none failed, some did not run)."""
        if self.failing:
            return "FAIL"
        return "INCOMPLETE" if self.skipped else "PASS"

    def categories(self) -> dict[str, dict]:
        table: dict[str, dict] = {}
        for o in self.outcomes:
            row = table.setdefault(o.case.category, {"cases": 0, "passed": 0, "skipped": 0})
            row["cases"] += 1
            row["passed"] += o.kind == "ok"
            row["skipped"] += o.kind == "skipped"
        for row in table.values():
            # As the verdict: a category with a case that did not run, and none that failed, did not pass.
            failed = row["cases"] - row["passed"] - row["skipped"]
            row["status"] = "fail" if failed else ("skipped" if row["skipped"] else "pass")
        return table

    def hints(self) -> list[dict]:
        return cover(self.outcomes)[0]

    def case_hints(self) -> dict[int, Hypothesis]:
        """Per failing case id, the hypothesis of the summary's hint that covers that case."""
        return cover(self.outcomes)[1]

    def score(self) -> dict:
        """The correctness score: whole-tile shapes 2 points (category normal passes), edge shapes 1 point
        (every edge category run passes), out of 3. A category that was not run earns nothing."""
        table = self.categories()
        normal = table.get("normal", {}).get("status") == "pass"
        edges = [c for c in EDGE_CATEGORIES if c in table]
        boundary = bool(edges) and all(table[c]["status"] == "pass" for c in edges)
        return {
            "normal_inputs": 2 * normal,
            "boundary_inputs": int(boundary),
            "total": 2 * normal + int(boundary),
            "out_of": 3,
            "boundary_categories": edges,
        }

    def to_json(self) -> dict:
        hints, chosen = cover(self.outcomes)
        data = {
            "target": self.target,
            "form": self.info.form,
            "device": self.info.device,
            "interpreter": self.info.interpreter,
            "prepoisoned": self.info.prepoisoned,
            "dtypes": self.dtypes,
            "block": list(self.block) if self.block else None,
            "seconds": round(self.seconds, 3),
            "verdict": self.verdict,
            "passed": self.passed,
            "failed_cases": len(self.failing),
            "skipped_cases": len(self.skipped),
            "categories": self.categories(),
            "hints": hints,
            "cases": [_outcome_json(o, chosen.get(o.case.id), _ref(hints, o.case.id)) for o in self.outcomes],
        }
        if self.scored:
            data["score"] = self.score()
        return data

    def text(self, show: int = 3) -> str:
        """The report as text: ``show`` bounds both the failing cases listed per category and the wrong
        elements (and writes outside out) listed per case; what is left out is counted."""
        lines = [f"tileflip check {self.target}", "  " + self._how()]
        lines.append("")
        for name, row in self.categories().items():
            status = {"pass": "PASS", "fail": "FAIL", "skipped": "SKIP"}[row["status"]]
            skipped = f", {row['skipped']} skipped" if row["skipped"] else ""
            lines.append(f"  {status}  {name:<15} {row['passed']}/{row['cases']} cases passed{skipped}")
        failing = self.failing
        lines.append("")
        lines += self._verdict_lines()
        if {o.case.category for o in self.outcomes} == {"square"}:
            lines.append("(--square-only ran the 1024x1024 case alone, which hides every tail, bounds and stride "
                         "pitfall: a pass here proves little; run without it to check the kernel)")  # fmt: skip
        hints, chosen = cover(self.outcomes)
        for hint in hints:
            n = hint["cases"]
            lines.append(f"hint {hint['ref']} [{hint['key']}, {n} case{'s' * (n != 1)}]: {hint['text']}")
        if failing:
            lines.append("")
            lines.append(
                f"failures (at most {show} per category, each with at most {show} element line{'s' * (show != 1)}; "
                f"--json gives every case):"
            )
            lines += self._failure_lines(failing, show, hints, chosen)
        if self.scored:
            lines += [""] + self._score_lines()
        return "\n".join(lines)

    def _verdict_lines(self) -> list[str]:
        total, failed, skipped = len(self.outcomes), len(self.failing), len(self.skipped)
        counted = f"of {total} case{'s' * (total != 1)}"
        if self.verdict == "INCOMPLETE":
            ran = total - skipped
            rest = f"the {ran} that ran passed, but a skipped case is not checked" if ran else "none ran"
            line = f"verdict: INCOMPLETE ({skipped} {counted} skipped; {rest})"
        else:
            line = f"verdict: {self.verdict} ({failed} {counted} failed{f', {skipped} skipped' if skipped else ''})"
        return [line] + [f"  skipped: {o.case.category} {o.case.label}: {o.message}" for o in self.skipped]

    def _failure_lines(self, failing: list[Outcome], show: int, hints: list[dict], chosen: dict) -> list[str]:
        lines, per_category = [], Counter()
        left = Counter(o.case.category for o in failing)
        for o in failing:
            category = o.case.category
            per_category[category] += 1
            if per_category[category] <= show:
                lines += self._case_lines(o, show, hints, chosen)
            # Said at the category's last failing case, whose place it takes when it is not shown.
            extra = left[category] - show
            if per_category[category] == left[category] and extra > 0:
                lines.append(f"  ... {extra} more failing {category} case{'s' * (extra != 1)} not shown")
        return lines

    def _case_lines(self, o: Outcome, show: int, hints: list[dict], chosen: dict) -> list[str]:
        lines = [f"  {o.case.category} {o.case.label} ({o.case.why}): {o.kind}"]
        if o.kind == "mismatch":
            lines.append(f"    {counts_text(o.counts)}")
            lines += [f"    {mismatch_text(row)}" for row in o.mismatches[:show]]
            more = _left_out(o, show)
            if more:
                lines.append(f"    ... {more} not shown")
        elif o.message:
            lines += [f"    {line}" for line in o.message.strip().splitlines()[-8:]]
        # A reference to the summary's hint that covers this case, with what this case shows of it.
        h = chosen.get(o.case.id)
        if h is not None:
            lines.append(f"    hint {_ref(hints, o.case.id)} [{h.key}]" + (f": {h.detail}" if h.detail else ""))
        return lines

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
        n = len(self.outcomes)
        cases = f"{n} case{'s' * (n != 1)} in {self.seconds:.1f} s"
        return f"{form}; device {where}; dtypes {', '.join(self.dtypes)}{block}; {cases}"

    def _score_lines(self) -> list[str]:
        s = self.score()
        edges = ", ".join(s["boundary_categories"]) or "none run"
        return [
            "score (whole-tile shapes 2 points, edge shapes 1 point):",
            f"  normal inputs    {s['normal_inputs']}/2   (category normal)",
            f"  boundary inputs  {s['boundary_inputs']}/1   (categories {edges})",
            f"  total            {s['total']}/{s['out_of']}",
        ]


def _ref(hints: list[dict], case_id: int) -> int | None:
    """The number of the hint that covers a case."""
    return next((hint["ref"] for hint in hints if case_id in hint["case_ids"]), None)


def _left_out(o: Outcome, show: int) -> str:
    """What a case's element lines leave out, counted from the whole case (its JSON lists more)."""
    c = o.counts
    if "elements" not in c:
        return ""
    shown_wrong = sum("outside" not in row for row in o.mismatches[:show])
    shown_outside = min(show, len(o.mismatches)) - shown_wrong
    wrong = c["wrong"] - shown_wrong
    outside = c["writes_before_out"] + c["writes_after_out"] - shown_outside
    parts = [f"{wrong} more wrong element{'s' * (wrong != 1)}"] if wrong else []
    if outside:
        parts.append(f"{outside} more write{'s' * (outside != 1)} outside out")
    return " and ".join(parts)


def _outcome_json(o: Outcome, chosen: Hypothesis | None, ref: int | None) -> dict:
    # The summary's pitfall for the case comes first among its hints.
    ordered = sorted(o.hypotheses, key=lambda h: h is not chosen)
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
        "hint": {"ref": ref, "key": chosen.key, "text": chosen.text, "detail": chosen.detail} if chosen else None,
        "hints": [
            {"key": h.key, "score": round(h.score, 4), "weak": h.weak, "text": h.text, "detail": h.detail}
            for h in ordered
        ],
    }
