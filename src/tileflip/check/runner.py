"""Running a target in child processes, and the public entry points ``check`` and ``check_many``.

The parent writes every case's input to a work folder and starts ``python -m tileflip.check.child``;
the child runs the cases in order and writes each result before starting the next. When it dies or a
case runs past the timeout, that case fails with the signal and the end of its stderr, and a fresh
child goes on with the next case. This module imports neither torch nor triton.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

from tileflip.check.cases import (
    CATEGORIES,
    INT32_LIMIT,
    LARGE_GUARD,
    Case,
    build_suite,
    encoding,
    geometry,
    guard_size,
    input_buffer,
)
from tileflip.check.child import RESTART_EXIT
from tileflip.check.diagnose import judge
from tileflip.check.report import Report, RunInfo

CHILD_MODULE = "tileflip.check.child"
DEATHS_IN_A_ROW = 3  # a category whose child dies this often in a row is not run further
FORMS = ("auto", "out", "return")
DEVICES = ("auto", "cpu", "cuda")


class TargetError(Exception):
    """The target could not be loaded: nothing was checked."""


def _child_env(device: str) -> dict:
    env = dict(os.environ)
    src_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src_root, env.get("PYTHONPATH", "")) if p)
    if device == "cpu":
        # Set here and not only in the child: triton reads it when kernels are decorated, at import.
        env["TRITON_INTERPRET"] = "1"
    return env


def _write_spec(workdir: str, targets: list[str], form: str, device: str, cases: list[Case]) -> None:
    """The child's work list: every case for the first target, then every case for the next, and so on."""
    specs = []
    for case in cases:
        enc = encoding(case.dtype)
        entry = {
            "id": case.id,
            "M": case.M,
            "N": case.N,
            "dtype": case.dtype,
            "large": case.large,
            "guard": LARGE_GUARD if case.large else guard_size(case.M, case.N),
            "poison": enc.poison,
            "size": enc.size,
        }
        if not case.large:
            buf, offset = input_buffer(case, enc)
            entry.update(x_file=f"x_{case.id}.npy", offset=offset, strides=geometry(case.layout, case.M, case.N)[0])
            np.save(os.path.join(workdir, entry["x_file"]), buf)
        specs.append(entry)
    jobs = [[t, c] for t in range(len(targets)) for c in range(len(cases))]
    spec = {"targets": targets, "form": form, "device": device, "cases": specs, "jobs": jobs}
    with open(os.path.join(workdir, "spec.json"), "w") as f:
        json.dump(spec, f)


def _read_json(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _tail(path: str, lines: int = 12) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:]).rstrip()
    except OSError:
        return ""


def _death_message(rc: int | None, timed_out: float | None, err_path: str) -> str:
    if timed_out is not None:
        what = f"timed out after {timed_out:g} s (the child was killed)"
    elif rc is not None and rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        what = f"the child process died with {name}"
    else:
        what = f"the child process exited with status {rc} before finishing the case"
    tail = _tail(err_path)
    return f"{what}; end of its stderr:\n{tail}" if tail else what


def _wait(proc: subprocess.Popen, workdir: str, timeout: float) -> float | None:
    """Wait for the child; kill it when one case runs longer than ``timeout``. Returns the timeout hit, if any."""
    progress_path = os.path.join(workdir, "progress")
    seen, since = None, time.monotonic()
    while True:
        try:
            proc.wait(timeout=0.2)
            return None
        except subprocess.TimeoutExpired:
            pass
        try:
            with open(progress_path) as f:
                now_running = f.read()
        except OSError:
            now_running = None
        if now_running != seen:
            seen, since = now_running, time.monotonic()
        elif time.monotonic() - since > timeout:
            proc.kill()
            proc.wait()
            return timeout


def run_targets(
    targets: list[str], cases: list[Case], *, form: str = "auto", device: str = "auto", timeout: float = 300.0
) -> tuple[list[RunInfo], list[dict[int, dict]]]:
    """Run every case of every target in child processes, in order; a child that dies is replaced by a fresh
    one that goes on with the next case. Returns, per target, how it ran and each case's raw result by id."""
    jobs = [(t, case) for t in range(len(targets)) for case in cases]
    results: list[dict[int, dict]] = [{} for _ in targets]
    infos = [RunInfo() for _ in targets]
    with tempfile.TemporaryDirectory(prefix="tileflip-check-") as workdir:
        _write_spec(workdir, targets, form, device, cases)
        start, launches = 0, 0
        while start < len(jobs):
            launches += 1
            err_path = os.path.join(workdir, f"child{launches}.err")
            with open(err_path, "w") as err, open(os.path.join(workdir, f"child{launches}.out"), "w") as out:
                command = [sys.executable, "-m", CHILD_MODULE, workdir, str(start)]
                proc = subprocess.Popen(command, stdout=out, stderr=err, env=_child_env(device), cwd=os.getcwd())
            timed_out = _wait(proc, workdir, timeout)
            while start < len(jobs):
                t, case = jobs[start]
                loaded = _read_json(os.path.join(workdir, f"loaded_{t}.json"))
                raw = _read_json(os.path.join(workdir, f"result_{start}.json"))
                if loaded is None:
                    problem = _read_json(os.path.join(workdir, "load_error.json"))
                    message = problem["message"] if problem else _death_message(proc.returncode, timed_out, err_path)
                    raise TargetError(f"could not load {targets[t]}: {message}")
                infos[t] = RunInfo(loaded["form"], loaded["device"], loaded["interpreter"], loaded["prepoisoned"])
                if raw is None:
                    break
                if raw.get("out_file"):
                    raw["out"] = np.load(os.path.join(workdir, raw["out_file"]))
                results[t][case.id] = raw
                start += 1
            if start >= len(jobs) or proc.returncode == RESTART_EXIT:
                continue
            t, case = jobs[start]
            outcome = "died" if timed_out is None else "timeout"
            results[t][case.id] = {"outcome": outcome, "message": _death_message(proc.returncode, timed_out, err_path)}
            start = _skip_after_deaths(jobs, start, results[t]) + 1
    return infos, results


def _skip_after_deaths(jobs: list[tuple[int, Case]], at: int, results: dict[int, dict]) -> int:
    """After DEATHS_IN_A_ROW deaths in a row in a category, mark the rest of it not run; returns the last job done."""
    target, category = jobs[at][0], jobs[at][1].category
    same = [case for t, case in jobs[: at + 1] if t == target and case.category == category]
    recent = same[-DEATHS_IN_A_ROW:]
    if len(recent) < DEATHS_IN_A_ROW or any(results[c.id]["outcome"] not in ("died", "timeout") for c in recent):
        return at
    message = f"not run: the child died on {DEATHS_IN_A_ROW} cases of this category in a row"
    while at + 1 < len(jobs) and jobs[at + 1][0] == target and jobs[at + 1][1].category == category:
        at += 1
        results[jobs[at][1].id] = {"outcome": "not-run", "message": message}
    return at


def validate(
    *,
    dtypes: list | None = None,
    block: tuple[int, int] | None = None,
    only: list[str] | None = None,
    form: str = "auto",
    device: str = "auto",
    large: tuple[int, int] | None = None,
    timeout: float = 300.0,
) -> list[str]:
    """Check the options of ``check_many``; returns the dtypes' torch names. Raises ValueError naming the option."""
    names = []
    for dtype in dtypes or ["float32"]:
        name = encoding(dtype).name
        if name not in names:
            names.append(name)
    for what, sizes in (("block", block), ("large", large)):
        if sizes is not None and not (
            len(sizes) == 2 and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in sizes)
        ):
            raise ValueError(f"{what} must be two positive ints such as (32, 32), got {sizes!r}")
    unknown = sorted(set(only or ()) - set(CATEGORIES))
    if unknown:
        raise ValueError(f"only: unknown categories {unknown}; choose from {', '.join(CATEGORIES)}")
    if form not in FORMS:
        raise ValueError(f"form must be one of {', '.join(FORMS)}, got {form!r}")
    if device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    if not (isinstance(timeout, (int, float)) and timeout > 0):  # (NaN too)
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return names


def check_many(
    targets: list[str],
    *,
    dtypes: list | None = None,
    block: tuple[int, int] | None = None,
    square_only: bool = False,
    only: list[str] | None = None,
    form: str = "auto",
    device: str = "auto",
    large: tuple[int, int] | None = None,
    timeout: float = 300.0,
    score: bool = False,
    limit: int = 20,
    overflow_limit: int = INT32_LIMIT,
) -> dict[str, Report]:
    """Run the suite against each target and judge every case; raises TargetError when a target cannot be loaded.

    ``dtypes``: any spellings of ``tileflip.plan.dtypes`` (default float32); ``block``: the target's tile,
    to map mismatches to the tiles that own them; ``only``: categories to run; ``large``: add a case of this
    shape (past 2**31 elements on a GPU); ``timeout``: seconds one case may run; ``score``: the reports
    carry ``Report.score()``; ``limit``: mismatches listed per case.

    The targets share child processes, one after the other (a child costs an import of torch); a child that
    dies is still replaced and the next case goes on in a fresh one, but a target that corrupts memory
    without dying could disturb the targets after it in the same child: ``check`` gives each its own.
    """
    dtypes = validate(dtypes=dtypes, block=block, only=only, form=form, device=device, large=large, timeout=timeout)
    started = time.monotonic()
    cases = build_suite(dtypes, square_only=square_only, only=only, large=large)
    infos, results = run_targets(targets, cases, form=form, device=device, timeout=timeout)
    seconds = time.monotonic() - started
    reports = {}
    for target, info, raw in zip(targets, infos, results):
        outcomes = [judge(c, raw.get(c.id, {}), info.form, block, limit, overflow_limit) for c in cases]
        reports[target] = Report(target, info, cases, outcomes, dtypes, block, seconds, score)
    return reports


def check(target: str, **options) -> Report:
    """Run the suite against one target, in child processes of its own; options as for ``check_many``."""
    return check_many([target], **options)[target]
