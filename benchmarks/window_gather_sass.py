"""Experiment (no GPU): aligned 16-byte stores for odd-aligned output rows through ``tl.gather``.

int8 (11,39,29,21,42,24) by (5,4,2,3,1,0) stores one byte per instruction: its output rows (axis B, 261261
bytes each) start at every misalignment. ``window_kernel`` tries the realignment in Triton: tile k covers,
in output row a, the 16-byte aligned window of B that starts m_a bytes before k * (TB - 16), m_a the row
start's misalignment; it loads TB input rows from 16 before that, and moves row a's values into place
with ``tl.gather`` (index w + 16 - m_a along the loaded rows), so that its stores are whole aligned 16-byte
vectors. ``plain_kernel`` is the tile kernel's form on the same 2-D problem (a transposed tile, stores
along B one byte wide). Both are checked exact in the interpreter on a small odd shape, then compiled for
sm_90 on the case's sizes; the script prints their registers, their static SASS instructions (the whole
kernel: the window kernel's full-tile and masked branches both) and per byte a thread moves, and the
global and shared accesses.

``python benchmarks/window_gather_sass.py [OUT.json]`` (CPU; the interpreter check needs TRITON_INTERPRET=1
set by the script itself before triton is imported).
"""

import collections
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def plain_kernel(x_ptr, out_ptr, M, N, stride_xm, stride_on, TB: tl.constexpr, TA: tl.constexpr):
    """x: M rows (B) x N columns (A), A contiguous; output row a at a * stride_on, B contiguous."""
    b = tl.program_id(0) * TB + tl.arange(0, TB)
    a = tl.max_contiguous(tl.multiple_of(tl.program_id(1) * TA + tl.arange(0, TA), 16), 16)
    tile = tl.load(x_ptr + b[:, None].to(tl.int64) * stride_xm + a[None, :], mask=(b < M)[:, None] & (a < N)[None, :])
    o = a.to(tl.int64) * stride_on
    tl.store(out_ptr + o[:, None] + b[None, :], tl.trans(tile), mask=(a < N)[:, None] & (b < M)[None, :])


@triton.jit
def window_kernel(x_ptr, out_ptr, M, N, stride_xm, stride_on, TB: tl.constexpr, TA: tl.constexpr):
    W: tl.constexpr = TB - 16
    pid_b = tl.program_id(0)
    pid_a = tl.program_id(1)
    rows = pid_b * W - 16 + tl.arange(0, TB)
    a = tl.max_contiguous(tl.multiple_of(pid_a * TA + tl.arange(0, TA), 16), 16)
    tile = tl.load(x_ptr + rows[:, None].to(tl.int64) * stride_xm + a[None, :],
                   mask=((rows >= 0) & (rows < M))[:, None] & (a < N)[None, :])  # fmt: skip
    o = a.to(tl.int64) * stride_on
    m = (o % 16).to(tl.int32)
    w = tl.arange(0, TB)
    moved = tl.trans(tl.gather(tile, tl.minimum(w[:, None] + 16 - m[None, :], TB - 1), 0))
    ptrs = out_ptr + tl.multiple_of(o - m + pid_b * W, 16)[:, None] + w[None, :]
    if (pid_b >= 1) & ((pid_b + 1) * W <= M) & ((pid_a + 1) * TA <= N):
        tl.store(ptrs, moved, mask=(w < W)[None, :])
    else:
        b = pid_b * W - m[:, None] + w[None, :]
        tl.store(ptrs, moved, mask=(w < W)[None, :] & (b >= 0) & (b < M) & (a < N)[:, None])


KERNELS = {"plain": ("plain_kernel", 0), "window": ("window_kernel", 16)}  # name: (kernel, rows a tile only loads)
# (kernel, TB, TA, warps): the tile kernel's launch for the case (512 x 64 on 4 warps) and the window
# kernel's at two sizes
SASS_CASES = [("plain", 512, 64, 4), ("window", 512, 64, 4), ("window", 256, 64, 4), ("window", 256, 128, 8)]
M, N = 261261, 1008  # the case's B (one output run) and A (the input's run) as a 2-D problem


def check_exact() -> dict:
    m, n = 301, 96  # odd M: every output row starts at another misalignment
    x = torch.randint(1, 255, (m, n), dtype=torch.uint8)
    found = {}
    for name, (kernel_name, extra) in KERNELS.items():
        kernel = globals()[kernel_name]
        out = torch.full((n * m,), 0xA5, dtype=torch.uint8)
        tb, ta = 64, 32
        kernel[(triton.cdiv(m, tb - extra) + (1 if extra else 0), triton.cdiv(n, ta))](x, out, m, n, n, m, TB=tb, TA=ta)
        found[name] = torch.equal(out.view(n, m), x.t())
    return found


def sass_counts(name: str, tb: int, ta: int, warps: int) -> dict:
    from tileflip.kernels.triton_layout import compile_launch

    with triton.knobs.runtime.scope():
        triton.knobs.runtime.interpret = False
        module = _compiled_copy()
    kernel = getattr(module, KERNELS[name][0])
    args = dict(x_ptr=None, out_ptr=None, M=M, N=N, stride_xm=N, stride_on=M)
    compiled = compile_launch(kernel, args, dict(TB=tb, TA=ta), warps, "*u8")
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(compiled.asm["cubin"])
        sass = subprocess.run([str(tool), "-sass", str(path)], capture_output=True, text=True, check=True).stdout
        usage = subprocess.run([str(tool), "-res-usage", str(path)], capture_output=True, text=True, check=True).stdout
    ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)", sass)
    by_op = collections.Counter(op.split(".")[0] for op in ops)
    memory = collections.Counter(op for op in ops if op.startswith(("LDG", "STG", "LDS", "STS", "STSM")))
    moved = (tb - KERNELS[name][1]) * ta  # bytes a full tile writes
    return dict(kernel=name, tile=[tb, ta], warps=warps, regs=int(re.search(r"REG:(\d+)", usage).group(1)),
                instructions=len(ops), per_byte_per_thread=len(ops) * warps * 32 / moved,
                top=by_op.most_common(8), memory=dict(memory))  # fmt: skip


def _compiled_copy():
    """This file loaded again with the interpreter off, so that its kernels are JITFunctions."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("window_gather_sass_compiled", __file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    result = {"exact": check_exact(), "sass": [sass_counts(*case) for case in SASS_CASES]}
    print("exact in the interpreter:", result["exact"])
    for r in result["sass"]:
        print(f"{r['kernel']} {r['tile'][0]}x{r['tile'][1]} {r['warps']} warps: {r['regs']} registers, "
              f"{r['instructions']} instructions ({r['per_byte_per_thread']:.1f} per byte a thread moves), "
              f"{r['memory']}")
        print("   ", r["top"])
    if len(sys.argv) > 1:
        json.dump(result, open(sys.argv[1], "w"), indent=1)


if __name__ == "__main__":
    main()
