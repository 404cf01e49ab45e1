"""Launcher of the CUDA C++ transposes in ``cuda/transpose.cu`` (compiled by NVRTC on first use).

``launch(x, out, variant)`` is called by ``tileflip.ops`` once every argument check is done; it only
picks the kernel, plans the grid with ``tileflip.plan.transpose_grid`` and launches on PyTorch's
current stream of ``x``'s device.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

from tileflip.kernels import nvrtc
from tileflip.plan import transpose_grid

CU_FILE = Path(__file__).with_name("cuda") / "transpose.cu"

VARIANTS = ("naive", "tiled", "tiled_nopad")
ELEMENT_BITS = (8, 16, 32, 64)

# variant -> (tile rows, tile cols, thread block); must match the constants in transpose.cu.
GEOMETRY = {
    "naive": (16, 16, (16, 16, 1)),
    "tiled": (32, 32, (32, 8, 1)),
    "tiled_nopad": (32, 32, (32, 8, 1)),
}

# (in, out, M, N, sxm, sxn, grid_n): the C signature shared by every kernel of transpose.cu.
_ARG_TYPES = (ctypes.c_void_p, ctypes.c_void_p) + (ctypes.c_longlong,) * 5


def kernel_name(variant: str, bits: int) -> str:
    return f"transpose_{variant}_u{bits}"


def kernel_names() -> tuple[str, ...]:
    """Every ``extern "C"`` kernel that transpose.cu defines."""
    return tuple(kernel_name(v, b) for v in VARIANTS for b in ELEMENT_BITS)


def compile_cubin(arch: int = 90, *, use_cache: bool = True) -> dict[str, bytes]:
    """Compile every .cu file of this backend for ``sm_<arch>`` (no GPU needed): ``{file name: cubin}``."""
    return {CU_FILE.name: nvrtc.compile_cubin(CU_FILE, arch, use_cache=use_cache)}


@functools.cache
def _arch(device: int) -> int:
    major, minor = torch.cuda.get_device_capability(device)
    return 10 * major + minor


def launch(x: torch.Tensor, out: torch.Tensor, variant: str) -> None:
    """Write ``x.t()`` into ``out``.

    ``x``: 2-D CUDA tensor of dtype uint8/16/32/64, any non-negative strides and storage offset, M, N > 0;
    ``out``: contiguous (N, M), same dtype and device, not overlapping ``x``. Checked by the caller.
    """
    M, N = x.shape
    sxm, sxn = x.stride()
    tile_m, tile_n, block = GEOMETRY[variant]
    grid = transpose_grid(M, N, tile_m, tile_n)
    device = x.device.index
    # The guard makes the tensor's device current, so the current stream (possibly the NULL stream,
    # which runs in the current context) belongs to it even when another device is PyTorch's current one.
    with torch.cuda.device(device):
        nvrtc.ensure_context(device)
        kernel = nvrtc.get_kernel(CU_FILE, kernel_name(variant, 8 * x.element_size()), device, _arch(device))
        stream = torch.cuda.current_stream().cuda_stream
        args = (x.data_ptr(), out.data_ptr(), M, N, sxm, sxn, grid.grid_n)
        nvrtc.launch(kernel, grid.launch, block, stream, (args, _ARG_TYPES))
