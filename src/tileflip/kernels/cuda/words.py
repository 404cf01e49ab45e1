"""Launchers of the CUDA C++ kernels in ``permute_words.cu`` (compiled by NVRTC on first use), which move
whole aligned 16-byte words on both sides: ``launch_thin``, 1- and 2-byte permutes whose output's fastest
dimension spans at most 16 bytes and is transposed against an input-contiguous one
(``tileflip.plan.launch.ThinLaunch``); ``launch_split``, their mirror, whose input's contiguous dimension
spans at most 8 bytes and interleaves the output's rows (``tileflip.plan.launch.SplitLaunch``);
``launch_shift``, the rows of a permute that keeps the input's contiguous dimension innermost, for any
element size and alignment (``tileflip.plan.launch.ShiftLaunch``).

Each is called once every argument check is done (``out`` contiguous, not overlapping ``x``).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from tileflip.kernels.cuda import nvrtc
from tileflip.kernels.triton.launch import current_stream
from tileflip.plan.launch import (
    SHIFT_OUTER_DIMS,
    SHIFT_WARPS,
    SPLIT_BATCH_DIMS,
    SPLIT_MAX_S_BYTES,
    SPLIT_WARPS,
    THIN_BATCH_DIMS,
    THIN_MAX_S_BYTES,
    THIN_WARPS,
    shift_fields,
    split_fields,
    thin_fields,
)

CU_FILE = Path(__file__).with_name("permute_words.cu")
NAMES = {1: "u8", 2: "u16"}
SHIFT_KERNEL = "permute_shift_rows"


def thin_kernel_names() -> list[str]:
    """The thin kernels: one per element size and S (the output's fastest extent)."""
    return [f"permute_thin_{NAMES[e]}_{s}" for e in NAMES for s in range(2, THIN_MAX_S_BYTES // e + 1)]


def split_kernel_names() -> list[str]:
    """The split kernels: one per element size and S (the extent of the input's contiguous dimension)."""
    return [f"permute_split_{NAMES[e]}_{s}" for e in NAMES for s in range(2, SPLIT_MAX_S_BYTES // e + 1)]


def kernel_names() -> list[str]:
    """Every kernel of permute_words.cu."""
    return [*thin_kernel_names(), *split_kernel_names(), SHIFT_KERNEL]


class _ThinParams(ctypes.Structure):
    """The thin kernels' ``ThinParams`` (permute_words.cu), field for field."""

    _fields_ = [
        ("n", ctypes.c_int64), ("st_b", ctypes.c_int64), ("batch", ctypes.c_int64),
        ("chunks", ctypes.c_int32), ("items", ctypes.c_int32), ("lanes", ctypes.c_int32), ("nn", ctypes.c_int32),
        ("n_sizes", ctypes.c_int64 * THIN_BATCH_DIMS), ("n_in", ctypes.c_int64 * THIN_BATCH_DIMS),
    ]  # fmt: skip


class _SplitParams(ctypes.Structure):
    """The split kernels' ``SplitParams`` (permute_words.cu), field for field."""

    _fields_ = [
        ("n", ctypes.c_int64), ("st_s", ctypes.c_int64),
        ("chunks", ctypes.c_int32), ("items", ctypes.c_int32), ("nn", ctypes.c_int32), ("pad", ctypes.c_int32),
        ("n_sizes", ctypes.c_int64 * SPLIT_BATCH_DIMS), ("n_in", ctypes.c_int64 * SPLIT_BATCH_DIMS),
        ("n_out", ctypes.c_int64 * SPLIT_BATCH_DIMS),
    ]  # fmt: skip


class _ShiftParams(ctypes.Structure):
    """The row copy's ``ShiftParams`` (permute_words.cu), field for field."""

    _fields_ = [
        ("row", ctypes.c_int64), ("total", ctypes.c_int64), ("items", ctypes.c_int64),
        ("step_rows", ctypes.c_int64), ("step_cols", ctypes.c_int64),
        ("nn", ctypes.c_int32), ("row_magic", ctypes.c_int32), ("row_shift", ctypes.c_int32),
        ("magic", ctypes.c_int32 * SHIFT_OUTER_DIMS), ("shift", ctypes.c_int32 * SHIFT_OUTER_DIMS),
        ("sizes", ctypes.c_int64 * SHIFT_OUTER_DIMS), ("strides", ctypes.c_int64 * SHIFT_OUTER_DIMS),
    ]  # fmt: skip


class _ThinArgs(ctypes.Structure):
    """The thin kernels' arguments, in the order of their signature."""

    _fields_ = [("x", ctypes.c_uint64), ("out", ctypes.c_uint64), ("params", _ThinParams)]


class _SplitArgs(ctypes.Structure):
    """The split kernels' arguments, in the order of their signature."""

    _fields_ = [("x", ctypes.c_uint64), ("out", ctypes.c_uint64), ("params", _SplitParams)]


class _ShiftArgs(ctypes.Structure):
    """The row copy's arguments, in the order of its signature."""

    _fields_ = [("x", ctypes.c_uint64), ("out", ctypes.c_uint64), ("params", _ShiftParams)]


def compile_cubin(arch: int = 90, *, use_cache: bool = True) -> dict[str, bytes]:
    """Compile this backend's .cu file for ``sm_<arch>`` (no GPU needed): ``{file name: cubin}``."""
    return {CU_FILE.name: nvrtc.compile_cubin(CU_FILE, arch, use_cache=use_cache)}


_thin_args = nvrtc.ThreadArgs(_ThinArgs)
_split_args = nvrtc.ThreadArgs(_SplitArgs)
_shift_args = nvrtc.ThreadArgs(_ShiftArgs)
_handles: dict = {}


def launch_thin(x: torch.Tensor, out: torch.Tensor, plan, go) -> None:
    """Write ``x.permute(...)`` (``plan`` on thin launch ``go``) into the contiguous ``out``."""
    es = x.element_size()
    device = x.get_device()
    kernel = nvrtc.kernel_on(_handles, CU_FILE, f"permute_thin_{NAMES[es]}_{go.rows}", device)
    block = _thin_args.block
    block.x, block.out = x.data_ptr(), out.data_ptr()
    n, st_b, batch, chunks, items, lanes, nn, sizes, strides = thin_fields(plan.sizes, plan.in_strides, go)
    p = block.params
    p.n, p.st_b, p.batch, p.chunks, p.items, p.lanes, p.nn = n, st_b, batch, chunks, items, lanes, nn
    p.n_sizes[:], p.n_in[:] = sizes, strides
    nvrtc.launch(kernel, (go.blocks, 1, 1), (32 * THIN_WARPS, 1, 1), current_stream(device), _thin_args.address)


def launch_split(x: torch.Tensor, out: torch.Tensor, plan, go) -> None:
    """Write ``x.permute(...)`` (``plan`` on split launch ``go``) into the contiguous ``out``."""
    es = x.element_size()
    device = x.get_device()
    kernel = nvrtc.kernel_on(_handles, CU_FILE, f"permute_split_{NAMES[es]}_{go.rows}", device)
    block = _split_args.block
    block.x, block.out = x.data_ptr(), out.data_ptr()
    n, st_s, chunks, items, nn, pad, sizes, in_strides, out_strides = split_fields(plan.sizes, plan.in_strides, go)
    p = block.params
    p.n, p.st_s, p.chunks, p.items, p.nn, p.pad = n, st_s, chunks, items, nn, pad
    p.n_sizes[:], p.n_in[:], p.n_out[:] = sizes, in_strides, out_strides
    nvrtc.launch(kernel, (go.blocks, 1, 1), (32 * SPLIT_WARPS, 1, 1), current_stream(device), _split_args.address)


def launch_shift(x: torch.Tensor, out: torch.Tensor, plan, go) -> None:
    """Write ``x.permute(...)`` (``plan`` of kind rows on row-copy launch ``go``) into the contiguous ``out``."""
    device = x.get_device()
    kernel = nvrtc.kernel_on(_handles, CU_FILE, SHIFT_KERNEL, device)
    block = _shift_args.block
    block.x, block.out = x.data_ptr(), out.data_ptr()
    fields = shift_fields(plan.sizes, plan.in_strides, go, x.element_size())
    p = block.params
    (p.row, p.total, p.items, p.step_rows, p.step_cols, p.nn, p.row_magic, p.row_shift,
     magic, shift, sizes, strides) = fields  # fmt: skip
    p.magic[:], p.shift[:], p.sizes[:], p.strides[:] = magic, shift, sizes, strides
    nvrtc.launch(kernel, (go.blocks, 1, 1), (32 * SHIFT_WARPS, 1, 1), current_stream(device), _shift_args.address)
