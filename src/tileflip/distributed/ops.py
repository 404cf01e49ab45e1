"""The public distributed operations, ``transpose``, ``seq_to_head`` and ``head_to_seq``, and the
builders of their plans (``*_plan``: one rank's part once every rank's sizes are known).

A call checks its arguments, exchanges sizes with the other ranks (``group``), builds its plan (the
pieces from ``chunks``, the passes from ``moves``) and runs it (``pipeline``). The collective carries
only the data that changes rank; the rank's own block moves straight to its place.
"""

from __future__ import annotations

import torch

from tileflip.distributed import moves
from tileflip.distributed.chunks import (
    beside,
    chunk_ranges,
    offsets,
    own_splits,
    pick_chunks,
    split_sizes,
    step_count,
    without,
)  # fmt: skip
from tileflip.distributed.group import (
    CHUNKS,
    D0,
    D1,
    D2,
    D3,
    EXTRA,
    agree,
    check_common,
    context,
    meta_row,
    sync_meta,
)  # fmt: skip
from tileflip.distributed.pipeline import Buffers, Plan, Step, execute
from tileflip.ops import permute as ops_permute
from tileflip.plan import merge_dims

__all__ = ["head_to_seq", "seq_to_head", "transpose"]


def _dense(x, first: int) -> bool:
    """True when x's dimensions from ``first`` on form one unit-stride run (what the kernels read as a row)."""
    sizes, strides = merge_dims(tuple(x.shape[first:]), tuple(x.stride()[first:]))
    return len(sizes) == 0 or (len(sizes) == 1 and strides[0] == 1)


# --------------------------------------------------------------------------------------------------
# transpose
# --------------------------------------------------------------------------------------------------


def transpose(local: torch.Tensor, group=None, *, chunks="auto", backend: str = "auto") -> torch.Tensor:
    """The rows of the global transpose that this rank owns, as a new contiguous (n_me, M) tensor.

    ``local`` holds this rank's rows of the global M x N matrix (any count, any strides; N and the
    dtype must be the same on every rank). Rank j receives rows ``[o_j, o_j + n_j)`` of the global
    N x M transpose, where ``n_j`` and ``o_j`` are ``torch.tensor_split(torch.arange(N), P)``'s: the
    first ``N % P`` ranks get one row more. A collective call: every rank of ``group`` must call it.
    ``backend`` picks the local kernels (``"auto"``, ``"triton"`` or ``"torch"``, as for
    ``tileflip.transpose``); ``chunks`` (a positive int or ``"auto"``) cuts the exchange into that many
    pipelined all-to-alls.
    """
    ctx = context(group, "transpose")

    def check():
        check_common(ctx, local, "local", 2, chunks, backend)
        return meta_row(local, chunks, (local.shape[0], local.shape[1], 0, 0))

    table = sync_meta(ctx, check)
    agree(ctx, table, D1, "the number of columns of local (N)")
    rows, N = [row[D0] for row in table], table[0][D1]
    k = pick_chunks(table[0][CHUNKS], max(rows) * N * local.element_size(), N * local.element_size())
    return execute(ctx, transpose_plan(ctx.size, ctx.rank, local, rows, N, k, backend))


def transpose_plan(P: int, me: int, local, rows: list, N: int, chunks: int, backend: str) -> Plan:
    """Rank ``me``'s part of ``transpose`` once every rank's row count (``rows``) is known."""
    M = sum(rows)
    n = split_sizes(N, P)
    n_at, row_at = offsets(n), offsets(rows)
    out = torch.empty((n[me], M), dtype=local.dtype, device=local.device)
    bufs = Buffers((N - n[me]) * rows[me], n[me] * (M - rows[me]), local.dtype, local.device)
    kernel = moves.kernel_backend(local, backend)
    capped = beside(P, kernel, local.device)
    count = step_count(P, chunks)
    # The columns bound for the other ranks: those before this rank's and those after, in rank order.
    spans = [(c0, c1) for c0, c1 in ((0, n_at[me]), (n_at[me] + n[me], N)) if c1 > c0]
    pieces = [chunk_ranges(m, chunks) for m in rows]  # pieces[i][c]: (offset, size) of source i's chunk c
    steps, send_at, recv_at = [], 0, 0
    for c in range(count):
        (a, m_c), got = pieces[me][c], [pieces[i][c] for i in range(P)]
        out_splits = own_splits([n[me] * m for _, m in got], me)
        steps.append(Step(
            in_splits=own_splits([n_j * m_c for n_j in n], me), out_splits=out_splits,
            send_at=send_at, recv_at=recv_at,
            pack=moves.transpose_pack(local, bufs, a, m_c, send_at, spans, backend, capped * (c > 0)),
            unpack=moves.transpose_unpack(bufs, out, recv_at, without(got, me), without(row_at, me), kernel,
                                          capped * (c < count - 1)),
        ))  # fmt: skip
        send_at += (N - n[me]) * m_c
        recv_at += sum(out_splits)
    own = moves.transpose_own(local, out, n_at[me], n[me], row_at[me], kernel, capped) if n[me] and rows[me] else None
    return Plan(out, bufs, steps, own, n[me] * rows[me], [n_j * rows[me] for n_j in n], [n[me] * m for m in rows])


# --------------------------------------------------------------------------------------------------
# seq_to_head and head_to_seq
# --------------------------------------------------------------------------------------------------


def seq_to_head(x: torch.Tensor, group=None, *, chunks="auto", backend: str = "auto") -> torch.Tensor:
    """Ulysses resharding: this rank's sequence shard of every head, (B, s_r, H, D), to the whole
    sequence of its head group, a new contiguous (B, S, H/P, D) tensor.

    Rank j receives heads ``[j * H/P, (j + 1) * H/P)``; the sequence is the ranks' shards in rank order
    (S is their sum; shards may be uneven). B, H, D and the dtype must agree across ranks and H must be
    divisible by the group's size. An x whose (H, D) row is not one unit-stride run costs one extra
    local pass. A collective call; ``chunks`` and ``backend`` as for ``transpose``.
    """
    ctx = context(group, "seq_to_head")

    def check():
        check_common(ctx, x, "x", 4, chunks, backend)
        return meta_row(x, chunks, tuple(x.shape))

    table = sync_meta(ctx, check)
    for field, what in ((D0, "the batch size B"), (D2, "the number of heads H"), (D3, "the head size D")):
        agree(ctx, table, field, what)
    H = table[0][D2]
    if H % ctx.size:
        raise ValueError(
            f"tileflip.distributed.seq_to_head: x has H={H} heads, which the group's {ctx.size} ranks cannot share "
            f"evenly; H must be divisible by {ctx.size}"
        )
    seq = [row[D1] for row in table]
    k = pick_chunks(table[0][CHUNKS], max(seq) * x[:, :1].numel() * x.element_size(),
                    H // ctx.size * x.shape[3] * x.element_size())  # fmt: skip
    return execute(ctx, seq_to_head_plan(ctx.size, ctx.rank, x, seq, k, backend))


def seq_to_head_plan(P: int, me: int, x, seq: list, chunks: int, backend: str) -> Plan:
    """Rank ``me``'s part of ``seq_to_head`` once every rank's shard length (``seq``) is known."""
    if not _dense(x, 2):
        x = ops_permute.permute(x, (0, 1, 2, 3), backend=backend)
    B, s_me, H, D = x.shape
    h = H // P
    S, hd = sum(seq), h * D
    out = torch.empty((B, S, h, D), dtype=x.dtype, device=x.device)
    bufs = Buffers(B * s_me * hd * (P - 1), B * (S - s_me) * hd, x.dtype, x.device)
    kernel, capped, count, seq_at, pieces, others, Segments = _heads_setup(P, me, x, seq, chunks, backend)
    steps, send_at, recv_at = [], 0, 0
    for c in range(count):
        (a, s_c), got = pieces[me][c], [pieces[i][c] for i in range(P)]
        # Pack: rows (b, s) of x's chunk, H * D values each; destination j's heads are the segment
        # [j * hd, (j + 1) * hd). Unpack: source i's (B, s_ic, h, D) block is, for each b, one run of
        # s_ic * hd values of out at sequence offset seq_at[i] + offset_ic.
        pack = Segments(
            rows=B * s_c, inner_rows=s_c, stride_outer=x.stride(0), stride_inner=x.stride(1),
            starts=tuple(j * hd for j in others), widths=(hd,) * (P - 1),
        )  # fmt: skip
        unpack = Segments(
            rows=B, inner_rows=B, stride_outer=0, stride_inner=S * hd,
            starts=tuple((seq_at[i] + got[i][0]) * hd for i in others), widths=tuple(got[i][1] * hd for i in others),
        )  # fmt: skip
        steps.append(Step(
            in_splits=own_splits([B * s_c * hd] * P, me), out_splits=own_splits([B * s * hd for _, s in got], me),
            send_at=send_at, recv_at=recv_at,
            pack=moves.packer(bufs, x[:, a:], send_at, pack, kernel, capped * (c > 0)),
            unpack=moves.unpacker(bufs, out, recv_at, unpack, kernel, capped * (c < count - 1)),
        ))  # fmt: skip
        send_at += pack.numel
        recv_at += unpack.numel
    # Own block: rows (b, s) of x's heads [me * h, (me + 1) * h) to out's rows (b, seq_at[me] + s).
    spec = moves.pack_kernels().Rows(rows=B * s_me, inner_rows=s_me, width=hd, src_outer=x.stride(0),
                                     src_inner=x.stride(1), dst_outer=S * hd, dst_inner=hd)  # fmt: skip
    own = (moves.mover(kernel, moves.origin(out, seq_at[me] * hd), moves.origin(x, me * hd), spec, capped)
           if spec.numel else None)  # fmt: skip
    return Plan(out, bufs, steps, own, spec.numel, [B * s_me * hd] * P, [B * s * hd for s in seq])


def head_to_seq(
    x: torch.Tensor, group=None, *, seq_len: int | None = None, chunks="auto", backend: str = "auto"
) -> torch.Tensor:
    """The inverse of ``seq_to_head``: this rank's head group over the whole sequence, (B, S, H/P, D),
    to its sequence shard of every head, a new contiguous (B, seq_len, H, D) tensor.

    ``seq_len`` is this rank's shard length (the ``s_r`` it gave ``seq_to_head``); by default the
    sequence is split as ``torch.tensor_split`` splits it. The ranks' ``seq_len`` must sum to S, and
    B, S, H/P, D and the dtype must agree. An x whose (S, H/P, D) block per batch is not one dense run
    costs one extra local pass. A collective call; ``chunks`` and ``backend`` as for ``transpose``.
    """
    ctx = context(group, "head_to_seq")

    def check():
        check_common(ctx, x, "x", 4, chunks, backend)
        own = split_sizes(x.shape[1], ctx.size)[ctx.rank] if seq_len is None else seq_len
        if type(own) is not int or own < 0:
            raise ValueError(f"seq_len must be a non-negative int or None, got {seq_len!r}")
        return meta_row(x, chunks, tuple(x.shape), own)

    table = sync_meta(ctx, check)
    for field, what in ((D0, "the batch size B"), (D1, "the sequence length S"), (D2, "the heads per rank H/P"),
                        (D3, "the head size D")):  # fmt: skip
        agree(ctx, table, field, what)
    seq = [row[EXTRA] for row in table]
    if sum(seq) != table[0][D1]:
        raise ValueError(
            f"tileflip.distributed.head_to_seq: the ranks' seq_len {seq} sum to {sum(seq)}, but x has "
            f"S={table[0][D1]}; they must sum to S"
        )
    k = pick_chunks(table[0][CHUNKS], x.numel() * x.element_size(), x.shape[2] * x.shape[3] * x.element_size())
    return execute(ctx, head_to_seq_plan(ctx.size, ctx.rank, x, seq, k, backend))


def head_to_seq_plan(P: int, me: int, x, seq: list, chunks: int, backend: str) -> Plan:
    """Rank ``me``'s part of ``head_to_seq`` once every rank's shard length (``seq``) is known."""
    if not _dense(x, 1):
        x = ops_permute.permute(x, (0, 1, 2, 3), backend=backend)
    B, S, h, D = x.shape
    H, hd = P * h, h * D
    out = torch.empty((B, seq[me], H, D), dtype=x.dtype, device=x.device)
    bufs = Buffers(B * (S - seq[me]) * hd, B * seq[me] * hd * (P - 1), x.dtype, x.device)
    kernel, capped, count, seq_at, pieces, others, Segments = _heads_setup(P, me, x, seq, chunks, backend)
    steps, send_at, recv_at = [], 0, 0
    for c in range(count):
        (a, s_c), sent = pieces[me][c], [pieces[i][c] for i in range(P)]
        # Pack: per batch row of x, destination j's sequence chunk is one run of s_jc * hd values.
        pack = Segments(
            rows=B, inner_rows=B, stride_outer=0, stride_inner=x.stride(0),
            starts=tuple((seq_at[j] + sent[j][0]) * hd for j in others), widths=tuple(sent[j][1] * hd for j in others),
        )  # fmt: skip
        # Received: one (B, s_c, h, D) block per source head group; in out's rows (b, s) of H * D values,
        # head group i is the segment [i * hd, (i + 1) * hd).
        unpack = Segments(
            rows=B * s_c, inner_rows=s_c, stride_outer=seq[me] * H * D, stride_inner=H * D,
            starts=tuple(i * hd for i in others), widths=(hd,) * (P - 1),
        )  # fmt: skip
        steps.append(Step(
            in_splits=own_splits([B * s * hd for _, s in sent], me), out_splits=own_splits([B * s_c * hd] * P, me),
            send_at=send_at, recv_at=recv_at, pack=moves.packer(bufs, x, send_at, pack, kernel, capped * (c > 0)),
            unpack=moves.unpacker(bufs, out.view(-1)[a * H * D :], recv_at, unpack, kernel,
                                  capped * (c < count - 1)),
        ))  # fmt: skip
        send_at += pack.numel
        recv_at += unpack.numel
    # Own block: x's rows (b, seq_at[me] + s) of hd values to the segment [me * hd, (me + 1) * hd) of out's
    # rows (b, s).
    spec = moves.pack_kernels().Rows(rows=B * seq[me], inner_rows=seq[me], width=hd, src_outer=x.stride(0),
                                     src_inner=hd, dst_outer=seq[me] * H * D, dst_inner=H * D)  # fmt: skip
    own = (moves.mover(kernel, moves.origin(out, me * hd), moves.origin(x, seq_at[me] * hd), spec, capped)
           if spec.numel else None)  # fmt: skip
    return Plan(out, bufs, steps, own, spec.numel, [B * s * hd for s in seq], [B * seq[me] * hd] * P)


def _heads_setup(P: int, me: int, x, seq: list, chunks: int, backend: str) -> tuple:
    """What both head reshards plan with: the pack kernel's backend, whether it runs on a capped grid, the
    step count, each rank's sequence offset and chunk pieces, the other ranks, and the pack description."""
    kernel = moves.kernel_backend(x, backend)
    pieces = [chunk_ranges(s, chunks) for s in seq]
    return (kernel, beside(P, kernel, x.device), step_count(P, chunks), offsets(seq), pieces,
            without(list(range(P)), me), moves.pack_kernels().Segments)  # fmt: skip
