"""Launcher of the CUDA C++ N-D permute kernel ``permute_vec`` (in ``cuda/transpose.cu``, compiled by NVRTC
on first use) for 1- and 2-byte elements.

``launch(x, out, plan)`` is called by ``tileflip.ops`` once every argument check is done and
``tileflip.tuning.permute_vec_launch`` has taken the plan; it fills the kernel's argument block from
that launch and launches on PyTorch's current stream of ``x``'s device.
"""

from __future__ import annotations

import ctypes
from functools import lru_cache

from tileflip import tuning
from tileflip.kernels import cuda_transpose, nvrtc
from tileflip.kernels.triton_common import current_stream

THREADS = (256, 1, 1)
AXIS_DIMS, BATCH_DIMS = 4, 6  # the argument block's arrays, as transpose.cu declares them


class _Args(ctypes.Structure):
    """``tileflip::PermuteVecArgs`` of transpose.cu, field for field."""

    _fields_ = [
        ("x", ctypes.c_uint64), ("out", ctypes.c_uint64),
        ("M", ctypes.c_int64), ("N", ctypes.c_int64), ("grid_n", ctypes.c_int64), ("tiles", ctypes.c_int64),
        ("nb", ctypes.c_int64), ("na", ctypes.c_int64), ("nn", ctypes.c_int64),
        ("b_sizes", ctypes.c_int64 * AXIS_DIMS), ("b_in", ctypes.c_int64 * AXIS_DIMS),
        ("a_sizes", ctypes.c_int64 * AXIS_DIMS), ("a_out", ctypes.c_int64 * AXIS_DIMS),
        ("n_sizes", ctypes.c_int64 * BATCH_DIMS), ("n_in", ctypes.c_int64 * BATCH_DIMS),
        ("n_out", ctypes.c_int64 * BATCH_DIMS),
    ]  # fmt: skip


def kernel_name(element_size: int) -> str:
    return f"permute_vec_u{8 * element_size}"


def kernel_names() -> tuple[str, ...]:
    return tuple(kernel_name(es) for es in (1, 2))


def _array(kind, count: int, values) -> ctypes.Array:
    return (kind * count)(*values, *([0] * (count - len(values))))


@lru_cache(maxsize=256)
def launch_of(plan, element_size: int):
    """(launch, argument block without the two addresses) of a plan permute_vec takes, worked out once."""
    go = tuning.permute_vec_launch(plan, element_size)
    if go is None:
        raise ValueError(f"permute_vec cannot take this plan (kind {plan.kind!r}, {element_size}-byte elements)")
    args = _Args()
    args.M, args.N, args.grid_n, args.tiles = go.size_b, go.size_a, go.grid[1], go.grid[0] * go.grid[1]
    args.nb, args.na, args.nn = len(go.b[0]), len(go.a[0]), len(go.n[0])
    args.b_sizes, args.b_in = _array(ctypes.c_int64, AXIS_DIMS, go.b[0]), _array(ctypes.c_int64, AXIS_DIMS, go.b[1])
    args.a_sizes, args.a_out = _array(ctypes.c_int64, AXIS_DIMS, go.a[0]), _array(ctypes.c_int64, AXIS_DIMS, go.a[1])
    args.n_sizes = _array(ctypes.c_int64, BATCH_DIMS, go.n[0])
    args.n_in, args.n_out = _array(ctypes.c_int64, BATCH_DIMS, go.n[1]), _array(ctypes.c_int64, BATCH_DIMS, go.n[2])
    return go, bytes(args)


def launch(x, out, plan) -> None:
    """Run ``plan`` (a tiles plan that ``tuning.permute_vec_launch`` takes) from ``x`` into the contiguous
    ``out``: CUDA tensors of 1- or 2-byte elements on one device, not overlapping (checked by the caller,
    who also makes x's device the current one)."""
    es = x.element_size()
    go, block = launch_of(plan, es)
    device = x.get_device()
    kernel = cuda_transpose.kernel_on(device, kernel_name(es))
    args = _Args.from_buffer_copy(block)
    args.x, args.out = x.data_ptr(), out.data_ptr()
    pointers = (ctypes.c_void_p * 1)(ctypes.addressof(args))
    nvrtc.launch(kernel, (go.programs, 1, 1), THREADS, current_stream(device), ctypes.addressof(pointers))
