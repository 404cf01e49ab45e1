"""Launcher of the CUDA C++ thin transpose in ``permute_thin.cu`` (compiled by NVRTC on first use): 1- and
2-byte permutes whose output's fastest dimension spans at most 16 bytes and is transposed against an
input-contiguous one, on the ``tileflip.plan.launch.ThinLaunch`` the planner gives.

``launch(x, out, plan, go)`` is called once every argument check is done (``out`` contiguous, not
overlapping ``x``).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from tileflip.kernels.cuda import nvrtc
from tileflip.kernels.triton.launch import current_stream
from tileflip.plan.launch import THIN_BATCH_DIMS, THIN_MAX_S_BYTES, THIN_WARPS, thin_fields

CU_FILE = Path(__file__).with_name("permute_thin.cu")
NAMES = {1: "u8", 2: "u16"}


def kernel_names() -> list[str]:
    """Every kernel of permute_thin.cu: one per element size and S (the output's fastest extent)."""
    return [f"permute_thin_{NAMES[e]}_{s}" for e in NAMES for s in range(2, THIN_MAX_S_BYTES // e + 1)]


class _Params(ctypes.Structure):
    """The kernel's ``Params`` (permute_thin.cu), field for field."""

    _fields_ = [
        ("n", ctypes.c_int64), ("st_b", ctypes.c_int64), ("batch", ctypes.c_int64),
        ("chunks", ctypes.c_int32), ("items", ctypes.c_int32), ("lanes", ctypes.c_int32), ("nn", ctypes.c_int32),
        ("n_sizes", ctypes.c_int64 * THIN_BATCH_DIMS), ("n_in", ctypes.c_int64 * THIN_BATCH_DIMS),
    ]  # fmt: skip


class _Args(ctypes.Structure):
    """The kernels' arguments, in the order of permute_thin.cu's signature."""

    _fields_ = [("x", ctypes.c_uint64), ("out", ctypes.c_uint64), ("params", _Params)]


def compile_cubin(arch: int = 90, *, use_cache: bool = True) -> dict[str, bytes]:
    """Compile this backend's .cu file for ``sm_<arch>`` (no GPU needed): ``{file name: cubin}``."""
    return {CU_FILE.name: nvrtc.compile_cubin(CU_FILE, arch, use_cache=use_cache)}


_args = nvrtc.ThreadArgs(_Args)
_handles: dict = {}


def launch(x: torch.Tensor, out: torch.Tensor, plan, go) -> None:
    """Write ``x.permute(...)`` (``plan`` on thin launch ``go``) into the contiguous ``out``."""
    es = x.element_size()
    device = x.get_device()
    kernel = nvrtc.kernel_on(_handles, CU_FILE, f"permute_thin_{NAMES[es]}_{go.rows}", device)
    block = _args.block
    block.x, block.out = x.data_ptr(), out.data_ptr()
    n, st_b, batch, chunks, items, lanes, nn, sizes, strides = thin_fields(plan.sizes, plan.in_strides, go)
    p = block.params
    p.n, p.st_b, p.batch, p.chunks, p.items, p.lanes, p.nn = n, st_b, batch, chunks, items, lanes, nn
    p.n_sizes[:], p.n_in[:] = sizes, strides
    nvrtc.launch(kernel, (go.blocks, 1, 1), (32 * THIN_WARPS, 1, 1), current_stream(device), _args.address)
