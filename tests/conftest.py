"""Test set-up: the Triton interpreter on machines without a GPU, and the `gpu` marker's skip.

TRITON_INTERPRET must be set before triton decorates the kernels (at import), so it is set here,
before any test module imports tileflip's kernels.
"""

import os

import pytest
import torch

HAS_GPU = torch.cuda.is_available()
if not HAS_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def device():
    return "cuda" if HAS_GPU else "cpu"
