"""Launcher of the CUDA vec permute in ``cuda/permute.cu`` (compiled by NVRTC on first use).

``launch(x, out, plan, go)`` runs a plan whose ``tileflip.tuning.vec_permute_launch`` is ``go`` (the
caller has checked every argument): the kernel's one parameter, a ``PermuteVecArgs`` struct, is laid
out once per plan (sizes, strides, the magic numbers of ``tileflip.plan.magic_divisor``) and copied per
call with the two addresses filled in.
"""

from __future__ import annotations

import ctypes
from functools import lru_cache
from pathlib import Path

from tileflip import tuning
from tileflip.kernels import cuda_transpose, nvrtc
from tileflip.kernels.triton_common import current_stream
from tileflip.plan import contiguous_strides, magic_divisor

CU_FILE = Path(__file__).with_name("cuda") / "permute.cu"
ELEMENT_BITS = (8, 16)
THREADS = (256, 1, 1)
_AXIS = tuning.VEC_PERMUTE_AXIS_DIMS
_BATCH = tuning.VEC_PERMUTE_BATCH_DIMS


class _Args(ctypes.Structure):
    """``tileflip::PermuteVecArgs`` of permute.cu, field for field."""

    _fields_ = [
        ("x", ctypes.c_uint64), ("out", ctypes.c_uint64),
        ("a_out", ctypes.c_int64 * _AXIS), ("b_in", ctypes.c_int64 * _AXIS),
        ("n_in", ctypes.c_int64 * _BATCH), ("n_out", ctypes.c_int64 * _BATCH),
        ("a_size", ctypes.c_uint32 * _AXIS), ("a_magic", ctypes.c_uint32 * _AXIS), ("a_shift", ctypes.c_uint32 * _AXIS),
        ("b_size", ctypes.c_uint32 * _AXIS), ("b_magic", ctypes.c_uint32 * _AXIS), ("b_shift", ctypes.c_uint32 * _AXIS),
        ("n_size", ctypes.c_uint32 * _BATCH), ("n_magic", ctypes.c_uint32 * _BATCH),
        ("n_shift", ctypes.c_uint32 * _BATCH),
        ("na", ctypes.c_uint32), ("nb", ctypes.c_uint32), ("nn", ctypes.c_uint32),
        ("size_a", ctypes.c_uint32), ("size_b", ctypes.c_uint32),
        ("tiles_a", ctypes.c_uint32), ("tiles_b", ctypes.c_uint32),
    ]  # fmt: skip


def kernel_name(element_size: int) -> str:
    return f"permute_vec_u{8 * element_size}"


def kernel_names() -> tuple[str, ...]:
    """Every ``extern "C"`` kernel that permute.cu defines."""
    return tuple(f"permute_vec_u{bits}" for bits in ELEMENT_BITS)


def compile_cubin(arch: int = 90, *, use_cache: bool = True) -> dict[str, bytes]:
    """Compile permute.cu for ``sm_<arch>`` (no GPU needed): ``{file name: cubin}``."""
    return {CU_FILE.name: nvrtc.compile_cubin(CU_FILE, arch, use_cache=use_cache)}


def magics(sizes) -> tuple[tuple, tuple]:
    """(magics, shifts) of one decode's sizes (innermost first): every size but the outermost is divided
    by, with ``magic_divisor``'s numbers (its magic as the unsigned 32-bit value); 0 for the outermost."""
    pairs = [magic_divisor(s) for s in sizes[:-1]] + [(0, 0)]
    return tuple(m & 0xFFFFFFFF for m, _ in pairs), tuple(sh for _, sh in pairs)


@lru_cache(maxsize=256)
def args_of(plan, go) -> bytes:
    """The kernel's parameter for ``plan`` launched as ``go`` (``tuning.vec_permute_launch``), its two
    addresses left 0: the struct's bytes."""
    sizes, in_strides = plan.sizes, plan.in_strides
    out_strides = contiguous_strides(sizes)
    a = _Args()

    def fill(prefix, dims, strides, stride_field):
        dim_sizes = tuple(sizes[d] for d in dims) or (1,)
        getattr(a, prefix + "_size")[: len(dim_sizes)] = dim_sizes
        getattr(a, prefix + "_magic")[: len(dim_sizes)], getattr(a, prefix + "_shift")[: len(dim_sizes)] = magics(
            dim_sizes)
        for field, side in zip(stride_field, strides):
            getattr(a, field)[: len(dim_sizes)] = tuple(side[d] for d in dims) or (0,)
        return len(dim_sizes)

    a.na = fill("a", go.a_dims, (out_strides,), ("a_out",))
    a.nb = fill("b", go.b_dims, (in_strides,), ("b_in",))
    a.nn = fill("n", go.batch_dims, (in_strides, out_strides), ("n_in", "n_out"))
    a.size_a, a.size_b, a.tiles_a, a.tiles_b = go.size_a, go.size_b, go.tiles_a, go.tiles_b
    return bytes(a)


def launch(x, out, plan, go) -> None:
    """Write ``x.permute(...)`` as planned into the contiguous ``out`` (1- or 2-byte elements; ``go`` is
    ``tuning.vec_permute_launch(plan, x.element_size())``), on PyTorch's current stream of x's device."""
    device = x.get_device()
    kernel = cuda_transpose.kernel_on(device, kernel_name(x.element_size()), CU_FILE)
    args = _Args.from_buffer_copy(args_of(plan, go))
    args.x, args.out = x.data_ptr(), out.data_ptr()
    pointer = (ctypes.c_void_p * 1)(ctypes.addressof(args))
    nvrtc.launch(kernel, (go.programs, 1, 1), THREADS, current_stream(device), ctypes.addressof(pointer))
