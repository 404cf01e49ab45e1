"""Every ``tileflip ...`` and ``python ...`` command that README.md, docs/ and the demo's closing lines print runs
as printed, with the installed ``tileflip`` on PATH (the README's set-up): the CPU ones succeed (a checker
verdict on a known-wrong kernel fails, as it must) within a bound, and the GPU-only ones refuse clearly.
``make``, ``pip`` and ``torchrun`` lines are left to CI and the docs. A span that names an argument rather
than giving one (``FILE.py:FUNCTION``, ``--suite S``, ``MxN``, ``K/N``) is a syntax, not a command."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# an argument named rather than given: an all-capitals word, MxN, K/N, or an ellipsis
METAVARIABLE = re.compile(r"(?<![\w.-])(?:[A-Z][A-Z_]*(?:\.py)?(?::[A-Z_]+)?|MxN|K/N|\.\.\.)(?![\w])")
GPU_ONLY = ("tileflip bench", "--measure", "--large")


def _commands_of(text: str) -> list[str]:
    found = []
    in_block = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_block = not in_block
            continue
        if in_block:
            cmd = line.split(" #", 1)[0].strip()
            if re.match(r"(tileflip|python3?) ", cmd):
                found.append(cmd)
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    for span in re.findall(r"`((?:tileflip|python3?)\s[^`]+)`", prose):
        span = " ".join(span.split())
        if len(span.split()) > 2:  # two words name a command in prose (`tileflip plan shows ...`)
            found.append(span)
    return [c for c in found if not METAVARIABLE.search(c.split(" ", 1)[1]) and "torch.distributed.run" not in c]


def saved_files(text: str) -> dict:
    """The files a page asks its reader to save: {name: the code block just before "Saved as `name`"}."""
    blocks = [(m.end(), m.group(1)) for m in re.finditer(r"```\w*\n(.*?)```", text, re.S)]
    files = {}
    for m in re.finditer(r"Saved as `([\w.]+)`", text):
        before = [code for end, code in blocks if end <= m.start()]
        if before:
            files[m.group(1)] = before[-1]
    return files


def printed_commands() -> list[tuple[str, str]]:
    """(where, command) of every command the pages and the demo print."""
    from tileflip.demo import NEXT_STEPS

    out = []
    for page in PAGES:
        out += [(page.name, c) for c in _commands_of(page.read_text())]
    out += [("demo", cmd) for cmd, _ in NEXT_STEPS if re.match(r"(tileflip|python3?) ", cmd)]
    seen, unique = set(), []
    for where, cmd in out:
        if cmd not in seen:
            seen.add(cmd)
            unique.append((where, cmd))
    return unique


def test_the_pages_print_commands():
    commands = [c for _, c in printed_commands()]
    assert any(c.startswith("tileflip plan") for c in commands)
    assert any(c.startswith("tileflip check") for c in commands)
    assert any(c.startswith("tileflip bench") for c in commands)


def _env() -> dict:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.pop("TRITON_INTERPRET", None)  # as a reader's shell has it
    env["MPLBACKEND"] = "Agg"
    return env


@pytest.mark.slow
@pytest.mark.parametrize("where, command", printed_commands())
def test_a_printed_command_runs_as_printed(where, command, tmp_path):
    import torch

    argv = shlex.split(command)
    if argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    if argv[:2] == ["tileflip", "demo"]:
        argv += ["--png", str(tmp_path / "demo.png")]  # not into the checkout
    cwd = ROOT
    page = next((p for p in PAGES if p.name == where), None)
    for name, code in (saved_files(page.read_text()) if page else {}).items():
        if name in command:  # the reader saved the page's file and runs the command beside it
            (tmp_path / name).write_text(code)
            cwd = tmp_path
    proc = subprocess.run(argv, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=300)
    said = proc.stdout + proc.stderr
    gpu_only = any(part in command for part in GPU_ONLY)
    if gpu_only and not torch.cuda.is_available():
        assert proc.returncode != 0 and "GPU" in said, (where, command, said[-2000:])
        return
    wrong = "tests/wrong/" in command and command.startswith("tileflip check")
    expected = 1 if wrong else 0  # the checker fails a known-wrong kernel
    assert proc.returncode == expected, (where, command, proc.returncode, said[-2000:])
    assert "Traceback" not in said, (where, command, said[-2000:])
