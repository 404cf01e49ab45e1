"""``cast_transpose``: x to fp8 in both layouts, and max|x|, from one read of x.

``y`` holds the bits torch gives for ``(x.float() * scale).clamp(-fmax, fmax).to(dtype)``, with the
product taken in fp32 (a Python float ``scale`` is first rounded to fp32, as torch rounds it): finite
values above fmax and +-inf saturate, everything else rounds to nearest even, -0.0 stays -0.0, NaN gives
NaN. ``amax`` is ``x.abs().amax().float()`` of the unscaled x (NaN if x holds one; 0.0 for an empty x).
The cast is not differentiable: an ``x`` or ``scale`` that requires grad is refused in grad mode.
Kernel and conversion: ``tileflip.kernels.triton.cast_transpose`` and ``docs/design.md``.
"""

from __future__ import annotations

import numbers

import torch

from tileflip import tuning
from tileflip.ops.backends import kernels
from tileflip.ops.checks import check_float_matrix, check_scalar_tensor

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def _kernels():
    return kernels("triton.cast_transpose")


def _check_x(x) -> None:
    check_float_matrix(x, "cast_transpose")
    if x.device.type == "cpu" and not _kernels().is_interpreted():
        raise ValueError(
            "cast_transpose got a CPU tensor, but Triton's interpreter is off: set TRITON_INTERPRET=1 "
            "before importing tileflip to run the kernel on the CPU"
        )


def _check_dtype(dtype) -> None:
    if dtype not in FP8_DTYPES:
        raise TypeError(f"dtype must be torch.float8_e4m3fn or torch.float8_e5m2, got {dtype!r}")


def _check_scale(x: torch.Tensor, scale) -> float | torch.Tensor:
    """The scale as the kernel takes it (a Python float, or a plain 0-d float32 tensor), or a named error."""
    if isinstance(scale, torch.Tensor):
        check_scalar_tensor(scale, x, "scale", "cast_transpose")
        return scale.resolve_neg()
    return _scale_value(scale)


def _scale_value(scale) -> float:
    """A scale given as a number, as a Python float, or a named error."""
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a real number, a 0-d float32 tensor or None, got {type(scale).__name__}")
    try:
        return float(scale)
    except OverflowError:
        raise ValueError("scale must be within float range, got a value too large for a float") from None


def _check_flag(name: str, value) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")


def cast_transpose(
    x: torch.Tensor,
    dtype: torch.dtype = torch.float8_e4m3fn,
    scale: float | torch.Tensor | None = None,
    *,
    transpose: bool = True,
    amax: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Return ``(y, y_t, amax)`` for the 2-D fp32, fp16 or bf16 tensor ``x`` (any strides).

    ``y`` is ``saturate(x * scale)`` in ``dtype`` (``torch.float8_e4m3fn`` or ``torch.float8_e5m2``),
    contiguous M x N; ``y_t`` is its contiguous N x M transpose; ``amax`` is max|x| of the unscaled x
    as a 0-d float32 tensor. ``transpose=False`` and ``amax=False`` put None in their place and skip
    that work. ``scale`` is a Python float or a 0-d float32 tensor on x's device (read by the kernel,
    so the host never waits for it); None means 1. The rounding rule is in this module's docstring.
    Refusals are ``TypeError`` or ``ValueError`` naming the argument, raised before any work.

    Under ``torch.compile`` the call goes through the registered op ``tileflip::cast_transpose``.
    """
    if torch.compiler.is_compiling():
        # The schema alone would coerce (True as 1.0) or give the dispatcher's message: the plain-Python
        # refusals run here, the tensors' in the fake implementation.
        _check_dtype(dtype)
        tensor = scale if isinstance(scale, torch.Tensor) else None
        value = 1.0 if tensor is not None else _scale_value(1.0 if scale is None else scale)
        _check_flag("transpose", transpose)
        _check_flag("amax", amax)
        y, y_t, top = torch.ops.tileflip.cast_transpose(x, value, tensor, dtype, transpose, amax)
        return y, (y_t if transpose else None), (top if amax else None)
    return cast_transpose_impl(x, dtype, scale, transpose, amax)


def check_call(x, dtype, scale, transpose, amax):
    """Every refusal of ``cast_transpose``, in order; returns the scale as the kernel takes it."""
    _check_x(x)
    _check_dtype(dtype)
    scale = _check_scale(x, 1.0 if scale is None else scale)
    _check_flag("transpose", transpose)
    _check_flag("amax", amax)
    return scale


def cast_transpose_impl(x, dtype, scale, transpose: bool, amax: bool):
    """``cast_transpose`` without the dispatcher: checks, then one kernel (the eager path)."""
    scale = check_call(x, dtype, scale, transpose, amax)
    x = x.resolve_neg()
    M, N = x.shape
    y = torch.empty((M, N), dtype=dtype, device=x.device)
    y_t = torch.empty((N, M), dtype=dtype, device=x.device) if transpose else None
    if x.numel() == 0:
        return y, y_t, (torch.zeros((), dtype=torch.float32, device=x.device) if amax else None)
    kernels = _kernels()
    if x.device.type == "cuda" and x.device.index != torch.cuda.current_device():
        with torch.cuda.device(x.device):
            return y, y_t, _launch(kernels, x, y, y_t, scale, dtype, amax)
    return y, y_t, _launch(kernels, x, y, y_t, scale, dtype, amax)


def cast_transpose_fake(x, dtype, scale, transpose: bool, amax: bool):
    """The registered op's outputs without data: (y, y_t or an empty placeholder, amax or an empty one)."""
    check_call(x, dtype, scale, transpose, amax)
    M, N = x.shape
    y = x.new_empty((M, N), dtype=dtype)
    y_t = x.new_empty((N, M) if transpose else (0,), dtype=dtype)
    top = x.new_empty(() if amax else (0,), dtype=torch.float32)
    return y, y_t, top


def _launch(kernels, x, y, y_t, scale, dtype, amax: bool):
    """Run the kernel; return the amax (or None). The programs fold their partials into a fresh zeroed
    int32 with an atomic max, so the one kernel is the whole call. While a CUDA graph is being
    captured the slot could not be zeroed again between replays, so the programs write one partial
    each and a reduction kernel follows (``finalize_amax``)."""
    config = tuning.cast_config(x.element_size())
    if not amax:
        kernels.launch(x, y, y_t, None, scale, dtype, config)
        return None
    if x.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        partials = torch.empty(kernels.num_programs(*x.shape, config), dtype=torch.int32, device=x.device)
        kernels.launch(x, y, y_t, partials, scale, dtype, config)
        return kernels.finalize_amax(partials)
    slot = kernels.amax_slot(x.device)
    kernels.launch(x, y, y_t, slot, scale, dtype, config, amax_atomic=True)
    return slot.view(torch.float32)
