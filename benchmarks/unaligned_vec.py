"""Experiment: benchmarks/unaligned_vec.cu (16-byte accesses for rows that start off 16-byte boundaries)
against tileflip's Triton kernel, on 1- and 2-byte transposes whose input rows are not aligned.

Run on the GPU machine: ``python benchmarks/unaligned_vec.py OUT.json`` (CuPy compiles the .cu file with
NVRTC). Every case is first checked bit for bit against ``x.t()`` on a poisoned output, then timed with
``tileflip.timing`` (L2 flushed, events behind a spin) beside a device-to-device copy of the same bytes
and tileflip's ``triton`` backend, in 3 interleaved rounds; the JSON holds the medians.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import cupy
import torch

import tileflip
from tileflip.timing import device_times

CU = Path(__file__).with_name("unaligned_vec.cu")


VARIANTS = ("", "_rows", "_aligned", "_aligned_rows")  # kernel name suffixes (see the .cu file)


def kernels():
    module = cupy.RawModule(code=CU.read_text(), options=("--std=c++17",))
    names = {(es, v): f"transpose_vec_u{8 * es}{v}" for es in (1, 2) for v in VARIANTS}
    return {key: module.get_function(name) for key, name in names.items() if key != (2, "_aligned_rows")}


def aligned(x) -> bool:
    return x.data_ptr() % 16 == 0 and (x.stride(0) * x.element_size()) % 16 == 0


def launcher(funcs, x, out, variant=""):
    """A callable launching the experiment's kernel for x (M x N view, unit column stride) into out."""
    M, N = x.shape
    es = x.element_size()
    assert x.stride(1) == 1 and (M * es) % 16 == 0 and out.data_ptr() % 16 == 0 and out.is_contiguous()
    assert aligned(x) or "aligned" not in variant
    ints = {1: torch.int8, 2: torch.int16}[es]
    xs = cupy.asarray(x.view(ints))
    os_ = cupy.asarray(out.view(ints))
    grid_m, grid_n = -(-M // 128), -(-N // (128 // es))
    args = (xs, os_, cupy.int64(M), cupy.int64(N), cupy.int64(x.stride(0)), cupy.int64(grid_m))
    fn = funcs[(es, variant)]
    return lambda: fn((grid_m * grid_n,), (256,), args)


def source(rows: int, cols: int, offset: int, dtype, stride: int):
    """A rows x cols view with row stride ``stride`` starting ``offset`` elements into random bits."""
    es = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(-128, 127, ((rows * stride + offset + 64) * es,), dtype=torch.int8, device="cuda")
    return raw.view(dtype)[offset : offset + rows * stride].view(rows, stride)[:, :cols]


def same(a, b) -> bool:
    ints = {1: torch.int8, 2: torch.int16}[a.element_size()]
    return bool(torch.equal(a.view(ints), b.contiguous().view(ints)))


def main() -> None:
    out_path = Path(sys.argv[1])
    funcs = kernels()
    checks, records = [], []
    # Exactness: odd strides, every misalignment of the first row, partial tiles on both sides.
    for dtype in (torch.int8, torch.bfloat16):
        for rows, cols, stride, offset in [(1008, 999, 999, 0), (40, 1001, 1003, 3), (128, 256, 257, 5),
                                           (136, 300, 301, 7), (16, 17, 17, 1), (2048, 4095, 4095, 0),
                                           (8, 129, 131, 13), (256, 64, 4097, 9), (1024, 999, 1024, 0),
                                           (384, 1000, 1008, 16)]:  # fmt: skip
            es = torch.empty((), dtype=dtype).element_size()
            if (rows * es) % 16:
                continue
            x = source(rows, cols, offset, dtype, stride)
            for variant in VARIANTS:
                if (es, variant) not in funcs or ("aligned" in variant and not aligned(x)):
                    continue
                out = torch.full((cols * rows * es,), -91, dtype=torch.int8, device="cuda").view(dtype).view(cols, rows)
                launcher(funcs, x, out, variant)()
                torch.cuda.synchronize()
                checks.append({"dtype": str(dtype), "shape": [rows, cols], "stride": stride, "offset": offset,
                               "variant": variant, "exact": same(out, x.t())})  # fmt: skip
                print("check", checks[-1], flush=True)
    # Speed.
    cases = [("int8 8192x8191", torch.int8, 8192, 8191, 8191, 0),
             ("bf16 8192x8191", torch.bfloat16, 8192, 8191, 8191, 0),
             ("int8 16384x16383", torch.int8, 16384, 16383, 16383, 0),
             ("bf16 16384x16383", torch.bfloat16, 16384, 16383, 16383, 0),
             ("bf16 distributed pack 8288 x 16384 of stride 32769", torch.bfloat16, 8288, 16384, 32769, 16385),
             ("int8 8192x8192 (aligned)", torch.int8, 8192, 8192, 8192, 0),
             ("int8 16384x16384 (aligned)", torch.int8, 16384, 16384, 16384, 0),
             ("bf16 16384x16384 (aligned)", torch.bfloat16, 16384, 16384, 16384, 0)]  # fmt: skip
    for name, dtype, rows, cols, stride, offset in cases:
        x = source(rows, cols, offset, dtype, stride)
        out = torch.empty((cols, rows), dtype=dtype, device="cuda")
        src = torch.empty(rows * cols * x.element_size(), dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        fns = {"copy": lambda: dst.copy_(src), "triton": lambda: tileflip.transpose(x, out, backend="triton"),
               "auto": lambda: tileflip.transpose(x, out)}  # fmt: skip
        exact_vec = True
        for variant in VARIANTS:
            if (x.element_size(), variant) not in funcs or ("aligned" in variant and not aligned(x)):
                continue
            fns["vec" + variant] = launcher(funcs, x, out, variant)
            out.fill_(0)
            fns["vec" + variant]()
            exact_vec &= same(out, x.t())
        times = {k: [] for k in fns}
        for _ in range(3):
            for k, fn in fns.items():
                times[k].append(statistics.median(device_times(fn, reps=20)))
        med = {k: statistics.median(v) for k, v in times.items()}
        rec = {"case": name, "dtype": str(dtype), "shape": [rows, cols], "stride": stride, "offset": offset,
               "exact_vec": exact_vec, "ms": med,
               "fraction_of_copy": {k: med["copy"] / v for k, v in med.items()}}  # fmt: skip
        records.append(rec)
        print(name, "exact", exact_vec, {k: f"{v:.3f}" for k, v in rec["fraction_of_copy"].items()}, flush=True)
    out_path.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                                    "checks": checks, "records": records}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
