"""tileflip.permute: exact bits for any rank, permutation and strides; each plan kind exercised."""

import dataclasses
import math
import random
import re

import pytest
import torch
from conftest import HAS_GPU
from helpers import POISON_BYTE, assert_bits_equal, bits, poisoned, random_bits, without_interpreter

import tileflip
from tileflip import plan, tuning
from tileflip.plan import launch as geometry

DEVICES = [pytest.param("cpu", marks=pytest.mark.skipif(HAS_GPU, reason="on a GPU machine the gpu cases run")),
           pytest.param("cuda", marks=pytest.mark.gpu)]  # fmt: skip


def _view(base_shape, kind, dtype, device, seed):
    x = random_bits(base_shape, dtype, device, seed)
    if kind == "contiguous":
        return x
    if kind == "transposed":  # the last two dimensions swapped in memory
        return x.transpose(-1, -2).contiguous().transpose(-1, -2)
    if kind == "sliced":
        return x[(slice(None),) * (x.dim() - 1) + (slice(1, None, 2),)]
    if kind == "expanded":
        return x[(slice(0, 1),) + (slice(None),) * (x.dim() - 1)].expand((3,) + tuple(x.shape[1:]))
    if kind == "narrowed":  # the last dimension cut from one element longer: the others' strides step over it
        wider = random_bits((*base_shape[:-1], base_shape[-1] + 1), dtype, device, seed)
        return wider[..., : base_shape[-1]]
    raise ValueError(kind)


# (name, shape, dims, dtype, view, expected plan kind)
NAMED = [
    ("bshd_to_bhsd", (2, 64, 4, 32), (0, 2, 1, 3), torch.bfloat16, "contiguous", "rows"),
    ("bshd_0321", (2, 64, 4, 32), (0, 3, 2, 1), torch.bfloat16, "contiguous", "tiles"),
    ("bshd_0231", (2, 64, 4, 32), (0, 2, 3, 1), torch.bfloat16, "contiguous", "tiles"),
    ("nchw_to_nhwc", (2, 48, 7, 7), (0, 2, 3, 1), torch.float16, "contiguous", "tiles"),
    ("nhwc_to_nchw", (2, 7, 7, 48), (0, 3, 1, 2), torch.float16, "contiguous", "tiles"),
    # 256 channels: a whole-dimension block of 256 (above the 128 cap), full tiles with 16-byte vectors
    ("nchw_to_nhwc_256_channels", (2, 256, 8, 16), (0, 2, 3, 1), torch.float16, "contiguous", "tiles"),
    ("nhwc_to_nchw_256_channels", (2, 8, 16, 256), (0, 3, 1, 2), torch.float16, "contiguous", "tiles"),
    ("identity_is_copy", (3, 4, 5), (0, 1, 2), torch.float32, "contiguous", "copy"),
    ("size1_dims_merge_to_copy", (3, 1, 5), (1, 0, 2), torch.int8, "contiguous", "copy"),
    ("wide_2d", (70, 96), (1, 0), torch.float32, "contiguous", "transpose2d"),
    ("thin_2d_runs_tiles", (37, 70), (1, 0), torch.float32, "contiguous", "tiles"),
    ("merged_to_2d", (8, 10, 72), (2, 0, 1), torch.float32, "contiguous", "transpose2d"),
    ("merged_to_thin_2d", (6, 5, 40), (2, 0, 1), torch.float32, "contiguous", "tiles"),
    ("rank0", (), (), torch.float64, "contiguous", "copy"),
    ("rank1", (17,), (0,), torch.int32, "contiguous", "copy"),
    ("reverse_rank4_short_runs", (2, 3, 4, 3), (3, 2, 1, 0), torch.float32, "contiguous", "tiles"),
    ("rank8", (2, 2, 3, 2, 2, 3, 2, 9), (7, 0, 6, 1, 5, 2, 4, 3), torch.int16, "contiguous", "tiles"),
    ("rank8_short_runs", (2, 2, 3, 2, 2, 3, 2, 5), (7, 0, 6, 1, 5, 2, 4, 3), torch.int16, "contiguous", "tiles"),
    ("rank8_inner_kept", (2, 2, 3, 2, 2, 3, 2, 17), (6, 0, 5, 1, 4, 2, 3, 7), torch.int8, "contiguous", "rows"),
    ("rank8_all_folds", (3, 2, 5, 2, 3, 2, 5, 3), (1, 3, 5, 7, 0, 2, 4, 6), torch.bfloat16, "contiguous", "tiles"),
    # inner dimension kept, 3 elements (12 bytes): tiled as moved, axis B starting from the run (short_kept_run)
    ("kept_run_of_3", (6, 5, 4, 8, 9, 3), (3, 1, 4, 0, 2, 5), torch.float32, "contiguous", "rows"),
    # inner dimension kept, 4 floats: 16-byte vectors on both sides across folded dimensions
    ("kept_run_of_4_vectors", (16, 8, 32, 4), (2, 0, 1, 3), torch.float32, "contiguous", "rows"),
    # kept runs of 384 floats: the flat rows kernel, its last program partly masked (1440 vectors, 256 each)
    ("kept_long_runs_flat", (3, 5, 4, 96), (1, 0, 2, 3), torch.float32, "contiguous", "rows"),
    # moved, both runs short and of odd length: several dimensions on each tile axis
    ("moved_odd_short_runs", (5, 7, 6, 9, 3), (4, 2, 0, 3, 1), torch.int8, "contiguous", "tiles"),
    ("moved_vectors_across_folds", (12, 8, 20, 4), (3, 1, 0, 2), torch.float32, "contiguous", "tiles"),
    ("sliced_input", (4, 6, 40), (2, 1, 0), torch.float32, "sliced", "tiles"),
    ("sliced_input_merges_to_thin_2d", (4, 6, 40), (2, 0, 1), torch.float32, "sliced", "tiles"),
    ("transposed_input_undone_is_copy", (5, 9, 33), (0, 2, 1), torch.float32, "transposed", "copy"),
    ("transposed_input_merges_to_2d", (5, 72, 80), (1, 0, 2), torch.float32, "transposed", "transpose2d"),
    ("expanded_input", (1, 8, 40), (2, 1, 0), torch.bfloat16, "expanded", "tiles"),
    ("expanded_kept", (1, 8, 40), (0, 1, 2), torch.int8, "expanded", "rows"),
    ("sliced_1d_gather", (50,), (0,), torch.float32, "sliced", "general"),
    ("expanded_2d_stride0_output_fastest", (1, 6), (1, 0), torch.float32, "expanded", "tiles"),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,shape,dims,dtype,view,kind", NAMED, ids=[c[0] for c in NAMED])
def test_named_cases(name, shape, dims, dtype, view, kind, device):
    x = _view(shape, view, dtype, device, seed=len(name)) if shape else random_bits((), dtype, device)
    p = plan.plan_permute(tuple(x.shape), tuple(x.stride()), dims, x.element_size())
    assert p.kind == kind, p
    out = poisoned(tuple(x.shape[d] for d in dims), dtype, device)
    assert tileflip.permute(x, dims, out) is out
    assert_bits_equal(out, x.permute(dims))


def test_every_kind_is_named():
    kinds = {c[-1] for c in NAMED}
    assert kinds == set(plan.PERMUTE_KINDS) - {"empty"}


def _random_case(rng: random.Random):
    rank = rng.randint(0, 6)
    shape = [rng.choice([1, 2, 3, 5, 8, 16, 17]) for _ in range(rank)]
    while rank and torch.Size(shape).numel() > 6000:
        shape[rng.randrange(rank)] = max(1, shape[rng.randrange(rank)] // 2)
    dims = list(range(rank))
    rng.shuffle(dims)
    dtype = rng.choice([torch.float32, torch.bfloat16, torch.int8, torch.float64, torch.bool])
    view = rng.choice(["contiguous", "contiguous", "transposed", "sliced", "expanded"]) if rank >= 2 else "contiguous"
    return tuple(shape), tuple(dims), dtype, view


@pytest.mark.parametrize("device", DEVICES)
def test_random_sweep(device):
    rng = random.Random(0)
    kinds = set()
    for i in range(60):
        shape, dims, dtype, view = _random_case(rng)
        x = _view(shape, view, dtype, device, seed=i) if shape else random_bits((), dtype, device)
        kinds.add(plan.plan_permute(tuple(x.shape), tuple(x.stride()), dims, x.element_size()).kind)
        y = tileflip.permute(x, dims)
        assert_bits_equal(y, x.permute(dims))
    assert {"rows", "tiles", "copy"} <= kinds


@pytest.mark.parametrize("device", DEVICES)
def test_empty(device):
    x = torch.empty((3, 0, 4), device=device)
    y = tileflip.permute(x, (2, 0, 1))
    assert y.shape == (4, 3, 0)


def test_negative_dims():
    x = random_bits((3, 4, 5), torch.float32)
    assert_bits_equal(tileflip.permute(x, (-1, 0, -2)), x.permute(2, 0, 1))


class TestErrors:
    @pytest.mark.parametrize("dims", [(0, 1), (0, 1, 1), (0, 1, 3), (0, 1, 2, 3)])
    def test_not_a_permutation(self, dims):
        with pytest.raises(ValueError, match=r"dims must be a permutation of range\(3\)"):
            tileflip.permute(torch.ones(2, 3, 4), dims)

    @pytest.mark.parametrize("dims", [None, (0, 1.0, 2), "012", (0, True, 2)])
    def test_dims_type(self, dims):
        with pytest.raises(TypeError, match="dims must be a tuple or list of ints"):
            tileflip.permute(torch.ones(2, 3, 4), dims)

    def test_dims_as_torch_takes_them(self):
        """NumPy integers, 0-d integer tensors and a torch.Size are dimensions, as for torch's permute."""
        import numpy as np

        x = random_bits((2, 3, 4), torch.float32)
        for dims in ((np.int64(2), np.int32(0), 1), [torch.tensor(2), 0, torch.tensor(-2)], torch.Size([2, 0, 1])):
            assert_bits_equal(tileflip.permute(x, dims), x.permute(2, 0, 1))

    def test_rank_too_high(self):
        with pytest.raises(ValueError, match="at most 8 dimensions"):
            tileflip.permute(torch.ones((1,) * 9), tuple(range(9)))

    def test_out_wrong_shape_writes_nothing(self):
        x = random_bits((2, 3, 4), torch.float32)
        out = poisoned((2, 3, 4), torch.float32)
        before = bits(out).clone()
        with pytest.raises(ValueError, match=r"out must have shape \(4, 2, 3\)"):
            tileflip.permute(x, (2, 0, 1), out)
        assert torch.equal(bits(out), before)

    def test_out_overlap(self):
        buf = poisoned((100,), torch.float32)
        with pytest.raises(ValueError, match="out overlaps x"):
            tileflip.permute(buf[:24].view(2, 3, 4), (2, 0, 1), buf[10:34].view(4, 2, 3))

    def test_backend(self):
        with pytest.raises(ValueError, match="backend must be one of"):
            tileflip.permute(torch.ones(2, 3), (1, 0), backend="cuda-tiled")

    def test_not_tensor(self):
        with pytest.raises(TypeError, match="x must be a torch.Tensor"):
            tileflip.permute([[1, 2]], (1, 0))


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_permute(device):
    torch._dynamo.reset()

    import numpy as np

    def f(x):
        return tileflip.permute(x + 1, (0, 2, 1, 3)) * 2

    def g(x):  # NumPy integers and negative dims reach the registered op as plain non-negative ints
        return tileflip.permute(x, (np.int64(0), -2, 1, np.int32(-1)))

    x = random_bits((2, 16, 4, 8), torch.int32, device, seed=9)
    assert_bits_equal(torch.compile(f, fullgraph=True)(x), ((x + 1).permute(0, 2, 1, 3) * 2).contiguous())
    assert_bits_equal(torch.compile(g, fullgraph=True)(x), x.permute(0, 2, 1, 3).contiguous())


@pytest.mark.parametrize("device", DEVICES)
def test_general_when_only_the_output_fastest_dim_moves(device):
    base = random_bits((5, 4), torch.float32, device, seed=3)
    x = base.as_strided((5, 3), (4, 0))  # only the dimension that becomes the output's fastest has a stride
    p = plan.plan_permute(tuple(x.shape), tuple(x.stride()), (1, 0), x.element_size())
    assert p.kind == "general", p
    assert_bits_equal(tileflip.permute(x, (1, 0)), x.permute(1, 0))


# Shapes from the random benchmark suite whose runs are not multiples of 16 elements on one side or both,
# where Triton cannot prove the offsets contiguous, and a few regular ones.
LAYOUT_CASES = [
    ((23, 21, 112, 32, 16), (2, 1, 4, 3, 0), 4),
    ((11, 39, 29, 21, 42, 24), (5, 4, 2, 3, 1, 0), 1),
    ((32, 48, 47, 18, 10, 3), (0, 4, 1, 3, 5, 2), 2),
    ((62, 10, 8, 32, 44, 3), (3, 1, 4, 0, 2, 5), 4),
    ((60, 2816, 416), (1, 2, 0), 1),
    ((48, 384, 32, 38), (0, 2, 3, 1), 4),
    ((736, 152, 224), (0, 2, 1), 4),
    ((124, 24, 84, 12, 16), (3, 2, 0, 1, 4), 2),  # kept 32-byte runs: the tile kernel (long ones run flat)
    ((64, 256, 56, 56), (0, 2, 3, 1), 2),
]


@pytest.mark.parametrize("shape,dims,element_size", LAYOUT_CASES, ids=[str(c[0]) for c in LAYOUT_CASES])
@without_interpreter
def test_tile_kernel_lanes_run_along_each_sides_fastest_axis(shape, dims, element_size):
    """Compiled for sm_90 (no GPU): in every load and store of the tile kernel, full tiles and masked
    tails, a warp's lanes run along dimension 0 of the accessed tile, which the kernel makes the side's
    memory-fastest axis (A for loads, B for transposed stores). Where Triton could not prove a run
    contiguous it used to give the lanes to the other axis: every lane a different 32-byte sector."""
    from tileflip.kernels.triton.layout import every_access_layout
    from tileflip.kernels.triton.permute import compiled_tile_kernel

    strides = torch.empty(shape).stride()
    p = plan.plan_permute(shape, strides, dims, element_size)
    assert p.kind in ("rows", "tiles")
    go = tuning.permute_launch(p, element_size)
    assert not go.flat
    block_b, block_a = go.blocks
    kernel = compiled_tile_kernel(p, tuning.permute_launch(p, element_size), element_size)
    accesses = every_access_layout(kernel.asm["ttgir"])
    assert sorted(op for op, _, _ in accesses) == ["load", "load", "store", "store"]
    for op, layout, shape in accesses:
        fastest = block_a if op == "load" or go.kept else block_b
        assert shape[0] == fastest, (op, shape, (block_a, block_b))
        assert layout["order"][0] == 0, (op, layout)
        assert layout["threadsPerWarp"][0] * layout["sizePerThread"][0] > 1, (op, layout)


def _decoded_offsets(index, sizes, strides):
    """The offsets the kernels' ``_decode`` forms for these linear indices (a numpy int64 array)."""
    import numpy as np

    off = np.zeros_like(index)
    for i, (size, stride) in enumerate(zip(sizes, strides)):
        if i < len(sizes) - 1:
            off += (index % size) * stride
            index = index // size
        else:
            off += index * stride
    return off


def _decoded_max(index_count: int, sizes, strides) -> int:
    """The largest offset the kernel's ``_decode`` forms over linear indices 0 .. index_count - 1."""
    import numpy as np

    return int(_decoded_offsets(np.arange(index_count, dtype=np.int64), sizes, strides).max())


def _named_tile_cases():
    return [(c[1], c[2], c[3], c[4]) for c in NAMED if c[-1] in ("rows", "tiles")]


def _offset_cases():
    rng = random.Random(1)
    return _named_tile_cases() + [_random_case(rng) for _ in range(80)]


def _tile_launches(cases):
    """(shape, dims, view, element size, plan, launch) of each case (shape, dims, dtype, view) that runs
    the tile kernel (plan kinds rows, tiles and copy, not the flat rows kernel), its input built on the CPU."""
    for i, (shape, dims, dtype, view) in enumerate(cases):
        x = _view(shape, view, dtype, "cpu", seed=i) if shape else random_bits((), dtype)
        p = plan.plan_permute(tuple(x.shape), tuple(x.stride()), dims, x.element_size())
        if p.kind in ("rows", "tiles", "copy"):
            go = tuning.permute_launch(p, x.element_size())
            if not go.flat:
                yield shape, dims, view, x.element_size(), p, go


def test_offset_bounds_cover_every_offset_the_kernel_forms():
    """The planner's bound on the tile kernel's offsets (which picks int32 offsets below 2**31) is at
    least the largest offset the kernel computes, masked tail lanes included: the kernel's decode run
    over every linear index of the padded grid, on both sides, from the kernel's own arguments."""
    from tileflip.kernels.triton.permute import decodes_of, tile_args

    checked = 0
    # (the flat rows kernel's own bound: test_flat_rows_offsets_bound)
    for shape, dims, view, _es, p, go in _tile_launches(_offset_cases()):
        d = decodes_of(tile_args(p, go)[0])
        (block_b, block_a), (tiles_b, tiles_a) = go.blocks, go.grid
        pad_a, pad_b = tiles_a * block_a, tiles_b * block_b
        worst_in, worst_out = (
            _decoded_max(pad_a, *d[f"a_{side}"]) + _decoded_max(pad_b, *d[f"b_{side}"])
            + _decoded_max(go.batch, *d[f"n_{side}"]) for side in ("in", "out")
        )  # fmt: skip
        axes = ((go.a_dims, block_a), (go.b_dims, block_b))
        bound_in, bound_out = geometry.offset_bounds(p.sizes, p.in_strides, axes)
        assert worst_in <= bound_in, (shape, dims, view, worst_in, bound_in)
        assert worst_out <= bound_out, (shape, dims, view, worst_out, bound_out)
        checked += 1
    assert checked > 40


def _magic_decoded_offsets(index, sizes, strides, magics, shifts):
    """The offsets the tile kernel's ``_decode`` forms with magic division: each ``index // size`` as
    ``umulhi(index, magic) >> shift`` in 32-bit unsigned arithmetic, the remainder by multiply-subtract."""
    import numpy as np

    index = index.astype(np.uint64)
    off = np.zeros(index.shape, dtype=np.int64)
    for i, (size, stride) in enumerate(zip(sizes, strides)):
        if i < len(sizes) - 1:
            q = ((index * np.uint64(magics[i])) >> np.uint64(32)) >> np.uint64(shifts[i])
            off += (index - q * np.uint64(size)).astype(np.int64) * stride
            index = q
        else:
            off += index.astype(np.int64) * stride
    return off


def test_magic_arguments_decode_every_index_the_kernel_forms():
    """The magic numbers and shifts the tile kernel receives (``magics_of``: as the kernel decodes them),
    replayed as the kernel divides over every index of the padded grid and every batch element, give
    the offsets of exact division on each decode; and they travel as values Triton does not specialize
    (never 1 nor a multiple of 16; the magic past int32), so a new size compiles nothing new."""
    import numpy as np

    from tileflip.kernels.triton.permute import arg_groups, decodes_of, magics_of, tile_args

    checked = 0
    for shape, dims, view, _es, p, go in _tile_launches(_offset_cases()):
        args, constexprs = tile_args(p, go)
        assert constexprs["MAGIC"], (shape, dims)
        sent = [g[-2:] for g in arg_groups(args).values()]  # (magics, shifts) of each decode, as sent
        assert len(sent) == 5 and all(v != 1 and v % 16 for pair in sent for t in pair for v in t)
        assert all(v >= 2**31 for magics, _ in sent for v in magics[:-1])  # int64 whatever the size
        d, m = decodes_of(args), magics_of(args)
        (block_b, block_a), (tiles_b, tiles_a) = go.blocks, go.grid
        ranges = {"a": tiles_a * block_a, "b": tiles_b * block_b, "n": go.batch}
        for name in ("a_in", "a_out", "b_in", "b_out", "n_in", "n_out"):
            index = np.arange(ranges[name[0]], dtype=np.int64)
            sizes, strides = d[name]
            _, magics, shifts = m["n" if name.startswith("n") else name]
            assert (_magic_decoded_offsets(index, sizes, strides, magics, shifts)
                    == _decoded_offsets(index, sizes, strides)).all(), (shape, dims, name)  # fmt: skip
        checked += 1
    assert checked > 40


def _widened(p, go, element_size: int) -> bool:
    """Whether the launch ``go`` of plan ``p`` moves wider vectors than each side's fastest dimension
    alone gives (``tuning.permute_launch``'s widening)."""
    return not go.flat and go.vec != geometry.vector_widths(p.sizes, p.in_strides, go.kept, element_size)


def _groups_hold(offsets, vec: int, size: int) -> bool:
    """``vec`` divides the axis's ``size`` (the masked tails compare whole vectors) and every group of
    ``vec`` linear indices (from a multiple of ``vec``) is ``vec`` consecutive offsets starting at a
    multiple of ``vec``."""
    if size % vec:
        return False
    groups = offsets.reshape(-1, vec)
    return bool(((groups[:, 0] % vec) == 0).all() and ((groups - groups[:, :1]) == list(range(vec))).all())


def test_vector_widths_hold_on_every_element_the_kernel_moves():
    """The tile kernel asserts (``tl.multiple_of`` / ``tl.max_contiguous``, which only a GPU trusts) that
    its loads run along A, and its stores along the stored axis, in groups of VEC consecutive offsets
    starting at multiples of VEC, and that the other axis and the batch only add multiples of VEC. Checked
    here from the kernel's own arguments over every index, for the named, random and vector-run cases."""
    import numpy as np

    from tileflip.kernels.triton.permute import decodes_of, tile_args

    rng = random.Random(7)
    cases = _offset_cases() + [(s, d, {1: torch.int8, 2: torch.bfloat16, 4: torch.float32}[e], "contiguous")
                               for s, d, e in LAYOUT_CASES]  # fmt: skip
    cases += [_vector_run_case(rng) for _ in range(40)] + [(*c, "contiguous") for c in HELD_CASES]
    widened = 0
    for shape, dims, view, es, p, go in _tile_launches(cases):
        widened += _widened(p, go, es)
        args, _ = tile_args(p, go)
        d = decodes_of(args)
        a_in, a_out, b_in, b_out = d["a_in"], d["a_out"], d["b_in"], d["b_out"]
        n = (*d["n_in"], d["n_out"][1])
        size_a, size_b = args[0], args[1]
        ia, ib = np.arange(size_a, dtype=np.int64), np.arange(size_b, dtype=np.int64)
        ibatch = np.arange(go.batch, dtype=np.int64)
        load, store = go.vec
        assert _groups_hold(_decoded_offsets(ia, *a_in), load, size_a), (shape, dims, view, go)
        assert (_decoded_offsets(ib, *b_in) % load == 0).all()
        assert (_decoded_offsets(ibatch, n[0], n[1]) % load == 0).all()
        stored, other = ((ia, a_out), (ib, b_out)) if go.kept else ((ib, b_out), (ia, a_out))
        assert _groups_hold(_decoded_offsets(stored[0], *stored[1]), store, len(stored[0])), (shape, dims, view, go)
        assert (_decoded_offsets(other[0], *other[1]) % store == 0).all()
        assert (_decoded_offsets(ibatch, n[0], n[2]) % store == 0).all()
    assert widened >= 10


@pytest.mark.parametrize(
    "shape,dims,element_size,vec,blocks,warps",
    [
        # the fastest dimension odd, its run with the next even: vectors from the run (measured on the
        # permute suites, tuning.VECTOR_RUNS): 0.59 -> 0.68 of copy, the narrow tile kept (2-byte stores),
        # since tuning.WIDE_LOAD_TILES 256 (B) x 64 (A) on 4 warps (16-byte loads, 2-byte stores: 0.63 -> 0.75)
        ((28, 86, 14, 2, 40, 28), (0, 2, 4, 3, 5, 1), 1, (16, 2), (256, 64), 4),
        # both sides reach 16 bytes: the full-vector tile (0.91 -> 0.95)
        ((8, 82, 18, 36, 94), (1, 3, 4, 0, 2), 2, (8, 8), (128, 128), 16),
        # 8-byte stores: the narrow tile kept (0.83 -> 0.85; with the half tile of 8-byte vectors, 0.64),
        # on 8 warps (WIDE_LOAD_STEP: 0.82 -> 0.86)
        ((7, 46, 8, 72, 38, 10), (0, 3, 4, 1, 5, 2), 1, (16, 8), (64, 128), 8),
    ],
)
def test_vectors_come_from_the_runs_the_axes_form(shape, dims, element_size, vec, blocks, warps):
    p = plan.plan_permute(shape, _contiguous_strides(shape), dims, element_size)
    go = tuning.permute_launch(p, element_size)
    assert (go.vec, go.blocks, go.num_warps) == (vec, blocks, warps)
    assert _widened(p, go, element_size)


def test_wide_load_step_covers_transposed_tiles_with_16_byte_loads_and_narrower_stores():
    """tuning.WIDE_LOAD_STEP applies to a transposed tile that loads 16-byte vectors and stores narrower
    ones; not where the loads are the narrower side, not to kept tiles, not where TILES_4B sets the tile,
    not with 16-byte vectors on both sides; and a suite case it covers gets its tile (a quarter of the
    int8 tile, 8 warps, int32 offsets)."""
    wide, (first, second) = tuning.WIDE_LOAD_STEP, tuning.NARROW_STEPS
    assert tuning.narrow_step(2, 16, kept=False, element_size=1) == wide
    assert tuning.narrow_step(4, 16, kept=False, element_size=2) == wide
    assert tuning.narrow_step(4, 4, kept=False, element_size=1) == second  # loads are the narrower side
    assert tuning.narrow_step(2, 4, kept=False, element_size=1) == first
    assert tuning.narrow_step(4, 16, kept=True, element_size=1) == second  # kept
    assert tuning.narrow_step(4, 16, kept=False, element_size=4) == second  # TILES_4B's tile
    assert tuning.narrow_step(16, 16, kept=False, element_size=1) is None
    shape, dims = (60, 2816, 416), (1, 2, 0)
    go = tuning.permute_launch(plan.plan_permute(shape, _contiguous_strides(shape), dims, 1), 1)
    assert (go.vec, go.blocks, go.num_warps, go.offsets64) == ((16, 4), (64, 128), 8, False)


# Launches of tuning.WIDE_LOAD_STEP (16-byte loads, narrower stores) and their tiles, by the element size
# and the stores' bytes: WIDE_LOAD_TILES' tile where it has one (the random suite's case, then a small one
# that the interpreter runs), the step's quarter tile on 8 warps elsewhere.
# The 1-byte-store tile keeps int64 offsets (WIDE_LOAD_OFFSETS64) and takes B's output runs only where they
# span its B side or B is one run (WIDE_LOAD_MIN_RUN), else the step's tile.
WIDE_LOAD_CASES = [
    ((11, 39, 29, 21, 42, 24), (5, 4, 2, 3, 1, 0), 1, (16, 1), (1024, 32), 4, True),  # 0.41 -> 0.67 of copy
    ((5, 7, 31, 32), (3, 0, 1, 2), 1, (16, 1), (1024, 32), 4, True),  # B's output run is 1085 long
    ((2400, 5, 9, 480), (0, 3, 1, 2), 1, (16, 1), (64, 128), 8, False),  # runs of 45: 0.07 -> 0.55
    ((6, 5, 9, 48), (0, 3, 1, 2), 1, (16, 1), (128, 64), 8, False),  # runs of 45
    ((28, 86, 14, 2, 40, 28), (0, 2, 4, 3, 5, 1), 1, (16, 2), (256, 64), 4, False),  # 0.63 -> 0.75 of copy
    ((2, 5, 13, 48), (3, 1, 0, 2), 1, (16, 2), (256, 64), 4, False),
    ((24, 6, 2, 24), (0, 2, 3, 1), 1, (16, 2), (128, 64), 8, False),  # B folds runs of 6: the step's tile
    ((15, 14, 240, 480), (2, 0, 3, 1), 1, (16, 2), (64, 128), 8, False),  # runs of 14: 0.39 -> 0.46
    ((46, 188, 88, 88), (1, 2, 3, 0), 2, (8, 2), (64, 128), 4, False),  # 0.98 -> 1.01
    ((9, 6, 6, 12), (2, 3, 0, 1), 2, (8, 2), (64, 128), 4, False),
    ((6, 6, 8, 9), (2, 0, 3, 1), 2, (8, 2), (64, 64), 8, False),  # B folds runs of 6: the step's tile
    ((14, 3, 120, 48, 56), (2, 4, 3, 1, 0), 2, (8, 2), (64, 64), 8, False),  # B folds runs of 42: 0.63 -> 0.73
    ((60, 2816, 416), (1, 2, 0), 1, (16, 4), (64, 128), 8, False),  # 4-byte stores: the step (256 x 64: 0.92 -> 0.76)
    ((7, 46, 8, 72, 38, 10), (0, 3, 4, 1, 5, 2), 1, (16, 8), (64, 128), 8, False),  # 8-byte stores, the tile
]  # chosen for narrower vectors (VECTOR_RUNS): the step (256 x 64: 0.86 -> 0.36)


@pytest.mark.parametrize("shape,dims,element_size,vec,blocks,warps,offsets64", WIDE_LOAD_CASES)
def test_wide_load_tiles_follow_the_stores_as_launched(shape, dims, element_size, vec, blocks, warps, offsets64):
    go = tuning.permute_launch(plan.plan_permute(shape, _contiguous_strides(shape), dims, element_size), element_size)
    assert (go.vec, go.blocks, go.num_warps, go.kept, go.offsets64) == (vec, blocks, warps, False, offsets64)


def _launch_int8(shape, dims):
    return tuning.permute_launch(plan.plan_permute(shape, _contiguous_strides(shape), dims, 1), 1)


def test_wide_load_a_fast_steps_along_a(monkeypatch):
    """Launches on a WIDE_LOAD_A_FAST tile step along A although int8 is in B_FIRST_SIZES (int8
    (11,39,...): 0.58 -> 0.65 of copy); the 2-byte-store tile keeps stepping along B."""
    assert 1 in tuning.B_FIRST_SIZES and (1, 1) in tuning.WIDE_LOAD_A_FAST
    for shape, dims in (((11, 39, 29, 21, 42, 24), (5, 4, 2, 3, 1, 0)), ((5, 7, 31, 32), (3, 0, 1, 2))):
        assert _launch_int8(shape, dims).b_fast is False
    assert _launch_int8((28, 86, 14, 2, 40, 28), (0, 2, 4, 3, 5, 1)).b_fast is True  # (1, 2): B first
    monkeypatch.setattr(tuning, "WIDE_LOAD_A_FAST", frozenset())
    assert _launch_int8((11, 39, 29, 21, 42, 24), (5, 4, 2, 3, 1, 0)).b_fast is True


def test_wide_load_one_byte_stores_keep_int64_offsets_under_a_register_cap(monkeypatch):
    """The 1-byte-store tile's launches keep int64 offsets and pass REGISTER_CAP (int8 (11,39,29,5,42,24)
    had compiled to 32 registers and a 3280-byte stack with int32 offsets and no cap: 0.06 of copy, now
    0.70); the other WIDE_LOAD_TILES launches keep int32 offsets and no cap."""
    go = _launch_int8((11, 39, 29, 5, 42, 24), (5, 4, 2, 3, 1, 0))
    assert (go.blocks, go.offsets64, go.maxnreg, go.options["maxnreg"]) == ((1024, 32), True, 255, 255)
    go = _launch_int8((28, 86, 14, 2, 40, 28), (0, 2, 4, 3, 5, 1))
    assert (go.blocks, go.offsets64, go.maxnreg, "maxnreg" in go.options) == ((256, 64), False, 0, False)
    monkeypatch.setattr(tuning, "WIDE_LOAD_OFFSETS64", frozenset())
    monkeypatch.setattr(tuning, "REGISTER_CAP", 0)
    go = _launch_int8((11, 39, 29, 5, 42, 24), (5, 4, 2, 3, 1, 0))
    assert (go.offsets64, go.maxnreg) == (False, 0)


def test_wide_load_tiles_need_long_output_runs_or_one_run(monkeypatch):
    """WIDE_LOAD_MIN_RUN sends launches whose B folds output runs short of the tile to the step's tile
    (int8 (2400,5,9,480) (0,3,1,2), runs of 45: 0.07 -> 0.55 of copy); a B of one run keeps the tile."""
    assert _launch_int8((2400, 5, 9, 480), (0, 3, 1, 2)).blocks == (64, 128)
    assert _launch_int8((5, 7, 31, 32), (3, 0, 1, 2)).blocks == (1024, 32)  # one run of 1085
    monkeypatch.setattr(tuning, "WIDE_LOAD_MIN_RUN", {})
    assert _launch_int8((2400, 5, 9, 480), (0, 3, 1, 2)).blocks == (1024, 32)


@pytest.mark.parametrize("shape,dims", [((11, 39, 29, 21, 42, 24), (5, 4, 2, 3, 1, 0)),
                                        ((11, 39, 29, 5, 42, 24), (5, 4, 2, 3, 1, 0))])
@without_interpreter
def test_one_byte_store_tile_compiles_without_a_stack(shape, dims):
    """Compiled for sm_90 (no GPU), the 1-byte-store tile's launches hold their values in registers:
    int8 (11,39,29,5,42,24) had compiled to 32 registers and a 3280-byte stack (0.06 of copy) before
    WIDE_LOAD_OFFSETS64 and REGISTER_CAP."""
    from tileflip.kernels.triton.layout import resource_usage
    from tileflip.kernels.triton.permute import compiled_tile_kernel

    p = plan.plan_permute(shape, _contiguous_strides(shape), dims, 1)
    assert tuning.permute_launch(p, 1).blocks == tuning.WIDE_LOAD_TILES[(1, 1)][:2]
    usage = resource_usage(compiled_tile_kernel(p, tuning.permute_launch(p, 1), 1))
    assert usage["stack"] == 0 and usage["regs"] > 32, usage


def test_b_output_run_counts_the_outputs_contiguous_dims():
    """B's dims innermost first while each is the output's next outer one (the output is contiguous in
    the merged sizes' order)."""
    assert geometry.b_output_run((11, 39, 609, 42, 24), (4, 3, 2)) == 24 * 42 * 609
    assert geometry.b_output_run((28, 14, 40, 2, 28, 86), (5, 3, 1)) == 86
    assert geometry.b_output_run((7, 9), ()) == 1


@pytest.mark.parametrize("device", DEVICES)
def test_wide_load_tiles_move_exact_bits(device):
    """The small cases above, one per WIDE_LOAD_TILES entry, each on its own tile: bits equal on poisoned
    outputs, also from an input whose last dimension is cut from a longer one (strided rows)."""
    covered = set()
    for shape, dims, element_size, *_ in WIDE_LOAD_CASES:
        if math.prod(shape) > 40000:
            continue
        dtype = {1: torch.int8, 2: torch.bfloat16}[element_size]
        for i, view in enumerate(("contiguous", "narrowed")):
            x = _view(shape, view, dtype, device, seed=i)
            go = tuning.permute_launch(plan.plan_permute(tuple(x.shape), tuple(x.stride()), dims, element_size),
                                       element_size)  # fmt: skip
            covered.add((go.blocks, go.num_warps))
            out = poisoned(tuple(x.shape[d] for d in dims), dtype, device)
            tileflip.permute(x, dims, out)
            assert_bits_equal(out, x.permute(dims))
    assert {(t[:2], t[2]) for t in tuning.WIDE_LOAD_TILES.values()} <= covered


# Permutes whose wider vectors choose a tile on which the axes no longer form runs that hold them (the
# output run of B's dimensions is 36 elements in the first): permute_launch keeps the launch of the
# narrower vectors.
HELD_CASES = [((3, 12, 4, 256), (3, 2, 1, 0), torch.bfloat16), ((256, 32, 9, 28), (1, 3, 2, 0), torch.bfloat16),
              ((28, 12, 6, 48, 14, 6), (5, 4, 2, 3, 1, 0), torch.int8)]  # fmt: skip


@pytest.mark.parametrize("shape,dims,dtype", HELD_CASES)
def test_wider_vectors_are_kept_only_where_the_axes_hold_them(shape, dims, dtype, monkeypatch):
    es = torch.empty((), dtype=dtype).element_size()
    p = plan.plan_permute(shape, _contiguous_strides(shape), dims, es)
    narrow = tuning.permute_launch(p, es, widen=False)
    wider = geometry.run_vector_widths(p.sizes, p.in_strides, False, narrow.a_dims, narrow.b_dims, es)
    assert wider != narrow.vec  # a widening on offer ...
    assert tuning.permute_launch(p, es) == narrow  # ... refused: the wider vectors' tile folds other axes


def _vector_run_case(rng: random.Random):
    """A permute whose side's fastest dimension is odd but forms an even run with the next (3 x 8)."""
    rank = rng.randint(3, 5)
    shape = [rng.choice([3, 5, 7, 9]) for _ in range(rank)]
    shape[-2] = rng.choice([2, 4, 8, 16])
    view = rng.choice(["contiguous", "contiguous", "sliced", "expanded", "narrowed"])
    if view == "narrowed":  # an even last dimension, whose cut leaves the next one an odd stride
        shape[-1] = rng.choice([2, 4, 8, 16])
    dims = list(range(rank))
    rng.shuffle(dims)
    dtype = rng.choice([torch.float32, torch.bfloat16, torch.int8])
    return tuple(shape), tuple(dims), dtype, view


# int8 (2, 1024, 1024, 1024) -> (0, 3, 2, 1): 2**31 elements, no masked tails, the largest offset is
# 2**31 - 1 (int32 offsets at their limit); (3, 976, 1020, 688) holds fewer elements, but its masked
# tails bound past 2**31 (int64 offsets). Both move 16-byte vectors (no narrow step). The GPU test
# below runs both.
BIG_INT32 = ((2, 1024, 1024, 1024), (0, 3, 2, 1))
BIG_INT64 = ((3, 976, 1020, 688), (0, 3, 2, 1))


def _contiguous_strides(shape):
    return tuple(torch.empty(shape, device="meta").stride())


def _big_launch(case):
    shape, dims = case
    return tuning.permute_launch(plan.plan_permute(shape, _contiguous_strides(shape), dims, 1), 1)


def test_offsets_switch_to_64_bits_at_2_31():
    assert _big_launch(BIG_INT32).offsets64 is False
    assert _big_launch(BIG_INT64).offsets64 is True
    # a strided view: the offsets reach past 2**31 through a stride while the tensor holds few elements
    p = plan.plan_permute((3, 40), (2**31 // 2, 1), (1, 0), 4)
    assert p.kind == "tiles" and tuning.permute_launch(p, 4).offsets64 is True


def _every_launch(monkeypatch, **fields):
    """Every permute launch planned from here on with ``fields`` set in its launch description."""
    from tileflip.ops import backends

    plain = tuning.permute_launch

    def changed(p, element_size, **options):
        return dataclasses.replace(plain(p, element_size, **options), **fields)

    monkeypatch.setattr(tuning, "permute_launch", changed)
    monkeypatch.setattr(backends, "_permute_launch", changed)


@pytest.fixture
def int64_offsets(monkeypatch):
    """Every tile-kernel launch with int64 offsets, as for tensors past 2**31 elements."""
    _every_launch(monkeypatch, offsets64=True)


@pytest.fixture
def without_magic(monkeypatch):
    """Every tile-kernel launch dividing with Triton's own integer division (``PermuteLaunch.magic`` off),
    as launches whose indices need 64 bits do."""
    _every_launch(monkeypatch, magic=False)


def _tile_constexprs(shape, dims, element_size):
    from tileflip.kernels.triton.permute import tile_args

    p = plan.plan_permute(shape, _contiguous_strides(shape), dims, element_size)
    go = tuning.permute_launch(p, element_size)
    return go, None if go.flat else tile_args(p, go)[1]


def test_magic_division_where_indices_are_int32():
    """The tile kernel divides by magic numbers on every named tile case (int32 indices), not where a
    tile index needs 64 bits, and not with the launch's magic off."""
    for shape, dims, dtype, _view_kind in _named_tile_cases():
        go, constexprs = _tile_constexprs(shape, dims, torch.empty((), dtype=dtype).element_size())
        if not go.flat:
            assert constexprs["MAGIC"] is True and not go.wide, (shape, dims)
    go, constexprs = _tile_constexprs((3, 2**31 // 3 + 64, 5), (2, 1, 0), 1)
    assert go.wide and constexprs["MAGIC"] is False


def test_magic_division_off(without_magic):
    _, constexprs = _tile_constexprs((8, 4096, 32, 128), (0, 2, 3, 1), 2)
    assert constexprs["MAGIC"] is False


@pytest.mark.parametrize("device", DEVICES)
def test_division_path_without_magic(device, without_magic):
    """Triton's own integer division in the decodes (the path of launches whose indices need 64 bits) on
    the named cases of the tile kernel and a random sweep: the same bits."""
    for i, (shape, dims, dtype, view) in enumerate(_named_tile_cases()):
        x = _view(shape, view, dtype, device, seed=i)
        out = poisoned(tuple(x.shape[d] for d in dims), dtype, device)
        tileflip.permute(x, dims, out)
        assert_bits_equal(out, x.permute(dims))
    rng = random.Random(3)
    for i in range(20):
        shape, dims, dtype, view = _random_case(rng)
        x = _view(shape, view, dtype, device, seed=i) if shape else random_bits((), dtype, device)
        assert_bits_equal(tileflip.permute(x, dims), x.permute(dims))


@pytest.mark.parametrize("magic", [True, False])
@without_interpreter
def test_magic_decode_compiles_without_integer_division(magic):
    """Compiled for sm_90 (no GPU): with magic division the tile kernel's decodes hold no integer division
    or remainder, only multiply-highs (about three instructions a division where a signed division by a
    runtime int32 took about ten; on int8 (11,39,29,21,42,24) by (5,4,2,3,1,0) the divisions were most of
    the kernel's instructions); without it they divide."""
    from tileflip.kernels.triton.permute import compiled_tile_kernel

    shape, dims = (11, 39, 29, 21, 42, 24), (5, 4, 2, 3, 1, 0)
    p = plan.plan_permute(shape, _contiguous_strides(shape), dims, 1)
    go = dataclasses.replace(tuning.permute_launch(p, 1), magic=magic)
    ptx = compiled_tile_kernel(p, go, 1).asm["ptx"]
    divisions = re.findall(r"\b(?:div|rem)\.[su]32\b", ptx)
    # the program id's split into batch element and tile, and tile into its A and B parts: two scalar
    # divisions a program, with the remainders by multiply-subtract
    assert len(divisions) == 2 if magic else len(divisions) > 2, divisions
    assert ("mul.hi.u32" in ptx) is magic


@pytest.mark.parametrize("device", DEVICES)
def test_int64_offset_path(device, int64_offsets):
    """The int64 offset path, which only tensors of 2**31 elements and more take by themselves, on the
    named cases of the tile kernel."""
    for i, (shape, dims, dtype, view) in enumerate(_named_tile_cases()):
        x = _view(shape, view, dtype, device, seed=i)
        p = plan.plan_permute(tuple(x.shape), tuple(x.stride()), dims, x.element_size())
        if p.kind not in ("rows", "tiles"):
            continue
        assert tuning.permute_launch(p, x.element_size()).offsets64
        out = poisoned(tuple(x.shape[d] for d in dims), dtype, device)
        tileflip.permute(x, dims, out)
        assert_bits_equal(out, x.permute(dims))


@pytest.mark.gpu
@pytest.mark.parametrize("shape,dims", [BIG_INT32, BIG_INT64], ids=["int32-offsets", "int64-offsets"])
def test_offsets_near_and_past_2_31(shape, dims):
    """2 GB int8 permutes whose offsets reach 2**31 - 1 (int32 offsets) and may pass it (int64 offsets)."""
    x = torch.randint(1, 256, shape, dtype=torch.uint8, device="cuda").view(torch.int8)
    out = poisoned(tuple(shape[d] for d in dims), torch.int8, "cuda")
    tileflip.permute(x, dims, out)
    want = x.permute(dims).contiguous()
    differ = int((out != want).sum())
    assert differ == 0, f"{differ} of {out.numel()} bytes differ"


@pytest.mark.parametrize(
    "shape,dims,element_size,offsets64",
    [
        ((32, 48, 47, 18, 10, 3), (0, 4, 1, 3, 5, 2), 2, False),  # 2-byte vectors: quarter tile, int32
        ((21, 23, 45, 11, 12, 42), (1, 2, 5, 0, 3, 4), 2, True),  # 4-byte load vectors: half tile, int64 (measured)
        ((320, 50, 28, 88), (0, 2, 3, 1), 2, False),  # 16-byte loads, 4-byte stores: WIDE_LOAD_STEP, int32
        ((8, 4096, 32, 128), (0, 3, 2, 1), 2, False),  # 16-byte vectors: int32
    ],
)
def test_offset_width_follows_the_measured_rule(shape, dims, element_size, offsets64):
    """Every offset of these launches is far below 2**31; only the half-tile narrow step keeps int64
    offsets (tuning.NARROW_STEPS: measured faster there)."""
    go = tuning.permute_launch(plan.plan_permute(shape, _contiguous_strides(shape), dims, element_size), element_size)
    assert go.offsets64 is offsets64


@pytest.mark.parametrize(
    "shape,dims,blocks,warps",
    [
        ((48, 384, 32, 38), (0, 2, 3, 1), (64, 64), 16),  # 16-byte vectors: half the 2-D tile (TILES_4B)
        ((23, 21, 112, 32, 16), (2, 1, 4, 3, 0), (64, 64), 16),  # 16-byte vectors once widened: TILES_4B
        ((38, 17, 20, 13, 14, 13), (3, 5, 1, 2, 4, 0), (64, 32), 4),  # 4-byte load vectors: TILES_4B's own tile
        ((124, 24, 84, 12, 16), (3, 2, 0, 1, 4), (64, 128), 16),  # inner dimension kept: the 2-D tile
    ],
)
def test_transposed_4_byte_tiles_follow_the_measured_rule(shape, dims, blocks, warps):
    go = tuning.permute_launch(plan.plan_permute(shape, _contiguous_strides(shape), dims, 4), 4)
    assert (go.blocks, go.num_warps) == (blocks, warps)
    assert tuning.tiles_4b(2, 16, False) is None and tuning.tiles_4b(4, 8, False) is None


@pytest.mark.parametrize(
    "shape,dims,element_size,blocks,warps",
    [
        ((64, 56, 56, 256), (0, 3, 1, 2), 2, (64, 256), 4),  # a whole 256 first dimension: WHOLE_DIM_WARPS
        ((64, 256, 56, 56), (0, 2, 3, 1), 2, (256, 64), 4),
        ((8, 4096, 32, 128), (0, 3, 2, 1), 2, (128, 128), 16),  # within the 2-D tile: its warps
        ((64, 56, 56, 256), (0, 3, 1, 2), 4, (64, 64), 16),  # no entry for 4-byte elements (TILES_4B)
    ],
)
def test_whole_dimension_tiles_follow_the_measured_rule(shape, dims, element_size, blocks, warps):
    go = tuning.permute_launch(plan.plan_permute(shape, _contiguous_strides(shape), dims, element_size), element_size)
    assert (go.blocks, go.num_warps) == (blocks, warps)


@pytest.mark.parametrize(
    "shape,dims,element_size,transposed",
    [
        ((62, 10, 8, 32, 44, 3), (3, 1, 4, 0, 2, 5), 4, True),  # 12-byte kept runs (the random suite's)
        ((9, 2, 130, 7), (2, 0, 1, 3), 2, True),  # 14 bytes
        ((9, 2, 130, 8), (2, 0, 1, 3), 2, True),  # 16 bytes: moved as 4 4-byte words, under 64 bytes
        ((9, 2, 130, 9), (2, 0, 1, 3), 2, False),  # 18 bytes: stays 2-byte, at least 16 bytes: kept
        ((16, 8, 32, 4), (2, 0, 1, 3), 4, True),  # 16 bytes of 4-byte elements: moved up to 64 bytes
        ((16, 8, 32, 12), (2, 0, 1, 3), 4, True),
        ((16, 8, 32, 16), (2, 0, 1, 3), 4, False),
        ((16, 8, 32, 21), (2, 0, 1, 3), 4, True),  # 84 bytes, not whole 16-byte vectors: moved up to 128 bytes
        ((16, 8, 32, 30), (2, 0, 1, 3), 4, True),  # 120 bytes
        ((16, 8, 32, 24), (2, 0, 1, 3), 4, False),  # 96 bytes: whole vectors
        ((16, 8, 32, 33), (2, 0, 1, 3), 4, False),  # 132 bytes
        ((16, 8, 32, 84), (2, 0, 1, 3), 1, True),  # 84 bytes of int8: moved as 21 4-byte words
    ],
)
def test_short_kept_runs_are_tiled_as_moved(shape, dims, element_size, transposed):
    """A kept inner dimension under SHORT_RUN_BYTES (by element size), or of 4-byte elements under
    NARROW_RUN_BYTES and not whole 16-byte vectors, is launched as a transposed tile whose axis B starts
    from it (measured: fp32 12-byte runs went from 0.38 to 0.83 of copy, 84-byte runs from 0.61 to 0.83);
    A then starts from the input's next dimension, whose stride is not 1, so the loads take no vectors.
    Rows plans are moved as 4-byte words where they allow it (``plan.regrouped``)."""
    p = plan.plan_permute(shape, _contiguous_strides(shape), dims, element_size)
    assert p.kind == "rows"
    width = tuning.element_width(p, element_size, 16)
    p, element_size = plan.regrouped(p, element_size, width), width
    go = tuning.permute_launch(p, element_size)
    last = len(p.sizes) - 1
    assert go.kept is (not transposed)
    if transposed:
        assert go.b_dims[0] == last and last not in go.a_dims and p.in_strides[go.a_dims[0]] > 1
        assert go.vec[0] == 1
    else:
        assert go.a_dims[0] == last


def test_a_dimension_both_axes_want_next_goes_to_b():
    """fp32 (23,21,112,32,16) (2,1,4,3,0): merged dimension 3 (32) is the input's second fastest and the
    output's second fastest; B takes it (``plan.launch.fold_axes``: B first, measured 0.76 -> 0.84 of copy)."""
    shape, dims = (23, 21, 112, 32, 16), (2, 1, 4, 3, 0)
    p = plan.plan_permute(shape, _contiguous_strides(shape), dims, 4)
    assert p.sizes == (112, 21, 16, 32, 23)
    go = tuning.permute_launch(p, 4)
    assert go.b_dims[:2] == (4, 3) and 3 not in go.a_dims


def test_a_dimension_that_continues_the_other_axis_run_is_left_to_it():
    """bf16 (32,48,47,18,10,3) (0,4,1,3,5,2): the input's run is 3 x 10 x 18 (merged dimensions 4, 1, 3);
    B cannot continue its own output run past dimension 5 (dimension 4 is on A), so it leaves 3 to A
    (``fold_axes`` passes over it; measured 0.34 -> 0.43 of copy) and A holds the whole 540-element run."""
    shape, dims = (32, 48, 47, 18, 10, 3), (0, 4, 1, 3, 5, 2)
    p = plan.plan_permute(shape, _contiguous_strides(shape), dims, 2)
    assert p.sizes == (32, 10, 48, 18, 3, 47)
    go = tuning.permute_launch(p, 2)
    assert go.a_dims == (4, 1, 3) and go.b_dims == (5, 2)


@pytest.mark.parametrize(
    "shape,dims,element_size,b_dims,blocks",
    [
        # B's 28-element run is followed in the output by A's first dimension: B holds it alone (32 lanes),
        # in a quarter tile (tuning.WIDE_LOAD_STEP: 16-byte loads, narrower stores)
        ((39, 28, 16, 72, 39), (2, 0, 3, 4, 1), 2, (3,), (32, 128)),
        ((320, 50, 28, 88), (0, 2, 3, 1), 2, (2,), (64, 128)),  # tuning.WIDE_LOAD_TILES' tile for 4-byte stores
        # B's run (48) continues into the output's next dimension (30): B folds it (measured 0.87 -> 0.42);
        # A's 180 x 464 input run takes 16-byte loads (VECTOR_RUNS), so the full-vector tile
        ((48, 30, 464, 180), (3, 2, 1, 0), 1, (3, 2), (128, 256)),
    ],
)
def test_b_holds_a_whole_run_when_nothing_can_continue_it(shape, dims, element_size, b_dims, blocks):
    """tuning.WHOLE_B_WASTE: measured 0.81 -> 0.99 of copy on the first case, 0.79 -> 0.83 on the second."""
    p = plan.plan_permute(shape, _contiguous_strides(shape), dims, element_size)
    go = tuning.permute_launch(p, element_size)
    assert (go.b_dims, go.blocks) == (b_dims, blocks)


@pytest.mark.parametrize(
    "shape,dims,element_size,flat",
    [
        ((37, 16, 24, 29, 44), (0, 2, 1, 3, 4), 4, True),  # 5104-byte kept runs (measured 0.98 -> 1.03)
        ((68, 38, 72, 92), (2, 0, 1, 3), 4, True),  # 368 bytes (0.94 -> 0.99)
        ((8, 4096, 32, 128), (0, 2, 1, 3), 2, True),  # 256 bytes
        ((124, 24, 84, 12, 16), (3, 2, 0, 1, 4), 2, False),  # 32 bytes (0.92 -> 0.62 flat): the tile kernel
        ((9, 2, 130, 8), (2, 0, 1, 3), 2, False),  # 16 bytes
        ((3, 5, 4, 96), (1, 0, 2, 3), 4, True),
    ],
)
def test_long_kept_runs_take_the_flat_rows_kernel(shape, dims, element_size, flat):
    go = tuning.permute_launch(plan.plan_permute(shape, _contiguous_strides(shape), dims, element_size), element_size)
    assert go.flat is flat
    if flat:
        assert go.vec == (16 // element_size,) * 2 and go.blocks == (tuning.ROWS_FLAT_ELEMENTS * element_size // 16,)


def _flat_max_offset(p, go) -> int:
    """The largest input offset the flat rows kernel forms, masked tail vectors included."""
    import numpy as np

    vec, block = go.vec[0], go.blocks[0]
    v = np.arange(go.programs * block, dtype=np.int64)
    vectors = int(np.prod(p.sizes)) // vec
    v = np.where(v < vectors, v, 0)  # as the kernel: masked vectors decode vector 0
    row_vectors = p.sizes[-1] // vec
    row = v // row_vectors
    base = _decoded_offsets(row, p.sizes[:-1][::-1], p.in_strides[:-1][::-1]) + (v % row_vectors) * vec
    return int(base.max()) + vec - 1


@pytest.mark.parametrize(
    "shape,strides,offsets64",
    [
        ((3, 64), (2**29, 1), False),  # rows 2**29 floats apart: offsets below 2**31
        ((3, 64), (2**30, 1), True),  # 2**30 apart: the last row starts past 2**31
        ((5, 3, 384), (384, 1920, 1), False),
    ],
)
def test_flat_rows_offsets_bound(shape, strides, offsets64):
    """The flat rows kernel's int32 offsets hold every offset it forms, masked tail vectors included."""
    p = plan.plan_permute(shape, strides, tuple(range(len(shape))), 4)
    go = tuning.permute_launch(p, 4)
    assert p.kind == "rows" and go.flat
    assert go.offsets64 is offsets64
    if not go.offsets64:
        assert _flat_max_offset(p, go) < 2**31


@without_interpreter
def test_flat_rows_kernel_moves_16_byte_vectors():
    """Compiled for sm_90 (no GPU): the flat rows kernel's load and store give each thread one whole
    16-byte vector (VEC elements along the tile's dimension 1), for 2- and 4-byte elements."""
    from tileflip.kernels.triton.layout import every_access_layout
    from tileflip.kernels.triton.permute import compiled_tile_kernel

    for shape, dims, element_size in (((68, 38, 72, 92), (2, 0, 1, 3), 4), ((8, 4096, 32, 128), (0, 2, 1, 3), 2)):
        p = plan.plan_permute(shape, _contiguous_strides(shape), dims, element_size)
        go = tuning.permute_launch(p, element_size)
        assert go.flat
        kernel = compiled_tile_kernel(p, tuning.permute_launch(p, element_size), element_size)
        accesses = every_access_layout(kernel.asm["ttgir"])
        assert sorted(op for op, _, _ in accesses) == ["load", "store"]
        for op, layout, tile in accesses:
            assert tile == (go.blocks[0], go.vec[0]), (op, tile)
            assert layout["sizePerThread"][1] * element_size == 16 and layout["order"][0] == 1, (op, layout)


def test_plan_text_names_the_flat_rows_kernel():
    from tileflip import explain

    text = explain.permute_text((37, 16, 24, 29, 44), (0, 2, 1, 3, 4), dtype="float32")
    assert "flat rows kernel" in text and "4-element vectors (16 B loads and stores)" in text


def test_plan_text_names_the_program_order_and_register_cap():
    from tileflip import explain

    text = explain.permute_text((11, 39, 29, 21, 42, 24), (5, 4, 2, 3, 1, 0), dtype="int8")
    assert "tile 1024 (B) x 32 (A)" in text and "at most 255 registers" in text
    assert "consecutive programs along A" in text
    text = explain.permute_text((28, 86, 14, 2, 40, 28), (0, 2, 4, 3, 5, 1), dtype="int8")
    assert "registers" not in text and "consecutive programs along B" in text


def _flat_view(rng: random.Random, dtype, device, seed):
    """A tensor whose permutes keep a long inner run (>= 256 bytes, whole 16-byte vectors): contiguous, a
    slice of whole rows (a storage offset), a step over an outer dimension, an expanded dimension, or an
    input 4 bytes off a 16-byte boundary (strides still whole vectors: the kernel may not vectorize)."""
    size = torch.empty((), dtype=dtype).element_size()
    run = rng.choice([256, 384, 1024]) // size
    outer = [rng.choice([2, 3, 5, 7]) for _ in range(rng.randint(1, 3))]
    kind = rng.choice(["contiguous", "rows_sliced", "outer_step", "expanded", "unaligned"])
    shape = (*outer, run)
    if kind == "rows_sliced":
        x = random_bits((outer[0] + 1, *outer[1:], run), dtype, device, seed)[1:]
    elif kind == "outer_step":
        x = random_bits((2 * outer[0], *outer[1:], run), dtype, device, seed)[::2]
    elif kind == "expanded":
        x = random_bits((1, *outer[1:], run), dtype, device, seed).expand(shape)
    elif kind == "unaligned":
        numel = run * int(torch.Size(outer).numel())
        x = random_bits((numel + 4 // size,), dtype, device, seed)[4 // size:].view(shape)
    else:
        x = random_bits(shape, dtype, device, seed)
    return x, kind


@pytest.mark.parametrize("device", DEVICES)
def test_flat_rows_sweep(device):
    """Permutes that keep a long inner run, over strided, offset, expanded and unaligned inputs: bits equal,
    and the flat rows kernel takes most of them."""
    rng = random.Random(5)
    flat = 0
    for i in range(40):
        dtype = rng.choice([torch.float32, torch.bfloat16, torch.int8, torch.float64])
        x, kind = _flat_view(rng, dtype, device, seed=i)
        outer = list(range(x.dim() - 1))
        rng.shuffle(outer)
        dims = (*outer, x.dim() - 1)
        p = plan.plan_permute(tuple(x.shape), tuple(x.stride()), dims, x.element_size())
        if p.kind == "rows":
            flat += tuning.permute_launch(p, x.element_size()).flat
        out = poisoned(tuple(x.shape[d] for d in dims), dtype, device)
        tileflip.permute(x, dims, out)
        assert_bits_equal(out, x.permute(dims))
    assert flat >= 20


@pytest.mark.parametrize("device", DEVICES)
def test_vector_run_sweep(device):
    """Permutes whose vectors come from runs of two or more dimensions (an odd fastest dimension with an
    even next one), over contiguous, sliced, expanded and narrowed inputs: bits equal on poisoned outputs."""
    rng = random.Random(8)
    widened = 0
    for i in range(40):
        shape, dims, dtype, view = _vector_run_case(rng)
        x = _view(shape, view, dtype, device, seed=i)
        p = plan.plan_permute(tuple(x.shape), tuple(x.stride()), dims, x.element_size())
        if p.kind in ("rows", "tiles", "copy"):
            go = tuning.permute_launch(p, x.element_size())
            widened += _widened(p, go, x.element_size())
        out = poisoned(tuple(x.shape[d] for d in dims), dtype, device)
        tileflip.permute(x, dims, out)
        assert_bits_equal(out, x.permute(dims))
    assert widened >= 8


# --------------------------------------------------------------------------------------------------
# Rows plans moved as elements of another size (plan.regrouped, tuning.element_width)
# --------------------------------------------------------------------------------------------------


def _byte_sources(sizes, in_strides, element_size) -> list[int]:
    """The input byte offset of each output byte of a plan's copy, in output order."""
    out = []
    for index in range(math.prod(sizes)):
        offset, rest = 0, index
        for size, stride in zip(reversed(sizes), reversed(in_strides)):
            offset += (rest % size) * stride
            rest //= size
        out += [offset * element_size + b for b in range(element_size)]
    return out


@pytest.mark.parametrize(
    "shape, dims, element_size, width, kind, sizes",
    [
        ((3, 5, 8), (1, 0, 2), 1, 4, "rows", (5, 3, 2)),
        ((3, 5, 8), (1, 0, 2), 1, 2, "rows", (5, 3, 4)),
        ((3, 5, 4), (1, 0, 2), 1, 4, "tiles", (5, 3)),  # the run becomes one element: a transpose
        ((64, 72, 4), (1, 0, 2), 1, 4, "transpose2d", (72, 64)),
        ((5, 7, 4), (1, 0, 2), 8, 4, "rows", (7, 5, 8)),  # 8-byte elements as 4-byte words
        ((2, 3, 4, 6), (2, 0, 1, 3), 2, 4, "rows", (4, 6, 3)),
    ],
)
def test_regrouped_plans_move_the_same_bytes(shape, dims, element_size, width, kind, sizes):
    p = plan.plan_permute(shape, _contiguous_strides(shape), dims, element_size)
    q = plan.regrouped(p, element_size, width)
    assert (q.kind, q.sizes) == (kind, sizes)
    assert _byte_sources(q.sizes, q.in_strides, width) == _byte_sources(p.sizes, p.in_strides, element_size)


def test_regrouping_refuses_what_it_cannot_count():
    p = plan.plan_permute((3, 5, 6), _contiguous_strides((3, 5, 6)), (1, 0, 2), 1)
    with pytest.raises(ValueError, match=r"width must divide the kept run \(6 B\)"):
        plan.regrouped(p, 1, 4)
    t = plan.plan_permute((3, 5, 6), _contiguous_strides((3, 5, 6)), (2, 0, 1), 1)
    with pytest.raises(ValueError, match="only a rows plan"):
        plan.regrouped(t, 1, 2)


@pytest.mark.parametrize(
    "shape, dims, element_size, alignment, width",
    [
        ((3, 5, 4096), (1, 0, 2), 1, 16, 4),
        ((3, 5, 4096), (1, 0, 2), 1, 2, 2),  # pointers on 2-byte boundaries
        ((3, 5, 4096), (1, 0, 2), 1, 1, 1),
        ((3, 5, 4097), (1, 0, 2), 1, 16, 1),  # an odd run
        ((3, 5, 6), (1, 0, 2), 1, 16, 2),
        ((3, 5, 2), (1, 0, 2), 1, 16, 2),  # a run of 2 bytes: one element
        ((3, 5, 3), (1, 0, 2), 2, 16, 2),
        ((3, 5, 7), (1, 0, 2), 8, 16, 4),  # 8-byte elements as 4-byte words
        ((3, 5, 7), (1, 0, 2), 4, 16, 4),
        ((3, 5, 7), (2, 0, 1), 1, 16, 1),  # not a rows plan: as it is
    ],
)
def test_element_width_follows_the_run_the_strides_and_the_pointers(shape, dims, element_size, alignment, width):
    p = plan.plan_permute(shape, _contiguous_strides(shape), dims, element_size)
    assert tuning.element_width(p, element_size, alignment) == width


def test_a_stride_off_the_word_keeps_narrower_elements():
    # a (5, 3, 8) int8 view with a row stride of 10 bytes: 2-byte elements, whatever the run allows
    p = plan.plan_permute((5, 3, 8), (30, 10, 1), (1, 0, 2), 1)
    assert p.kind == "rows" and tuning.element_width(p, 1, 16) == 2


@pytest.mark.parametrize("device", DEVICES)
def test_rows_plans_move_exact_bits_as_other_element_sizes(device):
    """Rows plans regrouped to 4-, 2- and 1-byte elements by the run, the strides and each pointer's
    alignment (offsets of 0 to 8 bytes on either side), the run collapsing to one element included:
    bits equal, and nothing written around ``out``."""
    from tileflip.ops import backends

    cases = [
        ((3, 5, 8), (1, 0, 2), torch.int8), ((3, 5, 2), (1, 0, 2), torch.int8), ((64, 72, 4), (1, 0, 2), torch.int8),
        ((3, 4, 5, 6), (2, 0, 1, 3), torch.bfloat16), ((5, 7, 4), (1, 0, 2), torch.float64),
        ((2, 3, 4, 16), (0, 2, 1, 3), torch.float8_e4m3fn), ((3, 5, 6), (1, 0, 2), torch.int8),
        ((6, 5, 9), (1, 0, 2), torch.float32), ((5, 7, 3), (1, 0, 2), torch.int8),
    ]  # fmt: skip
    widths = set()
    for i, (shape, dims, dtype) in enumerate(cases):
        es = torch.empty((), dtype=dtype).element_size()
        numel = math.prod(shape)
        for x_off, out_off in ((0, 0), (1, 0), (0, 2), (4, 4), (8, 8), (2, 6)):
            if x_off % es or out_off % es:
                continue
            x = random_bits((numel + 16 // es,), dtype, device, seed=i)[x_off // es : x_off // es + numel].view(shape)
            buf = poisoned((numel + 32 // es,), dtype, device)
            out = buf[out_off // es : out_off // es + numel].view(tuple(shape[d] for d in dims))
            p = plan.plan_permute(shape, x.stride(), dims, es)
            widths.add(tuning.element_width(p, es, backends.pointer_alignment(x, out)) - es)
            tileflip.permute(x, dims, out)
            assert_bits_equal(out, x.permute(dims))
            assert bool((buf.view(torch.uint8)[:out_off] == POISON_BYTE).all())
            assert bool((buf.view(torch.uint8)[out_off + numel * es :] == POISON_BYTE).all())
    assert {-4, 0, 1, 2, 3} <= widths  # narrower, as they are, and wider by 1, 2 and 3 bytes


def test_moved_as_views_the_same_memory_in_the_chosen_width():
    from tileflip.ops import backends

    x = random_bits((4, 6, 12), torch.int8, "cpu", seed=1)
    out = poisoned((6, 4, 12), torch.int8, "cpu")
    p = plan.plan_permute((4, 6, 12), x.stride(), (1, 0, 2), 1)
    xm, om, q = backends.moved_as(x, out, p)
    assert (xm.dtype, om.dtype, q.sizes, q.in_strides) == (torch.uint32, torch.uint32, (6, 4, 3), (3, 18, 1))
    assert (xm.data_ptr(), om.data_ptr(), om.numel()) == (x.data_ptr(), out.data_ptr(), out.numel() // 4)
    odd = random_bits((4 * 6 * 12 + 1,), torch.int8, "cpu", seed=2)[1:].view(4, 6, 12)  # 1 byte off
    assert backends.moved_as(odd, out, p)[0] is odd
    t = plan.plan_permute((4, 6, 12), x.stride(), (2, 0, 1), 1)
    assert backends.moved_as(x, out, t)[2] is t  # not a rows plan: as it is


@pytest.mark.gpu
def test_a_refusal_says_the_permute_was_regrouped():
    from helpers import check_permute_refused

    x = random_bits((30, 40, 52), torch.int8, "cuda", seed=3)  # rows of 52 bytes: moved as 4-byte words
    check_permute_refused(x, (1, 0, 2), "cuda-realign", "moved as 4-byte elements")


# (shape, dims, dtype): transposed tiles whose output rows are whole 32-byte sectors apart, so that the
# B tiles can start early by the output's offset past a sector (``geometry.store_shift``): three B tiles
# (a first, a full and a last), shifts that add a B tile (beside two or three A tiles), a batch of two.
SECTOR_CASES = [
    ((32, 17, 16), (2, 1, 0), torch.float32),
    ((16, 40, 8, 5), (1, 3, 2, 0), torch.int8),
    ((8, 16, 96), (2, 1, 0), torch.float32),
    ((32, 64, 2, 5), (0, 3, 2, 1), torch.bfloat16),
    ((4, 2, 3, 8, 96), (1, 0, 4, 2, 3), torch.float32),
    ((16, 33, 8), (2, 1, 0), torch.float64),
]


def _sector_launch(shape, dims, dtype):
    es = torch.empty((), dtype=dtype).element_size()
    p = plan.plan_permute(shape, torch.empty(shape, dtype=dtype, device="meta").stride(), dims, es)
    return p, tuning.permute_launch(p, es), es


@pytest.mark.parametrize("shape,dims,dtype", SECTOR_CASES, ids=[str(c[0]) for c in SECTOR_CASES])
def test_store_shift_starts_b_tiles_on_sectors(shape, dims, dtype):
    """With out 16 bytes past a sector, every B tile but the first starts on a sector (the first's
    leading lanes are masked), where unshifted tiles start 16 bytes off one; the grid holds the shift."""
    from tileflip.kernels.triton.permute import tile_grid

    p, go, es = _sector_launch(shape, dims, dtype)
    assert p.kind == "tiles" and not go.kept
    assert geometry.store_shift(p.sizes, p.out_strides, go, es, 0) == 0
    for phase in (1, 2, 4, 8):  # not whole 16-byte store vectors: the tiles stay where they are
        assert geometry.store_shift(p.sizes, p.out_strides, go, es, phase) == 0
    shift = geometry.store_shift(p.sizes, p.out_strides, go, es, 16)
    assert shift == 16 // es
    size_b = math.prod(p.sizes[d] for d in go.b_dims)

    def out_b(index):  # the output offset of B index ``index`` (A's and the batch's are whole sectors)
        off = 0
        for d in go.b_dims:
            off += index % p.sizes[d] * p.out_strides[d]
            index //= p.sizes[d]
        return off

    grid = tile_grid(go, size_b, shift)
    starts = [k * go.blocks[0] - shift for k in range(1, grid[0])]  # none where one B tile holds the axis
    assert all(0 <= b < size_b for b in starts)
    assert all((16 + out_b(b) * es) % 32 == 0 for b in starts)
    assert all((16 + out_b(k * go.blocks[0]) * es) % 32 == 16 for k in range(1, go.grid[0]))
    assert grid[1] == go.grid[1] and grid[0] == -(-(size_b + shift) // go.blocks[0])


@without_interpreter
def test_shifted_tiles_keep_their_vectors():
    """Compiled for sm_90 (no GPU): the tile kernel with its B tiles shifted onto sectors has the same
    access layouts and as many 16-byte stores as without the shift (full tiles and masked tails)."""
    from tileflip.kernels.triton.layout import every_access_layout
    from tileflip.kernels.triton.permute import compiled_tile_kernel

    p, go, es = _sector_launch(*SECTOR_CASES[1])
    shift = geometry.store_shift(p.sizes, p.out_strides, go, es, 16)
    assert shift and go.vec[1] * es == 16
    plain, shifted = compiled_tile_kernel(p, go, es), compiled_tile_kernel(p, go, es, shift)
    assert every_access_layout(shifted.asm["ttgir"]) == every_access_layout(plain.asm["ttgir"])
    stores = [len(re.findall(r"st\.global(?:\.\w+)*\.v4\.b32", k.asm["ptx"])) for k in (plain, shifted)]
    assert stores[0] > 0 and stores[1] == stores[0], stores


def test_store_shift_only_where_every_output_row_starts_at_one_phase():
    # rows of 24 x 35 bytes (the A axis's output stride) are not whole sectors: rows lie at several phases
    p, go, es = _sector_launch((24, 35, 48), (2, 1, 0), torch.int8)
    assert p.kind == "tiles" and geometry.store_shift(p.sizes, p.out_strides, go, es, 16) == 0
    # stores along A (the output's fastest dimension kept): no shift
    p, go, es = _sector_launch((8, 4, 6, 32), (2, 0, 1, 3), torch.float32)
    assert go.kept and geometry.store_shift(p.sizes, p.out_strides, go, es, 16) == 0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("phase", [0, 16])
@pytest.mark.parametrize("shape,dims,dtype", SECTOR_CASES, ids=[str(c[0]) for c in SECTOR_CASES])
def test_tiles_off_a_sector_move_exact_bits(shape, dims, dtype, phase, device):
    """out starting ``phase`` bytes past a 32-byte sector (its B tiles then start early): exact bits,
    nothing written around out."""
    _check_off_a_sector(shape, dims, dtype, phase, device)
    from tileflip.kernels.triton.permute import launch_of

    p, go, es = _sector_launch(shape, dims, dtype)
    assert dict(launch_of(p, go, es, phase)[4][3])["B_SHIFT"] == phase // es  # the launch it took


def _check_off_a_sector(shape, dims, dtype, phase: int, device: str) -> None:
    """``tileflip.permute`` into an out starting ``phase`` bytes past a 32-byte sector of a poisoned
    buffer: exact bits, nothing written around out."""
    x = random_bits(shape, dtype, device, seed=5)
    es, numel = x.element_size(), x.numel()
    buf = poisoned((numel + 96 // es,), dtype, device)
    start = ((-buf.data_ptr()) % 32 + phase) // es
    out = buf[start: start + numel].view(tuple(shape[d] for d in dims))
    assert out.data_ptr() % 32 == phase
    tileflip.permute(x, dims, out, backend="triton")
    assert_bits_equal(out, x.permute(dims).contiguous())
    assert_bits_equal(buf[:start], poisoned((start,), dtype, device))
    rest = buf[start + numel:]
    assert_bits_equal(rest, poisoned(tuple(rest.shape), dtype, device))


# kept rows of 64 bytes: the kept tile where out starts on a 32-byte sector, the flat rows kernel where not
KEPT_SECTOR_CASE = ((8, 4, 6, 16), (2, 0, 1, 3), torch.float32)


def test_kept_rows_off_a_sector_take_the_flat_kernel():
    p, go, es = _sector_launch(*KEPT_SECTOR_CASE)
    assert p.kind == "rows" and go.kept and not go.flat
    assert tuning.permute_launch(p, es, off_sector=True).flat
    # rows of 128 bytes or more take it wherever out starts
    p, go, es = _sector_launch((8, 4, 6, 32), (2, 0, 1, 3), torch.float32)
    assert go.flat


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("phase", [0, 4, 8, 16, 24])
def test_kept_rows_off_a_sector_move_exact_bits(phase, device):
    _check_off_a_sector(*KEPT_SECTOR_CASE, phase, device)
