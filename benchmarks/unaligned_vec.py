"""Experiment: the ``cuda-vec`` backend (16-byte accesses for 1- and 2-byte rows off 16-byte boundaries)
against the Triton kernel, on transposes whose input rows are not aligned.

Run on the GPU machine: ``python benchmarks/unaligned_vec.py OUT.json``. Every case is first checked bit
for bit against ``x.t()`` on a poisoned output, then timed with ``tileflip.timing`` (L2 flushed, events
behind a spin) beside a device-to-device copy of the same bytes, in 3 interleaved rounds; the JSON holds
the medians. Runs 11-13 of session 8 measured the kernel while it was written (a standalone .cu file
then, with its variants: tiles walked down columns or along rows, a path without shifts for aligned
rows): ``results/experiments/h200-2026-12-01-unaligned-vec-v{1,2,3}.json``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

import torch

import tileflip
from tileflip.timing import device_times

BACKENDS = ("triton", "cuda-vec", "auto")
# UNALIGNED_VEC_BASE=FILE.cu adds "cuda-vec-base": the vec kernel of that file (e.g. an earlier transpose.cu)
BASE_CU = os.environ.get("UNALIGNED_VEC_BASE")


def base_launcher(x, out):
    """A launch of BASE_CU's vec kernel for x.t() into out (as cuda_transpose.launch_known fills it)."""
    from tileflip.kernels import cuda_transpose, nvrtc
    from tileflip.kernels.triton_common import current_stream

    M, N = x.shape
    es = x.element_size()
    cuda_transpose.kernel_on(0, cuda_transpose.kernel_name("vec", 8 * es))  # context ready
    kernel = nvrtc.get_kernel(Path(BASE_CU), cuda_transpose.kernel_name("vec", 8 * es), 0, 90)
    programs, grid_n = cuda_transpose._grid(M, N, "vec", es)
    params = cuda_transpose._ThreadParams()
    b = params.block
    b.x, b.out, b.M, b.N, b.sxm, b.sxn, b.grid_n = x.data_ptr(), out.data_ptr(), M, N, x.stride(0), 1, grid_n

    def go():
        nvrtc.launch(kernel, (programs, 1, 1), cuda_transpose.GEOMETRY["vec"][2], current_stream(0), params.address)

    return go


def source(rows: int, cols: int, offset: int, dtype, stride: int):
    """A rows x cols view with row stride ``stride`` starting ``offset`` elements into random bits."""
    es = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(-128, 127, ((rows * stride + offset + 64) * es,), dtype=torch.int8, device="cuda")
    return raw.view(dtype)[offset : offset + rows * stride].view(rows, stride)[:, :cols]


def same(a, b) -> bool:
    ints = {1: torch.int8, 2: torch.int16}[a.element_size()]
    return bool(torch.equal(a.view(ints), b.contiguous().view(ints)))


CASES = [("int8 8192x8191", torch.int8, 8192, 8191, 8191, 0),
         ("bf16 8192x8191", torch.bfloat16, 8192, 8191, 8191, 0),
         ("int8 16384x16383", torch.int8, 16384, 16383, 16383, 0),
         ("bf16 16384x16383", torch.bfloat16, 16384, 16383, 16383, 0),
         ("bf16 distributed pack 8288 x 16384 of stride 32769", torch.bfloat16, 8288, 16384, 32769, 16385),
         ("int8 8192x8192 (aligned)", torch.int8, 8192, 8192, 8192, 0)]  # fmt: skip


def main() -> None:
    out_path = Path(sys.argv[1])
    records = []
    for name, dtype, rows, cols, stride, offset in CASES:
        x = source(rows, cols, offset, dtype, stride)
        out = torch.empty((cols, rows), dtype=dtype, device="cuda")
        src = torch.empty(rows * cols * x.element_size(), dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        fns = {b: lambda b=b: tileflip.transpose(x, out, backend=b) for b in BACKENDS}
        if BASE_CU:
            fns["cuda-vec-base"] = base_launcher(x, out)
        exact = {}
        for b, fn in fns.items():
            out.view(torch.int8 if x.element_size() == 1 else torch.int16).fill_(-91)
            fn()
            exact[b] = same(out, x.t())
        fns = {"copy": lambda: dst.copy_(src)} | fns
        times = {k: [] for k in fns}
        for _ in range(3):
            for k, fn in fns.items():
                times[k].append(statistics.median(device_times(fn, reps=20)))
        med = {k: statistics.median(v) for k, v in times.items()}
        rec = {"case": name, "dtype": str(dtype), "shape": [rows, cols], "stride": stride, "offset": offset,
               "exact": exact, "ms": med, "fraction_of_copy": {k: med["copy"] / v for k, v in med.items()}}  # fmt: skip
        records.append(rec)
        print(name, "exact", exact, {k: f"{v:.3f}" for k, v in rec["fraction_of_copy"].items()}, flush=True)
    out_path.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                                    "records": records}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
