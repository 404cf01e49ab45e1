"""Experiment: do tileflip's transposes run faster with fewer programs resident per SM?

The cast-transpose kernel ran faster with 2 programs per SM (115 registers) than with 4 (62
registers, the same code with the amax computed earlier), and the permute kernel's 8-warp half tiles
slower when int32 offsets doubled their residency. This caps residency without touching the code:
after a kernel is compiled its launches ask for extra dynamic shared memory (``packed_metadata``'s
shared size, with the function's dynamic-shared limit raised), so that at most ``cap`` programs fit
on an SM. Every case: a copy of the same bytes, then the natural launch and each cap, interleaved
over rounds; each result is checked against torch once.

``python benchmarks/residency.py OUT.json [--quick]``

Finding (H200, 2026-12-01, benchmarks/results/experiments/h200-2026-12-01-residency.json): every cap
below a kernel's natural residency was slower. The method is confounded, so this does not show that
fewer programs are slower: shared memory and L1 share each SM's 256 KB, and padding 1 or 2 programs up
to the whole SM's shared memory leaves L1, which holds the data of loads in flight, a few dozen KB.
(Register caps, ``benchmarks/maxnreg.py``, changed residency the other way on some permutes.)
"""

import json
import sys

import torch

import tileflip
from tileflip.bench import _meta, _time
from tileflip.kernels import triton_cast_transpose, triton_permute, triton_transpose

CAPS = (None, 1, 2, 3, 4, 6, 8)


def _set_max_dynamic_shared(function: int, nbytes: int) -> None:
    from cuda.bindings import driver

    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    (err,) = driver.cuFuncSetAttribute(driver.CUfunction(function), attr, nbytes)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuFuncSetAttribute: {err}")


def _pad(cap, own: int) -> int:
    props = torch.cuda.get_device_properties(0)
    per_sm, optin = props.shared_memory_per_multiprocessor, props.shared_memory_per_block_optin
    if cap is None:
        return own
    return max(own, min(optin, per_sm // cap - 1024 - 128))


_ORIGINAL: dict = {}


def _meta_for(kernel, cap) -> tuple:
    nw, nc, own = _ORIGINAL.setdefault(id(kernel), tuple(kernel.packed_metadata))
    shared = _pad(cap, own)
    if shared > 48 * 1024:
        _set_max_dynamic_shared(kernel.function, shared)
    return (nw, nc, shared)


def cap_all(cap) -> None:
    """Apply ``cap`` to every compiled kernel the launchers hold (None: their own shared size)."""
    for key, entry in list(triton_transpose._compiled.items()):
        if type(entry) is tuple:
            triton_transpose._compiled[key] = (*entry[:4], _meta_for(entry[5], cap), entry[5])
        else:
            entry.packed_metadata = _meta_for(entry, cap)
    for kernel in triton_cast_transpose._compiled.values():
        kernel.packed_metadata = _meta_for(kernel, cap)
    for fn in (triton_permute.permute_tile_kernel,):
        for caches in fn.device_caches.values():
            for kernel in caches[0].values():
                kernel.packed_metadata = _meta_for(kernel, cap)


def natural(kernel) -> int:
    """Programs per SM the compiled kernel gets by registers, threads and its own shared memory."""
    props = torch.cuda.get_device_properties(0)
    nw, _, own = _ORIGINAL.get(id(kernel), tuple(kernel.packed_metadata))
    regs = max(kernel.n_regs, 1)
    by_regs = 65536 // (((regs * 32 + 255) // 256) * 256 * nw)
    return min(by_regs, 2048 // (32 * nw), 32, props.shared_memory_per_multiprocessor // (own + 1024))


def _permute_kernels() -> list:
    return [k for c in triton_permute.permute_tile_kernel.device_caches.values() for k in c[0].values()]


def cases():
    g = torch.Generator(device="cuda").manual_seed(0)

    def rand(shape, dtype):
        if dtype.is_floating_point:
            return torch.randn(shape, device="cuda", generator=g).to(dtype)
        return torch.randint(-100, 100, shape, device="cuda", generator=g, dtype=torch.int32).to(dtype)

    for dtype in (torch.int8, torch.bfloat16, torch.float32, torch.float64):
        x = rand((16384, 16384), dtype)
        out = torch.empty(16384, 16384, dtype=dtype, device="cuda")
        yield (f"transpose {dtype} 16384x16384", x.numel() * x.element_size() * 2,
               lambda x=x, out=out: tileflip.transpose(x, out=out, backend="triton"),
               lambda x=x, out=out: torch.equal(out.view(torch.uint8), x.t().contiguous().view(torch.uint8)),
               lambda: [e[5] if type(e) is tuple else e for e in triton_transpose._compiled.values()])  # fmt: skip
    x = rand((8192, 28672), torch.bfloat16)
    yield ("cast bf16 8192x28672", x.numel() * 4, lambda x=x: tileflip.cast_transpose(x), lambda: True,
           lambda: list(triton_cast_transpose._compiled.values()))  # fmt: skip
    for shape, dims, dtype in (
        ((64, 56, 56, 256), (0, 3, 1, 2), torch.float16),
        ((30, 360, 4608), (0, 2, 1), torch.bfloat16),
        ((80, 704, 2048), (2, 1, 0), torch.int8),
        ((48, 30, 464, 180), (3, 2, 1, 0), torch.int8),
        ((46, 188, 88, 88), (1, 2, 3, 0), torch.bfloat16),
        ((320, 50, 28, 88), (0, 2, 3, 1), torch.bfloat16),
        ((32, 48, 47, 18, 10, 3), (0, 4, 1, 3, 5, 2), torch.bfloat16),
        ((11, 39, 29, 21, 42, 24), (5, 4, 2, 3, 1, 0), torch.int8),
    ):
        x = rand(shape, dtype)
        out = torch.empty([shape[d] for d in dims], dtype=dtype, device="cuda")
        yield (f"permute {dtype} {shape} {dims}", x.numel() * x.element_size() * 2,
               lambda x=x, out=out, dims=dims: tileflip.permute(x, dims, out=out),
               lambda x=x, out=out, dims=dims: torch.equal(out.view(torch.uint8),
                                                           x.permute(dims).contiguous().view(torch.uint8)),
               _permute_kernels)  # fmt: skip


def main(path: str, quick: bool) -> None:
    meta = _meta()
    records = []
    for name, nbytes, fn, check, kernels in cases():
        cap_all(None)
        fn()
        torch.cuda.synchronize()
        exact = bool(check())
        ks = kernels()
        nat = max(natural(k) for k in ks) if ks else 0
        src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        caps = [c for c in CAPS if c is None or c < nat]
        rows = {}
        for r in range(3):
            copy_ms = _time(lambda src=src, dst=dst: dst.copy_(src), quick)[0]
            for cap in caps:
                cap_all(cap)
                ms = _time(fn, quick)[0]
                rows.setdefault(cap, []).append(copy_ms / ms)
                records.append(dict(meta, case=name, cap=cap, natural=nat, ms=ms, copy_ms=copy_ms,
                                    fraction_of_copy=copy_ms / ms, round=r, exact=exact))  # fmt: skip
        cap_all(None)
        best = max(rows, key=lambda c: sorted(rows[c])[1])
        print(f"{name}: natural {nat}/SM, exact {exact}; " + ", ".join(
            f"{'natural' if c is None else c}: {sorted(v)[1]:.3f}" for c, v in rows.items()) + f"; best {best}",
            flush=True)  # fmt: skip
        del src, dst
        torch.cuda.empty_cache()
    with open(path, "w") as f:
        json.dump(records, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], "--quick" in sys.argv)
