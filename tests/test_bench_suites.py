"""The permute-wide and stability suites: the wide suite's data file is its generator's output and has the
stated properties; its model layouts are what their names say; --part runs merge and are summarized
per element size; the stability suite's address and order plans, and permutes through its carved views
(torch backend and the Triton interpreter, bit for bit). The timing itself runs on a GPU only."""

import functools
import json
import math
import random
import statistics
from pathlib import Path

import pytest
import torch
from helpers import POISON_BYTE, assert_bits_equal, random_bits

from tileflip.bench import cases, records, stability, suites, wide
from tileflip.bench.cases import Case
from tileflip.plan.dtypes import ELEMENT_SIZE, element_size

MIB = 1 << 20


@functools.lru_cache(maxsize=1)
def _doc() -> dict:
    return json.loads(wide.FILE.read_text())


def _random_entries():
    return [c for c in _doc()["cases"] if c["kind"] == "random"]


def _models():
    return [c for c in _doc()["cases"] if c["kind"] != "random"]


# --- the wide suite's cases ---------------------------------------------------------------------


def test_wide_file_is_its_generator():
    """The committed file is exactly what ``document()`` writes, and names the command that wrote it;
    the suite reads its cases from the package data, in the file's order."""
    text = wide.FILE.read_text()
    assert text == wide.dumps(wide.document())
    assert _doc()["generator"] == wide.GENERATOR and "python -m tileflip.bench.wide" in wide.GENERATOR
    suite = cases.suite_cases("permute-wide")
    assert [(c.shape, c.perm, c.dtype, c.name) for c in suite] == [
        (tuple(c["shape"]), tuple(c["perm"]), c["dtype"], c["name"]) for c in _doc()["cases"]]  # fmt: skip


def test_wide_random_cases_follow_the_rules():
    """90 cases, 30 from each of the seeds 1, 2 and 3; ranks 3 to 6; extents 2 to 1000 with odd ones; a
    non-identity permutation; each in int8, bf16 and fp32 with its own size T in [64, 512) MiB, held
    within 10%."""
    entries = _random_entries()
    assert len(entries) == 270
    by_case: dict = {}
    for e in entries:
        by_case.setdefault(e["name"], []).append(e)
    assert len(by_case) == 90
    assert sorted({n.split("-")[1] for n in by_case}) == ["1", "2", "3"]
    assert all(sum(n.startswith(f"random-{s}-") for n in by_case) == 30 for s in (1, 2, 3))
    ranks = set()
    for name, group in by_case.items():
        assert [e["dtype"] for e in group] == ["int8", "bfloat16", "float32"]
        base, perm = group[0]["base"], group[0]["perm"]
        assert all(e["base"] == base and e["perm"] == perm for e in group)
        ranks.add(len(base))
        assert 3 <= len(base) <= 6 and all(2 <= v <= 1000 for v in base)
        assert sorted(perm) == list(range(len(base))) and perm != sorted(perm)
        for e in group:
            assert 64 * MIB <= e["target_bytes"] < 512 * MIB
            size = math.prod(e["shape"]) * ELEMENT_SIZE[e["dtype"]]
            assert abs(size / e["target_bytes"] - 1) <= 0.10, (name, e["dtype"], size, e["target_bytes"])
            assert len(e["shape"]) == len(base) and min(e["shape"]) >= 2
    assert ranks == {3, 4, 5, 6}
    extents = [v for g in by_case.values() for v in g[0]["base"]]
    assert sum(v % 2 for v in extents) > len(extents) // 4  # odd extents, not a few
    finals = [v for e in entries for v in e["shape"]]
    assert sum(v % 2 for v in finals) > len(finals) // 5
    assert len({tuple(g[0]["perm"]) for g in by_case.values()}) > 60


def test_wide_draws_are_log_uniform():
    """Half of a log-uniform draw lies below the geometric middle of its range: about half the extents
    under sqrt(2 * 1001), and half the sizes under sqrt(64 * 512) MiB (a uniform draw would put 4% and
    23% there)."""
    extents = [v for e in _random_entries() if e["dtype"] == "int8" for v in e["base"]]
    below = sum(v < math.sqrt(2 * 1001) for v in extents) / len(extents)
    assert 0.4 < below < 0.6, below
    sizes = [e["target_bytes"] for e in _random_entries()]
    below = sum(t < math.sqrt(64 * 512) * MIB for t in sizes) / len(sizes)
    assert 0.38 < below < 0.62, below


def _reachable(base: int, extent: int) -> bool:
    """Whether ``extent`` is ``base`` scaled by one integer factor, up or (rounded) down."""
    return extent % base == 0 or any(wide.shrunk(base, k) == extent for k in range(2, base + 1))


def test_wide_shapes_scale_extents_by_integer_factors():
    """Every extent is its base extent times or divided by an integer; only the two largest base extents
    ever grow (small extents stay small); shrinking both ways is used."""
    grew = shrank = 0
    for e in _random_entries():
        base, shape = e["base"], e["shape"]
        top = sorted(range(len(base)), key=lambda d: (-base[d], d))[:2]
        for d, (b, v) in enumerate(zip(base, shape)):
            assert _reachable(b, v), (e["name"], e["dtype"], d, b, v)
            assert v <= b or d in top, (e["name"], e["dtype"], d)
            grew += v > b
            shrank += v < b
    assert grew > 50 and shrank > 50


def test_fit_shape():
    """Growth goes to the two largest extents, balanced; a shape too large comes down from the top; a size
    no integer scaling reaches within 10% is refused."""
    shape = wide.fit_shape((2, 3, 5), 1, 100 * MIB)
    assert shape[0] == 2 and abs(math.prod(shape) / (100 * MIB) - 1) <= 0.1
    assert shape[1] % 3 == 0 and shape[2] % 5 == 0 and 0.5 < (shape[1] / 3) / (shape[2] / 5) < 2
    big = (1000, 900, 800, 700, 600, 500)
    shape = wide.fit_shape(big, 4, 64 * MIB)
    assert abs(math.prod(shape) * 4 / (64 * MIB) - 1) <= 0.1 and all(v <= b for v, b in zip(shape, big))
    assert max(shape) < 100  # the water level: all came down, none left large
    assert wide.fit_shape((300, 7, 300), 2, 300 * 7 * 300 * 2) == (300, 7, 300)  # already the size
    with pytest.raises(ValueError, match="no fit within 10%"):
        wide.fit_shape((2, 2, 2), 1, 4)


def test_random_draws_depend_only_on_the_seed():
    a, b = wide.random_cases(seeds=(1,), count=3), wide.random_cases(seeds=(1,), count=3)
    assert a == b and a == _random_entries()[:9]
    assert wide.random_case(random.Random(5)) != wide.random_case(random.Random(6))


KINDS = ("attention", "nchw-nhwc", "ncdhw-ndhwc", "patchify", "unpatchify", "pixel-shuffle", "moe", "kv-cache-fp8")


def test_model_layouts():
    """At least 15 layouts of the named kinds, 64 MiB to 1 GiB each, each with its source, named once, and
    each written with a one-line comment above it in wide.py."""
    models = _models()
    assert len(models) >= 15 and set(KINDS) == {m["kind"] for m in models}
    assert len({m["name"] for m in models}) == len(models)
    for m in models:
        size = math.prod(m["shape"]) * ELEMENT_SIZE[m["dtype"]]
        assert 64 * MIB <= size <= 1024 * MIB, m["name"]
        assert m["source"] and sorted(m["perm"]) == list(range(len(m["shape"]))) and m["perm"] != sorted(m["perm"])
    lines = Path(wide.__file__).read_text().splitlines()
    for m in models:
        at = next(i for i, line in enumerate(lines) if line.startswith(f'    ("{m["name"]}"'))
        assert lines[at - 1].startswith("    # "), m["name"]
    heads = {v for m in models if m["kind"] == "attention" for v in m["shape"]}
    assert {6, 10, 12} <= heads
    assert all(m["dtype"] == "float8_e4m3fn" for m in models if m["kind"] == "kv-cache-fp8")
    perms = {(m["kind"], tuple(m["perm"])) for m in models}
    assert {
        ("nchw-nhwc", (0, 2, 3, 1)),
        ("nchw-nhwc", (0, 3, 1, 2)),
        ("ncdhw-ndhwc", (0, 2, 3, 4, 1)),
        ("ncdhw-ndhwc", (0, 4, 1, 2, 3)),
    } <= perms  # both directions of each
    patch = {m["shape"][3] for m in models if m["kind"] == "patchify" and m["shape"][3] == m["shape"][5]}
    unpatch = {m["shape"][3] for m in models if m["kind"] == "unpatchify" and m["shape"][3] == m["shape"][4]}
    assert {14, 16} <= patch and {14, 16} <= unpatch


def _tiny(kind_perm, shape):
    x = torch.arange(math.prod(shape), dtype=torch.int32).reshape(shape)
    return x, x.permute(kind_perm).contiguous()


def test_model_layouts_mean_what_they_say():
    """Each kind's permutation, on a tiny tensor, against what the model code does: MAE's patchify and
    unpatchify einsums, torch's pixel_shuffle and pixel_unshuffle, channels-last memory formats, and
    timm's qkv split."""
    models = _models()
    for m in models:
        perm, kind = tuple(m["perm"]), m["kind"]
        if kind == "patchify":
            x, y = _tiny(perm, (2, 3, 2, 4, 3, 4))
            assert torch.equal(y, torch.einsum("nchpwq->nhwpqc", x))
        elif kind == "unpatchify":
            x, y = _tiny(perm, (2, 2, 3, 4, 4, 3))
            assert torch.equal(y, torch.einsum("nhwpqc->nchpwq", x))
        elif kind == "pixel-shuffle" and perm == (0, 1, 4, 2, 5, 3):
            x, y = _tiny(perm, (2, 3, 2, 2, 5, 4))
            assert torch.equal(y.reshape(2, 3, 10, 8), torch.nn.functional.pixel_shuffle(x.reshape(2, 12, 5, 4), 2))
        elif kind == "pixel-shuffle":
            assert perm == (0, 1, 3, 5, 2, 4)
            x, y = _tiny(perm, (2, 3, 5, 2, 4, 2))
            assert torch.equal(y.reshape(2, 12, 5, 4), torch.nn.functional.pixel_unshuffle(x.reshape(2, 3, 10, 8), 2))
        elif kind in ("nchw-nhwc", "ncdhw-ndhwc"):
            fmt = torch.channels_last if kind == "nchw-nhwc" else torch.channels_last_3d
            rank = len(perm)
            to_last = (0, *range(2, rank), 1)
            if perm == to_last:  # NC... to N...C: the channels-last tensor's memory, in order
                x = torch.zeros((2, 3, *[4] * (rank - 2))).to(memory_format=fmt)
                assert x.permute(perm).is_contiguous()
            else:  # N...C to NC...: the inverse
                assert perm == (0, rank - 1, *range(1, rank - 1))
                assert [to_last[p] for p in perm] == list(range(rank))
        elif m["name"] == "vit-s16-qkv-split":
            assert perm == (2, 0, 3, 1, 4) and m["shape"][2] == 3
        elif kind == "kv-cache-fp8" and len(perm) == 5:  # vLLM's x: 16 bytes of elements
            assert m["shape"][4] == 16 // ELEMENT_SIZE[m["dtype"]] and perm == (0, 2, 3, 1, 4)
        elif kind in ("attention", "kv-cache-fp8"):
            assert perm == (0, 2, 1, 3)
        else:
            assert kind == "moe" and perm[:2] == (1, 0) and perm[2:] == tuple(range(2, len(perm)))


def test_wide_suite_parts_and_keys():
    """--part slices cover the suite once; every case has its own results key (the part merge replaces
    records by it)."""
    whole = cases.suite_cases("permute-wide")
    assert len(whole) == 270 + len(wide.MODEL_LAYOUTS)
    assert len({(c.shape, c.perm, c.dtype) for c in whole}) == len(whole)
    parts = [c for k in range(1, 7) for c in cases.suite_cases("permute-wide", f"{k}/6")]
    assert sorted(parts, key=lambda c: (c.name, c.dtype)) == sorted(whole, key=lambda c: (c.name, c.dtype))
    assert "permute-wide" in cases.PERMUTE_SUITES


def _fake_measure(fractions):
    """A stand-in for suites.measure: copy, auto and torch-compile records at given fractions of copy."""

    def measure(case_list, backends, rounds, quick, log=print):
        rows = []
        for case in case_list:
            auto, compiled = fractions(case)
            for r in range(rounds):
                base = {"gpu": "NVIDIA H200", "time": "t", "shape": list(case.shape), "perm": list(case.perm),
                        "dtype": case.dtype, "name": case.name, "round": r, "copy_gbps": 4000.0}  # fmt: skip
                rows.append(dict(base, op="copy", backend="copy", ms=1.0, gbps=4000.0, fraction_of_copy=1.0))
                for b, f in (("auto", auto), ("torch-compile", compiled)):
                    rows.append(dict(base, op="permute", backend=b, ms=1 / f, gbps=4000 * f, fraction_of_copy=f))
        return rows

    return measure


def test_wide_parts_merge_and_summary(tmp_path, monkeypatch, capsys):
    """`tileflip bench --suite permute-wide --part K/N` (the measurement replaced by a stand-in) merges the
    parts into one results file; the summary per element size covers every part merged so far."""
    from tileflip.bench import plots
    from tileflip.cli import bench as cli_bench
    from tileflip.cli import main

    whole = cases.suite_cases("permute-wide")
    index = {(c.shape, c.perm, c.dtype): i for i, c in enumerate(whole)}
    monkeypatch.setattr(cli_bench, "_no_gpu", lambda what="": False)
    monkeypatch.setattr(plots, "draw_if_possible", lambda path, log=print: [])
    monkeypatch.setattr(suites, "measure", _fake_measure(lambda c: (0.5 + index[(c.shape, c.perm, c.dtype)] / 1000,
                                                                     0.7)))  # fmt: skip
    for part in ("1/100", "2/100"):
        assert main(["bench", "--suite", "permute-wide", "--part", part, "--rounds", "1", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "h200" / "permute-wide.json").read_text())
    assert sorted(data["parts"]) == ["1/100", "2/100"]
    mine = whole[0::100] + whole[1::100]
    assert {(tuple(r["shape"]), tuple(r["perm"]), r["dtype"]) for r in data["records"]} == {
        (c.shape, c.perm, c.dtype) for c in mine}  # fmt: skip
    assert {r["name"] for r in data["records"]} == {c.name for c in mine}
    out = capsys.readouterr().out
    fractions = sorted(0.5 + index[(c.shape, c.perm, c.dtype)] / 1000 for c in mine if c.dtype == "int8")
    line = [x for x in out.splitlines() if x.startswith("1-byte:")][-1]  # after the second part
    assert f"{len(fractions)} cases, median {statistics.median(fractions):.1%} of copy" in line
    assert f"least {fractions[0]:.1%}" in line
    assert sum(f >= 0.68 for f in fractions) > 0
    assert f"on {sum(f >= 0.68 for f in fractions)} of {len(fractions)}" in line


def test_quantize_parts_merge_by_shape(tmp_path, monkeypatch):
    """`tileflip bench --suite quantize --part K/N` measures every N-th shape from the K-th and merges it
    into the one results file (the measurement replaced by a stand-in)."""
    from tileflip.bench import quantize
    from tileflip.cli import bench as cli_bench
    from tileflip.cli import main

    def fake(shapes, **kwargs):
        return [dict(gpu="NVIDIA H200", op="quantize", recipe="mxfp8", outputs="both", shape=list(s),
                     dtype="bfloat16", backend=b, ms=1.0, fraction_of_copy=1.0, round=0)
                for s in shapes for b in ("copy", "tileflip")]  # fmt: skip

    monkeypatch.setattr(cli_bench, "_no_gpu", lambda what="": False)
    monkeypatch.setattr(quantize, "measure", fake)
    shapes = "64x256,128x128,256x64"
    for part in ("2/2", "1/2"):
        assert main(["bench", "--suite", "quantize", "--shapes", shapes, "--part", part, "--out", str(tmp_path)]) == 0
        data = json.loads((tmp_path / "h200" / "quantize.json").read_text())
        got = sorted({tuple(r["shape"]) for r in data["records"]})
        assert got == ([(128, 128)] if part == "2/2" else [(64, 256), (128, 128), (256, 64)])
    assert sorted(data["parts"]) == ["1/2", "2/2"]
    assert len(data["records"]) == 6


def test_strategy_sweep_writes_its_own_file_and_counts_close_picks(tmp_path, monkeypatch, capsys):
    """`--backends auto,triton,cuda-realign` on a permute suite is the strategy sweep: its own results
    file beside the suite's, and a line saying on how many cases auto is within 5% of the fastest."""
    from tileflip.bench import plots
    from tileflip.cli import bench as cli_bench
    from tileflip.cli import main

    figures = {"auto": 0.9, "triton": 0.5, "cuda-realign": 0.92}

    def measure(case_list, backends, rounds, quick, log=print):
        assert backends == ["auto", "triton", "cuda-realign"]
        rows = []
        for i, case in enumerate(case_list):
            base = {"gpu": "NVIDIA H200", "time": "t", "shape": list(case.shape), "perm": list(case.perm),
                    "dtype": case.dtype, "name": case.name, "round": 0, "copy_gbps": 4000.0}  # fmt: skip
            rows.append(dict(base, op="copy", backend="copy", ms=1.0, gbps=4000.0, fraction_of_copy=1.0))
            for b, f in figures.items():
                f = f if i else f / 2 if b == "auto" else f  # the first case: auto far from the fastest
                rows.append(dict(base, op="permute", backend=b, ms=1 / f, gbps=4000 * f, fraction_of_copy=f))
        return rows

    monkeypatch.setattr(cli_bench, "_no_gpu", lambda what="": False)
    monkeypatch.setattr(plots, "draw_if_possible", lambda path, log=print: [])
    monkeypatch.setattr(suites, "measure", measure)
    argv = ["bench", "--suite", "permute-wide", "--part", "1/100", "--rounds", "1", "--out", str(tmp_path),
            "--backends", "auto,triton,cuda-realign"]  # fmt: skip
    assert main(argv) == 0
    assert (tmp_path / "h200" / "permute-wide-strategies.json").exists()
    assert not (tmp_path / "h200" / "permute-wide.json").exists()
    out = capsys.readouterr().out
    one_byte = [c for c in cases.suite_cases("permute-wide", "1/100") if element_size(c.dtype) == 1]
    first_is_one_byte = element_size(cases.suite_cases("permute-wide", "1/100")[0].dtype) == 1
    close = len(one_byte) - first_is_one_byte
    assert (f"  strategies: auto within 5% of the fastest of auto, triton, cuda-realign on {close} of "
            f"{len(one_byte)}") in out  # fmt: skip


def test_results_name():
    assert suites.results_name("permute-wide", ["auto", "triton", "cuda-realign"]) == "permute-wide-strategies"
    assert suites.results_name("permute-wide", ["auto", "torch-compile"]) == "permute-wide"
    assert suites.results_name("permute-wide", ["auto", "cuda-staged"]) == "permute-wide-strategies"
    assert suites.results_name("permute-wide", ["auto"]) == "permute-wide"
    assert suites.results_name("permute-wide", ["auto", "triton", "torch-compile"]) == "permute-wide"
    assert suites.results_name("2d", ["triton", "cuda-vec"]) == "2d"


def test_wide_summary_counts_level_within_two_points():
    rows = _fake_measure(lambda c: {(2,): (0.5, 0.6), (3,): (0.9, 0.91), (4,): (0.95, 0.98)}[c.shape])(
        [Case((s,), "int8", (0,), "x") for s in (2, 3, 4)], ["auto"], 2, True)  # fmt: skip
    text = suites.wide_summary(rows)
    assert text.startswith("1-byte: 3 cases, median 90.0% of copy, least 50.0% (2 int8 (0,))")
    assert "within 2 points) on 1 of 3" in text  # 0.9 against 0.91 is level; 0.95 against 0.98 is not


# --- the stability suite ------------------------------------------------------------------------


def test_stability_cases():
    """The four cases that swung or ran slow, and at least eight others of 1, 2 and 4 bytes, each with its
    reason, each once."""
    suite = stability.cases()
    named = [
        Case((384, 355, 384), "int8", (2, 1, 0)),
        Case((15, 15, 32, 15, 32, 16), "int8", (4, 1, 0, 3, 2, 5)),
        Case((75, 96, 12, 608), "int8", (2, 0, 3, 1)),
        Case((28, 28, 4, 48, 352), "int8", (2, 0, 4, 1, 3)),
    ]
    assert [c for c, _ in suite[:4]] == named
    others = suite[4:]
    assert len(others) >= 8 and all(why for _, why in suite)
    assert {ELEMENT_SIZE[c.dtype] for c, _ in others} == {1, 2, 4}
    assert len({(c.shape, c.perm, c.dtype) for c, _ in suite}) == len(suite)
    assert any(c.name and c.name.startswith("random-") for c, _ in others)
    assert any(c.name and not c.name.startswith("random-") for c, _ in others)


def test_address_plan():
    """Offsets are 16-byte aligned and below STEPS * 2 MiB; the first measurement is at 0, 0; every even
    one at whole 2 MiB steps, every odd one within a step; the two sides are drawn apart."""
    plan = stability.address_plan(10, random.Random(3))
    assert len(plan) == 10 and plan[0] == (0, 0)
    flat = [o for pair in plan for o in pair]
    assert all(o % stability.ALIGN == 0 and 0 <= o < stability.STEPS * stability.STEP for o in flat)
    assert all(o % stability.STEP == 0 for m, pair in enumerate(plan) if m % 2 == 0 for o in pair)
    assert all(o % stability.STEP != 0 for m, pair in enumerate(plan) if m % 2 for o in pair)
    assert any(o > 0 for m, pair in enumerate(plan) if m % 2 == 0 for o in pair)  # real 2 MiB steps
    assert any(a != b for a, b in plan)
    assert stability.address_plan(10, random.Random(3)) == plan != stability.address_plan(10, random.Random(4))


def test_order_plan_and_schedule():
    orders = stability.order_plan(15, 10, seed=0)
    assert orders[0] == list(range(15)) and all(sorted(o) == list(range(15)) for o in orders)
    assert len({tuple(o) for o in orders}) == 10
    assert stability.order_plan(15, 10, seed=1) != orders
    slots = stability.schedule(15, 10, seed=0)
    assert [(s.measurement, s.case) for s in slots] == [(m, c) for m, o in enumerate(orders) for c in o]
    assert [s.position for s in slots] == list(range(15)) * 10
    by_case = {c: [(s.in_offset, s.out_offset) for s in slots if s.case == c] for c in range(15)}
    assert len({tuple(v) for v in by_case.values()}) == 15  # each case its own offsets
    every = [o for v in by_case.values() for pair in v for o in pair]
    assert sum(o > 0 and o % stability.STEP == 0 for o in every) > 50
    assert sum(o % stability.STEP != 0 for o in every) > 100


def test_views_stay_inside_their_buffer():
    """Every planned view of every case fits in its side's buffer wherever the buffer starts, and starts
    at its offset past a 2 MiB-aligned address; misaligned or overflowing views are refused."""
    suite = stability.cases()
    sizes = [math.prod(c.shape) * ELEMENT_SIZE[c.dtype] for c, _ in suite]
    size = stability.buffer_bytes(max(sizes))
    for address in (0, 64, 2 * MIB - 16, 123456 * 64):
        start = stability.aligned_start(address)
        assert 0 <= start < stability.STEP and (address + start) % stability.STEP == 0
        for s in stability.schedule(len(suite)):
            for offset in (s.in_offset, s.out_offset):
                begin, end = stability.view_span(size, start, offset, sizes[s.case])
                assert (address + begin) % stability.STEP == offset % stability.STEP and end <= size
    with pytest.raises(ValueError, match="multiple of 16"):
        stability.view_span(size, 0, 8, 100)
    last = stability.STEPS * stability.STEP - stability.ALIGN  # the largest offset a plan can hold
    assert stability.view_span(size, stability.STEP - 1, last, max(sizes) + 17)[1] == size
    with pytest.raises(ValueError, match="does not fit"):
        stability.view_span(size, stability.STEP - 1, last, max(sizes) + 18)


@pytest.mark.parametrize("backend,shape,dtype,perm", [
    ("torch", (5, 7, 3, 4), torch.bfloat16, (2, 0, 3, 1)),
    ("triton", (3, 5, 6), torch.int8, (2, 0, 1)),
    ("triton", (4, 3, 5), torch.float32, (1, 2, 0)),
])  # fmt: skip
def test_permute_through_carved_views(backend, shape, dtype, perm):
    """A permute from and into views carved at planned offsets writes exactly its result, bit for bit,
    and no byte of the output buffer outside its view (torch backend; the Triton kernels in the
    interpreter)."""
    size = stability.buffer_bytes(4096)
    inbuf = random_bits((size,), torch.uint8, seed=1)
    outbuf = torch.full((size,), POISON_BYTE, dtype=torch.uint8)
    start_in, start_out = stability.aligned_start(inbuf.data_ptr()), stability.aligned_start(outbuf.data_ptr())
    plan = stability.address_plan(4, random.Random(7))
    for in_offset, out_offset in plan[1:]:  # a whole-step pair and a within-step pair
        x = stability.carve(inbuf, start_in, in_offset, shape, dtype)
        out_shape = tuple(shape[d] for d in perm)
        out = stability.carve(outbuf, start_out, out_offset, out_shape, dtype)
        assert (x.data_ptr() - start_in - inbuf.data_ptr(), out.data_ptr() - start_out - outbuf.data_ptr()) == (
            in_offset, out_offset)  # fmt: skip
        import tileflip

        assert tileflip.permute(x, perm, out=out, backend=backend) is out
        assert_bits_equal(out, x.permute(perm))
        begin = start_out + out_offset
        end = begin + out.numel() * out.element_size()
        assert bool((outbuf[:begin] == POISON_BYTE).all()) and bool((outbuf[end:] == POISON_BYTE).all())
        outbuf.fill_(POISON_BYTE)


def _counting_timer():
    calls = []

    def timer(fn):
        fn()
        calls.append(1)
        return 1.0 + 0.01 * (len(calls) % 3)  # spreads of at most 1.02: every case stable

    return timer, calls


def test_stability_loop_on_the_cpu(tmp_path, monkeypatch, capsys):
    """`tileflip bench --suite stability` with the measurement loop on the CPU (backend torch, a stand-in
    timer, tiny cases): one exact record per case and measurement, at the planned offsets, and the
    results file with each case's spread."""
    from tileflip.cli import bench as cli_bench
    from tileflip.cli import main

    tiny = [(Case((5, 7, 3), "int8", (2, 1, 0)), "a"), (Case((4, 3, 6, 2), "bfloat16", (3, 0, 2, 1), "n"), "b"),
            (Case((6, 5, 4), "float32", (1, 2, 0)), "c")]  # fmt: skip
    timer, calls = _counting_timer()
    monkeypatch.setattr(cli_bench, "_no_gpu", lambda what="": False)
    monkeypatch.setattr(stability, "cases", lambda: tiny)
    monkeypatch.setattr(stability, "measure", functools.partial(stability.measure, device="cpu", backend="torch",
                                                                timer=timer))  # fmt: skip
    argv = ["bench", "--suite", "stability", "--measurements", "4", "--seed", "2", "--out", str(tmp_path)]
    assert main(argv) == 0
    data = json.loads((tmp_path / "cpu" / "stability.json").read_text())
    rows = data["records"]
    assert len(rows) == 12 and len(calls) == 24  # a kernel and a copy timing each
    slots = stability.schedule(3, 4, seed=2)
    assert [(r["measurement"], r["position"], r["in_offset"], r["out_offset"]) for r in rows] == [
        (s.measurement, s.position, s.in_offset, s.out_offset) for s in slots]  # fmt: skip
    assert all(r["exact"] for r in rows)
    assert all(r["in_address"] % stability.STEP == r["in_offset"] % stability.STEP for r in rows)
    assert all(r["out_address"] % stability.STEP == r["out_offset"] % stability.STEP for r in rows)
    assert data["stable"] is True and data["limit"] == stability.LIMIT and data["measurements"] == 4
    assert [s["label"] for s in data["summary"]] == [c.label for c, _ in tiny]
    assert all(len(s["ms"]) == 4 and 1.0 <= s["spread"] <= 1.02 + 1e-9 for s in data["summary"])
    assert "3 of 3 stable" in capsys.readouterr().out


def test_stability_summary_and_table():
    def row(ms, m, shape=(4, 5)):
        return {"shape": list(shape), "perm": [1, 0], "dtype": "int8", "ms": ms, "copy_ms": 1.0, "measurement": m,
                "fraction_of_copy": 1.0 / ms, "exact": True, "name": None, "why": "w"}  # fmt: skip

    rows = [row(1.0, 0), row(1.04, 1), row(1.02, 2), row(1.0, 0, (6, 5)), row(1.2, 1, (6, 5))]
    rows[-1]["exact"] = False
    summary = stability.summarize(rows)
    assert [(s["ms"], round(s["spread"], 6), s["stable"], s["exact"]) for s in summary] == [
        ([1.0, 1.04, 1.02], 1.04, True, True), ([1.0, 1.2], 1.2, False, False)]  # fmt: skip
    text = stability.table(summary)
    assert "NO  WRONG RESULT" in text and "1 of 2 stable" in text


STABILITY_REFUSALS = [
    (["--suite", "stability", "--measurements", "0"], "expected a positive integer"),
    (["--suite", "stability", "--part", "1/2"], "unrecognized arguments: --part 1/2"),
    (["--suite", "stability"], "needs a CUDA GPU"),
    (["--suite", "quantize", "--shapes", "8192by64"], "shape must look like 31x65"),
    (["--suite", "quantize", "--rounds", "0"], "expected a positive integer"),
    (["--suite", "quantize", "--part", "3/2"], "expected K/N with 1 <= K <= N"),
    (["--suite", "quantize", "--part", "3/4"], "--part: 3/4 selects none of the 2 shapes"),
    (["--suite", "quantize"], "needs a CUDA GPU"),
]


@pytest.mark.parametrize("argv,message", STABILITY_REFUSALS, ids=[" ".join(a) for a, _ in STABILITY_REFUSALS])
def test_stability_refusals(argv, message, capsys, tmp_path):
    from tileflip.cli import main

    if torch.cuda.is_available() and message == "needs a CUDA GPU":
        pytest.skip("this machine has a GPU")
    try:
        rc = main(["bench", *argv, "--out", str(tmp_path)])
    except SystemExit as e:  # argparse's refusal
        rc = e.code
    assert rc == 2 and message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # a refused call writes nothing


@pytest.mark.gpu
def test_stability_measures_on_the_gpu():
    """On a GPU: do_bench times of two small cases at planned addresses, every result exact, the views
    at their planned place within 2 MiB."""
    small = [(Case((384, 355, 96), "int8", (2, 1, 0)), "a"), (Case((15, 15, 32, 15, 8, 16), "bfloat16",
                                                                   (4, 1, 0, 3, 2, 5)), "b")]  # fmt: skip
    rows = stability.measure(small, measurements=3, log=lambda *_: None)
    assert len(rows) == 6 and all(r["exact"] and r["ms"] > 0 and r["copy_ms"] > 0 for r in rows)
    assert all(r["in_address"] % stability.STEP == r["in_offset"] % stability.STEP for r in rows)
    assert len(stability.summarize(rows)) == 2


@pytest.mark.gpu
def test_wide_suite_measures_on_the_gpu():
    """On a GPU: the two smallest wide cases through the permute suites' measurement, records named."""
    small = sorted(cases.suite_cases("permute-wide"), key=lambda c: math.prod(c.shape) * ELEMENT_SIZE[c.dtype])[:2]
    rows = suites.measure(small, ["auto", "torch-copy"], rounds=1, quick=True, log=lambda *_: None)
    assert {r["name"] for r in rows} == {c.name for c in small}
    assert {r["backend"] for r in rows} == {"copy", "auto", "torch-copy"}
    assert all(r["ms"] > 0 for r in rows)
    assert records.medians(rows)


# --------------------------------------------------------------------------------------------------
# quantize
# --------------------------------------------------------------------------------------------------


def test_quantize_bytes_are_the_minimum():
    """x read once, plus each asked-for output and its unpadded scales written once."""
    from tileflip.bench import quantize

    M, K = 256, 512
    assert quantize.min_bytes("fp8_1x128", M, K, 2, True, False) == M * K * 2 + M * K + M * (K // 128) * 4
    assert quantize.min_bytes("fp8_1x128", M, K, 2, True, True) == M * K * 4 + (M * K // 128) * 8
    assert quantize.min_bytes("fp8_128x128", M, K, 4, False, True) == M * K * 5 + (M // 128) * (K // 128) * 4
    assert quantize.min_bytes("mxfp8", M, K, 2, True, True) == M * K * 4 + 2 * (M * K // 32)
    assert quantize.min_bytes("nvfp4", M, K, 2, True, True) == M * K * 3 + 2 * (M * K // 16)


def test_quantize_results_file_reads_back():
    """The committed results: every case (the byte-scale recipes in both scale layouts) has tileflip's
    figure, marked exact, beside the same-run copy; the table names each recipe and output set."""
    from tileflip.bench import quantize

    path = Path(__file__).parent.parent / "benchmarks" / "results" / "h200" / "quantize.json"
    data = json.loads(path.read_text())
    assert data["suite"] == "quantize" and data["file"] == "benchmarks/results/h200/quantize.json"
    rows = data["records"]
    med = quantize.medians(rows)
    cases = {k[:3] for k in med}
    names = {r if lay == "plain" else f"{r} {lay}" for r in quantize.RECIPES for lay in quantize.layouts(r)}
    assert names == set(quantize.RECIPES) | {"mxfp8 blocked", "nvfp4 blocked"}
    assert {(r, o) for _, r, o in cases} == {(n, o) for n in names for o in quantize.OUTPUTS}
    for case in cases:
        assert med[(*case, "copy")][1] == 1.0 and (*case, "tileflip") in med and (*case, "torch-compile") in med
    assert all(r["exact"] for r in rows if r["backend"] == "tileflip")
    text = quantize.table(rows)
    assert all(r in text for r in quantize.RECIPES) and "columnwise" in text
