"""What the Triton launchers share: interpreter detection and the fast-launch helpers.

(The kernels' program-order decoding is written out in each kernel rather than shared as a
``@triton.jit`` helper: under TRITON_INTERPRET a helper becomes an interpreter object, and the
ahead-of-time sm_90 compiles that the tests and the analyzer run in the same process would fail.)"""

from __future__ import annotations

import triton


def is_interpreted_kernel(kernel) -> bool:
    """True when ``kernel`` was decorated under TRITON_INTERPRET=1 (it then runs on the CPU)."""
    return not isinstance(kernel, triton.runtime.JITFunction)


def spec_key(v: int) -> int:
    """Triton's specialization of an integer argument as a small int (see plan.specialization_class):
    equal to 1, divisible by 16, past int32."""
    return 1 if v == 1 else (2 if v % 16 == 0 else 0) | (4 if v >= 2**31 else 0)


_raw_stream = None


def current_stream(device: int) -> int:
    """The raw handle of torch's current stream on ``device`` (~0.1 us; the getter is looked up on first
    use, since CPU builds of torch lack it)."""
    global _raw_stream
    if _raw_stream is None:
        from torch._C import _cuda_getCurrentRawStream

        _raw_stream = _cuda_getCurrentRawStream
    return _raw_stream(device)
