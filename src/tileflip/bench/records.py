"""What every benchmark shares: run metadata, the timed median, inputs, medians over rounds, results files.

A results file is ``<out>/<device>/<suite>.json`` (``device`` from the GPU's name, e.g. ``h200``): a JSON
object with its provenance (``suite``, ``device``, ``gpu``, ``date``, ``command``, ``file``) and its
``records``, the long-form rows (one per measurement). A ``--part K/N`` run merges its records into the
file, replacing the records of its own cases, and lists itself under ``parts``; a whole run replaces it.
"""

from __future__ import annotations

import datetime as _dt
import json
import statistics
from pathlib import Path

from tileflip.plan.device import card_of

DEFAULT_OUT = "benchmarks/results"


def now() -> str:
    """The current UTC time, to the second, ISO 8601."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def meta() -> dict:
    """Fields every record of a run carries: the GPU, the torch and triton versions, the time, the flush."""
    import torch
    import triton

    from tileflip.bench import timing

    return {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "time": now(),
        "flush": timing.FLUSH_MODE,  # how the L2 was flushed before each timed call
    }


def time_ms(fn, quick: bool) -> tuple[float, float, float]:
    """Median, 20th and 80th percentile of ``fn``'s device time in ms (``tileflip.bench.timing``)."""
    from tileflip.bench import timing

    return timing.summarize(timing.device_times(fn, warmup=10 if quick else 25, reps=40 if quick else 100))


def numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def make_input(shape, dtype: str, device="cuda"):
    """A tensor of ``shape`` and ``dtype`` (a torch name) of random bytes 1 to 254 (no NaN patterns)."""
    import torch

    torch_dtype = getattr(torch, dtype)
    size = torch.empty((), dtype=torch_dtype).element_size()
    raw = torch.randint(1, 255, (numel(shape) * size,), dtype=torch.uint8, device=device)
    return raw.view(torch_dtype).view(tuple(shape))


def case_key(r: dict) -> tuple:
    """(shape, dtype) of a record; for a permute the shape is (shape, perm)."""
    return (tuple(r["shape"]) if not r.get("perm") else (tuple(r["shape"]), tuple(r["perm"])), r["dtype"])


def medians(records: list[dict]) -> dict:
    """{(shape, dtype, backend): (median ms, median GB/s, median fraction of copy)} over rounds; for a
    permute the shape key is (shape, perm)."""
    groups: dict = {}
    for r in records:
        groups.setdefault((*case_key(r), r["backend"]), []).append(r)
    return {
        k: (statistics.median(v["ms"] for v in rs), statistics.median(v["gbps"] for v in rs),
            statistics.median(v["fraction_of_copy"] for v in rs))
        for k, rs in groups.items()
    }  # fmt: skip


def device_label(gpu: str) -> str:
    """The results folder of a GPU, its card's name as the device constants use it (``plan.device.card_of``):
    'NVIDIA H200' -> 'h200', 'NVIDIA H100 80GB HBM3' -> 'h100'."""
    return card_of(gpu)


def results_path(out_dir, device: str, suite: str) -> Path:
    return Path(out_dir) / device / f"{suite}.json"


def load_results(path, option: str = "--plot") -> dict:
    """A results file as {provenance..., "records": [...]}; a bare JSON list of records is read as one.
    Anything else is a ValueError naming ``option`` and the file."""
    try:
        data = json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{option} {str(path)!r} is not JSON ({e})") from None
    if isinstance(data, list):
        data = {"records": data}
    records = data.get("records") if isinstance(data, dict) else None
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise ValueError(f"{option} {str(path)!r} is not a results file of tileflip bench (a JSON object with "
                         "a list of records)")  # fmt: skip
    return data


def load_records(path, option: str = "--plot") -> list[dict]:
    return load_results(path, option)["records"]


def _has_case(r: dict) -> bool:
    return r.get("shape") is not None and "dtype" in r


def write_results(records: list[dict] | None, suite: str, out_dir, command: str, *, part: str | None = None,
                  device: str | None = None, gpu: str | None = None, extra: dict | None = None) -> Path:  # fmt: skip
    """Write ``records`` to ``<out_dir>/<device>/<suite>.json`` with their provenance (``extra``: more
    top-level fields; ``records=None``: none, ``extra`` is the content); a ``part`` ("K/N") merges them
    into the file there, replacing the records of its cases."""
    gpu = gpu or (records[0]["gpu"] if records else "")
    device = device or device_label(gpu)
    path = results_path(out_dir, device, suite)
    stamp = now()
    head = {"suite": suite, "device": device, "gpu": gpu, "date": stamp[:10], "command": command,
            "file": str(path)}  # fmt: skip
    if part and path.exists():
        old = load_results(path, "results file")
        mine = {case_key(r) for r in records if _has_case(r)}
        kept = [r for r in old["records"] if not (_has_case(r) and case_key(r) in mine)]
        records = kept + records
        parts = dict(old.get("parts", {}))
    else:
        parts = {}
    if part:
        parts[part] = {"command": command, "date": stamp[:10]}
        head["parts"] = dict(sorted(parts.items()))
    data = {**head, **(extra or {})}
    if records is not None:
        data["records"] = records
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path
