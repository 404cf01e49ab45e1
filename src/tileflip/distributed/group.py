"""Process-group plumbing of the distributed operations: the group's context, argument checks, the
sizes exchange across ranks and the errors every rank raises alike.

Each call exchanges one metadata row per rank over a CPU (gloo) channel before any data moves, so that
every rank learns the split sizes and raises the same ``ValueError`` when the ranks disagree or one of
them refused its arguments. A failing collective becomes a ``DistributedError``.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from tileflip.ops.backends import resolve_backend
from tileflip.ops.checks import check_input
from tileflip.plan.dtypes import ELEMENT_SIZE, dtype_name

BACKENDS = ("auto", "triton", "torch")
OPS = ("transpose", "seq_to_head", "head_to_seq")
DTYPE_NAMES = sorted(ELEMENT_SIZE)  # a dtype travels as its index here
# One metadata row per rank: operation, status (1 = its own checks refused its arguments), dtype code,
# chunks (0 = "auto"), four sizes and one extra value; the same length for every operation, so that ranks
# calling different operations still meet in one well-formed exchange and can be told so.
OP, STATUS, DTYPE, CHUNKS, D0, D1, D2, D3, EXTRA = range(9)
META_LEN = 9

_side_groups: dict = {}
_groups: dict = {}


class DistributedError(RuntimeError):
    """A collective of a tileflip distributed operation failed; the backend's error is ``__cause__``."""


@dataclass(frozen=True)
class Ctx:
    op: str
    group: object
    meta: object  # a group with a CPU backend, for the sizes exchange
    rank: int
    size: int
    devices: frozenset  # device types the group's data backend carries
    config: str
    table: torch.Tensor  # the group's sizes exchange table, reused by every call


def context(group, op: str) -> Ctx:
    """The context of one call of ``op`` on ``group`` (None: the default group)."""
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
        known = _groups[group] = (meta, rank, size, devices, config, torch.zeros(size, META_LEN, dtype=torch.int64))
    meta, rank, size, devices, config, table = known
    return Ctx(op, group, meta, rank, size, devices, config, table)


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


def guard(ctx: Ctx, step: str, fn: Callable):
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


def exchange(ctx: Ctx, row: list) -> list:
    """All ranks' metadata rows, in group rank order: the sum over ranks of a table that is zero but for
    each rank's own row (an all_reduce works in place; gloo's all_gather copies into its outputs)."""
    table = ctx.table  # calls of one group are serial on the host: one table serves them all
    values = table.numpy()  # written through numpy: no torch op at all, no copy op in a profile
    values[:] = 0
    values[ctx.rank] = row
    guard(ctx, "sizes exchange (all_reduce)", lambda: dist.all_reduce(table, group=ctx.meta))
    return table.tolist()


def _ranks_by_value(table: list, field: int) -> dict:
    groups: dict = {}
    for rank, row in enumerate(table):
        groups.setdefault(row[field], []).append(rank)
    return groups


def agree(ctx: Ctx, table: list, field: int, what: str, show=str) -> None:
    """Raise the same ValueError on every rank unless column ``field`` of ``table`` is the same for all."""
    groups = _ranks_by_value(table, field)
    if len(groups) > 1:
        parts = "; ".join(f"{show(v)} on rank{'s' if len(r) > 1 else ''} {r}" for v, r in groups.items())
        raise ValueError(
            f"tileflip.distributed.{ctx.op}: {what} differs across ranks: {parts}. Every rank must pass the same; "
            "no data was moved"
        )


def sync_meta(ctx: Ctx, check: Callable[[], list]) -> list:
    """Check the local arguments, exchange metadata, and raise the same way on every rank if any rank's
    arguments were refused or the operations differ. Returns the table of rows."""
    error = None
    try:
        row = [OPS.index(ctx.op) + 1, 0, *check()]
    except (TypeError, ValueError) as e:
        error = e
        row = [OPS.index(ctx.op) + 1, 1] + [0] * (META_LEN - 2)
    table = exchange(ctx, row)
    agree(ctx, table, OP, "the operation called", lambda v: f"tileflip.distributed.{OPS[v - 1]}")
    refused = [r for r, row in enumerate(table) if row[STATUS]]
    if error is not None:
        raise error
    if refused:
        raise ValueError(
            f"tileflip.distributed.{ctx.op}: rank{'s' if len(refused) > 1 else ''} {refused} refused their "
            "arguments (the error raised there says why); no data was moved"
        )
    agree(ctx, table, DTYPE, "the dtype", lambda v: f"torch.{DTYPE_NAMES[v]}")
    agree(ctx, table, CHUNKS, "chunks", lambda v: repr(v or "auto"))
    return table


def check_common(ctx: Ctx, x, arg: str, ndim: int, chunks, backend) -> None:
    """The checks every operation makes of its tensor argument, ``chunks`` and ``backend`` on its own rank."""
    check_input(x, ndim=ndim, arg=arg)
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
    resolve_backend(x, backend)


def meta_row(x, chunks, sizes: tuple, extra: int = 0) -> list:
    """This rank's metadata after OP and STATUS: dtype code, chunks (0: "auto"), four sizes, one extra."""
    return [DTYPE_NAMES.index(dtype_name(x.dtype)), 0 if chunks == "auto" else chunks, *sizes, extra]
