"""Launcher of the CUDA C++ block-scaled quantizer in ``quantize.cu`` (compiled by NVRTC on first use): every
recipe, one block per 128 x 128 tile of x.

``refusal(x, recipe)`` says why a launch cannot run here (None where it can); ``launch`` is called once every
argument check is done, with the outputs allocated in their layouts.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from tileflip.kernels.cuda import nvrtc
from tileflip.kernels.triton.fp8 import has_hw_cvt
from tileflip.kernels.triton.launch import current_stream
from tileflip.plan import scales
from tileflip.plan.scales import QuantizeLaunch

CU_FILE = Path(__file__).with_name("quantize.cu")
TILE = 128  # quantize.cu's TILE
THREADS = 256  # quantize.cu's THREADS
INPUTS = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
RECIPES = ("fp8_1x128", "fp8_128x128", "mxfp8", "nvfp4")
# The .cu file's kernels a recipe has (mxfp8: one a rule), by the plan's rule and square flag.
_TAGS = {(scales.RULE_FP8, False): "fp8_1x128", (scales.RULE_FP8, True): "fp8_128x128",
         (scales.RULE_FLOOR, False): "mxfp8_floor", (scales.RULE_RCEIL, False): "mxfp8_rceil",
         (scales.RULE_NVFP4, False): "nvfp4"}  # fmt: skip


def kernel_name(rule: int, square: bool, rowwise: bool, columnwise: bool, dtype: torch.dtype) -> str:
    outputs = "both" if rowwise and columnwise else ("row" if rowwise else "col")
    return f"quantize_{_TAGS[rule, square]}_{outputs}_{INPUTS[dtype]}"


def kernel_names() -> list[str]:
    """Every kernel of the .cu file."""
    return [kernel_name(rule, sq, r, c, d) for rule, sq in _TAGS
            for r, c in ((True, False), (False, True), (True, True)) for d in INPUTS]  # fmt: skip


def compile_cubin(arch: int = 90, *, use_cache: bool = True) -> dict[str, bytes]:
    """Compile this backend's .cu file for ``sm_<arch>`` (no GPU needed): ``{file name: cubin}``."""
    return {CU_FILE.name: nvrtc.compile_cubin(CU_FILE, arch, use_cache=use_cache)}


def refusal(x: torch.Tensor, recipe: str, *, address: bool = True) -> str | None:
    """Why the kernel cannot take this call, or None: whole 128 x 128 tiles of a CUDA
    x whose rows are contiguous and start on 16-byte boundaries, on a GPU that converts to fp8 in
    hardware (``address``: x's own address too; a traced x has none yet)."""
    if recipe not in RECIPES:
        return f"it runs the recipes {', '.join(RECIPES)} only"
    if x.device.type != "cuda":
        return "it needs a CUDA tensor"
    if not has_hw_cvt(x.device.index if x.device.index is not None else torch.cuda.current_device()):
        return "it needs a GPU that converts to fp8 in hardware (compute capability 8.9 or later)"
    if x.dtype not in INPUTS:
        return f"it takes bf16, fp16 or fp32 x, got {x.dtype}"
    M, K = x.shape
    if M % TILE or K % TILE:
        return f"it needs M and K to be multiples of {TILE}, got {M}x{K}"
    if x.stride(1) != 1:
        return f"it needs x's rows contiguous (x.stride(1) == 1), got strides {tuple(x.stride())}"
    if (x.stride(0) * x.element_size()) % 16 or (address and x.data_ptr() % 16):
        return "it needs every row of x to start on a 16-byte boundary"
    if M // TILE * (K // TILE) >= 2**31:
        return "x has too many tiles for one launch"
    return None


class _Args(ctypes.Structure):
    """The kernels' arguments, in the order of quantize.cu's signature."""

    _fields_ = [("x", ctypes.c_uint64), ("data", ctypes.c_uint64), ("scale", ctypes.c_uint64),
                ("data_t", ctypes.c_uint64), ("scale_t", ctypes.c_uint64), ("gs", ctypes.c_uint64),
                ("M", ctypes.c_int64), ("K", ctypes.c_int64), ("ld", ctypes.c_int64), ("ue8m0", ctypes.c_int32),
                ("blocked", ctypes.c_int32)]  # fmt: skip


_args = nvrtc.ThreadArgs(_Args)
_handles: dict = {}


def launch(x, data, scale, data_t, scale_t, global_scale, plan: QuantizeLaunch) -> None:
    """Quantize x (``refusal`` gave None) by ``plan`` into the given outputs, None where not asked for;
    ``global_scale`` is nvfp4's 0-d fp32 tensor on x's device, or None."""
    device = x.get_device()
    name = kernel_name(plan.rule, plan.square, plan.rowwise, plan.columnwise, x.dtype)
    kernel = nvrtc.kernel_on(_handles, CU_FILE, name, device)
    M, K = x.shape
    a = _args.block
    a.x = x.data_ptr()
    a.data, a.scale = (0, 0) if data is None else (data.data_ptr(), scale.data_ptr())
    a.data_t, a.scale_t = (0, 0) if data_t is None else (data_t.data_ptr(), scale_t.data_ptr())
    a.gs = 0 if global_scale is None else global_scale.data_ptr()
    a.M, a.K, a.ld, a.ue8m0, a.blocked = M, K, x.stride(0), int(plan.ue8m0), int(plan.blocked)
    nvrtc.launch(kernel, (M // TILE * (K // TILE), 1, 1), (THREADS, 1, 1), current_stream(device), _args.address)
