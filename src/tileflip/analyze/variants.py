"""The four transpose kernels as address generators: every warp access of any program, from the planner.

A ``Variant`` is one kernel at one shape, dtype, strides and tile; ``accesses(pids)`` lists each memory
access of those programs as a ``Batch`` of byte addresses (programs, instructions, 32 lanes), with the
element coordinates of global accesses so that sectors can be traced back to the programs sharing them.
Thread mappings follow kernels/cuda/transpose.cu and kernels/triton/transpose.py.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np

from tileflip.analyze.access import BANK_WIDTH, LINE, WARP
from tileflip.analyze.triton_layout import TRITON_DEFAULTS, layout_instructions, triton_blocked_layout, triton_record
from tileflip.plan import TransposeGrid, cdiv, check_tile, transpose_grid

KERNELS = ("naive", "tiled_nopad", "tiled", "triton")


@dataclass
class Batch:
    """One access of every sampled program: addresses (programs, instructions, 32), -1 = masked lane."""

    name: str
    space: str
    op: str
    width: int
    addr: np.ndarray
    instr_per_warp: int
    coords: np.ndarray | None = None
    tensor: str = "smem"


@dataclass(frozen=True)
class Variant:
    kernel: str
    M: int
    N: int
    itemsize: int
    x_strides: tuple
    out_strides: tuple
    grid: TransposeGrid
    threads: tuple
    threads_per_cta: int
    smem_bytes: int
    regs_per_thread: int | None
    load_bytes_per_cta: int
    pad: int = 0
    num_warps: int = 0
    layouts: dict | None = None
    vec: tuple = (1, 1)
    notes: tuple = ()

    def tiles(self, pids) -> tuple[np.ndarray, np.ndarray]:
        """(pid_m, pid_n) of each program, by the planner's own decoding."""
        pids = np.asarray(pids, dtype=np.int64)
        if self.grid.group_m in (-1, 0, 1):
            return self.grid.tile_of(pids)
        pairs = np.array([self.grid.tile_of(int(p)) for p in pids], dtype=np.int64).reshape(-1, 2)
        return pairs[:, 0], pairs[:, 1]

    def pid_of(self, pid_m, pid_n):
        """Inverse of ``tiles``: the launch position of tile (pid_m, pid_n)."""
        g = self.grid
        if g.group_m == 1:
            return pid_m * g.grid_n + pid_n
        if g.group_m in (0, -1):
            return pid_n * g.grid_m + pid_m
        first_m = (pid_m // g.group_m) * g.group_m
        rows = np.minimum(g.grid_m - first_m, g.group_m)
        return first_m * g.grid_n + pid_n * rows + (pid_m - first_m)

    def accesses(self, pids: np.ndarray) -> list[Batch]:
        pid_m, pid_n = self.tiles(pids)
        if self.kernel == "naive":
            return self._naive(pid_m, pid_n)
        if self.kernel == "triton":
            return self._triton(pid_m, pid_n)
        return self._tiled(pid_m, pid_n)

    def owner(self, coords: np.ndarray, tensor: str) -> np.ndarray:
        """Program id that touches tensor element ``coords`` (the planner's tile, in launch order)."""
        i, j = (coords[..., 0], coords[..., 1]) if tensor == "x" else (coords[..., 1], coords[..., 0])
        return self.pid_of(i // self.grid.block_m, j // self.grid.block_n)

    def _x_addr(self, row, col, active):
        return np.where(active, (row * self.x_strides[0] + col * self.x_strides[1]) * self.itemsize, -1)

    def _out_addr(self, row, col, active):
        return np.where(active, (row * self.out_strides[0] + col * self.out_strides[1]) * self.itemsize, -1)

    def _naive(self, pid_m, pid_n) -> list[Batch]:
        tx, ty = self.threads
        warps = cdiv(tx * ty, WARP)
        t = np.arange(warps * WARP)
        x, y = t % tx, t // tx
        row = pid_m[:, None] * ty + y[None, :]
        col = pid_n[:, None] * tx + x[None, :]
        active = (t < tx * ty)[None, :] & (row < self.M) & (col < self.N)
        shape = (len(pid_m), warps, WARP)
        in_coords = np.stack([row, col], axis=-1).reshape(*shape, 2)
        return [
            Batch("global_load", "global", "load", self.itemsize, self._x_addr(row, col, active).reshape(shape), 1,
                  in_coords, "x"),
            Batch("global_store", "global", "store", self.itemsize, self._out_addr(col, row, active).reshape(shape), 1,
                  in_coords[..., ::-1], "out"),
        ]

    def _tiled(self, pid_m, pid_n) -> list[Batch]:
        tile, ty = self.threads
        es, width = self.itemsize, tile + self.pad
        warps = tile * ty // WARP
        t = np.arange(tile * ty)
        x, y = t % tile, t // tile
        loads, sts, lds, stores, in_c, out_c = [], [], [], [], [], []
        for k in range(tile // ty):
            r = y + k * ty
            row = pid_m[:, None] * tile + r[None, :]
            col = pid_n[:, None] * tile + x[None, :]
            ok_in = (row < self.M) & (col < self.N)
            orow = pid_n[:, None] * tile + r[None, :]
            ocol = pid_m[:, None] * tile + x[None, :]
            ok_out = (orow < self.N) & (ocol < self.M)
            loads.append(self._x_addr(row, col, ok_in))
            sts.append(np.where(ok_in, (r * width + x)[None, :] * es, -1))
            lds.append(np.where(ok_out, (x * width + r)[None, :] * es, -1))
            stores.append(self._out_addr(orow, ocol, ok_out))
            in_c.append(np.stack([row, col], axis=-1))
            out_c.append(np.stack([orow, ocol], axis=-1))
        k_iters = tile // ty

        def order(parts, extra=()):
            # (k, programs, threads) -> (programs, warps * k, 32): warp-major, then the loop.
            a = np.stack(parts, axis=0).reshape(k_iters, len(pid_m), warps, WARP, *extra)
            return np.moveaxis(a, 0, 2).reshape(len(pid_m), warps * k_iters, WARP, *extra)

        return [
            Batch("global_load", "global", "load", es, order(loads), k_iters, order(in_c, (2,)), "x"),
            Batch("smem_store", "shared", "store", es, order(sts), k_iters),
            Batch("smem_load", "shared", "load", es, order(lds), k_iters),
            Batch("global_store", "global", "store", es, order(stores), k_iters, order(out_c, (2,)), "out"),
        ]

    def _triton(self, pid_m, pid_n) -> list[Batch]:
        bm, bn = self.grid.block_m, self.grid.block_n
        es, nw, n = self.itemsize, self.num_warps, len(pid_m)
        batches = []
        for name, op, shape, layout, vec in (
                ("global_load", "load", (bm, bn), self.layouts["load"], self.vec[0]),
                ("global_store", "store", (bn, bm), self.layouts["store"], self.vec[1])):
            start = layout_instructions(shape, layout, nw, vec)
            v = max(1, min(vec, layout["sizePerThread"][layout["order"][0]]))
            ipw = start.shape[1]
            if name == "global_load":
                row = pid_m[:, None, None, None] * bm + start[None, ..., 0]
                col = pid_n[:, None, None, None] * bn + start[None, ..., 1]
                ok = (row < self.M) & (col < self.N)
                addr, tensor = self._x_addr(row, col, ok), "x"
            else:
                row = pid_n[:, None, None, None] * bn + start[None, ..., 0]
                col = pid_m[:, None, None, None] * bm + start[None, ..., 1]
                ok = (row < self.N) & (col < self.M)
                addr, tensor = self._out_addr(row, col, ok), "out"
            coords = np.stack([row, col], axis=-1).reshape(n, nw * ipw, WARP, 2)
            batches.append(Batch(name, "global", op, v * es, addr.reshape(n, nw * ipw, WARP), ipw, coords, tensor))
        # The conversion behind tl.trans, taken as conflict-free: 128 bytes per warp instruction.
        per_warp = max(1, cdiv(bm * bn * es, nw * LINE))
        base = (np.arange(nw * per_warp)[:, None] * LINE + np.arange(WARP)[None, :] * BANK_WIDTH)
        smem = np.broadcast_to(base, (n, nw * per_warp, WARP)).copy()
        batches.insert(1, Batch("smem_store", "shared", "store", BANK_WIDTH, smem, per_warp))
        batches.insert(2, Batch("smem_load", "shared", "load", BANK_WIDTH, smem.copy(), per_warp))
        return batches


def pair_of(value, what: str) -> tuple[int, int]:
    """Two ints given as a tuple or list (text such as "16x16" is the command line's to parse)."""
    try:
        if isinstance(value, (str, bytes)) or len(value) != 2:
            raise TypeError
        a, b = (operator.index(v) for v in value)
    except TypeError:
        raise ValueError(f"{what} must be a pair of ints such as (16, 16), got {value!r}") from None
    return a, b


def _check_threads(tx: int, ty: int) -> None:
    if tx <= 0 or ty <= 0 or tx * ty > 1024:
        raise ValueError(f"threads must be positive with at most 1024 in a block (CUDA's limit), got {tx}x{ty}")


def build_variant(kernel: str, M: int, N: int, itemsize: int, *, threads=None, block=None, num_warps=None,
                  strides=None, out_strides=None, layouts=None, group_m=1) -> Variant:
    """One kernel at one shape: its grid, thread mapping, shared tile, registers and (Triton) layouts."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    x_strides = pair_of(strides or (N, 1), "strides")
    o_strides = pair_of(out_strides or (M, 1), "out_strides")
    if min(x_strides + o_strides) < 0:
        raise ValueError("negative strides are not modelled")
    common = {"kernel": kernel, "M": M, "N": N, "itemsize": itemsize, "x_strides": x_strides,
              "out_strides": o_strides}
    if kernel == "naive":
        tx, ty = pair_of(threads or (16, 16), "threads")
        _check_threads(tx, ty)
        grid = transpose_grid(M, N, ty, tx)
        notes = (
            (f"naive: block {tx}x{ty} threads covers {ty} input rows x {tx} columns; the kernel's 1-D grid is "
             "decoded as divmod(blockIdx.x, grid_n) (a 2-D grid gives the same warps in another launch order)"),
            "naive: registers assumed <= 32 per thread, so 2048 threads per SM are resident",
        )
        return Variant(grid=grid, threads=(tx, ty), threads_per_cta=tx * ty, smem_bytes=0, regs_per_thread=None,
                       load_bytes_per_cta=tx * ty * itemsize, notes=notes, **common)
    if kernel in ("tiled", "tiled_nopad"):
        tile, ty = pair_of(threads or (32, 8), "threads")
        _check_threads(tile, ty)
        if tile % ty or (tile * ty) % WARP:
            raise ValueError(f"tiled kernels need threads TILExROWS with ROWS dividing TILE, got {tile}x{ty}")
        pad = 1 if kernel == "tiled" else 0
        grid = transpose_grid(M, N, tile, tile)
        notes = (
            (f"{kernel}: {tile}x{tile + pad} shared tile of the element type, {tile}x{ty} threads, "
             f"{tile // ty} elements per thread; the whole tile's loads are in flight before the barrier"),
            f"{kernel}: registers assumed <= 32 per thread, so 2048 threads per SM are resident",
        )
        return Variant(grid=grid, threads=(tile, ty), threads_per_cta=tile * ty,
                       smem_bytes=tile * (tile + pad) * itemsize, regs_per_thread=None,
                       load_bytes_per_cta=tile * tile * itemsize, pad=pad, notes=notes, **common)
    return _triton_variant(common, block, num_warps, layouts, group_m)


def _triton_variant(common: dict, block, num_warps, layouts, group_m) -> Variant:
    M, N, itemsize = common["M"], common["N"], common["itemsize"]
    x_strides, o_strides = common["x_strides"], common["out_strides"]
    d_bm, d_bn, d_nw = TRITON_DEFAULTS[itemsize]
    bm, bn = pair_of(block, "block") if block else (d_bm, d_bn)
    check_tile(bm, bn, num_warps)
    nw = int(num_warps or (d_nw if (bm, bn) == (d_bm, d_bn) else 4 if bm * bn <= 2048 else 8))
    grid = transpose_grid(M, N, bm, bn, 1 if group_m is None else int(group_m))
    # Triton specializes a stride of 1 and hints divisibility by 16; both decide the vector width.
    in_dim = 1 if x_strides[1] == 1 else 0 if x_strides[0] == 1 else None
    in_aligned = all(s % 16 == 0 for s in x_strides if s != 1)
    out_aligned = o_strides[1] == 1 and o_strides[0] % 16 == 0
    rec = triton_record(itemsize, (bm, bn), nw, in_aligned and out_aligned) if in_dim == 1 else None
    given = dict(layouts or {})
    layouts = {
        "load": given.get("load") or triton_blocked_layout((bm, bn), itemsize, nw, contiguous_dim=in_dim,
                                                           aligned=in_aligned),
        "store": given.get("store") or triton_blocked_layout((bn, bm), itemsize, nw, aligned=out_aligned,
                                                             contiguous_dim=1 if o_strides[1] == 1 else None),
    }
    # A masked vector access needs the mask constant over the vector: bounds divisible by 16.
    vec_in = layouts["load"]["sizePerThread"][layouts["load"]["order"][0]]
    bound_in = N if layouts["load"]["order"][0] == 1 else M
    vec_out = layouts["store"]["sizePerThread"][layouts["store"]["order"][0]]
    bound_out = M if layouts["store"]["order"][0] == 1 else N
    vec = (vec_in if bound_in % 16 == 0 else 1, vec_out if bound_out % 16 == 0 else 1)
    # Registers and shared bytes: given with the layouts (read from a compiled kernel), else recorded.
    regs = given.get("regs") or (rec["regs"] if rec else None)
    smem = given.get("shared") or (rec["shared"] if rec else bm * bn * itemsize)
    notes = (
        (f"triton: {bm}x{bn} tile, {nw} warps; load layout {layouts['load']}, store layout {layouts['store']} "
         f"({'given' if 'load' in given else 'as compiled for sm_90 (rule checked against TTGIR)'}); "
         f"vector widths {vec}"),
        "triton: the layout conversion behind tl.trans is assumed conflict-free (swizzled shared memory)",
        (f"triton: {regs if regs else 'assumed <= 65536 / threads'} registers per thread, "
         f"{smem} bytes of shared memory"),
    )
    return Variant(grid=grid, threads=(WARP * nw, 1), threads_per_cta=WARP * nw, smem_bytes=smem,
                   regs_per_thread=regs, load_bytes_per_cta=bm * bn * itemsize, num_warps=nw, layouts=layouts,
                   vec=vec, notes=notes, **common)
