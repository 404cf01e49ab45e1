"""Argument checks shared by every op: input and output tensors, overlap, autograd.

Every call is checked before anything is written, in this order: ``x`` (type, layout, rank, dtype),
``backend``, ``out`` (type, layout, shape, dtype, device, contiguity, a conjugate or negative view, an
inference tensor outside inference mode, overlap with ``x``), the backend's device, then ``out=`` under
autograd. Each refusal is a ``TypeError`` or ``ValueError`` whose message names the argument.
"""

from __future__ import annotations

import torch
import torch.autograd.forward_ad as _forward_ad

from tileflip.kernels import dtypes


def _span(t: torch.Tensor, start: int | None = None) -> tuple[int, int]:
    """Byte range [start, stop) that a non-empty tensor's elements occupy (torch strides are >= 0), from its
    address or from ``start``."""
    if start is None:
        start = t.data_ptr()
    if t.dim() == 2:  # the transpose's case, kept off the generic loop: it is on every call's path
        (m, n), (sm, sn) = t.shape, t.stride()
        last = (m - 1) * sm + (n - 1) * sn
    else:
        last = 0
        for size, stride in zip(t.shape, t.stride()):
            last += (size - 1) * stride
    return start, start + (last + 1) * t.element_size()


def check_no_overlap(x: torch.Tensor, out: torch.Tensor, arg: str = "out", *, traced: bool = False) -> None:
    """Refuse an ``out`` whose memory range meets ``x``'s (a conservative test: ranges, not elements).

    ``traced``: the registered ops' fake tensors under ``torch.compile``, which have no addresses but keep
    their storage: the ranges are compared within a storage the two share. (A backend that does not
    write ``out`` in place hands the real op a copy of it, where the real call's test sees no overlap.)"""
    if x.numel() == 0 or out.numel() == 0 or x.device != out.device:
        return
    if traced:
        if not torch._C._is_alias_of(out, x):
            return
        x0, x1 = _span(x, x.storage_offset() * x.element_size())
        o0, o1 = _span(out, out.storage_offset() * out.element_size())
    else:
        x0, x1 = _span(x)
        o0, o1 = _span(out)
    if x0 < o1 and o0 < x1:
        raise ValueError(f"{arg} overlaps x in memory; the output must be a separate buffer")


def check_dense(t: torch.Tensor, arg: str) -> None:
    """Refuse a sparse, mkldnn or nested tensor: the kernels read and write strided memory."""
    if t.layout != torch.strided or t.is_nested:
        kind = "a nested tensor" if t.is_nested else f"layout {t.layout}"
        raise TypeError(f"{arg} must be a dense tensor (layout torch.strided), got {kind}")


def check_out(x: torch.Tensor, out, shape: tuple, arg: str = "out", *, memory: bool = True) -> None:
    """Check ``out``'s type, layout, shape, dtype, device, contiguity and conjugate or negative bit, that it
    misses ``x``, and (``memory``: real tensors, not the registered ops' fake ones) that it is not an
    inference tensor outside inference mode."""
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{arg} must be a torch.Tensor or None, got {type(out).__name__}")
    check_dense(out, arg)
    if out.shape != shape:
        raise ValueError(f"{arg} must have shape {tuple(shape)}, got {tuple(out.shape)}")
    if out.dtype != x.dtype:
        raise TypeError(f"{arg} must have dtype {x.dtype} (x's), got {out.dtype}")
    if out.device != x.device:
        raise ValueError(f"{arg} must be on {x.device} (x's device), got {out.device}")
    if not out.is_contiguous():
        raise ValueError(f"{arg} must be contiguous, got strides {tuple(out.stride())}")
    if out.is_conj() or out.is_neg():
        raise ValueError(f"{arg} must not be a conjugate or negative view (the kernels write plain values); "
                         f"pass a plain tensor")  # fmt: skip
    if memory and out.is_inference() and not torch.is_inference_mode_enabled():
        raise ValueError(f"{arg} is an inference tensor (made under torch.inference_mode()), which torch does "
                         f"not let be written outside inference mode: pass a tensor made outside it, or "
                         f"call under torch.inference_mode()")  # fmt: skip
    check_no_overlap(x, out, arg, traced=not memory)


def check_input(x, ndim: int | None = 2, arg: str = "x") -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{arg} must be a torch.Tensor, got {type(x).__name__}")
    check_dense(x, arg)
    if ndim is not None and x.dim() != ndim:
        raise ValueError(f"{arg} must be {ndim}-D, got a {x.dim()}-D tensor of shape {tuple(x.shape)}")
    dtypes.check_dtype(x.dtype, arg)
    if not (x.is_cuda or x.is_cpu):
        raise ValueError(f"{arg} must be on a CPU or CUDA device, got {x.device}")


def resolved(x: torch.Tensor) -> torch.Tensor:
    """``x``'s values in plain memory: a conjugate or negative view resolved into a temporary."""
    return x.resolve_conj().resolve_neg() if x.is_conj() or x.is_neg() else x


def tracks_grad(x: torch.Tensor, out, name: str) -> bool:
    """Whether autograd must record the call (grad mode and ``x`` requires grad, or ``x`` carries a
    forward-mode tangent); refuses an ``out`` under autograd, as torch does."""
    backward = torch.is_grad_enabled() and (x.requires_grad or (out is not None and out.requires_grad))
    forward = _forward_ad._current_level >= 0 and _forward_ad.unpack_dual(x).tangent is not None
    transformed = _functorch_wrapped(x)  # torch.func's grad, jvp and vmap hold x in a wrapper with no memory
    if out is not None and (backward or forward or transformed):
        which = "x" if x.requires_grad or forward or transformed else "out"
        raise ValueError(f"{name}() with out= does not support autograd, but {which} requires grad: call it "
                         f"without out, or under torch.no_grad()")  # fmt: skip
    return backward or forward or transformed


_functorch_wrapped = torch._C._functorch.is_functorch_wrapped_tensor


def written(out: torch.Tensor) -> None:
    """Tell autograd that ``out`` changed in place (the kernels write through its address)."""
    _increment_version((out,))


_increment_version = torch._C._increment_version  # torch.autograd.graph.increment_version, less its wrapper


FLOAT_INPUTS = (torch.float32, torch.float16, torch.bfloat16)


def check_float_matrix(x, op: str) -> None:
    """The input checks the casts share (``cast_transpose``, ``quantize``): a dense 2-D fp32, fp16 or bf16
    tensor on a CPU or CUDA device, not requiring grad in grad mode (the casts are not differentiable)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    check_dense(x, "x")
    if x.requires_grad and torch.is_grad_enabled():
        raise ValueError(f"{op} is not differentiable, but x requires grad: call it under torch.no_grad() "
                         "or on x.detach()")  # fmt: skip
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D, got a {x.dim()}-D tensor of shape {tuple(x.shape)}")
    if x.dtype not in FLOAT_INPUTS:
        raise TypeError(f"x must have dtype float32, float16 or bfloat16, got {x.dtype}")
    if x.device.type not in ("cpu", "cuda"):
        raise ValueError(f"x must be on a CPU or CUDA device, got {x.device}")


def check_scalar_tensor(t: torch.Tensor, x: torch.Tensor, arg: str, op: str) -> None:
    """A per-tensor scale given as a tensor: dense, 0-d, float32, on x's device, not requiring grad in grad
    mode (the casts are not differentiable)."""
    check_dense(t, arg)
    if t.dim() != 0:
        raise ValueError(f"{arg} must be a 0-d tensor, got shape {tuple(t.shape)}")
    if t.dtype != torch.float32:
        raise TypeError(f"{arg} must have dtype float32, got {t.dtype}")
    if t.device != x.device:
        raise ValueError(f"{arg} must be on {x.device} (x's device), got {t.device}")
    if t.requires_grad and torch.is_grad_enabled():
        raise ValueError(f"{op} is not differentiable, but {arg} requires grad: call it under "
                         f"torch.no_grad() or with {arg}.detach()")  # fmt: skip
