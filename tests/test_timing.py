"""The timing harness's L2 flush: its sm_90 code (no GPU needed) and, on a GPU, that it loses no one's data."""

import json
import os
import re
import subprocess
import sys

import pytest
import torch

from tileflip import timing
from tileflip.kernels import triton_flush


def test_flush_mode_and_size_are_checked():
    with pytest.raises(ValueError, match="mode: expected one of"):
        timing.flush_fn("cpu", "evict")
    with pytest.raises(ValueError, match="nbytes: expected a multiple of 131072"):
        triton_flush.Flush("cpu", (256 << 20) + 4096)


_PTX_PROBE = """
import json
from tileflip.kernels import triton_flush as f
from tileflip.kernels.triton_layout import compile_launch
load = compile_launch(f.load_evict_last_kernel, {"buf": None, "sink": None, "n_words": 1 << 25},
                      {"BLOCK": f.LOAD_BLOCK}, 4, "*i64").asm["ptx"]
discard = compile_launch(f.discard_kernel, {"buf": None, "sink": None}, {"BLOCK": f.DISCARD_BLOCK}, 4, "*i8").asm["ptx"]
print(json.dumps({"load": load, "discard": discard}))
"""


def test_flush_code_for_sm90():
    """The load reads 16-byte words with an L2 policy of evict_last over the whole line (fraction 1.0);
    the discard invalidates 128-byte lines, one per line of the program's 128 KiB (8 per thread of 4 warps).
    Compiled in a child process without the interpreter, which cannot lower triton's own jit helpers
    (``tl.sum``)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", _PTX_PROBE], capture_output=True, text=True, env=env, timeout=600,
                          check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    ptx = json.loads(proc.stdout.strip().splitlines()[-1])
    assert re.search(r"createpolicy\.fractional\.L2::evict_last\.b64 %rd\d+, 1\.0;", ptx["load"])
    loads = re.findall(r"ld\.global\S*", ptx["load"])
    assert loads and all(".L2::cache_hint.v2.b64" in op for op in loads), loads
    discards = re.findall(r"discard\.global\.L2 \[%rd\d+\], 128;", ptx["discard"])
    assert len(discards) == triton_flush.DISCARD_BLOCK // 128


@pytest.mark.gpu
def test_flush_keeps_other_tensors():
    """Tensors written just before the flush (dirty in the L2), allocated before and after its buffer,
    read back bit for bit after it: the discard reaches only the flush's own lines."""
    before = torch.randint(-(2**31), 2**31 - 1, (3 << 20,), dtype=torch.int32, device="cuda")
    flush = triton_flush.Flush("cuda", 4 << 20)
    after = torch.randint(-(2**31), 2**31 - 1, (3 << 20,), dtype=torch.int32, device="cuda")
    want = before.cpu(), after.cpu()
    before.add_(1)
    after.sub_(1)
    flush()
    torch.cuda.synchronize()
    assert torch.equal(before.cpu(), want[0] + 1) and torch.equal(after.cpu(), want[1] - 1)
    out = torch.full_like(after, -7)
    ms = timing.device_times(lambda: out.copy_(after), warmup=1, reps=3)  # the flush before each rep
    assert len(ms) == 3 and all(m > 0 for m in ms)
    assert torch.equal(out.cpu(), want[1] - 1)
