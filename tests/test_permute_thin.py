"""The CUDA kernel for thin 1- and 2-byte transposes (kernels/cuda/permute_thin.cu): the launches it can
take (``plan.launch.thin_launch``), the strategy model that chooses it, its warps' work emulated on the
CPU from the launcher's fields (shifted row loads, the byte permutations parsed from the .cu file, the
staged output range written as aligned words) against ``x.permute``, and exact bits on the GPU."""

import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import assert_bits_equal, poisoned, random_bits

import tileflip
from tileflip import explain, plan, tuning
from tileflip.plan.launch import THIN_ROW_BYTES, thin_fields, thin_fill
from tileflip.plan.permute import contiguous_strides

CU_FILE = Path(tileflip.__file__).parent / "kernels" / "cuda" / "permute_thin.cu"

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
    assert go.lanes & (go.lanes - 1) == 0 and 16 * go.lanes * go.chunks >= p.sizes[-2] * element_size


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


def _source_rules():
    """src_row and src_byte of permute_thin.cu as Python functions of (S, E, w, j), parsed from the file."""
    text = CU_FILE.read_text()
    rules = {}
    for name in ("src_row", "src_byte"):
        body = re.search(name + r"\(const int w, const int j\) \{\s*return (.*?);", text, re.S).group(1)
        rules[name] = eval("lambda S, E, w, j: " + body.replace("/", "//"))  # noqa: S307 (the repository's file)
    return rules["src_row"], rules["src_byte"]


def _byte_perm(x: int, y: int, s: int) -> int:
    pool = (x | y << 32).to_bytes(8, "little")
    return int.from_bytes(bytes(pool[(s >> (4 * i)) & 7] for i in range(4)), "little")


def _emulate(fields, S, E, mem_in, x_at, mem_out, out_at):
    """The kernel's warps over every item, from its Params fields (thin_fields), on byte arrays: each lane's
    loads of its S rows (aligned words, the next word from the next lane or itself), its 16 * S output
    bytes made with the .cu file's byte permutations, staged, and the range written as 16-byte words."""
    n, st_b, batch, chunks, items, lanes, nn, n_sizes, n_in = fields
    src_row, src_byte = _source_rules()
    L, G = lanes, 32 // lanes
    written = np.zeros(mem_out.size, bool)
    for item in range(items):
        c, g0 = item % chunks, item // chunks * G
        a0 = c * (THIN_ROW_BYTES // E)
        valid = E * min(n - a0, THIN_ROW_BYTES // E)
        lo = np.zeros((32, S, 16), np.uint8)
        hi = np.zeros((32, S, 16), np.uint8)
        off = np.zeros((32, S), int)
        for lane in range(32):
            gi, k = divmod(lane, L)
            mine = g0 + gi < batch
            rest, in_n = g0 + gi, 0
            for d in range(nn):
                in_n += (rest % n_sizes[d] if d < nn - 1 else rest) * n_in[d]
                rest //= n_sizes[d]
            own = k == L - 1 or 16 * k + 16 >= valid
            for b in range(S):
                at = x_at + E * (in_n + b * st_b + a0)
                o = off[lane, b] = at % 16
                word = at - o + 16 * k
                if mine and 16 * k - o < valid:
                    lo[lane, b] = mem_in[word : word + 16]
                if mine and own and 16 * k + 16 - o < valid:
                    hi[lane, b] = mem_in[word + 16 : word + 32]
        stage = np.zeros(THIN_ROW_BYTES * S + 32, np.uint8)
        for lane in range(32):
            k = lane % L
            own = k == L - 1 or 16 * k + 16 >= valid
            words = []
            for b in range(S):
                nxt = hi[lane, b] if own else lo[(lane + 1) % 32, b]
                v = np.concatenate([lo[lane, b], nxt])[off[lane, b] : off[lane, b] + 16].tobytes()
                words.append([int.from_bytes(v[4 * i : 4 * i + 4], "little") for i in range(4)])
            for w in range(4 * S):
                x = [words[src_row(S, E, w, j)][src_byte(S, E, w, j) >> 2] for j in range(4)]
                sel = [src_byte(S, E, w, j) & 3 for j in range(4)]
                lo_w = _byte_perm(x[0], x[1], sel[0] | (4 + sel[1]) << 4)
                hi_w = _byte_perm(x[2], x[3], sel[2] | (4 + sel[3]) << 4)
                at = 16 * S * lane + 4 * w
                stage[at : at + 4] = np.frombuffer(_byte_perm(lo_w, hi_w, 0x5410).to_bytes(4, "little"), np.uint8)
        ng, length = min(G, batch - g0), valid * S
        total, slot = ng * length, 16 * S * L
        o0 = out_at + E * (g0 * n * S + a0 * S)
        m = o0 % 16
        h, end = 0, length
        pad = np.concatenate([np.zeros(16, np.uint8), stage])  # the 16 bytes before the stage

        def staged(at):  # staged_word: 16 bytes from stage byte `at` (>= -16)
            return pad[16 + at : 32 + at]

        for kk in range((m + total + 15) // 16):
            first = 16 * kk - m
            while first >= end:
                h, end = h + 1, end + length
            word = staged(slot * h + first - (end - length)).copy()
            if first + 16 > end and end < total:
                cut = end - first
                word[cut:] = staged(slot * (h + 1) + first - end)[cut:]
            for s in range(16):
                if 0 <= first + s < total:
                    dst = o0 - m + 16 * kk + s
                    assert not written[dst], "a byte written twice"
                    written[dst] = True
                    mem_out[dst] = word[s]
    return written


def _check(shape, dims, E, x_offset, out_offset, seed, strided=False):
    """Emulate the kernel on x (contiguous, or every other index of its first dimension) at byte offsets of
    aligned buffers, and compare with x.permute(dims); nothing around the output may be written."""
    dt = {1: torch.uint8, 2: torch.int16}[E]
    g = torch.Generator().manual_seed(seed)
    full = (2 * shape[0], *shape[1:]) if strided else shape
    numel = torch.Size(full).numel()
    mem = torch.randint(1, 255, (numel * E + 64,), dtype=torch.uint8, generator=g)
    x = mem[x_offset : x_offset + numel * E].view(dt).view(full)
    if strided:
        x = x[::2]
    p = plan.plan_permute(tuple(x.shape), tuple(x.stride()), tuple(dims), E)
    go = tuning.thin_candidate(p, E)
    assert go is not None
    ref = x.permute(dims).contiguous().view(torch.uint8).reshape(-1).numpy()
    out = np.full(ref.size + 64, 0xA5, np.uint8)
    written = _emulate(thin_fields(p.sizes, p.in_strides, go), go.rows, E, mem.numpy(), x_offset, out, out_offset)
    assert np.array_equal(out[out_offset : out_offset + ref.size], ref)
    assert written[out_offset : out_offset + ref.size].all() and written.sum() == ref.size
    return go


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
    body = re.search(r"tf_u32 merged\(.*?return __byte_perm\(a, b, (.*?)\);", CU_FILE.read_text(), re.S).group(1)
    expr = body.replace("0x3210u", "0x3210").replace("0x7654u", "0x7654").replace("~low", "(~low & 0xFFFF)")
    a, b = 0x44332211, 0x88776655
    for cut in (1, 2, 3):
        low = (1 << (4 * cut)) - 1
        selector = eval(expr, {"low": low})  # noqa: S307 (the repository's file)
        want = a.to_bytes(4, "little")[:cut] + b.to_bytes(4, "little")[cut:]
        assert _byte_perm(a, b, selector).to_bytes(4, "little") == want


def test_the_byte_rules_turn_each_lanes_block_around():
    src_row, src_byte = _source_rules()
    for E, S in [(1, s) for s in range(2, 17)] + [(2, s) for s in range(2, 9)]:
        for w in range(4 * S):
            for j in range(4):
                byte = 4 * w + j  # the lane's output byte: element a of the row, output b, byte e of it
                a, b, e = byte // E // S, byte // E % S, byte % E
                assert (src_row(S, E, w, j), src_byte(S, E, w, j)) == (b, E * a + e)


# --------------------------------------------------------------------------------------------------
# On the GPU
# --------------------------------------------------------------------------------------------------


def _forbid_others(monkeypatch):
    from tileflip.kernels.cuda import permute as cuda_permute
    from tileflip.kernels.triton import permute as triton_permute
    from tileflip.kernels.triton import transpose as triton_transpose

    for module in (triton_permute, triton_transpose, cuda_permute):

        def refuse(*args, module=module, **kwargs):
            raise AssertionError(f"{module.__name__}.launch was called")

        monkeypatch.setattr(module, "launch", refuse)


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
    numel = torch.Size(shape).numel()
    x = random_bits((numel + 32,), dtype, "cuda", seed=3)[x_offset : x_offset + numel].view(shape)
    buf = poisoned((numel + 64,), dtype, "cuda")
    out = buf[out_offset : out_offset + numel].view(tuple(shape[d] for d in dims))
    tileflip.permute(x, dims, out, backend="cuda-thin")
    assert_bits_equal(out, x.permute(dims).contiguous())
    assert_bits_equal(buf[:out_offset], poisoned((out_offset,), dtype, "cuda"))  # nothing written around it
    rest = buf[out_offset + numel :]
    assert_bits_equal(rest, poisoned(tuple(rest.shape), dtype, "cuda"))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.int8, torch.bfloat16])
def test_strided_and_expanded_inputs(dtype):
    base = random_bits((7, 61, 5, 1203), dtype, "cuda", seed=4)
    strided = base[1:6, ::2, 1:4, 5:1200]  # odd strides, a start off any boundary
    expanded = random_bits((1, 45, 1, 307), dtype, "cuda", seed=5).expand(6, 45, 3, 307)
    for x, dims in ((strided, (1, 0, 3, 2)), (expanded, (1, 0, 3, 2)), (expanded, (0, 1, 3, 2))):
        out = poisoned(tuple(x.shape[d] for d in dims), dtype, "cuda")
        tileflip.permute(x, dims, out, backend="cuda-thin")
        assert_bits_equal(out, x.permute(dims).contiguous())


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
    out = poisoned((20, 3), torch.int8, "cpu")
    with pytest.raises(ValueError, match="backend='cuda-thin' cannot take this call: it needs a CUDA tensor"):
        tileflip.permute(x, (1, 0), out, backend="cuda-thin")
    assert_bits_equal(out, poisoned((20, 3), torch.int8, "cpu"))


@pytest.mark.gpu
@pytest.mark.parametrize(
    "shape, dims, dtype, reason",
    [
        ((3, 500), (1, 0), torch.float32, "1- and 2-byte elements"),
        ((30, 500), (1, 0), torch.int8, "thin side"),
        ((30, 40, 50), (1, 0, 2), torch.int8, "thin side"),
    ],
)  # fmt: skip
def test_backend_cuda_thin_refuses_what_it_cannot_take(shape, dims, dtype, reason):
    x = random_bits(shape, dtype, "cuda", seed=7)
    out = poisoned(tuple(shape[d] for d in dims), dtype, "cuda")
    with pytest.raises(ValueError, match=reason):
        tileflip.permute(x, dims, out, backend="cuda-thin")
    assert_bits_equal(out, poisoned(tuple(shape[d] for d in dims), dtype, "cuda"))
