"""Launcher of the CUDA C++ permute in ``cuda/permute_realign.cu`` (compiled by NVRTC on first use): the
launches that ``tileflip.tuning.realign_launch`` gives it, 1-byte elements whose output rows start at
any byte, written as whole aligned 32-byte sectors.

``launch(x, out, plan)`` is called by ``tileflip.ops.core`` once every argument check is done (``out``
contiguous, not overlapping ``x``); ``usable`` says whether a call may take it.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from pathlib import Path

import torch

from tileflip import tuning
from tileflip.kernels.cuda import nvrtc
from tileflip.kernels.cuda.transpose import _arch
from tileflip.kernels.triton.launch import current_stream
from tileflip.plan import contiguous_strides

CU_FILE = Path(__file__).with_name("permute_realign.cu")
KERNEL = "permute_realign_u8"
THREADS = 256
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
def params_of(plan) -> tuple[_Params, int] | None:
    """(the kernel's Params, filled once per plan, blocks) of ``plan``, or None where
    ``tuning.realign_launch`` leaves it to the Triton kernels (or a decode has more dimensions than the
    kernel holds)."""
    go = tuning.realign_launch(plan, 1)
    if go is None:
        return None
    sizes, in_strides, out_strides = plan.sizes, plan.in_strides, contiguous_strides(plan.sizes)
    groups = {"a": go.a_dims, "b": go.b_dims, "n": go.batch_dims}
    if any(len(dims) > MAX_DECODE[k] for k, dims in groups.items()):
        return None
    size_a = tuning._product(sizes[d] for d in go.a_dims)
    size_b = tuning._product(sizes[d] for d in go.b_dims)
    tiles_a, tiles_b, blocks = tuning.realign_grid(sizes, go)

    def padded(values, n):
        return tuple(values) + (0,) * (n - len(values))

    a = [sizes[d] for d in go.a_dims], [out_strides[d] for d in go.a_dims]
    b = [sizes[d] for d in go.b_dims], [in_strides[d] for d in go.b_dims]
    nd = go.batch_dims
    n = [sizes[d] for d in nd], [in_strides[d] for d in nd], [out_strides[d] for d in nd]
    fields = (size_a, size_b, tiles_a, tiles_b, len(a[0]), len(b[0]), len(n[0]), 0,
              padded(a[0], 4), padded(a[1], 4), padded(b[0], 4), padded(b[1], 4),
              padded(n[0], 6), padded(n[1], 6), padded(n[2], 6))  # fmt: skip
    return _Params(*fields), blocks


def usable(x: torch.Tensor, plan) -> bool:
    """Whether this call of ``plan`` takes the CUDA kernel: the plan's launch does (``params_of``), x's
    address is 16-byte aligned (its row pieces are read as aligned 16-byte words), and NVRTC is there
    (else the Triton kernel runs it)."""
    return x.data_ptr() % 16 == 0 and params_of(plan) is not None and nvrtc.available()


class _ThreadArgs(threading.local):
    """One argument block per thread (the driver copies the values during cuLaunchKernel, which releases
    the GIL): the two pointers, the Params, and the array of pointers to them that the launch reads."""

    def __init__(self):
        self.x = ctypes.c_uint64()
        self.out = ctypes.c_uint64()
        self.params = _Params()
        self.pointers = (ctypes.c_void_p * 3)(
            ctypes.addressof(self.x), ctypes.addressof(self.out), ctypes.addressof(self.params)
        )
        self.address = ctypes.addressof(self.pointers)
        self.params_address = ctypes.addressof(self.params)


_args = _ThreadArgs()
_handles: dict = {}


def kernel_on(device: int):
    nvrtc.context_ready(device)
    kernel = _handles.get(device)
    if kernel is None:
        kernel = _handles[device] = nvrtc.get_kernel(CU_FILE, KERNEL, device, _arch(device))
    return kernel


def launch(x: torch.Tensor, out: torch.Tensor, plan) -> None:
    """Write ``x.permute(...)`` (``plan``) into the contiguous ``out``, for a call that is ``usable``."""
    params, blocks = params_of(plan)
    device = x.get_device()
    kernel = kernel_on(device)
    args = _args
    args.x.value, args.out.value = x.data_ptr(), out.data_ptr()
    ctypes.memmove(args.params_address, ctypes.addressof(params), ctypes.sizeof(_Params))
    nvrtc.launch(kernel, (blocks, 1, 1), (THREADS, 1, 1), current_stream(device), args.address)
