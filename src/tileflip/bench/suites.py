"""``tileflip bench``: tileflip against a same-run device copy and the peers, as long-form JSON.

Every figure is a device-event timing with L2 flushed and the host's launch latency kept out
(``tileflip.bench.timing``), the median of its repetitions, with the 20th and 80th percentiles kept as
spread. Each case is measured in rounds: in every round the device-to-device copy of the same byte
count is timed first, then every op, so the copy and the ops are interleaved and the fraction of copy
compares figures of one run. Host time per call is its own suite (``--suite host``).

Bytes moved (the byte formula of every GB/s here): ``2 * numel * element_size`` for a transpose, a
read of each element and a write of each element, the same as the copy of that many bytes.

Records (one per measurement): gpu, torch, triton, time, op, backend, shape, dtype, ms, gbps,
copy_gbps, fraction_of_copy, run, plus round, ms_p20, ms_p80 and, for ``auto``, the backend it chose.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SUITES = {
    # The foundation's figure: the large square in fp32.
    "square": {"shapes": [(16384, 16384)], "dtypes": ["float32"]},
    "2d": {
        "shapes": [
            (16384, 16384), (8192, 8192), (8192, 8191), (65536, 256), (256, 65536),
            (4096, 128), (2, 100000), (1024, 512), (31, 65),
        ],
        "dtypes": ["int8", "bfloat16", "float32", "float64"],
    },
    "2d-extra": {
        "shapes": [(16384, 16384), (8192, 8191), (65536, 256)],
        "dtypes": ["float8_e4m3fn", "float16", "int32", "complex64"],
    },
}  # fmt: skip

TILEFLIP_BACKENDS = ["triton", "triton-gather", "cuda-naive", "cuda-tiled", "cuda-tiled-nopad", "cuda-vec", "auto"]
PEERS = ["torch-contiguous", "torch-copy", "torch-compile", "cupy", "xla"]


@dataclass(frozen=True)
class Case:
    shape: tuple
    dtype: str
    perm: tuple | None = None  # None: a 2-D transpose; else an N-D permute

    @property
    def label(self) -> str:
        return f"{'x'.join(map(str, self.shape))} {self.dtype}" + (f" {self.perm}" if self.perm else "")

    @property
    def op(self) -> str:
        return "transpose" if self.perm is None else "permute"

    @property
    def out_shape(self) -> tuple:
        return self.shape[::-1] if self.perm is None else tuple(self.shape[d] for d in self.perm)


PERMUTE_NAMED = [
    Case((8, 4096, 32, 128), "bfloat16", (0, 2, 1, 3)),
    Case((8, 4096, 32, 128), "bfloat16", (0, 3, 2, 1)),
    Case((8, 4096, 32, 128), "bfloat16", (0, 2, 3, 1)),
    Case((64, 256, 56, 56), "float16", (0, 2, 3, 1)),
    Case((64, 56, 56, 256), "float16", (0, 3, 1, 2)),
]
PERMUTE_CASES_FILE = Path(__file__).resolve().parents[3] / "benchmarks" / "permute-random-cases.json"


def random_permute_cases(seed: int = 0, count: int = 40) -> list[Case]:
    """The random permute suite: ranks 3 to 6, fp32/bf16/int8, every dimension >= 2, >= 64 MiB each."""
    import random

    rng = random.Random(seed)
    sizes = {"float32": 4, "bfloat16": 2, "int8": 1}
    cases = []
    while len(cases) < count:
        rank = rng.randint(3, 6)
        dtype = rng.choice(sorted(sizes))
        shape = [rng.randint(2, 48) for _ in range(rank)]
        while _numel(shape) * sizes[dtype] < 64 << 20:
            shape[rng.randrange(rank)] *= 2
        perm = list(range(rank))
        while perm == sorted(perm):
            rng.shuffle(perm)
        if _numel(shape) * sizes[dtype] <= 512 << 20:
            cases.append(Case(tuple(shape), dtype, tuple(perm)))
    return cases


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def suite_cases(name: str, part: str | None = None) -> list[Case]:
    if name == "permute":
        cases = list(PERMUTE_NAMED)
    elif name == "permute-random":
        cases = random_permute_cases()
    else:
        spec = SUITES[name]
        cases = [Case(tuple(s), d) for d in spec["dtypes"] for s in spec["shapes"]]
    if part:
        k, n = (int(v) for v in part.split("/"))
        cases = cases[k - 1 :: n]
    return cases


def _meta():
    import torch
    import triton

    from tileflip.bench import timing

    return {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "flush": timing.FLUSH_MODE,  # how the L2 was flushed before each timed call (tileflip.timing)
    }


def _time(fn, quick: bool) -> tuple[float, float, float]:
    """Median, 20th and 80th percentile of device time in ms (``tileflip.bench.timing``: L2 flushed and the
    host's launch latency hidden before each repetition)."""
    from tileflip.bench import timing

    return timing.summarize(timing.device_times(fn, warmup=10 if quick else 25, reps=40 if quick else 100))


def _make_input(case: Case, device="cuda"):
    import torch

    dtype = getattr(torch, case.dtype)
    numel = _numel(case.shape)
    size = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(1, 255, (numel * size,), dtype=torch.uint8, device=device)
    return raw.view(dtype).view(case.shape)


def _cupy_fn(x, out, perm=None):
    import cupy

    from tileflip.kernels.dtypes import as_uint

    # CuPy has no bf16 or fp8: it moves the same bits as unsigned integers, as tileflip does.
    a = cupy.asarray(as_uint(x))
    o = cupy.asarray(as_uint(out))
    view = a.T if perm is None else a.transpose(perm)
    return lambda: cupy.copyto(o, view)


def op_functions(case: Case, x, out, backends):
    """(backend, callable) pairs for one case; a peer that cannot run here is left out with a note."""
    import torch

    import tileflip
    from tileflip.ops import core as ops

    fns, notes = [], {}
    if case.perm is not None:
        for b in backends:
            if b == "auto":
                fns.append((b, lambda: tileflip.permute(x, case.perm, out)))
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
        refusal = b == "cuda-vec" and ops.vec_refusal(x.element_size(), x.stride(1), x.shape[0], out.data_ptr())
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


def _add_cupy(fns: list, notes: dict, x, out, perm) -> None:
    try:
        fns.append(("cupy", _cupy_fn(x, out, perm)))
    except ImportError as e:
        notes["cupy"] = f"not installed: {e}"


def run_xla(cases: list[Case], quick: bool, check: bool = False) -> dict:
    """JAX/XLA timings (ms) per case label, from a child process with preallocation off (``check``: and
    whether each result's bits are right, ``bench_xla``)."""
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    payload = json.dumps({"cases": [{"shape": list(c.shape), "dtype": c.dtype, "perm": c.perm and list(c.perm),
                                     "label": c.label} for c in cases], "quick": quick, "check": check})  # fmt: skip
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "tileflip.bench.xla_child"],
            input=payload,
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": str(e)}
    if proc.returncode != 0:
        return {"error": proc.stderr[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(cases: list[Case], backends: list[str], rounds: int, quick: bool, log=print) -> list[dict]:
    import torch

    from tileflip import tuning

    meta = _meta()
    run_id = meta["time"]
    records = []
    xla = run_xla(cases, quick) if "xla" in backends else {}
    if "error" in xla:
        log(f"xla: left out ({xla['error'].strip().splitlines()[-1] if xla['error'].strip() else 'failed'})")
    for i, case in enumerate(cases):
        x = _make_input(case)
        out = torch.empty(case.out_shape, dtype=x.dtype, device="cuda")
        src = torch.empty(x.numel() * x.element_size(), dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        nbytes = 2 * x.numel() * x.element_size()
        fns, notes = op_functions(case, x, out, [b for b in backends if b != "xla"])
        for b, note in notes.items():
            log(f"  {b}: {note}")
        chosen = tuning.auto_backend(x) if case.perm is None else _permute_kind(x, case)
        for r in range(rounds):
            copy_ms, c20, c80 = _time(lambda d=dst, s=src: d.copy_(s), quick)
            copy_gbps = nbytes / copy_ms / 1e6
            row = dict(meta, op="copy", backend="copy", shape=list(case.shape), perm=case.perm, dtype=case.dtype,
                       ms=copy_ms,
                       ms_p20=c20, ms_p80=c80, gbps=copy_gbps, copy_gbps=copy_gbps, fraction_of_copy=1.0,
                       run=run_id, round=r)  # fmt: skip
            records.append(row)
            # In a fixed order, auto right after the copy (under the earlier zero_ flush an op timed right
            # after one whose loads carry evict_last measured faster, session 10 runs 12 and 15; the "l2"
            # flush of tileflip.timing empties the L2).
            timed = [(b, *_time(fn, quick)) for b, fn in fns]
            if case.label in xla.get("ms", {}):
                timed.append(("xla", xla["ms"][case.label], None, None))
            for b, ms, p20, p80 in timed:
                gbps = nbytes / ms / 1e6
                rec = dict(row, op=case.op, backend=b, ms=ms, ms_p20=p20, ms_p80=p80, gbps=gbps,
                           fraction_of_copy=gbps / copy_gbps)  # fmt: skip
                if b == "auto":
                    rec["auto_choice"] = chosen
                records.append(rec)
        log(f"[{i + 1}/{len(cases)}] {case.label}: " + summary_line(records, case))
        del x, out, src, dst
        torch.cuda.empty_cache()
    return records


def _permute_kind(x, case) -> str:
    from tileflip import plan

    return plan.plan_permute(tuple(x.shape), tuple(x.stride()), case.perm, x.element_size()).kind


def _case_key(r: dict):
    return (tuple(r["shape"]) if not r.get("perm") else (tuple(r["shape"]), tuple(r["perm"])), r["dtype"])


def medians(records: list[dict]) -> dict:
    """{(shape, dtype, backend): (median ms, median GB/s, median fraction of copy)} over rounds; for a
    permute the shape key is (shape, perm)."""
    groups: dict = {}
    for r in records:
        groups.setdefault((*_case_key(r), r["backend"]), []).append(r)
    return {
        k: (statistics.median(v["ms"] for v in rs), statistics.median(v["gbps"] for v in rs),
            statistics.median(v["fraction_of_copy"] for v in rs))
        for k, rs in groups.items()
    }  # fmt: skip


def summary_line(records: list[dict], case: Case) -> str:
    key = (case.shape if case.perm is None else (case.shape, case.perm), case.dtype)
    med = medians([r for r in records if _case_key(r) == key])
    parts = [f"{b} {f:.0%}" for (s, d, b), (_, _, f) in med.items() if b != "copy"]
    copy = med.get((*key, "copy"))
    return (f"copy {copy[1]:.0f} GB/s; " if copy else "") + ", ".join(parts)


def table(records: list[dict]) -> str:
    med = medians(records)
    cases = sorted({(s, d) for s, d, _ in med}, key=lambda c: (c[1], str(c[0])))
    backends = [b for b in ["copy", *TILEFLIP_BACKENDS, *PEERS] if any(k[2] == b for k in med)]
    head = f"{'shape':>12} {'dtype':<14}" + "".join(f"{b:>18}" for b in backends)
    lines = [head, "-" * len(head)]
    for s, d in cases:
        cells = []
        for b in backends:
            v = med.get((s, d, b))
            cells.append(f"{v[1]:>8.0f} {v[2]:>6.1%}   " if v else f"{'-':>18}")
        label = (
            "x".join(map(str, s))
            if isinstance(s[0], int)
            else "x".join(map(str, s[0])) + " " + ",".join(map(str, s[1]))
        )
        lines.append(f"{label:>12} {d:<14}" + "".join(f"{c:>18}" for c in cells))
    lines.append("each cell: GB/s (read + write bytes) and fraction of the same-run copy; medians over rounds")
    return "\n".join(lines)


def write(records: list[dict], suite: str, out_dir: str) -> Path:
    gpu = records[0]["gpu"].replace("NVIDIA ", "").replace(" ", "-").lower()
    date = records[0]["time"][:10]
    path = Path(out_dir) / f"{gpu}-{date}-{suite}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(records, indent=1))
    return path


def _host_us(fn, calls: int) -> float:
    """Host time per call: many calls queued back to back, one synchronize (the GPU is never the limit
    for these small cases, so this is what a caller waits for)."""
    import time

    import torch

    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


HOST_SHAPES = [(31, 65), (1024, 512)]


def measure_host(rounds: int, log=print) -> list[dict]:
    """Host time per call of small transposes, tileflip beside torch, and where tileflip's time goes."""
    import torch

    import tileflip
    from tileflip import tuning
    from tileflip.ops import core as ops
    from tileflip.kernels.cuda import transpose as cuda_transpose
    from tileflip.kernels.triton import transpose as triton_transpose

    meta = _meta()
    records = []
    for shape in HOST_SHAPES:
        x = _make_input(Case(shape, "float32"))
        out = torch.empty(shape[::-1], device="cuda")
        config = tuning.triton_config(4, shape)
        N, M = shape[::-1]

        def checks():
            ops.check_input(x)
            ops.resolve_backend(x, "auto")
            ops.check_out(x, out, (N, M))

        fns = {
            "torch-copy: out.copy_(x.t())": lambda: out.copy_(x.t()),
            "torch-contiguous: x.t().contiguous()": lambda: x.t().contiguous(),
            "tileflip: transpose(x, out=out)": lambda: tileflip.transpose(x, out),
            "tileflip: transpose(x)": lambda: tileflip.transpose(x),
            "tileflip triton: transpose(x, out=out)": lambda: tileflip.transpose(x, out, backend="triton"),
            "tileflip triton-gather: transpose(x, out=out)": lambda: tileflip.transpose(x, out,
                                                                                    backend="triton-gather"),
            "tileflip cuda-tiled: transpose(x, out=out)": lambda: tileflip.transpose(x, out, backend="cuda-tiled"),
            "part: argument checks": checks,
            "part: allocation x.new_empty(N, M)": lambda: x.new_empty(N, M),  # what transpose(x) allocates
            "part: triton launch (fast path)": lambda: triton_transpose.launch(x, out, config),
            "part: cuda launch (cuLaunchKernel)": lambda: cuda_transpose.launch(x, out, "tiled"),
            "reference: empty Python call": lambda: None,
        }
        for r in range(rounds):
            for name, fn in fns.items():
                us = _host_us(fn, 2000)
                records.append(dict(meta, op="host", backend=name, shape=list(shape), dtype="float32", us=us,
                                    run=meta["time"], round=r))  # fmt: skip
        log(f"host {shape}: " + ", ".join(
            f"{k.split(':')[0]} "
            f"{statistics.median(v['us'] for v in records if v['backend'] == k and v['shape'] == list(shape)):.1f}us"
            for k in fns))  # fmt: skip
    records += measure_new_shapes(meta)
    return records


def measure_new_shapes(meta) -> list[dict]:
    """20 new shapes of one known class: compilations counted, host time of each first call."""
    import gc
    import time

    import torch
    import triton

    import tileflip

    compiles = []
    old = triton.knobs.runtime.jit_post_compile_hook
    tileflip.transpose(torch.ones(64, 96, device="cuda"), backend="triton")
    triton.knobs.runtime.jit_post_compile_hook = lambda *a, **k: compiles.append(1)
    firsts = []
    # The cyclic garbage collector is off while the calls are timed (as timeit does): a full collection
    # lands on whichever call happens to trigger it, and its cost is the whole process's heap, not the
    # call's (an isolated 1.3-1.4 ms first call, at a different shape in each of two H200 runs).
    gc.collect()
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        for k in range(20):
            x = torch.ones(16 * (k + 5), 16 * (3 * k + 7), device="cuda")
            out = torch.empty(x.shape[::-1], device="cuda")
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            tileflip.transpose(x, out, backend="triton")
            firsts.append((time.perf_counter() - t0) * 1e6)
    finally:
        triton.knobs.runtime.jit_post_compile_hook = old
        if gc_was_on:
            gc.enable()
    return [dict(meta, op="new-shapes", backend="triton", shape=None, dtype="float32", compiles=len(compiles),
                 first_call_us=firsts, run=meta["time"])]  # fmt: skip


def host_table(records: list[dict]) -> str:
    rows = {}
    for r in records:
        if r["op"] == "host":
            rows.setdefault((tuple(r["shape"]), r["backend"]), []).append(r["us"])
    lines = [f"{'shape':>10}  {'us per call (median of rounds)':>10}  call"]
    for (shape, name), us in rows.items():
        lines.append(f"{'x'.join(map(str, shape)):>10}  {statistics.median(us):>10.2f}  {name}")
    for r in records:
        if r["op"] == "new-shapes":
            lines.append(f"20 new shapes of a known class: {r['compiles']} compilations, first-call host time "
                         f"max {max(r['first_call_us']):.0f} us, "
                         f"median {statistics.median(r['first_call_us']):.0f} us")  # fmt: skip
    return "\n".join(lines)


def cli(argv: list[str]) -> int:
    for i, arg in enumerate(argv):
        if arg == "--suite=cast" or (arg == "--suite" and argv[i + 1 : i + 2] == ["cast"]):
            from tileflip.bench import cast as bench_cast  # the fused fp8 cast-transpose has its own options

            return bench_cast.cli(argv[:i] + argv[i + (1 if "=" in arg else 2) :])
    p = argparse.ArgumentParser(prog="tileflip bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--suite", default="2d", choices=sorted(SUITES) + ["permute", "permute-random", "host"],
                   help="a shape suite, 'host' for host time per call of small cases, or 'cast' (then see "
                        "`tileflip bench --suite cast --help`)")  # fmt: skip
    p.add_argument("--part", default=None, help="K/N: run every N-th case starting at K (split a long suite)")
    p.add_argument("--quick", action="store_true", help="shorter repetitions (fits one 10-minute call)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds per case (default 3)")
    p.add_argument("--backends", default=",".join(TILEFLIP_BACKENDS + PEERS), help="comma-separated")
    p.add_argument("--out", default="benchmarks/results", help="folder for the JSON")
    p.add_argument("--plot", metavar="FILE.json", help="draw PNG plots from a results file and exit")
    args = p.parse_args(argv)
    if args.plot:
        from tileflip.bench import plots

        for path in plots.draw(args.plot):
            print(path)
        return 0
    import torch

    if not torch.cuda.is_available():
        print("tileflip bench needs a CUDA GPU (use --plot FILE.json to draw committed results)", file=sys.stderr)
        return 2
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    if args.suite == "host":
        records = measure_host(args.rounds, log)
        print(host_table(records))
        print(f"wrote {write(records, 'host', args.out)}")
        return 0
    cases = suite_cases(args.suite, args.part)
    if args.suite.startswith("permute"):
        args.backends = ",".join(b for b in args.backends.split(",") if b in ("auto", *PEERS))
    records = measure(cases, args.backends.split(","), args.rounds, args.quick, log)
    print(table(records))
    path = write(records, args.suite if not args.part else f"{args.suite}-part{args.part.replace('/', 'of')}", args.out)
    print(f"wrote {path}")
    return 0
