"""`tileflip check`: wrong kernels rejected with the right hint, right ones passed, the checker itself sound.

The known-wrong kernels live in ``tests/wrong/`` (Triton tiles in ``triton_wrong.py``, one thread per
element in ``per_element.py``, plain torch stand-ins for a transpose in ``torch_wrong.py``, plain torch
targets for the checker's own paths in ``misc.py``); fresh
wrong kernels, with other tile sizes, names and grids, are written from templates into a temporary
folder at test time. tileflip's own backends are checked through ``tileflip.check.targets``.

Checks run in child processes, so each fixture runs its checks on a thread pool, two at a time or
one per core. On a GPU machine the same checks run natively on the GPU (device auto), and the
``gpu``-marked tests add the CUDA backends.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

from tileflip.check import cases, diagnose, runner
from tileflip.check.report import Report, RunInfo
from tileflip.check.targets import BY_BACKEND
from tileflip.cli.check import main as check_main
from tileflip.plan import owner_of
from tileflip.plan.dtypes import ELEMENT_SIZE

ROOT = Path(__file__).resolve().parent.parent
WRONG = ROOT / "tests" / "wrong"
HAS_GPU = torch.cuda.is_available()
WORKERS = max(2, os.cpu_count() or 2)

SHIPPED_WRONG = {
    "triton_wrong.py:leading_dim": "leading-dimension",
    "triton_wrong.py:swapped_bounds": "swapped-bounds",
    "triton_wrong.py:reused_mask": "reused-input-mask",
    "triton_wrong.py:no_store_mask": "missing-mask",
    "triton_wrong.py:untransposed_tile": "untransposed-tile",
    "triton_wrong.py:square_only": "square-only-tiling",
    "per_element.py:naive_leading_dim": "leading-dimension",
    "per_element.py:naive_swapped_bounds": "swapped-bounds",
    "per_element.py:smem_reused_mask": "reused-input-mask",
    "per_element.py:naive_no_store_mask": "missing-mask",
    "per_element.py:naive_square_only": "square-only-tiling",
}
# Mistakes that keep x's elements but put them in the wrong order or the wrong block: each must be named, and
# nothing else, in every failing case (the pitfalls that lose elements must not claim them). A reshape and
# an identity copy write the same output, so they share their name.
SHIPPED_MISPLACED = {
    "torch_wrong.py:reshape": "reshape",
    "torch_wrong.py:identity_copy": "reshape",
    "per_element.py:naive_copy": "reshape",
    "per_element.py:flat_copy": "buffer-copy",
    "torch_wrong.py:corner_block": "sub-block",
    "triton_wrong.py:single_tile": "sub-block",
    "torch_wrong.py:tiles_in_place": "tiles-in-place",
    "triton_wrong.py:tiles_in_place": "tiles-in-place",
}
SHIPPED_RIGHT = [
    "triton_wrong.py:right",
    "per_element.py:naive_right",
    "per_element.py:naive_right_alloc",
    "per_element.py:smem_right",
]


def shipped(name: str) -> str:
    file, function = name.split(":")
    return f"{WRONG / file}:{function}"


def run_checks(targets: list[str], **options) -> dict[str, Report]:
    """``runner.check_many`` over WORKERS batches at once: each batch shares its children (one torch import
    per child, not per target) and the batches share the cores."""
    batches = [targets[k::WORKERS] for k in range(WORKERS) if targets[k::WORKERS]]
    with ThreadPoolExecutor(WORKERS) as pool:
        parts = list(pool.map(lambda batch: runner.check_many(batch, **options), batches))
    return {target: report for part in parts for target, report in part.items()}


def top_hint(report: Report) -> str:
    hints = report.hints()
    return hints[0]["key"] if hints else "none"


def failing_summary(report: Report) -> str:
    return "\n".join(f"{o.case.label}: {[h.key for h in o.hypotheses]}" for o in report.outcomes if not o.passed)


# ---------------------------------------------------------------------------------------------------
# The shipped implementations
# ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def default_reports(tmp_path_factory):
    """The default suite against the shipped kernels and the fresh ones (below) in one ``run_checks``: one
    set of children for both. Keyed by shipped name and by fresh (family, expected)."""
    names = [*SHIPPED_WRONG, *SHIPPED_MISPLACED, *SHIPPED_RIGHT]
    folder = tmp_path_factory.mktemp("fresh_kernels")
    fresh = {case: write_fresh(folder, *case) for case in FRESH_CASES}
    fresh["docs-example"] = docs_example(folder)
    reports = run_checks([*(shipped(name) for name in names), *fresh.values()])
    return {name: reports[shipped(name)] for name in names} | {case: reports[t] for case, t in fresh.items()}


@pytest.fixture(scope="module")
def shipped_reports(default_reports):
    return {name: default_reports[name] for name in [*SHIPPED_WRONG, *SHIPPED_MISPLACED, *SHIPPED_RIGHT]}


def docs_example(folder: Path) -> str:
    """The complete target of docs/api.md's checker section, written to a file: the target string."""
    text = (ROOT / "docs" / "api.md").read_text()
    section = text[text.index("## Checking your own transpose") :]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    (folder / "my_transpose.py").write_text(code)
    return f"{folder / 'my_transpose.py'}:my_transpose"


def test_the_documented_example_passes_as_documented(default_reports):
    report = default_reports["docs-example"]
    assert report.passed, report.text()
    total = len(report.outcomes)
    assert f"verdict: PASS (0 of {total} cases failed)" in report.text()
    assert f"`verdict: PASS (0 of {total} cases failed)`" in (ROOT / "docs" / "api.md").read_text()


@pytest.mark.parametrize("name", SHIPPED_WRONG)
def test_shipped_wrong_rejected_with_its_hint(shipped_reports, name):
    report = shipped_reports[name]
    assert not report.passed
    assert top_hint(report) == SHIPPED_WRONG[name], report.text()
    # The right hint explains most failures, not a stray few.
    failing = sum(not o.passed for o in report.outcomes)
    assert report.hints()[0]["cases"] >= 0.75 * failing, failing_summary(report)


@pytest.mark.parametrize("name", SHIPPED_MISPLACED)
def test_misplaced_elements_are_named_exactly(shipped_reports, name):
    report = shipped_reports[name]
    expected = SHIPPED_MISPLACED[name]
    assert report.verdict == "FAIL"
    assert [(h["key"], h["cases"]) for h in report.hints()] == [(expected, len(report.failing))], report.text()
    chosen = report.case_hints()
    assert {chosen[o.case.id].key for o in report.failing} == {expected}, failing_summary(report)
    if expected in ("reshape", "buffer-copy"):
        # Nothing is lost, so no pitfall that loses elements may fit any case, even as a second guess.
        losing = {"nothing-written", "swapped-bounds", "square-only-tiling", "reused-input-mask", "sub-block"}
        for o in report.failing:
            assert o.counts["never_written"] == 0 and not losing & {h.key for h in o.hypotheses}, o.case.label


def test_misplaced_elements_carry_what_they_show(shipped_reports):
    """The parameter each hint names is the kernel's own: its tile, the block it covers."""

    def chosen(name, label):
        report = shipped_reports[name]
        outcome = next(o for o in report.outcomes if o.case.label == label)
        return report.case_hints()[outcome.case.id]

    assert chosen("torch_wrong.py:tiles_in_place", "64x64 float32 contiguous").param == 16
    assert chosen("triton_wrong.py:tiles_in_place", "128x96 float32 contiguous").param == 64
    report = shipped_reports["torch_wrong.py:corner_block"]
    outcome = next(o for o in report.outcomes if o.case.label == "128x96 float32 contiguous")
    corner = report.case_hints()[outcome.case.id]
    assert "only the block x[0:32, 0:32] (out[0:32, 0:32]) was transposed" in corner.text
    assert f"the other {outcome.counts['never_written']} elements were never written" in corner.text
    assert corner.detail == "only x[0:32, 0:32] written"
    single = chosen("triton_wrong.py:single_tile", "31x65 float32 contiguous")
    assert single.detail == "only x[0:31, 0:64] written"
    # On a contiguous x a buffer copy and a reshape write the same; x's views tell them apart.
    flat = shipped_reports["per_element.py:flat_copy"]
    padded = next(o for o in flat.outcomes if o.case.layout == "padded-rows")
    assert [h.key for h in padded.hypotheses] == ["buffer-copy"]
    assert next(o for o in flat.outcomes if o.case.layout == "transposed").passed


def test_hints_agree_with_the_counts(shipped_reports):
    """No hint says elements were never written in a case whose counts show none never written."""
    for name, report in shipped_reports.items():
        chosen = report.case_hints()
        for o in report.failing:
            if o.kind == "mismatch" and o.counts["never_written"] == 0:
                texts = [chosen[o.case.id].text, chosen[o.case.id].detail] + [h.text for h in o.hypotheses]
                assert not any("never written" in t for t in texts), (name, o.case.label, texts)


def case_blocks(text: str) -> dict[str, list[str]]:
    """The lines under each failing case listed in a report's text, keyed by the case's header line."""
    blocks, current = {}, None
    for line in text.split("\nfailures (", 1)[1].splitlines()[1:]:
        if line.startswith("    ") and current is not None:
            blocks[current].append(line)
        elif line.startswith("  ") and not line.startswith("  ... "):
            current = line
            blocks[current] = []
        else:
            current = None
    return blocks


LEFT_OUT = re.compile(
    r"    \.\.\. (?:(\d+) more wrong elements?)?(?: and )?(?:(\d+) more writes? outside out)? not shown$"
)


@pytest.mark.parametrize("show", [0, 1, 2, 25])
@pytest.mark.parametrize("name", ["per_element.py:naive_no_store_mask", "torch_wrong.py:reshape"])
def test_show_bounds_the_cases_and_the_element_lines(shipped_reports, name, show):
    """--show N: at most N failing cases per category and N element lines per case, the rest counted."""
    report = shipped_reports[name]
    text = report.text(show=show)
    blocks = case_blocks(text)
    failing = Counter(o.case.category for o in report.failing)
    for category, n in failing.items():
        assert sum(header.startswith(f"  {category} ") for header in blocks) == min(n, show)
        note = f"  ... {n - show} more failing {category} case{'s' * (n - show != 1)} not shown"
        assert (note in text) == (n > show), text
    for o in report.failing:
        header = next((h for h in blocks if h.startswith(f"  {o.case.category} {o.case.label} (")), None)
        if header is None:
            continue
        lines = blocks[header]
        elements = [line for line in lines if line.startswith(("    out[", "    write outside out"))]
        assert len(elements) <= show
        wrong = sum(line.startswith("    out[") for line in elements)
        outside = len(elements) - wrong
        notes = [LEFT_OUT.match(line) for line in lines if line.startswith("    ... ")]
        more_wrong, more_outside = (int(notes[0][1] or 0), int(notes[0][2] or 0)) if notes else (0, 0)
        # What is shown and what is said to be left out add up to the case's counts.
        assert wrong + more_wrong == o.counts["wrong"], lines
        assert outside + more_outside == o.counts["writes_before_out"] + o.counts["writes_after_out"], lines
    assert ("more failing" in text) == any(n > show for n in failing.values())


def test_each_hint_is_printed_once(shipped_reports):
    """The summary prints each hint once; the cases refer to it by number, in the text and in the JSON."""
    for name, report in shipped_reports.items():
        text = report.text(show=100)
        hints, chosen = report.hints(), report.case_hints()
        assert [hint["ref"] for hint in hints] == list(range(1, len(hints) + 1))
        for hint in hints:
            assert text.count(hint["text"]) == 1, (name, hint["key"])
        for o in report.failing:
            assert text.count(chosen[o.case.id].text) <= 1, (name, o.case.label)
        blocks = case_blocks(text) if report.failing else {}
        assert len(blocks) == len(report.failing), name
        data = report.to_json()
        for case, o in zip(data["cases"], report.outcomes):
            if case["status"] == "fail":
                hint = data["hints"][case["hint"]["ref"] - 1]
                assert hint["key"] == case["hint"]["key"] and case["id"] in hint["case_ids"], name
                block = next(b for h, b in blocks.items() if h.startswith(f"  {o.case.category} {o.case.label} ("))
                assert block[-1].startswith(f"    hint {hint['ref']} [{hint['key']}]"), (name, block)
    reshape = shipped_reports["torch_wrong.py:reshape"].text()
    assert reshape.count("reshape, not a transpose") == 1


@pytest.mark.parametrize("name", SHIPPED_RIGHT)
def test_shipped_right_pass(shipped_reports, name):
    report = shipped_reports[name]
    assert report.passed, report.text()
    assert {row["status"] for row in report.categories().values()} == {"pass"}


def test_the_return_form_is_prepoisoned(shipped_reports):
    report = shipped_reports["per_element.py:naive_right_alloc"]
    assert report.info.form == "return" and report.info.prepoisoned


# Pitfalls of tails and of non-square shapes: a square shape of whole tiles hides them.
SQUARE_HIDDEN = [name for name, key in SHIPPED_WRONG.items() if key != "untransposed-tile"]


@pytest.fixture(scope="module")
def square_only_reports():
    reports = run_checks([shipped(name) for name in SHIPPED_WRONG], square_only=True)
    return {name: reports[shipped(name)] for name in SHIPPED_WRONG}


@pytest.mark.slow  # at 1024x1024 the one-thread-per-element kernels launch 4096 blocks of 16x16 each
@pytest.mark.parametrize("name", SQUARE_HIDDEN)
def test_square_only_passes_every_wrong_one(square_only_reports, name):
    """The square trap: at 1024x1024 alone every one of these pitfalls goes unseen."""
    report = square_only_reports[name]
    assert [(c.M, c.N) for c in report.cases] == [(1024, 1024)]
    assert report.passed, report.text()


@pytest.mark.slow
def test_square_only_still_sees_an_untransposed_tile(square_only_reports):
    report = square_only_reports["triton_wrong.py:untransposed_tile"]
    assert not report.passed and top_hint(report) == "untransposed-tile", report.text()


def test_score_weighs_whole_tile_and_edge_shapes(shipped_reports):
    def scores(name):
        s = shipped_reports[name].score()
        return s["normal_inputs"], s["boundary_inputs"], s["total"], s["out_of"]

    assert scores("per_element.py:naive_right") == (2, 1, 3, 3)
    # Tails only: whole-tile shapes are right, so the normal inputs keep their 2 points.
    assert scores("per_element.py:naive_no_store_mask") == (2, 0, 2, 3)
    assert scores("per_element.py:smem_reused_mask") == (2, 0, 2, 3)
    assert scores("per_element.py:naive_leading_dim") == (0, 0, 0, 3)


def test_hints_hold_when_codes_repeat():
    """1-byte codes repeat every 253 elements, so values cannot be traced back: the hints still hold."""
    names = ["triton_wrong.py:leading_dim", "triton_wrong.py:swapped_bounds", "triton_wrong.py:untransposed_tile"]
    misplaced = ["torch_wrong.py:reshape", "torch_wrong.py:corner_block", "torch_wrong.py:tiles_in_place"]
    targets = [shipped(n) for n in names + misplaced]
    reports = runner.check_many(targets, dtypes=["int8"], only=["boundary", "non-square"])
    expected = SHIPPED_WRONG | SHIPPED_MISPLACED
    for name in names + misplaced:
        assert top_hint(reports[shipped(name)]) == expected[name], reports[shipped(name)].text()
    for name in misplaced:
        assert len(reports[shipped(name)].hints()) == 1, reports[shipped(name)].text()


def test_block_maps_mismatches_to_the_planner_tiles():
    reused, unmasked = shipped("per_element.py:smem_reused_mask"), shipped("per_element.py:naive_no_store_mask")
    reports = runner.check_many([reused, unmasked], block=(16, 16), only=["boundary"])
    assert top_hint(reports[reused]) == "reused-input-mask"
    outcome = next(o for o in reports[reused].outcomes if o.case.label.startswith("31x65"))
    missing = [row for row in outcome.mismatches if row.get("got", "").startswith("never written")]
    assert missing
    for row in missing:
        j, i = row["out"]
        note = row["expected_owner"]
        assert note["tile"] == list(owner_of(31, 65, 16, 16, i, j))
        # The pitfall in the planner's words: the input mask is False at the output slot it skipped.
        assert note["in_mask_at_out_slot"] is False
    # Writes past the end carry no element (masked-off loads): their address names the tile slot instead.
    outcome = next(o for o in reports[unmasked].outcomes if o.case.label.startswith("2x3 "))
    past = [row for row in outcome.mismatches if "outside" in row]
    assert past and all(row["address_of"]["tile"] == [0, 0] for row in past)
    assert all(row["address_of"]["out_slot"][0] >= 3 for row in past)  # output rows past N = 3


# ---------------------------------------------------------------------------------------------------
# Fresh wrong kernels, written at test time
# ---------------------------------------------------------------------------------------------------

# A 1-D grid of TR x TC tiles decoded as (pid // tiles_c, pid % tiles_c), unlike the shipped 2-D grid.
TILE_TEMPLATE = """
import triton
import triton.language as tl


@triton.jit
def {name}_kernel(src, dst, rows, cols, s_r, s_c, tiles_c, TR: tl.constexpr, TC: tl.constexpr):
    pid = tl.program_id(0)
    r = (pid // tiles_c) * TR + tl.arange(0, TR)
    c = (pid % tiles_c) * TC + tl.arange(0, TC)
    load_mask = {load_mask}
    block = tl.load(src + r[:, None] * s_r + c[None, :] * s_c, mask=load_mask)
    store_mask = {store_mask}
    tl.store(dst + c[:, None] * {out_row_stride} + r[None, :], tl.trans(block){store_mask_arg})


def {name}(x, y):
    rows, cols = x.shape
    tiles_c = triton.cdiv({tiles_c_from}, {TC})
    grid = (triton.cdiv(rows, {TR}) * tiles_c,)
    {name}_kernel[grid](x, y, rows, cols, x.stride(0), x.stride(1), tiles_c, TR={TR}, TC={TC})
"""
TILE_RIGHT = {
    "load_mask": "(r[:, None] < rows) & (c[None, :] < cols)",
    "store_mask": "(c[:, None] < cols) & (r[None, :] < rows)",
    "out_row_stride": "rows",
    "store_mask_arg": ", mask=store_mask",
    "tiles_c_from": "cols",
}
TILE_BUGS = {
    "leading-dimension": {"out_row_stride": "cols"},
    "swapped-bounds": {
        "load_mask": "(r[:, None] < cols) & (c[None, :] < rows)",
        "store_mask": "(c[:, None] < rows) & (r[None, :] < cols)",
    },
    "missing-mask": {"store_mask_arg": ""},
    "square-only-tiling": {"tiles_c_from": "rows"},
}
# Reusing the load's mask compiles only when the tile is square.
SQUARE_TILE_BUGS = {"reused-input-mask": {"store_mask_arg": ", mask=load_mask"}}

# One thread per element, blocks of BY x BX threads, the grid's first axis along the rows.
THREAD_TEMPLATE = """
import triton
import triton.language as tl


@triton.jit
def {name}_kernel(inp, outp, m, n, ld_r, ld_c, BY: tl.constexpr, BX: tl.constexpr):
    i = tl.program_id(0) * BY + tl.arange(0, BY)[:, None]
    j = tl.program_id(1) * BX + tl.arange(0, BX)[None, :]
    guard = {guard}
    v = tl.load(inp + i * ld_r + j * ld_c, mask=guard)
    tl.store(outp + {out_index}, v{store_mask_arg})


def {name}(x, out):
    m, n = x.shape
    grid = (triton.cdiv(m, {BY}), triton.cdiv({grid_n_from}, {BX}))
    {name}_kernel[grid](x, out, m, n, x.stride(0), x.stride(1), BY={BY}, BX={BX})
"""
THREAD_RIGHT = {
    "guard": "(i < m) & (j < n)",
    "out_index": "j * m + i",
    "store_mask_arg": ", mask=guard",
    "grid_n_from": "n",
}
THREAD_BUGS = {
    "leading-dimension": {"out_index": "j * n + i"},
    "swapped-bounds": {"guard": "(i < n) & (j < m)"},
    "missing-mask": {"store_mask_arg": ""},
    "square-only-tiling": {"grid_n_from": "m"},
}

# A shared-memory block of B x B threads: read, then write with the thread roles exchanged.
SMEM_TEMPLATE = """
import triton
import triton.language as tl


@triton.jit
def {name}_kernel(inp, outp, m, n, ld_r, ld_c, B: tl.constexpr):
    ty = tl.arange(0, B)[:, None]
    tx = tl.arange(0, B)[None, :]
    i = tl.program_id(0) * B + ty
    j = tl.program_id(1) * B + tx
    read_ok = (i < m) & (j < n)
    staged = tl.load(inp + i * ld_r + j * ld_c, mask=read_ok)
    oi = tl.program_id(1) * B + ty
    oj = tl.program_id(0) * B + tx
    write_ok = {write_guard}
    tl.store(outp + oi * m + oj, tl.trans(staged), mask=write_ok)


def {name}(x, out):
    m, n = x.shape
    {name}_kernel[(triton.cdiv(m, {B}), triton.cdiv(n, {B}))](x, out, m, n, x.stride(0), x.stride(1), B={B})
"""
SMEM_BUGS = {"reused-input-mask": {"write_guard": "read_ok"}}

# family: (template, sizes, right substitutions, {expected verdict: substitutions})
FRESH = {
    "tile": (TILE_TEMPLATE, {"TR": 32, "TC": 16}, TILE_RIGHT, {"pass": {}, **TILE_BUGS}),
    "square-tile": (TILE_TEMPLATE, {"TR": 32, "TC": 32}, TILE_RIGHT, {"pass": {}, **SQUARE_TILE_BUGS}),
    "thread": (THREAD_TEMPLATE, {"BY": 8, "BX": 32}, THREAD_RIGHT, {"pass": {}, **THREAD_BUGS}),
    "smem": (SMEM_TEMPLATE, {"B": 32}, {"write_guard": "(oi < n) & (oj < m)"}, {"pass": {}, **SMEM_BUGS}),
}
FRESH_CASES = [(family, expected) for family, (_, _, _, variants) in FRESH.items() for expected in variants]


def write_fresh(folder: Path, family: str, expected: str) -> str:
    """Write one fresh kernel file and return its target."""
    template, sizes, right, variants = FRESH[family]
    name = f"fresh_{family}_{expected}".replace("-", "_")
    path = folder / f"{name}.py"
    path.write_text(template.format(name=name, **sizes, **{**right, **variants[expected]}))
    return f"{path}:{name}"


@pytest.fixture(scope="module")
def fresh_reports(default_reports):
    return {case: default_reports[case] for case in FRESH_CASES}


@pytest.mark.parametrize("family,expected", FRESH_CASES)
def test_fresh_kernels_get_the_same_verdicts(fresh_reports, family, expected):
    report = fresh_reports[(family, expected)]
    if expected == "pass":
        assert report.passed, report.text()
    else:
        assert not report.passed
        assert top_hint(report) == expected, report.text()


# ---------------------------------------------------------------------------------------------------
# tileflip's own kernels
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target,dtypes",
    [
        ("tileflip.check.targets:triton_backend", ["float32", "bfloat16", "int8"]),
        ("tileflip.check.targets:torch_backend", ["float32"]),
        ("tileflip:transpose", ["float32"]),
        ("tileflip.check.targets:returning", ["float64"]),
    ],
)
def test_project_backends_pass(target, dtypes):
    report = runner.check(target, dtypes=dtypes)
    assert report.passed, report.text()
    if not HAS_GPU and "triton" in target:
        assert report.info.interpreter


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cuda-naive", "cuda-tiled", "cuda-tiled-nopad", "triton"])
def test_cuda_backends_pass_on_the_gpu(backend):
    report = runner.check(f"tileflip.check.targets:{BY_BACKEND[backend]}", dtypes=["float32", "bfloat16", "int8"])
    assert report.info.device == "cuda" and not report.info.interpreter
    assert report.passed, report.text()


@pytest.mark.gpu
@pytest.mark.slow
def test_triton_backend_past_two_to_the_31_on_the_gpu():
    report = runner.check("tileflip.check.targets:triton_backend", only=["normal"], large=cases.LARGE_SHAPE)
    large = next(o for o in report.outcomes if o.case.category == "large")
    assert large.kind == "ok", report.text()


# ---------------------------------------------------------------------------------------------------
# The checker's own paths
# ---------------------------------------------------------------------------------------------------


def misc(function: str) -> str:
    return f"{WRONG / 'misc.py'}:{function}"


def test_a_dying_child_fails_its_category_not_the_checker():
    report = runner.check(misc("abort_on_tails"), only=["normal", "boundary"])
    table = report.categories()
    assert table["normal"]["status"] == "pass"
    assert table["boundary"]["status"] == "fail"
    died = [o for o in report.outcomes if o.kind == "died"]
    assert died and all("SIGABRT" in o.message for o in died)
    assert top_hint(report) == "crash"
    assert "SIGABRT" in report.text()


def test_exceptions_are_reported_with_their_message():
    report = runner.check(misc("raises"), only=["normal"])
    assert not report.passed
    assert all(o.kind == "exception" for o in report.outcomes)
    assert "RuntimeError: deliberate failure for a 128x96 input" in report.text(show=4)
    assert top_hint(report) == "exception"
    messages = [case["message"] for case in report.to_json()["cases"]]
    assert any("deliberate failure for a 64x64 input" in m for m in messages)


# Reads x with row stride M, the output's row length, instead of x.stride(0): a read fault, not a store fault.
INPUT_ROW_STRIDE_M = """
import torch


def input_row_stride_m(x, out):
    M, N = x.shape
    out.copy_(torch.as_strided(x, (M, N), (M, 1)).t())
"""


def test_case_hints_name_the_input_when_the_summary_does(tmp_path):
    """On 300x2 the one value of x that lands inside x fits a wrong output row stride (151): the case's hint
    must still say what the summary says, that x was read with the wrong strides."""
    path = tmp_path / "input_row_stride.py"
    path.write_text(INPUT_ROW_STRIDE_M)
    report = runner.check(f"{path}:input_row_stride_m", only=["normal", "non-square"])
    assert not report.passed
    assert [h["key"] for h in report.hints()] == ["input-strides"], report.text()
    thin = next(o for o in report.outcomes if (o.case.M, o.case.N) == (300, 2))
    assert not thin.passed and thin.hypotheses[0].key == "input-strides", failing_summary(report)
    assert report.case_hints()[thin.case.id].key == "input-strides"
    text = report.text(show=10)
    # The hint once, in the summary; each case refers to it with what it shows.
    case_lines = [line for line in text.splitlines() if line.startswith("    hint ")]
    assert len(case_lines) == len(report.failing)
    assert all(line.startswith("    hint 1 [input-strides]: x read with strides (") for line in case_lines), text
    assert "output's row stride" not in text
    assert "    hint 1 [input-strides]: x read with strides (300, 1), not (2, 1)" in text
    for case in report.to_json()["cases"]:
        if case["status"] == "fail":
            assert case["hint"]["key"] == case["hints"][0]["key"] == "input-strides", case


def test_case_hints_agree_with_the_summary(shipped_reports):
    """Every failing case's own hint is one the summary names, in the text and in the JSON."""
    for name, report in shipped_reports.items():
        summary = {h["key"] for h in report.hints()}
        chosen = report.case_hints()
        for o in report.failing:
            assert chosen[o.case.id].key in summary, (name, o.case.label)
        for case in report.to_json()["cases"]:
            if case["status"] == "fail":
                assert case["hint"]["key"] in summary and case["hints"][0]["key"] == case["hint"]["key"], name


def test_unread_strides_are_named():
    report = runner.check(misc("stride_blind"))
    assert report.categories()["non-contiguous"]["status"] == "fail"
    assert report.categories()["normal"]["status"] == "pass"
    assert top_hint(report) == "input-strides"


def test_an_output_never_written_is_caught_in_the_return_form():
    report = runner.check(misc("never_writes"), only=["normal"])
    assert report.info.form == "return"
    assert top_hint(report) == "nothing-written"
    assert all(o.counts["never_written"] == o.counts["elements"] for o in report.outcomes)


def test_wrapped_offsets_are_named_from_the_summary():
    # The large-case path on a CPU-sized shape: misc.wraps_past_limit stops writing at flat 2**16.
    report = runner.check(misc("wraps_past_limit"), only=["normal"], large=(300, 300), overflow_limit=2**16)
    assert top_hint(report) == "int32-overflow"
    assert [o.case.category for o in report.outcomes if not o.passed] == ["large"]


@pytest.mark.skipif(HAS_GPU, reason="on a GPU the default large case runs")
def test_the_default_large_case_needs_a_gpu(capsys):
    """Without a GPU the large case cannot run: the check is INCOMPLETE, not a pass, and exits 1."""
    report = runner.check(misc("right"), only=["normal"], large=cases.LARGE_SHAPE)
    assert report.verdict == "INCOMPLETE" and not report.passed
    assert report.categories()["large"]["status"] == "skipped"
    assert report.categories()["normal"]["status"] == "pass"
    assert "verdict: INCOMPLETE (1 of 5 cases skipped; the 4 that ran passed, but" in report.text()
    assert "  skipped: large 65537x32769 float32 contiguous: needs a GPU" in report.text()
    assert "verdict: PASS" not in report.text()
    assert cli([misc("right"), "--only", "normal", "--large", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "INCOMPLETE" and not data["passed"] and data["skipped_cases"] == 1


def synthetic_report(kinds: list[str]) -> Report:
    """A report over cases of the given outcomes, judged without running anything."""
    outcomes = []
    for k, kind in enumerate(kinds):
        case = cases.Case(k, "large" if kind == "skipped" else "normal", 64, 64 + k, "float32")
        hypotheses = [diagnose.Hypothesis("exception", "boom", 1.0, "boom")] if kind == "exception" else []
        outcomes.append(diagnose.Outcome(case, kind, "needs a GPU" if kind == "skipped" else "", hypotheses=hypotheses))
    return Report("t.py:f", RunInfo("out", "cpu"), [o.case for o in outcomes], outcomes, ["float32"], None, 0.0)


@pytest.mark.parametrize(
    "kinds,verdict,line",
    [
        (["ok", "ok"], "PASS", "verdict: PASS (0 of 2 cases failed)"),
        (["ok", "skipped"], "INCOMPLETE", "verdict: INCOMPLETE (1 of 2 cases skipped; the 1 that ran passed, but a "),
        (["skipped"], "INCOMPLETE", "verdict: INCOMPLETE (1 of 1 case skipped; none ran)"),
        (["ok", "exception"], "FAIL", "verdict: FAIL (1 of 2 cases failed)"),
        (["exception", "skipped"], "FAIL", "verdict: FAIL (1 of 2 cases failed, 1 skipped)"),
    ],
)
def test_the_verdict_is_a_pass_only_when_every_case_ran(kinds, verdict, line):
    report = synthetic_report(kinds)
    assert report.verdict == verdict and report.passed == (verdict == "PASS")
    text = report.text()
    assert line in text, text
    assert text.count("verdict: ") == 1
    # Each case that did not run is named under the verdict, with why.
    assert text.count("  skipped: large 64x") == kinds.count("skipped")
    assert report.to_json()["verdict"] == verdict


def test_overflow_hint_from_a_summary():
    case = cases.Case(0, "large", 65537, 32769, "float32")
    past = {"wrong": 10, "first_wrong_out_flat": 2**31 + 3, "first_wrong_x_flat": 2**31 + 7}
    assert diagnose.overflow_hypothesis(case, past).key == "int32-overflow"
    early = {"wrong": 10, "first_wrong_out_flat": 100, "first_wrong_x_flat": 5}
    assert diagnose.overflow_hypothesis(case, early).key == "unknown"


@pytest.mark.parametrize("dtype", sorted(cases.ENCODINGS))
def test_codes_decode_to_their_element(dtype):
    enc = cases.ENCODINGS[dtype]
    numel = min(5000, enc.period or 5000)
    index = np.arange(numel)
    src, slot = enc.decode(enc.codes(index), numel)
    assert (src == index).all() and (slot == -1).all()
    _, slot = enc.decode(enc.guards(np.arange(7)), numel)
    assert (slot != -1).all()
    src, slot = enc.decode(np.array([enc.poison], dtype=enc.carrier), numel)
    assert src[0] == -1 and slot[0] == -1


@pytest.mark.parametrize("dtype", sorted(cases.ENCODINGS))
def test_return_fill_is_what_torch_fills(dtype):
    """The f(x) -> y form recognizes an unwritten element by the value torch's deterministic mode fills in."""
    enc = cases.ENCODINGS[dtype]
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        filled = torch.empty(4, dtype=getattr(torch, dtype))
    finally:
        torch.use_deterministic_algorithms(was)
    signed = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[enc.size]
    bits = filled.view(signed).numpy().view(enc.carrier)
    assert (bits == enc.return_fill).all(), [hex(b) for b in bits]


@pytest.mark.parametrize("dtype", sorted(ELEMENT_SIZE))
def test_every_dtype_of_the_table_is_checked_or_refused_by_name(dtype):
    if dtype in cases.ENCODINGS:
        assert cases.encoding(dtype).size == ELEMENT_SIZE[dtype]
    else:
        with pytest.raises(ValueError, match=f"dtype {dtype} cannot be checked"):
            cases.encoding(dtype)


def test_dtypes_take_every_spelling_of_the_table():
    assert runner.validate(dtypes=["fp32", "torch.bfloat16", "i8", "float32", "u16"]) == [
        "float32",
        "bfloat16",
        "int8",
        "uint16",
    ]
    with pytest.raises(ValueError, match="dtype bool cannot be checked"):
        runner.validate(dtypes=["bool"])


# ---------------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------------


def cli(argv: list[str]) -> int:
    """``tileflip check`` in this process; a refused argument's SystemExit becomes its status."""
    try:
        return check_main(argv)
    except SystemExit as stop:
        return stop.code


def test_cli_json_and_exit_status(capsys):
    assert cli([misc("right"), "--only", "normal", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["passed"] and data["categories"]["normal"]["status"] == "pass"
    assert "score" not in data
    assert cli([misc("stride_blind"), "--only", "non-contiguous", "--json", "--score"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert not data["passed"] and data["hints"][0]["key"] == "input-strides"
    assert data["score"] == {
        "normal_inputs": 0,
        "boundary_inputs": 0,
        "total": 0,
        "out_of": 3,
        "boundary_categories": ["non-contiguous"],
    }


def test_cli_score_text(capsys):
    assert cli([misc("right"), "--score", "--only", "normal,boundary"]) == 0
    out = capsys.readouterr().out
    assert "normal inputs    2/2" in out and "boundary inputs  1/1" in out
    assert "total            3/3" in out


def test_cli_refuses_what_it_cannot_check(capsys):
    assert cli([misc("no_such_function"), "--only", "normal"]) == 2
    assert "no attribute 'no_such_function'" in capsys.readouterr().err
    assert cli([misc("WRAP_LIMIT"), "--only", "normal"]) == 2
    assert "misc.py:WRAP_LIMIT is not a function" in capsys.readouterr().err
    assert cli([misc("right"), "--dtypes", "float128"]) == 2
    assert "dtype must be a torch dtype name" in capsys.readouterr().err
    assert cli([misc("right"), "--dtypes", "fp32,bool"]) == 2
    assert "dtype bool cannot be checked" in capsys.readouterr().err
    assert cli([misc("right"), "--only", "normal,tails"]) == 2
    assert "unknown categories ['tails']" in capsys.readouterr().err
    assert cli([misc("right"), "--block", "0x32"]) == 2
    assert "--block sides must be positive" in capsys.readouterr().err
    assert cli([misc("right"), "--timeout", "nan"]) == 2
    assert "--timeout must be a positive number" in capsys.readouterr().err


def test_cli_help_states_the_target_contract(capsys):
    assert cli(["--help"]) == 0
    out = capsys.readouterr().out
    assert "def my_transpose(x, out):" in out and "out.copy_(x.t())" in out
    assert "def my_transpose(x): ..." in out and "out[j, i] = x[i, j]" in out
    assert "an M x N tensor, any strides" in out and "a contiguous N x M tensor" in out


# argv after the target (None: the target itself is the bad input), what the error must name.
BAD_ARGUMENTS = [
    (["no_colon_here"], None, "argument target: a target is path/to/file.py:function"),
    (["tests/wrong/no_such_file.py:f"], None, "argument target: no such file"),
    (["--block", "32"], "--block", "argument --block: block must look like 32x32"),
    (["--block", "0x32"], "--block", "--block sides must be positive"),
    (["--large", "4x0"], "--large", "--large sides must be positive"),
    (["--timeout", "soon"], "--timeout", "argument --timeout: invalid float value"),
    (["--timeout", "-1"], "--timeout", "--timeout must be a positive number"),
    (["--show", "-1"], "--show", "--show must be 0 or more"),
    (["--only", "normal,tails"], "--only", "argument --only: unknown categories ['tails']"),
    (["--form", "sideways"], "--form", "argument --form: invalid choice: 'sideways'"),
    (["--device", "tpu"], "--device", "argument --device: invalid choice: 'tpu'"),
    (["--dtypes", "bool"], "--dtypes", "argument --dtypes: dtype bool cannot be checked"),
]


@pytest.mark.parametrize("argv,option,message", BAD_ARGUMENTS, ids=[" ".join(a) for a, _, _ in BAD_ARGUMENTS])
def test_cli_bad_arguments_name_the_argument(capsys, argv, option, message):
    """Refused while parsing, before any child starts: status 2, one error line naming the argument."""
    assert cli(argv if option is None else [misc("right"), *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    error = captured.err.strip().splitlines()[-1]
    assert error.startswith("tileflip check: error: ") and message in error, captured.err


def test_the_checker_process_imports_no_triton():
    code = (
        "import sys\n"
        "from tileflip.cli.check import main\n"
        f"rc = main([{shipped('triton_wrong.py:right')!r}, '--only', 'normal', '--json'])\n"
        "assert 'triton' not in sys.modules, 'the checker imported triton'\n"
        "assert 'torch' not in sys.modules, 'the checker imported torch'\n"
        "sys.exit(rc)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-c", code]
    done = subprocess.run(command, check=False, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["passed"]


def test_the_package_names_its_entry_points_lazily():
    import tileflip.check

    assert tileflip.check.check is runner.check and tileflip.check.check_many is runner.check_many
    assert tileflip.check.Report is Report and tileflip.check.TargetError is runner.TargetError
    code = "import sys, tileflip.check; assert not {'tileflip.check.runner', 'numpy'} & set(sys.modules)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], check=False, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_cli_help_states_the_verdicts(capsys):
    assert cli(["--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "INCOMPLETE when none failed but some could not run here" in out
    assert "Exit status 0 only for PASS, 1 for FAIL or INCOMPLETE" in out
    assert "wrong elements shown per case" in out
