"""Triton kernels for N-D permutes, launched from a plan (``tileflip.plan.plan_permute``) and its launch
description (``tileflip.plan.launch.PermuteLaunch``).

The tile kernel serves the plan kinds copy, rows and tiles: a BLOCK_B x BLOCK_A tile whose axis A folds
up to four of the input's fastest dimensions and axis B up to four of the output's fastest, over a batch
of up to six more. Offsets are decoded once per row and column vector (with host-computed magic numbers
where indices are int32), each side over its own merged dimensions so that a contiguous run is visibly
contiguous to Triton. The flat rows kernel walks the output as one run of 16-byte vectors; the general
kernel gathers each output element. Vector widths are asserted with ``tl.multiple_of`` and
``tl.max_contiguous``; full tiles take an unmasked path, tails mask whole vectors (``docs/design.md``).
"""

from __future__ import annotations

import inspect
from functools import lru_cache

import triton
import triton.language as tl

from tileflip.kernels.dtypes import as_uint
from tileflip.kernels.triton import launch as launcher
from tileflip.plan.grid import cdiv, magic_divisor
from tileflip.plan.launch import SECTOR_BYTES, product, store_shift
from tileflip.plan.permute import merge_dims


@triton.jit
def _decode(index, sizes, strides, magics, shifts, N: tl.constexpr, OFF64: tl.constexpr, MAGIC: tl.constexpr):
    """Offset of a linear index over N dimensions (innermost first); the outermost takes no ``%``.
    In int64 when OFF64, else in int32 (the planner has bounded every offset below 2**31). With MAGIC
    (an int32 index, every size but the outermost at least 2) each ``index // size`` is a multiply-high
    by the host's magic number and a shift (``plan.magic_divisor``), ``index % size`` one multiply-add
    from it: three instructions where a signed division by a runtime int32 takes about ten."""
    DT: tl.constexpr = tl.int64 if OFF64 else tl.int32
    off = (index * 0).to(DT)
    for i in tl.static_range(N):
        if i < N - 1:
            if MAGIC:
                # magics and shifts travel as 16 * value + 3 (``_magics``): decoded by a shift
                magic = (magics[i] >> 4).to(tl.uint32)
                q = (tl.umulhi(index.to(tl.uint32), magic) >> (shifts[i] >> 4).to(tl.uint32)).to(tl.int32)
                off += (index - q * sizes[i]).to(DT) * strides[i]
                index = q
            else:
                off += (index % sizes[i]).to(DT) * strides[i]
                index = index // sizes[i]
        else:
            off += index.to(DT) * strides[i]
    return off


@triton.jit
def permute_tile_kernel(
    x_ptr, out_ptr, size_a, size_b, grid_fast, tiles,
    a_in_sizes, a_in, a_in_m, a_in_s, a_out_sizes, a_out, a_out_m, a_out_s,
    b_in_sizes, b_in, b_in_m, b_in_s, b_out_sizes, b_out, b_out_m, b_out_s, n_sizes, n_in, n_out, n_m, n_s,
    NA_IN: tl.constexpr, NA_OUT: tl.constexpr, NB_IN: tl.constexpr, NB_OUT: tl.constexpr, NN: tl.constexpr,
    BLOCK_B: tl.constexpr, BLOCK_A: tl.constexpr,
    VEC_LOAD: tl.constexpr, VEC_STORE: tl.constexpr, KEPT: tl.constexpr, WIDE: tl.constexpr,
    B_FAST: tl.constexpr, OFF64: tl.constexpr, EVICT_LAST: tl.constexpr, MAGIC: tl.constexpr,
    B_SHIFT: tl.constexpr = 0,
):  # fmt: skip
    """One BLOCK_A x BLOCK_B tile of one batch element: loaded along A, stored along A (KEPT: the output's
    fastest dimension is the input's) or transposed and stored along B.

    B_SHIFT (transposed tiles, a multiple of VEC_STORE): the B tiles start B_SHIFT elements early, so that
    where the output starts off a 32-byte sector each tile's stores still begin on one (``store_shift``).

    Each access holds its memory-fastest axis in dimension 0 of its tile: where Triton cannot prove the
    offsets contiguous along either dimension (sizes that are not multiples of 16), its coalescing pass
    gives the lanes to dimension 0 (checked on the compiled layouts by the tests)."""
    pid = tl.program_id(0)
    batch = pid // tiles
    t = pid % tiles
    if B_FAST:
        pid_a = t // grid_fast
        pid_b = t % grid_fast
    else:
        pid_b = t // grid_fast
        pid_a = t % grid_fast
    if WIDE:
        pid_a = pid_a.to(tl.int64)
        pid_b = pid_b.to(tl.int64)
    ra = pid_a * BLOCK_A + tl.arange(0, BLOCK_A)
    rb_grid = pid_b * BLOCK_B + tl.arange(0, BLOCK_B)  # never negative: masks compare it
    rb = rb_grid - B_SHIFT  # the first B tile's masked lanes decode negative indices, never accessed
    in_a = _decode(ra, a_in_sizes, a_in, a_in_m, a_in_s, NA_IN, OFF64, MAGIC)
    out_a = _decode(ra, a_out_sizes, a_out, a_out_m, a_out_s, NA_OUT, OFF64, MAGIC)
    in_b = _decode(rb, b_in_sizes, b_in, b_in_m, b_in_s, NB_IN, OFF64, MAGIC)
    in_b += _decode(batch, n_sizes, n_in, n_m, n_s, NN, OFF64, MAGIC)
    out_b = _decode(rb, b_out_sizes, b_out, b_out_m, b_out_s, NB_OUT, OFF64, MAGIC)
    out_b += _decode(batch, n_sizes, n_out, n_m, n_s, NN, OFF64, MAGIC)
    load_offs = in_a[:, None] + in_b[None, :]
    if KEPT:
        store_offs = out_a[:, None] + out_b[None, :]
    else:
        store_offs = out_b[:, None] + out_a[None, :]
    # The planner's vector widths hold on every tile, tails included: runs of VEC elements start at
    # multiples of VEC (VEC divides the axis's run and size and the strides involved, and tiles start at
    # multiples of it).
    if VEC_LOAD > 1:
        load_offs = tl.max_contiguous(tl.multiple_of(load_offs, [VEC_LOAD, VEC_LOAD]), [VEC_LOAD, 1])
    if VEC_STORE > 1:
        store_offs = tl.max_contiguous(tl.multiple_of(store_offs, [VEC_STORE, VEC_STORE]), [VEC_STORE, 1])
    POLICY: tl.constexpr = "evict_last" if EVICT_LAST else ""
    if ((pid_a + 1) * BLOCK_A <= size_a) & (pid_b * BLOCK_B >= B_SHIFT) & ((pid_b + 1) * BLOCK_B - B_SHIFT <= size_b):
        tile = tl.load(x_ptr + load_offs, eviction_policy=POLICY)
        if KEPT:
            tl.store(out_ptr + store_offs, tile)
        else:
            tl.store(out_ptr + store_offs, tl.trans(tile))
    else:
        # Masks compare whole vectors (VEC divides the axis's size), so a masked tail keeps its vectors.
        in_a_ok = (ra // VEC_LOAD) < (size_a // VEC_LOAD)
        b_ok = (rb_grid >= B_SHIFT) & (rb < size_b)
        mask = in_a_ok[:, None] & b_ok[None, :]
        tile = tl.load(x_ptr + load_offs, mask=mask, eviction_policy=POLICY)
        if KEPT:
            out_a_ok = (ra // VEC_STORE) < (size_a // VEC_STORE)
            tl.store(out_ptr + store_offs, tile, mask=out_a_ok[:, None] & b_ok[None, :])
        else:
            # whole vectors: B_SHIFT and size_b are multiples of VEC_STORE
            vb = rb_grid // VEC_STORE
            out_b_ok = (vb >= B_SHIFT // VEC_STORE) & (vb < (size_b + B_SHIFT) // VEC_STORE)
            tl.store(out_ptr + store_offs, tl.trans(tile), mask=out_b_ok[:, None] & (ra < size_a)[None, :])


@triton.jit
def permute_general_kernel(x_ptr, out_ptr, numel, sizes, in_strides, NDIM: tl.constexpr, BLOCK: tl.constexpr):
    """Fallback: each output element (contiguous) gathered from its input offset."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    v = tl.load(x_ptr + _decode(offs, sizes, in_strides, sizes, sizes, NDIM, True, False), mask=mask)
    tl.store(out_ptr + offs, v, mask=mask)


@triton.jit
def permute_rows_flat_kernel(
    x_ptr, out_ptr, vectors, row_vectors, sizes, in_strides,
    NDIM: tl.constexpr, VEC: tl.constexpr, BLOCK: tl.constexpr, OFF64: tl.constexpr, EVICT_LAST: tl.constexpr,
):  # fmt: skip
    """Rows plan (inner dimension kept, every row whole VEC-element vectors): BLOCK consecutive vectors of
    the contiguous output, each loaded from its row's input offset (the row decoded over the other NDIM
    dimensions, innermost first) plus its place in the row. Offsets are int32 where the planner bounds
    them below 2**31 (``tileflip.plan.launch.rows_flat_launch``)."""
    DT: tl.constexpr = tl.int64 if OFF64 else tl.int32
    v = tl.program_id(0).to(DT) * BLOCK + tl.arange(0, BLOCK).to(DT)
    mask = v < vectors
    w = tl.where(mask, v, 0)  # masked vectors decode vector 0: every offset formed is one the tensor holds
    row = w // row_vectors
    base = _decode(row, sizes, in_strides, sizes, sizes, NDIM, OFF64, False) + (w - row * row_vectors) * VEC
    base = tl.multiple_of(base, VEC)
    lane = tl.arange(0, VEC)
    POLICY: tl.constexpr = "evict_last" if EVICT_LAST else ""
    tile = tl.load(x_ptr + (base[:, None] + lane[None, :]), mask=mask[:, None], eviction_policy=POLICY)
    tl.store(out_ptr + (v[:, None] * VEC + lane[None, :]), tile, mask=mask[:, None])


def _axis(dims, sizes, in_strides, out_strides):
    """Sizes, input strides and output strides of a group of dims, padded to one dimension of size 1."""
    if not dims:
        return (1,), (0,), (0,)
    return (tuple(sizes[d] for d in dims), tuple(in_strides[d] for d in dims), tuple(out_strides[d] for d in dims))


def merge_side(sizes, strides) -> tuple[tuple, tuple]:
    """Merge an axis's dimensions (innermost first) for one side's decode where each steps over the one
    before it exactly (``plan.merge_dims``, which orders outermost first): a run contiguous on that side
    becomes one dimension, whose offsets Triton can then see are contiguous. An axis of one size-1
    dimension (``_axis``'s padding, a rank-0 copy) stays as it is."""
    merged_sizes, merged_strides = merge_dims(sizes[::-1], strides[::-1])
    if not merged_sizes:
        return (1,), (strides[0],)
    return merged_sizes[::-1], merged_strides[::-1]


def tile_args(plan, go, shift: int = 0) -> tuple[tuple, dict]:
    """Positional arguments (after the two pointers) and constexprs of the tile kernel for a launch ``go``
    whose B tiles start ``shift`` elements early (``plan.launch.store_shift``)."""
    sizes, in_strides, out_strides = plan.sizes, plan.in_strides, plan.out_strides
    a = _axis(go.a_dims, sizes, in_strides, out_strides)
    b = _axis(go.b_dims, sizes, in_strides, out_strides)
    n = _axis(go.batch_dims, sizes, in_strides, out_strides)
    a_in, a_out = merge_side(a[0], a[1]), merge_side(a[0], a[2])
    b_in, b_out = merge_side(b[0], b[1]), merge_side(b[0], b[2])
    size_a = product(a[0])
    size_b = product(b[0])
    grid = tile_grid(go, size_b, shift)
    grid_fast = grid[0] if go.b_fast else grid[1]
    groups = (a_in, a_out, b_in, b_out, (n[0], n[1]))
    # Magic division where every index is int32 (the batch's too) and every size divided by is at least 2
    # (merge_side and merge_dims leave no size-1 dimension but the padding of an empty axis, never divided).
    magic = go.magic and not go.wide and go.batch < 2**31
    magic = magic and all(size >= 2 for sizes, _ in groups for size in sizes[:-1])
    decodes = [(*g, *_magics(g[0], magic)) for g in groups]
    n_group = (*decodes[4][:2], n[2], *decodes[4][2:])  # the batch: sizes, input, output strides, magics, shifts
    args = (size_a, size_b, grid_fast, grid[0] * grid[1], *decodes[0], *decodes[1], *decodes[2],
            *decodes[3], *n_group)  # fmt: skip
    constexprs = dict(
        NA_IN=len(a_in[0]), NA_OUT=len(a_out[0]), NB_IN=len(b_in[0]), NB_OUT=len(b_out[0]), NN=len(n[0]),
        BLOCK_B=go.blocks[0], BLOCK_A=go.blocks[1], VEC_LOAD=go.vec[0], VEC_STORE=go.vec[1], KEPT=go.kept,
        WIDE=go.wide, B_FAST=go.b_fast, OFF64=go.offsets64, EVICT_LAST=go.evict_last, MAGIC=magic,
        B_SHIFT=shift,
    )  # fmt: skip
    return args, constexprs


def tile_grid(go, size_b: int, shift: int) -> tuple[int, int]:
    """(B tiles, A tiles) of a tile launch whose B tiles start ``shift`` elements early."""
    return (cdiv(size_b + shift, go.blocks[0]), go.grid[1]) if shift else go.grid


_AXIS_GROUPS = ("a_in", "a_out", "b_in", "b_out")


def arg_groups(args) -> dict:
    """Tile-kernel arguments (``tile_args``) by decode, as sent: name -> (sizes, strides, magics, shifts)
    for ``a_in``, ``a_out``, ``b_in``, ``b_out``, and (sizes, input strides, output strides, magics,
    shifts) for the batch ``n`` (for tests and tools)."""
    groups = {name: args[4 + 4 * i: 8 + 4 * i] for i, name in enumerate(_AXIS_GROUPS)}
    return groups | {"n": args[20:25]}


def decodes_of(args) -> dict:
    """The decodes in tile-kernel arguments: name -> (sizes, strides) for ``a_in``, ``a_out``, ``b_in``,
    ``b_out``, and ``n_in`` / ``n_out`` for the batch."""
    g = arg_groups(args)
    sizes, n_in, n_out = g["n"][:3]
    return {name: g[name][:2] for name in _AXIS_GROUPS} | {"n_in": (sizes, n_in), "n_out": (sizes, n_out)}


def magics_of(args) -> dict:
    """The division arguments in tile-kernel arguments: name -> (sizes, magics, shifts) as the kernel
    reads them (decoded from ``_magics``'s form) for ``a_in``, ``a_out``, ``b_in``, ``b_out`` and ``n``."""
    g = arg_groups(args)
    sent = {name: (g[name][0], *g[name][2:]) for name in _AXIS_GROUPS} | {"n": (g["n"][0], *g["n"][3:])}
    return {k: (sizes, tuple(m >> 4 for m in ms), tuple(v >> 4 for v in vs)) for k, (sizes, ms, vs) in sent.items()}


def _magics(sizes, magic: bool) -> tuple[tuple, tuple]:
    """(magics, shifts) of a decode's sizes (``plan.magic_divisor``, the magic as the unsigned 32-bit value;
    the outermost size is never divided by), each sent as 16 * value + 3: never 1 nor a multiple of 16, the
    magic always int64 and the shift int32, so Triton's specialization of tuple elements (which
    ``do_not_specialize`` does not reach) makes no new kernel for a new size. Where the kernel divides
    without them, the sizes twice (placeholders of the same types)."""
    if not magic:
        return sizes, sizes
    pairs = [magic_divisor(s) for s in sizes[:-1]] + [(0, 0)]
    return tuple(16 * (m & 0xFFFFFFFF) + 3 for m, _ in pairs), tuple(16 * s + 3 for _, s in pairs)


def kernel_args(plan, go, shift: int = 0) -> tuple:
    """(kernel name, positional arguments after the two pointers, constexprs) of ``plan`` on launch ``go``
    (a tile launch's B tiles ``shift`` elements early)."""
    if plan.kind == "general":
        args = (product(plan.sizes), tuple(reversed(plan.sizes)), tuple(reversed(plan.in_strides)))
        return "permute_general_kernel", args, dict(NDIM=len(plan.sizes), BLOCK=go.blocks[0])
    if go.flat:
        vec = go.vec[0]
        others = plan.sizes[:-1][::-1], plan.in_strides[:-1][::-1]
        args = (product(plan.sizes) // vec, plan.sizes[-1] // vec, *others)
        constexprs = dict(NDIM=len(others[0]), VEC=vec, BLOCK=go.blocks[0], OFF64=go.offsets64,
                          EVICT_LAST=go.evict_last)  # fmt: skip
        return "permute_rows_flat_kernel", args, constexprs
    return "permute_tile_kernel", *tile_args(plan, go, shift)


def _arg_names(kernel) -> list:
    return list(inspect.signature(kernel.fn).parameters)


@lru_cache(maxsize=256)
def launch_of(plan, go, element_size: int, phase: int = 0) -> tuple:
    """(kernel, grid, scalars: every argument after the two pointers, constexprs included, in the kernel's
    order, compile options, the static part of the class key) of ``plan`` on launch ``go`` with the
    output ``phase`` bytes past a 32-byte sector: worked out once per plan, launch and phase, so that a
    call's host path holds no planning."""
    shift = store_shift(plan.sizes, plan.out_strides, go, element_size, phase)  # 0 but on transposed tiles
    name, args, constexprs = kernel_args(plan, go, shift)
    kernel = globals()[name]
    scalars = (*args, *(constexprs[n] for n in _arg_names(kernel)[2 + len(args):]))
    options = go.options
    key = (name, element_size, launcher.spec_of(args), tuple(constexprs.items()), tuple(options.items()))
    programs = go.programs if not shift else go.batch * args[3]
    return kernel, (programs, 1), scalars, options, key


def clear_cache() -> None:
    launch_of.cache_clear()


def launch(x, out, plan, go) -> None:
    """Run ``plan`` (kind rows, copy, tiles or general) on launch ``go`` from ``x`` into the contiguous
    ``out``; the caller has checked every argument."""
    # only a transposed tile's launch depends on out's place in its sector (``store_shift``)
    phase = out.data_ptr() % SECTOR_BYTES if go.b_dims and not (go.kept or go.flat) else 0
    kernel, grid, scalars, options, key = launch_of(plan, go, x.element_size(), phase)
    if _INTERPRETED:
        kernel[grid](as_uint(x), as_uint(out), *scalars, **options)
        return
    xp, op = x.data_ptr(), out.data_ptr()
    device = x.get_device()
    launcher.launch(kernel, (*key, device, xp & 15 == 0, op & 15 == 0), grid, device, (xp, op),
                    lambda: (as_uint(x), as_uint(out)), scalars, options)  # fmt: skip


_INTERPRETED = launcher.is_interpreted_kernel(permute_tile_kernel)


def compiled_tile_kernel(plan, go, element_size: int, shift: int = 0):
    """The kernel of ``plan`` on launch ``go`` (the tile kernel, or the flat rows kernel where the launch
    is flat; B tiles ``shift`` elements early) compiled for sm_90 as its launch would specialize it (no
    GPU needed)."""
    from tileflip.kernels.triton.layout import compile_launch

    name, args, constexprs = kernel_args(plan, go, shift)
    kernel = getattr(launcher.interpreted_module(__name__, __file__), name)
    names = [p.name for p in kernel.params if not p.is_constexpr]
    values = dict(zip(names, (None, None, *args)))
    pointer = {1: "*u8", 2: "*u16", 4: "*u32", 8: "*u64"}[element_size]
    return compile_launch(kernel, values, constexprs, go.num_warps, pointer, maxnreg=go.maxnreg)
