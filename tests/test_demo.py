"""``tileflip demo``: labelled columns, the call it makes, a failing kernel shown, and next steps that work."""

from pathlib import Path

import pytest
import torch

import tileflip
from tileflip import demo
from tileflip.cli import COMMANDS
from tileflip.cli import main as cli

ROOT = Path(__file__).resolve().parents[1]
# two cheap cases of the real list keep the interpreter's share of this file under a second
FEW = [case for case in demo.CASES if case[0] in ("tiny", "x.expand() (stride 0)")]


@pytest.fixture
def few_cases(monkeypatch):
    assert len(FEW) == 2
    monkeypatch.setattr(demo, "CASES", FEW)


def table(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("case "))
    return lines[start : lines.index("", start)]


def test_demo_labels_its_columns_and_shows_the_call(few_cases, tmp_path, capsys):
    png = tmp_path / "tiles.png"
    assert cli(["demo", "--png", str(png)]) == 0
    out = capsys.readouterr().out
    timing = "GPU wall ms" if torch.cuda.is_available() else "CPU interpreter ms"
    header, rule, *rows = table(out)
    above = out.splitlines()[out.splitlines().index(header) - 1]
    assert timing in above  # the time columns' label spans them
    for name in ("case", "x.shape", "x.stride()", "programs", "float32", "bfloat16", "int8", "result"):
        assert name in header.split()
    assert set(rule) == {"-"} and len(rows) == 2
    assert all(row.endswith("bit-exact") for row in rows)
    assert demo.CALL in out and "y = tileflip.transpose(x)" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and str(png) in out
    lines = out.rstrip().splitlines()
    steps = lines[lines.index("What to try next:") + 1 :]
    if steps[0].strip().startswith("("):  # how to reach this install's tileflip from a shell
        assert "activate" in steps[0] or "tileflip" in steps[0]
        steps = steps[1:]
    assert [line.split()[0] for line in steps] == [cmd.split()[0] for cmd, _ in demo.NEXT_STEPS]


def test_all_dtypes_adds_columns(few_cases, tmp_path, capsys):
    assert cli(["demo", "--all-dtypes", "--png", str(tmp_path / "tiles.png")]) == 0
    header, _, *rows = table(capsys.readouterr().out)
    assert header.split()[4:-1] == [str(d).removeprefix("torch.") for d in demo.ALL_DTYPES]
    assert len(rows) == 2 and all(row.endswith("bit-exact") for row in rows)


def test_a_wrong_result_is_named_and_fails_the_demo(few_cases, tmp_path, capsys, monkeypatch):
    def forgets_the_last_row(x, out, backend="auto"):
        out[:-1].copy_(x.t()[:-1])
        return out

    monkeypatch.setattr(tileflip, "transpose", forgets_the_last_row)
    assert demo.run("cpu", png=str(tmp_path / "tiles.png")) == 1
    rows = table(capsys.readouterr().out)[2:]
    assert all(row.endswith("DIFFERS: float32, bfloat16, int8") for row in rows)


@pytest.mark.parametrize("step", [s for s, _ in demo.NEXT_STEPS if s.startswith("tileflip ")])
def test_next_steps_name_real_commands(step):
    words = step.split()
    assert words[1] in COMMANDS
    if words[1] == "check":  # runs every case in a child process: only its target is checked here
        path, func = words[2].split(":")
        assert f"def {func}(" in (ROOT / path).read_text()
    else:
        assert cli(words[1:]) == 0


def test_next_steps_name_real_files():
    for step, _ in demo.NEXT_STEPS:
        for name in step.replace(",", " ").split():
            if name.endswith(".md"):
                assert (ROOT / name).is_file(), name
    assert "test:" in (ROOT / "Makefile").read_text()
