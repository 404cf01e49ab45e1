"""An L2 flush that leaves the L2 clean and empty, including of lines held at ``evict_last`` priority.

``load_evict_last_kernel`` reads a buffer five times the L2's size at ``evict_last`` priority, which
displaces every earlier line (dirty ones are written back here, not in the timed kernel); then
``discard_kernel`` invalidates the buffer's own lines with ``discard.global.L2``, without a write-back.
A plain ``zero_`` flush leaves the L2 full of its own dirty lines and keeps lines loaded at
``evict_last``. Figures: ``docs/design.md`` (Benchmark). GPU only (inline PTX).
"""

from __future__ import annotations

import triton
import triton.language as tl

LINE_BYTES = 128  # the L2's line: what one discard.global.L2 invalidates
LOAD_BLOCK = 4096  # int64 words per program of the load: 32 KiB
DISCARD_BLOCK = 1024  # lines per program of the discard: 128 KiB
MAX_BYTES = 8 << 30  # the load's word offsets are int32


@triton.jit
def load_evict_last_kernel(buf, sink, n_words, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    words = tl.load(buf + offs, mask=offs < n_words, other=0, eviction_policy="evict_last")
    tl.store(sink + tl.program_id(0), tl.sum(words))  # keeps the loads: their values are otherwise unused


@triton.jit
def discard_kernel(buf, sink, BLOCK: tl.constexpr):
    # Lines are 128 bytes of an int8 buffer (a wider element would stride past the buffer's end). The grid
    # covers the buffer exactly (Flush checks its size), so no line needs a mask.
    tl.static_assert(buf.dtype.element_ty == tl.int8, "discard_kernel takes an int8 buffer")
    lines = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ptrs = buf + lines.to(tl.int64) * 128
    done = tl.inline_asm_elementwise(
        "discard.global.L2 [$1], 128;\n\tmov.u32 $0, 0;",
        "=r,l",
        [ptrs],
        dtype=tl.int32,
        is_pure=False,
        pack=1,
    )
    tl.store(sink + tl.program_id(0), tl.sum(done))


class Flush:
    """``Flush(device, nbytes)()`` queues the two kernels on ``device``'s current stream. ``nbytes``: a
    multiple of 128 KiB under 8 GiB. ``buffer``: an int8 CUDA tensor of ``nbytes`` to flush through
    instead of a new one (contiguous, 128-byte aligned; its contents are lost), e.g. a slice of a larger
    allocation in the tests."""

    def __init__(self, device, nbytes: int, buffer=None):
        import torch

        if nbytes <= 0 or nbytes >= MAX_BYTES or nbytes % (LOAD_BLOCK * 8) or nbytes % (DISCARD_BLOCK * LINE_BYTES):
            raise ValueError(f"nbytes: expected a multiple of {DISCARD_BLOCK * LINE_BYTES} under {MAX_BYTES}, "
                             f"got {nbytes}")  # fmt: skip
        if buffer is None:
            buffer = torch.empty(nbytes, dtype=torch.int8, device=device)
        if buffer.dtype != torch.int8 or buffer.numel() != nbytes or not buffer.is_contiguous():
            raise ValueError(f"buffer: expected a contiguous int8 tensor of {nbytes} elements, "
                             f"got {buffer.dtype} {tuple(buffer.shape)}")  # fmt: skip
        if buffer.device.type != "cuda":
            raise ValueError(f"buffer: expected a CUDA tensor, got one on {buffer.device}")
        if buffer.data_ptr() % LINE_BYTES:  # discard.global.L2 takes whole, aligned 128-byte lines
            raise ValueError(f"buffer: expected a {LINE_BYTES}-byte aligned start")
        self.device = buffer.device
        self.bytes = buffer
        self.words = buffer.view(torch.int64)
        self.n_load = nbytes // (LOAD_BLOCK * 8)
        self.n_discard = nbytes // (DISCARD_BLOCK * LINE_BYTES)
        self.sink = torch.empty(max(self.n_load, self.n_discard), dtype=torch.int64, device=self.device)

    def __call__(self) -> None:
        import torch

        with torch.cuda.device(self.device):
            load_evict_last_kernel[(self.n_load,)](self.words, self.sink, self.words.numel(), BLOCK=LOAD_BLOCK)
            discard_kernel[(self.n_discard,)](self.bytes, self.sink, BLOCK=DISCARD_BLOCK)
