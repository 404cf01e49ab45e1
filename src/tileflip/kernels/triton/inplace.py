"""The in-place transpose kernels: pairwise tile swaps of a square, and one pass of a rectangular
decomposition (``tileflip.plan.inplace``) on chip or staged through a scratch buffer.

Every kernel reads all the elements its program will move, waits at a block barrier, then writes them:
a program owns its group (a tile pair, a row, a stripe of columns), so no other program reads or writes
what it does, and the barrier keeps one warp's stores from landing on elements another warp has yet to
load (staged waves need no barrier: they read the scratch). The maps are written out in the one pass
kernel (``launch.py`` says why there are no ``@triton.jit`` helpers). MAP: 0 rotate columns, 1 shuffle
rows, 2 shuffle columns (``plan.inplace.PASS_MAPS``).
"""

from __future__ import annotations

import triton
import triton.language as tl

from tileflip.kernels.dtypes import as_int, as_uint
from tileflip.kernels.triton import launch as launcher
from tileflip.kernels.triton.launch import is_interpreted_kernel, spec_of
from tileflip.plan import magic_divisor
from tileflip.plan.inplace import InPlacePlan, Pass

INT32_LIMIT = 2**31
STAGED_BLOCK = (32, 64)  # a staged pass's tile of the wave: rows, columns


@triton.jit
def swap_tiles_kernel(ptr, n, tiles, TILE: tl.constexpr, INDEX_64: tl.constexpr):
    pid = tl.program_id(0)
    if INDEX_64:
        pid = pid.to(tl.int64)
    per_matrix = tiles * tiles
    mat = pid // per_matrix
    ti = (pid % per_matrix) // tiles
    tj = pid % tiles
    if ti <= tj:  # the pair's upper program moves both tiles; the lower one does nothing
        base = mat * n * n
        x = tl.arange(0, TILE)
        if INDEX_64:
            x = x.to(tl.int64)
        at_a = base + (ti * TILE + x[:, None]) * n + (tj * TILE + x[None, :])
        at_b = base + (tj * TILE + x[:, None]) * n + (ti * TILE + x[None, :])
        if (tj + 1) * TILE <= n:  # both tiles whole: unmasked, so that rows move as 16-byte vectors
            a = tl.load(ptr + at_a)
            b = tl.load(ptr + at_b)
            tl.debug_barrier()
            tl.store(ptr + at_b, tl.trans(a))
            tl.store(ptr + at_a, tl.trans(b))
        else:
            mask_a = (ti * TILE + x[:, None] < n) & (tj * TILE + x[None, :] < n)
            mask_b = (tj * TILE + x[:, None] < n) & (ti * TILE + x[None, :] < n)
            a = tl.load(ptr + at_a, mask=mask_a)
            b = tl.load(ptr + at_b, mask=mask_b)
            tl.debug_barrier()
            tl.store(ptr + at_b, tl.trans(a), mask=mask_b)
            tl.store(ptr + at_a, tl.trans(b), mask=mask_a)


@triton.jit
def group_pass_kernel(ptr, slot, gm, gn, c, b, ainv, groups, first, count, mat, tiles_s, a, lift, gm_magic,
                      gm_shift, c_magic, c_shift, b_magic, b_shift, MAP: tl.constexpr, SCATTER: tl.constexpr,
                      ROWS: tl.constexpr, STAGED: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_S: tl.constexpr,
                      INDEX_64: tl.constexpr):  # fmt: skip
    """One pass over the (gm, gn) grid of each matrix.

    On chip (not STAGED): a program is one group, row ``R`` (ROWS; BLOCK_R is 1) or a stripe of BLOCK_S
    columns of every row; ``slot`` is unused. STAGED: one wave, rows [first, first + count) of the
    (batch x gm, gn) view (ROWS) or columns [first, first + count) of matrix ``mat``, whose bytes ``slot``
    holds (count x gn, or gm x count); a program is a BLOCK_R x BLOCK_S tile of it.

    Without INDEX_64 every dividend is below 2**31, and each division by gm, c or b is a multiply-high and a
    shift by ``*_magic``, ``*_shift`` (``plan.magic_divisor``; a divisor of 1 passes its dividend): a
    hardware division costs some twenty instructions an element. ``a`` is gm / c, ``lift`` the least
    multiple of b at or above a (it keeps the row shuffle's dividend non-negative)."""
    pid = tl.program_id(0)
    if INDEX_64:
        pid = pid.to(tl.int64)
    zero = tl.zeros([BLOCK_R, BLOCK_S], dtype=pid.dtype)
    if STAGED:
        i = (pid // tiles_s) * BLOCK_R + tl.arange(0, BLOCK_R)[:, None] + zero
        j = (pid % tiles_s) * BLOCK_S + tl.arange(0, BLOCK_S)[None, :] + zero
        if ROWS:  # i: a row of the wave, j: its column
            row = first + i
            if INDEX_64:
                mat_of = row // gm
            else:
                mat_of = (tl.umulhi(row.to(tl.uint32), gm_magic.to(tl.uint32, bitcast=True))
                          >> gm_shift.to(tl.uint32)).to(tl.int32)  # fmt: skip
            R = row - mat_of * gm
            S = j
            base = ptr + mat_of * gm * gn  # the matrix's first element
            mask = (i < count) & (j < gn)
        else:  # i: a row of the matrix, j: a column of the wave
            R = i
            S = first + j
            base = ptr + mat * gm * gn
            mask = (i < gm) & (j < count)
    else:
        g = pid % groups
        if ROWS:
            R = g + zero
            S = tl.arange(0, BLOCK_S)[None, :] + zero
        else:
            R = tl.arange(0, BLOCK_R)[:, None] + zero
            S = g * BLOCK_S + tl.arange(0, BLOCK_S)[None, :] + zero
        base = ptr + (pid // groups) * gm * gn
        mask = (R < gm) & (S < gn)
    if INDEX_64:
        if MAP == 0:
            r = (R + S // b) % gm
            s = S
        elif MAP == 1:
            k = (S - R + gm) % c
            v = (R + k) % gm
            t = (S - v) % gn
            t = tl.where(t < 0, t + gn, t) // c
            r = R
            s = (t * ainv) % b + k * b
        else:
            p = R * gn + S
            r = ((p % gm) - (p // gm) // b + gm) % gm
            s = S
    else:
        gm_m = gm_magic.to(tl.uint32, bitcast=True)
        c_m = c_magic.to(tl.uint32, bitcast=True)
        b_m = b_magic.to(tl.uint32, bitcast=True)
        if MAP == 0:  # R + S // b < 2 gm: one subtraction for the modulus
            q = tl.where(b == 1, S, (tl.umulhi(S.to(tl.uint32), b_m) >> b_shift.to(tl.uint32)).to(tl.int32))
            r = R + q
            r = tl.where(r >= gm, r - gm, r)
            s = S
        elif MAP == 1:
            # d = S - R + gm > 0, q = d // c, k = d mod c; v = (R + k) mod gm wraps at most once, and then
            # t = (q - a + a [R + k >= gm]) mod b, lifted by ``lift`` to a non-negative dividend.
            d = S - R + gm
            q = tl.where(c == 1, d, (tl.umulhi(d.to(tl.uint32), c_m) >> c_shift.to(tl.uint32)).to(tl.int32))
            k = d - q * c
            w = q + tl.where(R + k >= gm, 0, -a) + lift
            wq = tl.where(b == 1, w, (tl.umulhi(w.to(tl.uint32), b_m) >> b_shift.to(tl.uint32)).to(tl.int32))
            t = w - wq * b
            y = t * ainv
            yq = tl.where(b == 1, y, (tl.umulhi(y.to(tl.uint32), b_m) >> b_shift.to(tl.uint32)).to(tl.int32))
            r = R
            s = y - yq * b + k * b
        else:  # p = R gn + S = j gm + i; r = (i - j // b) mod gm wraps at most once
            p = R * gn + S
            pq = (tl.umulhi(p.to(tl.uint32), gm_m) >> gm_shift.to(tl.uint32)).to(tl.int32)
            x = tl.where(b == 1, pq, (tl.umulhi(pq.to(tl.uint32), b_m) >> b_shift.to(tl.uint32)).to(tl.int32))
            r = p - pq * gm - x
            r = tl.where(r < 0, r + gm, r)
            s = S
    if STAGED:  # the slot: a wave's rows whole (a row's position is its column), or its columns of every row
        if ROWS:
            at_dest = i * gn + S
            at_source = i * gn + s
        else:
            at_dest = R * count + j
            at_source = r * count + j
        if SCATTER:
            tl.store(base + r * gn + s, tl.load(slot + at_dest, mask=mask), mask=mask)
        else:
            tl.store(base + R * gn + S, tl.load(slot + at_source, mask=mask), mask=mask)
    elif SCATTER:
        val = tl.load(base + R * gn + S, mask=mask)
        tl.debug_barrier()
        tl.store(base + r * gn + s, val, mask=mask)
    else:
        val = tl.load(base + r * gn + s, mask=mask)
        tl.debug_barrier()
        tl.store(base + R * gn + S, val, mask=mask)


_INTERPRETED = is_interpreted_kernel(swap_tiles_kernel)


def _launch(kernel, name, grid, flat, slot, scalars, num_warps):
    if _INTERPRETED:
        args = (flat,) if slot is None else (flat, slot)
        kernel[grid](*args, *scalars, num_warps=num_warps)
        return
    device = flat.get_device()
    pointers = (flat.data_ptr(),) if slot is None else (flat.data_ptr(), slot.data_ptr())
    key = ("inplace-" + name, flat.element_size(), device, num_warps, spec_of(scalars),
           tuple(p % 16 == 0 for p in pointers))  # fmt: skip
    tensors = (lambda: (flat,)) if slot is None else (lambda: (flat, slot))
    launcher.launch(kernel, key, (grid[0], 1), device, pointers, tensors, scalars, {"num_warps": num_warps})


def _divisors(p: Pass, index_64: bool) -> tuple:
    """(a, lift, then magic and shift of gm, c and b) of a pass's 32-bit divisions (zeros where it runs in
    64-bit arithmetic, or for a divisor of 1, which the kernel passes through)."""
    if index_64:
        return (0,) * 8
    prm = p.params
    gm, c, b = prm["m"], prm["c"], prm["b"]
    a = gm // c
    out = [a, -(-a // b) * b]
    for d in (gm, c, b):
        out.extend(magic_divisor(d) if d >= 2 else (0, 0))
    return tuple(out)


def _warps(elements: int) -> int:
    return max(4, min(16, elements // 512))


def run_pass(x, p: Pass, batch: int, scratch) -> None:
    """Enqueue one pass on ``x``'s storage (a contiguous tensor of ``batch`` matrices), with ``scratch`` (a
    flat tensor of the plan's scratch bytes, or None) for staged passes."""
    flat = as_uint(x.reshape(-1))
    gm, gn = p.grid
    total = batch * gm * gn
    if p.name == "swap tiles":
        tiles = -(-gn // p.tile)
        index_64 = batch * tiles * tiles * p.tile * p.tile >= INT32_LIMIT or total >= INT32_LIMIT
        _launch(swap_tiles_kernel, "swap", (batch * tiles * tiles,), flat, None, (gn, tiles, p.tile, index_64), 4)
        return
    prm = p.params
    c, b, ainv = prm["c"], prm["b"], prm["ainv"]
    products = max(b, 1) ** 2  # t a' < b^2
    rows = p.group == "row"
    if p.mode == "on chip":
        block_s = triton.next_power_of_2(gn if rows else p.stripe)
        block_r = 1 if rows else triton.next_power_of_2(gm)
        groups = gm if rows else -(-gn // block_s)
        index_64 = total + block_r * block_s >= INT32_LIMIT or products >= INT32_LIMIT or batch * groups >= INT32_LIMIT
        scalars = (gm, gn, c, b, ainv, groups, 0, 0, 0, 1, *_divisors(p, index_64), p.map_index, p.scatter, rows,
                   False, block_r, block_s, index_64)  # fmt: skip
        _launch(group_pass_kernel, "group", (batch * groups,), flat, flat, scalars, _warps(block_r * block_s))
        return
    # The copies into the scratch are torch's, on the signed integers of the element size (torch's CUDA
    # copy covers every signed width).
    slot_signed = as_int(scratch)
    view2d = as_int(flat).view(batch * gm, gn)
    view3d = as_int(flat).view(batch, gm, gn)
    block_r, block_s = STAGED_BLOCK
    index_64 = total + block_r * block_s >= INT32_LIMIT or products >= INT32_LIMIT  # a wave is within the total
    divisors = _divisors(p, index_64)
    if rows:
        all_rows = batch * gm
        tiles_s = -(-gn // block_s)
        for first in range(0, all_rows, p.wave_groups):
            count = min(p.wave_groups, all_rows - first)
            slot_signed[: count * gn].view(count, gn).copy_(view2d[first : first + count])
            scalars = (gm, gn, c, b, ainv, 1, first, count, 0, tiles_s, *divisors, p.map_index, p.scatter, True,
                       True, block_r, block_s, index_64)  # fmt: skip
            _launch(group_pass_kernel, "staged", (-(-count // block_r) * tiles_s,), flat, scratch, scalars, 4)
        return
    width = p.wave_groups * p.stripe  # columns a wave holds
    for mat in range(batch):
        for first in range(0, gn, width):
            count = min(width, gn - first)
            slot_signed[: gm * count].view(gm, count).copy_(view3d[mat, :, first : first + count])
            tiles_s = -(-count // block_s)
            scalars = (gm, gn, c, b, ainv, 1, first, count, mat, tiles_s, *divisors, p.map_index, p.scatter, False,
                       True, block_r, block_s, index_64)  # fmt: skip
            _launch(group_pass_kernel, "staged", (-(-gm // block_r) * tiles_s,), flat, scratch, scalars, 4)


def run_plan(x, plan: InPlacePlan, scratch) -> None:
    """Enqueue every pass of ``plan`` on ``x``'s storage."""
    for p in plan.passes:
        run_pass(x, p, plan.batch, scratch)
