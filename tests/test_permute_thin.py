"""The CUDA kernel for thin 1- and 2-byte transposes (kernels/cuda/permute_words.cu): the launches it can
take (``plan.launch.thin_launch``) and why it refuses the rest, the strategy model that chooses it, its
warp's work emulated on the CPU from the launcher's fields with the .cu file's device functions
(transliterated by ``device_source``) against ``x.permute``, and exact bits on the GPU."""

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
from tileflip.plan.launch import THIN_ROW_BYTES, thin_fields, thin_fill, thin_refusal
from tileflip.plan.permute import contiguous_strides

CU_FILE = Path(tileflip.__file__).parent / "kernels" / "cuda" / "permute_words.cu"

# (shape, dims) the kernel takes as int8 and as 2-byte elements: one long row (chunks of 512 bytes), rows
# shorter than a warp's piece (row groups of 2 to 32 batch indices), batches of one to four dimensions
# in any input order, odd extents
TAKEN = [
    ((5, 1203), (1, 0)),
    ((3, 7, 250), (1, 2, 0)),
    ((7, 3, 11, 41), (2, 0, 3, 1)),
    ((2, 7, 5, 7, 3), (0, 2, 3, 4, 1)),
    ((6, 2, 13, 5, 17), (3, 0, 2, 4, 1)),
]


def _plan(shape, dims, element_size=1):
    return plan.plan_permute(tuple(shape), contiguous_strides(shape), tuple(dims), element_size)


@pytest.mark.parametrize("element_size", [1, 2])
@pytest.mark.parametrize("shape, dims", TAKEN)
def test_the_kernel_takes_thin_transposes(shape, dims, element_size):
    p = _plan(shape, dims, element_size)
    go = tuning.thin_candidate(p, element_size)
    assert go is not None
    assert p.in_strides[-2] == 1 and go.rows == p.sizes[-1] and go.rows * element_size <= 16
    assert sorted(go.batch_dims) == list(range(len(p.sizes) - 2))
    row = p.sizes[-2] * element_size  # lanes: a power of two, the fewest whose 16-byte pieces hold a row
    assert go.lanes & (go.lanes - 1) == 0 and (go.lanes == 32 or 8 * go.lanes < row <= 16 * go.lanes)


@pytest.mark.parametrize(
    "shape, dims, element_size, why",
    [
        ((9, 1203), (1, 0), 4, "4-byte elements"),
        ((9, 1203), (1, 0), 2, "S of 18 bytes"),
        ((17, 1203), (1, 0), 1, "S of 17 bytes"),
        ((5, 40, 7), (2, 1, 0), 1, "the next dimension is not contiguous in the input"),
        ((40, 24, 4096), (1, 0, 2), 1, "the output's fastest dimension is the input's"),
        ((40, 3, 5), (0, 2, 1), 1, "a batch index's output of 15 bytes"),
    ],
)  # fmt: skip
def test_the_kernel_cannot_take(shape, dims, element_size, why):
    assert tuning.thin_candidate(_plan(shape, dims, element_size), element_size) is None, why


@pytest.mark.parametrize(
    "shape, dims, element_size, reason",
    [
        ((9, 1203), (1, 0), 4, "1- and 2-byte elements"),
        ((30, 500), (1, 0), 1, "must span 2 to 16 bytes, not 30"),
        ((5, 40, 7), (2, 1, 0), 1, "second-fastest dimension must have input stride 1"),
        ((40, 3, 5), (0, 2, 1), 1, "16 bytes of output or more, not 15"),
    ],
)  # fmt: skip
def test_refusals_name_the_condition_that_fails(shape, dims, element_size, reason):
    p = _plan(shape, dims, element_size)
    assert reason in thin_refusal(p.sizes, p.in_strides, element_size)
    assert tuning.thin_candidate(p, element_size) is None


def test_refusal_of_more_outer_dimensions_than_the_decode_holds():
    # (ranks past 8 are refused before planning; merged sizes as the planner's API could be given them)
    sizes, strides = (3,) * 7 + (40, 5), tuple(3**i * 400 for i in range(7, 0, -1)) + (1, 40)
    assert "merge to at most 6, not 7" in thin_refusal(sizes, strides, 1)
    assert thin_refusal(sizes[1:], strides[1:], 1) is None


def test_fill_counts_the_lanes_pieces_that_hold_a_row():
    # rows of 41 bytes: 4 lanes a row (64 bytes), 8 batch indices a warp; 10 batch indices fill 10 of 16
    p = _plan((2, 5, 12, 41), (0, 1, 3, 2))
    go = tuning.thin_candidate(p, 1)
    assert (go.lanes, go.chunks, go.batch) == (4, 1, 10)
    assert thin_fill(p.sizes, go, 1) == pytest.approx(41 / 64 * 10 / 16)
    # one row of 1203 bytes: three pieces of 512
    p = _plan((5, 1203), (1, 0))
    go = tuning.thin_candidate(p, 1)
    assert (go.lanes, go.chunks) == (32, 3)
    assert thin_fill(p.sizes, go, 1) == pytest.approx(1203 / 1536)


def test_the_strategy_model_takes_the_largest_prediction():
    p = _plan((9, 744, 450, 2, 14), (1, 2, 3, 4, 0))  # int8 (9374400, 9) after merging
    fractions = tuning.strategy_fractions(p, 1)
    assert set(fractions) == {"tile", "realign", "thin"}
    strategy, go = tuning.permute_strategy(p, 1)
    assert strategy == max(fractions, key=fractions.get) == "thin" and go == tuning.thin_candidate(p, 1)
    assert fractions["thin"] == pytest.approx(tuning.THIN_FRACTION[1] * thin_fill(p.sizes, go, 1))
    # 4-byte elements and plans the CUDA kernels cannot take run the Triton kernels
    assert tuning.permute_strategy(_plan((9, 1203), (1, 0), 4), 4) == ("tile", None)
    assert tuning.permute_strategy(_plan((40, 24, 4096), (1, 0, 2)), 1) == ("tile", None)


def test_plan_text_names_the_thin_kernel():
    text = explain.permute_text((9, 744, 450, 2, 14), (1, 2, 3, 4, 0), dtype="int8")
    assert "strategy: thin (the model's predicted fractions of copy: tile 0.74" in text
    assert "CUDA thin-transpose kernel" in text and "18310 pieces of 512 B a row" in text


# --------------------------------------------------------------------------------------------------
# The kernel's work, emulated
# --------------------------------------------------------------------------------------------------


def _device():
    names = ("src_row", "src_byte", "shifted", "word_of", "out_word", "batch_offset", "staged_word", "merged",
             "merged_words")
    return device_source.device_functions(CU_FILE.read_text(), names)


def _u4(data) -> object:
    return device_source.U4(*(int.from_bytes(bytes(data[4 * i : 4 * i + 4]), "little") for i in range(4)))


def _emulate(fields, S, E, mem_in, x_span, mem_out, out_at):
    """The kernel's warp over every item, from its ThinParams fields (thin_fields), on byte arrays, with the
    .cu file's device functions (transliterated): each lane's loads of its S rows (aligned words, the
    next word from the next lane or itself, every one within the tensor's bytes ``x_span``), its 16 * S
    output bytes staged, and the range written as 16-byte words from the stage, whose reads stay inside
    it and which keeps the bytes of earlier items as shared memory does."""
    dev = _device()
    n, st_b, batch, chunks, items, lanes, nn, n_sizes, n_in = fields
    p = SimpleNamespace(nn=nn, n_sizes=n_sizes, n_in=n_in)
    x_at = x_span[0]
    L, G = lanes, 32 // lanes
    written = np.zeros(mem_out.size, bool)
    stage = bytearray(np.random.default_rng(0).integers(0, 256, 16 + THIN_ROW_BYTES * S + 32, np.uint8).tobytes())
    sm = device_source.Ptr(stage, 16)

    def load(at):
        assert at + 16 > x_span[0] and at < x_span[1], "a load outside the tensor's bytes"
        return _u4(mem_in[at : at + 16])

    zero = device_source.U4(0, 0, 0, 0)
    for item in range(items):
        c, g0 = item % chunks, item // chunks * G
        a0 = c * (THIN_ROW_BYTES // E)
        valid = E * min(n - a0, THIN_ROW_BYTES // E)
        lo, hi, off = [[zero] * S for _ in range(32)], [[zero] * S for _ in range(32)], [[0] * S for _ in range(32)]
        for lane in range(32):
            gi, k = divmod(lane, L)
            mine = g0 + gi < batch
            in_n = dev["batch_offset"](g0 + gi, p) if mine else 0
            own = k == L - 1 or 16 * k + 16 >= valid
            for b in range(S):
                at = x_at + E * (in_n + b * st_b + a0)
                o = off[lane][b] = at & 15
                word = at - o + 16 * k
                if mine and 16 * k - o < valid:
                    lo[lane][b] = load(word)
                if mine and own and 16 * k + 16 - o < valid:
                    hi[lane][b] = load(word + 16)
        for lane in range(32):
            k = lane % L
            own = k == L - 1 or 16 * k + 16 >= valid
            nxt = lane + 1 if lane < 31 else lane  # __shfl_down_sync: the last lane keeps its own
            v = [dev["shifted"](lo[lane][b], hi[lane][b] if own else lo[nxt][b], off[lane][b]) for b in range(S)]
            for q in range(S):
                for i in range(4):
                    at = 16 + 16 * S * lane + 16 * q + 4 * i
                    stage[at : at + 4] = dev["out_word"](S, E, v, 4 * q + i).to_bytes(4, "little")
        ng, length = min(G, batch - g0), valid * S
        total, slot = ng * length, 16 * S * L
        o0 = out_at + E * (g0 * n * S + a0 * S)
        m = o0 & 15
        h, end = 0, length
        for kk in range((m + total + 15) >> 4):
            first = 16 * kk - m
            while first >= end:
                h, end = h + 1, end + length
            word = dev["staged_word"](sm, slot * h + first - (end - length))
            if first + 16 > end and end < total:
                word = dev["merged_words"](word, dev["staged_word"](sm, slot * (h + 1) + first - end), end - first)
            for i in range(4):
                x = dev["word_of"](word, i)
                for j in range(4):
                    if 0 <= first + 4 * i + j < total:
                        dst = o0 - m + 16 * kk + 4 * i + j
                        assert not written[dst], "a byte written twice"
                        written[dst] = True
                        mem_out[dst] = (x >> (8 * j)) & 0xFF
    return written


def _check(shape, dims, E, x_offset, out_offset, seed, strided=False):
    def emulate(p, go, mem, span, out, out_at):
        return _emulate(thin_fields(p.sizes, p.in_strides, go), go.rows, E, mem, span, out, out_at)

    return check_emulated_permute(shape, dims, E, x_offset, out_offset, seed, tuning.thin_candidate, emulate, strided)


@pytest.mark.parametrize("E", [1, 2])
@pytest.mark.parametrize("shape, dims", TAKEN)
def test_emulated_warps_write_the_permute(shape, dims, E):
    _check(shape, dims, E, x_offset=E * 3, out_offset=E * 5, seed=1)


def test_emulated_warps_at_every_lane_count_and_alignment():
    rnd, lanes = random.Random(2), set()
    for case in range(40):
        E = rnd.choice((1, 2))
        S = rnd.randint(2, 16 // E)
        n = rnd.choice((rnd.randint(1, 40), rnd.randint(1, 300), rnd.randint(250, 700)))
        batch = tuple(rnd.randint(1, 4) for _ in range(rnd.randint(0, 3)))
        if n * E * S < 16 or torch.Size(batch).numel() * S * n > 12000:
            continue
        shape = (*batch, S, n)  # out (..., n, S): the last two transposed
        dims = (*range(len(batch)), len(batch) + 1, len(batch))
        go = _check(shape, dims, E, E * rnd.randrange(8), E * rnd.randrange(8), seed=case)
        lanes.add(go.lanes)
    assert lanes >= {1, 2, 4, 8, 16, 32}


@pytest.mark.parametrize("E", [1, 2])
def test_emulated_warps_on_a_strided_batch(E):
    # every other index of the outermost dimension: a batch stride the output does not have
    _check((6, 5, 3, 37), (0, 1, 3, 2), E, x_offset=E, out_offset=E * 7, seed=3, strided=True)


def test_the_merge_takes_the_first_bytes_of_one_word_and_the_rest_of_the_next():
    merged = _device()["merged"]
    a, b = 0x44332211, 0x88776655
    for cut in range(-4, 9):
        want = a.to_bytes(4, "little")[: max(cut, 0)] + b.to_bytes(4, "little")[max(cut, 0) :]
        assert merged(a, b, cut).to_bytes(4, "little") == want[:4], cut


def test_the_shifts_take_16_bytes_from_any_byte_of_two_words():
    dev = _device()
    data = bytes(range(1, 49))
    for off in range(16):
        got = dev["shifted"](_u4(data[:16]), _u4(data[16:32]), off)
        assert b"".join(dev["word_of"](got, i).to_bytes(4, "little") for i in range(4)) == data[off : off + 16]
    stage = bytearray(data)
    for at in range(-16, 16):
        got = dev["staged_word"](device_source.Ptr(stage, 16), at)
        assert b"".join(dev["word_of"](got, i).to_bytes(4, "little") for i in range(4)) == data[16 + at : 32 + at]


def test_the_byte_rules_turn_each_lanes_block_around():
    dev = _device()
    for E, S in [(1, s) for s in range(2, 17)] + [(2, s) for s in range(2, 9)]:
        for w in range(4 * S):
            for j in range(4):
                byte = 4 * w + j  # the lane's output byte: element a of the row, output b, byte e of it
                a, b, e = byte // E // S, byte // E % S, byte % E
                assert (dev["src_row"](S, E, w, j), dev["src_byte"](S, E, w, j)) == (b, E * a + e)


# --------------------------------------------------------------------------------------------------
# On the GPU
# --------------------------------------------------------------------------------------------------


def _forbid_others(monkeypatch):
    forbid_kernels(monkeypatch, *OTHER_PERMUTE_KERNELS, "cuda.words.launch_split", "cuda.words.launch_shift")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.int8, torch.bfloat16, torch.float8_e4m3fn])
@pytest.mark.parametrize("shape, dims", TAKEN)
def test_exact_bits_through_the_cuda_kernel(shape, dims, dtype, monkeypatch):
    _forbid_others(monkeypatch)
    x = random_bits(shape, dtype, "cuda", seed=1)
    out = poisoned(tuple(shape[d] for d in dims), dtype, "cuda")
    tileflip.permute(x, dims, out, backend="cuda-thin")
    assert_bits_equal(out, x.permute(dims).contiguous())


@pytest.mark.gpu
def test_auto_takes_the_kernel_where_the_model_picks_it(monkeypatch):
    shape, dims = (9, 7440, 45), (1, 2, 0)
    assert tuning.permute_strategy(_plan(shape, dims), 1)[0] == "thin"
    _forbid_others(monkeypatch)
    x = random_bits(shape, torch.int8, "cuda", seed=2)
    assert_bits_equal(tileflip.permute(x, dims), x.permute(dims).contiguous())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.int8, torch.float16])
@pytest.mark.parametrize("x_offset, out_offset", [(1, 0), (7, 13), (16, 3)])
@pytest.mark.parametrize("shape, dims", [TAKEN[0], TAKEN[2], TAKEN[3]])
def test_input_and_output_off_any_boundary(shape, dims, x_offset, out_offset, dtype):
    check_permute_off_boundaries(shape, dims, dtype, x_offset, out_offset, "cuda-thin")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.int8, torch.bfloat16])
def test_strided_and_expanded_inputs(dtype):
    base = random_bits((7, 61, 5, 1203), dtype, "cuda", seed=4)
    strided = base[1:6, ::2, 1:4, 5:1200]  # odd strides, a start off any boundary
    expanded = random_bits((1, 45, 1, 307), dtype, "cuda", seed=5).expand(6, 45, 3, 307)
    for x, dims in ((strided, (1, 0, 3, 2)), (expanded, (1, 0, 3, 2)), (expanded, (0, 1, 3, 2))):
        check_permute_exact(x, dims, "cuda-thin")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.int8, torch.int16])
def test_offsets_past_2_to_the_31(dtype):
    # 2.2e9 bytes: byte offsets past 2**31 on both sides; rows of more than 2**31 / 9 bytes
    s = 16 // dtype.itemsize - 1
    shape, dims = (s, 2 * 2**30 // s // dtype.itemsize + 4099), (1, 0)
    gen = torch.Generator("cuda").manual_seed(6)
    x = torch.randint(-128, 128, shape, dtype=dtype, device="cuda", generator=gen)
    out = torch.empty(tuple(shape[d] for d in dims), dtype=dtype, device="cuda").fill_(0x5A)
    tileflip.permute(x, dims, out, backend="cuda-thin")
    assert_bits_equal(out, x.permute(dims).contiguous())
    del x, out
    # batch offsets past 2**31 too: many short rows
    shape, dims = (2**21 + 3, 7, 150 // dtype.itemsize), (0, 2, 1)
    x = torch.randint(-128, 128, shape, dtype=dtype, device="cuda", generator=gen)
    out = torch.empty(tuple(shape[d] for d in dims), dtype=dtype, device="cuda").fill_(0x5A)
    tileflip.permute(x, dims, out, backend="cuda-thin")
    assert_bits_equal(out, x.permute(dims).contiguous())


def test_backend_cuda_thin_refuses_a_cpu_tensor_and_writes_nothing():
    x = torch.arange(60, dtype=torch.int8).view(3, 20)
    reason = "backend='cuda-thin' cannot take this call: it needs a CUDA tensor"
    check_permute_refused(x, (1, 0), "cuda-thin", reason)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "shape, dims, dtype, reason",
    [
        ((3, 500), (1, 0), torch.float32, "1- and 2-byte elements"),
        ((30, 500), (1, 0), torch.int8, "must span 2 to 16 bytes, not 30"),
        ((30, 40, 50), (1, 0, 2), torch.int8, "it transposes"),
        ((5, 40, 7), (2, 1, 0), torch.int8, "second-fastest dimension must have input stride 1"),
        ((40, 3, 5), (0, 2, 1), torch.int8, "16 bytes of output or more, not 15"),
    ],
)  # fmt: skip
def test_backend_cuda_thin_refuses_what_it_cannot_take(shape, dims, dtype, reason):
    check_permute_refused(random_bits(shape, dtype, "cuda", seed=7), dims, "cuda-thin", reason)
