"""Experiments on the 2-D Triton transpose (session 6): program order, tiles and tile orientation beside the
copy and torch.compile, timed interleaved in one process; and where a small call's host time goes.

``python benchmarks/order_2d.py OUT.json SECTION...`` (``bash benchmarks/gpu_run.sh order-2d`` with
``ORDER_SECTIONS``); every variant's result is checked bit for bit once.

* ``large``: the suite's cases of >= 64 MiB: the table's tile as the table has it (``table``) and in
  column order (``table-col``: the same variant where the table is in column order already, as it is
  since run 2), other tiles in column order, and a kernel written as the seed lesson writes it
  (``constexpr`` sizes, a 2-D grid whose first axis walks down the rows of tiles).
* ``small``: the launch-bound cases: tiles, the gather kernel, the CUDA kernels, torch.compile, and the
  seed-style tile and the gather kernel with ``constexpr`` sizes.
* ``fewwarps``: small cases on 1-2 warps, skinny fp32/fp64 cases on more tiles, and the launch
  configuration torch.compile's autotuner picked for each.
* ``forms``: small cases at torch.compile's tile (32 x 32, 4 warps) held in the output's orientation,
  sizes ``constexpr`` or runtime, with and without ``evict_last`` loads.
* ``spin``: the same calls timed behind spins of three fixed lengths.
* ``launchers``: one compiled class launched through tileflip's C-launcher path and through triton's
  ``kernel[grid](...)``, beside the standalone output-oriented kernel.
* ``host``: host time per call of the parts of a small call (allocation forms, attribute reads).
* ``packed`` (not run yet): int8 moved as 4-byte words, each 4 x 4 block of bytes transposed in
  registers, beside ``auto``.
* ``profile``: the launch-bound cases' device activities from the profiler (launch gap after the spin,
  duration) beside the events' figure.
* ``evict``: the launch-bound cases: constexpr sizes and ``evict_last`` loads taken apart, and the
  table's tile with ``evict_last`` loads, by events and profiler durations.
* ``tiny``: the launch-bound cases in torch.compile's kernel form on tileflip's kernel (a 2-D grid,
  ``group_m=-1``), and the sliver cases' gather with ``evict_last`` and a multiply-high division.
* ``bands``: the >= 256 MiB cases in column order within bands of G tile rows, beside plain column order.
* ``strides``: the >= 256 MiB squares with the input, the output or both in buffers of longer rows.
"""

import json
import os
import statistics
import sys

import torch
import triton
import triton.language as tl

import tileflip
from tileflip import bench, timing, tuning
from tileflip.dtypes import as_uint
from tileflip.kernels import triton_transpose
from tileflip.tuning import TileConfig


@triton.jit
def seed_style_kernel(x, out, M: tl.constexpr, N: tl.constexpr, sxm: tl.constexpr, sxn: tl.constexpr,
                      som: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):  # fmt: skip
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    tile = tl.load(x + rm[:, None] * sxm + rn[None, :] * sxn, mask=(rm[:, None] < M) & (rn[None, :] < N))
    tl.store(out + rn[:, None] * som + rm[None, :], tl.trans(tile), mask=(rn[:, None] < N) & (rm[None, :] < M))


@triton.jit
def gather_const_kernel(x, out, M: tl.constexpr, N: tl.constexpr, sxm: tl.constexpr, sxn: tl.constexpr,
                        BLOCK: tl.constexpr):  # fmt: skip
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = o < M * N
    j = o // M
    i = o - j * M
    tl.store(out + o, tl.load(x + i * sxm + j * sxn, mask=mask), mask=mask)


def gather_const(x, out):
    M, N = x.shape
    gather_const_kernel[(triton.cdiv(M * N, 1024),)](as_uint(x), as_uint(out), M, N, x.stride(0), x.stride(1), 1024,
                                                     num_warps=4)  # fmt: skip


@triton.jit
def out_tile_kernel(x, out, M, N, sxm, sxn, YB: tl.constexpr, XB: tl.constexpr, EVICT: tl.constexpr):
    # The tile in the output's orientation: rows y are input columns, columns x input rows; pid 0 walks x.
    y = tl.program_id(1) * YB + tl.arange(0, YB)[:, None]
    xi = tl.program_id(0) * XB + tl.arange(0, XB)[None, :]
    mask = (y < N) & (xi < M)
    v = tl.load(x + y * sxn + xi * sxm, mask, eviction_policy="evict_last" if EVICT else "")
    tl.store(out + y * M + xi, v, mask)


@triton.jit
def out_tile_const_kernel(x, out, M: tl.constexpr, N: tl.constexpr, sxm: tl.constexpr, sxn: tl.constexpr,
                          YB: tl.constexpr, XB: tl.constexpr, EVICT: tl.constexpr):  # fmt: skip
    y = tl.program_id(1) * YB + tl.arange(0, YB)[:, None]
    xi = tl.program_id(0) * XB + tl.arange(0, XB)[None, :]
    mask = (y < N) & (xi < M)
    v = tl.load(x + y * sxn + xi * sxm, mask, eviction_policy="evict_last" if EVICT else "")
    tl.store(out + y * M + xi, v, mask)


def out_tile(const: bool, evict: bool):
    def go(x, out):
        M, N = x.shape
        kernel = out_tile_const_kernel if const else out_tile_kernel
        kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](as_uint(x), as_uint(out), M, N, x.stride(0), x.stride(1),
                                                         32, 32, evict, num_warps=4)  # fmt: skip

    return go


def seed_style(x, out, config):
    M, N = x.shape
    grid = (triton.cdiv(M, config.block_m), triton.cdiv(N, config.block_n))
    seed_style_kernel[grid](as_uint(x), as_uint(out), M, N, x.stride(0), x.stride(1), out.stride(0),
                            config.block_m, config.block_n, num_warps=config.num_warps)  # fmt: skip


LARGE = [((16384, 16384), d) for d in ("int8", "bfloat16", "float32", "float64")] + [
    ((8192, 8192), "float32"), ((8192, 8192), "float64"), ((8192, 8191), "float32"), ((8192, 8191), "float64"),
    ((8192, 8191), "int8"), ((8192, 8191), "bfloat16"), ((65536, 256), "float64"), ((256, 65536), "float64"),
    ((256, 65536), "float32"), ((65536, 256), "float32")]  # fmt: skip
EXTRA_TILES = {
    1: [TileConfig(128, 256, 16, 0), TileConfig(256, 128, 16, 0), TileConfig(128, 128, 8, 0)],
    2: [TileConfig(128, 128, 16, 0), TileConfig(64, 128, 8, 0), TileConfig(128, 64, 8, 0)],
    4: [TileConfig(64, 64, 8, 0), TileConfig(64, 128, 16, 0), TileConfig(32, 128, 8, 0)],
    8: [TileConfig(64, 64, 8, 0), TileConfig(32, 128, 8, 0), TileConfig(32, 64, 4, 0)],
}
SMALL = [((s, d)) for s in ((2, 100000), (31, 65), (1024, 512), (4096, 128)) for d in ("int8", "float32", "float64")]
SMALL_TILES = [TileConfig(32, 32, 4), TileConfig(32, 32, 4, 0), TileConfig(64, 64, 4, 0), TileConfig(64, 64, 8, 0),
               TileConfig(32, 64, 4, 0), TileConfig(64, 32, 4, 0)]  # fmt: skip


def bits(t):
    return t.reshape(-1).view(torch.uint8)


def _timed_rounds(fns: dict) -> tuple[dict, float]:
    """Each function's device time (``timing.device_times``, 20 repetitions) in 3 interleaved rounds, and
    the median of the one named "copy"."""
    times = {name: [] for name in fns}
    for _ in range(3):
        for name, fn in fns.items():
            times[name].append(timing.summarize(timing.device_times(fn, reps=20))[0])
    return times, statistics.median(times["copy"])


def run_case(shape, dtype, variants, records, compile_peer):
    case = bench.Case(shape, dtype)
    x = bench._make_input(case)
    ref = x.t().contiguous()
    out = torch.empty_like(ref)
    src = torch.empty_like(ref)
    fns = [("copy", lambda: out.copy_(src), True)]
    for name, fn in variants:
        out.fill_(0)
        fn(x, out)
        fns.append((name, (lambda fn=fn: fn(x, out)), torch.equal(bits(out), bits(ref))))
    if compile_peer:
        torch._dynamo.reset()
        compiled = torch.compile(lambda t: t.t().contiguous(), dynamic=False)
        fns.append(("torch-compile", lambda: compiled(x), torch.equal(bits(compiled(x)), bits(ref))))
    times, copy_ms = _timed_rounds({name: fn for name, fn, _ok in fns})
    line = [f"{dtype:9s} {'x'.join(map(str, shape)):12s}"]
    for name, _fn, ok in fns[1:]:
        ms = statistics.median(times[name])
        records.append({"section": "device", "shape": list(shape), "dtype": dtype, "variant": name, "ms": ms,
                        "ms_rounds": times[name], "copy_ms": copy_ms, "fraction_of_copy": copy_ms / ms,
                        "exact": ok})  # fmt: skip
        line.append(f"{name}={copy_ms / ms:.3f}{'' if ok else '!'}")
    print(" ".join(line), flush=True)


def tile(config):
    return lambda x, out: triton_transpose.launch(x, out, config)


def large(records):
    for shape, dtype in LARGE:
        es = torch.empty((), dtype=getattr(torch, dtype)).element_size()
        table = tuning.triton_config(es, shape, shape[1])
        variants = [("table", tile(table)), ("table-col", tile(table._replace(group_m=0)))]
        for c in EXTRA_TILES[es]:
            if c != table._replace(group_m=0):
                variants.append((f"{c.block_m}x{c.block_n}w{c.num_warps}-col", tile(c)))
        d = tuning.DEFAULT_TILES[es]
        variants.append((f"seed-style-{d.block_m}x{d.block_n}w{d.num_warps}", lambda x, o, d=d: seed_style(x, o, d)))
        run_case(shape, dtype, variants, records, compile_peer=es == 8 or shape[0] == 256 or shape[1] == 256)
        torch.cuda.empty_cache()


def small(records):
    for shape, dtype in SMALL:
        variants = [("auto", lambda x, o: tileflip.transpose(x, o)),
                    ("gather", lambda x, o: tileflip.transpose(x, o, backend="triton-gather")),
                    ("cuda-naive", lambda x, o: tileflip.transpose(x, o, backend="cuda-naive")),
                    ("cuda-tiled", lambda x, o: tileflip.transpose(x, o, backend="cuda-tiled"))]  # fmt: skip
        if min(shape) >= 8:
            es = torch.empty((), dtype=getattr(torch, dtype)).element_size()
            table = tuning.triton_config(es, shape, shape[1])
            variants.append(("table", tile(table)))
            variants.append(("table-col", tile(table._replace(group_m=0))))
            for c in SMALL_TILES:
                variants.append((f"{c.block_m}x{c.block_n}w{c.num_warps}g{c.group_m}", tile(c)))
            for c in (TileConfig(32, 32, 4), TileConfig(64, 64, 4), TileConfig(32, 64, 4)):
                variants.append((f"seed-style-{c.block_m}x{c.block_n}w{c.num_warps}",
                                 lambda x, o, c=c: seed_style(x, o, c)))  # fmt: skip
        else:
            variants.append(("thin-col", tile(tuning.thin_config(*shape)._replace(group_m=0))))
        variants.append(("gather-constexpr-sizes", gather_const))
        run_case(shape, dtype, variants, records, compile_peer=True)


FEW_WARP_TILES = [TileConfig(32, 32, 1), TileConfig(32, 32, 2), TileConfig(32, 32, 2, 0), TileConfig(64, 32, 2),
                  TileConfig(32, 64, 2), TileConfig(16, 64, 1), TileConfig(64, 16, 1),
                  TileConfig(16, 16, 1)]  # fmt: skip


def inductor_configs(first: int = 0):
    """The launch configurations torch.compile's autotuner settled on, for the kernels loaded since the
    ``first``-th generated module."""
    from torch._inductor.codecache import PyCodeCache

    found = []
    for mod in list(PyCodeCache.modules)[first:]:
        for name in dir(mod):
            obj = getattr(mod, name)
            for launcher in getattr(obj, "launchers", None) or []:
                cfg = getattr(launcher, "config", None)
                if cfg is not None:
                    found.append(f"{name}: {cfg.kwargs} warps={cfg.num_warps} stages={cfg.num_stages}")
    return found


SKINNY = [((256, 65536), "float32"), ((65536, 256), "float32"), ((256, 65536), "float64"), ((65536, 256), "float64"),
          ((8192, 8191), "float64")]  # fmt: skip
SKINNY_TILES = [TileConfig(32, 32, 4, 0), TileConfig(32, 64, 4, 0), TileConfig(64, 32, 4, 0), TileConfig(32, 128, 4, 0),
                TileConfig(128, 32, 4, 0), TileConfig(64, 64, 4, 0), TileConfig(32, 32, 2, 0)]  # fmt: skip


def forms(records):
    """Small cases at torch.compile's tile (32 x 32, 4 warps): the tile in the output's orientation with
    sizes constexpr or runtime, with and without evict_last loads, beside the seed-style tile."""
    for shape, dtype in [c for c in SMALL if min(c[0]) >= 8]:
        variants = [("auto", lambda x, o: tileflip.transpose(x, o)),
                    ("seed-style-32x32w4", lambda x, o: seed_style(x, o, TileConfig(32, 32, 4))),
                    ("ours-32x32w4g0", tile(TileConfig(32, 32, 4, 0)))]  # fmt: skip
        for const in (True, False):
            for evict in (True, False):
                variants.append((f"out-tile-{'const' if const else 'runtime'}{'-evict-last' if evict else ''}",
                                 out_tile(const, evict)))  # fmt: skip
        run_case(shape, dtype, variants, records, compile_peer=True)


def fixed_spin_times(fn, spin_cycles, reps=20):
    """Median device time of ``fn`` with the spin before each repetition fixed at ``spin_cycles``."""
    return statistics.median(timing.device_times(fn, warmup=5, reps=reps, spin=spin_cycles))


def spin(records):
    """Does the length of the spin before a timed call change a launch-bound call's device time? (The
    spin covers four times each call's own host time, so slow-launching calls get longer spins.)"""
    for shape, dtype in [((1024, 512), "float32"), ((4096, 128), "float32"), ((2, 100000), "float32"),
                         ((31, 65), "float32"), ((1024, 512), "int8")]:  # fmt: skip
        case = bench.Case(shape, dtype)
        x = bench._make_input(case)
        out = torch.empty(shape[::-1], dtype=x.dtype, device="cuda")
        src = torch.empty_like(out)
        torch._dynamo.reset()
        compiled = torch.compile(lambda t: t.t().contiguous(), dynamic=False)
        compiled(x)
        fns = {"copy": lambda: out.copy_(src), "auto": lambda: tileflip.transpose(x, out),
               "torch-compile": lambda: compiled(x), "out-tile-runtime": lambda: out_tile(False, False)(x, out)}
        for cycles in (200_000, 800_000, 3_200_000):
            row = {}
            for _ in range(3):
                for name, fn in fns.items():
                    row.setdefault(name, []).append(fixed_spin_times(fn, cycles))
            med = {k: statistics.median(v) for k, v in row.items()}
            for name, ms in med.items():
                records.append({"section": "spin", "shape": list(shape), "dtype": dtype, "variant": name,
                                "spin_cycles": cycles, "ms": ms, "copy_ms": med["copy"]})  # fmt: skip
            print(f"{dtype:9s} {'x'.join(map(str, shape)):10s} spin {cycles:>9d}: "
                  + " ".join(f"{k}={v * 1000:.2f}us" for k, v in med.items()), flush=True)


def launchers(records):
    """One compiled tile kernel launched three ways: tileflip's prepared C-launcher path, triton's own
    ``kernel[grid](...)``, and the standalone output-oriented kernel, at torch.compile's tile."""
    for shape, dtype in [((1024, 512), "float32"), ((4096, 128), "float32"), ((1024, 512), "int8")]:
        variants = []
        for c in (TileConfig(32, 32, 4, 0, 0, 0, 1), TileConfig(32, 32, 4, 0, 1, 0, 0), TileConfig(32, 32, 4, 1, 1)):
            name = f"{c.block_m}x{c.block_n}w{c.num_warps}g{c.group_m}i{c.interior}o{c.out_tile}"
            variants.append((f"{name}-direct", tile(c)))

            def via_triton(x, o, c=c):
                M, N = x.shape
                key, grid, scalars = triton_transpose._class_of(M, N, x.stride(0), x.stride(1), M,
                                                                x.element_size(), 0, c, 0, 0)  # fmt: skip
                triton_transpose.transpose_2d_kernel[grid](as_uint(x), as_uint(o), *scalars,
                                                           num_warps=c.num_warps)  # fmt: skip

            variants.append((f"{name}-triton-launch", via_triton))
        variants.append(("out-tile-runtime", out_tile(False, False)))
        run_case(shape, dtype, variants, records, compile_peer=True)


@triton.jit
def packed_u8_kernel(x, out, sxm_w, som_w, BM: tl.constexpr, BNW: tl.constexpr):
    # A 1-byte transpose moved as 4-byte words: each 4 x 4 block of bytes is transposed inside the
    # registers (shifts and masks), so loads, stores and the layout conversion move int32 words. x and
    # out are int32 views of uint8 matrices; full tiles only (M % BM == 0, N % (4 BNW) == 0).
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    cw = pid_n * BNW + tl.arange(0, BNW)
    w = tl.reshape(tl.load(x + rm[:, None] * sxm_w + cw[None, :]), [BM // 4, 4, BNW])  # (word row g, r, c)
    sh = (tl.arange(0, 4) * 8)[None, :, None]
    o0 = tl.sum((w & 0xFF) << sh, axis=1)  # byte 0 of rows 4g..4g+3: output row 4c, word g
    o1 = tl.sum(((w >> 8) & 0xFF) << sh, axis=1)
    o2 = tl.sum(((w >> 16) & 0xFF) << sh, axis=1)
    o3 = tl.sum(((w >> 24) & 0xFF) << sh, axis=1)
    o = tl.join(tl.join(o0, o1), tl.join(o2, o3))  # (g, c, i, j): byte k = 2 j + i
    o = tl.reshape(tl.permute(o, (1, 3, 2, 0)), [4 * BNW, BM // 4])  # output row 4c + k, word g
    ro = pid_n * (4 * BNW) + tl.arange(0, 4 * BNW)
    go = pid_m * (BM // 4) + tl.arange(0, BM // 4)
    tl.store(out + ro[:, None] * som_w + go[None, :], o)


def packed_u8(bm, bnw, warps):
    def go(x, out):
        M, N = x.shape
        xw, ow = x.view(torch.int32), out.view(torch.int32)
        packed_u8_kernel[(M // bm, N // (4 * bnw))](xw, ow, xw.stride(0), ow.stride(0), bm, bnw,
                                                    num_warps=warps)  # fmt: skip

    return go


PACKED_TILES = [(64, 16, 4), (128, 32, 8), (128, 32, 4), (256, 32, 8), (256, 16, 8), (64, 32, 4), (128, 64, 16)]


def packed(records):
    """int8 cases of >= 16 MiB: the 4 x 4-byte packed transpose (tiles as (rows, words, warps)) beside
    auto. Exactness of the kernel was checked in Triton's interpreter (TRITON_INTERPRET=1) on 256 x 512."""
    for shape in ((16384, 16384), (8192, 8192), (65536, 256), (256, 65536)):
        variants = [("auto", lambda x, o: tileflip.transpose(x, o))]
        for bm, bnw, w in PACKED_TILES:
            if shape[0] % bm == 0 and shape[1] % (4 * bnw) == 0:
                variants.append((f"packed-{bm}x{4 * bnw}B-w{w}", packed_u8(bm, bnw, w)))
        run_case(shape, "int8", variants, records, compile_peer=False)
        torch.cuda.empty_cache()


def _device_activities(prof):
    """The device-side activities (kernels, copies) of a profile, in start order: (name, start ns, end ns)."""
    from torch.autograd import DeviceType

    acts = [(e.name(), e.start_ns(), e.end_ns()) for e in prof.profiler.kineto_results.events()
            if e.device_type() == DeviceType.CUDA and e.duration_ns() > 0]  # fmt: skip
    return sorted(acts, key=lambda a: a[1])


# Kernel names of timing's flushes: "Fill" (the zero_ flush), the two kernels of the "l2" flush.
FLUSH_KERNELS = ("Fill", "load_evict_last_kernel", "discard_kernel")


def _profiled(fn, flush, calls: int = 20) -> tuple[float, float, list]:
    """(median launch gap, median duration, kernel names) of ``calls`` calls of ``fn``, each queued behind
    the L2 flush and a spin as in ``timing.device_times``, from the profiler (CUPTI): the gap runs from
    the end of the spin to the start of the call's first device activity, the duration from that start
    to the end of its last."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    with profiler(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            flush()
            torch.cuda._sleep(200_000)
            fn()
        torch.cuda.synchronize()
    gaps, durations, names = [], [], set()
    acts = _device_activities(prof)
    i = 0
    while i < len(acts):
        if "spin" not in acts[i][0]:
            i += 1
            continue
        spin_end = acts[i][2]
        j = i + 1
        while j < len(acts) and not any(k in acts[j][0] for k in ("spin", *FLUSH_KERNELS)):
            j += 1
        call = acts[i + 1:j]
        if call:
            gaps.append((call[0][1] - spin_end) / 1000)
            durations.append((max(a[2] for a in call) - call[0][1]) / 1000)
            names.update(a[0][:60] for a in call)
        i = j
    nan = float("nan")
    return (statistics.median(gaps) if gaps else nan, statistics.median(durations) if durations else nan,
            sorted(names))  # fmt: skip


def profile(records):
    """Launch-bound cases: each call's device activities from the profiler (CUPTI), beside the events'
    figure: the gap from the end of the spin kernel that precedes the call to the start of the call's
    first activity (the launch as the device sees it), and the call's own duration (first start to
    last end), for tileflip, the standalone output-oriented kernel (runtime and constexpr sizes), the
    CUDA naive kernel, torch.compile, CuPy and the copy."""
    try:
        import cupy
    except ImportError:
        cupy = None
    flush = timing.flush_fn("cuda")
    for shape, dtype in [((1024, 512), "float32"), ((4096, 128), "float32"), ((2, 100000), "float32"),
                         ((31, 65), "float32"), ((1024, 512), "int8"), ((1024, 512), "float64")]:  # fmt: skip
        x = bench._make_input(bench.Case(shape, dtype))
        out = torch.empty(shape[::-1], dtype=x.dtype, device="cuda")
        src = torch.empty_like(out)
        torch._dynamo.reset()
        compiled = torch.compile(lambda t: t.t().contiguous(), dynamic=False)
        fns = {"copy": lambda: out.copy_(src), "auto": lambda: tileflip.transpose(x, out),
               "cuda-naive": lambda: tileflip.transpose(x, out, backend="cuda-naive"),
               "out-tile-runtime": lambda: out_tile(False, False)(x, out),
               "out-tile-const": lambda: out_tile(True, True)(x, out), "torch-compile": lambda: compiled(x)}
        if cupy is not None:
            xc = cupy.from_dlpack(x)
            fns["cupy"] = lambda: cupy.ascontiguousarray(xc.T)
        for name, fn in fns.items():
            gap, dur, names = _profiled(fn, flush)
            events_ms = statistics.median(timing.device_times(fn, reps=20))
            records.append({"section": "profile", "shape": list(shape), "dtype": dtype, "variant": name,
                            "gap_us": gap, "duration_us": dur, "kernels": names,
                            "events_us": events_ms * 1000})  # fmt: skip
            print(f"{dtype:9s} {'x'.join(map(str, shape)):10s} {name:18s} events {events_ms * 1000:5.2f}us "
                  f"gap {gap:5.2f}us duration {dur:5.2f}us {names}", flush=True)


def _compare(records, section, shape, dtype, x, ref, variants, flush):
    """Each variant ``fn(x, out)`` checked bit for bit once, then timed beside the copy and torch.compile
    (3 interleaved rounds of events) and profiled (``_profiled``); one record per variant, one line."""
    out = torch.empty_like(ref)
    src = torch.empty_like(ref)
    fns = {"copy": lambda: out.copy_(src)}
    exact = {}
    for name, fn in variants.items():
        out.fill_(0)
        fn(x, out)
        exact[name] = torch.equal(bits(out), bits(ref))
        fns[name] = lambda fn=fn: fn(x, out)
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: t.t().contiguous(), dynamic=False)
    exact["torch-compile"] = torch.equal(bits(compiled(x)), bits(ref))
    fns["torch-compile"] = lambda: compiled(x)
    times, copy_ms = _timed_rounds(fns)
    line = [f"{dtype:9s} {'x'.join(map(str, shape)):10s}"]
    for name, fn in fns.items():
        gap, dur, names = _profiled(fn, flush)
        ms = statistics.median(times[name])
        records.append({"section": section, "shape": list(shape), "dtype": dtype, "variant": name, "ms": ms,
                        "ms_rounds": times[name], "copy_ms": copy_ms, "fraction_of_copy": copy_ms / ms,
                        "gap_us": gap, "duration_us": dur, "kernels": names,
                        "exact": exact.get(name, True)})  # fmt: skip
        line.append(f"{name}={copy_ms / ms:.3f}/{dur:.2f}us{'' if exact.get(name, True) else '!'}")
    print(" ".join(line), flush=True)


@triton.jit
def gather_evict_kernel(x, out, M, N, sxm, sxn, total, BLOCK: tl.constexpr, EVICT: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = o < total
    j = o // M
    i = o - j * M
    v = tl.load(x + i * sxm + j * sxn, mask=mask, eviction_policy="evict_last" if EVICT else "")
    tl.store(out + o, v, mask=mask)


def gather_evict(evict: bool):
    def go(x, out):
        M, N = x.shape
        gather_evict_kernel[(triton.cdiv(M * N, 1024),)](as_uint(x), as_uint(out), M, N, x.stride(0), x.stride(1),
                                                         M * N, 1024, evict, num_warps=4)  # fmt: skip

    return go


EVICT_CASES = [((1024, 512), "float32"), ((4096, 128), "float32"), ((1024, 512), "int8"), ((1024, 512), "float64"),
               ((4096, 128), "bfloat16"), ((31, 65), "float32"), ((2, 100000), "float32")]  # fmt: skip


def evict(records):
    """Launch-bound cases: which part of torch.compile's kernel form (constexpr sizes, ``evict_last``
    loads) makes it shorter, and the table's tile with ``evict_last`` (``TileConfig.evict_last``): events
    (3 interleaved rounds) and profiler durations of each variant."""
    flush = timing.flush_fn("cuda")
    for shape, dtype in EVICT_CASES:
        es = torch.empty((), dtype=getattr(torch, dtype)).element_size()
        x = bench._make_input(bench.Case(shape, dtype))
        ref = x.t().contiguous()
        variants = {"auto": lambda x, o: tileflip.transpose(x, o)}
        if min(shape) >= 8:
            table = tuning.triton_config(es, shape, shape[1])
            variants["table-evict"] = tile(table._replace(evict_last=1))
            variants["table-outtile-evict"] = tile(table._replace(out_tile=1, evict_last=1))
            variants["32x32w4-outtile"] = tile(TileConfig(32, 32, 4, 0, 1, 0, 1, 0))
            variants["32x32w4-outtile-evict"] = tile(TileConfig(32, 32, 4, 0, 1, 0, 1, 1))
            variants["32x32w4-outtile-evict-i0"] = tile(TileConfig(32, 32, 4, 0, 0, 0, 1, 1))
            for const in (False, True):
                for ev in (False, True):
                    name = f"out-tile-{'const' if const else 'runtime'}{'-evict' if ev else ''}"
                    variants[name] = out_tile(const, ev)
        else:
            variants["gather"] = lambda x, o: tileflip.transpose(x, o, backend="triton-gather")
            variants["gather-runtime"] = gather_evict(False)
            variants["gather-runtime-evict"] = gather_evict(True)
            variants["gather-const"] = gather_const
        _compare(records, "evict", shape, dtype, x, ref, variants, flush)


def magic_divisor(d: int) -> tuple[int, int]:
    """(m, s) with n // d == umulhi(n, m) >> s for every 0 <= n < 2**31 (d >= 2; round-up method: l =
    ceil(log2 d), m = ceil(2**(31 + l) / d) < 2**32, s = l - 1). ``m`` is passed as its int32 bit pattern."""
    bits = (d - 1).bit_length()
    m = -(-(1 << (31 + bits)) // d)
    return (m - (1 << 32) if m >= 1 << 31 else m), bits - 1


@triton.jit(do_not_specialize=["magic", "shift"])
def gather_magic_kernel(x, out, M, sxm, sxn, total, magic, shift, BLOCK: tl.constexpr):
    # The gather with its division by M done as a multiply-high by a host-computed magic number.
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = o < total
    j = (tl.umulhi(o.to(tl.uint32), magic.to(tl.uint32, bitcast=True)) >> shift.to(tl.uint32)).to(tl.int32)
    i = o - j * M
    v = tl.load(x + i * sxm + j * sxn, mask=mask, eviction_policy="evict_last")
    tl.store(out + o, v, mask=mask)


def gather_magic(x, out):
    M, N = x.shape
    magic, shift = magic_divisor(M)
    gather_magic_kernel[(triton.cdiv(M * N, 1024),)](as_uint(x), as_uint(out), M, x.stride(0), x.stride(1), M * N,
                                                     magic, shift, 1024, num_warps=4)  # fmt: skip


TINY_CASES = [((1024, 512), d) for d in ("int8", "bfloat16", "float32", "float64")] + [
    ((4096, 128), d) for d in ("int8", "bfloat16", "float32", "float64")] + [
    ((31, 65), d) for d in ("int8", "bfloat16", "float32", "float64")] + [
    ((2, 100000), d) for d in ("int8", "bfloat16", "float32", "float64")]  # fmt: skip
# torch.compile's form (32 x 32, 4 warps, output orientation, evict_last loads, every tile masked) in
# the production kernel on a 2-D grid, and its neighbours.
TINY_TILES = {
    "g-1o1i0e1": TileConfig(32, 32, 4, -1, 0, 0, 1, 1),
    "g-1o1i1e1": TileConfig(32, 32, 4, -1, 1, 0, 1, 1),
    "g-1o1i0e0": TileConfig(32, 32, 4, -1, 0, 0, 1, 0),
    "g0o1i0e1": TileConfig(32, 32, 4, 0, 0, 0, 1, 1),
    "g-1o0i1e1": TileConfig(32, 32, 4, -1, 1, 0, 0, 1),
    "64x32g-1o1i0e1": TileConfig(64, 32, 4, -1, 0, 0, 1, 1),
}


def tiny(records):
    """The launch-bound cases: torch.compile's kernel form in tileflip's kernel (2-D grid, group_m=-1),
    beside auto, the standalone form and torch.compile; the sliver cases (2 x 100000): the gather with
    evict_last and with a multiply-high division. Events (3 interleaved rounds) and profiler durations."""
    flush = timing.flush_fn("cuda")
    for shape, dtype in TINY_CASES:
        x = bench._make_input(bench.Case(shape, dtype))
        ref = x.t().contiguous()
        variants = {"auto": lambda x, o: tileflip.transpose(x, o)}
        if min(shape) >= 8:
            for name, c in TINY_TILES.items():
                variants[name] = tile(c)
            variants["out-tile-runtime-evict"] = out_tile(False, True)
        else:
            variants["gather-runtime-evict"] = gather_evict(True)
            variants["gather-magic-evict"] = gather_magic
            variants["g-1o1i0e1"] = tile(TINY_TILES["g-1o1i0e1"])
        _compare(records, "tiny", shape, dtype, x, ref, variants, flush)


BAND_CASES = [((16384, 16384), d) for d in ("float64", "float32", "int8", "bfloat16")] + [
    ((8192, 8192), "float64"), ((8192, 8191), "float64"), ((8192, 8191), "float32")]  # fmt: skip
# Row bands (G = 8 ... 128 tile rows) measured below plain column order on every case in session 7. Session
# 12 measured the other orders the 2-D kernel then had for it, and none reached column order: run 1 bands of
# G = 2 ... 16 tile columns (commit c0d8601, experiments/h200-2026-12-01-order-2d-column-bands-s12run1.json),
# run 3 column order skewed by a tile column every 1 ... 32 tile rows, the diagonal order at 1 (commit
# 3789ab9, experiments/h200-2026-12-01-order-2d-skews-s12run3.json); they were removed from the kernel.
BAND_GROUPS = (0, 8, 16, 32, 64, 128)


def bands(records):
    """The >= 256 MiB cases in column order within bands of G tile rows (``group_m`` G > 1: the programs
    resident at one time read fewer distinct pages of the input) beside plain column order (G = 0), at
    the table's tile, and torch.compile."""
    for shape, dtype in BAND_CASES:
        es = torch.empty((), dtype=getattr(torch, dtype)).element_size()
        table = tuning.triton_config(es, shape, shape[1])
        variants = [("auto", lambda x, o: tileflip.transpose(x, o))]
        for g in BAND_GROUPS:
            c = table._replace(group_m=g)
            variants.append((f"{c.block_m}x{c.block_n}w{c.num_warps}o{c.out_tile}e{c.evict_last}-g{g}", tile(c)))
        run_case(shape, dtype, variants, records, compile_peer=True)
        torch.cuda.empty_cache()


STRIDE_CASES = [((16384, 16384), "float64"), ((8192, 8192), "float64"), ((16384, 16384), "float32"),
                ((16384, 16384), "int8"), ((16384, 16384), "bfloat16")]  # fmt: skip
STRIDE_PAD_BYTES = (128, 2048)  # bytes added to a row stride (fp64: 16 and 256 elements, as in session 12)


def strides(records):
    """Whether the power-of-two row strides limit the >= 256 MiB squares (every backend stops near 91-94% on
    fp64 16384^2, whose rows are 128 KiB): the table's tile on the input, the output or both held in a
    buffer whose rows are STRIDE_PAD_BYTES longer (the same elements moved), beside the contiguous
    call, torch.compile on each input, and the copy of the same byte count, interleaved. ``STRIDE_DTYPES``
    (space-separated dtype names) keeps only the cases of those dtypes."""
    keep = os.environ.get("STRIDE_DTYPES", "").split()
    for shape, dtype in STRIDE_CASES:
        if keep and dtype not in keep:
            continue
        M, N = shape
        es = torch.empty((), dtype=getattr(torch, dtype)).element_size()
        config = tuning.triton_config(es, shape, N)
        x = bench._make_input(bench.Case(shape, dtype))
        ref = x.t().contiguous()
        out = torch.empty_like(ref)
        src, dst = torch.empty_like(ref), torch.empty_like(ref)
        fns, exact = {"copy": lambda dst=dst, src=src: dst.copy_(src)}, {}
        inputs, outputs = {"c": x}, {"c": out}
        for pad in (b // es for b in STRIDE_PAD_BYTES):
            inputs[f"p{pad}"] = torch.empty((M, N + pad), dtype=x.dtype, device="cuda")[:, :N]
            inputs[f"p{pad}"].copy_(x)
            outputs[f"p{pad}"] = torch.empty((N, M + pad), dtype=x.dtype, device="cuda")[:, :M]
        for (ik, xi), (ok, oi) in [(a, b) for a in inputs.items() for b in outputs.items()]:
            if ik != "c" and ok != "c" and ik != ok:
                continue
            name = f"in-{ik}-out-{ok}"
            oi.fill_(0)
            triton_transpose.launch(xi, oi, config)
            exact[name] = torch.equal(bits(oi), bits(ref))
            fns[name] = lambda xi=xi, oi=oi: triton_transpose.launch(xi, oi, config)
        for ik, xi in inputs.items():
            torch._dynamo.reset()
            compiled = torch.compile(lambda t: t.t().contiguous(), dynamic=False)
            exact[f"torch-compile-in-{ik}"] = torch.equal(bits(compiled(xi)), bits(ref))
            fns[f"torch-compile-in-{ik}"] = lambda c=compiled, xi=xi: c(xi)
        times, copy_ms = _timed_rounds(fns)
        line = [f"{dtype:9s} {M}x{N}"]
        for name in fns:
            ms = statistics.median(times[name])
            records.append({"section": "strides", "shape": list(shape), "dtype": dtype, "variant": name, "ms": ms,
                            "ms_rounds": times[name], "copy_ms": copy_ms, "fraction_of_copy": copy_ms / ms,
                            "config": list(config), "exact": exact.get(name, True)})  # fmt: skip
            line.append(f"{name}={copy_ms / ms:.3f}{'' if exact.get(name, True) else '!'}")
        print(" ".join(line), flush=True)
        del x, ref, out, src, dst, inputs, outputs, fns, xi, oi, compiled
        torch.cuda.empty_cache()


def fewwarps(records):
    """Small cases: our tile kernel on 1 or 2 warps; skinny fp32/fp64 cases: more tiles in column order;
    and the configuration torch.compile picked for each."""
    from torch._inductor.codecache import PyCodeCache

    for shape, dtype in [c for c in SMALL if min(c[0]) >= 8] + SKINNY:
        variants = [("auto", lambda x, o: tileflip.transpose(x, o))]
        for c in FEW_WARP_TILES if (shape, dtype) in SMALL else SKINNY_TILES:
            variants.append((f"{c.block_m}x{c.block_n}w{c.num_warps}g{c.group_m}", tile(c)))
        first = len(PyCodeCache.modules)
        run_case(shape, dtype, variants, records, compile_peer=True)
        print(f"  torch.compile configs: {inductor_configs(first)}", flush=True)


def host(records):
    for shape in bench.HOST_SHAPES:
        M, N = shape
        x = bench._make_input(bench.Case(shape, "float32"))
        out = torch.empty((N, M), device="cuda")
        dt, dev = x.dtype, x.device
        xt = x.t()
        fns = {
            "torch copy_": lambda: out.copy_(x.t()),
            "torch contiguous": lambda: x.t().contiguous(),
            "tileflip transpose(x, out)": lambda: tileflip.transpose(x, out),
            "tileflip transpose(x)": lambda: tileflip.transpose(x),
            "alloc x.new_empty((N, M))": lambda: x.new_empty((N, M)),
            "alloc x.new_empty(N, M)": lambda: x.new_empty(N, M),
            "alloc torch.empty(kw from x)": lambda: torch.empty((N, M), dtype=x.dtype, device=x.device),
            "alloc torch.empty(kw held)": lambda: torch.empty((N, M), dtype=dt, device=dev),
            "alloc torch.empty_strided": lambda: torch.empty_strided((N, M), (M, 1), dtype=dt, device=dev),
            "alloc empty_like(x.t(), contiguous)": lambda: torch.empty_like(xt, memory_format=torch.contiguous_format),
            "read x.shape": lambda: x.shape,
            "read x.stride()": lambda: x.stride(),
            "read x.data_ptr()": lambda: x.data_ptr(),
            "read x.get_device()": lambda: x.get_device(),
            "read x.dtype": lambda: x.dtype,
            "read x.is_contiguous()": lambda: x.is_contiguous(),
            "read x.is_cuda": lambda: x.is_cuda,
            "empty call": lambda: None,
        }
        for r in range(3):
            for name, fn in fns.items():
                records.append({"section": "host", "shape": list(shape), "variant": name, "round": r,
                                "us": bench._host_us(fn, 2000)})  # fmt: skip
        for name in fns:
            us = statistics.median(v["us"] for v in records if v.get("variant") == name and v["shape"] == list(shape)
                                   and v["section"] == "host")  # fmt: skip
            print(f"host {shape} {name}: {us:.2f} us", flush=True)


def main(out_path, sections):
    records = []
    for s in sections:
        {"large": large, "small": small, "host": host, "fewwarps": fewwarps, "forms": forms, "spin": spin,
         "launchers": launchers, "packed": packed, "profile": profile, "bands": bands, "strides": strides,
         "evict": evict, "tiny": tiny}[s](records)
        json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
                   "records": records}, open(out_path, "w"), indent=1)  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] or ["large", "small", "host"])
