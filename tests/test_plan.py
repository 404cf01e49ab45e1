"""The planner: coverage, layout and offsets' worked examples and validation rules, and the kernels' planning."""

import random
import subprocess
import sys

import numpy as np
import pytest

from tileflip import plan, tuning
from tileflip.plan import launch as geometry


class TestSeedFunctions:
    def test_coverage_worked_example(self):
        # 1000 elements in blocks of 256 -> 4 programs, 24 masked slots.
        cov = plan.program_coverage(1000, 256)
        assert cov == {"programs": 4, "covered_slots": 1024, "last_program_valid": 232, "masked_slots": 24}

    @pytest.mark.parametrize("block", [64, 128, 256])
    def test_coverage_covers_exactly(self, block):
        cov = plan.program_coverage(1000, block)
        assert cov["covered_slots"] - cov["masked_slots"] == 1000
        assert 0 < cov["last_program_valid"] <= block

    def test_tile_layout(self):
        assert plan.tile_layout(128, 128, 32, 32)["padding_elements"] == 0
        lay = plan.tile_layout(100, 130, 32, 32)
        assert lay["program_grid"] == (4, 5)
        assert lay["covered_elements"] == 4 * 5 * 1024
        assert lay["padding_elements"] == 4 * 5 * 1024 - 13000
        assert lay["useful_ratio"] == pytest.approx(13000 / 20480)

    def test_program_offsets_tail(self):
        # program 3 of 100 elements in blocks of 32 keeps offsets 96..99.
        tail = plan.program_offsets(3, 32, 100)
        assert tail["valid_offsets"] == [96, 97, 98, 99]
        assert tail["valid_count"] == 4 and tail["safe"]
        assert tail["mask"] == [True] * 4 + [False] * 28

    @pytest.mark.parametrize("size", [1, 32, 64, 100])
    def test_program_offsets_cover_once(self, size):
        cov = plan.program_coverage(size, 32)
        seen = [o for pid in range(cov["programs"]) for o in plan.program_offsets(pid, 32, size)["valid_offsets"]]
        assert seen == list(range(size))

    @pytest.mark.parametrize("bad", [0, -1, 1.0, True, "8", None])
    def test_strict_sizes(self, bad):
        with pytest.raises(ValueError, match="num_elements"):
            plan.program_coverage(bad, 32)
        with pytest.raises(ValueError, match="block_size"):
            plan.program_coverage(32, bad)
        with pytest.raises(ValueError, match="block_cols"):
            plan.tile_layout(8, 8, 4, bad)

    @pytest.mark.parametrize("pid", [-1, 4, 1.0, True, None])
    def test_program_id_in_minimal_grid(self, pid):
        with pytest.raises(ValueError, match="program_id"):
            plan.program_offsets(pid, 32, 100)


class TestTileMasks:
    def test_seed_000_example(self):
        # 31x65 in 32x32 tiles: 3 programs; (0, 2) keeps a 31x1 input region and writes output row 64, cols 0..30.
        grid = plan.transpose_grid(31, 65, 32, 32)
        assert (grid.grid_m, grid.grid_n, grid.programs) == (1, 3, 3)
        tm = plan.tile_masks(31, 65, 32, 32, 0, 2)
        assert tm.in_mask.shape == (32, 32) and tm.out_mask.shape == (32, 32)
        assert tm.in_mask[:31, :1].all() and tm.in_mask.sum() == 31
        assert tm.out_mask[:1, :31].all() and tm.out_mask.sum() == 31
        assert (tm.in_rows, tm.in_cols) == ((0, 31), (64, 65))
        assert (tm.out_rows, tm.out_cols) == ((64, 65), (0, 31))

    def test_out_mask_is_transposed_in_mask(self):
        tm = plan.tile_masks(50, 70, 16, 64, 3, 1)
        assert tm.in_mask.shape == (16, 64) and tm.out_mask.shape == (64, 16)
        np.testing.assert_array_equal(tm.out_mask, tm.in_mask.T)

    def test_masks_cover_every_element_once(self):
        M, N, BM, BN = 37, 70, 16, 32
        grid = plan.transpose_grid(M, N, BM, BN)
        hits = np.zeros((N, M), dtype=int)
        for pid in range(grid.programs):
            pm, pn = grid.tile_of(pid)
            tm = plan.tile_masks(M, N, BM, BN, pm, pn)
            (r0, r1), (c0, c1) = tm.out_rows, tm.out_cols
            assert tm.out_mask.sum() == (r1 - r0) * (c1 - c0)
            hits[r0:r1, c0:c1] += 1
        assert (hits == 1).all()

    @pytest.mark.parametrize("args", [(31, 65, 32, 32, 1, 0), (31, 65, 32, 32, 0, 3), (31, 65, 32, 32, -1, 0)])
    def test_pid_outside_grid(self, args):
        with pytest.raises(ValueError, match="pid_"):
            plan.tile_masks(*args)

    def test_owner_of(self):
        assert plan.owner_of(31, 65, 32, 32, 30, 64) == (0, 2)
        with pytest.raises(ValueError):
            plan.owner_of(31, 65, 32, 32, 31, 0)


class TestKernelPlanning:
    def test_empty_sizes(self):
        assert plan.transpose_grid(0, 65, 32, 32).programs == 0
        assert plan.transpose_grid(7, 0, 32, 32).launch == (0, 1, 1)

    def test_grid_is_one_dimensional_for_any_shape(self):
        # gridDim.y/z stay 1 even where a 2-D grid would pass 65535 tiles in one dimension.
        grid = plan.transpose_grid(2, 100_000_000, 16, 16)
        assert grid.launch[1:] == (1, 1) and grid.launch[0] == 6_250_000

    def test_grid_too_large_is_refused(self):
        with pytest.raises(ValueError, match="gridDim.x"):
            plan.transpose_grid(2**40, 2**40, 16, 16)

    def test_symbolic_sizes(self):
        torch = pytest.importorskip("torch")
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        env = ShapeEnv()
        m = env.create_unbacked_symint()
        grid = plan.transpose_grid(m, 64, 32, 32)
        assert isinstance(grid.programs, torch.SymInt)

    def test_specialization_class_matches_triton(self):
        from triton._C.libtriton import native_specialize_impl
        from triton.backends.compiler import BaseBackend

        for value in [0, 1, 2, 15, 16, 17, 4096, 8191, 2**31 - 1, 2**31, 2**31 + 16, -16]:
            kind, hint = native_specialize_impl(BaseBackend, value, False, True, True)
            expected = ("constexpr", "1") if kind == "constexpr" else (kind, hint)
            assert plan.specialization_class(value) == expected, value


def test_planner_imports_no_triton_or_torch():
    code = "import sys, tileflip.plan; print(any(m in sys.modules for m in ('triton', 'torch')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize("group_m", [-1, 0, 1, 2, 3, 8])
@pytest.mark.parametrize("M,N", [(31, 65), (200, 70), (1000, 33), (50, 300)])
def test_grouped_order_visits_every_tile_once(M, N, group_m):
    grid = plan.transpose_grid(M, N, 16, 32, group_m)
    tiles = [grid.tile_of(pid) for pid in range(grid.programs)]
    assert sorted(tiles) == [(m, n) for m in range(grid.grid_m) for n in range(grid.grid_n)]
    if group_m > 1 and grid.grid_m >= group_m:
        # consecutive programs go down a band of group_m tile rows before moving right
        assert [t[0] for t in tiles[:group_m]] == list(range(group_m))
    if group_m in (0, -1):
        # column order: a whole column of tiles, then the next
        assert tiles[: grid.grid_m + 1] == [(m, 0) for m in range(grid.grid_m)] + [(0, 1)]
    if group_m == -1:
        # read from a 2-D grid: program (x, y) is tile (x, y), x fastest, as the linear order above
        assert grid.launch == (grid.grid_m, grid.grid_n, 1)
        assert all(grid.tile_of(x + y * grid.grid_m) == (x, y) for y in range(grid.grid_n) for x in range(grid.grid_m))


def test_two_d_grid_falls_back_to_one_d_past_grid_y():
    grid = plan.transpose_grid(64, 16 * 65536, 32, 16, -1)
    assert grid.grid_n == 65536 and grid.launch == (grid.programs, 1, 1)
    assert plan.transpose_grid(64, 16 * 65535, 32, 16, -1).launch == (2, 65535, 1)


def test_group_m_must_be_at_least_minus_one():
    with pytest.raises(ValueError, match="group_m must be an int >= -1"):
        plan.transpose_grid(64, 64, 16, 16, -2)


# ---------------------------------------------------------------------------------------------------
# N-D permute planning (pure Python): kinds, tile axes, and the vector widths the tile kernel asserts
# ---------------------------------------------------------------------------------------------------


def _contiguous(shape):
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= s
    return tuple(reversed(strides))


def _plan(shape, perm, element_size, strides=None):
    return plan.plan_permute(tuple(shape), strides or _contiguous(shape), perm, element_size)


def _decode(index, dims, sizes, strides):
    off = np.zeros_like(index)
    for k, d in enumerate(dims):
        if k < len(dims) - 1:
            off += (index % sizes[d]) * strides[d]
            index = index // sizes[d]
        else:
            off += index * strides[d]
    return off


def _check_vectors(p, element_size):
    """On full tiles, every group of VEC elements along the vector axis is contiguous and starts at a multiple
    of VEC, and every offset along the other axis and of the batch is a multiple of VEC: what the kernel's
    tl.multiple_of / tl.max_contiguous hints claim."""
    go = tuning.permute_launch(p, element_size)
    if go.flat:  # the flat rows kernel: every row holds whole vectors, every row's input offset a multiple
        vec = go.vec[0]
        assert go.kept and go.vec == (vec, vec) and vec * element_size == 16
        assert p.in_strides[-1] == 1 and p.sizes[-1] % vec == 0 and all(st % vec == 0 for st in p.in_strides[:-1])
        return go
    out_strides = p.out_strides
    (block_b, block_a), (vec_load, vec_store) = go.blocks, go.vec
    size_a = int(np.prod([p.sizes[d] for d in go.a_dims]))
    size_b = int(np.prod([p.sizes[d] for d in go.b_dims])) if go.b_dims else 1
    ra = np.arange((size_a // block_a) * block_a, dtype=np.int64)
    rb = np.arange((size_b // block_b) * block_b, dtype=np.int64)
    for vec, strides, along_a in ((vec_load, p.in_strides, True), (vec_store, out_strides, go.kept)):
        assert vec & (vec - 1) == 0 and vec * element_size <= 16
        if vec == 1:
            continue
        fast, slow = (ra, rb) if along_a else (rb, ra)
        fast_dims, slow_dims = (go.a_dims, go.b_dims) if along_a else (go.b_dims, go.a_dims)
        offs = _decode(fast, fast_dims, p.sizes, strides).reshape(-1, vec)
        assert (offs[:, 0] % vec == 0).all()
        assert (offs - offs[:, :1] == np.arange(vec)).all()
        assert (_decode(slow, slow_dims, p.sizes, strides) % vec == 0).all()
        assert all(strides[d] % vec == 0 for d in go.batch_dims)
    return go


def test_merge_dims_keeps_adjacent_runs():
    assert plan.merge_dims((8, 32, 4096, 128), (16777216, 128, 4096, 1)) == ((8, 32, 4096, 128),
                                                                             (16777216, 128, 4096, 1))
    assert plan.merge_dims((64, 56, 56, 256), (802816, 56, 1, 3136)) == ((64, 3136, 256), (802816, 1, 3136))
    assert plan.merge_dims((3, 1, 5), (5, 99, 1)) == ((15,), (1,))


@pytest.mark.parametrize("shape,perm,dtype,kind", [
    ((8, 4096, 32, 128), (0, 2, 1, 3), "bfloat16", "rows"),
    ((8, 4096, 32, 128), (0, 3, 2, 1), "bfloat16", "tiles"),
    ((8, 4096, 32, 128), (0, 2, 3, 1), "bfloat16", "tiles"),
    ((64, 256, 56, 56), (0, 2, 3, 1), "float16", "tiles"),
    ((64, 56, 56, 256), (0, 3, 1, 2), "float16", "tiles"),
    ((60, 2816, 416), (1, 2, 0), "int8", "tiles"),  # 2-D after merging, but 60-byte rows: the tile kernel
    ((176, 272, 1056), (2, 0, 1), "bfloat16", "transpose2d"),
])  # fmt: skip
def test_benchmark_plans_use_full_vectors(shape, perm, dtype, kind):
    size = plan.element_size(dtype)
    p = _plan(shape, perm, size)
    assert p.kind == kind
    if kind != "transpose2d":
        go = _check_vectors(p, size)
        assert go.vec[0] * size == 16


def test_nchw_blocks_cover_all_channels():
    # 256 channels = 2 x the 128-element cap: one program covers them, so its output (NHWC) is one 32 KiB run
    go = tuning.permute_launch(_plan((64, 256, 56, 56), (0, 2, 3, 1), 2), 2)
    assert go.blocks == (256, 64) and go.vec == (8, 8)
    back = tuning.permute_launch(_plan((64, 56, 56, 256), (0, 3, 1, 2), 2), 2)
    assert back.blocks == (64, 256) and back.vec == (8, 8)


def _random_plans(count, seed=0):
    import random

    rng = random.Random(seed)
    for _ in range(count):
        rank = rng.randint(2, 8)
        shape = [rng.choice([2, 3, 4, 5, 8, 12, 16, 24, 33, 56, 64]) for _ in range(rank)]
        while int(np.prod(shape)) > 1 << 20:
            shape[rng.randrange(rank)] = max(2, shape[rng.randrange(rank)] // 2)
        perm = list(range(rank))
        rng.shuffle(perm)
        yield tuple(shape), tuple(perm), rng.choice([1, 2, 4, 8])


def test_tile_axes_partition_the_dims_and_vectors_hold():
    kinds = set()
    for shape, perm, size in _random_plans(300):
        p = _plan(shape, perm, size)
        kinds.add(p.kind)
        if p.kind not in ("rows", "tiles", "copy"):
            continue
        go = _check_vectors(p, size)
        if go.flat:
            assert p.kind == "rows" and go.a_dims == (len(p.sizes) - 1,)
            continue
        dims = go.a_dims + go.b_dims + go.batch_dims
        assert sorted(dims) == list(range(len(p.sizes)))
        assert 1 <= len(go.a_dims) <= geometry.MAX_AXIS_DIMS and len(go.b_dims) <= geometry.MAX_AXIS_DIMS
        assert len(go.batch_dims) <= geometry.MAX_BATCH_DIMS
        last = len(p.sizes) - 1
        if p.kind == "rows" and not go.kept:  # a short kept run (tuning.short_kept_run): A from the next dimension
            assert tuning.short_kept_run(p.sizes, p.in_strides, size)
            run = p.sizes[last] * size
            assert run < tuning.SHORT_RUN_BYTES[size] or (size >= 4 and run < tuning.NARROW_RUN_BYTES and run % 16)
            others = [i for i in range(last) if p.in_strides[i] > 0]
            assert go.a_dims[0] == min(others, key=lambda i: (p.in_strides[i], -i))
        else:
            assert go.a_dims[0] == p.a
        assert go.kept or go.b_dims[0] == last
        assert go.programs <= plan.MAX_GRID_X
    assert {"rows", "tiles", "transpose2d"} <= kinds


def test_random_suite_plans():
    from tileflip.bench import cases as bench

    for case in bench.random_permute_cases(seed=0, count=40):
        size = plan.element_size(case.dtype)
        p = _plan(case.shape, case.perm, size)
        assert p.kind in ("rows", "tiles", "transpose2d")  # never the per-element gather
        if p.kind != "transpose2d":
            _check_vectors(p, size)


def test_plan_text_shows_the_launch_the_table_picks():
    """``tileflip plan`` explains the launch the kernel makes: the table's class for a contiguous input
    (row stride N: 8192 x 8191 is unaligned) and the 2-D grid of the group_m = -1 order."""
    from tileflip import explain, tuning

    text = explain.plan_text((8192, 8191), dtype="float64")
    config = tuning.table_config(8, "unaligned")
    assert f"tiles {config.block_m}x{config.block_n} (the tuning table's choice for 8-byte unaligned cases" in text
    tiny = tuning.table_config(4, "tiny")
    text = explain.plan_text((1024, 512), dtype="float32")
    grid = plan.transpose_grid(1024, 512, tiny.block_m, tiny.block_n, tiny.group_m)
    assert f"launched {'2-D' if grid.launch[1] > 1 else '1-D'} as {grid.launch}" in text
    if tiny.group_m == -1:
        assert "program (x, y) of the 2-D grid handles tile (x, y)" in text


def test_plan_text_names_auto_where_it_leaves_the_triton_tile():
    """Where the table sends ``auto`` to another kernel, ``tileflip plan`` says so before the tile it
    prints; where ``auto`` runs the tile, it prints the tile alone."""
    from tileflip import explain, tuning

    for shape, dtype in [((8192, 8191), "int8"), ((4, 1024), "float32"), ((16384, 16384), "float32"),
                         ((1024, 512), "float32"), ((31, 65), "float64")]:  # fmt: skip
        size = plan.element_size(dtype)
        chosen = tuning.auto_for(*shape, size, shape[1])
        line = f"backend auto on a CUDA tensor: {chosen} (the tuning table's choice for {size}-byte "
        assert (line in explain.plan_text(shape, dtype=dtype)) == (chosen != "triton"), (shape, dtype, chosen)
    assert tuning.auto_for(8192, 8191, 1, 8191) == "cuda-vec"  # the table's int8 unaligned choice, shown above
    assert "backend auto" not in explain.plan_text((0, 5), dtype="float32")  # empty: nothing runs


def test_cli_output_into_a_closed_pipe_stops_quietly():
    """``tileflip plan ... | head -1``: no error message when the reader goes away, SIGPIPE's status."""
    proc = subprocess.Popen([sys.executable, "-m", "tileflip.cli", "plan", "--shape", "4096x4096", "--programs",
                             "100000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    proc.stdout.readline()
    proc.stdout.close()
    assert proc.wait(timeout=120) == 141
    assert proc.stderr.read() == b""


def test_loop_rounds():
    """A capped launch: the grid is the cap, rounds the power of two that covers every tile."""
    from tileflip.plan import loop_rounds

    assert loop_rounds(10, 3) == (3, 4)  # 3 x 4 = 12 >= 10; 3 x 2 = 6 would not cover
    assert loop_rounds(12, 3) == (3, 4) and loop_rounds(13, 3) == (3, 8)
    assert loop_rounds(10, 10) == loop_rounds(10, 0) == loop_rounds(10, 64) == (10, 0)  # no loop: one program a tile
    assert loop_rounds(0, 3) == (1, 0)
    for tiles in range(1, 200):
        grid, rounds = loop_rounds(tiles, 7)
        assert grid * max(rounds, 1) >= tiles and (rounds == 0 or grid * rounds // 2 < tiles)


@pytest.mark.parametrize("M", [2, 3, 5, 7, 31, 1000, 65535, 2**20 + 7, 2**31 - 1])
def test_magic_divisor_divides_exactly(M):
    """The multiply-high division of the 2-D gather and the permute decodes (``magic_divisor``) equals
    n // M over the whole int32 range: around every multiple of M near 0, 2**k and 2**31, and on random n."""
    magic, shift = plan.magic_divisor(M)
    m = magic & 0xFFFFFFFF
    rng = random.Random(M)
    ns = {0, 1, 2**31 - 1} | {rng.randrange(2**31) for _ in range(2000)}
    for base in [M * k for k in range(1, 40)] + [2**k for k in range(2, 31)] + [(2**31 - 1) // M * M]:
        ns |= {n for n in (base - 1, base, base + 1) if 0 <= n < 2**31}
    assert all(((n * m) >> 32) >> shift == n // M for n in ns)
    with pytest.raises(ValueError, match="d must be in"):
        plan.magic_divisor(1)
