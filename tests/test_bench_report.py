"""The benchmark's reporting: medians, table and plots drawn from a results file (no GPU needed); and
on a GPU, that the peers it times move the right bits."""

import importlib.util
import json
import subprocess
import sys

import pytest
from helpers import assert_bits_equal, poisoned

from tileflip.bench import cases, peers, plots, records, suites


def _records():
    rows = []
    for r, (copy_ms, tri_ms) in enumerate([(1.0, 1.10), (1.02, 1.05), (0.98, 1.2)]):
        base = {"gpu": "NVIDIA H200", "torch": "2.11", "triton": "3.6.0", "time": "2026-11-30T00:00:00+00:00",
                "shape": [1024, 512], "dtype": "float32", "run": "t", "round": r}  # fmt: skip
        nbytes = 2 * 1024 * 512 * 4
        copy_gbps = nbytes / copy_ms / 1e6
        rows.append(dict(base, op="copy", backend="copy", ms=copy_ms, gbps=copy_gbps, copy_gbps=copy_gbps,
                         fraction_of_copy=1.0))  # fmt: skip
        gbps = nbytes / tri_ms / 1e6
        rows.append(dict(base, op="transpose", backend="triton", ms=tri_ms, gbps=gbps, copy_gbps=copy_gbps,
                         fraction_of_copy=gbps / copy_gbps))  # fmt: skip
    return rows


def test_medians_over_rounds():
    med = records.medians(_records())
    ms, _, frac = med[((1024, 512), "float32", "triton")]
    assert ms == 1.10
    assert abs(frac - 1.0 / 1.10) < 0.01  # median of 1/1.10, 1.02/1.05, 0.98/1.2


def test_table_and_plot(tmp_path):
    text = suites.table(_records())
    assert "1024x512" in text and "triton" in text and "copy" in text
    path = tmp_path / "h200-2026-11-30-test.json"
    path.write_text(json.dumps(_records()))
    pngs = plots.draw(str(path))
    assert len(pngs) == 1
    with open(pngs[0], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_plot_of_a_permute_file(tmp_path):
    """A permute results file (records with ``perm``, op ``permute``) plots one figure per dtype, each
    case labelled with its shape and dims."""
    rows = []
    for shape, perm, dtype in (([8, 16, 4], [0, 2, 1], "bfloat16"), ([3, 5, 7, 2], [3, 1, 0, 2], "bfloat16"),
                               ([6, 6, 6], [2, 1, 0], "int8")):  # fmt: skip
        for r in _records():
            if r["backend"] == "triton":
                r = dict(r, op="permute", backend="auto")
            rows.append(dict(r, shape=shape, perm=perm, dtype=dtype))
    path = tmp_path / "h200-2026-12-01-permute-test.json"
    path.write_text(json.dumps(rows))
    pngs = plots.draw(str(path))
    assert sorted(p.rsplit("-", 1)[1] for p in pngs) == ["bfloat16.png", "int8.png"]
    assert plots._label(((3, 5, 7, 2), (3, 1, 0, 2))) == "3x5x7x2 (3,1,0,2)"


def test_suite_parts_split_the_suite():
    whole = cases.suite_cases("2d")
    parts = [c for k in (1, 2, 3) for c in cases.suite_cases("2d", f"{k}/3")]
    assert sorted(parts, key=str) == sorted(whole, key=str)
    for bad in ("0/3", "4/3", "1of3", "x/y"):
        with pytest.raises(ValueError, match="part: expected K/N"):
            cases.suite_cases("2d", bad)
    with pytest.raises(ValueError, match="suite: expected one of"):
        cases.suite_cases("nope")


def test_random_suite_file_is_its_generator():
    """The random permute suite is read from the package's data file, which holds exactly the cases of
    ``random_permute_cases(seed=0, count=40)``."""
    from_file = cases.suite_cases("permute-random")
    assert len(from_file) == 40 and all(c.perm is not None for c in from_file)
    assert from_file == cases.random_permute_cases(seed=0, count=40)


def _case_records(shape, ms, dtype="float32"):
    return [dict(r, shape=list(shape), dtype=dtype, ms=ms) for r in _records()]


def test_parts_merge_into_one_results_file(tmp_path):
    """``--part`` runs write one file per suite and device, each replacing the records of its own cases;
    a whole run replaces the file. The file says where it came from."""
    first = records.write_results(_case_records((64, 32), 1.0), "2d", tmp_path, "tileflip bench --part 1/2",
                                  part="1/2")  # fmt: skip
    assert first == tmp_path / "h200" / "2d.json"
    records.write_results(_case_records((32, 16), 2.0), "2d", tmp_path, "tileflip bench --part 2/2", part="2/2")
    records.write_results(_case_records((64, 32), 3.0), "2d", tmp_path, "tileflip bench --part 1/2", part="1/2")
    data = json.loads(first.read_text())
    assert {k: data[k] for k in ("suite", "device", "gpu", "command", "file")} == {
        "suite": "2d", "device": "h200", "gpu": "NVIDIA H200", "command": "tileflip bench --part 1/2",
        "file": str(first)}  # fmt: skip
    assert len(data["date"]) == 10 and sorted(data["parts"]) == ["1/2", "2/2"]
    by_case = {}
    for r in data["records"]:
        by_case.setdefault(tuple(r["shape"]), set()).add(r["ms"])
    assert by_case == {(64, 32): {3.0}, (32, 16): {2.0}}
    assert len(data["records"]) == 2 * len(_records())
    records.write_results(_case_records((8, 8), 4.0), "2d", tmp_path, "tileflip bench")
    data = json.loads(first.read_text())
    assert {tuple(r["shape"]) for r in data["records"]} == {(8, 8)} and "parts" not in data
    assert records.load_records(first) == data["records"]
    assert records.device_label("NVIDIA H200") == "h200"
    assert records.device_label("NVIDIA H100 80GB HBM3") == "h100"  # one folder per card, as data/<card>.json


def test_plot_out_folder(tmp_path):
    """``tileflip bench --plot FILE --out DIR`` draws into DIR; a results file in the current form (an
    object with provenance and records) plots as a bare list of records does."""
    from tileflip.cli import main

    path = records.write_results(_records(), "2d", tmp_path / "results", "tileflip bench")
    assert main(["bench", "--plot", str(path), "--out", str(tmp_path / "pngs")]) == 0
    assert sorted(p.name for p in (tmp_path / "pngs").iterdir()) == ["2d-float32.png"]
    assert plots.draw(str(path)) == [str(path.parent / "2d-float32.png")]


def test_bench_refuses_without_gpu():
    code = "import sys; from tileflip.cli import main; sys.exit(main(['bench', '--quick']))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin", **_pythonpath()})  # fmt: skip
    assert proc.returncode == 2 and "needs a CUDA GPU" in proc.stderr


BENCH_REFUSALS = [
    (["--suite", "host", "--part", "1/2"], "--part is for the shape suites"),
    (["--part", "3/2"], "part: expected K/N with 1 <= K <= N"),
    (["--backends", "triton,nope"], "expected comma-separated names"),
    (["--rounds", "0"], "expected a positive integer"),
    (["--suite", "tune", "--classes", "nope"], "--classes: unknown class(es) ['nope']"),
    (["--suite", "tune", "--sizes", "3"], "--sizes must be comma-separated element sizes"),
    (["--suite=cast", "--shapes", "8x"], "shape must look like 31x65"),
    (["--suite", "cast", "--tiles", "128x128"], "tiles: expected BMxBNwW"),
]


@pytest.mark.parametrize("argv,message", BENCH_REFUSALS, ids=[" ".join(a) for a, _ in BENCH_REFUSALS])
def test_bench_refusals(argv, message, capsys):
    from tileflip.cli import main

    try:
        rc = main(["bench", *argv])
    except SystemExit as e:  # argparse's refusal
        rc = e.code
    assert rc == 2
    assert message in capsys.readouterr().err


def test_bench_package_and_xla_child_do_not_load_torch():
    """The XLA child runs JAX alone: importing it (and the bench package, its cases and records) loads no torch."""
    code = ("import sys, tileflip.bench, tileflip.bench.xla_child, tileflip.bench.cases, tileflip.bench.records; "
            "sys.exit('torch' in sys.modules)")  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def _pythonpath():
    import os

    return {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}


def test_tune_chooses_only_among_configs_measured_on_every_shape_of_a_class():
    """A configuration measured twice on one shape of a two-shape class must not count as measured on
    both; the choice is the best geometric mean among those measured on each shape."""
    from tileflip.bench import tune

    def row(config, shape, fraction):
        return {"element_size": 4, "shape_class": "tiny", "shape": list(shape), "config": list(config),
                "fraction_of_copy": fraction}  # fmt: skip

    a, b, c = (32, 32, 4, 0, 1, 0, 0), (64, 64, 8, 0, 1, 0, 0), (64, 64, 8, 8, 1, 0, 0)
    shapes = tune.REPRESENTATIVE["tiny"]
    assert len(shapes) >= 2
    rest = shapes[2:]
    rows = [row(a, shapes[0], 0.95), row(a, shapes[1], 0.97), *(row(a, s, 1.0) for s in rest),
            row(b, shapes[0], 0.90), row(b, shapes[1], 0.99), *(row(b, s, 1.0) for s in rest),
            row(c, shapes[0], 1.20), row(c, shapes[0], 1.20), *(row(c, s, 1.20) for s in rest)]  # fmt: skip
    chosen = tune.choose(rows)["4:tiny"]
    assert chosen["config"] == list(a)
    assert abs(chosen["fraction_of_copy"] - (0.95 * 0.97) ** (1 / len(shapes))) < 1e-4


def test_int8_skinny_is_chosen_over_its_extra_shape_too():
    """int8 skinny is swept on one more shape than the other sizes' (tune.EXTRA): a configuration measured
    only on the shared shapes does not compete for it, and does for fp32."""
    from tileflip.bench import tune

    def row(es, config, shape, fraction):
        return {"element_size": es, "shape_class": "skinny", "shape": list(shape), "config": list(config),
                "fraction_of_copy": fraction}  # fmt: skip

    a, b = (64, 128, 8, 0, 1, 0, 0), (128, 256, 8, 1, 1, 0, 0)
    shared = tune.REPRESENTATIVE["skinny"]
    extra = [s for s in tune.representative(1, "skinny") if s not in shared]
    assert extra and tune.representative(4, "skinny") == shared
    rows = [row(es, a, s, 0.9) for es in (1, 4) for s in shared] + [row(1, a, s, 0.9) for s in extra]
    rows += [row(es, b, s, 0.99) for es in (1, 4) for s in shared]  # b: never measured on the extra shape
    table = tune.choose(rows)
    assert table["1:skinny"]["config"] == list(a) and table["4:skinny"]["config"] == list(b)


def test_shape_classes_and_their_tiles():
    """The classes auto and the table are keyed by: launch-bound slivers, thin and tiny shapes (31 x 65 is
    tiny, in the tiny entry's tile), thin-large, unaligned rows (row stride not a multiple of 16),
    skinny and large; each class gets its own tile."""
    from tileflip import tuning

    assert tuning.shape_class(2, 100000, 4) == "sliver"
    assert tuning.shape_class(12, 4000, 4) == "thin"
    assert tuning.shape_class(31, 65, 4) == tuning.shape_class(1024, 512, 4) == "tiny"
    assert tuning.shape_class(32, 100000, 4) == "thin-large"
    assert tuning.shape_class(8192, 8191, 8, 8191) == "unaligned"
    assert tuning.shape_class(8192, 8191, 8) == "large"  # no row stride given: aligned
    assert tuning.shape_class(65536, 256, 4, 256) == "skinny"
    assert tuning.shape_class(8192, 8192, 4, 8192) == "large"
    tiny = tuning.table_config(4, "tiny")
    assert tuning.triton_config(4, (31, 65), 65) == tuning.triton_config(4, (1024, 512), 512) == tiny
    assert tuning.triton_config(4, (12, 4000), 4000) == tuning.thin_config(12, 4000)
    assert tuning.triton_config(8, (8192, 8191), 8191) == tuning.table_config(8, "unaligned")


def test_auto_reads_the_row_stride(monkeypatch):
    """auto's class takes the input's row stride: a table that names different backends for the large
    and the unaligned class gives each to its own shapes."""
    from tileflip import tuning

    table = {"triton": {}, "auto": {"8:large": "cuda-tiled", "8:unaligned": "cuda-naive"}}
    monkeypatch.setattr(tuning, "table", lambda: table)
    tuning.auto_choice.cache_clear()
    try:
        assert tuning.auto_for(8192, 8191, 8, 8191) == "cuda-naive"
        assert tuning.auto_for(8192, 8192, 8, 8192) == "cuda-tiled"
        assert tuning.auto_for(8192, 8191, 8) == "cuda-tiled"  # no row stride given: aligned
    finally:
        tuning.auto_choice.cache_clear()


@pytest.mark.gpu
def test_peers_move_the_right_bits():
    """CuPy's copy (in this process) and XLA's transpose (in the bench's child process) of a transpose and
    of two permutes, bit for bit."""
    pytest.importorskip("cupy")
    if importlib.util.find_spec("jax") is None:
        pytest.skip("jax is not installed")
    import torch

    some = [cases.Case((37, 48), "bfloat16"), cases.Case((6, 5, 8, 3), "int8", (2, 0, 3, 1)),
            cases.Case((4, 6, 10), "float32", (1, 2, 0))]  # fmt: skip
    for case in some:
        x = records.make_input(case.shape, case.dtype)
        out = poisoned(case.out_shape, x.dtype, "cuda")
        fns, notes = peers.op_functions(case, x, out, ["cupy"])
        assert not notes and [b for b, _ in fns] == ["cupy"]
        fns[0][1]()
        torch.cuda.synchronize()
        assert_bits_equal(out, x.t() if case.perm is None else x.permute(case.perm))
    xla = peers.run_xla(some, quick=True, check=True)
    assert "error" not in xla, xla["error"]
    assert xla["exact"] == {c.label: True for c in some}
    assert set(xla["ms"]) == {c.label for c in some} and min(xla["ms"].values()) > 0
