"""How a distributed call is cut: split sizes across ranks, the pieces of ``chunks``, the choice of
``chunks="auto"`` and the grid of a pass that runs beside a collective.

Plain arithmetic on sizes every rank has exchanged, so that every rank makes the same choices. The
figures behind ``AUTO_SPLIT_BYTES``, ``AUTO_SPLIT`` and ``BESIDE_SM_FRACTION`` are in docs/design.md
(distributed: chunks and streams).
"""

from __future__ import annotations

import functools

AUTO_SPLIT_BYTES = 1 << 30  # two H200s, 1 GiB per rank: 3/4 + 1/4 took 1.22x the bare all-to-all, 1 piece 1.30x
AUTO_SPLIT = (3, 1)
BESIDE_SM_FRACTION = 0.5  # a full-grid 512 MiB copy beside the all-to-all lengthened it by 0.13-0.16 ms


def split_sizes(total: int, parts: int) -> list:
    """Sizes of ``torch.tensor_split`` of ``total`` items into ``parts``: the first total % parts get one more."""
    q, r = divmod(total, parts)
    return [q + (1 if i < r else 0) for i in range(parts)]


def offsets(sizes) -> list:
    """The start of each of ``sizes`` laid end to end."""
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


def chunk_ranges(total: int, chunks) -> list:
    """(offset, size) of each piece of ``total`` (``chunk_sizes``)."""
    sizes = chunk_sizes(total, chunks)
    return list(zip(offsets(sizes), sizes))


def step_count(P: int, chunks) -> int:
    """How many all-to-alls: one per piece, none in a group of one."""
    return (chunks if isinstance(chunks, int) else len(chunks)) if P > 1 else 0


def without(values: list, me: int) -> list:
    """``values`` less the one at index ``me`` (the rank's own)."""
    return [v for i, v in enumerate(values) if i != me]


def own_splits(values: list, me: int) -> list:
    """The splits of one all-to-all with the rank's own block left out (split size 0)."""
    return [0 if i == me else v for i, v in enumerate(values)]


def auto_chunks(largest_rank_bytes: int, run_bytes: int):
    """``chunks="auto"``: 1 (one all-to-all), or from AUTO_SPLIT_BYTES of the largest rank's data on the
    weights AUTO_SPLIT (pieces of 3/4 and 1/4 of each rank's rows: ``chunk_sizes``) where the runs the
    packs move (``run_bytes``: a row of the matrix, a head group's H/P * D values) are whole 16-byte
    units. Unaligned runs stay in one piece: their transposes cannot use vector accesses, and a capped
    grid beside a collective slows them (bf16, N = 32769: 1.58x the bare all-to-all in two pieces, 1.39x
    in one). Computed from exchanged sizes only, so every rank picks the same."""
    if run_bytes % 16 or largest_rank_bytes < AUTO_SPLIT_BYTES:
        return 1
    return AUTO_SPLIT


def pick_chunks(agreed: int, largest_rank_bytes: int, run_bytes: int):
    """The ``chunks`` the ranks agreed on (as exchanged: 0 for "auto"), or ``auto_chunks``'s choice."""
    return agreed or auto_chunks(largest_rank_bytes, run_bytes)


def beside_programs(device) -> int:
    """Programs of a move that runs beside a collective: ``BESIDE_SM_FRACTION`` of the device's SMs, so
    that the move leaves the collective's kernel the memory bandwidth and SMs it needs. 0 (a full grid)
    on a CPU or with ``BESIDE_SM_FRACTION`` 0."""
    if device.type != "cuda" or not BESIDE_SM_FRACTION:
        return 0
    return max(1, int(_sm_count(device.index) * BESIDE_SM_FRACTION))


@functools.cache
def _sm_count(index: int) -> int:
    import torch

    return torch.cuda.get_device_properties(index).multi_processor_count


def beside(P: int, kernel: str, device) -> int:
    """Programs of a plan's passes beside a collective (0: full grids): none without a collective, and
    the torch backend has no capped form."""
    return beside_programs(device) if P > 1 and kernel == "triton" else 0
