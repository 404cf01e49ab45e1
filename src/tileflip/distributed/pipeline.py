"""Running a distributed call once its sizes are known: the ``Plan`` (result, buffers, steps, own
block), the byte buffers and the carrier types the collective moves them as, and the schedule that
runs the steps on three CUDA streams (in host order on a CPU).

On CUDA, pack k+1 and the own block's move run under all-to-all k and unpack k under all-to-all k+1;
the streams are ordered by events only, with no host synchronization (docs/design.md, distributed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from tileflip.distributed.group import Ctx, guard

_streams: dict = {}


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


def _all_to_all(ctx: Ctx, bufs: Buffers, step: Step, index: int) -> None:
    send, recv, ins, outs = bufs.carriers(step)
    guard(
        ctx, f"all_to_all_single (chunk {index})",
        lambda: dist.all_to_all_single(recv, send, outs, ins, group=ctx.group),
    )  # fmt: skip


def _side_streams(device):
    """(side stream, communication stream of high priority) of a device, created once."""
    if device not in _streams:
        _streams[device] = (torch.cuda.Stream(device), torch.cuda.Stream(device, priority=-1))
    return _streams[device]


def execute(ctx: Ctx, plan: Plan) -> torch.Tensor:
    """Run ``plan`` on its device (made current for the call) and return its result."""
    device = plan.out.device
    if device.type == "cuda" and device.index != torch.cuda.current_device():
        with torch.cuda.device(device):  # the kernels launch on the current device's stream
            _run(ctx, plan, device)
    else:
        _run(ctx, plan, device)
    return plan.out


def _run(ctx: Ctx, plan: Plan, device) -> None:
    """Pack, exchange and unpack every step and move the own block. The host order is the same on every
    device: pack 0, then for each step i pack i + 1 (after the last, the own block), collective i,
    unpack i. On CUDA the side jobs (packs, own block) run on the side stream, the collectives on the
    communication stream of high priority, the unpacks on the caller's, ordered by events."""
    steps, own = plan.steps, plan.own
    if device.type != "cuda":
        _run_in_order(ctx, plan)
        return
    main = torch.cuda.current_stream(device)
    side, comm = _side_streams(device)
    side.wait_stream(main)  # the input and the buffers were produced on the caller's stream
    moved = torch.cuda.Event()
    done = []  # an event per side job run, in order

    # set_stream, not the torch.cuda.stream context manager: its device bookkeeping costs ~20 us of host
    # time per switch, and a call switches 2K + 1 times.
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


def _run_in_order(ctx: Ctx, plan: Plan) -> None:
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
