"""Experiment: variants of the CUDA permute_vec kernel (text edits of kernels/cuda/transpose.cu, compiled
to files of their own) against the Triton tile kernel, on the permute suites' 1- and 2-byte tiles cases
that permute_vec takes, each case's copy and every variant timed interleaved; bits checked once each.

``python benchmarks/permute_vec_variants.py OUT.json VARIANT...``, VARIANT one of EDITS' names.
"""

import ctypes
import json
import statistics
import sys
import tempfile
from pathlib import Path

import torch

import tileflip
from tileflip import bench, plan, timing, tuning
from tileflip.kernels import cuda_permute, cuda_transpose, nvrtc
from tileflip.kernels.triton_common import current_stream

SOURCE = cuda_transpose.CU_FILE.read_text()
LB = '__launch_bounds__(256, 5) permute_vec_u'
# name -> [(old, new)] edits of transpose.cu
EDITS = {
    "base": [],
    "lb4": [(LB, '__launch_bounds__(256) permute_vec_u')],
    "lb6": [(LB, '__launch_bounds__(256, 6) permute_vec_u')],
    # consecutive blocks step along b (down the input's rows) instead of along a
    "bfast": [("const tf_i64 row0 = static_cast<tf_i64>(t / gn) * VEC_ROWS;",
               "const tf_i64 row0 = static_cast<tf_i64>(t % gr) * VEC_ROWS;"),
              ("const tf_i64 col0 = static_cast<tf_i64>(t % gn) * COLS;",
               "const tf_i64 col0 = static_cast<tf_i64>(t / gr) * COLS;"),
              ("const unsigned gn = static_cast<unsigned>(args.grid_n);",
               "const unsigned gr = tiles / static_cast<unsigned>(args.grid_n);")],
}


def kernel_of(name: str, es: int):
    src = SOURCE
    for old, new in EDITS[name]:
        assert old in src, (name, old)
        src = src.replace(old, new)
    path = Path(tempfile.gettempdir()) / f"permute_vec_{name}.cu"
    path.write_text(src)
    return nvrtc.get_kernel(path, cuda_permute.kernel_name(es), torch.cuda.current_device(), 90)


def launcher(name, x, out, p):
    es = x.element_size()
    go, block = cuda_permute.launch_of(p, es)
    kernel = kernel_of(name, es)
    args = cuda_permute._Args.from_buffer_copy(block)
    args.x, args.out = x.data_ptr(), out.data_ptr()
    pointers = (ctypes.c_void_p * 1)(ctypes.addressof(args))

    def go_():
        nvrtc.launch(kernel, (go.programs, 1, 1), cuda_permute.THREADS, current_stream(0), ctypes.addressof(pointers))

    go_.keep = (args, pointers)
    return go_


def main(out_path, names):
    cuda_transpose.kernel_on(0, "transpose_vec_u8")  # context ready
    records = []
    for case in bench.suite_cases("permute") + bench.suite_cases("permute-random"):
        x = bench._make_input(case)
        p = plan.plan_permute(tuple(x.shape), tuple(x.stride()), case.perm, x.element_size())
        if tuning.permute_vec_launch(p, x.element_size()) is None:
            continue
        ref = x.permute(case.perm).contiguous()
        out = torch.empty_like(ref)
        src = torch.empty_like(ref)
        fns = {"copy": lambda: out.copy_(src), "triton": lambda: tileflip.permute(x, case.perm, out, backend="triton")}
        for n in names:
            fns[n] = launcher(n, x, out, p)
        exact = {}
        for n, fn in fns.items():
            if n == "copy":
                continue
            out.view(-1).view(torch.uint8).fill_(0xA5)
            fn()
            exact[n] = torch.equal(out.view(-1).view(torch.uint8), ref.view(-1).view(torch.uint8))
        times = {n: [] for n in fns}
        for _ in range(3):
            for n, fn in fns.items():
                times[n].append(timing.summarize(timing.device_times(fn, reps=20))[0])
        copy_ms = statistics.median(times["copy"])
        go = tuning.permute_vec_launch(p, x.element_size())
        line = [f"{case.label:46s} B={go.size_b} A={go.size_a} n={go.batch}"]
        for n in fns:
            if n == "copy":
                continue
            ms = statistics.median(times[n])
            records.append({"shape": case.shape, "perm": case.perm, "dtype": case.dtype, "variant": n, "ms": ms,
                            "copy_ms": copy_ms, "fraction_of_copy": copy_ms / ms, "exact": exact[n],
                            "size_b": go.size_b, "size_a": go.size_a, "batch": go.batch})
            line.append(f"{n}={copy_ms / ms:.2f}{'' if exact[n] else '!'}")
        print(" ".join(line), flush=True)
    json.dump({"gpu": torch.cuda.get_device_name(), "records": records}, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
