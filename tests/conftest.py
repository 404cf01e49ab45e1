"""Test set-up: the Triton interpreter on machines without a GPU, the `gpu` marker's skip, one torch
thread per pytest-xdist worker, and the reports of helpers.without_interpreter's child processes.

TRITON_INTERPRET must be set before triton decorates the kernels (at import), so it is set here,
before any test module imports tileflip's kernels.
"""

import json
import os

import helpers
import pytest
import torch
from helpers import NO_INTERPRETER_FLAG

HAS_GPU = torch.cuda.is_available()
if not HAS_GPU and not os.environ.get(NO_INTERPRETER_FLAG):  # set by helpers.without_interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Under pytest-xdist (`make test`) every core already runs a worker: torch's intra-op threads, in the
# worker and in the processes it starts, would only contend with the other workers for the cores.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")


GPUS = torch.cuda.device_count() if HAS_GPU else 0


@pytest.hookimpl(trylast=True)  # after pytest's own selection (-k, -m) has removed what will not run
def pytest_collection_modifyitems(config, items):
    no_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    one_gpu = pytest.mark.skip(reason="needs two CUDA GPUs")
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(no_gpu)
        elif "multigpu" in item.keywords and GPUS < 2:
            item.add_marker(one_gpu)
    # The tests helpers.without_interpreter runs in children: every such test this process collected.
    helpers.pending[:] = [
        item.nodeid
        for item in items
        if getattr(getattr(item, "obj", None), "without_interpreter", False) and not item.get_closest_marker("skip")
    ]


def pytest_runtest_logreport(report):
    """In the child of helpers.without_interpreter: each report, for the parent to read."""
    path = os.environ.get(helpers.CHILD_REPORTS)
    if path:
        with open(path, "a") as f:
            line = {"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome}
            f.write(json.dumps({**line, "longrepr": report.longreprtext}) + "\n")


@pytest.fixture
def device():
    return "cuda" if HAS_GPU else "cpu"


def pytest_terminal_summary(terminalreporter):
    """One line on why tests skipped: most need a CUDA GPU (they run with `pytest -m gpu` on one)."""
    reasons: dict = {}
    for report in terminalreporter.stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        reasons[reason] = reasons.get(reason, 0) + 1
    gpu = reasons.pop("needs a CUDA GPU", 0)
    if gpu:
        terminalreporter.write_line(f"{gpu} tests need a CUDA GPU: skipped here, run them with `pytest -m gpu` on one")
    for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{n} skipped: {reason}")
