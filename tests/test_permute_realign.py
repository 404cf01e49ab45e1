"""The CUDA kernel for 1- and 2-byte permutes whose rows start at any element
(kernels/cuda/permute_realign.cu): the launches it can take (``tuning.realign_candidate``), the strategy
model that chooses it (``tuning.permute_strategy``), its addressing emulated on the CPU (output pieces, the
shifted input loads, the byte permutations), and exact bits on the GPU."""

import random
import re

import pytest
import torch
from helpers import (
    assert_bits_equal,
    check_permute_exact,
    check_permute_refused,
    forbid_kernels,
    poisoned,
    random_bits,
)

import tileflip
from tileflip import plan, tuning
from tileflip.kernels.cuda import permute as cuda_permute
from tileflip.plan.launch import realign_axes, realign_tile
from tileflip.plan.permute import contiguous_strides

# (shape, dims) of permutes the kernel can take (as int8 and as 2-byte elements): a batch of none, one and
# two dimensions; input rows of 966 elements (pieces off 16-byte boundaries); a 2-D transpose with odd sides
TAKEN = [
    ((3, 13, 11, 7, 42, 24), (5, 4, 2, 3, 1, 0)),
    ((3, 9, 250, 2048), (0, 3, 1, 2)),
    ((3, 2, 9, 250, 1024), (1, 0, 4, 2, 3)),
    ((3, 13, 11, 7, 42, 23), (5, 4, 2, 3, 1, 0)),
    ((300, 1201), (1, 0)),
]


def _plan(shape, dims, element_size=1):
    return plan.plan_permute(tuple(shape), contiguous_strides(shape), tuple(dims), element_size)


@pytest.mark.parametrize("element_size", [1, 2])
@pytest.mark.parametrize("shape, dims", TAKEN)
def test_the_kernel_can_take_rows_at_any_byte(shape, dims, element_size):
    p = _plan(shape, dims, element_size)
    go = tuning.realign_candidate(p, element_size)
    assert go is not None and cuda_permute.params_of(p, go, element_size) is not None
    assert go.blocks == (256, 64 // element_size)
    sizes, strides = p.sizes, p.in_strides
    run = 1
    for d in go.a_dims:  # A: one input run from the stride-1 dimension
        assert strides[d] == run
        run *= sizes[d]
    assert go.b_dims == tuple(range(len(sizes) - 1, len(sizes) - 1 - len(go.b_dims), -1))  # B: one output run
    assert sorted(go.a_dims + go.b_dims + go.batch_dims) == list(range(len(sizes)))


def test_axis_a_grows_to_a_multiple_of_16_bytes():
    # input rows of 408 bytes are not a multiple of 16; with the next input dimension they are 816
    sizes, strides = (2, 408, 24300), (408, 1, 816)
    assert realign_axes(sizes, strides, 256, 1024) == ((1, 0), (2,), ())
    assert realign_axes(sizes, strides, 256, 1024, align=8) == ((1,), (2,), (0,))


@pytest.mark.parametrize(
    "shape, dims, element_size, why",
    [
        ((3, 13, 11, 7, 42, 24), (5, 4, 2, 3, 1, 0), 4, "4-byte elements"),
        ((3, 4096, 24), (0, 1, 2), 1, "nothing to transpose"),
        ((40, 24, 4096), (1, 0, 2), 1, "the output's fastest dimension is the input's"),
    ],
)  # fmt: skip
def test_the_kernel_cannot_take(shape, dims, element_size, why):
    assert tuning.realign_candidate(_plan(shape, dims, element_size), element_size) is None, why


@pytest.mark.parametrize(
    "shape, dims, chosen, why",
    [
        ((29, 3212, 1200), (2, 0, 1), True, "Triton moves 1-byte vectors; the kernel's tiles full"),
        ((3477, 25308, 6), (1, 2, 0), True, "odd rows on both sides, the kernel's tiles nearly full"),
        ((8, 28, 23, 36, 14, 50), (3, 4, 5, 1, 2, 0), False, "Triton moves 16-byte vectors on both sides"),
        ((5, 30, 9, 4001), (0, 3, 2, 1), False, "B of 9 bytes: the kernel's tile mostly empty"),
        ((9, 28, 22, 32, 27, 20), (0, 2, 4, 5, 3, 1), False, "Triton's stores are 16-byte vectors, its loads 4"),
    ],
)  # fmt: skip
def test_the_strategy_model_picks_the_larger_prediction(shape, dims, chosen, why):
    p = _plan(shape, dims)
    fractions = tuning.strategy_fractions(p, 1)
    assert set(fractions) == {"tile", "realign"}
    assert (fractions["realign"] > fractions["tile"]) == chosen, why
    assert (tuning.permute_strategy(p, 1)[0] == "realign") == chosen, why


@pytest.mark.parametrize(
    "shape, dims, element_size, vectors",
    [
        ((8, 28, 23, 36, 14, 50), (3, 4, 5, 1, 2, 0), 1, "both"),
        ((9, 28, 22, 32, 27, 20), (0, 2, 4, 5, 3, 1), 1, "stores"),
        ((29, 3212, 1200), (2, 0, 1), 1, "narrower"),
        ((8, 10, 72), (2, 0, 1), 2, "both"),  # merges to a 2-D transpose
        ((29, 3212, 1201), (2, 0, 1), 2, "narrower"),
    ],
)  # fmt: skip
def test_the_tile_figure_follows_the_launchs_vectors(shape, dims, element_size, vectors):
    p = _plan(shape, dims, element_size)
    assert tuning.tile_vectors(p, element_size) == vectors
    if p.kind == "tiles":
        load, store = (v * element_size for v in tuning.permute_launch(p, element_size).vec)
        assert {"both": load == store == 16, "stores": load < store == 16, "narrower": store < 16}[vectors]
    else:
        assert p.kind == "transpose2d"
    assert tuning.strategy_fractions(p, element_size)["tile"] == tuning.TILE_FRACTION[element_size][vectors]


def test_the_model_reads_fill_and_alignment():
    p = _plan((29, 3212, 1200), (2, 0, 1))
    go = tuning.realign_candidate(p, 1)
    assert tuning.realign_aligned(p, go, 1)
    tiles_b, tiles_a = go.grid
    ta, step = realign_tile(1)
    expected = 1200 / (tiles_a * ta) * (29 * 3212) / (tiles_b * step)
    assert tuning.realign_fill(p, go) == pytest.approx(expected)
    assert tuning.strategy_fractions(p, 1)["realign"] == pytest.approx(tuning.REALIGN_FRACTION[1][True] * expected)
    odd = _plan((29, 3212, 1201), (2, 0, 1))
    assert not tuning.realign_aligned(odd, tuning.realign_candidate(odd, 1), 1)
    # 2-byte elements: pieces on 16-byte boundaries where the strides are multiples of 8 elements (1208 is
    # one, though not of 16; 1204 is not)
    p2 = _plan((29, 3212, 1208), (2, 0, 1), 2)
    assert tuning.realign_aligned(p2, tuning.realign_candidate(p2, 2), 2)
    assert not tuning.realign_aligned(p2, tuning.realign_candidate(p2, 2), 1)
    p2 = _plan((29, 3212, 1204), (2, 0, 1), 2)
    assert not tuning.realign_aligned(p2, tuning.realign_candidate(p2, 2), 2)


def _decode(i, sizes, strides):
    """The kernel's decode of linear indices ``i`` (a tensor) over dimensions innermost first."""
    off = torch.zeros_like(i)
    for d, (s, st) in enumerate(zip(sizes, strides)):
        off += (i % s if d < len(sizes) - 1 else i) * st
        i = i // s
    return off


def _emulated(p, out_address: int, E: int = 1) -> torch.Tensor:
    """The input offset of every output element as the kernel's blocks write it, worked out from the
    launcher's parameters as its blocks do (block order, tiles, row tables, pieces from the row start's
    misalignment in bytes); -1 where no block writes, and an element written twice fails."""
    params, blocks, _ = cuda_permute.params_of(p, tuning.realign_candidate(p, E), E)
    f = {name: getattr(params, name) for name, _ in cuda_permute._Params._fields_}
    ta, step = realign_tile(E)
    a_dec = (f["a_sizes"][: f["na"]], f["a_out"][: f["na"]])
    b_dec = (f["b_sizes"][: f["nb"]], f["b_in"][: f["nb"]])
    n_dec = f["n_sizes"][: f["nn"]]
    numel = f["asz"] * f["bsz"] * (blocks // (f["tiles_a"] * f["tiles_b"]))
    writes = torch.full((numel,), -1, dtype=torch.int64)
    q = torch.arange(step)  # byte of the block's piece of a row: 16 * j + s
    for block in range(blocks):
        rest = block // f["tiles_a"]
        a0, b0, n = (block % f["tiles_a"]) * ta, (rest % f["tiles_b"]) * step, torch.tensor([rest // f["tiles_b"]])
        in_n = _decode(n, n_dec, f["n_in"][: f["nn"]]) if n_dec else 0
        out_n = _decode(n, n_dec, f["n_out"][: f["nn"]]) if n_dec else 0
        a = torch.arange(a0, min(a0 + ta, f["asz"]))
        start = out_n + _decode(a, *a_dec)
        b = b0 - ((out_address + E * start) % 32 // E)[:, None] + q[None, :]
        ok = (b >= 0) & (b < f["bsz"])
        o = (start[:, None] + b)[ok]
        assert bool((writes[o] == -1).all()) and o.unique().numel() == o.numel(), "a byte written twice"
        writes[o] = (in_n + _decode(b.clamp(min=0), *b_dec) + a[:, None])[ok]
    return writes


@pytest.mark.parametrize("E, out_address", [(1, 0), (1, 13), (1, 31), (2, 0), (2, 14), (2, 30)])
@pytest.mark.parametrize("shape, dims", TAKEN[:1] + [((2, 2, 3, 41, 576), (0, 4, 1, 2, 3)), ((30, 121), (1, 0))])
def test_emulated_blocks_write_every_output_element_from_its_input_element(shape, dims, E, out_address):
    # the second case's rows are 246 elements: short, to emulate quickly, and their last pieces lie past
    # size_b / STEP tiles (the grid's extra tile for the rows' shift)
    p = _plan(shape, dims, E)
    assert tuning.realign_candidate(p, E) is not None
    writes = _emulated(p, out_address, E)
    numel = torch.Size(shape).numel()
    expected = torch.arange(numel).view(shape).permute(dims).reshape(-1)  # output offset -> input offset
    assert torch.equal(writes, expected)


def _shifted(lo: bytes, hi: bytes, off: int) -> bytes:
    """The kernel's ``shifted`` on 32-bit words, step by step: drop 8 bytes, then 4, then funnel-shift."""
    w = [int.from_bytes((lo + hi)[4 * i : 4 * i + 4], "little") for i in range(8)]
    if off & 8:
        w = w[2:] + w[6:]
    if off & 4:
        w = w[1:] + w[5:]
    sh = (off & 3) * 8
    return b"".join(((((w[i + 1] << 32) | w[i]) >> sh) & 0xFFFFFFFF).to_bytes(4, "little") for i in range(4))


@pytest.mark.parametrize("valid", [1, 5, 16])
def test_emulated_loads_read_each_piece_from_its_aligned_words(valid):
    # a piece of ``need`` valid bytes at any address: the aligned word holding its first byte, the next one
    # only where the valid bytes reach into it (else zeros), shifted into place
    rng = random.Random(valid)
    memory = bytes(rng.randrange(256) for _ in range(96))
    for at in range(16, 48):
        off, need = at % 16, min(valid, 16)
        base = at - off
        lo = memory[base : base + 16]
        hi = memory[base + 16 : base + 32] if off + need > 16 else bytes(16)
        assert _shifted(lo, hi, off)[:need] == memory[at : at + need], (at, need)


def _byte_perm(x: int, y: int, s: int) -> int:
    """CUDA's ``__byte_perm``: result byte i is byte (s >> 4i) & 7 of the 8 bytes y:x."""
    pool = (x | (y << 32)).to_bytes(8, "little")
    return int.from_bytes(bytes(pool[(s >> (4 * i)) & 7] for i in range(4)), "little")


def _tile_writes(source: str, element_size: int) -> list:
    """The kernel's tile writes for one element size, parsed from the .cu file: (tile row offset from c, word
    offset from g's first word, first operand, second operand, selector) with operands as written."""
    body = source.split("if (E == 1) {")[1].split("} else {")[int(element_size == 2)]
    temps = {m[0]: m[1:] for m in re.findall(r"const tf_u32 (t\d) = __byte_perm\((\w+), (\w+), (0x\w+)\)", body)}
    writes = re.findall(r"tile\[\(?c(?: \+ (\d))?\)? \* WORDS \+ (?:2 \* )?g(?: \+ (\d))?\] = "
                        r"__byte_perm\((\w+), (\w+), (0x\w+)\)", body)
    return temps, [(int(r or 0), int(w or 0), a, b, int(sel, 16)) for r, w, a, b, sel in writes]


@pytest.mark.parametrize("element_size", [1, 2])
def test_byte_permutations_turn_each_block_around(element_size):
    """Each tile write of the .cu file, evaluated on 4 rows' words: tile row c + r (output row: column c + r
    of the input rows) gets, at its word for the row group, the 4 rows' elements of that column in order."""
    temps, writes = _tile_writes(cuda_permute.CU_FILE.read_text(), element_size)
    assert len(writes) == 4
    rng = random.Random(element_size)
    rows = [rng.randrange(2**32) for _ in range(4)]  # word w of rows 0..3: 4 / E columns each
    values = {f"x{i}": v for i, v in enumerate(rows)}
    for name, (a, b, sel) in temps.items():
        values[name] = _byte_perm(values[a], values[b], int(sel, 16))
    E = element_size
    per_word = 4 // E  # rows a tile word holds
    for r, w, a, b, sel in writes:
        got = _byte_perm(values[a], values[b], sel).to_bytes(4, "little")
        first_row = per_word * w  # the rows 4g + first_row .. of the group in this word
        want = b"".join(rows[first_row + i].to_bytes(4, "little")[E * r: E * r + E] for i in range(per_word))
        assert got == want, (r, w, a, b, hex(sel))


def test_plan_text_names_the_cuda_kernel():
    from tileflip import explain

    text = explain.permute_text((11, 39, 29, 21, 42, 24), (5, 4, 2, 3, 1, 0), dtype="int8")
    assert "CUDA realigned-store kernel" in text and "one output run" in text
    assert "strategy: realign (the model's predicted fractions of copy: tile 0.48, realign" in text
    text = explain.permute_text((8, 28, 23, 36, 14, 50), (3, 4, 5, 1, 2, 0), dtype="int8")
    # the staged kernel's box follows every plan; no CUDA kernel is the pick
    assert "strategy: tile (" in text and "CUDA" not in text.split("CUDA staged permute")[0]
    # 2-byte elements: the same two strategies; 4-byte ones have the Triton kernel only
    text = explain.permute_text((11, 39, 29, 21, 42, 24), (5, 4, 2, 3, 1, 0), dtype="bfloat16")
    assert "strategy: realign (the model's predicted fractions of copy: tile 0.64, realign" in text
    text = explain.permute_text((11, 39, 29, 21, 42, 24), (5, 4, 2, 3, 1, 0), dtype="float32")
    assert "CUDA" not in text.split("CUDA staged permute")[0]


# --------------------------------------------------------------------------------------------------
# On the GPU
# --------------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.int8, torch.bfloat16])
@pytest.mark.parametrize("shape, dims", TAKEN)
def test_exact_bits_through_the_cuda_kernel(shape, dims, dtype, monkeypatch):
    from tileflip.ops import backends

    # whatever the model prefers
    monkeypatch.setattr(backends, "_permute_strategy", lambda p, es, *_: ("realign", tuning.realign_candidate(p, es)))
    forbid_kernels(monkeypatch, "triton.permute.launch", "triton.transpose.launch")  # it must take the CUDA kernel
    x = random_bits(shape, dtype, "cuda", seed=1)
    out = poisoned(tuple(shape[d] for d in dims), dtype, "cuda")
    tileflip.permute(x, dims, out)
    assert_bits_equal(out, x.permute(dims).contiguous())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.int8, torch.bfloat16])
@pytest.mark.parametrize("offset", [1, 7, 16, 29])
def test_output_off_any_boundary(offset, dtype, monkeypatch):
    forbid_kernels(monkeypatch, "triton.permute.launch")
    shape, dims = TAKEN[0]
    x = random_bits(shape, dtype, "cuda", seed=2)
    out_shape = tuple(shape[d] for d in dims)
    buf = poisoned((x.numel() + 64,), dtype, "cuda")
    out = buf[offset : offset + x.numel()].view(out_shape)
    tileflip.permute(x, dims, out, backend="cuda-realign")
    assert_bits_equal(out, x.permute(dims).contiguous())
    assert_bits_equal(buf[:offset], poisoned((offset,), dtype, "cuda"))  # nothing written around it
    rest = buf[offset + x.numel() :]
    assert_bits_equal(rest, poisoned(tuple(rest.shape), dtype, "cuda"))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.int8, torch.bfloat16])
@pytest.mark.parametrize("offset", [1, 7, 13])
@pytest.mark.parametrize("shape, dims", [TAKEN[0], TAKEN[3], TAKEN[4]])
def test_input_off_any_boundary(shape, dims, offset, dtype, monkeypatch):
    forbid_kernels(monkeypatch, "triton.permute.launch", "triton.transpose.launch")
    numel = torch.Size(shape).numel()
    base = random_bits((numel + 32,), dtype, "cuda", seed=3)
    x = base[offset : offset + numel].view(shape)
    out = poisoned(tuple(shape[d] for d in dims), dtype, "cuda")
    tileflip.permute(x, dims, out, backend="cuda-realign")  # (auto may prefer Triton for a shape here)
    assert_bits_equal(out, x.permute(dims).contiguous())


@pytest.mark.gpu
def test_backend_triton_keeps_the_triton_kernel(monkeypatch):
    forbid_kernels(monkeypatch, "cuda.permute.launch")
    shape, dims = TAKEN[0]
    x = random_bits(shape, torch.int8, "cuda", seed=4)
    assert_bits_equal(tileflip.permute(x, dims, backend="triton"), x.permute(dims).contiguous())


@pytest.mark.gpu
def test_runs_on_the_current_stream():
    shape, dims = TAKEN[1]
    x = random_bits(shape, torch.int8, "cuda", seed=5)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out = tileflip.permute(x, dims)
        expected = x.permute(dims).contiguous()
    stream.synchronize()
    assert_bits_equal(out, expected)


def test_backend_cuda_realign_refuses_a_cpu_tensor_and_writes_nothing():
    x = torch.arange(60, dtype=torch.int8).view(3, 4, 5)
    reason = "backend='cuda-realign' cannot take this call: it needs a CUDA tensor"
    check_permute_refused(x, (2, 0, 1), "cuda-realign", reason)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "shape, dims, dtype, reason",
    [
        ((30, 40, 50), (2, 0, 1), torch.float32, "1- and 2-byte elements"),
        ((30, 40, 50), (1, 0, 2), torch.int8, "it transposes"),
    ],
)  # fmt: skip
def test_backend_cuda_realign_refuses_what_it_cannot_take(shape, dims, dtype, reason):
    check_permute_refused(random_bits(shape, dtype, "cuda", seed=6), dims, "cuda-realign", reason)


@pytest.mark.gpu
@pytest.mark.parametrize("shape, dims", [((5, 30, 9, 401), (0, 3, 2, 1)), ((8, 28, 23, 36), (3, 2, 0, 1))])
def test_backend_cuda_realign_runs_where_the_model_prefers_triton(shape, dims, monkeypatch):
    assert tuning.permute_strategy(_plan(shape, dims), 1)[0] != "realign"
    forbid_kernels(monkeypatch, "triton.permute.launch", "triton.transpose.launch")
    x = random_bits(shape, torch.int8, "cuda", seed=7)
    assert_bits_equal(tileflip.permute(x, dims, backend="cuda-realign"), x.permute(dims).contiguous())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.int8, torch.float16])
def test_backend_cuda_realign_strided_and_expanded_inputs(dtype):
    base = random_bits((7, 61, 3, 1203), dtype, "cuda", seed=8)
    strided = base[1:6, ::2, 1, 5:1200]  # every stride but the last odd, the start off any boundary
    expanded = random_bits((1, 45, 1, 307), dtype, "cuda", seed=9).expand(6, 45, 5, 307)
    for x, dims in ((strided, (2, 0, 1)), (expanded, (3, 1, 0, 2)), (expanded, (2, 3, 0, 1))):
        check_permute_exact(x, dims, "cuda-realign")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.int8, torch.int16])
def test_backend_cuda_realign_offsets_past_2_to_the_31(dtype):
    # 2.16e9 bytes: byte offsets past 2**31 on both sides
    shape, dims = (2, 1031, 1_048_583 // dtype.itemsize), (0, 2, 1)
    gen = torch.Generator("cuda").manual_seed(10)
    x = torch.randint(-128, 128, shape, dtype=dtype, device="cuda", generator=gen)
    out = torch.empty(tuple(shape[d] for d in dims), dtype=dtype, device="cuda").fill_(0x5A)
    tileflip.permute(x, dims, out, backend="cuda-realign")
    assert_bits_equal(out, x.permute(dims).contiguous())
