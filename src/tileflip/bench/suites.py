"""The 2-D and permute suites: tileflip against a same-run device copy and the peers, as long-form records.

Each case is measured in rounds; in every round the device-to-device copy of the same byte count is
timed first, then every op, so fractions of copy compare figures of one run. Bytes moved:
``2 * numel * element_size`` (a read and a write of each element, as the copy of that many bytes).
Records: gpu, torch, triton, time, flush, op, backend, shape, perm, dtype, ms, ms_p20, ms_p80, gbps,
copy_gbps, fraction_of_copy, run, round, for ``auto`` the backend it chose (``auto_choice``), and for
the wide suite's cases their ``name``; ``wide_summary`` reports that suite per element size.
The timing method is described in docs/design.md (the benchmark).
"""

from __future__ import annotations

import statistics

from tileflip.bench import records as rec
from tileflip.bench.cases import PEERS, PERMUTE_SUITES, TILEFLIP_BACKENDS, Case, suite_cases
from tileflip.bench.peers import PERMUTE_STRATEGIES, op_functions, plan_of, run_xla


def measure(cases: list[Case], backends: list[str], rounds: int, quick: bool, log=print) -> list[dict]:
    import torch

    from tileflip import tuning

    meta = rec.meta()
    run_id = meta["time"]
    records = []
    xla = run_xla(cases, quick) if "xla" in backends else {}
    if "error" in xla:
        log(f"xla: left out ({xla['error'].strip().splitlines()[-1] if xla['error'].strip() else 'failed'})")
    for i, case in enumerate(cases):
        x = rec.make_input(case.shape, case.dtype)
        out = torch.empty(case.out_shape, dtype=x.dtype, device="cuda")
        src = torch.empty(x.numel() * x.element_size(), dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        nbytes = 2 * x.numel() * x.element_size()
        fns, notes = op_functions(case, x, out, [b for b in backends if b != "xla"])
        for b, note in notes.items():
            log(f"  {b}: {note}")
        chosen = tuning.auto_backend(x) if case.perm is None else permute_kind(x, case)
        for r in range(rounds):
            copy_ms, c20, c80 = rec.time_ms(lambda d=dst, s=src: d.copy_(s), quick)
            copy_gbps = nbytes / copy_ms / 1e6
            row = dict(meta, op="copy", backend="copy", shape=list(case.shape), perm=case.perm, dtype=case.dtype,
                       ms=copy_ms, ms_p20=c20, ms_p80=c80, gbps=copy_gbps, copy_gbps=copy_gbps,
                       fraction_of_copy=1.0, run=run_id, round=r)  # fmt: skip
            if case.name:
                row["name"] = case.name
            records.append(row)
            # The "l2" flush empties the L2 before every timed call: what ran before does not change a time.
            timed = [(b, *rec.time_ms(fn, quick)) for b, fn in fns]
            if case.label in xla.get("ms", {}):
                timed.append(("xla", xla["ms"][case.label], None, None))
            for b, ms, p20, p80 in timed:
                gbps = nbytes / ms / 1e6
                one = dict(row, op=case.op, backend=b, ms=ms, ms_p20=p20, ms_p80=p80, gbps=gbps,
                           fraction_of_copy=gbps / copy_gbps)  # fmt: skip
                if b == "auto":
                    one["auto_choice"] = chosen
                records.append(one)
        log(f"[{i + 1}/{len(cases)}] {case.label}: " + summary_line(records, case))
        del x, out, src, dst
        torch.cuda.empty_cache()
    return records


def permute_kind(x, case: Case) -> str:
    """The plan's kind for a permute case (what ``auto`` runs)."""
    return plan_of(x, case.perm).kind


def summary_line(records: list[dict], case: Case) -> str:
    key = (case.shape if case.perm is None else (case.shape, case.perm), case.dtype)
    med = rec.medians([r for r in records if rec.case_key(r) == key])
    parts = [f"{b} {f:.0%}" for (s, d, b), (_, _, f) in med.items() if b != "copy"]
    copy = med.get((*key, "copy"))
    return (f"copy {copy[1]:.0f} GB/s; " if copy else "") + ", ".join(parts)


def table(records: list[dict]) -> str:
    med = rec.medians(records)
    cases = sorted({(s, d) for s, d, _ in med}, key=lambda c: (c[1], str(c[0])))
    names = dict.fromkeys(["copy", *TILEFLIP_BACKENDS, *PERMUTE_STRATEGIES, *PEERS])
    backends = [b for b in names if any(k[2] == b for k in med)]
    head = f"{'shape':>12} {'dtype':<14}" + "".join(f"{b:>18}" for b in backends)
    lines = [head, "-" * len(head)]
    for s, d in cases:
        cells = []
        for b in backends:
            v = med.get((s, d, b))
            cells.append(f"{v[1]:>8.0f} {v[2]:>6.1%}   " if v else f"{'-':>18}")
        label = (
            "x".join(map(str, s))
            if isinstance(s[0], int)
            else "x".join(map(str, s[0])) + " " + ",".join(map(str, s[1]))
        )
        lines.append(f"{label:>12} {d:<14}" + "".join(f"{c:>18}" for c in cells))
    lines.append("each cell: GB/s (read + write bytes) and fraction of the same-run copy; medians over rounds")
    return "\n".join(lines)


def run(suite: str, *, part: str | None, quick: bool, rounds: int, backends: list[str], out_dir, command: str,
        log=print) -> list[str]:  # fmt: skip
    """Measure a suite, print its table, write (or merge) its results file and draw its plots; returns
    the paths written."""
    from tileflip.bench import plots

    cases = suite_cases(suite, part)
    if suite in PERMUTE_SUITES:
        backends = [b for b in backends or ("auto", *PEERS) if b in (*PERMUTE_STRATEGIES, *PEERS)]
    else:
        backends = [b for b in backends or (*TILEFLIP_BACKENDS, *PEERS) if b not in PERMUTE_STRATEGIES[1:]]
    records = measure(cases, backends, rounds, quick, log)
    print(table(records))
    path = rec.write_results(records, results_name(suite, backends), out_dir, command, part=part)
    if suite == "permute-wide":  # over every part merged so far
        print(wide_summary(rec.load_records(path, "results file")))
    return [str(path), *plots.draw_if_possible(path, log=log)]


def results_name(suite: str, backends) -> str:
    """The results file's name: ``<suite>-strategies`` for a strategy sweep (a permute suite timed on
    a forced strategy and no peer: the suite's own file holds the peers), else the suite's."""
    strategies = [b for b in backends if b in PERMUTE_STRATEGIES and b != "auto"]
    if suite in PERMUTE_SUITES and strategies and not any(b in PEERS for b in backends):
        return f"{suite}-strategies"
    return suite


LEVEL = 0.02  # within 2 points of torch.compile counts as level with it
PICK_WITHIN = 0.95  # the planner's pick is close to the best strategy when within 5% of its speed


def wide_summary(records: list[dict]) -> str:
    """Per element size: auto's median and least fraction of copy (medians over rounds), and on how many
    cases it is at least torch.compile's figure (within LEVEL) and at least the best peer's."""
    from tileflip.plan.dtypes import element_size

    med = rec.medians(records)
    groups: dict = {}
    for (key, dtype, backend), (_, _, frac) in med.items():
        groups.setdefault((key, dtype), {})[backend] = frac
    lines = []
    for size in sorted({element_size(d) for _, d in groups}):
        mine = {k: v for k, v in groups.items() if element_size(k[1]) == size and "auto" in v}
        if not mine:
            continue
        fracs = sorted(v["auto"] for v in mine.values())
        low_key, low = min(mine.items(), key=lambda kv: kv[1]["auto"])
        compiled = [v for v in mine.values() if "torch-compile" in v]
        level = sum(v["auto"] >= v["torch-compile"] - LEVEL for v in compiled)
        peers = [v for v in mine.values() if any(b in v for b in PEERS)]
        ahead = sum(v["auto"] >= max(v[b] for b in PEERS if b in v) for v in peers)
        label = "x".join(map(str, low_key[0][0])) + f" {low_key[1]} {tuple(low_key[0][1])}"
        lines.append(f"{size}-byte: {len(mine)} cases, median {statistics.median(fracs):.1%} of copy, least "
                     f"{low['auto']:.1%} ({label}); at least torch.compile (within {LEVEL * 100:.0f} points) on "
                     f"{level} of {len(compiled)}; at least the best peer on {ahead} of {len(peers)}")  # fmt: skip
        swept = [v for v in mine.values() if "triton" in v]
        if swept:
            close = sum(v["auto"] >= PICK_WITHIN * max(v.get(b, 0.0) for b in PERMUTE_STRATEGIES) for v in swept)
            timed = [b for b in PERMUTE_STRATEGIES if any(b in v for v in swept)]
            lines.append(f"  strategies: auto within {1 - PICK_WITHIN:.0%} of the fastest of "
                         f"{', '.join(timed)} on {close} of {len(swept)}")  # fmt: skip
    return "\n".join(lines)
