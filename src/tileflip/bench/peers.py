"""The callables the benchmark times for one case: tileflip's backends and the peers (torch eager,
torch.compile, CuPy in this process; JAX/XLA in a child process of its own, ``tileflip.bench.xla_child``,
which never loads torch, so that the two do not share the device's memory pool)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tileflip.bench.cases import TILEFLIP_BACKENDS, Case

XLA_CHILD = "tileflip.bench.xla_child"


# the permute backends a permute suite can time
PERMUTE_STRATEGIES = ("auto", "triton", "cuda-staged", "cuda-realign", "cuda-thin", "cuda-split", "cuda-shift")


def plan_of(x, perm):
    """The permute plan of ``x`` by ``perm`` (what ``auto`` runs)."""
    from tileflip import plan

    return plan.plan_permute(tuple(x.shape), tuple(x.stride()), tuple(perm), x.element_size())


def op_functions(case: Case, x, out, backends):
    """(backend, callable) pairs for one case; a peer that cannot run here is left out with a note."""
    import torch

    import tileflip
    from tileflip.ops.backends import CUDA_PERMUTE_BACKENDS, moved_as, permute_refusal, vec_refusal

    fns, notes = [], {}
    if case.perm is not None:
        moved_x, moved_out, moved_plan = moved_as(x, out, plan_of(x, case.perm))  # as the call will see them
        for b in backends:
            if b in PERMUTE_STRATEGIES:  # auto and the strategies it chooses among
                refusal = b in CUDA_PERMUTE_BACKENDS and permute_refusal(b, moved_x, moved_plan, moved_out)
                if refusal:
                    notes[b] = f"not for this case: {refusal}"
                    continue
                fns.append((b, lambda b=b: tileflip.permute(x, case.perm, out, backend=b)))
            elif b == "torch-contiguous":
                fns.append((b, lambda: x.permute(case.perm).contiguous()))
            elif b == "torch-copy":
                fns.append((b, lambda: out.copy_(x.permute(case.perm))))
            elif b == "torch-compile":
                torch._dynamo.reset()  # a fresh cache per case: past 8 recompiles dynamo falls back to eager
                compiled = torch.compile(lambda t: t.permute(case.perm).contiguous(), dynamic=False)
                fns.append((b, lambda: compiled(x)))
            elif b == "cupy":
                _add_cupy(fns, notes, x, out, case.perm)
        return fns, notes
    for b in backends:
        refusal = b == "cuda-vec" and vec_refusal(x.element_size(), x.stride(1), x.shape[0], out.data_ptr())
        if refusal:
            notes[b] = f"not for this case: {refusal}"
        elif b in TILEFLIP_BACKENDS:
            fns.append((b, lambda b=b: tileflip.transpose(x, out, backend=b)))
        elif b == "torch-contiguous":
            fns.append((b, lambda: x.t().contiguous()))
        elif b == "torch-copy":
            fns.append((b, lambda: out.copy_(x.t())))
        elif b == "torch-compile":
            torch._dynamo.reset()  # a fresh cache per case: past 8 recompiles dynamo falls back to eager
            compiled = torch.compile(lambda t: t.t().contiguous(), dynamic=False)
            fns.append((b, lambda: compiled(x)))
        elif b == "cupy":
            _add_cupy(fns, notes, x, out, None)
    return fns, notes


def cupy_fn(x, out, perm=None):
    """CuPy's copy of ``x``'s transpose (or permute) into ``out``."""
    import cupy

    from tileflip.kernels.dtypes import as_uint

    # CuPy has no bf16 or fp8: it moves the same bits as unsigned integers, as tileflip does.
    a = cupy.asarray(as_uint(x))
    o = cupy.asarray(as_uint(out))
    view = a.T if perm is None else a.transpose(perm)
    return lambda: cupy.copyto(o, view)


def _add_cupy(fns: list, notes: dict, x, out, perm) -> None:
    try:
        fns.append(("cupy", cupy_fn(x, out, perm)))
    except ImportError as e:
        notes["cupy"] = f"not installed: {e}"


def run_xla(cases: list[Case], quick: bool, check: bool = False) -> dict:
    """JAX/XLA timings (ms) per case label, from a child process with preallocation off (``check``: and
    whether each result's bits are right); {"error": text} when the child fails."""
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    payload = json.dumps({"cases": [{"shape": list(c.shape), "dtype": c.dtype, "perm": c.perm and list(c.perm),
                                     "label": c.label} for c in cases], "quick": quick, "check": check})  # fmt: skip
    try:
        proc = subprocess.run([sys.executable, "-m", XLA_CHILD], input=payload, capture_output=True, text=True,
                              env=env, timeout=600)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": str(e)}
    if proc.returncode != 0:
        return {"error": proc.stderr[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])
