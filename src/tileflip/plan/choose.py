"""The staged permute's launch, chosen by its cost model: of the boxes ``tileflip.plan.staged`` can lay out,
the one ``tileflip.plan.cost`` gives the least time on the card. Pure Python and numpy."""

from __future__ import annotations

from dataclasses import replace

from tileflip.plan import cost, device
from tileflip.plan.staged import (
    ALIGN_BYTES,
    BOX_BYTES,
    MIN_VECTOR_BYTES,
    StagedLaunch,
    buffer_layout,
    in_order,
    launch_for,
    order_fits,
    staged_boxes,
)


def staged_launch(sizes, in_strides, element_size: int, in_align: int = ALIGN_BYTES,
                  out_align: int = ALIGN_BYTES, card: str | None = None) -> StagedLaunch | None:  # fmt: skip
    """The staged kernel's launch of a plan's merged ``sizes`` and ``in_strides`` (elements, output order),
    with x and out at addresses aligned to ``in_align`` and ``out_align`` bytes: of the boxes
    ``staged.staged_boxes`` offers, the one the cost model (``cost.traffic``, with ``card``'s device
    constants) gives the least time, the larger box on a tie; None where it cannot take any
    (``staged_refusal`` says why)."""
    dev = device.constants(card)[0]
    scored = []
    for extents in staged_boxes(sizes, in_strides, element_size):
        go = launch_for(sizes, in_strides, element_size, in_align, out_align, extents)
        if go is None:
            continue
        go = replace(go, lanes_seg=widest_lanes(go))
        t = cost.traffic(sizes, in_strides, go, dev, in_align, out_align)
        scored.append((max(t["dram"] + t["partial writes"], t["issue"]), -go.box_elements, extents, go))
    for *_, go in sorted(scored, key=lambda t: t[:3]):
        laid = buffer_layout(sizes, go)
        if laid is not None:
            return replace(laid, vector_gather=in_order(sizes, laid))
    return None


def widest_lanes(go: StagedLaunch) -> int:
    """The most lanes of a warp that one output segment's consecutive store vectors can take (32, or the
    segment's vectors rounded up to a power of two) with every vector of the box in a store slot."""
    vps = go.len_out() // (go.vo // go.element_size)
    lanes = 1
    while lanes < min(32, vps):
        lanes *= 2
    while lanes > 1 and not order_fits(go, lanes):
        lanes //= 2
    return lanes


def staged_refusal(sizes, in_strides, element_size: int, in_align: int = ALIGN_BYTES,
                   out_align: int = ALIGN_BYTES) -> str | None:  # fmt: skip
    """Why the staged kernel cannot take a plan (None: it can)."""
    if staged_launch(sizes, in_strides, element_size, in_align, out_align) is not None:
        return None
    if not any(s == 1 for s in in_strides):
        return "one input dimension must have stride 1"
    return (f"no box of at most {BOX_BYTES} bytes moves whole vectors of at least {MIN_VECTOR_BYTES} bytes on both "
            "sides: a segment's length, a stride or a pointer is not a multiple of 4 bytes")  # fmt: skip
