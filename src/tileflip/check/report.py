"""The report of one target's check: verdicts per category, hints, failures, as text or JSON.

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
            "passed": self.passed,
            "categories": self.categories(),
            "hints": hints,
            "cases": [_outcome_json(o, chosen.get(o.case.id)) for o in self.outcomes],
        }
        if self.scored:
            data["score"] = self.score()
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
        total = len(self.outcomes)
        lines.append(
            f"verdict: {'PASS' if self.passed else 'FAIL'} ({len(failing)} of {total} case{'s' * (total != 1)} failed)"
        )
        if {o.case.category for o in self.outcomes} == {"square"}:
            lines.append("(--square-only ran the 1024x1024 case alone, which hides every tail, bounds and stride "
                         "pitfall: a pass here proves little; run without it to check the kernel)")  # fmt: skip
        for hint in self.hints():
            lines.append(f"hint [{hint['key']}, {hint['cases']} case{'s' * (hint['cases'] != 1)}]: {hint['text']}")
        if failing:
            lines.append("")
            lines.append(f"failures (first {show} per category; --json gives all):")
            lines += self._failure_lines(failing, show)
        if self.scored:
            lines += [""] + self._score_lines()
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
        n = len(self.outcomes)
        cases = f"{n} case{'s' * (n != 1)} in {self.seconds:.1f} s"
        return f"{form}; device {where}; dtypes {', '.join(self.dtypes)}{block}; {cases}"

    def _failure_lines(self, failing: list[Outcome], show: int) -> list[str]:
        lines, per_category = [], Counter()
        chosen = self.case_hints()
        for o in failing:
            per_category[o.case.category] += 1
            if per_category[o.case.category] > show:
                continue
            lines.append(f"  {o.case.category} {o.case.label} ({o.case.why}): {o.kind}")
            if o.kind == "mismatch":
                lines.append(f"    {counts_text(o.counts)}")
                lines += [f"    {mismatch_text(row)}" for row in o.mismatches[:5]]
            elif o.message:
                lines += [f"    {line}" for line in o.message.strip().splitlines()[-8:]]
            # The summary's pitfall for this case, not the case's own first guess: the two must agree.
            h = chosen.get(o.case.id)
            if h is not None and h.key not in ("exception", "crash", "timeout"):
                lines.append(f"    hint: {h.text}")
        return lines

    def _score_lines(self) -> list[str]:
        s = self.score()
        edges = ", ".join(s["boundary_categories"]) or "none run"
        return [
            "score (whole-tile shapes 2 points, edge shapes 1 point):",
            f"  normal inputs    {s['normal_inputs']}/2   (category normal)",
            f"  boundary inputs  {s['boundary_inputs']}/1   (categories {edges})",
            f"  total            {s['total']}/{s['out_of']}",
        ]


def _outcome_json(o: Outcome, chosen: Hypothesis | None) -> dict:
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
        "hint": {"key": chosen.key, "text": chosen.text} if chosen else None,
        "hints": [{"key": h.key, "score": round(h.score, 4), "text": h.text} for h in ordered],
    }
