"""The ``tileflip`` command's own options: the command list, the version, and an unknown command."""

import pytest

import tileflip
from tileflip.cli import COMMANDS, main


def test_help_lists_every_command_with_a_line(capsys):
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    for name in ("demo", "plan", "analyze", "check", "bench"):
        assert any(line.split()[:1] == [name] and len(line.split()) > 3 for line in text.splitlines()), name
    assert set(COMMANDS) == {"demo", "plan", "analyze", "check", "bench"}


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"tileflip {tileflip.__version__}"


@pytest.mark.parametrize("argv", [["frob"], ["--frob"], ["Plan"]])
def test_unknown_command_is_named(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"unknown command {argv[0]!r}" in err and "demo, plan, analyze, check, bench" in err


def test_no_command_prints_the_usage_and_fails(capsys):
    assert main([]) == 2
    assert "commands:" in capsys.readouterr().out
