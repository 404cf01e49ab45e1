"""Experiment: register caps (``maxnreg``) on the 2-D transpose and permute tile kernels.

16-warp programs of 37-49 registers fit 2 or 3 per SM where 4 would fit by threads. This times each
case's kernel as launched and with its registers capped at each of CAPS (compiled with ``maxnreg``),
interleaved with a copy of the same bytes over 3 rounds; each variant's result is compared with
torch's bit for bit.

Finding (H200, 2026-12-01, benchmarks/results/experiments/h200-2026-12-01-maxnreg.json): no cap helped
the 2-D transposes (int8 16384^2 0.911 as launched, 0.910 at 32 registers); caps that spill were far
slower. A cap of 48 let ptxas use more registers (42 against 34-40) on some 2-byte permutes, which then
ran faster (fp16 NHWC->NCHW 0.951 -> 0.969, bf16 (30,360,4608) 0.845 -> 0.913) or slower (bf16
(1056,176,336) 0.958 -> 0.88 in the suite run); over the permute suites no cap raised the median
(permute_variants.py mreg variants).

``python benchmarks/maxnreg.py OUT.json [--quick]``
"""

import json
import sys

import torch

from tileflip import plan as planner
from tileflip.bench import _meta, _time
from tileflip.dtypes import as_uint
from tileflip.kernels import triton_permute, triton_transpose
from tileflip.tuning import triton_config

CAPS = (0, 48, 40, 32)

PERMUTES = (
    ((8, 4096, 32, 128), (0, 2, 1, 3), torch.bfloat16),
    ((8, 4096, 32, 128), (0, 3, 2, 1), torch.bfloat16),
    ((8, 4096, 32, 128), (0, 2, 3, 1), torch.bfloat16),
    ((64, 256, 56, 56), (0, 2, 3, 1), torch.float16),
    ((64, 56, 56, 256), (0, 3, 1, 2), torch.float16),
    ((30, 360, 4608), (0, 2, 1), torch.bfloat16),
    ((80, 704, 2048), (2, 1, 0), torch.int8),
    ((48, 30, 464, 180), (3, 2, 1, 0), torch.int8),
    ((46, 188, 88, 88), (1, 2, 3, 0), torch.bfloat16),
    ((16, 16, 152, 48, 44), (3, 0, 4, 1, 2), torch.int8),
    ((60, 2816, 416), (1, 2, 0), torch.int8),
    ((128, 112, 6144), (2, 1, 0), torch.int8),
    ((32, 12, 43, 84, 48), (3, 1, 2, 4, 0), torch.bfloat16),
    ((320, 50, 28, 88), (0, 2, 3, 1), torch.bfloat16),
    ((11, 8, 80, 264, 44), (1, 0, 2, 4, 3), torch.int8),
    ((3840, 360, 56), (0, 2, 1), torch.int8),
    ((32, 48, 47, 18, 10, 3), (0, 4, 1, 3, 5, 2), torch.bfloat16),
)


def _rand(shape, dtype, g):
    raw = torch.randint(1, 255, (torch.Size(shape).numel() * dtype.itemsize,), dtype=torch.uint8, device="cuda",
                        generator=g)  # fmt: skip
    return raw.view(dtype).view(shape)


def transpose_variant(x, out, cap):
    config = triton_config(x.element_size())._replace(maxnreg=cap)
    return lambda: triton_transpose.launch(x, out, config)


def permute_variant(x, out, dims, cap):
    p = planner.plan_permute(tuple(x.shape), tuple(x.stride()), dims, x.element_size())
    if p.kind not in ("rows", "copy", "tiles"):
        return None
    go, args, kwargs = triton_permute.launch_of(p, x.element_size())
    xi, oi = as_uint(x), as_uint(out)
    kwargs = kwargs | ({"maxnreg": cap} if cap else {})
    kernel = triton_permute.permute_tile_kernel[(go.programs,)]

    def run():
        kernel(xi, oi, *args, **kwargs)

    return run


def cases(g):
    for dtype in (torch.int8, torch.bfloat16, torch.float32):
        for shape in ((16384, 16384), (8192, 8191)):
            x = _rand(shape, dtype, g)
            out = torch.empty(shape[::-1], dtype=dtype, device="cuda")
            want = x.t().contiguous()
            yield (f"transpose {dtype} {shape}", x, out, want, lambda cap, x=x, out=out: transpose_variant(x, out, cap))
    for shape, dims, dtype in PERMUTES:
        x = _rand(shape, dtype, g)
        want = x.permute(dims).contiguous()
        out = torch.empty_like(want)
        yield (f"permute {dtype} {shape} {dims}", x, out, want,
               lambda cap, x=x, out=out, dims=dims: permute_variant(x, out, dims, cap))  # fmt: skip


def main(path: str, quick: bool) -> None:
    meta = _meta()
    g = torch.Generator(device="cuda").manual_seed(0)
    records = []
    for name, x, out, want, make in cases(g):
        fns = {cap: make(cap) for cap in CAPS}
        if any(fn is None for fn in fns.values()):
            print(f"{name}: not a tile-kernel plan, skipped", flush=True)
            continue
        exact = {}
        for cap, fn in fns.items():
            out.view(torch.uint8).fill_(0xA5)
            fn()
            torch.cuda.synchronize()
            exact[cap] = bool(torch.equal(out.view(torch.uint8), want.view(torch.uint8)))
        nbytes = x.numel() * x.element_size() * 2
        src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        got = {}
        for r in range(3):
            copy_ms = _time(lambda src=src, dst=dst: dst.copy_(src), quick)[0]
            for cap, fn in fns.items():
                ms = _time(fn, quick)[0]
                got.setdefault(cap, []).append(copy_ms / ms)
                records.append(dict(meta, case=name, maxnreg=cap, ms=ms, copy_ms=copy_ms, fraction_of_copy=copy_ms / ms,
                                    round=r, exact=exact[cap]))  # fmt: skip
        print(f"{name}: " + ", ".join(f"r{c or '-'} {sorted(v)[1]:.3f}{'' if exact[c] else ' WRONG'}"
                                      for c, v in got.items()), flush=True)  # fmt: skip
        del src, dst, x, out, want, fns
        torch.cuda.empty_cache()
    with open(path, "w") as f:
        json.dump(records, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], "--quick" in sys.argv)
