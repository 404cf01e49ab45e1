"""The torch side of the one dtype table (``tileflip.plan.dtypes``): the torch dtypes the kernels carry,
and the same-size unsigned integer view they move them as.

A transpose moves bits, never values: every supported dtype is viewed as the unsigned integer of its
size before a kernel sees it, so NaN payloads, negative zeros and float8 encodings travel unchanged.
"""

from __future__ import annotations

import torch

from tileflip.plan.dtypes import ELEMENT_SIZE as _SIZE_BY_NAME
from tileflip.plan.dtypes import refusal

UINT_OF_SIZE = {1: torch.uint8, 2: torch.uint16, 4: torch.uint32, 8: torch.uint64}
# The signed integers of each size: torch's CUDA kernels for comparisons and strided copies cover these,
# not every unsigned width.
INT_OF_SIZE = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}

SUPPORTED = frozenset(getattr(torch, name) for name in _SIZE_BY_NAME if hasattr(torch, name))
# Bytes per element of each supported dtype (read on every call's path: a dict lookup, no tensor made).
ELEMENT_SIZE = {d: d.itemsize for d in SUPPORTED}


def check_dtype(dtype: torch.dtype, arg: str = "x") -> None:
    """Raise TypeError naming ``arg`` unless ``dtype`` is one the kernels carry (the message is the dtype
    table's, which the command line gives too)."""
    if dtype not in SUPPORTED:
        raise TypeError(refusal(dtype, arg))


def as_uint(t: torch.Tensor) -> torch.Tensor:
    """The same memory viewed as the unsigned integer of the element size (strides and offset kept)."""
    return t.view(UINT_OF_SIZE[t.element_size()])


def as_int(t: torch.Tensor) -> torch.Tensor:
    """The same memory viewed as the signed integer of the element size (strides and offset kept)."""
    return t.view(INT_OF_SIZE[t.element_size()])


def as_width(t: torch.Tensor, width: int, count: int | None = None) -> torch.Tensor:
    """``t``'s memory from its first element on, as a flat tensor of ``count`` unsigned integers of ``width``
    bytes (default: to the storage's end; ``t``'s storage offset in bytes a multiple of ``width``): a kernel
    reads its pointer, a plan regrouped to ``width``-byte elements its layout."""
    start = t.storage_offset() * t.element_size()
    storage = t.untyped_storage()
    count = (storage.nbytes() - start) // width if count is None else count
    return torch.empty(0, dtype=UINT_OF_SIZE[width], device=t.device).set_(storage, start // width, (count,), (1,))
