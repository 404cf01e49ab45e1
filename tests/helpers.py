"""Shared test helpers: non-zero random bits, poisoning, bit-for-bit comparison, and a clean process for
tests that compile kernels for sm_90."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
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


def check_permute_off_boundaries(shape, dims, dtype, x_offset: int, out_offset: int, backend: str) -> None:
    """x and out views at element offsets ``x_offset`` / ``out_offset`` of larger CUDA buffers (so at any
    byte alignment): ``tileflip.permute`` on ``backend`` gives exact bits and writes nothing around out."""
    import tileflip

    numel = torch.Size(shape).numel()
    x = random_bits((numel + 32,), dtype, "cuda", seed=3)[x_offset : x_offset + numel].view(shape)
    buf = poisoned((numel + 64,), dtype, "cuda")
    out = buf[out_offset : out_offset + numel].view(tuple(shape[d] for d in dims))
    tileflip.permute(x, dims, out, backend=backend)
    assert_bits_equal(out, x.permute(dims).contiguous())
    assert_bits_equal(buf[:out_offset], poisoned((out_offset,), dtype, "cuda"))
    rest = buf[out_offset + numel :]
    assert_bits_equal(rest, poisoned(tuple(rest.shape), dtype, "cuda"))


def check_permute_exact(x: torch.Tensor, dims, backend: str) -> None:
    """``tileflip.permute`` of ``x`` on ``backend`` into a poisoned ``out`` gives ``x.permute(dims)``'s bits."""
    import tileflip

    out = poisoned(tuple(x.shape[d] for d in dims), x.dtype, x.device)
    tileflip.permute(x, dims, out, backend=backend)
    assert_bits_equal(out, x.permute(dims).contiguous())


def check_permute_refused(x: torch.Tensor, dims, backend: str, reason: str) -> None:
    """``tileflip.permute(x, dims, out, backend=backend)`` raises a ValueError matching ``reason`` and
    leaves the poisoned ``out`` as it was."""
    import pytest

    import tileflip

    shape = tuple(x.shape[d] for d in dims)
    out = poisoned(shape, x.dtype, x.device)
    with pytest.raises(ValueError, match=reason):
        tileflip.permute(x, dims, out, backend=backend)
    assert_bits_equal(out, poisoned(shape, x.dtype, x.device))


def check_emulated_permute(shape, dims, E, x_offset, out_offset, seed, launch_of, emulate, strided=False):
    """Emulate a CUDA permute kernel on x (contiguous, or every other index of its first dimension) at byte
    offsets of aligned buffers and compare with x.permute(dims); nothing around the output may be written.
    ``launch_of(plan, E)`` gives the kernel's launch (it must take the case); ``emulate(plan, go, mem,
    span, out, out_at)`` runs its warps on the byte arrays and returns which output bytes it wrote.
    Returns the launch."""
    import numpy as np

    from tileflip import plan as planner

    dt = {1: torch.uint8, 2: torch.int16}[E]
    g = torch.Generator().manual_seed(seed)
    full = (2 * shape[0], *shape[1:]) if strided else shape
    numel = torch.Size(full).numel()
    mem = torch.randint(1, 255, (numel * E + 64,), dtype=torch.uint8, generator=g)
    x = mem[x_offset : x_offset + numel * E].view(dt).view(full)
    if strided:
        x = x[::2]
    p = planner.plan_permute(tuple(x.shape), tuple(x.stride()), tuple(dims), E)
    go = launch_of(p, E)
    assert go is not None
    ref = x.permute(dims).contiguous().view(torch.uint8).reshape(-1).numpy()
    out = np.full(ref.size + 64, 0xA5, np.uint8)
    written = emulate(p, go, mem.numpy(), (x_offset, x_offset + numel * E), out, out_offset)
    assert np.array_equal(out[out_offset : out_offset + ref.size], ref)
    assert written[out_offset : out_offset + ref.size].all() and written.sum() == ref.size
    return go


# The permute launchers that a test of one CUDA kernel forbids, besides the other CUDA kernels' own.
OTHER_PERMUTE_KERNELS = ("triton.permute.launch", "triton.transpose.launch", "cuda.permute.launch")


def forbid_kernels(monkeypatch, *names: str) -> None:
    """Make each named launcher (``"module.attribute"`` under ``tileflip.kernels``) fail the test if called."""
    import importlib

    for name in names:
        module_name, attribute = name.rsplit(".", 1)
        module = importlib.import_module(f"tileflip.kernels.{module_name}")

        def refuse(*args, name=name, **kwargs):
            raise AssertionError(f"{name} was called")

        monkeypatch.setattr(module, attribute, refuse)


def without_interpreter(test):
    """Run ``test`` in a process where Triton's interpreter is off.

    A test that compiles a kernel for sm_90 cannot run after interpreted kernels with reductions
    (``tl.max``) in the same process: Triton 3.6's interpreter leaves ``triton.language.core`` patched
    after them, and the compiler then fails (hidden while Triton's compile cache holds the kernel, so it
    shows on a fresh machine). Under the interpreter the test runs again in a child pytest process
    without TRITON_INTERPRET, and fails where the child fails; elsewhere it runs in place.

    A child costs a start of pytest, torch and triton, so the first such test of a module to run starts
    one child for every such test of that module this process collected (``pending``), and the others
    take their verdicts from it: no interpreter runs in that child, which is all the tests need. A test
    that child did not finish (it died or timed out in it or before it) runs again in a child of its own."""

    @functools.wraps(test)
    def run(*args, **kwargs):
        if os.environ.get("TRITON_INTERPRET") != "1":
            return test(*args, **kwargs)
        node = os.environ["PYTEST_CURRENT_TEST"].rsplit(" ", 1)[0]  # "<node id> (call)"
        if node not in _child_reports:
            module = node.split("::")[0]
            batch = [n for n in pending if n.split("::")[0] == module and n not in _child_reports]
            _run_child(batch if node in batch else [node])
        if not any(r["when"] == "teardown" for r in _child_reports[node]):  # that child stopped before its end
            _run_child([node])
        _assert_ran_and_passed(node)

    run.without_interpreter = True
    return run


# Set in the child of ``without_interpreter``: the file where conftest appends each test report as JSON.
CHILD_REPORTS = "TILEFLIP_TEST_CHILD_REPORTS"
# Node ids of the ``without_interpreter`` tests this process collected, filled by conftest.
pending: list[str] = []
# node id -> the child's reports on it (setup, call, teardown), and the end of that child's output.
_child_reports: dict[str, list[dict]] = {}
_child_output: dict[str, str] = {}


def _run_child(nodes: list[str]) -> None:
    """Run ``nodes`` in one child pytest without the interpreter and keep its reports and output."""
    with tempfile.TemporaryDirectory(prefix="tileflip-child-") as folder:
        path = os.path.join(folder, "reports.jsonl")
        env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "PYTEST_CURRENT_TEST")}
        env[NO_INTERPRETER_FLAG] = "1"
        env[CHILD_REPORTS] = path
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *nodes]
        try:
            proc = subprocess.run(command, cwd=Path(__file__).resolve().parents[1], env=env, capture_output=True,
                                  text=True, timeout=600 * len(nodes))  # fmt: skip
            tail = f"the child pytest exited with status {proc.returncode}:\n{proc.stdout[-4000:]}{proc.stderr[-2000:]}"
        except subprocess.TimeoutExpired as stop:
            tail = f"the child pytest timed out after {stop.timeout} s"
        reports: dict[str, list[dict]] = {node: [] for node in nodes}
        if os.path.exists(path):
            with open(path) as f:
                for line in f:
                    report = json.loads(line)
                    reports.setdefault(report["nodeid"], []).append(report)
    _child_reports.update(reports)
    _child_output.update(dict.fromkeys(nodes, tail))


def _assert_ran_and_passed(node: str) -> None:
    """The child ran the test (not skipped) and every phase passed."""
    reports, tail = _child_reports[node], _child_output[node]
    failed = [r for r in reports if r["outcome"] == "failed"]
    ran = any(r["when"] == "call" and r["outcome"] == "passed" for r in reports)
    detail = "\n".join(f"{r['when']}: {r['outcome']}\n{r['longrepr']}" for r in failed or reports)
    assert ran and not failed, f"{node} in the child without the interpreter:\n{detail[-6000:]}\n{tail}"
