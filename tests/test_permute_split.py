"""The CUDA kernel for split 1- and 2-byte transposes (kernels/cuda/permute_words.cu, permute_split_*): the
launches it can take (``plan.launch.split_launch``) and why it refuses the rest, the strategy model that
chooses it, its warp's work emulated on the CPU from the launcher's fields with the .cu file's device
functions (transliterated by ``device_source``) against ``x.permute``, and exact bits on the GPU."""

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
    check_emulated_permute,
    check_permute_exact,
    check_permute_off_boundaries,
    check_permute_refused,
    forbid_kernels,
    poisoned,
    random_bits,
)

import tileflip
from tileflip import explain, plan, tuning
from tileflip.plan.launch import THIN_ROW_BYTES, split_fields, split_fill, split_refusal
from tileflip.plan.permute import contiguous_strides

CU_FILE = Path(tileflip.__file__).parent / "kernels" / "cuda" / "permute_words.cu"

# (shape, dims) the kernel takes as int8 and as 2-byte elements: an image's HWC to CHW (no batch), pairs
# to planes, rows shorter than a warp's piece and longer than several, the interleaved dimension away from
# the output's fastest one, batches of several dimensions in any input order, odd extents
TAKEN = [
    ((7, 183, 3), (2, 0, 1)),
    ((5, 1203, 2), (0, 2, 1)),
    ((3, 11, 41, 4), (1, 3, 0, 2)),
    ((2, 5, 3, 37, 3), (1, 4, 0, 2, 3)),
    ((6, 13, 600, 2), (1, 0, 3, 2)),
]
# S of 5 to 8: 1-byte elements only (2-byte ones are refused past 8 bytes)
TAKEN_BYTES = [((3, 600, 5), (0, 2, 1)), ((2, 700, 6), (0, 2, 1)), ((517, 7), (1, 0)), ((4, 700, 8), (0, 2, 1))]


def _plan(shape, dims, element_size=1):
    return plan.plan_permute(tuple(shape), contiguous_strides(shape), tuple(dims), element_size)


@pytest.mark.parametrize("element_size", [1, 2])
@pytest.mark.parametrize("shape, dims", TAKEN)
def test_the_kernel_takes_split_transposes(shape, dims, element_size):
    p = _plan(shape, dims, element_size)
    go = tuning.split_candidate(p, element_size)
    assert go is not None
    assert p.in_strides[go.s_dim] == 1 and p.in_strides[-1] == go.rows == p.sizes[go.s_dim]
    assert sorted(go.batch_dims + (go.s_dim,)) == list(range(len(p.sizes) - 1))
    assert go.items == go.chunks * go.batch and go.chunks == -(-p.sizes[-1] * element_size // THIN_ROW_BYTES)


@pytest.mark.parametrize(
    "shape, dims, element_size, reason",
    [
        ((1203, 2), (1, 0), 4, "1- and 2-byte elements"),
        ((1203, 5), (1, 0), 2, "must span 2 to 8 bytes, not 10"),
        ((1203, 9), (1, 0), 1, "must span 2 to 8 bytes, not 9"),
        ((40, 24, 4096), (1, 0, 2), 1, "it transposes"),
        ((5, 7, 3), (2, 1, 0), 1, "must read the input at stride S"),
    ],
)  # fmt: skip
def test_refusals_name_the_condition_that_fails(shape, dims, element_size, reason):
    p = _plan(shape, dims, element_size)
    assert reason in split_refusal(p.sizes, p.in_strides, element_size)
    assert tuning.split_candidate(p, element_size) is None


def test_refusal_of_more_batch_dimensions_than_the_decode_holds():
    # merged sizes as the planner's API could be given them: 7 batch dimensions, S = 2, N = 40
    sizes = (3,) * 7 + (2, 40)
    strides = tuple(80 * 3 ** (6 - i) for i in range(7)) + (1, 2)
    assert "merge to at most 6, not 7" in split_refusal(sizes, strides, 1)
    assert split_refusal(sizes[1:], strides[1:], 1) is None


def test_fill_counts_the_lanes_pieces_that_hold_a_row():
    p = _plan((5, 1203, 2), (0, 2, 1))
    go = tuning.split_candidate(p, 1)
    assert (go.rows, go.chunks, go.batch) == (2, 3, 5)
    assert split_fill(p.sizes, go, 1) == pytest.approx(1203 / 1536)


def test_the_strategy_model_weighs_the_split_kernel():
    p = _plan((1080, 1920, 3), (2, 0, 1))  # uint8 HWC -> CHW: (3, 2073600) after merging
    fractions = tuning.strategy_fractions(p, 1)
    assert set(fractions) == {"tile", "realign", "split"}
    split = tuning.split_candidate(p, 1)
    assert fractions["split"] == pytest.approx(tuning.SPLIT_FRACTION[1] * split_fill(p.sizes, split, 1))
    strategy, go = tuning.permute_strategy(p, 1)
    assert strategy == max(fractions, key=fractions.get) == "split" and go == split
    # the tile kernel's figure on this class: without a batch (above), and with one
    assert fractions["tile"] == tuning.TILE_SPLIT_FRACTION[1][False]
    batched = _plan((64, 224, 224, 3), (0, 3, 1, 2))
    assert tuning.split_candidate(batched, 1).batch == 64
    assert tuning.strategy_fractions(batched, 1)["tile"] == tuning.TILE_SPLIT_FRACTION[1][True]


def test_plan_text_names_the_split_kernel():
    p = _plan((1080, 1920, 3), (2, 0, 1))
    text = explain.permute_text((1080, 1920, 3), (2, 0, 1), dtype="uint8")
    fractions = tuning.strategy_fractions(p, 1)
    assert f"strategy: split (the model's predicted fractions of copy: tile {fractions['tile']:.2f}" in text
    assert "CUDA split-transpose kernel" in text and "4050 pieces of 512 B a row" in text


# --------------------------------------------------------------------------------------------------
# The kernel's work, emulated
# --------------------------------------------------------------------------------------------------


def _device():
    names = ("split_src", "split_word", "split_offsets", "split_holds", "split_aligned", "split_ragged", "split_byte",
             "shifted", "word_of")  # fmt: skip
    return device_source.device_functions(CU_FILE.read_text(), names)


def _u4(data):
    return device_source.U4(*(int.from_bytes(bytes(data[4 * i : 4 * i + 4]), "little") for i in range(4)))


def _bytes(word) -> bytes:
    return b"".join((getattr(word, c) & 0xFFFFFFFF).to_bytes(4, "little") for c in "xyzw")


def _emulate(fields, S, E, mem_in, x_span, mem_out, out_at):
    """The kernel's warp over every item, from its SplitParams fields (split_fields), on byte arrays, with
    the .cu file's device functions, statement by statement: each lane's S aligned loads (the word after
    them from the next lane by __shfl_down_sync, or loaded by the last lane), every one within the tensor's
    bytes ``x_span``; its 16 bytes of each row split out; the aligned words from the previous lane's
    registers (__shfl_up_sync) and its own; the ragged end words an element a lane, from the lane that
    holds it (__shfl_sync). Returns which output bytes were written, asserting none twice."""
    dev = _device()
    n, st_s, chunks, items, nn, _, n_sizes, n_in, n_out = fields
    p = SimpleNamespace(nn=nn, n_sizes=n_sizes, n_in=n_in, n_out=n_out)
    written = np.zeros(mem_out.size, bool)
    zero = device_source.U4(0, 0, 0, 0)

    def load(at):
        assert at + 16 > x_span[0] and at < x_span[1], "a load outside the tensor's bytes"
        return _u4(mem_in[at : at + 16])

    def store(at, data):
        for i, byte in enumerate(data):
            assert not written[at + i], "a byte written twice"
            written[at + i] = True
            mem_out[at + i] = byte

    for item in range(items):
        c = item % chunks
        g = dev["split_offsets"](item // chunks, p)
        a0 = c * (THIN_ROW_BYTES // E)
        valid = E * min(n - a0, THIN_ROW_BYTES // E)
        at = x_span[0] + E * (g.src + a0 * S)
        off = at & 15
        holds = dev["split_holds"]
        lo = [[load(at - off + 16 * (S * lane + j)) if holds(S * lane + j, off, valid * S) else zero
               for j in range(S)] for lane in range(32)]  # fmt: skip
        tail = off != 0 and holds(S * 31 + S, off, valid * S)
        after = load(at - off + 16 * (S * 31 + S)) if tail else zero
        rows = []  # rows[lane][b]: the lane's 16 bytes of row b, as the kernel's uint4 r
        for lane in range(32):
            first = lo[lane + 1][0] if lane < 31 else lo[31][0]  # __shfl_down_sync: the last lane keeps its own
            v = []
            for j in range(S):
                nxt = lo[lane][j + 1] if j + 1 < S else (after if lane == 31 else first)
                v.append(dev["shifted"](lo[lane][j], nxt, off) if off else lo[lane][j])
            rows.append([device_source.U4(*(dev["split_word"](S, E, v, b, w) for w in range(4))) for b in range(S)])
        for b in range(S):
            o = out_at + E * (g.dst + b * st_s + a0)
            m = o & 15
            for lane in range(32):
                r = rows[lane][b]
                prev = rows[lane - 1][b] if lane > 0 else r  # __shfl_up_sync: lane 0 keeps its own
                lead = 16 * lane - m
                if lead >= 0 and lead + 16 <= valid:
                    store(o - m + 16 * lane, _bytes(dev["split_aligned"](prev, r, m)))
                pos = dev["split_ragged"](lane, m, valid, E)
                held = rows[0 if pos < 0 else pos >> 4][b]  # __shfl_sync from the lane that holds the byte
                if pos >= 0:
                    x = dev["split_byte"](held, pos)
                    store(o - m + m + pos, (x & (2 ** (8 * E) - 1)).to_bytes(E, "little"))
    return written


def _check(shape, dims, E, x_offset, out_offset, seed, strided=False):
    def emulate(p, go, mem, span, out, out_at):
        return _emulate(split_fields(p.sizes, p.in_strides, go), go.rows, E, mem, span, out, out_at)

    return check_emulated_permute(shape, dims, E, x_offset, out_offset, seed, tuning.split_candidate, emulate, strided)


@pytest.mark.parametrize("E", [1, 2])
@pytest.mark.parametrize("shape, dims", TAKEN)
def test_emulated_warps_write_the_permute(shape, dims, E):
    _check(shape, dims, E, x_offset=E * 3, out_offset=E * 5, seed=1)


@pytest.mark.parametrize("shape, dims", TAKEN_BYTES)
def test_emulated_warps_for_every_s_of_1_byte_elements(shape, dims):
    for x_offset, out_offset in ((0, 0), (3, 11), (9, 6)):
        _check(shape, dims, 1, x_offset, out_offset, seed=4)


def test_emulated_warps_at_every_alignment_and_row_length():
    rnd, phases = random.Random(2), set()
    for case in range(30):
        E = rnd.choice((1, 2))
        S = rnd.randint(2, 8 // E)
        n = rnd.choice((rnd.randint(1, 20), rnd.randint(1, 300), rnd.randint(500, 1100)))
        batch = tuple(rnd.randint(1, 4) for _ in range(rnd.randint(0, 2)))
        if torch.Size(batch).numel() * S * n > 6000:
            continue
        shape = (*batch, n, S)  # out (..., S, n): the last two transposed
        dims = (*range(len(batch)), len(batch) + 1, len(batch))
        x_offset, out_offset = E * rnd.randrange(8), E * rnd.randrange(8)
        _check(shape, dims, E, x_offset, out_offset, seed=case)
        phases.add((x_offset % 16, out_offset % 16))
    assert len(phases) >= 10


@pytest.mark.parametrize("E", [1, 2])
def test_emulated_warps_on_a_strided_batch(E):
    # every other index of the outermost dimension: a batch stride the output does not have
    _check((6, 5, 37, 3), (0, 1, 3, 2), E, x_offset=E, out_offset=E * 7, seed=3, strided=True)


def test_the_byte_rules_split_each_lanes_block():
    """A lane's 16 * S input bytes hold 16 / E elements of each of the S rows, element a of row b at a * S + b:
    split_word's four words of row b are that row's elements in order."""
    dev = _device()
    for E, S in [(1, s) for s in range(2, 9)] + [(2, s) for s in range(2, 5)]:
        data = bytes(range(1, 16 * S + 1))  # every input byte labelled by its place
        v = [_u4(data[16 * j : 16 * j + 16]) for j in range(S)]
        for b in range(S):
            got = b"".join(dev["split_word"](S, E, v, b, w).to_bytes(4, "little") for w in range(4))
            want = b"".join(data[(a * S + b) * E : (a * S + b + 1) * E] for a in range(16 // E))
            assert got == want, (E, S, b)


# --------------------------------------------------------------------------------------------------
# On the GPU
# --------------------------------------------------------------------------------------------------


def _forbid_others(monkeypatch):
    forbid_kernels(monkeypatch, *OTHER_PERMUTE_KERNELS, "cuda.words.launch_thin", "cuda.words.launch_shift")


# (shape, dims, dtype): every TAKEN case in 1- and 2-byte dtypes, the S of 5 to 8 in 1-byte ones
EXACT = [(*case, dt) for case in TAKEN for dt in (torch.int8, torch.bfloat16, torch.float8_e4m3fn)] + [
    (*case, dt) for case in TAKEN_BYTES for dt in (torch.int8, torch.float8_e4m3fn)
]


@pytest.mark.gpu
@pytest.mark.parametrize("shape, dims, dtype", EXACT)
def test_exact_bits_through_the_cuda_kernel(shape, dims, dtype, monkeypatch):
    _forbid_others(monkeypatch)
    x = random_bits(shape, dtype, "cuda", seed=1)
    out = poisoned(tuple(shape[d] for d in dims), dtype, "cuda")
    tileflip.permute(x, dims, out, backend="cuda-split")
    assert_bits_equal(out, x.permute(dims).contiguous())


@pytest.mark.gpu
def test_auto_takes_the_kernel_where_the_model_picks_it(monkeypatch):
    shape, dims = (1080, 1920, 3), (2, 0, 1)
    assert tuning.permute_strategy(_plan(shape, dims), 1)[0] == "split"
    _forbid_others(monkeypatch)
    x = random_bits(shape, torch.uint8, "cuda", seed=2)
    assert_bits_equal(tileflip.permute(x, dims), x.permute(dims).contiguous())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.int8, torch.float16])
@pytest.mark.parametrize("x_offset, out_offset", [(1, 0), (7, 13), (16, 3)])
@pytest.mark.parametrize("shape, dims", [TAKEN[0], TAKEN[2], TAKEN[3]])
def test_input_and_output_off_any_boundary(shape, dims, x_offset, out_offset, dtype):
    check_permute_off_boundaries(shape, dims, dtype, x_offset, out_offset, "cuda-split")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.int8, torch.bfloat16])
def test_strided_and_expanded_inputs(dtype):
    base = random_bits((7, 61, 1203, 3), dtype, "cuda", seed=4)
    strided = base[1:6, ::2, 5:1200]  # odd strides, a start off any boundary
    expanded = random_bits((1, 45, 307, 2), dtype, "cuda", seed=5).expand(6, 45, 307, 2)
    for x, dims in ((strided, (1, 0, 3, 2)), (expanded, (1, 0, 3, 2)), (expanded, (0, 3, 1, 2))):
        check_permute_exact(x, dims, "cuda-split")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.int8, torch.int16])
def test_offsets_past_2_to_the_31(dtype):
    # 2.2e9 bytes: byte offsets past 2**31 on both sides, in one long row of each of S = 3
    shape, dims = (2 * 2**30 // 3 // dtype.itemsize + 4099, 3), (1, 0)
    gen = torch.Generator("cuda").manual_seed(6)
    x = torch.randint(-128, 128, shape, dtype=dtype, device="cuda", generator=gen)
    out = torch.empty(tuple(shape[d] for d in dims), dtype=dtype, device="cuda").fill_(0x5A)
    tileflip.permute(x, dims, out, backend="cuda-split")
    assert_bits_equal(out, x.permute(dims).contiguous())
    del x, out
    # batch offsets past 2**31 too: 2.5e9 bytes of short rows
    shape, dims = (2**21 + 3, 300 // dtype.itemsize, 4), (0, 2, 1)
    x = torch.randint(-128, 128, shape, dtype=dtype, device="cuda", generator=gen)
    out = torch.empty(tuple(shape[d] for d in dims), dtype=dtype, device="cuda").fill_(0x5A)
    tileflip.permute(x, dims, out, backend="cuda-split")
    assert_bits_equal(out, x.permute(dims).contiguous())


def test_backend_cuda_split_refuses_a_cpu_tensor_and_writes_nothing():
    x = torch.arange(60, dtype=torch.int8).view(20, 3)
    reason = "backend='cuda-split' cannot take this call: it needs a CUDA tensor"
    check_permute_refused(x, (1, 0), "cuda-split", reason)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "shape, dims, dtype, reason",
    [
        ((500, 3), (1, 0), torch.float32, "1- and 2-byte elements"),
        ((500, 9), (1, 0), torch.int8, "must span 2 to 8 bytes, not 9"),
        ((30, 40, 50), (1, 0, 2), torch.int8, "it transposes"),
        ((5, 7, 3), (2, 1, 0), torch.int8, "must read the input at stride S"),
    ],
)  # fmt: skip
def test_backend_cuda_split_refuses_what_it_cannot_take(shape, dims, dtype, reason):
    check_permute_refused(random_bits(shape, dtype, "cuda", seed=7), dims, "cuda-split", reason)
