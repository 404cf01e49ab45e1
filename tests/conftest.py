"""Test set-up: the Triton interpreter on machines without a GPU, and the `gpu` marker's skip.

TRITON_INTERPRET must be set before triton decorates the kernels (at import), so it is set here,
before any test module imports tileflip's kernels.
"""

import os

import pytest
import torch
from helpers import NO_INTERPRETER_FLAG

HAS_GPU = torch.cuda.is_available()
if not HAS_GPU and not os.environ.get(NO_INTERPRETER_FLAG):  # set by helpers.without_interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")


GPUS = torch.cuda.device_count() if HAS_GPU else 0


def pytest_collection_modifyitems(config, items):
    no_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    one_gpu = pytest.mark.skip(reason="needs two CUDA GPUs")
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(no_gpu)
        elif "multigpu" in item.keywords and GPUS < 2:
            item.add_marker(one_gpu)


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
