"""Print the Triton code torch.compile (inductor) generates for `x.t().contiguous()` on the 2-D suite's
cases where it is the fastest peer, to compare its kernels with tileflip's (and, at the end, the configuration
its autotuner kept for each kernel); or, given cases
``SHAPE:PERM:DTYPE`` (``23,21,112,32,16:2,1,4,3,0:float32``), for ``x.permute(PERM).contiguous()``.

``python benchmarks/inductor_code.py [SHAPE:PERM:DTYPE ...]`` (GPU)."""

import sys

import torch
from torch._inductor.utils import run_and_get_code

CASES = [((256, 65536), torch.float32), ((65536, 256), torch.float64), ((1024, 512), torch.float32),
         ((2, 100000), torch.float32), ((31, 65), torch.float32), ((16384, 16384), torch.float64)]  # fmt: skip

CASES = [(shape, dtype, (1, 0)) for shape, dtype in CASES]
if sys.argv[1:]:
    CASES = [(tuple(int(v) for v in shape.split(",")), getattr(torch, dtype), tuple(int(v) for v in perm.split(",")))
             for shape, perm, dtype in (arg.split(":") for arg in sys.argv[1:])]  # fmt: skip

for shape, dtype, perm in CASES:
    torch._dynamo.reset()
    x = torch.randn(shape, device="cuda").to(dtype)
    _, codes = run_and_get_code(torch.compile(lambda t, p=perm: t.permute(p).contiguous(), dynamic=False), x)
    print(f"##### {shape} {dtype} {perm}")
    for code in codes:
        keep = False
        for line in code.splitlines():
            if "@triton" in line or "triton_meta" in line or "def triton_" in line:
                keep = True
            if keep:
                print(line)
            if keep and line.startswith("''', device_str"):
                keep = False

from ragged_tiles import inductor_choice  # noqa: E402 (beside this script)

for kept in inductor_choice():
    print(f"# autotuner kept for {kept}")
