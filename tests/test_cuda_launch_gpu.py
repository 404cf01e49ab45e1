"""The CUDA C++ kernels on a GPU: every variant and element size, launched through
``tileflip.kernels.cuda_transpose.launch``, against ``x.t().contiguous()`` bit for bit.

The output sits inside a larger poisoned buffer, so both unwritten slots inside it and writes past
either end show up.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

pytest.importorskip("cuda.bindings", reason="the CUDA backend needs cuda-python: pip install 'tileflip[cuda]'")

from tileflip.kernels.cuda import transpose as cuda_transpose  # noqa: E402 (after the importorskip)

# The variants that take any input; vec (1- and 2-byte elements, unit column stride, 16-byte output rows)
# has tests of its own below.
GENERAL = tuple(v for v in cuda_transpose.VARIANTS if v != "vec")

SIGNED = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
UNSIGNED = {1: torch.uint8, 2: torch.uint16, 4: torch.uint32, 8: torch.uint64}
SIZES = tuple(UNSIGNED)
POISON = 0xAB
GUARD = 4096  # poisoned bytes on each side of the output


def random_signed(shape, size: int, seed: int = 0) -> torch.Tensor:
    """Random bytes as a signed tensor; no byte is 0 or the poison, so no missed write can go unseen."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    numel = 1
    for s in shape:
        numel *= s
    raw = torch.randint(1, 255, (numel * size,), dtype=torch.uint8, device="cuda", generator=gen)
    raw += raw >= POISON
    return raw.view(SIGNED[size]).reshape(shape)


def poisoned_output(x_signed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, buffer): the unsigned (N, M) output, contiguous, inside a buffer poisoned with 0xAB bytes."""
    size = x_signed.element_size()
    M, N = x_signed.shape
    buffer = torch.full((GUARD + N * M * size + GUARD,), POISON, dtype=torch.uint8, device="cuda")
    return buffer[GUARD : GUARD + N * M * size].view(UNSIGNED[size]).view(N, M), buffer


def check(x_signed: torch.Tensor, out: torch.Tensor, buffer: torch.Tensor, variant: str) -> None:
    torch.cuda.synchronize()
    expected = x_signed.t().contiguous()
    got = out.view(SIGNED[x_signed.element_size()])
    if not torch.equal(got, expected):
        bad = (got != expected).nonzero()
        pytest.fail(
            f"{variant} {out.dtype} {tuple(x_signed.shape)} strides {x_signed.stride()}: {len(bad)} wrong, "
            f"first at {bad[:4].tolist()}"
        )
    assert bool((buffer[:GUARD] == POISON).all()), "write before the output"
    assert bool((buffer[-GUARD:] == POISON).all()), "write after the output"


def run(x_signed: torch.Tensor, variant: str) -> None:
    out, buffer = poisoned_output(x_signed)
    cuda_transpose.launch(x_signed.view(UNSIGNED[x_signed.element_size()]), out, variant)
    check(x_signed, out, buffer, variant)


def _contiguous(shape):
    return lambda size: random_signed(shape, size)


CASES = {
    "31x65": _contiguous((31, 65)),
    "65x31": _contiguous((65, 31)),
    "1x1000": _contiguous((1, 1000)),
    "1000x1": _contiguous((1000, 1)),
    "1x1": _contiguous((1, 1)),
    "1024x512": _contiguous((1024, 512)),
    "97x1030": _contiguous((97, 1030)),
    # Storage offset 1 and strides (2 * 301, 3): neither unit nor tile-aligned.
    "strided_view": lambda size: random_signed((200, 301), size)[::2, 1::3],
    # Already a transposed view: strides (1, M), every read is strided.
    "transposed_view": lambda size: random_signed((70, 45), size).t(),
    # Stride 0: every row reads the same memory.
    "expanded_rows": lambda size: random_signed((1, 77), size).expand(50, 77),
    "expanded_cols": lambda size: random_signed((77, 1), size).expand(77, 50),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"u{8 * s}")
@pytest.mark.parametrize("variant", GENERAL)
def test_launch_matches_torch(variant, size, case):
    run(CASES[case](size), variant)


@pytest.mark.parametrize("variant", GENERAL)
def test_more_tiles_than_grid_y_allows(variant):
    # Over 2**17 rows of tiles: a 2-D grid would need gridDim.y > 65535, the 1-D grid does not.
    run(random_signed((32 * 2**17 + 3, 2), 1), variant)


@pytest.mark.parametrize("variant", GENERAL)
def test_non_default_stream(variant):
    x = random_signed((300, 500), 4)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run(x, variant)


@pytest.mark.parametrize("variant", GENERAL)
def test_cuda_graph_capture(variant):
    # Capture fails if the launch goes to any stream other than PyTorch's current (capturing) one.
    x = random_signed((129, 70), 8)
    out, buffer = poisoned_output(x)
    cuda_transpose.launch(x.view(torch.uint64), out, variant)  # compile and load outside the capture
    torch.cuda.synchronize()
    buffer.fill_(POISON)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        cuda_transpose.launch(x.view(torch.uint64), out, variant)
    torch.cuda.synchronize()
    assert bool((buffer == POISON).all()), "the captured launch ran during capture"
    graph.replay()
    check(x, out, buffer, variant)


def test_launch_from_a_fresh_thread():
    # The launch is the thread's first CUDA call, so no context is current there: the launcher must
    # bind the primary context itself, or a launch on the NULL stream fails.
    x = random_signed((33, 70), 2)
    outs = [poisoned_output(x) for _ in GENERAL]
    torch.cuda.synchronize()

    def work():
        for variant, (out, _) in zip(GENERAL, outs):
            cuda_transpose.launch(x.view(torch.uint16), out, variant)

    # A fresh one-thread pool: .result() re-raises here whatever the worker thread raised.
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(work).result()
    for variant, (out, buffer) in zip(GENERAL, outs):
        check(x, out, buffer, variant)


@pytest.mark.parametrize("variant", GENERAL)
def test_offsets_past_32_bits(variant):
    # 2**31 + a few elements of 1 byte: 32-bit offsets would wrap on the last rows.
    M, N = 46341, 46341  # M * N = 2_147_488_281 > 2**31
    free, _ = torch.cuda.mem_get_info()
    if free < 8 * M * N:
        pytest.skip(f"needs {8 * M * N / 2**30:.0f} GiB of free GPU memory")
    x = random_signed((M, N), 1)
    out = torch.empty((N, M), dtype=torch.uint8, device="cuda").fill_(POISON)
    cuda_transpose.launch(x.view(torch.uint8), out, variant)
    assert torch.equal(out.view(torch.int8), x.t().contiguous())


# ---------------------------------------------------------------------------------------------------
# vec: 16-byte accesses whatever the input rows' alignment
# ---------------------------------------------------------------------------------------------------

VEC_CASES = {
    # (rows, columns, row stride, offset of the first element): M is a multiple of 16 / size.
    "odd stride 128x257": (128, 257, 257, 0),
    "odd stride 1024x999": (1024, 999, 999, 0),
    "partial tiles 48x33": (48, 33, 33, 0),
    "one column 16x1": (16, 1, 1, 0),
    "every start offset 304x1000 of 1003": (304, 1000, 1003, 5),
    "offset 13, stride 4097, 256x64": (256, 64, 4097, 13),
    "aligned 256x512": (256, 512, 512, 0),
    "long rows 64x20001": (64, 20001, 20011, 7),
}


def vec_input(case: str, size: int) -> torch.Tensor:
    rows, cols, stride, offset = VEC_CASES[case]
    rows = rows if rows * size % 16 == 0 else rows * 2
    return random_signed((rows * stride + offset,), size)[offset:].view(rows, stride)[:, :cols]


@pytest.mark.parametrize("case", list(VEC_CASES))
@pytest.mark.parametrize("size", (1, 2), ids=lambda s: f"u{8 * s}")
def test_vec_matches_torch(size, case):
    """Every misalignment of a row's start (odd strides, offset origins), partial tiles on both sides,
    rows far longer than a tile; the output inside guard bands."""
    run(vec_input(case, size), "vec")


def test_vec_expanded_rows_and_stream():
    """Stride 0 (every row the same memory), on a stream of its own."""
    x = random_signed((1, 77), 2).expand(64, 77)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run(x, "vec")


def test_vec_offsets_past_32_bits():
    M, N = 46352, 46341  # M * N > 2**31, M a multiple of 16
    free, _ = torch.cuda.mem_get_info()
    if free < 8 * M * N:
        pytest.skip(f"needs {8 * M * N / 2**30:.0f} GiB of free GPU memory")
    x = random_signed((M, N), 1)
    out = torch.empty((N, M), dtype=torch.uint8, device="cuda").fill_(POISON)
    cuda_transpose.launch(x.view(torch.uint8), out, "vec")
    assert torch.equal(out.view(torch.int8), x.t().contiguous())
