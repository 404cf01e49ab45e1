"""The local passes of a distributed call, as closures a ``Step`` runs: packs into the send buffer,
unpacks from the receive buffer and the move of the rank's own block.

Each pass is a Triton kernel (the segment and rows kernels of ``tileflip.kernels.triton.pack``, the 2-D
transpose) or, with the torch backend, its torch reference. ``programs`` > 0 launches it on a capped
grid of that many programs, each looping over its share of the tiles: a pass beside a collective.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from tileflip import tuning
from tileflip.ops import backends
from tileflip.ops import transpose as ops_transpose

if TYPE_CHECKING:
    from tileflip.distributed.pipeline import Buffers
    from tileflip.kernels.triton.pack import Rows, Segments


def pack_kernels():
    """The pack kernels' module, imported on first use (``tileflip.ops.backends.kernels``)."""
    return backends.kernels("triton.pack")


def kernel_backend(x, backend: str) -> str:
    """``triton`` or ``torch`` for tileflip's kernels here (``resolve_backend``'s choice, in its terms)."""
    return "torch" if backends.resolve_backend(x, backend) == "torch" else "triton"


def origin(t: torch.Tensor, offset: int) -> torch.Tensor:
    """A one-element view of t's storage ``offset`` elements past t's first element: a kernel's origin."""
    return t.as_strided((1,), (1,), t.storage_offset() + offset)


def _segments(backend: str, blocked, interleaved, seg: Segments, to_blocks: bool, programs: int = 0) -> None:
    if backend == "torch":
        pack_kernels().reference(blocked, interleaved, seg, to_blocks=to_blocks)
    else:
        pack_kernels().launch(blocked, interleaved, seg, to_blocks=to_blocks, programs=programs)


def _rows(backend: str, dst, src, spec: Rows, programs: int = 0) -> None:
    if backend == "torch":
        pack_kernels().reference_rows(dst, src, spec)
    else:
        pack_kernels().launch_rows(dst, src, spec, programs=programs)


def _looped_transpose(src, dst, programs: int) -> None:
    """Triton's 2-D transpose of ``src`` into ``dst`` on a grid of ``programs`` programs (beside a collective)."""
    config = tuning.triton_config(src.element_size(), src.shape, src.stride(0))
    backends.kernels("triton.transpose").launch_looped(src, dst, config, programs)


def packer(bufs: Buffers, source, at: int, seg: Segments, kernel: str, programs: int):
    """Pack: the segments ``seg`` of ``source`` to the send buffer from element ``at`` on, block by block."""

    def pack():
        _segments(kernel, bufs.typed(bufs.send, at, seg.numel), source, seg, to_blocks=True, programs=programs)

    return pack


def unpacker(bufs: Buffers, target, at: int, seg: Segments, kernel: str, programs: int):
    """Unpack: the receive buffer's blocks from element ``at`` on to the segments ``seg`` of ``target``."""

    def unpack():
        _segments(kernel, bufs.typed(bufs.recv, at, seg.numel), target, seg, to_blocks=False, programs=programs)

    return unpack


def mover(kernel: str, dst, src, spec: Rows, programs: int):
    """The own block's move: rows ``spec`` from ``src`` to ``dst`` (kernel origins)."""

    def own():
        _rows(kernel, dst, src, spec, programs)

    return own


def transpose_pack(local, bufs: Buffers, a: int, m_c: int, at: int, spans: list, backend: str, programs: int):
    """``transpose``'s pack of rows [a, a + m_c) of ``local``: its columns in ``spans``, transposed."""

    # The transpose of the local rows' columns [c0, c1) is (c1 - c0) x m_c: its row ranges are the blocks
    # for each destination in that span, in destination order, so it is the send region as it stands.
    def pack():
        if m_c:
            offset = at
            for c0, c1 in spans:
                dst = bufs.typed(bufs.send, offset, (c1 - c0) * m_c).view(c1 - c0, m_c)
                src = local[a : a + m_c, c0:c1]
                if programs:
                    _looped_transpose(src, dst, programs)
                else:
                    ops_transpose.transpose(src, dst, backend=backend)
                offset += (c1 - c0) * m_c

    return pack


def transpose_unpack(bufs: Buffers, out, at: int, got: list, row_at: list, kernel: str, programs: int):
    """``transpose``'s unpack: each source's (n_me x m) block to its columns of ``out``."""
    # Source i's block is (n_me x m_ic): columns row_at[i] + offset_ic onwards of every row of out.
    n_me, M = out.shape
    seg = pack_kernels().Segments(
        rows=n_me, inner_rows=n_me, stride_outer=0, stride_inner=M,
        starts=tuple(r + off for r, (off, _) in zip(row_at, got)), widths=tuple(m for _, m in got),
    )  # fmt: skip

    def unpack():
        _segments(kernel, bufs.typed(bufs.recv, at, seg.numel), out, seg, to_blocks=False, programs=programs)

    return unpack


def transpose_own(local, out, col: int, n_me: int, row: int, kernel: str, programs: int):
    """``transpose``'s own block: ``local[:, col : col + n_me]`` transposed into ``out``'s columns from ``row``."""
    # The 2-D transpose kernel takes the output's row stride, so it writes there directly (no staging).
    src = local[:, col : col + n_me]
    dst = out[:, row : row + local.shape[0]]

    def own():
        if programs:
            _looped_transpose(src, dst, programs)
        else:
            backends.launch(src, dst, kernel)

    return own
