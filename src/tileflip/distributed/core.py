"""Transposes and sequence/head resharding across the ranks of a ``torch.distributed`` group.

Once a tensor is split over GPUs, a transpose becomes an all-to-all. ``torch.distributed`` moves the
data (NCCL on GPUs, gloo on CPUs); tileflip packs before the collective and unpacks after it, one pass
each, with its own kernels, and moves the block a rank keeps for itself straight to its place:

* ``transpose(local, group)``: the global M x N matrix is split by rows over the group, unevenly if
  need be (each rank passes only its own rows; the row counts are exchanged). The result is the
  global N x M transpose split by rows as ``torch.tensor_split(torch.arange(N), P)`` splits them.
  Pack: ``tileflip.transpose`` of the local rows' columns bound for the other ranks (one launch, two
  for a rank in the middle), whose row ranges are exactly the per-destination blocks. Unpack: the
  blocks received, one (n_me x m_i) per source, placed at their columns of the (n_me x M) result by
  the segment kernel of ``tileflip.kernels.triton.pack``. Own block: the Triton transpose kernel
  writes the local rows' own columns transposed straight into their columns of the result.
* ``seq_to_head(x, group)``: DeepSpeed-Ulysses resharding of (B, S/P, H, D) to (B, S, H/P, D).
  Pack: the segment kernel cuts the other ranks' head groups out of x, one (B, s, H/P, D) block each.
  Unpack: the segment kernel places each source's (B, s_i, H/P, D) block at its sequence offset
  (shards may be uneven). Own block: ``triton_pack.copy_rows`` from x to the result.
* ``head_to_seq(x, group, seq_len=...)``: the inverse. Pack: the segment kernel cuts each other
  rank's sequence range out of x. Unpack: the segment kernel interleaves the head groups. Own block:
  ``copy_rows``.

So the collective carries only the (P - 1) / P of the data that changes rank: each all-to-all gives the
rank's own block a split size of 0. (A bare ``all_to_all_single`` of the whole tensor, the baseline of
the benchmark, carries all of it, the own block through NCCL's local copy.)

Every call starts with one small exchange of each rank's sizes and dtype over a CPU (gloo) channel
(an ``all_reduce`` of a table in which each rank filled its own row: no copy ops): the group itself
when it has a CPU backend, otherwise a gloo group over the same ranks created on first use. It gives
every rank the split sizes, and it lets every rank raise the same ``ValueError`` before any data moves
when the ranks disagree (columns, batch, heads, dtype, operation, ``chunks``) or when one of them passed
arguments that its own checks refused.

The collective moves bytes: each buffer travels as int64, int32 or uint8 (the widest dividing every
split), so every dtype tileflip carries crosses every backend, including those gloo refuses (float8,
int16, uint16, uint32, uint64: "Invalid scalar type").

Chunks and streams. ``chunks=K`` cuts each rank's rows (transpose) or sequence shard into K even
pieces and moves them with K all-to-alls; ``chunks="auto"`` (the default) moves everything in one
all-to-all, or, when the largest rank holds at least ``AUTO_SPLIT_BYTES`` (1 GiB) and the runs the packs
move are whole 16-byte units (``auto_chunks``), in two whose pieces are 3/4 and 1/4 of each rank's rows
(``AUTO_SPLIT``). The first pack and the last unpack are on the critical path (every other pass runs
under a collective), and each collective's cost depends on its size: on the H200 pair (NCCL 2.28,
benchmarks/dist_overlap.py, 2026-12-01) one all-to-all of 512 MiB to the peer took 1.53 ms on 32 NCCL
blocks, two of 256 MiB 0.91 ms each on 17 blocks, four of 128 MiB 0.48 ms each, and the host spends
1.2-1.5 ms a call (0.25-0.3 ms of it in the sizes exchange over gloo). With 1 GiB per
rank, one chunk took 1.30x the bare all-to-all of the whole tensor, two even chunks 1.35x, 1/4 + 3/4
1.36x and 3/4 + 1/4 1.22-1.23x (a large first exchange at full rate, a short last unpack); at 256 MiB
per rank, where the host time is most of the call, one chunk was best. Results are the same bits
for every K. On CUDA a call uses three streams, ordered by events only (no host synchronization):

* a side stream (normal priority) runs pack 0, pack 1, ..., pack K-1, then the own block's move;
* a communication stream of high priority runs all-to-all k once pack k is done (a synchronous
  collective runs on the current stream, and the call makes this stream current around it); its
  priority lets NCCL's kernel take SMs ahead of a pack or an unpack that runs beside it;
* the caller's stream runs unpack k once all-to-all k is done, then waits for the own block.

So pack k+1 and the own block's move run under all-to-all k, and unpack k under all-to-all k+1; only
pack 0 and unpack K-1 are outside the collectives. A pass that runs under a collective is launched on a
grid of ``BESIDE_SM_FRACTION`` (1/2) of the SMs, each program looping over its share of the tiles:
NCCL's kernel moves data with a few dozen blocks, and a full-grid pass beside it took the memory system
from it (a 512 MiB copy on the full grid lengthened the collective by 0.13-0.16 ms, about its own
duration; the own block's transpose on 66 programs by 0.02 ms). Pack 0 and unpack K-1 use full grids.
The side stream first waits for the caller's stream (the input, the new buffers), and the caller's
stream ends after everything: what follows the call on it sees the whole result, and the buffers are
freed in its order. The host enqueues pack k+1 before
all-to-all k, so the overlap holds even where each collective blocks the host (NCCL blocking wait).
On CPU the same steps run one after the other in that host order.

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
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from tileflip import plan

from tileflip.kernels import dtypes

from tileflip.ops import core as ops

if TYPE_CHECKING:
    from tileflip.kernels.triton.pack import Rows, Segments

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
# chunks (0 = "auto"), four sizes and one extra value; the same length for every operation, so that ranks
# calling different operations still meet in one well-formed exchange and can be told so.
OP, STATUS, DTYPE, CHUNKS, D0, D1, D2, D3, EXTRA = range(9)
_META_LEN = 9

AUTO_SPLIT_BYTES = 1 << 30  # measured: see the module docstring
AUTO_SPLIT = (3, 1)
BESIDE_SM_FRACTION = 0.5

_side_groups: dict = {}
_groups: dict = {}
_streams: dict = {}


@dataclass(frozen=True)
class _Ctx:
    op: str
    group: object
    meta: object  # a group with a CPU backend, for the sizes exchange
    rank: int
    size: int
    devices: frozenset  # device types the group's data backend carries
    config: str
    table: torch.Tensor  # the group's sizes exchange table, reused by every call


def _context(group, op: str) -> _Ctx:
    if not dist.is_available() or not dist.is_initialized():
        raise ValueError("group: torch.distributed is not initialized; call torch.distributed.init_process_group first")
    group = dist.group.WORLD if group is None else group
    known = _groups.get(group)  # what a group's rank, size and backends are does not change
    if known is None:
        rank = dist.get_rank(group)
        if rank < 0:
            raise ValueError(f"group: this process (global rank {dist.get_rank()}) is not a member of the group")
        config = dist.get_backend_config(group)
        devices = frozenset(part.split(":")[0] for part in config.split(",") if ":" in part)
        meta = group if "cpu" in devices else _side_group(group)
        size = dist.get_world_size(group)
        known = _groups[group] = (meta, rank, size, devices, config, torch.zeros(size, _META_LEN, dtype=torch.int64))
    meta, rank, size, devices, config, table = known
    return _Ctx(op, group, meta, rank, size, devices, config, table)


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
    """All ranks' metadata rows, in group rank order: the sum over ranks of a table that is zero but for
    each rank's own row (an all_reduce works in place; gloo's all_gather copies into its outputs)."""
    table = ctx.table  # calls of one group are serial on the host: one table serves them all
    values = table.numpy()  # written through numpy: no torch op at all, no copy op in a profile
    values[:] = 0
    values[ctx.rank] = row
    _guard(ctx, "sizes exchange (all_reduce)", lambda: dist.all_reduce(table, group=ctx.meta))
    return table.tolist()


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
    _agree(ctx, table, CHUNKS, "chunks", lambda v: repr(v or "auto"))
    return table


def _check_common(ctx: _Ctx, x, arg: str, ndim: int, chunks, backend) -> None:
    ops.check_input(x, ndim=ndim, arg=arg)
    if x.is_conj() or x.is_neg():
        raise ValueError(f"{arg} must not be a conjugate or negative view (the exchange moves plain bits); pass "
                         f"{arg}.resolve_conj().resolve_neg()")  # fmt: skip
    if x.requires_grad and torch.is_grad_enabled():
        raise ValueError(f"tileflip.distributed is not differentiable, but {arg} requires grad: call it under "
                         f"torch.no_grad() or on {arg}.detach()")  # fmt: skip
    if x.device.type not in ctx.devices:
        raise ValueError(f"{arg} is on {x.device}, but the group's backend ({ctx.config}) does not carry it")
    if chunks != "auto" and (type(chunks) is not int or chunks < 1):
        raise ValueError(f"chunks must be a positive int or 'auto', got {chunks!r}")
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    ops.resolve_backend(x, backend)


def _meta_row(x, chunks, sizes: tuple, extra: int = 0) -> list:
    return [_DTYPE_NAMES.index(str(x.dtype).removeprefix("torch.")), 0 if chunks == "auto" else chunks, *sizes, extra]


def auto_chunks(largest_rank_bytes: int, run_bytes: int):
    """``chunks="auto"``: 1 (one all-to-all), or from AUTO_SPLIT_BYTES of the largest rank's data on the
    weights AUTO_SPLIT (pieces of 3/4 and 1/4 of each rank's rows: ``chunk_sizes``) where the runs the
    packs move (``run_bytes``: a row of the matrix, a head group's H/P * D values) are whole 16-byte
    units. Unaligned runs stay in one piece: their transposes cannot use vector accesses, and on a capped
    grid beside a collective (the second piece's pack) they slowed it: bf16 with N = 32769 took 1.58x the
    bare all-to-all in two pieces, 1.39x in one. Computed from exchanged sizes only, so every rank picks
    the same."""
    if run_bytes % 16 or largest_rank_bytes < AUTO_SPLIT_BYTES:
        return 1
    return AUTO_SPLIT


def beside_programs(device) -> int:
    """Programs of a move that runs beside a collective: ``BESIDE_SM_FRACTION`` of the device's SMs, so
    that the move leaves the collective's kernel the memory bandwidth and SMs it needs. 0 (a full grid)
    on a CPU or with ``BESIDE_SM_FRACTION`` 0."""
    if device.type != "cuda" or not BESIDE_SM_FRACTION:
        return 0
    return max(1, int(_sm_count(device.index) * BESIDE_SM_FRACTION))


@functools.cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def _beside(P: int, kernel: str, device) -> int:
    """Programs of a plan's passes beside a collective (0: full grids): none without a collective, and
    the torch backend has no capped form."""
    return beside_programs(device) if P > 1 and kernel == "triton" else 0


def _chunks(table: list, largest_rank_bytes: int, run_bytes: int):
    return table[0][CHUNKS] or auto_chunks(largest_rank_bytes, run_bytes)


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


def chunk_sizes(total: int, chunks) -> list:
    """Sizes of the pieces of ``total``: ``chunks`` an int (that many, tensor_split's rule) or a tuple of
    weights (piece k ends at ``total * (w_0 + ... + w_k) // sum(w)``)."""
    if isinstance(chunks, int):
        return split_sizes(total, chunks)
    ends, acc = [], 0
    for w in chunks:
        acc += w
        ends.append(total * acc // sum(chunks))
    return [b - a for a, b in zip([0, *ends], ends)]


def _chunk_ranges(total: int, chunks) -> list:
    """(offset, size) of each piece of ``total`` (``chunk_sizes``)."""
    sizes = chunk_sizes(total, chunks)
    return list(zip(_offsets(sizes), sizes))


def _steps(P: int, chunks) -> int:
    """How many all-to-alls: one per piece, none in a group of one."""
    return (chunks if isinstance(chunks, int) else len(chunks)) if P > 1 else 0


# --------------------------------------------------------------------------------------------------
# The collective pipeline
# --------------------------------------------------------------------------------------------------


@dataclass
class Step:
    """One all-to-all: splits in elements of the data's dtype (the rank's own split is 0), the element
    offsets of its regions in the two buffers, and the pack before it and unpack after it."""

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
        return carriers(self.send, self.recv, self.es, step.in_splits, step.out_splits, step.send_at, step.recv_at)


def carriers(send, recv, es: int, in_splits, out_splits, send_at: int = 0, recv_at: int = 0):
    """The byte buffers ``send`` and ``recv``'s regions at element offsets ``send_at`` and ``recv_at`` (of
    ``es`` bytes each), viewed as int64, int32 or uint8, with the splits counted in that type."""
    counts = [*in_splits, *out_splits, send_at, recv_at]
    width = next(w for w in (8, 4, 1) if all(c * es % w == 0 for c in counts))
    carrier = {8: torch.int64, 4: torch.int32, 1: torch.uint8}[width]

    def region(buf, at, splits):
        return buf[at * es : (at + sum(splits)) * es].view(carrier)

    return (region(send, send_at, in_splits), region(recv, recv_at, out_splits),
            [s * es // width for s in in_splits], [s * es // width for s in out_splits])  # fmt: skip


def _all_to_all(ctx: _Ctx, bufs: Buffers, step: Step, index: int) -> None:
    send, recv, ins, outs = bufs.carriers(step)
    _guard(
        ctx, f"all_to_all_single (chunk {index})",
        lambda: dist.all_to_all_single(recv, send, outs, ins, group=ctx.group),
    )  # fmt: skip


def _side_streams(device):
    """(side stream, communication stream of high priority) of a device, created once."""
    if device not in _streams:
        _streams[device] = (torch.cuda.Stream(device), torch.cuda.Stream(device, priority=-1))
    return _streams[device]


@dataclass
class Plan:
    """Everything one call does once the sizes are known: its result, its buffers, its steps and the move
    of the rank's own block (the benchmark times these alone from here). ``full_in_splits`` and
    ``full_out_splits`` are the element splits of the same exchange with the own block included, what
    a bare ``all_to_all_single`` of the whole tensor moves."""

    out: torch.Tensor
    bufs: Buffers
    steps: list
    own: Callable | None
    own_numel: int
    full_in_splits: list
    full_out_splits: list


def _execute(ctx: _Ctx, plan: Plan) -> torch.Tensor:
    device = plan.out.device
    if device.type == "cuda" and device.index != torch.cuda.current_device():
        with torch.cuda.device(device):  # the kernels launch on the current device's stream
            _run(ctx, plan, device)
    else:
        _run(ctx, plan, device)
    return plan.out


def _run(ctx: _Ctx, plan: Plan, device) -> None:
    """Pack, exchange and unpack every step and move the own block. The host order is the same on every
    device: pack 0, then for each step i pack i + 1 (after the last, the own block), collective i,
    unpack i. On CUDA the side jobs (packs, own block) run on the side stream, the collectives on the
    communication stream, the unpacks on the caller's, ordered by events (see the module's docstring)."""
    steps, own = plan.steps, plan.own
    if device.type != "cuda":
        _run_in_order(ctx, plan)
        return
    main = torch.cuda.current_stream(device)
    side, comm = _side_streams(device)
    side.wait_stream(main)  # the input and the buffers were produced on the caller's stream
    moved = torch.cuda.Event()
    done = []  # an event per side job run, in order

    # Streams are switched with set_stream, not the torch.cuda.stream context manager: a call switches
    # 2K + 1 times, and the context manager's device bookkeeping cost ~20 us of host time each.
    def side_job(j: int) -> None:
        job = steps[j].pack if j < len(steps) else own
        if job is not None:
            torch.cuda.set_stream(side)
            job()
            event = torch.cuda.Event()
            event.record(side)
            done.append(event)
            torch.cuda.set_stream(main)

    try:
        side_job(0)
        for i, step in enumerate(steps):
            side_job(i + 1)  # queued before collective i, which blocks the host under NCCL blocking wait
            comm.wait_event(done[i])
            torch.cuda.set_stream(comm)  # a synchronous collective runs on the current stream
            _all_to_all(ctx, plan.bufs, step, i)
            moved.record(comm)
            torch.cuda.set_stream(main)
            main.wait_event(moved)  # takes this record: the event is recorded again for the next step
            step.unpack()
        if own is not None:
            main.wait_event(done[-1])
    finally:
        torch.cuda.set_stream(main)


def _run_in_order(ctx: _Ctx, plan: Plan) -> None:
    """The CPU path: the same steps in the same host order, one after the other."""
    steps = plan.steps
    jobs = [s.pack for s in steps] + [plan.own]
    if jobs[0] is not None:
        jobs[0]()
    for i, step in enumerate(steps):
        if jobs[i + 1] is not None:
            jobs[i + 1]()
        _all_to_all(ctx, plan.bufs, step, i)
        step.unpack()


def _pack_kernels():
    # Imported on first use: importing triton costs ~1 s, which `import tileflip.distributed.core` should not.
    from tileflip.kernels.triton import pack as triton_pack

    return triton_pack


def _segments(backend: str, blocked, interleaved, seg: Segments, to_blocks: bool, programs: int = 0) -> None:
    if backend == "torch":
        _pack_kernels().reference(blocked, interleaved, seg, to_blocks=to_blocks)
    else:
        _pack_kernels().launch(blocked, interleaved, seg, to_blocks=to_blocks, programs=programs)


def _rows(backend: str, dst, src, spec: Rows, programs: int = 0) -> None:
    if backend == "torch":
        _pack_kernels().reference_rows(dst, src, spec)
    else:
        _pack_kernels().launch_rows(dst, src, spec, programs=programs)


def _kernel_backend(x, backend: str) -> str:
    """``triton`` or ``torch`` for tileflip's kernels here (ops.resolve_backend's choice, in its terms)."""
    return "torch" if ops.resolve_backend(x, backend) == "torch" else "triton"


def _at(t: torch.Tensor, offset: int) -> torch.Tensor:
    """A one-element view of t's storage ``offset`` elements past t's first element: a kernel's origin."""
    return t.as_strided((1,), (1,), t.storage_offset() + offset)


def _without(values: list, me: int) -> list:
    return [v for i, v in enumerate(values) if i != me]


def _own_splits(values: list, me: int) -> list:
    """The splits of one all-to-all with the rank's own block left out (split size 0)."""
    return [0 if i == me else v for i, v in enumerate(values)]


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
    ctx = _context(group, "transpose")

    def check():
        _check_common(ctx, local, "local", 2, chunks, backend)
        return _meta_row(local, chunks, (local.shape[0], local.shape[1], 0, 0))

    table = _sync_meta(ctx, check)
    _agree(ctx, table, D1, "the number of columns of local (N)")
    rows, N = [row[D0] for row in table], table[0][D1]
    k = _chunks(table, max(rows) * N * local.element_size(), N * local.element_size())
    return _execute(ctx, transpose_plan(ctx.size, ctx.rank, local, rows, N, k, backend))


def transpose_plan(P: int, me: int, local, rows: list, N: int, chunks: int, backend: str) -> Plan:
    """Rank ``me``'s part of ``transpose`` once every rank's row count (``rows``) is known."""
    M = sum(rows)
    n = split_sizes(N, P)
    n_at, row_at = _offsets(n), _offsets(rows)
    out = torch.empty((n[me], M), dtype=local.dtype, device=local.device)
    bufs = Buffers((N - n[me]) * rows[me], n[me] * (M - rows[me]), local.dtype, local.device)
    kernel = _kernel_backend(local, backend)
    beside = _beside(P, kernel, local.device)
    count = _steps(P, chunks)
    # The columns bound for the other ranks: those before this rank's and those after, in rank order.
    spans = [(c0, c1) for c0, c1 in ((0, n_at[me]), (n_at[me] + n[me], N)) if c1 > c0]
    pieces = [_chunk_ranges(m, chunks) for m in rows]  # pieces[i][c]: (offset, size) of source i's chunk c
    steps, send_at, recv_at = [], 0, 0
    for c in range(count):
        (a, m_c), got = pieces[me][c], [pieces[i][c] for i in range(P)]
        out_splits = _own_splits([n[me] * m for _, m in got], me)
        steps.append(Step(
            in_splits=_own_splits([n_j * m_c for n_j in n], me), out_splits=out_splits,
            send_at=send_at, recv_at=recv_at,
            pack=_transpose_pack(local, bufs, a, m_c, send_at, spans, backend, beside * (c > 0)),
            unpack=_transpose_unpack(bufs, out, recv_at, _without(got, me), _without(row_at, me), kernel,
                                     beside * (c < count - 1)),
        ))  # fmt: skip
        send_at += (N - n[me]) * m_c
        recv_at += sum(out_splits)
    own = _transpose_own(local, out, n_at[me], n[me], row_at[me], kernel, beside) if n[me] and rows[me] else None
    return Plan(out, bufs, steps, own, n[me] * rows[me], [n_j * rows[me] for n_j in n], [n[me] * m for m in rows])


def _transpose_pack(local, bufs: Buffers, a: int, m_c: int, at: int, spans: list, backend: str, programs: int):
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
                    ops.transpose(src, dst, backend=backend)
                offset += (c1 - c0) * m_c

    return pack


def _transpose_unpack(bufs: Buffers, out, at: int, got: list, row_at: list, kernel: str, programs: int):
    # Source i's block is (n_me x m_ic): columns row_at[i] + offset_ic onwards of every row of out.
    n_me, M = out.shape
    seg = _pack_kernels().Segments(
        rows=n_me, inner_rows=n_me, stride_outer=0, stride_inner=M,
        starts=tuple(r + off for r, (off, _) in zip(row_at, got)), widths=tuple(m for _, m in got),
    )  # fmt: skip

    def unpack():
        _segments(kernel, bufs.typed(bufs.recv, at, seg.numel), out, seg, to_blocks=False, programs=programs)

    return unpack


def _transpose_own(local, out, col: int, n_me: int, row: int, kernel: str, programs: int):
    # The own block, local[:, col : col + n_me] transposed, is columns [row, row + m_me) of out: the 2-D
    # transpose kernel takes the output's row stride, so it writes there directly (no contiguous staging).
    src = local[:, col : col + n_me]
    dst = out[:, row : row + local.shape[0]]

    def own():
        if programs:
            _looped_transpose(src, dst, programs)
        else:
            ops._run(src, dst, kernel)

    return own


def _looped_transpose(src, dst, programs: int) -> None:
    """Triton's 2-D transpose of ``src`` into ``dst`` on a grid of ``programs`` programs (beside a collective)."""
    from tileflip import tuning
    from tileflip.kernels.triton import transpose as triton_transpose

    triton_transpose.launch_looped(src, dst, tuning.triton_config(src.element_size(), src.shape, src.stride(0)),
                                   programs)  # fmt: skip


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
    seq = [row[D1] for row in table]
    k = _chunks(table, max(seq) * x[:, :1].numel() * x.element_size(), H // ctx.size * x.shape[3] * x.element_size())
    return _execute(ctx, seq_to_head_plan(ctx.size, ctx.rank, x, seq, k, backend))


def _dense(x, first: int) -> bool:
    """True when x's dimensions from ``first`` on form one unit-stride run (what the kernels read as a row)."""
    sizes, strides = plan.merge_dims(tuple(x.shape[first:]), tuple(x.stride()[first:]))
    return len(sizes) == 0 or (len(sizes) == 1 and strides[0] == 1)


def seq_to_head_plan(P: int, me: int, x, seq: list, chunks: int, backend: str) -> Plan:
    """Rank ``me``'s part of ``seq_to_head`` once every rank's shard length (``seq``) is known."""
    if not _dense(x, 2):
        x = ops.permute(x, (0, 1, 2, 3), backend=backend)
    B, s_me, H, D = x.shape
    h = H // P
    S, hd = sum(seq), h * D
    out = torch.empty((B, S, h, D), dtype=x.dtype, device=x.device)
    bufs = Buffers(B * s_me * hd * (P - 1), B * (S - s_me) * hd, x.dtype, x.device)
    kernel = _kernel_backend(x, backend)
    beside = _beside(P, kernel, x.device)
    count = _steps(P, chunks)
    seq_at = _offsets(seq)
    pieces = [_chunk_ranges(s, chunks) for s in seq]
    others = _without(list(range(P)), me)
    steps, send_at, recv_at = [], 0, 0
    for c in range(count):
        (a, s_c), got = pieces[me][c], [pieces[i][c] for i in range(P)]
        # Pack: rows (b, s) of x's chunk, H * D values each; destination j's heads are the segment
        # [j * hd, (j + 1) * hd). Unpack: source i's (B, s_ic, h, D) block is, for each b, one run of
        # s_ic * hd values of out at sequence offset seq_at[i] + offset_ic.
        pack = _pack_kernels().Segments(
            rows=B * s_c, inner_rows=s_c, stride_outer=x.stride(0), stride_inner=x.stride(1),
            starts=tuple(j * hd for j in others), widths=(hd,) * (P - 1),
        )  # fmt: skip
        unpack = _pack_kernels().Segments(
            rows=B, inner_rows=B, stride_outer=0, stride_inner=S * hd,
            starts=tuple((seq_at[i] + got[i][0]) * hd for i in others), widths=tuple(got[i][1] * hd for i in others),
        )  # fmt: skip
        steps.append(Step(
            in_splits=_own_splits([B * s_c * hd] * P, me), out_splits=_own_splits([B * s * hd for _, s in got], me),
            send_at=send_at, recv_at=recv_at,
            pack=_packer(bufs, x[:, a:], send_at, pack, kernel, beside * (c > 0)),
            unpack=_unpacker(bufs, out, recv_at, unpack, kernel, beside * (c < count - 1)),
        ))  # fmt: skip
        send_at += pack.numel
        recv_at += unpack.numel
    # Own block: rows (b, s) of x's heads [me * h, (me + 1) * h) to out's rows (b, seq_at[me] + s).
    spec = _pack_kernels().Rows(rows=B * s_me, inner_rows=s_me, width=hd, src_outer=x.stride(0),
                                src_inner=x.stride(1), dst_outer=S * hd, dst_inner=hd)  # fmt: skip
    own = _mover(kernel, _at(out, seq_at[me] * hd), _at(x, me * hd), spec, beside) if spec.numel else None
    return Plan(out, bufs, steps, own, spec.numel, [B * s_me * hd] * P, [B * s * hd for s in seq])


def _packer(bufs: Buffers, source, at: int, seg: Segments, kernel: str, programs: int):
    def pack():
        _segments(kernel, bufs.typed(bufs.send, at, seg.numel), source, seg, to_blocks=True, programs=programs)

    return pack


def _unpacker(bufs: Buffers, target, at: int, seg: Segments, kernel: str, programs: int):
    def unpack():
        _segments(kernel, bufs.typed(bufs.recv, at, seg.numel), target, seg, to_blocks=False, programs=programs)

    return unpack


def _mover(kernel: str, dst, src, spec: Rows, programs: int):
    def own():
        _rows(kernel, dst, src, spec, programs)

    return own


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
    k = _chunks(table, x.numel() * x.element_size(), x.shape[2] * x.shape[3] * x.element_size())
    return _execute(ctx, head_to_seq_plan(ctx.size, ctx.rank, x, seq, k, backend))


def head_to_seq_plan(P: int, me: int, x, seq: list, chunks: int, backend: str) -> Plan:
    """Rank ``me``'s part of ``head_to_seq`` once every rank's shard length (``seq``) is known."""
    if not _dense(x, 1):
        x = ops.permute(x, (0, 1, 2, 3), backend=backend)
    B, S, h, D = x.shape
    H, hd = P * h, h * D
    out = torch.empty((B, seq[me], H, D), dtype=x.dtype, device=x.device)
    bufs = Buffers(B * (S - seq[me]) * hd, B * seq[me] * hd * (P - 1), x.dtype, x.device)
    kernel = _kernel_backend(x, backend)
    beside = _beside(P, kernel, x.device)
    count = _steps(P, chunks)
    seq_at = _offsets(seq)
    pieces = [_chunk_ranges(s, chunks) for s in seq]
    others = _without(list(range(P)), me)
    steps, send_at, recv_at = [], 0, 0
    for c in range(count):
        (a, s_c), sent = pieces[me][c], [pieces[i][c] for i in range(P)]
        # Pack: per batch row of x, destination j's sequence chunk is one run of s_jc * hd values.
        pack = _pack_kernels().Segments(
            rows=B, inner_rows=B, stride_outer=0, stride_inner=x.stride(0),
            starts=tuple((seq_at[j] + sent[j][0]) * hd for j in others), widths=tuple(sent[j][1] * hd for j in others),
        )  # fmt: skip
        # Received: one (B, s_c, h, D) block per source head group; in out's rows (b, s) of H * D values,
        # head group i is the segment [i * hd, (i + 1) * hd).
        unpack = _pack_kernels().Segments(
            rows=B * s_c, inner_rows=s_c, stride_outer=seq[me] * H * D, stride_inner=H * D,
            starts=tuple(i * hd for i in others), widths=(hd,) * (P - 1),
        )  # fmt: skip
        steps.append(Step(
            in_splits=_own_splits([B * s * hd for _, s in sent], me), out_splits=_own_splits([B * s_c * hd] * P, me),
            send_at=send_at, recv_at=recv_at, pack=_packer(bufs, x, send_at, pack, kernel, beside * (c > 0)),
            unpack=_unpacker(bufs, out.view(-1)[a * H * D :], recv_at, unpack, kernel,
                             beside * (c < count - 1)),
        ))  # fmt: skip
        send_at += pack.numel
        recv_at += unpack.numel
    # Own block: x's rows (b, seq_at[me] + s) of hd values to the segment [me * hd, (me + 1) * hd) of out's
    # rows (b, s).
    spec = _pack_kernels().Rows(rows=B * seq[me], inner_rows=seq[me], width=hd, src_outer=x.stride(0),
                                src_inner=hd, dst_outer=seq[me] * H * D, dst_inner=H * D)  # fmt: skip
    own = _mover(kernel, _at(out, me * hd), _at(x, seq_at[me] * hd), spec, beside) if spec.numel else None
    return Plan(out, bufs, steps, own, spec.numel, [B * s * hd for s in seq], [B * seq[me] * hd] * P)
