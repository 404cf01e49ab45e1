"""Experiment (session 17): the staged permute with every size compiled in, on bf16 (32,48,47,18,10,3) by
(0,4,1,3,5,2), beside the library's kernel for it (the Triton tile) and a copy of the same bytes, timed
interleaved (``tileflip.timing``); each variant's bits are checked on a poisoned output first.

``python benchmarks/staged_specialized.py OUT.json [NAME:DEFINE=V,... ...]`` (GPU, cuda-python); a variant
sets ``staged_specialized.cu``'s macros (``SWZ``: the shared chunks' swizzle, ``MAPB``: threads across
rows first, ``U``: words a thread loads at once, ``NC``: D3 cut in NC chunks, a block's input as D2
runs). The library's run-time-addressed staged kernels were measured and removed (README, session 17);
this asks whether compile-time places change that.
"""

import ctypes
import json
import statistics
import sys
from pathlib import Path

import torch

import tileflip
from tileflip import timing
from tileflip.kernels import nvrtc
from tileflip.kernels.triton_common import current_stream

CU = Path(__file__).with_name("staged_specialized.cu")
SHAPE, DIMS = (32, 48, 47, 18, 10, 3), (0, 4, 1, 3, 5, 2)
DEFAULT = ["plain:", "rows:MAPB=1", "swz7:SWZ=7", "swz9:SWZ=9", "swz9rows:SWZ=9,MAPB=1", "swz11:SWZ=11"]  # run 9


def kernel_of(options: list[str]):
    driver, _ = nvrtc._bindings()
    nvrtc.ensure_context(torch.cuda.current_device())
    cubin = nvrtc.compile_cubin(CU, 90, extra_options=options)
    library = nvrtc._check("cuLibraryLoadData", driver.cuLibraryLoadData(cubin, [], [], 0, [], [], 0))
    handle = nvrtc._check("cuLibraryGetKernel", driver.cuLibraryGetKernel(library, b"staged_bf16"))
    optin = torch.cuda.get_device_properties(0).shared_memory_per_block_optin
    attribute = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    dev = nvrtc._check("cuDeviceGet", driver.cuDeviceGet(torch.cuda.current_device()))
    nvrtc._check("cuKernelSetAttribute", driver.cuKernelSetAttribute(attribute, optin, handle, dev))
    return driver.CUfunction(int(handle))


def main(out_path: str, specs: list[str]) -> None:
    gen = torch.Generator(device="cuda").manual_seed(0)
    n = 1
    for s in SHAPE:
        n *= s
    x = torch.randint(1, 255, (2 * n,), device="cuda", dtype=torch.uint8, generator=gen).view(torch.bfloat16)
    x = x.view(SHAPE)
    ref = x.permute(DIMS).contiguous()
    out = torch.empty_like(ref)
    src = torch.empty_like(ref)
    slice_words = (15 + 2 * SHAPE[2] * SHAPE[3] * SHAPE[4] * SHAPE[5] + 15) // 16
    args = [ctypes.c_uint64(x.data_ptr()), ctypes.c_uint64(out.data_ptr())]
    pointers = (ctypes.c_void_p * 2)(*[ctypes.addressof(a) for a in args])
    fns = [("copy", lambda: out.copy_(src)), ("tileflip", lambda: tileflip.permute(x, DIMS, out))]
    driver, _ = nvrtc._bindings()
    exact = {}
    for spec in specs or DEFAULT:
        name, _, rest = spec.partition(":")
        options = [f"-D{kv}" for kv in rest.split(",") if kv]
        kernel = kernel_of(options)
        nc = int(dict(kv.split("=") for kv in rest.split(",") if kv).get("NC", 0))
        if nc:  # D2 slots of a D3 / NC chunk's run window each
            slot = ((2 * SHAPE[3] // nc * SHAPE[4] * SHAPE[5] + 15) // 16 + 1) * 16
            shared, blocks = -(-SHAPE[2] * slot // 128) * 128, SHAPE[0] * SHAPE[1] * nc
        else:  # the swizzle stays within 128-byte groups
            shared, blocks = -(-slice_words * 16 // 128) * 128, SHAPE[0] * SHAPE[1]

        def run(kernel=kernel, shared=shared, blocks=blocks):
            (status,) = driver.cuLaunchKernel(kernel, blocks, 1, 1, 256, 1, 1, shared, current_stream(0),
                                              ctypes.addressof(pointers), 0)  # fmt: skip
            assert int(status) == 0, status

        out.view(torch.uint8).fill_(0xA5)
        run()
        torch.cuda.synchronize()
        exact[name] = torch.equal(out.view(torch.uint8), ref.view(torch.uint8))
        fns.append((name, run))
    times = {name: [] for name, _ in fns}
    for _ in range(3):
        for name, fn in fns:
            times[name].append(timing.summarize(timing.device_times(fn, reps=20))[0])
    copy_ms = statistics.median(times["copy"])
    records = []
    for name, _ in fns[1:]:
        ms = statistics.median(times[name])
        records.append({"variant": name, "ms": ms, "copy_ms": copy_ms, "fraction_of_copy": copy_ms / ms,
                        "exact": exact.get(name, True), "rounds_ms": times[name]})  # fmt: skip
        print(f"{name:12s} {copy_ms / ms:.3f} of copy ({ms * 1e3:.1f} us){'' if exact.get(name, True) else ' INEXACT'}")
    Path(out_path).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "shape": SHAPE, "dims": DIMS,
                                          "records": records}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
