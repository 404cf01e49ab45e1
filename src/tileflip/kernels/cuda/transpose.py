"""Launcher of the CUDA C++ transposes in ``cuda/transpose.cu`` (compiled by NVRTC on first use).

``launch(x, out, variant)`` is called by ``tileflip.ops`` once every argument check is done; it only
picks the kernel, plans the grid with ``tileflip.plan.transpose_grid`` and launches on PyTorch's
current stream of ``x``'s device.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from pathlib import Path

import torch

from tileflip.kernels.cuda import nvrtc
from tileflip.kernels.triton.launch import current_stream
from tileflip.plan import transpose_grid

CU_FILE = Path(__file__).with_name("transpose.cu")

VARIANTS = ("naive", "tiled", "tiled_nopad", "vec")
ELEMENT_BITS = (8, 16, 32, 64)
VARIANT_BITS = {"vec": (8, 16)}  # element widths a variant exists for (default: every one)

# variant -> (tile rows, tile cols, thread block); must match the constants in transpose.cu. The vec
# tile is 128 rows x 128 bytes: its column count is 128 / element size (``geometry``).
GEOMETRY = {
    "naive": (16, 16, (16, 16, 1)),
    "tiled": (32, 32, (32, 8, 1)),
    "tiled_nopad": (32, 32, (32, 8, 1)),
    "vec": (128, 128, (256, 1, 1)),
}


def geometry(variant: str, element_size: int) -> tuple:
    """(tile rows, tile cols, thread block) of a variant for an element size."""
    rows, cols, block = GEOMETRY[variant]
    return (rows, cols // element_size, block) if variant == "vec" else (rows, cols, block)


def kernel_name(variant: str, bits: int) -> str:
    return f"transpose_{variant}_u{bits}"


def kernel_names() -> tuple[str, ...]:
    """Every ``extern "C"`` kernel that transpose.cu defines."""
    return tuple(kernel_name(v, b) for v in VARIANTS for b in VARIANT_BITS.get(v, ELEMENT_BITS))


def compile_cubin(arch: int = 90, *, use_cache: bool = True) -> dict[str, bytes]:
    """Compile every .cu file of this backend for ``sm_<arch>`` (no GPU needed): ``{file name: cubin}``."""
    return {CU_FILE.name: nvrtc.compile_cubin(CU_FILE, arch, use_cache=use_cache)}


@functools.lru_cache(maxsize=1024)
def _grid(M: int, N: int, variant: str, element_size: int) -> tuple[int, int]:
    """(programs, tiles per row) of the launch, from the planner."""
    tile_m, tile_n, _ = geometry(variant, element_size)
    grid = transpose_grid(M, N, tile_m, tile_n)
    return grid.programs, grid.grid_n


class _Params(ctypes.Structure):
    """The kernels' parameter block: (in, out, M, N, sxm, sxn, grid_n), as transpose.cu declares them."""

    _fields_ = [("x", ctypes.c_uint64), ("out", ctypes.c_uint64), ("M", ctypes.c_int64), ("N", ctypes.c_int64),
                ("sxm", ctypes.c_int64), ("sxn", ctypes.c_int64), ("grid_n", ctypes.c_int64)]  # fmt: skip


_params = nvrtc.ThreadArgs(_Params)
_handles: dict = {}  # (kernel name, device) -> kernel handle


def launch(x: torch.Tensor, out: torch.Tensor, variant: str) -> None:
    """Write ``x.t()`` into ``out``.

    ``x``: 2-D CUDA tensor of dtype uint8/16/32/64, any non-negative strides and storage offset, M, N > 0;
    ``out``: contiguous (N, M), same dtype and device, not overlapping ``x``. The vec variant also needs
    what ``tileflip.ops.vec_refusal`` checks. Checked by the caller, who
    also makes x's device the current one where several GPUs are visible (``tileflip.ops``).
    """
    M, N = x.shape
    sxm, sxn = x.stride()
    launch_known(x, out, M, N, sxm, sxn, x.get_device(), variant)


def kernel_on(device: int, name: str):
    """The handle of transpose.cu's kernel ``name`` on ``device``, with this thread's context made ready
    for a launch there (the first time on each thread and device)."""
    # A thread that never touched the CUDA runtime has no current context, and a launch on the NULL
    # stream runs in the current context.
    return nvrtc.kernel_on(_handles, CU_FILE, name, device)


def launch_known(x, out, M: int, N: int, sxm: int, sxn: int, device: int, variant: str) -> None:
    """``launch`` with the sizes, strides and device the caller has already read."""
    programs, grid_n = _grid(M, N, variant, x.element_size())
    kernel = kernel_on(device, kernel_name(variant, 8 * x.element_size()))
    params = _params
    block = params.block
    block.x, block.out, block.M, block.N, block.sxm, block.sxn, block.grid_n = (
        x.data_ptr(), out.data_ptr(), M, N, sxm, sxn, grid_n)  # fmt: skip
    nvrtc.launch(kernel, (programs, 1, 1), GEOMETRY[variant][2], current_stream(device), params.address)


def direct_launch(M: int, N: int, sxm: int, sxn: int, es: int, device: int, variant: str):
    """A callable ``go(x, out, xp, op)`` that launches this call signature with its own parameter block
    (sizes, strides and grid written once per thread, the two addresses per call); None until the
    kernel is loaded on ``device``. ``tileflip.ops`` keeps one per call signature."""
    kernel = _handles.get((kernel_name(variant, 8 * es), device))
    if kernel is None:
        return None
    programs, grid_n = _grid(M, N, variant, es)
    grid, threads = (programs, 1, 1), GEOMETRY[variant][2]
    local = threading.local()

    def go(x, out, xp: int, op: int) -> None:
        params = getattr(local, "params", None)
        if params is None:
            if not nvrtc.is_ready(device):  # this thread's first launch on the device
                launch_known(x, out, M, N, sxm, sxn, device, variant)
                return
            params = local.params = nvrtc.ThreadArgs(_Params)
            block = params.block
            block.M, block.N, block.sxm, block.sxn, block.grid_n = M, N, sxm, sxn, grid_n
        block = params.block
        block.x, block.out = xp, op
        nvrtc.launch(kernel, grid, threads, current_stream(device), params.address)

    return go

