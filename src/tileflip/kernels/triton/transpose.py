"""The Triton 2-D transpose: the tile kernel, the gather kernel, and their launchers.

Shapes and strides are runtime arguments, so a new shape compiles nothing new: Triton specializes only
on which integers equal 1 or divide by 16 (``tileflip.plan.specialization_class``), plus the kernel's
own ``INDEX_64`` bit, and 20 new shapes of a class reuse one compiled kernel. Offsets are int32 unless
one may pass 2**31 (``needs_index_64``); interior tiles may take an unmasked branch; the grid is 1-D,
but for ``group_m == -1`` (column order on a 2-D grid, torch.compile's form, where gridDim.y fits).
Launches go through ``tileflip.kernels.triton.launch``. Design: ``docs/design.md`` (Kernels).
"""

from __future__ import annotations

import triton
import triton.language as tl

from tileflip.kernels.dtypes import as_uint
from tileflip.kernels.triton import launch as launcher
from tileflip.kernels.triton.launch import is_interpreted_kernel
from tileflip.plan import MAX_GRID_YZ, loop_rounds, magic_divisor


# grid_m and grid_n only decode the program id: their divisibility buys nothing, and leaving them
# specialized would compile a new kernel whenever a tile count happens to be 1 or a multiple of 16.
@triton.jit(do_not_specialize=["grid_m", "grid_n"])
def transpose_2d_kernel(
    x_ptr,
    out_ptr,
    M,
    N,
    stride_xm,
    stride_xn,
    stride_om,
    grid_m,
    grid_n,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    GROUP_M: tl.constexpr,
    INDEX_64: tl.constexpr,
    INTERIOR: tl.constexpr,
    OUT_TILE: tl.constexpr = 0,
    EVICT_LAST: tl.constexpr = 0,
    LOOP: tl.constexpr = 0,
):
    if LOOP:
        # A grid of G programs, fewer than the tiles (``launch_looped``): program p transposes tiles p,
        # p + G, p + 2G, ... in the program order, LOOP rounds (a power of two, at least tiles / G; a
        # constant, so that Triton's interpreter can run the loop too), so the kernel holds only G programs'
        # share of the GPU.
        for i in range(LOOP):
            t = tl.program_id(0) + i * tl.num_programs(0)
            if t < grid_m * grid_n:
                _transpose_tile(x_ptr, out_ptr, t, 0, M, N, stride_xm, stride_xn, stride_om, grid_m, grid_n,
                                BLOCK_M, BLOCK_N, GROUP_M, INDEX_64, INTERIOR, OUT_TILE, EVICT_LAST)  # fmt: skip
    else:
        _transpose_tile(x_ptr, out_ptr, tl.program_id(0), tl.program_id(1), M, N, stride_xm, stride_xn,
                        stride_om, grid_m, grid_n, BLOCK_M, BLOCK_N, GROUP_M, INDEX_64, INTERIOR, OUT_TILE,
                        EVICT_LAST)  # fmt: skip


@triton.jit
def _transpose_tile(
    x_ptr, out_ptr, pid, pid_y, M, N, stride_xm, stride_xn, stride_om, grid_m, grid_n,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr, INDEX_64: tl.constexpr,
    INTERIOR: tl.constexpr, OUT_TILE: tl.constexpr, EVICT_LAST: tl.constexpr,
):  # fmt: skip
    """Tile number ``pid`` (``pid_y``: the grid's y index, read in the order -1) of the kernel above."""
    # Program order: tileflip.plan.TransposeGrid.tile_of is the same decoding, for the CPU tools.
    if GROUP_M == 1:
        pid_m = pid // grid_n
        pid_n = pid % grid_n
    elif GROUP_M == 0:
        # Column order: consecutive programs walk down a column of input tiles, so the programs resident
        # at one time write a contiguous run of output rows.
        pid_m = pid % grid_m
        pid_n = pid // grid_m
    elif GROUP_M == -1:
        # Column order on a 2-D grid (grid_m x grid_n, x fastest): the same order with no decoding (the
        # launcher uses it only where grid_n fits gridDim.y).
        pid_m = pid
        pid_n = pid_y
    else:
        band = GROUP_M * grid_n
        first_m = (pid // band) * GROUP_M
        rows = tl.minimum(grid_m - first_m, GROUP_M)
        within = pid % band
        pid_m = first_m + within % rows
        pid_n = within // rows
    if INDEX_64:
        # Offsets past 2**31 elements: int64 before any multiply (pid_m * BLOCK_M * stride_xm overflows).
        pid_m = pid_m.to(tl.int64)
        pid_n = pid_n.to(tl.int64)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    POLICY: tl.constexpr = "evict_last" if EVICT_LAST else ""
    if OUT_TILE:
        # The tile held in the output's orientation: loaded through transposed addresses and stored as
        # it is; the compiler's layout conversion (coalesced load layout -> coalesced store layout) does
        # the transpose, with no tl.trans. The tuning sweep measures it beside the tl.trans form.
        out_ptrs = out_ptr + rn[:, None] * stride_om + rm[None, :]
        interior = ((pid_m + 1) * BLOCK_M <= M) & ((pid_n + 1) * BLOCK_N <= N) & (INTERIOR != 0)
        in_ptrs_t = x_ptr + rn[:, None] * stride_xn + rm[None, :] * stride_xm
        if interior:
            tl.store(out_ptrs, tl.load(in_ptrs_t, eviction_policy=POLICY))
        else:
            out_mask = (rn[:, None] < N) & (rm[None, :] < M)
            tl.store(out_ptrs, tl.load(in_ptrs_t, mask=out_mask, eviction_policy=POLICY), mask=out_mask)
    else:
        in_ptrs = x_ptr + rm[:, None] * stride_xm + rn[None, :] * stride_xn
        # The output tile is BLOCK_N x BLOCK_M: its pointers and its mask are built from swapped offsets,
        # never reused from the input side.
        out_ptrs = out_ptr + rn[:, None] * stride_om + rm[None, :]
        # INTERIOR == 0 folds the condition to false at compile time: one masked path, fewer registers.
        if ((pid_m + 1) * BLOCK_M <= M) & ((pid_n + 1) * BLOCK_N <= N) & (INTERIOR != 0):
            # An interior tile (all but the last row and column of tiles) needs no mask: one branch per
            # program instead of a compare per element.
            tl.store(out_ptrs, tl.trans(tl.load(in_ptrs, eviction_policy=POLICY)))
        else:
            in_mask = (rm[:, None] < M) & (rn[None, :] < N)
            out_mask = (rn[:, None] < N) & (rm[None, :] < M)
            tl.store(out_ptrs, tl.trans(tl.load(in_ptrs, mask=in_mask, eviction_policy=POLICY)), mask=out_mask)


INT32_LIMIT = 2**31 - 1


def needs_index_64(M: int, N: int, stride_xm: int, stride_xn: int, stride_om: int) -> bool:
    """Whether an element offset of the input or the output can pass int32 (part of the kernel's class)."""
    return max((M - 1) * stride_xm + (N - 1) * stride_xn, (N - 1) * stride_om + M - 1) > INT32_LIMIT


def is_interpreted() -> bool:
    """True when TRITON_INTERPRET=1 was set before this module was imported (the kernel then runs on CPU)."""
    return _INTERPRETED


_INTERPRETED = is_interpreted_kernel(transpose_2d_kernel)


def launch(x, out, config) -> None:
    """Transpose the 2-D integer view ``x`` (any strides) into ``out`` (N x M, unit column stride).

    ``config`` is a ``tileflip.tuning.TileConfig``; the caller has checked every argument and
    handles empty tensors. ``x`` and ``out`` may be given in their own dtype on the fast path: the
    compiled kernel only takes their addresses.
    """
    M, N = x.shape
    sxm, sxn = x.stride()
    launch_known(x, out, x.data_ptr(), out.data_ptr(), M, N, sxm, sxn, out.stride(0), x.element_size(),
                 x.get_device(), config)  # fmt: skip


def launch_looped(x, out, config, programs: int) -> None:
    """``launch`` on a grid of at most ``programs`` programs, each looping over its share of the tiles.

    For a transpose that runs beside other work and should take only part of the GPU (the distributed
    operations' moves under a collective). Triton's own launch path: it is meant for large tensors,
    where ~10 us of host time is nothing. The order -1 (a 2-D grid) becomes 0, the same order on 1-D.
    """
    M, N = x.shape
    grid_m, grid_n = triton.cdiv(M, config.block_m), triton.cdiv(N, config.block_n)
    order = 0 if config.group_m == -1 else config.group_m
    programs, rounds = loop_rounds(grid_m * grid_n, programs)
    transpose_2d_kernel[(programs,)](
        as_uint(x), as_uint(out), M, N, x.stride(0), x.stride(1), out.stride(0), grid_m, grid_n,
        BLOCK_M=config.block_m, BLOCK_N=config.block_n, GROUP_M=order,
        INDEX_64=needs_index_64(M, N, x.stride(0), x.stride(1), out.stride(0)), INTERIOR=config.interior,
        OUT_TILE=config.out_tile, EVICT_LAST=config.evict_last, LOOP=rounds, num_warps=config.num_warps,
        **({"maxnreg": config.maxnreg} if config.maxnreg and not _INTERPRETED else {}),
    )  # fmt: skip


def _spec(M: int, N: int, sxm: int, sxn: int, som: int, xp: int, op: int) -> tuple:
    """Triton's specialization of the integer arguments and pointers (``launch.spec_key``) as one
    tuple: equal to 1, divisible by 16 (values past int32 need INDEX_64, which is in the key too)."""
    return (M == 1, N == 1, sxm == 1, sxn == 1, som == 1, M & 15 == 0, N & 15 == 0, sxm & 15 == 0, sxn & 15 == 0,
            som & 15 == 0, xp & 15 == 0, op & 15 == 0)  # fmt: skip


def _class_of(M: int, N: int, sxm: int, sxn: int, som: int, es: int, device: int, config, xp: int, op: int):
    """(compiled-class key, launch grid (x, y), scalar arguments) of one call."""
    block_m, block_n = config[0], config[1]
    grid_m = (M + block_m - 1) // block_m
    grid_n = (N + block_n - 1) // block_n
    wide = needs_index_64(M, N, sxm, sxn, som)
    order = config[3]
    if order == -1 and grid_n > MAX_GRID_YZ:
        order = 0  # the same column order, decoded from a 1-D grid
        config = config._replace(group_m=0)
    grid = (grid_m, grid_n) if order == -1 else (grid_m * grid_n, 1)
    # Every argument after the pointers, the constexprs too (the C launcher takes them all); LOOP is 0.
    scalars = (M, N, sxm, sxn, som, grid_m, grid_n, block_m, block_n, order, wide, config[4], config[6], config[7], 0)
    return ("transpose", config, es, wide, device, *_spec(M, N, sxm, sxn, som, xp, op)), grid, scalars


def launch_known(x, out, xp: int, op: int, M: int, N: int, sxm: int, sxn: int, som: int, es: int, device: int,
                 config) -> None:  # fmt: skip
    """``launch`` with the addresses, sizes, strides and device the caller has already read (the launch
    path of ``tileflip.ops``: every Python call and attribute read there is host time)."""
    key, grid, scalars = _class_of(M, N, sxm, sxn, som, es, device, config, xp, op)
    if _INTERPRETED:
        transpose_2d_kernel[grid](as_uint(x), as_uint(out), *scalars, num_warps=config.num_warps)
        return
    options = {"num_warps": config.num_warps} | ({"maxnreg": config.maxnreg} if config.maxnreg else {})
    launcher.launch(transpose_2d_kernel, key, grid, device, (xp, op), lambda: (as_uint(x), as_uint(out)), scalars,
                    options)  # fmt: skip


def direct_launch(M: int, N: int, sxm: int, sxn: int, som: int, es: int, device: int, config, xp: int, op: int):
    """A callable ``go(x, out, xp, op)`` that launches this call's compiled class through its C launcher,
    every argument but the two addresses fixed; None until the class is compiled, or where it takes
    Triton's own launcher. ``tileflip.ops`` keeps one per call signature."""
    key, grid, scalars = _class_of(M, N, sxm, sxn, som, es, device, config, xp, op)
    return launcher.prepared(key, grid, device, scalars)


# --------------------------------------------------------------------------------------------------
# The gather variant: one lane per output element, the input read where it lies, no shared memory and
# no barrier. Reads are not coalesced in general, which costs nothing on a launch-bound tiny or thin
# case (a few dozen sectors) and saves the tile's shared-memory round trip: the shortest program there
# is. ``tileflip.transpose(..., backend="triton-gather")``; ``auto`` picks it where it measured fastest.
# --------------------------------------------------------------------------------------------------

GATHER_BLOCK = 1024
GATHER_WARPS = 4
# An input with fewer rows than this (2 to 7: ``tuning.shape_class``'s slivers) has its row count
# compiled in: six row counts at most join the class key, each a division by a constant.
SHORT_M_LIMIT = 8


@triton.jit(do_not_specialize=["total", "magic", "shift"])
def transpose_gather_kernel(
    x_ptr,
    out_ptr,
    M,
    N,
    stride_xm,
    stride_xn,
    stride_om,
    total,
    magic,
    shift,
    BLOCK: tl.constexpr,
    INDEX_64: tl.constexpr,
    MAGIC: tl.constexpr,
    OUT_DENSE: tl.constexpr,
    SHORT_M: tl.constexpr = 0,
):
    pid = tl.program_id(0)
    if INDEX_64:
        pid = pid.to(tl.int64)
    o = pid * BLOCK + tl.arange(0, BLOCK)  # output element, row-major over (N, M)
    mask = o < total
    # Every program but the last is full and runs without masks: ``total`` is not specialized (a new
    # size must not compile a new kernel), so a mask against it would keep each dense store to one
    # element, where torch.compile's kernel (its size compiled in) stores whole vectors.
    full = (pid + 1) * BLOCK <= total
    if SHORT_M == 2 and OUT_DENSE:
        # Two input rows (e.g. 2 x 100000): each read along its row (vector loads where stride_xn == 1)
        # and interleaved in registers (join, then a reshape that keeps each thread's pairs in order),
        # so that the output is stored from the same registers as whole vectors: a quarter of the
        # loads of the one-element-per-lane form.
        j = pid * (BLOCK // 2) + tl.arange(0, BLOCK // 2)
        if full:
            r0 = tl.load(x_ptr + j * stride_xn, eviction_policy="evict_last")
            r1 = tl.load(x_ptr + stride_xm + j * stride_xn, eviction_policy="evict_last")
            tl.store(out_ptr + o, tl.reshape(tl.join(r0, r1), [BLOCK]))
        else:
            in_row = j < N
            r0 = tl.load(x_ptr + j * stride_xn, mask=in_row, eviction_policy="evict_last")
            r1 = tl.load(x_ptr + stride_xm + j * stride_xn, mask=in_row, eviction_policy="evict_last")
            tl.store(out_ptr + o, tl.reshape(tl.join(r0, r1), [BLOCK]), mask=mask)
        return
    if SHORT_M:
        # An input of fewer than SHORT_M_LIMIT rows (a sliver, e.g. 2 x 100000): M is a compile-time
        # constant, so the division is a shift or a constant multiply, as in torch.compile's kernel.
        j = o // SHORT_M
    elif MAGIC:
        # o // M as a multiply-high by the host's magic number (``magic_divisor``): no integer division.
        j = (tl.umulhi(o.to(tl.uint32), magic.to(tl.uint32, bitcast=True)) >> shift.to(tl.uint32)).to(tl.int32)
    else:
        j = o // M  # output row = input column
    i = o - j * (SHORT_M if SHORT_M else M)  # output column = input row
    # evict_last as torch.compile's transposes load: measured 0.5 us shorter on 2 x 100000 (H200).
    if OUT_DENSE and full:
        v = tl.load(x_ptr + i * stride_xm + j * stride_xn, eviction_policy="evict_last")
        tl.store(out_ptr + o, v)  # visibly contiguous and unmasked: vector stores
    else:
        v = tl.load(x_ptr + i * stride_xm + j * stride_xn, mask=mask, eviction_policy="evict_last")
        if OUT_DENSE:
            tl.store(out_ptr + o, v, mask=mask)
        else:
            tl.store(out_ptr + j * stride_om + i, v, mask=mask)


def launch_gather(x, out) -> None:
    """The gather variant; same contract as ``launch``."""
    M, N = x.shape
    sxm, sxn = x.stride()
    launch_gather_known(x, out, M, N, sxm, sxn, out.stride(0))


def _gather_class(M: int, N: int, sxm: int, sxn: int, som: int, es: int, device: int, xp: int, op: int):
    """(compiled-class key, launch grid, scalar arguments) of one gather call."""
    total = M * N
    # int64 where an offset, or a masked lane's output index, may pass int32.
    wide = needs_index_64(M, N, sxm, sxn, som) or total + GATHER_BLOCK > INT32_LIMIT
    short_m = M if 1 < M < SHORT_M_LIMIT else 0
    use_magic = M > 1 and not wide and not short_m
    magic, shift = magic_divisor(M) if use_magic else (0, 0)
    dense = som == M or N == 1  # a contiguous output: element o of the output sits at offset o
    scalars = (M, N, sxm, sxn, som, total, magic, shift, GATHER_BLOCK, wide, use_magic, dense, short_m)
    key = ("gather", es, wide, device, dense, short_m, *_spec(M, N, sxm, sxn, som, xp, op))
    return key, ((total + GATHER_BLOCK - 1) // GATHER_BLOCK, 1), scalars


def launch_gather_known(x, out, M: int, N: int, sxm: int, sxn: int, som: int) -> None:
    if _INTERPRETED:
        _, grid, scalars = _gather_class(M, N, sxm, sxn, som, x.element_size(), 0, 0, 0)
        transpose_gather_kernel[grid](as_uint(x), as_uint(out), *scalars, num_warps=GATHER_WARPS)
        return
    xp, op = x.data_ptr(), out.data_ptr()
    device = x.get_device()
    key, grid, scalars = _gather_class(M, N, sxm, sxn, som, x.element_size(), device, xp, op)
    launcher.launch(transpose_gather_kernel, key, grid, device, (xp, op), lambda: (as_uint(x), as_uint(out)), scalars,
                    {"num_warps": GATHER_WARPS})  # fmt: skip


def direct_launch_gather(M: int, N: int, sxm: int, sxn: int, som: int, es: int, device: int, xp: int, op: int):
    """``direct_launch`` for the gather kernel: a ``go(x, out, xp, op)`` with every argument but the two
    addresses fixed, or None until the class is compiled (or where it takes triton's own path)."""
    key, grid, scalars = _gather_class(M, N, sxm, sxn, som, es, device, xp, op)
    return launcher.prepared(key, grid, device, scalars)


def launches_compiled() -> int:
    """How many classes of the 2-D kernels the launch path holds (for tests)."""
    return len(launcher.compiled_classes("transpose")) + len(launcher.compiled_classes("gather"))


def compiled_kernels() -> dict:
    """Every compiled class of the tile kernel: launch key ("transpose", TileConfig, element size, ...) ->
    Triton's compiled kernel (TTGIR, cubin)."""
    return launcher.compiled_classes("transpose")


def launches_direct() -> int:
    """How many of them launch through the C launcher directly (for tests)."""
    return launcher.direct_count("transpose") + launcher.direct_count("gather")


_UINT_SIG = {1: "*u8", 2: "*u16", 4: "*u32", 8: "*u64"}


def compile_for_target(element_size: int, config, *, arch: int = 90, unit_inner_stride: bool = True,
                       index_64: bool = False):
    """Compile the kernel ahead of time for ``sm_<arch>`` without a GPU (for tests and the analyzer).

    Sizes and strides are given the common specialization: i32, divisible by 16, and the input's inner
    stride equal to 1 when ``unit_inner_stride``. Returns triton's compiled kernel, whose ``metadata``
    holds the shared memory and ``asm`` the TTGIR, PTX and cubin.
    """
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    fn = transpose_2d_kernel if isinstance(transpose_2d_kernel, JITFunction) else JITFunction(transpose_2d_kernel.fn)
    ptr = _UINT_SIG[element_size]
    names = ["x_ptr", "out_ptr", "M", "N", "stride_xm", "stride_xn", "stride_om", "grid_m", "grid_n"]
    signature = dict.fromkeys(names, "i32") | {"x_ptr": ptr, "out_ptr": ptr}
    constexprs = {"BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "GROUP_M": config.group_m,
                  "INDEX_64": index_64, "INTERIOR": config.interior, "OUT_TILE": config.out_tile,
                  "EVICT_LAST": config.evict_last, "LOOP": 0}  # fmt: skip
    signature |= dict.fromkeys(constexprs, "constexpr")
    if unit_inner_stride:
        signature["stride_xn"] = "constexpr"
        constexprs["stride_xn"] = 1
    divisible = [names.index(n) for n in ("x_ptr", "out_ptr", "M", "N", "stride_xm", "stride_om")]
    attrs = {(i,): [["tt.divisibility", 16]] for i in divisible}
    source = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options={"num_warps": config.num_warps})
