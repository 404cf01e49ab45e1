"""The child process of `tileflip check`: loads the target, runs the parent's cases, writes what came out.

Run as ``python -m tileflip.check.child WORKDIR FIRST``. ``WORKDIR/spec.json`` (written by
``tileflip.check.runner``) names the targets, the form, the device, the cases and the jobs, (target, case)
pairs in order; the inputs are ``.npy`` bit buffers beside it. The child runs the jobs from index
``FIRST`` on and for each one writes ``progress`` (the job running now) before it starts and
``result_<job>.json`` (plus ``out_<job>.npy``) when it is done, so that when the process dies the
parent knows which case killed it. It loads each target on its first job and says how in
``loaded_<target>.json``; a target that cannot be loaded ends the child with ``load_error.json``.

The child imports torch (inside its functions: the parent imports this module for its exit statuses),
and triton only when the target does. Without a GPU it sets ``TRITON_INTERPRET=1`` before importing the
target, so Triton kernels run in the interpreter. It judges nothing: it only runs, and copies back the
output buffer with its guard bands.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import re
import sys
import traceback

import numpy as np

from tileflip.check.cases import INT32_LIMIT

RESTART_EXIT = 75  # the child asks for a fresh process (a CUDA error leaves its context unusable)
LOAD_ERROR_EXIT = 3  # the target could not be loaded: load_error.json says why

# Rows of a large case's x built per step: bounds the int64 temporary to a few GiB.
_LARGE_CHUNK_ROWS = 4096


def _write_json(path: str, data: dict) -> None:
    # Written aside then renamed: a death mid-write must not leave a half result the parent would trust.
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def _error_text(error: BaseException, frames: int = 6) -> str:
    """The target's last frames and the exception, without the child's own frames around the call."""
    own = os.path.abspath(__file__)
    stack = [f for f in traceback.extract_tb(error.__traceback__) if os.path.abspath(f.filename) != own]
    listing = "".join(traceback.format_list(stack[-frames:]))
    return (listing + "".join(traceback.format_exception_only(type(error), error))).rstrip()


def _choose_device(requested: str) -> str:
    if requested == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
        if requested == "cpu":
            os.environ["TRITON_INTERPRET"] = "1"
    if requested == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda was asked for, but torch sees no CUDA device")
    return requested


def split_target(ref: str) -> tuple[str, str | None, str]:
    """``(module, file, function)`` of a target; ``file`` is the absolute path for a file target, else None.

    Raises ValueError for a malformed target and FileNotFoundError for a missing file; imports nothing,
    so the command line can refuse such a target before starting a child."""
    module_part, sep, attr = ref.rpartition(":")
    if not sep or not module_part or not attr:
        raise ValueError(f"a target is path/to/file.py:function or package.module:function, got {ref!r}")
    if module_part.endswith(".py") or "/" in module_part or os.sep in module_part:
        path = os.path.abspath(module_part)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no such file: {path}")
        return module_part, path, attr
    return module_part, None, attr


def load_target(ref: str):
    """The callable named by ``path/to/file.py:function`` or ``package.module:function``."""
    module_part, path, attr = split_target(ref)
    if path:
        name = "tileflip_check_target_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
        # The file's folder goes on the path so that it can import its neighbours, as a script would.
        sys.path.insert(0, os.path.dirname(path))
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(module_part)
    obj = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{ref} is not a function but an object of type {type(obj).__name__}")
    return obj


def resolve_form(f, requested: str) -> str:
    """'out' when f takes a second positional argument, else 'return'."""
    if requested != "auto":
        return requested
    try:
        params = inspect.signature(f).parameters.values()
    except (TypeError, ValueError):
        return "return"
    kinds = [p.kind for p in params]
    positional = sum(k in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD) for k in kinds)
    return "out" if positional >= 2 or inspect.Parameter.VAR_POSITIONAL in kinds else "return"


def _prepoison(torch, device: str) -> bool:
    """Make torch fill every new tensor (NaN, or the largest integer), so an unwritten y element shows."""
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    filled = bool(torch.isnan(torch.empty(8, device=device)).all())
    torch.use_deterministic_algorithms(False)
    return filled


class _Run:
    def __init__(self, f, form: str, device: str, workdir: str):
        import torch

        self.torch, self.f, self.form, self.device, self.workdir = torch, f, form, device, workdir
        self.prepoisoned = _prepoison(torch, device) if form == "return" else False

    def describe(self) -> dict:
        interpreter = os.environ.get("TRITON_INTERPRET") == "1"
        return {"form": self.form, "device": self.device, "interpreter": interpreter, "prepoisoned": self.prepoisoned}

    def signed(self, size: int):
        t = self.torch
        return {1: t.int8, 2: t.int16, 4: t.int32, 8: t.int64}[size]

    def sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def context_broken(self) -> bool:
        """After a CUDA error the context may refuse all further work; only a fresh process recovers."""
        if self.device != "cuda":
            return False
        try:
            self.torch.cuda.synchronize()
            return False
        except Exception:  # noqa: BLE001 - whatever the error, the context is unusable
            return True

    def call(self, x, M: int, N: int, out_buf, guard: int):
        """Run the target; returns the flat signed output (with guards in the out form) or a result problem."""
        if self.form == "out":
            out = out_buf.view(x.dtype)[guard : guard + M * N].view(N, M)
            self.f(x, out)
            self.sync()
            return out_buf, None
        y = self.f(x)
        self.sync()
        torch = self.torch
        if not isinstance(y, torch.Tensor):
            return None, f"returned {type(y).__name__}, not a tensor"
        if tuple(y.shape) != (N, M) or y.dtype != x.dtype:
            return None, f"returned shape {tuple(y.shape)} {y.dtype}, expected ({N}, {M}) {x.dtype}"
        return y.contiguous().view(self.signed(x.element_size())).reshape(-1), None

    def case(self, entry: dict, out_file: str) -> dict:
        # Only the f(x) -> y form needs torch to fill new tensors; a child may run targets of both forms.
        self.torch.use_deterministic_algorithms(self.form == "return", warn_only=True)
        if entry["large"]:
            return self.large_case(entry)
        torch = self.torch
        M, N, size = entry["M"], entry["N"], entry["size"]
        original = np.load(os.path.join(self.workdir, entry["x_file"])).view(f"i{size}")
        buf = torch.from_numpy(original.copy()).to(self.device)
        x = buf.view(getattr(torch, entry["dtype"])).as_strided((M, N), entry["strides"], entry["offset"])
        data, problem = self.call_poisoned(x, M, N, entry)
        if problem:
            return {"outcome": "bad-result", "message": problem}
        np.save(os.path.join(self.workdir, out_file), data.cpu().numpy())
        x_changed = int(np.count_nonzero(buf.cpu().numpy() != original))
        return {"outcome": "ok", "out_file": out_file, "x_changed": x_changed}

    @staticmethod
    def poison_value(entry: dict) -> int:
        size = entry["size"]
        return np.array(entry["poison"], dtype=f"u{size}").view(f"i{size}").item()

    def call_poisoned(self, x, M: int, N: int, entry: dict):
        """Run the target on x; for f(x, out) the output sits in a poisoned buffer with guard bands."""
        size, guard = entry["size"], entry["guard"]
        poison = self.poison_value(entry)
        out_buf = None
        if self.form == "out":
            out_buf = self.torch.full((2 * guard + M * N,), poison, dtype=self.signed(size), device=self.device)
        return self.call(x, M, N, out_buf, guard)

    def large_case(self, entry: dict) -> dict:
        """Past 2**31 elements: build x here, compare with torch's own x.t() here, send back a summary.

        Shipping 2**31 values to the parent would cost more than the kernel, so only counts and the first
        wrong positions travel; x's buffer is not watched for writes in this case."""
        torch = self.torch
        M, N, size, guard = entry["M"], entry["N"], entry["size"], entry["guard"]
        if M * N >= INT32_LIMIT and self.device != "cuda":
            return {"outcome": "skipped", "message": f"needs a GPU: {M}x{N} has {M * N} elements"}
        signed = self.signed(size)
        x_bits = torch.empty((M, N), dtype=signed, device=self.device)
        for r0 in range(0, M, _LARGE_CHUNK_ROWS):
            r1 = min(M, r0 + _LARGE_CHUNK_ROWS)
            # A prime period keeps neighbours distinct without values a float dtype cannot hold exactly.
            values = torch.arange(r0 * N, r1 * N, device=self.device) % 2039 + 1
            x_bits[r0:r1] = values.view(r1 - r0, N).to(getattr(torch, entry["dtype"])).view(signed)
        x = x_bits.view(getattr(torch, entry["dtype"]))
        data, problem = self.call_poisoned(x, M, N, entry)
        if problem:
            return {"outcome": "bad-result", "message": problem}
        poison = self.poison_value(entry)
        g = guard if self.form == "out" else 0
        region = data[g : g + M * N].view(N, M)
        outside = int((data[:g] != poison).sum() + (data[g + M * N :] != poison).sum()) if g else 0
        return {"outcome": "ok", "summary": _summarize(torch, region, x_bits, poison, outside)}


def _summarize(torch, region, x_bits, poison: int, outside: int) -> dict:
    """Counts and the first wrong element in out order and in x order, without moving the tensors."""
    N, M = region.shape
    wrong = region != x_bits.t()
    count = int(wrong.sum())
    summary = {
        "wrong": count,
        "never_written": int((wrong & (region == poison)).sum()),
        "outside": outside,
        "first_wrong_out_flat": None,
        "first_wrong_x_flat": None,
    }
    if not count:
        return summary
    rows = wrong.any(dim=1)
    j0 = int(rows.to(torch.uint8).argmax())
    summary["first_wrong_out_flat"] = j0 * M + int(wrong[j0].to(torch.uint8).argmax())
    first_i = wrong.to(torch.uint8).argmax(dim=1).to(torch.int64)
    js = torch.arange(N, device=region.device)
    x_flat = torch.where(rows, first_i * N + js, torch.full_like(js, M * N))
    summary["first_wrong_x_flat"] = int(x_flat.min())
    return summary


def _load(ref: str, requested_form: str, device: str, workdir: str) -> _Run:
    f = load_target(ref)
    form = resolve_form(f, requested_form)
    return _Run(f, form, device, workdir)


def main(argv: list[str]) -> int:
    workdir, first = argv[0], int(argv[1])
    with open(os.path.join(workdir, "spec.json")) as f:
        spec = json.load(f)
    device, runs = None, {}
    for k in range(first, len(spec["jobs"])):
        t, c = spec["jobs"][k]
        with open(os.path.join(workdir, "progress"), "w") as p:
            p.write(str(k))
        if t not in runs:
            try:
                device = device or _choose_device(spec["device"])
                runs[t] = _load(spec["targets"][t], spec["form"], device, workdir)
            except Exception as e:  # noqa: BLE001 - any failure to load is reported to the parent, with its message
                _write_json(os.path.join(workdir, "load_error.json"), {"target": t, "message": _error_text(e)})
                return LOAD_ERROR_EXIT
            _write_json(os.path.join(workdir, f"loaded_{t}.json"), runs[t].describe())
        broken = False
        try:
            result = runs[t].case(spec["cases"][c], f"out_{k}.npy")
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: BLE001 - SystemExit from a target is that case's failure too
            result = {"outcome": "exception", "message": _error_text(e)}
            broken = runs[t].context_broken()
        _write_json(os.path.join(workdir, f"result_{k}.json"), result)
        if broken:
            return RESTART_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
