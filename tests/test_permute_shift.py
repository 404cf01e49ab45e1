"""The realigned row copy (``permute_shift_rows`` in kernels/cuda/permute_words.cu, backend cuda-shift):
the rows plans it takes (``plan.launch.shift_launch``) and why it refuses the rest, its lanes' work
emulated on the CPU from the launcher's fields with the .cu file's device functions (transliterated by
``device_source``) against ``x.permute``, and exact bits on the GPU."""

import random
from pathlib import Path
from types import SimpleNamespace

import device_source
import numpy as np
import pytest
import torch
from helpers import (
    OTHER_PERMUTE_KERNELS,
    assert_bits_equal,
    check_permute_exact,
    check_permute_off_boundaries,
    check_permute_refused,
    forbid_kernels,
    poisoned,
    random_bits,
)

import tileflip
from tileflip import explain, plan, tuning
from tileflip.plan.launch import (
    SHIFT_ITEM_BYTES,
    SHIFT_OUTER_DIMS,
    SHIFT_WARPS,
    shift_fields,
    shift_launch,
    shift_refusal,
)
from tileflip.plan.permute import contiguous_strides

CU_FILE = Path(tileflip.__file__).parent / "kernels" / "cuda" / "permute_words.cu"

# (shape, dims) of rows plans the kernel takes, as int8: one row longer than an item, rows of 16 bytes
# (every word can straddle two), rows of odd lengths around a word and around an item, one to four outer
# dimensions in any input order
TAKEN = [
    ((3, 2, 5000), (1, 0, 2)),
    ((6, 7, 16), (1, 0, 2)),
    ((5, 9, 17), (1, 0, 2)),
    ((3, 4, 5, 33), (2, 0, 1, 3)),
    ((7, 3, 515), (1, 0, 2)),
    ((2, 3, 2, 5, 101), (3, 1, 0, 2, 4)),
]


def _plan(shape, dims, element_size=1):
    return plan.plan_permute(tuple(shape), contiguous_strides(shape), tuple(dims), element_size)


@pytest.mark.parametrize("shape, dims", TAKEN)
def test_the_kernel_takes_rows_plans(shape, dims):
    p = _plan(shape, dims)
    go = tuning.shift_candidate(p, 1)
    assert p.kind == "rows" and go is not None
    assert go.row == p.sizes[-1] and go.rows * go.row == torch.Size(shape).numel()
    assert sorted(go.outer_dims) == list(range(len(p.sizes) - 1))
    assert go.items * SHIFT_ITEM_BYTES >= go.row * go.rows + 15  # words for any output alignment


@pytest.mark.parametrize(
    "shape, dims, element_size, reason",
    [
        ((40, 24, 15), (1, 0, 2), 1, "rows must span 16 bytes to 2**30 bytes, not 15"),
        ((40, 24, 7), (1, 0, 2), 2, "not 14"),
        ((40, 24, 64), (0, 2, 1), 1, "the output's fastest dimension must be the input's contiguous one"),
        ((2, 3, 2, 3, 2, 3, 2, 40), (6, 5, 4, 3, 2, 1, 0, 7), 1, "merge to at most 6, not 7"),
    ],
)  # fmt: skip
def test_refusals_name_the_condition_that_fails(shape, dims, element_size, reason):
    p = _plan(shape, dims, element_size)
    assert reason in shift_refusal(p.sizes, p.in_strides, element_size)
    assert tuning.shift_candidate(p, element_size) is None


def test_refusal_of_rows_past_31_bits_and_of_rows_of_2_to_the_30_bytes():
    sizes, strides = (2**16, 2**15, 16), (16, 2**20, 1)
    assert "row indices must fit 31 bits" in shift_refusal(sizes, strides, 1)
    assert shift_refusal((2**16, 2**15 - 1, 16), strides, 1) is None
    assert "not 1073741824" in shift_refusal((3, 2**29), (2**29, 1), 2)
    assert "sizes of 2 or more" in shift_refusal((3, 1, 16), (16, 5, 1), 1)
    assert shift_refusal((3, 2**30 - 1), (2**30 - 1, 1), 1) is None


@pytest.mark.parametrize(
    "shape, dims, element_size, alignment, strategy",
    [
        ((4, 73, 137, 94, 79), (1, 0, 2, 3, 4), 1, 16, "shift"),  # rows of 1 MB on 2-byte boundaries
        ((2854, 2, 18551), (1, 0, 2), 1, 16, "shift"),  # odd rows
        ((5, 9, 17), (1, 0, 2), 1, 16, "shift"),  # short odd rows: both weak, the row copy a little less so
        ((1220, 4, 40992), (1, 0, 2), 1, 16, "tile"),  # rows on 16-byte boundaries
        ((1220, 4, 40992), (1, 0, 2), 1, 2, "shift"),  # the same rows, pointers on 2-byte boundaries
        ((544, 219, 425), (1, 0, 2), 2, 16, "tile"),  # 850-byte rows on 2-byte boundaries
        ((6, 7, 16), (1, 0, 2), 4, 16, "tile"),  # a short aligned run, tiled as moved
        ((8, 9, 10), (1, 0, 2), 1, 16, "tile"),  # 10-byte rows: the row copy cannot take them
    ],
)
def test_the_model_weighs_the_row_copy_against_the_rows_tile(shape, dims, element_size, alignment, strategy):
    p = _plan(shape, dims, element_size)
    width = tuning.element_width(p, element_size, alignment)
    q = plan.regrouped(p, element_size, width) if width != element_size else p
    fractions = tuning.strategy_fractions(q, width, alignment)
    assert tuning.permute_strategy(q, width, alignment)[0] == strategy
    assert max(fractions, key=lambda name: (fractions[name], name == "tile")) == strategy


def test_plan_text_names_the_row_copy_and_why():
    text = explain.permute_text((4, 73, 137, 94, 79), (1, 0, 2, 3, 4), dtype="int8")
    assert "moved as 2-byte elements" in text and "strategy: shift" in text and "tile 0.65, shift 0.90" in text
    assert "292 rows of 1017362 B" in text and "otherwise (backend triton" in text
    aligned = explain.permute_text((1220, 4, 40992), (1, 0, 2), dtype="int8")
    assert "moved as 4-byte elements" in aligned and "strategy: tile" in aligned and "realigned row copy" not in aligned
    assert "shift" not in explain.permute_text((40, 24, 64), (0, 2, 1), dtype="int8")


# --------------------------------------------------------------------------------------------------
# The kernel's work, emulated
# --------------------------------------------------------------------------------------------------


def _device(load):
    names = ("shifted", "word_of", "merged", "merged_words", "quotient", "row_offset", "word_first", "row_col",
             "advanced", "word_source", "first_word", "second_word", "source_word")  # fmt: skip
    dev = device_source.device_functions(CU_FILE.read_text(), names)
    dev["load_word"] = load
    return dev


def test_the_launch_constants_are_the_kernels():
    dev = _device(None)
    assert dev["SHIFT_WARPS"] == SHIFT_WARPS and 16 * 32 * dev["SHIFT_LANE_WORDS"] == SHIFT_ITEM_BYTES
    assert dev["SHIFT_OUTER_DIMS"] == SHIFT_OUTER_DIMS


def _emulate(fields, blocks, mem_in, x_span, x_at, mem_out, out_at):
    """Every lane of every warp of ``blocks`` blocks over its items, as ``shift_rows`` runs them, from the
    kernel's ShiftParams fields (shift_fields), on byte arrays, with the .cu file's device functions and
    constants (transliterated): each word's sources and aligned loads (each within the tensor's bytes
    ``x_span``), the shifts and merges, and the stores, whole words or the range's end bytes, each byte
    once."""
    row, total, items, step_rows, step_cols, nn, row_magic, row_shift, magic, shift, sizes, strides = fields
    p = SimpleNamespace(row=row, total=total, step_rows=step_rows, step_cols=step_cols, nn=nn, row_magic=row_magic,
                        row_shift=row_shift, magic=list(magic), shift=list(shift), sizes=list(sizes),
                        strides=list(strides))  # fmt: skip

    def load(at):
        assert at % 16 == 0, "an unaligned word load"
        assert at + 16 > x_span[0] and at < x_span[1], "a load outside the tensor's bytes"
        words = (int.from_bytes(bytes(mem_in[at + 4 * i : at + 4 * i + 4]), "little") for i in range(4))
        return device_source.U4(*words)

    dev = _device(load)
    warps, lane_words = dev["SHIFT_WARPS"], dev["SHIFT_LANE_WORDS"]
    written = np.zeros(mem_out.size, bool)
    m = out_at & 15
    for warp_id in range(blocks * warps):
        for lane in range(32):  # (lanes share nothing: no shuffles, no shared memory)
            item = warp_id
            rc = dev["row_col"](dev["word_first"](item, 0, lane, m), p)
            while item < items:
                srcs = [dev["word_source"](x_at, rc, dev["word_first"](item, j, lane, m), j, p)
                        for j in range(lane_words)]  # fmt: skip
                loaded = [(dev["first_word"](s.a, s.lo, s.cut), dev["second_word"](s.a, s.lo, s.cut)) for s in srcs]
                for j, s in enumerate(srcs):
                    if s.lo >= s.hi:
                        continue
                    v = dev["source_word"](s, *loaded[j])
                    data = b"".join(dev["word_of"](v, i).to_bytes(4, "little") for i in range(4))
                    g = out_at + dev["word_first"](item, j, lane, m)
                    assert g % 16 == 0
                    for i in range(s.lo, s.hi):
                        assert not written[g + i], "a byte written twice"
                        written[g + i] = True
                        mem_out[g + i] = data[i]
                item, rc = item + blocks * warps, dev["advanced"](rc, p)
    return written


def _check(shape, dims, E, x_offset, out_offset, seed, *, view=None, blocks=3):
    """Emulate the kernel on x (contiguous, or the view ``view`` makes of it) at byte offsets of aligned
    buffers, on a grid of ``blocks`` blocks, and compare with x.permute(dims); nothing around the output
    may be written."""
    dt = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[E]
    g = torch.Generator().manual_seed(seed)
    numel = torch.Size(shape).numel()
    mem = torch.randint(1, 255, (numel * E + 64,), dtype=torch.uint8, generator=g)
    base = mem[x_offset : x_offset + numel * E].view(dt).view(shape)
    x = view(base) if view else base
    p = plan.plan_permute(tuple(x.shape), tuple(x.stride()), tuple(dims), E)
    go = shift_launch(p.sizes, p.in_strides, E, blocks)
    assert go is not None and go.blocks <= blocks
    ref = x.permute(dims).contiguous().view(torch.uint8).reshape(-1).numpy()
    out = np.full(ref.size + 64, 0xA5, np.uint8)
    x_at = x.storage_offset() * E  # (mem is the storage: x_offset and the view's own)
    span = (x_at, x_at + E * (1 + sum((n - 1) * st for n, st in zip(x.shape, x.stride()))))  # x's own bytes
    written = _emulate(shift_fields(p.sizes, p.in_strides, go, E), go.blocks, mem.numpy(), span, x_at, out, out_offset)
    assert np.array_equal(out[out_offset : out_offset + ref.size], ref)
    assert written[out_offset : out_offset + ref.size].all() and written.sum() == ref.size
    return go


@pytest.mark.parametrize("shape, dims", TAKEN)
def test_emulated_lanes_write_the_permute(shape, dims):
    _check(shape, dims, 1, x_offset=3, out_offset=5, seed=1)


def test_emulated_lanes_at_every_alignment_and_element_size():
    rnd = random.Random(2)
    for case in range(36):
        E = rnd.choice((1, 2, 4, 8))
        n = max(rnd.choice((rnd.randint(16, 40), rnd.randint(16, 300), rnd.randint(500, 2200))) // E, 16 // E)
        outer = tuple(rnd.randint(2, 4) for _ in range(rnd.randint(2, 3)))
        if torch.Size(outer).numel() * n * E > 12000:
            continue
        perm = list(range(len(outer)))
        while perm == sorted(perm):  # (the identity is a copy, not a rows plan)
            rnd.shuffle(perm)
        shape, dims = (*outer, n), (*perm, len(outer))
        _check(shape, dims, E, E * rnd.randrange(16 // E + 1), E * rnd.randrange(16 // E + 1), seed=case,
               blocks=rnd.randint(1, 4))  # fmt: skip


@pytest.mark.parametrize("E", [1, 4])
def test_emulated_lanes_on_strided_and_expanded_inputs(E):
    # every other index of the outermost dimension, a row cut at both ends: strides the output lacks
    _check((6, 5, 120 // E), (1, 0, 2), E, x_offset=E, out_offset=7, seed=3, view=lambda t: t[::2, :, 1:-1])
    # a dimension of stride 0
    _check((1, 5, 96 // E), (1, 0, 2), E, x_offset=2 * E, out_offset=1, seed=4,
           view=lambda t: t.expand(3, 5, 96 // E))  # fmt: skip


def test_the_grid_steps_over_rows_many_times_longer_and_shorter_than_its_stride():
    # one block of 4 warps: a stride of 8 KiB over rows of 16 bytes (512 rows a step) and of 9000 (none)
    go = _check((64, 20, 16), (1, 0, 2), 1, x_offset=9, out_offset=11, seed=5, blocks=1)
    assert go.blocks == 1 and go.items > 2 * SHIFT_WARPS
    _check((2, 3, 9000), (1, 0, 2), 1, x_offset=1, out_offset=0, seed=6, blocks=1)


def test_the_loads_take_only_the_words_that_hold_wanted_bytes():
    loads = []
    data = bytes(range(1, 49))

    def load(at):
        loads.append(at)
        return device_source.U4(*(int.from_bytes(data[at + 4 * i : at + 4 * i + 4], "little") for i in range(4)))

    dev = _device(load)
    src = dev["Src"]
    for at in range(16, 32):
        for lo in range(16):
            for hi in range(lo + 1, 17):
                loads.clear()
                pair = dev["first_word"](at, lo, hi), dev["second_word"](at, lo, hi)
                got = dev["source_word"](src(at, at, lo, hi, hi), *pair)
                got = b"".join(dev["word_of"](got, i).to_bytes(4, "little") for i in range(4))
                assert got[lo:hi] == data[at + lo : at + hi]
                assert sorted(loads) == sorted({(at + i) // 16 * 16 for i in range(lo, hi)})
        assert dev["first_word"](at, 5, 5) == dev["second_word"](at, 5, 5) == device_source.U4(0, 0, 0, 0)


# --------------------------------------------------------------------------------------------------
# On the GPU
# --------------------------------------------------------------------------------------------------


def _forbid_others(monkeypatch):
    forbid_kernels(monkeypatch, *OTHER_PERMUTE_KERNELS, "cuda.words.launch_thin", "cuda.words.launch_split")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.int8, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("shape, dims", TAKEN)
def test_exact_bits_through_the_cuda_kernel(shape, dims, dtype, monkeypatch):
    _forbid_others(monkeypatch)
    x = random_bits(shape, dtype, "cuda", seed=1)
    out = poisoned(tuple(shape[d] for d in dims), dtype, "cuda")
    tileflip.permute(x, dims, out, backend="cuda-shift")
    assert_bits_equal(out, x.permute(dims).contiguous())


@pytest.mark.gpu
@pytest.mark.parametrize("shape, dims, x_offset", [((5, 9, 17), (1, 0, 2), 0), ((3, 2, 5000), (1, 0, 2), 1),
                                                   ((2, 3, 2, 5, 101), (3, 1, 0, 2, 4), 0)])  # fmt: skip
def test_auto_runs_it_where_the_model_picks_it(shape, dims, x_offset, monkeypatch):
    _forbid_others(monkeypatch)
    numel = torch.Size(shape).numel()
    x = random_bits((numel + 1,), torch.int8, "cuda", seed=2)[x_offset : x_offset + numel].view(shape)
    check_permute_exact(x, dims, "auto")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.int8, torch.float16, torch.float32])
@pytest.mark.parametrize("x_offset, out_offset", [(1, 0), (7, 13), (16, 3), (3, 3)])
@pytest.mark.parametrize("shape, dims", [TAKEN[1], TAKEN[2], TAKEN[4]])
def test_input_and_output_off_any_boundary(shape, dims, x_offset, out_offset, dtype):
    check_permute_off_boundaries(shape, dims, dtype, x_offset, out_offset, "cuda-shift")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.int8, torch.bfloat16, torch.float32])
def test_strided_and_expanded_inputs(dtype):
    base = random_bits((7, 61, 5, 1203), dtype, "cuda", seed=4)
    strided = base[1:6, ::2, 1:4, 5:1200]  # odd strides, a start off any boundary
    expanded = random_bits((1, 45, 1, 307), dtype, "cuda", seed=5).expand(6, 45, 3, 307)
    for x, dims in ((strided, (1, 0, 2, 3)), (expanded, (2, 1, 0, 3)), (expanded, (0, 2, 1, 3))):
        check_permute_exact(x, dims, "cuda-shift")


@pytest.mark.gpu
def test_offsets_past_2_to_the_31():
    # 2.2e9 bytes: input and output offsets past 2**31, rows of odd length, a grid that steps many times
    gen = torch.Generator("cuda").manual_seed(6)
    shape, dims = (7, 3, 2 * 2**30 // 21 + 4099), (1, 0, 2)
    x = torch.randint(-128, 128, shape, dtype=torch.int8, device="cuda", generator=gen)
    out = torch.empty(tuple(shape[d] for d in dims), dtype=torch.int8, device="cuda").fill_(0x5A)
    tileflip.permute(x, dims, out, backend="cuda-shift")
    assert_bits_equal(out, x.permute(dims).contiguous())
    del x, out
    # many short rows: row indices past 2**24
    shape, dims = (2**21 + 3, 7, 150), (1, 0, 2)
    x = torch.randint(-128, 128, shape, dtype=torch.int8, device="cuda", generator=gen)
    out = torch.empty(tuple(shape[d] for d in dims), dtype=torch.int8, device="cuda").fill_(0x5A)
    tileflip.permute(x, dims, out, backend="cuda-shift")
    assert_bits_equal(out, x.permute(dims).contiguous())


def test_backend_cuda_shift_refuses_a_cpu_tensor_and_writes_nothing():
    x = torch.arange(120, dtype=torch.int8).view(3, 2, 20)
    reason = "backend='cuda-shift' cannot take this call: it needs a CUDA tensor"
    check_permute_refused(x, (1, 0, 2), "cuda-shift", reason)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "shape, dims, dtype, reason",
    [
        ((30, 40, 15), (1, 0, 2), torch.int8, "rows must span 16 bytes to 2\\*\\*30 bytes, not 15"),
        ((30, 40, 50), (0, 2, 1), torch.int8, "it copies rows"),
        ((30, 40, 50), (2, 1, 0), torch.float32, "it copies rows"),
    ],
)  # fmt: skip
def test_backend_cuda_shift_refuses_what_it_cannot_take(shape, dims, dtype, reason):
    check_permute_refused(random_bits(shape, dtype, "cuda", seed=7), dims, "cuda-shift", reason)
