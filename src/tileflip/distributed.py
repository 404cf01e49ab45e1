"""Transposes and sequence/head resharding across the ranks of a ``torch.distributed`` group.

Once a tensor is split over GPUs, a transpose becomes an all-to-all. ``torch.distributed`` moves the
data (NCCL on GPUs, gloo on CPUs); tileflip packs before the collective and unpacks after it, one pass
each, with its own kernels:

* ``transpose(local, group)``: the global M x N matrix is split by rows over the group, unevenly if
  need be (each rank passes only its own rows; the row counts are exchanged). The result is the
  global N x M transpose split by rows as ``torch.tensor_split(torch.arange(N), P)`` splits them.
  Pack: ``tileflip.transpose`` of the local rows, whose row ranges are exactly the per-destination
  blocks. Unpack: the blocks received, one (n_me x m_i) per source, placed at their columns of the
  (n_me x M) result by the segment kernel of ``tileflip.kernels.triton_pack``.
* ``seq_to_head(x, group)``: DeepSpeed-Ulysses resharding of (B, S/P, H, D) to (B, S, H/P, D).
  Pack: ``tileflip.permute`` of x seen as (B, s, P, H/P, D) to (P, B, s, H/P, D). Unpack: the segment
  kernel places each source's (B, s_i, H/P, D) block at its sequence offset (shards may be uneven).
* ``head_to_seq(x, group, seq_len=...)``: the inverse. Pack: the segment kernel cuts each
  destination's sequence range out of x. Unpack: the segment kernel interleaves the head groups.

Every call starts with one small ``all_gather`` of each rank's sizes and dtype over a CPU (gloo)
channel: the group itself when it has a CPU backend, otherwise a gloo group over the same ranks created
on first use. It gives every rank the split sizes, and it lets every rank raise the same ``ValueError``
before any data moves when the ranks disagree (columns, batch, heads, dtype, operation, ``chunks``) or
when one of them passed arguments that its own checks refused.

The collective moves bytes: each buffer travels as int64, int32 or uint8 (the widest dividing every
split), so every dtype tileflip carries crosses every backend, including those gloo refuses (float8,
int16, uint16, uint32, uint64: "Invalid scalar type").

``chunks=K`` cuts the work into K all-to-alls. On CUDA the packing of chunk k+1 runs on a side stream
while the collective of chunk k is in flight (``async_op=True``), and the unpacking of chunk k while
the collective of chunk k+1 is; results are the same bits for every K.

Faults: a collective that fails (a peer that raised or exited, one that never arrived and let the
group's timeout pass) raises ``DistributedError`` naming the operation, the step and the rank, with
the backend's exception chained as ``__cause__``. With gloo this happens within the group's timeout
(a dead peer's closed connection is noticed at once).

With NCCL, a collective that never completes is left to the watchdog thread, which by default
(``TORCH_NCCL_ASYNC_ERROR_HANDLING=3``) tears the process down once the timeout passes: no exception
reaches Python. To get one, set ``TORCH_NCCL_BLOCKING_WAIT=1`` in the environment before the process
group is created, and pass ``timeout=datetime.timedelta(...)`` to ``init_process_group`` (NCCL's
default is 10 minutes). Every wait then blocks the host until its collective completes or the timeout
passes and raises ``torch.distributed.DistBackendError`` (wrapped here), and the watchdog no longer
kills the process (blocking wait turns async error handling off). The price is a host that waits on
each collective. After such an error the communicator is unusable: destroy the process group. A peer
that fails before reaching a tileflip call is caught either way: the sizes exchange runs on gloo.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from tileflip import dtypes, ops, plan

if TYPE_CHECKING:
    from tileflip.kernels.triton_pack import Segments

__all__ = ["DistributedError", "head_to_seq", "seq_to_head", "transpose"]

BACKENDS = ("auto", "triton", "torch")


class DistributedError(RuntimeError):
    """A collective of a tileflip distributed operation failed; the backend's error is ``__cause__``."""


# --------------------------------------------------------------------------------------------------
# Group and metadata exchange
# --------------------------------------------------------------------------------------------------

_OPS = ("transpose", "seq_to_head", "head_to_seq")
_DTYPE_NAMES = sorted(str(d).removeprefix("torch.") for d in dtypes.SUPPORTED)
# One metadata row per rank: operation, status (1 = its own checks refused its arguments), dtype code,
# chunks, four sizes and one extra value; the same length for every operation, so that ranks calling
# different operations still meet in one well-formed all_gather and can be told so.
OP, STATUS, DTYPE, CHUNKS, D0, D1, D2, D3, EXTRA = range(9)
_META_LEN = 9

_side_groups: dict = {}
_side_streams: dict = {}


@dataclass(frozen=True)
class _Ctx:
    op: str
    group: object
    meta: object  # a group with a CPU backend, for the sizes exchange
    rank: int
    size: int
    devices: frozenset  # device types the group's data backend carries
    config: str


def _context(group, op: str) -> _Ctx:
    if not dist.is_available() or not dist.is_initialized():
        raise ValueError("group: torch.distributed is not initialized; call torch.distributed.init_process_group first")
    group = dist.group.WORLD if group is None else group
    rank = dist.get_rank(group)
    if rank < 0:
        raise ValueError(f"group: this process (global rank {dist.get_rank()}) is not a member of the group")
    config = dist.get_backend_config(group)
    devices = frozenset(part.split(":")[0] for part in config.split(",") if ":" in part)
    meta = group if "cpu" in devices else _side_group(group)
    return _Ctx(op, group, meta, rank, dist.get_world_size(group), devices, config)


def _side_group(group):
    """A gloo group over the same ranks, for the sizes exchange of a group without a CPU backend (NCCL):
    a host-side exchange needs no device copies and does not wait for the device's queue."""
    if group not in _side_groups:
        _side_groups[group] = dist.new_group(
            dist.get_process_group_ranks(group), timeout=_timeout(group), backend="gloo",
            use_local_synchronization=True,
        )  # fmt: skip
    return _side_groups[group]


def _timeout(group) -> datetime.timedelta:
    try:
        return group._get_backend(torch.device("cuda")).options._timeout
    except (AttributeError, RuntimeError):  # private API: fall back to NCCL's default timeout
        return datetime.timedelta(minutes=10)


def _guard(ctx: _Ctx, step: str, fn: Callable):
    """Run a collective step; a backend failure becomes a DistributedError that keeps it as the cause."""
    try:
        return fn()
    except RuntimeError as e:  # DistBackendError, DistNetworkError and gloo's errors are RuntimeErrors
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DistributedError(
            f"tileflip.distributed.{ctx.op}: the {step} failed on rank {ctx.rank} of {ctx.size} "
            f"(backend {ctx.config}): {type(e).__name__}: {first}. Likely causes: another rank raised, exited or "
            "crashed before or during this call, never reached it (this rank then waits for the group's timeout), "
            "or called a different collective. The backend's error is chained below."
        ) from e


def _exchange(ctx: _Ctx, row: list) -> list:
    """All ranks' metadata rows, in group rank order."""
    mine = torch.tensor(row, dtype=torch.int64)
    rows = [torch.empty_like(mine) for _ in range(ctx.size)]
    _guard(ctx, "sizes exchange (all_gather)", lambda: dist.all_gather(rows, mine, group=ctx.meta))
    return [r.tolist() for r in rows]


def _ranks_by_value(table: list, field: int) -> dict:
    groups: dict = {}
    for rank, row in enumerate(table):
        groups.setdefault(row[field], []).append(rank)
    return groups


def _agree(ctx: _Ctx, table: list, field: int, what: str, show=str) -> None:
    groups = _ranks_by_value(table, field)
    if len(groups) > 1:
        parts = "; ".join(f"{show(v)} on rank{'s' if len(r) > 1 else ''} {r}" for v, r in groups.items())
        raise ValueError(
            f"tileflip.distributed.{ctx.op}: {what} differs across ranks: {parts}. Every rank must pass the same; "
            "no data was moved"
        )


def _sync_meta(ctx: _Ctx, check: Callable[[], list]) -> list:
    """Check the local arguments, exchange metadata, and raise the same way on every rank if any rank's
    arguments were refused or the operations differ. Returns the table of rows."""
    error = None
    try:
        row = [_OPS.index(ctx.op) + 1, 0, *check()]
    except (TypeError, ValueError) as e:
        error = e
        row = [_OPS.index(ctx.op) + 1, 1] + [0] * (_META_LEN - 2)
    table = _exchange(ctx, row)
    _agree(ctx, table, OP, "the operation called", lambda v: f"tileflip.distributed.{_OPS[v - 1]}")
    refused = [r for r, row in enumerate(table) if row[STATUS]]
    if error is not None:
        raise error
    if refused:
        raise ValueError(
            f"tileflip.distributed.{ctx.op}: rank{'s' if len(refused) > 1 else ''} {refused} refused their "
            "arguments (the error raised there says why); no data was moved"
        )
    _agree(ctx, table, DTYPE, "the dtype", lambda v: f"torch.{_DTYPE_NAMES[v]}")
    _agree(ctx, table, CHUNKS, "chunks")
    return table


def _check_common(ctx: _Ctx, x, arg: str, ndim: int, chunks, backend) -> None:
    ops.check_input(x, ndim=ndim, arg=arg)
    if x.device.type not in ctx.devices:
        raise ValueError(f"{arg} is on {x.device}, but the group's backend ({ctx.config}) does not carry it")
    if type(chunks) is not int or chunks < 1:
        raise ValueError(f"chunks must be a positive int, got {chunks!r}")
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    ops.resolve_backend(x, backend)


def _meta_row(x, chunks: int, sizes: tuple, extra: int = 0) -> list:
    return [_DTYPE_NAMES.index(str(x.dtype).removeprefix("torch.")), chunks, *sizes, extra]


# --------------------------------------------------------------------------------------------------
# Split arithmetic
# --------------------------------------------------------------------------------------------------


def split_sizes(total: int, parts: int) -> list:
    """Sizes of ``torch.tensor_split`` of ``total`` items into ``parts``: the first total % parts get one more."""
    q, r = divmod(total, parts)
    return [q + (1 if i < r else 0) for i in range(parts)]


def _offsets(sizes) -> list:
    out, acc = [], 0
    for s in sizes:
        out.append(acc)
        acc += s
    return out


def _chunk_ranges(total: int, chunks: int) -> list:
    """(offset, size) of each of ``chunks`` pieces of ``total`` (tensor_split's rule)."""
    sizes = split_sizes(total, chunks)
    return list(zip(_offsets(sizes), sizes))


# --------------------------------------------------------------------------------------------------
# The collective pipeline
# --------------------------------------------------------------------------------------------------


@dataclass
class Step:
    """One all-to-all: splits in elements of the data's dtype, the byte ranges of the two buffers that
    it uses, and the pack before it and unpack after it."""

    in_splits: list
    out_splits: list
    send_at: int  # element offset of this step's send region in the send buffer
    recv_at: int
    pack: Callable
    unpack: Callable


class Buffers:
    """The send and receive buffers as bytes, with typed views of a step's regions."""

    def __init__(self, send_numel: int, recv_numel: int, dtype, device):
        self.dtype = dtype
        self.es = torch.empty((), dtype=dtype, device="meta").element_size()
        self.send = torch.empty(send_numel * self.es, dtype=torch.uint8, device=device)
        self.recv = torch.empty(recv_numel * self.es, dtype=torch.uint8, device=device)

    def typed(self, buf, at: int, numel: int) -> torch.Tensor:
        return buf[at * self.es : (at + numel) * self.es].view(self.dtype)

    def carriers(self, step: Step):
        """(send, recv, in_splits, out_splits) for the collective, in the widest carrier type that divides
        every split and offset: any dtype crosses any backend as these integers."""
        counts = [*step.in_splits, *step.out_splits, step.send_at, step.recv_at]
        width = next(w for w in (8, 4, 1) if all(c * self.es % w == 0 for c in counts))
        carrier = {8: torch.int64, 4: torch.int32, 1: torch.uint8}[width]

        def region(buf, at, splits):
            return buf[at * self.es : (at + sum(splits)) * self.es].view(carrier)

        return (region(self.send, step.send_at, step.in_splits), region(self.recv, step.recv_at, step.out_splits),
                [s * self.es // width for s in step.in_splits],
                [s * self.es // width for s in step.out_splits])  # fmt: skip


def _all_to_all(ctx: _Ctx, bufs: Buffers, step: Step, index: int, async_op: bool):
    send, recv, ins, outs = bufs.carriers(step)
    return _guard(
        ctx, f"all_to_all_single (chunk {index})",
        lambda: dist.all_to_all_single(recv, send, outs, ins, group=ctx.group, async_op=async_op),
    )  # fmt: skip


def _side_stream(device):
    if device not in _side_streams:
        _side_streams[device] = torch.cuda.Stream(device)
    return _side_streams[device]


@dataclass
class Plan:
    """Everything one call does once the sizes are known: its result, its buffers and its steps (the
    benchmark times a step's ``pack`` and ``unpack`` alone from here)."""

    out: torch.Tensor
    bufs: Buffers
    steps: list


def _execute(ctx: _Ctx, plan: Plan) -> torch.Tensor:
    device = plan.out.device
    if device.type == "cuda" and device.index != torch.cuda.current_device():
        with torch.cuda.device(device):  # the kernels launch on the current device's stream
            _run(ctx, plan.bufs, plan.steps, device)
    else:
        _run(ctx, plan.bufs, plan.steps, device)
    return plan.out


def _run(ctx: _Ctx, bufs: Buffers, steps: list, device) -> None:
    """Pack, exchange and unpack every step; with several steps on CUDA, packs run on a side stream so
    that each overlaps the previous step's collective."""
    overlap = device.type == "cuda" and len(steps) > 1
    if overlap:
        main, side = torch.cuda.current_stream(device), _side_stream(device)
        side.wait_stream(main)  # the input and the buffers were produced on the main stream
    works = []
    for i, step in enumerate(steps):
        if overlap:
            with torch.cuda.stream(side):
                step.pack()
            main.wait_stream(side)  # the collective is ordered after the main stream
        else:
            step.pack()
        works.append(_all_to_all(ctx, bufs, step, i, async_op=len(steps) > 1))
    for i, (step, work) in enumerate(zip(steps, works)):
        if work is not None:
            _guard(ctx, f"all_to_all_single (chunk {i}) wait", work.wait)
        step.unpack()


def _pack_kernels():
    # Imported on first use: importing triton costs ~1 s, which `import tileflip.distributed` should not.
    from tileflip.kernels import triton_pack

    return triton_pack


def _segments(backend: str, blocked, interleaved, seg: Segments, to_blocks: bool) -> None:
    if backend == "torch":
        _pack_kernels().reference(blocked, interleaved, seg, to_blocks=to_blocks)
    else:
        _pack_kernels().launch(blocked, interleaved, seg, to_blocks=to_blocks)


def _kernel_backend(x, backend: str) -> str:
    """``triton`` or ``torch`` for the segment kernel (ops.resolve_backend's choice, in its terms)."""
    return "torch" if ops.resolve_backend(x, backend) == "torch" else "triton"


# --------------------------------------------------------------------------------------------------
# transpose
# --------------------------------------------------------------------------------------------------


def transpose(local: torch.Tensor, group=None, *, chunks: int = 1, backend: str = "auto") -> torch.Tensor:
    """The rows of the global transpose that this rank owns, as a new contiguous (n_me, M) tensor.

    ``local`` holds this rank's rows of the global M x N matrix (any count, any strides; N and the
    dtype must be the same on every rank). Rank j receives rows ``[o_j, o_j + n_j)`` of the global
    N x M transpose, where ``n_j`` and ``o_j`` are ``torch.tensor_split(torch.arange(N), P)``'s: the
    first ``N % P`` ranks get one row more. A collective call: every rank of ``group`` must call it.
    ``backend`` picks the local kernels (``"auto"``, ``"triton"`` or ``"torch"``, as for
    ``tileflip.transpose``); ``chunks`` cuts the exchange into that many pipelined all-to-alls.
    """
    ctx = _context(group, "transpose")

    def check():
        _check_common(ctx, local, "local", 2, chunks, backend)
        return _meta_row(local, chunks, (local.shape[0], local.shape[1], 0, 0))

    table = _sync_meta(ctx, check)
    _agree(ctx, table, D1, "the number of columns of local (N)")
    rows = [row[D0] for row in table]
    return _execute(ctx, transpose_plan(ctx.size, ctx.rank, local, rows, table[0][D1], chunks, backend))


def transpose_plan(P: int, me: int, local, rows: list, N: int, chunks: int, backend: str) -> Plan:
    """Rank ``me``'s part of ``transpose`` once every rank's row count (``rows``) is known."""
    M = sum(rows)
    n = split_sizes(N, P)
    row_at = _offsets(rows)
    out = torch.empty((n[me], M), dtype=local.dtype, device=local.device)
    bufs = Buffers(N * rows[me], n[me] * M, local.dtype, local.device)
    kernel = _kernel_backend(local, backend)
    pieces = [_chunk_ranges(m, chunks) for m in rows]  # pieces[i][c]: (offset, size) of source i's chunk c
    steps, send_at, recv_at = [], 0, 0
    for c in range(chunks):
        (a, m_c), got = pieces[me][c], [pieces[i][c] for i in range(P)]
        steps.append(Step(
            in_splits=[n_j * m_c for n_j in n], out_splits=[n[me] * m for _, m in got],
            send_at=send_at, recv_at=recv_at,
            pack=_transpose_pack(local, bufs, a, m_c, send_at, N, backend),
            unpack=_transpose_unpack(bufs, out, recv_at, got, row_at, kernel),
        ))  # fmt: skip
        send_at += N * m_c
        recv_at += n[me] * sum(m for _, m in got)
    return Plan(out, bufs, steps)


def _transpose_pack(local, bufs: Buffers, a: int, m_c: int, at: int, N: int, backend: str):
    # The transpose of the local rows is N x m_c: its row ranges are the blocks for each destination,
    # in destination order, so it is the send buffer as it stands.
    def pack():
        if m_c:
            ops.transpose(local[a : a + m_c], bufs.typed(bufs.send, at, N * m_c).view(N, m_c), backend=backend)

    return pack


def _transpose_unpack(bufs: Buffers, out, at: int, got: list, row_at: list, kernel: str):
    # Source i's block is (n_me x m_ic): columns row_at[i] + offset_ic onwards of every row of out.
    n_me, M = out.shape
    seg = _pack_kernels().Segments(
        rows=n_me, inner_rows=n_me, stride_outer=0, stride_inner=M,
        starts=tuple(row_at[i] + off for i, (off, _) in enumerate(got)), widths=tuple(m for _, m in got),
    )  # fmt: skip

    def unpack():
        _segments(kernel, bufs.typed(bufs.recv, at, seg.numel), out, seg, to_blocks=False)

    return unpack


# --------------------------------------------------------------------------------------------------
# seq_to_head and head_to_seq
# --------------------------------------------------------------------------------------------------


def seq_to_head(x: torch.Tensor, group=None, *, chunks: int = 1, backend: str = "auto") -> torch.Tensor:
    """Ulysses resharding: this rank's sequence shard of every head, (B, s_r, H, D), to the whole
    sequence of its head group, a new contiguous (B, S, H/P, D) tensor.

    Rank j receives heads ``[j * H/P, (j + 1) * H/P)``; the sequence is the ranks' shards in rank order
    (S is their sum; shards may be uneven). B, H, D and the dtype must agree across ranks and H must be
    divisible by the group's size. A collective call; ``chunks`` and ``backend`` as for ``transpose``.
    """
    ctx = _context(group, "seq_to_head")

    def check():
        _check_common(ctx, x, "x", 4, chunks, backend)
        return _meta_row(x, chunks, tuple(x.shape))

    table = _sync_meta(ctx, check)
    for field, what in ((D0, "the batch size B"), (D2, "the number of heads H"), (D3, "the head size D")):
        _agree(ctx, table, field, what)
    H = table[0][D2]
    if H % ctx.size:
        raise ValueError(
            f"tileflip.distributed.seq_to_head: x has H={H} heads, which the group's {ctx.size} ranks cannot share "
            f"evenly; H must be divisible by {ctx.size}"
        )
    return _execute(ctx, seq_to_head_plan(ctx.size, ctx.rank, x, [row[D1] for row in table], chunks, backend))


def seq_to_head_plan(P: int, me: int, x, seq: list, chunks: int, backend: str) -> Plan:
    """Rank ``me``'s part of ``seq_to_head`` once every rank's shard length (``seq``) is known."""
    B, _, H, D = x.shape
    h = H // P
    S, hd = sum(seq), h * D
    out = torch.empty((B, S, h, D), dtype=x.dtype, device=x.device)
    bufs = Buffers(x.numel(), out.numel(), x.dtype, x.device)
    kernel = _kernel_backend(x, backend)
    seq_at = _offsets(seq)
    pieces = [_chunk_ranges(s, chunks) for s in seq]
    steps, send_at, recv_at = [], 0, 0
    for c in range(chunks):
        (a, s_c), got = pieces[me][c], [pieces[i][c] for i in range(P)]
        unpack = _pack_kernels().Segments(
            rows=B, inner_rows=B, stride_outer=0, stride_inner=S * hd,
            starts=tuple((seq_at[i] + off) * hd for i, (off, _) in enumerate(got)),
            widths=tuple(s * hd for _, s in got),
        )  # fmt: skip
        steps.append(Step(
            in_splits=[B * s_c * hd] * P, out_splits=[B * s * hd for _, s in got], send_at=send_at, recv_at=recv_at,
            pack=_heads_pack(x, bufs, a, s_c, send_at, P, backend),
            unpack=_unpacker(bufs, out, recv_at, unpack, kernel),
        ))  # fmt: skip
        send_at += P * B * s_c * hd
        recv_at += unpack.numel
    return Plan(out, bufs, steps)


def _heads_pack(x, bufs: Buffers, a: int, s_c: int, at: int, P: int, backend: str):
    # (B, s, H, D) seen as (B, s, P, h, D), permuted to (P, B, s, h, D): one block per destination.
    B, _, H, D = x.shape

    def pack():
        if s_c:
            src = x[:, a : a + s_c].unflatten(2, (P, H // P))
            dst = bufs.typed(bufs.send, at, x[:, a : a + s_c].numel()).view(P, B, s_c, H // P, D)
            ops.permute(src, (2, 0, 1, 3, 4), dst, backend=backend)

    return pack


def _unpacker(bufs: Buffers, target, at: int, seg: Segments, kernel: str):
    def unpack():
        _segments(kernel, bufs.typed(bufs.recv, at, seg.numel), target, seg, to_blocks=False)

    return unpack


def head_to_seq(
    x: torch.Tensor, group=None, *, seq_len: int | None = None, chunks: int = 1, backend: str = "auto"
) -> torch.Tensor:
    """The inverse of ``seq_to_head``: this rank's head group over the whole sequence, (B, S, H/P, D),
    to its sequence shard of every head, a new contiguous (B, seq_len, H, D) tensor.

    ``seq_len`` is this rank's shard length (the ``s_r`` it gave ``seq_to_head``); by default the
    sequence is split as ``torch.tensor_split`` splits it. The ranks' ``seq_len`` must sum to S, and
    B, S, H/P, D and the dtype must agree. An x whose (S, H/P, D) block per batch is not one dense run
    costs one extra local pass. A collective call; ``chunks`` and ``backend`` as for ``transpose``.
    """
    ctx = _context(group, "head_to_seq")

    def check():
        _check_common(ctx, x, "x", 4, chunks, backend)
        own = split_sizes(x.shape[1], ctx.size)[ctx.rank] if seq_len is None else seq_len
        if type(own) is not int or own < 0:
            raise ValueError(f"seq_len must be a non-negative int or None, got {seq_len!r}")
        return _meta_row(x, chunks, tuple(x.shape), own)

    table = _sync_meta(ctx, check)
    for field, what in ((D0, "the batch size B"), (D1, "the sequence length S"), (D2, "the heads per rank H/P"),
                        (D3, "the head size D")):  # fmt: skip
        _agree(ctx, table, field, what)
    seq = [row[EXTRA] for row in table]
    if sum(seq) != table[0][D1]:
        raise ValueError(
            f"tileflip.distributed.head_to_seq: the ranks' seq_len {seq} sum to {sum(seq)}, but x has "
            f"S={table[0][D1]}; they must sum to S"
        )
    return _execute(ctx, head_to_seq_plan(ctx.size, ctx.rank, x, seq, chunks, backend))


def _dense_rows(x) -> bool:
    """True when each batch element of x, (S, h, D), is one unit-stride run (what the pack kernel reads)."""
    sizes, strides = plan.merge_dims(tuple(x.shape[1:]), tuple(x.stride()[1:]))
    return len(sizes) == 0 or (len(sizes) == 1 and strides[0] == 1)


def head_to_seq_plan(P: int, me: int, x, seq: list, chunks: int, backend: str) -> Plan:
    """Rank ``me``'s part of ``head_to_seq`` once every rank's shard length (``seq``) is known."""
    B, _, h, D = x.shape
    H, hd = P * h, h * D
    if not _dense_rows(x):
        x = ops.permute(x, (0, 1, 2, 3), backend=backend)
    out = torch.empty((B, seq[me], H, D), dtype=x.dtype, device=x.device)
    bufs = Buffers(x.numel(), out.numel(), x.dtype, x.device)
    kernel = _kernel_backend(x, backend)
    seq_at = _offsets(seq)
    pieces = [_chunk_ranges(s, chunks) for s in seq]
    steps, send_at, recv_at = [], 0, 0
    for c in range(chunks):
        mine, sent = pieces[me][c], [pieces[i][c] for i in range(P)]
        pack = _pack_kernels().Segments(
            rows=B, inner_rows=B, stride_outer=0, stride_inner=x.stride(0),
            starts=tuple((seq_at[i] + off) * hd for i, (off, _) in enumerate(sent)),
            widths=tuple(s * hd for _, s in sent),
        )  # fmt: skip
        # Received: one (B, s_c, h, D) block per source head group; in out's rows (b, s) of H * D values,
        # head group j is the segment [j * hd, (j + 1) * hd).
        unpack = _pack_kernels().Segments(
            rows=B * mine[1], inner_rows=mine[1], stride_outer=seq[me] * H * D, stride_inner=H * D,
            starts=tuple(j * hd for j in range(P)), widths=(hd,) * P,
        )  # fmt: skip
        steps.append(Step(
            in_splits=[B * s * hd for _, s in sent], out_splits=[B * mine[1] * hd] * P, send_at=send_at,
            recv_at=recv_at, pack=_packer(bufs, x, send_at, pack, kernel),
            unpack=_unpacker(bufs, out.view(-1)[mine[0] * H * D :], recv_at, unpack, kernel),
        ))  # fmt: skip
        send_at += pack.numel
        recv_at += unpack.numel
    return Plan(out, bufs, steps)


def _packer(bufs: Buffers, source, at: int, seg: Segments, kernel: str):
    def pack():
        _segments(kernel, bufs.typed(bufs.send, at, seg.numel), source, seg, to_blocks=True)

    return pack
