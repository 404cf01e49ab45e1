"""``tileflip demo``: a 31 x 65 transpose walked through tile by tile, then ``tileflip.transpose`` on awkward
inputs, each result compared with ``x.T`` bit for bit.

Runs the Triton kernel natively on a GPU, or in Triton's interpreter on the CPU (the CLI turns the
interpreter on before the kernels are imported).
"""

from __future__ import annotations

import time

import torch

import tileflip
from tileflip import explain, plan, tuning
from tileflip.kernels.dtypes import as_int

# (label, shape (M, N), how x is cut from a larger random tensor): shapes and views where a wrong index,
# bound or stride shows
CASES = [
    ("tiny", (2, 3), "plain"),
    ("partial tiles", (31, 65), "plain"),
    ("partial tiles, M > N", (65, 31), "plain"),
    ("one row", (1, 1000), "plain"),
    ("one column", (1000, 1), "plain"),
    ("prime sizes", (97, 89), "plain"),
    ("one row past a tile", (65, 64), "plain"),
    ("non-square", (1024, 512), "plain"),
    ("x[::2, 1::3] (strided)", (300, 1030), "strided"),
    ("x.t() (column-major)", (130, 67), "transposed"),
    ("x.expand() (stride 0)", (33, 70), "expanded"),
]

DTYPES = [torch.float32, torch.bfloat16, torch.int8]
ALL_DTYPES = [*DTYPES, torch.float8_e4m3fn, torch.float64, torch.complex64, torch.bool]

# The call each row makes. backend="triton" names the Triton kernel walked through above: the default
# "auto" would hand a CPU tensor to torch's own copy.
CALL = 'tileflip.transpose(x, out, backend="triton")'

NEXT_STEPS = [
    ("tileflip plan --shape 8x4096x32x128 --perm 0,2,1,3 --dtype bf16", "how a permute is planned"),
    ("tileflip analyze --kernel naive --shape 1024x512 --dtype float32", "memory accesses, predicted speed"),
    ("tileflip check tests/wrong/misc.py:stride_blind", "find the bug in a transpose kernel"),
    ("make test", "the test suite (no GPU needed)"),
    ("README.md, docs/api.md", "usage and the full API"),
]


def _input(view, shape, dtype, device, seed):
    gen = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        base = torch.randint(0, 2, (shape[0] * 2 + 1, shape[1] * 3 + 1), generator=gen).bool()
    else:
        size = torch.empty((), dtype=dtype).element_size()
        raw = torch.randint(1, 256, ((shape[0] * 2 + 1) * (shape[1] * 3 + 1) * size,), dtype=torch.uint8, generator=gen)
        base = raw.view(dtype).view(shape[0] * 2 + 1, shape[1] * 3 + 1)
    base = base.to(device)
    if view == "strided":
        return base[::2, 1::3][: shape[0], : shape[1]]
    if view == "transposed":
        return base[: shape[1], : shape[0]].t()
    if view == "expanded":
        return base[:1, : shape[1]].expand(shape)
    return base[: shape[0], : shape[1]]


def _bits(t):
    return as_int(t)


def _short(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def walk_tiles() -> None:
    M, N, BM, BN = 31, 65, 32, 32
    print(f"== A {M}x{N} matrix in {BM}x{BN} tiles (what `tileflip plan --shape {M}x{N} --block {BM}x{BN}` prints) ==")
    print(explain.plan_text((M, N), block=(BM, BN)))
    tm = plan.tile_masks(M, N, BM, BN, 0, 2)
    print(
        f"\nProgram 2, tile (0, 2): its input mask {tm.in_mask.shape} keeps {tm.valid} slots, the "
        f"{tm.in_rows[1] - tm.in_rows[0]}x{tm.in_cols[1] - tm.in_cols[0]} region rows {tm.in_rows[0]}.."
        f"{tm.in_rows[1] - 1}, column {tm.in_cols[0]};"
    )
    print(
        f"  its output mask is the input mask transposed ({int(tm.out_mask.sum())} slots), "
        f"writing output row {tm.out_rows[0]}, columns {tm.out_cols[0]}..{tm.out_cols[1] - 1}."
    )
    print("  Reusing the input mask for the store would keep the 31x1 corner of the output tile instead: output")
    print("  rows 64..94 of column 0, which do not exist (65 rows), and it would drop row 64's 31 columns.\n")


def _call(x, out, device):
    """Wall time in ms of one transpose into ``out``, which is filled with 0xA5 first so that an element
    the kernel never writes cannot pass."""
    if device == "cuda":  # the first call of a shape class compiles: time the second
        tileflip.transpose(x, out, backend="triton")
    out.view(torch.uint8).fill_(0xA5)
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    tileflip.transpose(x, out, backend="triton")
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def run(device: str, png: str, all_dtypes: bool = False) -> int:
    walk_tiles()
    dtypes = ALL_DTYPES if all_dtypes else DTYPES
    if device == "cuda":
        where, timing = f"on {torch.cuda.get_device_name()}", "GPU wall ms, one call"
    else:  # the interpreter runs each program in Python: its times say nothing about GPU speed
        where, timing = "in Triton's CPU interpreter", "CPU interpreter ms"
    print(f"== tileflip.transpose on awkward inputs, {where} ==")
    print(f"Each row calls  {CALL}  once per dtype")
    print("and compares out with x.T bit for bit. In your own code,  y = tileflip.transpose(x)  picks the")
    print('backend itself (backend="auto").\n')
    warm = torch.zeros(2, 3, device=device)  # the first call pays one-time set-up: keep it out of the table
    tileflip.transpose(warm, torch.empty(3, 2, device=device), backend="triton")

    widths = [max(9, len(_short(d)) + 1) for d in dtypes]
    span = sum(widths) + len(widths) - 1
    left = f"{'case':<22} {'x.shape':>9} {'x.stride()':>11} {'programs':>8}"
    print(f"{'':<{len(left)}} {f' {timing} ':-^{span}}")
    header = left + " " + " ".join(f"{_short(d):>{w}}" for d, w in zip(dtypes, widths)) + "  result"
    print(header)
    print("-" * len(header))
    failures, split = 0, False
    for seed, (label, shape, view) in enumerate(CASES):
        times, wrong, programs = [], [], {}
        for dtype in dtypes:
            x = _input(view, shape, dtype, device, seed)
            out = torch.empty((shape[1], shape[0]), dtype=dtype, device=device)
            times.append(_call(x, out, device))
            if not torch.equal(_bits(out), _bits(x.t().contiguous())):
                wrong.append(_short(dtype))
            config = tuning.triton_config(x.element_size(), shape, x.stride(0))
            programs[plan.transpose_grid(*shape, config.block_m, config.block_n).programs] = None
        failures += len(wrong)
        programs = "/".join(map(str, programs))  # the tile, hence the count, can differ with the element size
        split |= "/" in programs
        cells = " ".join(f"{t:>{w}.2f}" for t, w in zip(times, widths))
        result = "bit-exact" if not wrong else "DIFFERS: " + ", ".join(wrong)
        print(
            f"{label:<22} {'x'.join(map(str, shape)):>9} {str(tuple(x.stride())):>11} {programs:>8} {cells}  {result}"
        )
    print(
        "\nprograms: Triton programs launched, one per tile"
        + (" (a/b: the tile differs between the dtypes)." if split else ".")
    )
    print("bit-exact: out equals x.T bit for bit (out is filled with 0xA5 first: an unwritten element shows).")
    print("All outputs are bit-exact." if not failures else f"{failures} output(s) differ from x.T.")
    from tileflip.analyze import pictures

    title = "31x65 in 32x32 tiles: 3 programs, masked slots hatched; each tile lands transposed"
    path = pictures.draw_tile_grid(31, 65, 32, 32, png, title=title)
    print(f"picture of the 31x65 tiles: {path}")

    width = max(len(cmd) for cmd, _ in NEXT_STEPS)
    print("\nWhat to try next:")
    activate = _activate_hint()
    if activate:
        print(f"  ({activate})")
    for cmd, what in NEXT_STEPS:
        print(f"  {cmd:<{width}}  {what}")
    return 1 if failures else 0


def _activate_hint() -> str:
    """How to reach this install's ``tileflip`` from a shell, where PATH does not already give it."""
    import os
    import shutil
    import sys
    from pathlib import Path

    here = Path(sys.executable).parent
    found = shutil.which("tileflip")
    if found and Path(found).resolve().parent == here.resolve():
        return ""
    if (here / "activate").is_file():
        try:
            rel = os.path.relpath(here / "activate")
        except ValueError:  # another drive
            rel = str(here / "activate")
        return f"first, in your shell: source {rel}"
    return f"the command is {here / 'tileflip'}"
