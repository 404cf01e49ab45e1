"""Launcher of the CUDA C++ permute in ``permute_realign.cu`` (compiled by NVRTC on first use): 1- and 2-byte
permutes whose input and output rows start at any element, read as aligned 16-byte words and written as
whole aligned 32-byte sectors, on the launches ``tileflip.tuning.permute_strategy`` picks for it.

``launch(x, out, plan, go)`` is called once every argument check is done (``out`` contiguous, not
overlapping ``x``); ``params_of`` says whether the kernel holds the launch's decodes.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

from tileflip.kernels.cuda import nvrtc
from tileflip.kernels.triton.launch import current_stream
from tileflip.plan.launch import product, realign_aligned, realign_grid
from tileflip.plan.permute import contiguous_strides

CU_FILE = Path(__file__).with_name("permute_realign.cu")
# by element size: (any input alignment, every input piece on a 16-byte boundary)
KERNELS = {1: ("permute_realign_u8", "permute_realign_u8_aligned"),
           2: ("permute_realign_u16", "permute_realign_u16_aligned")}
THREADS = 288  # permute_realign.cu's THREADS
MAX_DECODE = {"a": 4, "b": 4, "n": 6}  # dimensions each decode of the .cu file's Params holds


class _Params(ctypes.Structure):
    """The kernel's ``Params`` (permute_realign.cu), field for field."""

    _fields_ = [
        ("asz", ctypes.c_int64), ("bsz", ctypes.c_int64), ("tiles_a", ctypes.c_int64), ("tiles_b", ctypes.c_int64),
        ("na", ctypes.c_int32), ("nb", ctypes.c_int32), ("nn", ctypes.c_int32), ("pad", ctypes.c_int32),
        ("a_sizes", ctypes.c_int64 * 4), ("a_out", ctypes.c_int64 * 4),
        ("b_sizes", ctypes.c_int64 * 4), ("b_in", ctypes.c_int64 * 4),
        ("n_sizes", ctypes.c_int64 * 6), ("n_in", ctypes.c_int64 * 6), ("n_out", ctypes.c_int64 * 6),
    ]  # fmt: skip


def compile_cubin(arch: int = 90, *, use_cache: bool = True) -> dict[str, bytes]:
    """Compile this backend's .cu file for ``sm_<arch>`` (no GPU needed): ``{file name: cubin}``."""
    return {CU_FILE.name: nvrtc.compile_cubin(CU_FILE, arch, use_cache=use_cache)}


@functools.lru_cache(maxsize=256)
def params_of(plan, go, element_size: int) -> tuple[_Params, int, bool] | None:
    """(the kernel's Params, filled once per plan, blocks, whether every input row piece starts on a
    16-byte boundary of the tensor's start) of ``plan`` on the realigned-store launch ``go``, or None
    where a decode has more dimensions than the kernel holds. Sizes and strides are in elements."""
    sizes, in_strides, out_strides = plan.sizes, plan.in_strides, contiguous_strides(plan.sizes)
    groups = {"a": go.a_dims, "b": go.b_dims, "n": go.batch_dims}
    if any(len(dims) > MAX_DECODE[k] for k, dims in groups.items()):
        return None
    size_a = product(sizes[d] for d in go.a_dims)
    size_b = product(sizes[d] for d in go.b_dims)
    tiles_a, tiles_b, blocks = realign_grid(sizes, go, element_size)

    def padded(values, n):
        return tuple(values) + (0,) * (n - len(values))

    a = [sizes[d] for d in go.a_dims], [out_strides[d] for d in go.a_dims]
    b = [sizes[d] for d in go.b_dims], [in_strides[d] for d in go.b_dims]
    nd = go.batch_dims
    n = [sizes[d] for d in nd], [in_strides[d] for d in nd], [out_strides[d] for d in nd]
    fields = (size_a, size_b, tiles_a, tiles_b, len(a[0]), len(b[0]), len(n[0]), 0,
              padded(a[0], 4), padded(a[1], 4), padded(b[0], 4), padded(b[1], 4),
              padded(n[0], 6), padded(n[1], 6), padded(n[2], 6))  # fmt: skip
    return _Params(*fields), blocks, realign_aligned(in_strides, go, element_size)


class _Args(ctypes.Structure):
    """The kernels' arguments, in the order of permute_realign.cu's signature."""

    _fields_ = [("x", ctypes.c_uint64), ("out", ctypes.c_uint64), ("params", _Params)]


_args = nvrtc.ThreadArgs(_Args)
_handles: dict = {}


def kernel_on(device: int, element_size: int, aligned: bool):
    return nvrtc.kernel_on(_handles, CU_FILE, KERNELS[element_size][aligned], device)


def launch(x: torch.Tensor, out: torch.Tensor, plan, go) -> None:
    """Write ``x.permute(...)`` (``plan`` on launch ``go``) into the contiguous ``out``, where ``params_of``
    holds the launch."""
    es = x.element_size()
    params, blocks, aligned = params_of(plan, go, es)
    device = x.get_device()
    kernel = kernel_on(device, es, aligned and x.data_ptr() % 16 == 0)
    block = _args.block
    block.x, block.out = x.data_ptr(), out.data_ptr()
    ctypes.memmove(ctypes.addressof(block.params), ctypes.addressof(params), ctypes.sizeof(_Params))
    nvrtc.launch(kernel, (blocks, 1, 1), (THREADS, 1, 1), current_stream(device), _args.address)
