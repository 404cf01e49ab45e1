"""The timing harness's L2 flush: its sm_90 code (no GPU needed) and, on a GPU, that it loses no one's data."""

import re

import pytest
import torch
from helpers import without_interpreter

from tileflip.bench import timing
from tileflip.kernels.triton import flush as triton_flush
from tileflip.kernels.triton.layout import compile_launch


def test_flush_mode_and_size_are_checked():
    with pytest.raises(ValueError, match="mode: expected one of"):
        timing.flush_fn("cpu", "evict")
    with pytest.raises(ValueError, match="nbytes: expected a multiple of 131072"):
        triton_flush.Flush("cpu", (256 << 20) + 4096)
    with pytest.raises(ValueError, match="nbytes: expected a multiple of 131072 under"):
        triton_flush.Flush("cpu", 8 << 30)
    with pytest.raises(ValueError, match="buffer: expected a contiguous int8 tensor of 131072"):
        triton_flush.Flush("cpu", 128 << 10, buffer=torch.empty(128 << 10, dtype=torch.uint8))
    with pytest.raises(ValueError, match="buffer: expected a CUDA tensor"):
        triton_flush.Flush("cpu", 128 << 10, buffer=torch.empty(128 << 10, dtype=torch.int8))


@without_interpreter
def test_flush_code_for_sm90():
    """The load reads 16-byte words with an L2 policy of evict_last over the whole line (fraction 1.0);
    the discard invalidates 128-byte lines, one per line of the program's 128 KiB (8 per thread of 4 warps)."""
    load = compile_launch(triton_flush.load_evict_last_kernel, {"buf": None, "sink": None, "n_words": 1 << 25},
                          {"BLOCK": triton_flush.LOAD_BLOCK}, 4, "*i64").asm["ptx"]  # fmt: skip
    assert re.search(r"createpolicy\.fractional\.L2::evict_last\.b64 %rd\d+, 1\.0;", load)
    loads = re.findall(r"ld\.global\S*", load)
    assert loads and all(".L2::cache_hint.v2.b64" in op for op in loads), loads
    discard = compile_launch(triton_flush.discard_kernel, {"buf": None, "sink": None},
                             {"BLOCK": triton_flush.DISCARD_BLOCK}, 4, "*i8").asm["ptx"]  # fmt: skip
    discards = re.findall(r"discard\.global\.L2 \[%rd\d+\], 128;", discard)
    assert len(discards) == triton_flush.DISCARD_BLOCK // (4 * 32)


@pytest.mark.gpu
def test_flush_keeps_the_bytes_around_its_buffer():
    """The flush's buffer is the middle of one allocation; the guard bytes on both sides are written just
    before the flush (dirty in the L2) and read back bit for bit after it: a discard reaching one line past
    either end of its buffer would lose them."""
    guard, nbytes = 1 << 20, 4 << 20
    whole = torch.randint(-128, 128, (guard + nbytes + guard,), dtype=torch.int8, device="cuda")
    flush = triton_flush.Flush("cuda", nbytes, buffer=whole[guard : guard + nbytes])
    want = whole.cpu()
    whole[:guard].add_(1)
    whole[-guard:].sub_(1)
    flush()
    torch.cuda.synchronize()
    got = whole.cpu()
    assert torch.equal(got[:guard], want[:guard] + 1) and torch.equal(got[-guard:], want[-guard:] - 1)


@pytest.mark.gpu
def test_device_times_with_the_flush():
    """device_times runs the flush before each repetition and leaves the call's result in place."""
    x = torch.randint(-(2**31), 2**31 - 1, (3 << 20,), dtype=torch.int32, device="cuda")
    out = torch.full_like(x, -7)
    ms = timing.device_times(lambda: out.copy_(x), warmup=1, reps=3)
    assert len(ms) == 3 and all(m > 0 for m in ms)
    assert torch.equal(out, x)


@pytest.mark.gpu
def test_device_times_runs_before_then_the_given_flush_each_repetition():
    """``before`` is queued before the flush of every timed repetition (not of the warm-up calls), and a
    callable ``flush`` replaces the library's, queued once a repetition, before the call."""
    log = torch.zeros(3, dtype=torch.int64, device="cuda")  # befores, flushes, calls
    order = []

    def step(i, name):
        def run():
            log[i] += 1
            order.append(name)

        return run

    ms = timing.device_times(step(2, "call"), warmup=2, reps=4, spin=timing.SPIN_CYCLES, flush=step(1, "flush"),
                             before=step(0, "before"))  # a spin given: no host-time probe calls
    assert len(ms) == 4
    assert log.tolist() == [4, 4, 6]
    assert order == ["call"] * 2 + ["before", "flush", "call"] * 4
    with pytest.raises(ValueError, match="mode: expected one of"):
        timing.device_times(lambda: None, reps=1, flush="none")
