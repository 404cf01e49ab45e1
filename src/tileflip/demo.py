"""``tileflip demo``: a 31 x 65 transpose walked through tile by tile, then the real kernel on awkward cases.

Runs the Triton kernel natively on a GPU, or in Triton's interpreter on the CPU (the CLI turns the
interpreter on before the kernels are imported).
"""

from __future__ import annotations

import time

import torch

from tileflip import explain, plan, tuning
from tileflip.kernels.dtypes import as_uint
from tileflip.ops.transpose import transpose

# (name, shape, why it is here)
CASES = [
    ("2 x 3", (2, 3), "output offsets 0, 2, 4: the leading dimension is M"),
    ("31 x 65 tails", (31, 65), "tails in both dimensions; program (0, 2) keeps 31x1"),
    ("other orientation", (65, 31), "a swapped bound or leading dimension shows here"),
    ("one row", (1, 1000), "1xN"),
    ("one column", (1000, 1), "Nx1"),
    ("primes", (97, 89), "no dimension divides a tile"),
    ("past a tile in M", (65, 64), "one dimension one past a tile, the other exact"),
    ("non-square", (1024, 512), "the shape that catches col*N+row"),
    ("strided view", (300, 1030), "input sliced with steps: x[::2, 1::3], never copied first"),
    ("transposed view", (130, 67), "input stride (1, M): the column-major case"),
    ("expanded", (33, 70), "stride 0: every row is the same memory"),
]

DTYPES = [torch.float32, torch.bfloat16, torch.int8, torch.float8_e4m3fn, torch.float64, torch.complex64, torch.bool]
QUICK_DTYPES = [torch.float32, torch.bfloat16, torch.int8]


def _input(name, shape, dtype, device, seed):
    gen = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        base = torch.randint(0, 2, (shape[0] * 2 + 1, shape[1] * 3 + 1), generator=gen).bool()
    else:
        size = torch.empty((), dtype=dtype).element_size()
        raw = torch.randint(1, 256, ((shape[0] * 2 + 1) * (shape[1] * 3 + 1) * size,), dtype=torch.uint8, generator=gen)
        base = raw.view(dtype).view(shape[0] * 2 + 1, shape[1] * 3 + 1)
    base = base.to(device)
    if name == "strided view":
        return base[::2, 1::3][: shape[0], : shape[1]]
    if name == "transposed view":
        return base[: shape[1], : shape[0]].t()
    if name == "expanded":
        return base[:1, : shape[1]].expand(shape)
    return base[: shape[0], : shape[1]]


def _bits(t):
    return as_uint(t).view({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def walk_tiles() -> None:
    M, N, BM, BN = 31, 65, 32, 32
    print("== A 31x65 matrix in 32x32 tiles ==")
    print(explain.plan_text((M, N), block=(BM, BN)))
    tm = plan.tile_masks(M, N, BM, BN, 0, 2)
    print(
        f"\nprogram (0, 2): input mask {tm.in_mask.shape} keeps {tm.valid} slots, the {tm.in_rows[1] - tm.in_rows[0]}x"
        f"{tm.in_cols[1] - tm.in_cols[0]} region rows {tm.in_rows[0]}..{tm.in_rows[1] - 1}, column {tm.in_cols[0]};"
    )
    print(
        f"  its output mask {tm.out_mask.shape} is the input mask transposed ({int(tm.out_mask.sum())} slots), "
        f"writing output row {tm.out_rows[0]}, columns {tm.out_cols[0]}..{tm.out_cols[1] - 1}."
    )
    print("  Reusing the input mask for the store would keep the 31x1 corner of the output tile instead: output")
    print("  rows 64..94 of column 0, which do not exist (65 rows), and it would drop row 64's 31 columns.\n")


def run(device: str, png: str, quick: bool = False) -> int:
    walk_tiles()
    backend = "triton"
    where = "natively on " + torch.cuda.get_device_name() if device == "cuda" else "in Triton's CPU interpreter"
    print(f"== The Triton kernel on adversarial cases, {where} ==")
    header = f"{'case':<20} {'shape':>10} {'dtype':<16} {'strides':>12} {'programs':>9} {'ms':>8}  result"
    print(header)
    print("-" * len(header))
    failures = 0
    for seed, (name, shape, why) in enumerate(CASES):
        for dtype in QUICK_DTYPES if quick else DTYPES:
            x = _input(name, shape, dtype, device, seed)
            out = torch.empty((shape[1], shape[0]), dtype=dtype, device=device)
            out.view(torch.uint8).fill_(0xA5)  # poison: an unwritten element cannot pass
            t0 = time.perf_counter()
            transpose(x, out, backend=backend)
            if device == "cuda":
                torch.cuda.synchronize()
            ms = (time.perf_counter() - t0) * 1e3
            ok = torch.equal(_bits(out), _bits(x.t().contiguous()))
            failures += not ok
            config = tuning.triton_config(x.element_size(), shape)
            programs = plan.transpose_grid(*shape, config.block_m, config.block_n).programs
            dt = str(dtype).removeprefix("torch.")
            print(
                f"{name:<20} {'x'.join(map(str, shape)):>10} {dt:<16} {str(tuple(x.stride())):>12} {programs:>9} "
                f"{ms:>8.2f}  {'bit-exact' if ok else 'MISMATCH'}"
            )
    print(
        f"\n{'all cases bit-exact' if not failures else f'{failures} case(s) differ'} "
        "(compared as integer views, output poisoned first)"
    )
    from tileflip.analyze import pictures

    path = pictures.draw_tile_grid(31, 65, 32, 32, png, title="31x65 in 32x32 tiles: 3 programs, masked slots shaded")
    print(f"tile grid picture: {path}")
    return 1 if failures else 0
