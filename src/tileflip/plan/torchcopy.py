"""A model of PyTorch's own strided copy (``out.copy_(x.permute(...))``, ``x.permute(...).contiguous()``), so that
``tileflip.enable()`` can leave to it the layout changes it runs as fast. Pure Python and numpy.

PyTorch's copy of a non-contiguous tensor walks the output in order: each warp instruction takes 32
consecutive output elements and reads each from its place in the input, with the index arithmetic of a
general offset calculator per element. Its time is the longest of:

* ``dram``: the bytes read and written at the card's copy bandwidth;
* ``elements``: the elements at the card's measured rate of that kernel (``torch_copy_elements_per_s`` in
  ``data/<card>.json``, per element size: a strided copy whose reads are whole runs of 4 KiB, so that its
  index arithmetic alone bounds it);
* ``gathers``: the input sectors each warp instruction touches, at the card's measured rate of sectors
  read one element each (``l2_read_sectors_per_s``, measured with this same kernel on a transpose).

A card's file without the element rates leaves the ``elements`` term out.
"""

from __future__ import annotations

import numpy as np

from tileflip.plan.launch import product
from tileflip.plan.sectors import SECTOR

SAMPLED_WARPS = 64  # warps whose sectors are counted, spread evenly over the output


def read_sectors_per_warp(sizes, in_strides, element_size: int) -> float:
    """The mean number of input sectors a warp of 32 consecutive output elements reads (``sizes`` and
    ``in_strides``: a permute plan's merged dimensions in output order, strides in elements; the input taken
    as starting on a sector)."""
    n = product(sizes)
    warps = max(1, -(-n // 32))
    first = np.unique(np.linspace(0, warps - 1, min(warps, SAMPLED_WARPS)).astype(np.int64)) * 32
    index = first[:, None] + np.arange(32, dtype=np.int64)[None, :]
    live = index < n
    offset = np.zeros(index.shape, dtype=np.int64)
    rest = index.copy()
    for size, stride in zip(reversed(sizes), reversed(in_strides)):
        offset += (rest % size) * stride
        rest //= size
    sectors = np.where(live, offset * element_size // SECTOR, -1)
    s = np.sort(sectors, axis=1)
    fresh = (s[:, 1:] != s[:, :-1]) & (s[:, 1:] >= 0)
    counts = fresh.sum(axis=1) + (s[:, 0] >= 0)
    return float(counts.mean())


def torch_copy_terms(sizes, in_strides, element_size: int, dev: dict) -> dict:
    """Seconds of each term of PyTorch's strided copy of a plan's merged ``sizes`` and ``in_strides``, its time
    (the longest term plus the launch overhead) and the fraction of a same-run copy that gives."""
    n = product(sizes)
    nbytes = n * element_size
    bw = dev["copy_bandwidth_bytes_per_s"]
    terms = {"dram": 2 * nbytes / bw}
    rate = (dev.get("torch_copy_elements_per_s") or {}).get(str(element_size))
    if rate:
        terms["elements"] = n / rate
    warps = -(-n // 32)
    terms["gathers"] = warps * read_sectors_per_warp(sizes, in_strides, element_size) / dev["l2_read_sectors_per_s"]
    bound = max(terms, key=terms.get)
    t0 = dev["launch_overhead_s"]
    time = terms[bound] + t0
    return {"terms": terms, "bound": bound, "time": time, "fraction_of_copy": (terms["dram"] + t0) / time}
