"""Launcher of the staged permute in ``permute_staged.cu`` (compiled by NVRTC on first use): any permute
whose boxes move whole vectors of 4 to 16 bytes on both sides, through shared memory
(``tileflip.plan.staged.StagedLaunch``).

``launch(x, out, plan, go)`` is called once every argument check is done (``out`` contiguous, not
overlapping ``x``). The grid is persistent: as many blocks as the kernel keeps resident on the device's
SMs, or fewer where there are fewer boxes.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

from tileflip.kernels.cuda import nvrtc
from tileflip.kernels.triton.launch import current_stream
from tileflip.plan.staged import DIMS, THREADS, staged_fields

CU_FILE = Path(__file__).with_name("permute_staged.cu")


def kernel_names() -> list[str]:
    """Every kernel of permute_staged.cu: one per element size, load and store vector width, and gather
    (element by element, or whole vectors: ``_v``)."""
    names = []
    for es in (1, 2, 4, 8):
        widths = [w for w in (4, 8, 16) if w >= es]
        names += [f"permute_staged_e{es}_i{vi}_o{vo}{v}" for vi in widths for vo in widths for v in ("", "_v")]
    return names


_INTS = ("tiles", "nl", "ns", "vps_in", "vps_out", "inner_in", "inner_out", "n_oin", "k_os_in", "n_sout", "n_oout",
         "lanes_seg", "nseg", "vps_pad", "k_is_out", "same_cut", "n_tile", "ti_is", "ti_os", "cut_is", "size_is",
         "cut_os", "size_os", "pitch", "rot", "shift")  # fmt: skip
_ARRAYS = ("oin_ext", "oin_in", "oin_row", "sout_ext", "sout_row", "sout_col", "oout_ext", "oout_out", "oout_row",
           "oout_col", "tile_count", "tile_magic", "tile_shift")  # fmt: skip
_WIDE = ("tile_in", "tile_out")


class _Params(ctypes.Structure):
    """The kernel's ``StagedParams`` (permute_staged.cu), field for field."""

    _fields_ = ([(name, ctypes.c_int32) for name in _INTS] + [(name, ctypes.c_int32 * DIMS) for name in _ARRAYS]
                + [(name, ctypes.c_int64 * DIMS) for name in _WIDE])  # fmt: skip


class _Args(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint64), ("out", ctypes.c_uint64), ("params", _Params)]


def compile_cubin(arch: int = 90, *, use_cache: bool = True) -> dict[str, bytes]:
    """Compile this backend's .cu file for ``sm_<arch>`` (no GPU needed): ``{file name: cubin}``."""
    return {CU_FILE.name: nvrtc.compile_cubin(CU_FILE, arch, use_cache=use_cache)}


@functools.lru_cache(maxsize=256)
def params_of(sizes, in_strides, go) -> _Params:
    """The kernel's parameters of launch ``go``, filled once per plan."""
    fields = staged_fields(sizes, in_strides, go)
    params = _Params()
    for name in _INTS:
        setattr(params, name, fields[name])
    for name in (*_ARRAYS, *_WIDE):
        getattr(params, name)[:] = fields[name]
    return params


@functools.lru_cache(maxsize=64)
def _resident(kernel, device: int) -> int:
    """Blocks of ``kernel`` that the device keeps resident at once, over all its SMs."""
    driver = nvrtc._bindings()[0]
    per_sm = nvrtc._check("cuOccupancyMaxActiveBlocksPerMultiprocessor",
                          driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(kernel, THREADS, 0))  # fmt: skip
    return max(1, int(per_sm)) * torch.cuda.get_device_properties(device).multi_processor_count


_args = nvrtc.ThreadArgs(_Args)
_handles: dict = {}


def launch(x: torch.Tensor, out: torch.Tensor, plan, go) -> None:
    """Write ``x.permute(...)`` (``plan`` on staged launch ``go``) into the contiguous ``out``."""
    device = x.get_device()
    kernel = nvrtc.kernel_on(_handles, CU_FILE, go.kernel, device)
    params = params_of(plan.sizes, plan.in_strides, go)
    block = _args.block
    block.x, block.out = x.data_ptr(), out.data_ptr()
    ctypes.memmove(ctypes.addressof(block.params), ctypes.addressof(params), ctypes.sizeof(_Params))
    blocks = min(go.tiles, _resident(kernel, device))
    nvrtc.launch(kernel, (blocks, 1, 1), (THREADS, 1, 1), current_stream(device), _args.address)
