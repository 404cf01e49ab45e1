"""`tileflip check`: wrong kernels rejected with the right hint, right ones passed, the checker itself sound.

The known-wrong kernels live in ``tests/wrong/`` (Triton tiles in ``triton_wrong.py``, one thread per
element in ``per_element.py``, plain torch targets for the checker's own paths in ``misc.py``); fresh
wrong kernels, with other tile sizes, names and grids, are written from templates into a temporary
folder at test time. tileflip's own backends are checked through ``tileflip.check.targets``.

Checks run in child processes, so each fixture runs its checks on a thread pool, two at a time or
one per core. On a GPU machine the same checks run natively on the GPU (device auto), and the
``gpu``-marked tests add the CUDA backends.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

from tileflip.check import cases, diagnose, runner
from tileflip.check.report import Report
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
    names = [*SHIPPED_WRONG, *SHIPPED_RIGHT]
    folder = tmp_path_factory.mktemp("fresh_kernels")
    fresh = {case: write_fresh(folder, *case) for case in FRESH_CASES}
    fresh["docs-example"] = docs_example(folder)
    reports = run_checks([*(shipped(name) for name in names), *fresh.values()])
    return {name: reports[shipped(name)] for name in names} | {case: reports[t] for case, t in fresh.items()}


@pytest.fixture(scope="module")
def shipped_reports(default_reports):
    return {name: default_reports[name] for name in [*SHIPPED_WRONG, *SHIPPED_RIGHT]}


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
    reports = runner.check_many([shipped(n) for n in names], dtypes=["int8"], only=["boundary", "non-square"])
    for name in names:
        assert top_hint(reports[shipped(name)]) == SHIPPED_WRONG[name], reports[shipped(name)].text()


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
    case_lines = [line for line in text.splitlines() if line.startswith("    hint: ")]
    assert len(case_lines) == sum(not o.passed for o in report.outcomes)
    assert all(line.startswith("    hint: input strides:") for line in case_lines), text
    assert "output's row stride" not in text and "300x2 float32 contiguous, out[j, i] holds" in text
    for case in report.to_json()["cases"]:
        if case["status"] == "fail":
            assert case["hint"]["key"] == case["hints"][0]["key"] == "input-strides", case


def test_case_hints_agree_with_the_summary(shipped_reports):
    """Every failing case's own hint is one the summary names, in the text and in the JSON."""
    for name, report in shipped_reports.items():
        summary = {h["key"] for h in report.hints()}
        chosen = report.case_hints()
        for o in report.outcomes:
            assert o.passed or chosen[o.case.id].key in summary, (name, o.case.label)
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
def test_the_default_large_case_needs_a_gpu():
    report = runner.check(misc("right"), only=["normal"], large=cases.LARGE_SHAPE)
    assert report.passed
    assert report.categories()["large"]["status"] == "skipped"


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
