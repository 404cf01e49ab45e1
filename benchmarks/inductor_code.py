"""Print the Triton code torch.compile (inductor) generates for `x.t().contiguous()` on the 2-D suite's
cases where it is the fastest peer, to compare its kernels with tileflip's.

``python benchmarks/inductor_code.py`` (GPU)."""

import torch
from torch._inductor.utils import run_and_get_code

CASES = [((256, 65536), torch.float32), ((65536, 256), torch.float64), ((1024, 512), torch.float32),
         ((2, 100000), torch.float32), ((31, 65), torch.float32), ((16384, 16384), torch.float64)]  # fmt: skip

for shape, dtype in CASES:
    torch._dynamo.reset()
    x = torch.randn(shape, device="cuda").to(dtype)
    _, codes = run_and_get_code(torch.compile(lambda t: t.t().contiguous(), dynamic=False), x)
    print(f"##### {shape} {dtype}")
    for code in codes:
        keep = False
        for line in code.splitlines():
            if "@triton" in line or "triton_meta" in line or "def triton_" in line:
                keep = True
            if keep:
                print(line)
            if keep and line.startswith("''', device_str"):
                keep = False
