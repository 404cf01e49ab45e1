"""Shared test helpers: non-zero random bits, poisoning, bit-for-bit comparison, and a clean process for
tests that compile kernels for sm_90."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import torch

# Set in the child process of ``without_interpreter``: conftest then leaves TRITON_INTERPRET unset.
NO_INTERPRETER_FLAG = "TILEFLIP_TEST_WITHOUT_INTERPRETER"

INT_OF_SIZE = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
POISON_BYTE = 0xA5


def random_bits(shape, dtype, device="cpu", seed=0) -> torch.Tensor:
    """A tensor of ``dtype`` whose bytes are random (NaN payloads, denormals and all); bool gets 0/1."""
    gen = torch.Generator().manual_seed(seed)
    numel = 1
    for s in shape:
        numel *= s
    if dtype == torch.bool:
        return torch.randint(0, 2, tuple(shape), generator=gen).bool().to(device)
    size = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(1, 256, (max(numel, 1) * size,), dtype=torch.uint8, generator=gen)
    return raw[: numel * size].view(dtype).reshape(shape).to(device)


def poisoned(shape, dtype, device="cpu") -> torch.Tensor:
    out = torch.empty(shape, dtype=dtype, device=device)
    out.view(-1).view(torch.uint8).fill_(POISON_BYTE)
    return out


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(INT_OF_SIZE[t.element_size()])


def assert_bits_equal(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Exact comparison: shape, dtype, device, contiguity, then every bit (as integers)."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.device == expected.device
    assert actual.is_contiguous(), actual.stride()
    a, e = bits(actual).cpu(), bits(expected.contiguous()).cpu()
    diff = (a != e).nonzero()
    assert diff.numel() == 0, f"{len(diff)} of {a.numel()} elements differ; first at {diff[:5].tolist()}"


def without_interpreter(test):
    """Run ``test`` in a process where Triton's interpreter is off.

    A test that compiles a kernel for sm_90 cannot run after interpreted kernels with reductions
    (``tl.max``) in the same process: Triton 3.6's interpreter leaves ``triton.language.core`` patched
    after them, and the compiler then fails (hidden while Triton's compile cache holds the kernel, so it
    shows on a fresh machine). Under the interpreter the test runs again, by itself, as a child pytest
    process without TRITON_INTERPRET, and fails where the child fails; elsewhere it runs in place."""

    @functools.wraps(test)
    def run(*args, **kwargs):
        if os.environ.get("TRITON_INTERPRET") != "1":
            return test(*args, **kwargs)
        node = os.environ["PYTEST_CURRENT_TEST"].rsplit(" ", 1)[0]  # "<node id> (call)"
        env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "PYTEST_CURRENT_TEST")}
        env[NO_INTERPRETER_FLAG] = "1"
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node],
            cwd=Path(__file__).resolve().parents[1], env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        ran = re.search(r"^1 passed", proc.stdout, re.MULTILINE)  # the one test ran (not skipped) and passed
        assert proc.returncode == 0 and ran, proc.stdout[-4000:] + proc.stderr[-2000:]

    return run
