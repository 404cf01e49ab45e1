"""The staged permute (kernels/cuda/permute_staged.cu, backend ``cuda-staged``): the boxes the planner gives
it (``plan.staged``), its blocks' work emulated on the CPU with the .cu file's own device functions
(transliterated by ``device_source``) against ``x.permute``, the NVRTC compile of every kernel, and exact
bits on the GPU."""

import random
from pathlib import Path

import device_source
import numpy as np
import pytest
import torch
from helpers import (
    check_permute_exact,
    check_permute_off_boundaries,
    check_permute_refused,
    forbid_kernels,
    poisoned,
    random_bits,
)

import tileflip
from tileflip import plan
from tileflip.plan import choose, staged
from tileflip.plan.permute import contiguous_strides

CU_FILE = Path(tileflip.__file__).parent / "kernels" / "cuda" / "permute_staged.cu"
device_source.SIGNATURES.update({
    "buffer_at": "p, r, c", "load_slot": "p, v, VE", "store_order": "p, u, VE", "store_slot": "p, gq",
    "segment_place": "p, s, q, c",
    "next_place": "p, at, c", "box_of": "p, t", "holds": "s, b",
})  # fmt: skip
FUNCTIONS = ("quotient", "buffer_at", "load_slot", "store_order", "store_slot", "segment_place", "next_place",
             "box_of", "holds")

# (shape, dims, element size): transposes with short runs on both sides, patchify and pixel shuffle
# layouts, kept runs, odd extents with cuts whose last box is short, batches of several dimensions
CASES = [
    ((40, 72), (1, 0), 4),
    ((3, 64, 48), (1, 2, 0), 4),
    ((2, 3, 4, 16, 4, 16), (0, 2, 4, 3, 5, 1), 4),
    ((2, 4, 4, 16, 16, 3), (0, 5, 1, 3, 2, 4), 4),
    ((2, 8, 2, 2, 24, 24), (0, 1, 4, 2, 5, 3), 2),
    ((5, 24, 2, 40, 8), (1, 3, 0, 4, 2), 2),
    ((20, 13, 48), (1, 0, 2), 2),
    ((7, 36, 96), (2, 0, 1), 1),
    ((12, 5, 64, 16), (0, 3, 1, 2), 1),
    ((3, 100, 8), (1, 0, 2), 8),
    ((6, 20, 40), (2, 1, 0), 8),
    ((4, 2, 3, 8, 64), (4, 3, 0, 2, 1), 4),
    ((300, 100), (1, 0), 4),
    ((2, 52, 200), (0, 2, 1), 2),
    ((3, 200, 136), (0, 2, 1), 1),
    ((2, 300, 260), (0, 2, 1), 1),
    ((170, 90), (1, 0), 2),
]


def _plan(shape, dims, es, strides=None):
    return plan.plan_permute(tuple(shape), strides or contiguous_strides(shape), tuple(dims), es)


def _params(fields, env):
    return env["StagedParams"](**fields)


@pytest.fixture(scope="module")
def kernel_functions():
    return device_source.device_functions(CU_FILE.read_text(), FUNCTIONS)


def emulate(p, go, mem: np.ndarray, x_at: int, out: np.ndarray, out_at: int, env, blocks: int = 3) -> np.ndarray:
    """Run launch ``go``'s blocks on byte arrays as the kernel does (its device functions, its loops): x's
    element 0 at byte ``x_at`` of ``mem``, out's at ``out_at`` of ``out``. Checks every vector's alignment and
    buffer bounds; returns how many times each output byte was written."""
    es, vi, vo = go.element_size, go.vi, go.vo
    lpt, spt, epv = staged.BOX_BYTES // (staged.THREADS * vi), staged.BOX_BYTES // (staged.THREADS * vo), vo // es
    prm = _params(staged.staged_fields(p.sizes, p.in_strides, go), env)
    written = np.zeros(out.size, np.int64)
    loads = []
    for tid in range(staged.THREADS):
        for i in range(lpt):
            s = env["load_slot"](prm, tid + staged.THREADS * i, vi // es)
            loads.append((s, es * env["buffer_at"](prm, s.row, s.col)))
    stores = []
    for tid in range(staged.THREADS):
        for j in range(spt):
            gq = env["store_order"](prm, tid + staged.THREADS * j, epv)
            s = env["store_slot"](prm, gq)
            c = [0] * staged.DIMS
            at = env["segment_place"](prm, s, 0 if gq.row < 0 else gq.col, c)
            sm = [es * env["buffer_at"](prm, at.row, at.col)]
            for _ in range(1, epv):
                at = env["next_place"](prm, at, c)
                sm.append(es * env["buffer_at"](prm, at.row, at.col))
            if go.vector_gather and gq.row >= 0:
                assert sm[0] % vo == 0 and sm == [sm[0] + es * e for e in range(epv)]
            stores.append((s, sm))
    for block in range(min(blocks, go.tiles)):
        for t in range(block, go.tiles, blocks):
            box = env["box_of"](prm, t)
            buf = np.full(staged.BUF_BYTES, 0x5A, np.uint8)
            for s, dst in loads:
                if env["holds"](s, box):
                    src = x_at + (box.at_in + s.at) * es
                    assert src % vi == 0 and dst % vi == 0 and dst + vi <= staged.BUF_BYTES
                    buf[dst : dst + vi] = mem[src : src + vi]
            for s, sm in stores:
                if env["holds"](s, box):
                    dst = out_at + (box.at_out + s.at) * es
                    assert dst % vo == 0 and max(sm) + es <= staged.BUF_BYTES
                    out[dst : dst + vo] = np.concatenate([buf[k : k + es] for k in sm])
                    written[dst : dst + vo] += 1
    return written


def _emulated(shape, dims, es, kernel_functions, x_at=0, out_at=0, strides=None, blocks=3):
    g = torch.Generator().manual_seed(sum(shape) + es)
    dt = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[es]
    span = 1 + sum((s - 1) * st for s, st in zip(shape, strides)) if strides else torch.Size(shape).numel()
    mem = torch.randint(1, 255, (span * es + x_at + 16,), dtype=torch.uint8, generator=g)
    x = torch.as_strided(mem[x_at : x_at + span * es].view(dt), shape, strides or contiguous_strides(shape))
    p = plan.plan_permute(tuple(x.shape), tuple(x.stride()), tuple(dims), es)
    go = choose.staged_launch(p.sizes, p.in_strides, es, staged._pow2_dividing(x_at, 16) if x_at else 16,
                              staged._pow2_dividing(out_at, 16) if out_at else 16)  # fmt: skip
    assert go is not None, (shape, dims, es, choose.staged_refusal(p.sizes, p.in_strides, es))
    ref = x.permute(dims).contiguous().view(torch.uint8).reshape(-1).numpy()
    out = np.full(ref.size + out_at + 32, 0xA5, np.uint8)
    written = emulate(p, go, mem.numpy(), x_at, out, out_at, kernel_functions, blocks)
    assert np.array_equal(out[out_at : out_at + ref.size], ref)
    assert (written[out_at : out_at + ref.size] == 1).all() and written.sum() == ref.size
    return go


@pytest.mark.parametrize("shape, dims, es", CASES)
def test_emulated_blocks_give_the_permute(shape, dims, es, kernel_functions):
    _emulated(shape, dims, es, kernel_functions)


def test_the_cases_cut_both_sides_with_short_last_boxes():
    short = 0
    for shape, dims, es in CASES:
        p = _plan(shape, dims, es)
        go = choose.staged_launch(p.sizes, p.in_strides, es)
        cuts = [d for d in (go.cut_in, go.cut_out) if d >= 0 and p.sizes[d] % go.extents[d]]
        short += len(set(cuts)) == 2
    assert short >= 2


def test_emulated_boxes_at_pointer_offsets_and_strided_inputs(kernel_functions):
    # x 4 bytes past an aligned address narrows the loads; a strided view's rows are apart in memory
    go = _emulated((40, 72), (1, 0), 4, kernel_functions, x_at=4, out_at=8)
    assert (go.vi, go.vo) == (4, 8)
    _emulated((6, 40, 24), (2, 0, 1), 2, kernel_functions, strides=(2048, 48, 1))
    _emulated((5, 12, 32), (1, 2, 0), 4, kernel_functions, strides=(0, 32, 1))  # an expanded dimension


def test_a_box_fits_its_buffer_and_cuts_at_most_one_dimension_a_side():
    rng = random.Random(0)
    taken = 0
    for _ in range(300):
        rank = rng.randint(2, 6)
        shape = [rng.choice([2, 3, 4, 7, 8, 16, 24, 37, 64, 100, 256]) for _ in range(rank)]
        dims = list(range(rank))
        rng.shuffle(dims)
        es = rng.choice([1, 2, 4, 8])
        p = _plan(shape, dims, es)
        if p.kind not in ("rows", "tiles", "transpose2d"):
            continue
        go = choose.staged_launch(p.sizes, p.in_strides, es)
        if go is None:
            assert choose.staged_refusal(p.sizes, p.in_strides, es)
            continue
        taken += 1
        ext = go.extents
        assert go.box_elements * es <= staged.BOX_BYTES
        rows = 1
        for d in go.seg_order:
            rows *= ext[d]
        assert go.pitch * rows * es <= staged.BUF_BYTES and go.pitch >= go.len_in()
        assert go.pitch * es % go.vi == 0 and go.rot * es % go.vi == 0
        cut = {d for d in range(len(ext)) if 1 < ext[d] < p.sizes[d]}
        assert cut <= {go.cut_in, go.cut_out}
        assert go.len_in() * es % go.vi == 0 and go.len_out() * es % go.vo == 0
        assert go.vi >= staged.MIN_VECTOR_BYTES and go.vo >= staged.MIN_VECTOR_BYTES
    assert taken > 100


def test_refusals_say_why():
    p = _plan((7, 9, 11), (2, 0, 1), 1)
    assert "multiple of 4 bytes" in choose.staged_refusal(p.sizes, p.in_strides, 1)
    assert "stride 1" in choose.staged_refusal((8, 8), (2, 16), 4)


def test_every_kernel_of_the_file_is_named():
    import re

    from tileflip.kernels.cuda import staged as launcher

    source = CU_FILE.read_text()
    pairs = {(int(e), int(i), int(o)) for e, i, o in re.findall(r"^STAGED_PAIR\((\d), (\d+), (\d+)\)", source, re.M)}
    for es in re.findall(r"^STAGED_WIDTHS\((\d)\)", source, re.M):
        pairs |= {(int(es), i, o) for i in (4, 8, 16) for o in (4, 8, 16)}
    made = {f"permute_staged_e{e}_i{i}_o{o}{v}" for e, i, o in pairs for v in ("", "_v")}
    assert made == set(launcher.kernel_names())


def test_the_params_struct_matches_the_kernel_file():
    from tileflip.kernels.cuda import staged as launcher

    fields = device_source.device_functions(CU_FILE.read_text(), ())["StagedParams"]._fields
    assert tuple(name for name, _ in launcher._Params._fields_) == fields


# --- GPU --------------------------------------------------------------------------------------------

needs_gpu = pytest.mark.gpu


def _gpu_or_skip():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from tileflip.ops.backends import nvrtc_available

    if not nvrtc_available():
        pytest.skip("needs NVRTC (pip install 'tileflip[cuda]')")


DTYPES = {1: torch.uint8, 2: torch.bfloat16, 4: torch.float32, 8: torch.int64}


@needs_gpu
@pytest.mark.parametrize("shape, dims, es", CASES)
def test_gpu_exact_bits(shape, dims, es, monkeypatch):
    _gpu_or_skip()
    forbid_kernels(monkeypatch, "triton.permute.launch", "triton.transpose.launch", "cuda.permute.launch")
    x = random_bits(shape, DTYPES[es], "cuda", seed=1)
    check_permute_exact(x, dims, "cuda-staged")


@needs_gpu
def test_gpu_exact_bits_on_random_permutes():
    _gpu_or_skip()
    rng = random.Random(1)
    done = 0
    while done < 60:
        rank = rng.randint(2, 6)
        shape = [rng.choice([2, 3, 4, 5, 8, 13, 16, 24, 37, 64, 100, 130]) for _ in range(rank)]
        if torch.Size(shape).numel() > 1 << 22:
            continue
        dims = list(range(rank))
        rng.shuffle(dims)
        es = rng.choice([1, 2, 4, 8])
        p = _plan(shape, dims, es)
        if p.kind not in ("rows", "tiles", "transpose2d") or choose.staged_launch(p.sizes, p.in_strides, es) is None:
            continue
        check_permute_exact(random_bits(shape, DTYPES[es], "cuda", seed=done), dims, "cuda-staged")
        done += 1


@needs_gpu
def test_gpu_strided_expanded_and_offset_inputs():
    _gpu_or_skip()
    base = random_bits((6, 40, 48), torch.bfloat16, "cuda", seed=2)
    check_permute_exact(base[:, :, :24], (2, 0, 1), "cuda-staged")  # rows apart in memory
    check_permute_exact(random_bits((12, 32), torch.float32, "cuda").expand(5, 12, 32), (1, 2, 0), "cuda-staged")
    for x_offset, out_offset in ((0, 2), (4, 0), (1, 3)):
        check_permute_off_boundaries((40, 72), (1, 0), torch.float32, x_offset, out_offset, "cuda-staged")


@needs_gpu
def test_gpu_refuses_what_it_cannot_take():
    _gpu_or_skip()
    x = random_bits((7, 9, 11), torch.uint8, "cuda")
    check_permute_refused(x, (2, 0, 1), "cuda-staged", "multiple of 4 bytes")


@needs_gpu
@pytest.mark.slow
def test_gpu_offsets_past_two_to_the_31():
    _gpu_or_skip()
    if torch.cuda.get_device_properties(0).total_memory < 24 << 30:
        pytest.skip("needs 24 GiB of GPU memory")
    shape, dims = (2, 16, 2**16, 1040), (0, 3, 2, 1)  # 2.2e9 elements of 1 byte; box offsets stay 32-bit
    x = torch.empty(shape, dtype=torch.uint8, device="cuda").random_(1, 255)
    out = poisoned(tuple(shape[d] for d in dims), torch.uint8, "cuda")
    tileflip.permute(x, dims, out, backend="cuda-staged")
    assert torch.equal(out, x.permute(dims))
