"""``transpose``: x.T as a new contiguous tensor or into ``out``, with its prepared-call fast path and autograd.

``x`` may be a conjugate or negative view: its values are resolved into a temporary first. Under
autograd (``x`` requires grad in grad mode, or carries a forward-mode tangent) the result's gradient is
the transpose of the incoming one, moved by backend ``"auto"``; with ``out`` such a call is refused, as
torch refuses ``out=`` under autograd. A write into ``out`` moves its version counter.
"""

from __future__ import annotations

import torch
import torch.autograd.forward_ad as _forward_ad

from tileflip import tuning
from tileflip.kernels.dtypes import ELEMENT_SIZE
from tileflip.ops import backends
from tileflip.ops.backends import (
    CUDA_BACKENDS,
    auto_kernel,
    kernels,
    launch,
    on_device_of,
    resolve_backend,
    several_gpus,
    vec_refusal,
)
from tileflip.ops.checks import _increment_version, check_input, check_out, resolved, tracks_grad, written


def transpose(x: torch.Tensor, out: torch.Tensor | None = None, *, backend: str = "auto") -> torch.Tensor:
    """Return ``x.T`` as a new contiguous (N, M) tensor, or write it into ``out`` and return ``out``.

    The result's bits equal ``x.T``'s for every supported dtype (1, 2, 4 and 8-byte types, moved as
    unsigned integers). ``x`` may have any strides torch allows (transposed, sliced with steps,
    offset, expanded with stride 0); it is never copied to contiguous first (but a conjugate or negative
    view is resolved into a temporary).

    Under ``torch.compile`` the call goes through the registered op ``tileflip::transpose`` (or
    ``tileflip::transpose_out``); eager calls skip the dispatcher, which costs ~10 us a call.
    """
    if torch.compiler.is_compiling():
        if out is None:
            return torch.ops.tileflip.transpose(x, backend)
        torch.ops.tileflip.transpose_out(x, out, backend)
        return out
    return _transpose(x, out, backend)


# Call signature (sizes, strides, dtype, device, backend, the two addresses' 16-byte alignment) -> the
# prepared launch ``(go, x_bytes, out_bytes)``: the backend chosen, the tile planned and the compiled
# kernel's arguments fixed once, so that a repeated call costs reading its signature, the output checks
# and one dict lookup. A signature whose kernel is not compiled (or loaded) yet, or whose compiled class
# needs triton's own launch path, is prepared again on its next call. Cleared when full (it is a cache:
# any entry can be prepared again).
_prepared: dict = {}
PREPARED_LIMIT = 4096


def _fast_cuda(x: torch.Tensor, out, backend: str):
    """The common valid call on a CUDA tensor, each attribute read once (host time is most of a small
    transpose's cost); None for anything else, which the checked path then handles or refuses."""
    if (x.requires_grad and torch.is_grad_enabled()) or x.is_neg() or _forward_ad._current_level >= 0:
        return None
    try:
        shape = x.shape  # (raises for a nested tensor,
        if len(shape) != 2 or type(backend) is not str:
            return None
        sxm, sxn = x.stride()
        x0 = x.data_ptr()  # and for a sparse one: the checked path refuses both by name)
    except RuntimeError:
        return None
    M, N = shape
    device = x.get_device()
    gpus = backends.gpu_count
    if gpus is None or (gpus > 1 and device != torch.cuda.current_device()):
        return None
    dtype = x.dtype
    if dtype in _COMPLEX and x.is_conj():
        return None
    if out is None:
        fresh = out = x.new_empty(N, M)  # a new block: it cannot overlap x
    else:
        fresh = None
        try:  # (a compressed sparse out raises here: the checked path refuses it by name)
            if (type(out) is not torch.Tensor or out.shape != (N, M) or out.dtype != dtype
                    or out.get_device() != device or not out.is_contiguous() or out.requires_grad or out.is_neg()
                    or (dtype in _COMPLEX and out.is_conj())
                    or (out.is_inference() and not torch.is_inference_mode_enabled())):  # fmt: skip
                return None
        except RuntimeError:
            return None
    o0 = out.data_ptr()
    key = (M, N, sxm, sxn, dtype, device, backend, x0 & 15, o0 & 15)
    prepared = _prepared.get(key) or _prepare(key)
    if prepared is None:
        return None
    go, x_bytes, out_bytes = prepared
    if fresh is None:
        if o0 < x0 + x_bytes and x0 < o0 + out_bytes:
            return None  # overlap: the checked path says so
        _increment_version((out,))
    go(x, out, x0, o0)
    return out


_COMPLEX = frozenset({torch.complex64, torch.complex32})  # the supported dtypes that can carry the conjugate bit


def _prepare(key: tuple):
    """The prepared launch of a call signature (kept in ``_prepared`` once final), or None where the
    checked path must handle the call (empty, an unsupported dtype or backend)."""
    M, N, sxm, sxn, dtype, device, backend, xa, oa = key
    es = ELEMENT_SIZE.get(dtype)
    if es is None or M == 0 or N == 0:
        return None
    if backend == "auto":
        backend = auto_kernel(tuning.auto_for(M, N, es, sxm), es, sxn, M, oa)
    elif backend == "cuda-vec" and vec_refusal(es, sxn, M, oa) is not None:
        return None  # the checked path says why
    spans = ((M - 1) * sxm + (N - 1) * sxn + 1) * es, M * N * es
    if backend == "triton":
        config = tuning.triton_config(es, (M, N), sxm)
        triton = kernels("triton.transpose")
        go = triton.direct_launch(M, N, sxm, sxn, M, es, device, config, xa, oa)
        if go is None:  # not compiled yet: this call compiles it, and the next one prepares again
            return (lambda x, out, x0, o0: triton.launch_known(x, out, x0, o0, M, N, sxm, sxn, M, es, device,
                                                               config)), *spans  # fmt: skip
    elif backend == "triton-gather":
        triton = kernels("triton.transpose")
        go = triton.direct_launch_gather(M, N, sxm, sxn, M, es, device, xa, oa)
        if go is None:  # not compiled yet: this call compiles it, and the next one prepares again
            return (lambda x, out, x0, o0: triton.launch_gather_known(x, out, M, N, sxm, sxn, M)), *spans
    elif backend in CUDA_BACKENDS:
        variant = CUDA_BACKENDS[backend]
        cuda = kernels("cuda.transpose")
        go = cuda.direct_launch(M, N, sxm, sxn, es, device, variant)
        if go is None:  # not loaded yet: this call loads it, and the next one prepares again
            return (lambda x, out, x0, o0: cuda.launch_known(x, out, M, N, sxm, sxn, device, variant)), *spans
    elif backend == "torch":
        def go(x, out, x0, o0):
            out.copy_(x.t())
    else:
        return None
    if len(_prepared) >= PREPARED_LIMIT:
        _prepared.clear()
    _prepared[key] = prepared = (go, *spans)
    return prepared


def _transpose(x: torch.Tensor, out: torch.Tensor | None, backend: str) -> torch.Tensor:
    if type(x) is torch.Tensor and x.is_cuda:
        done = _fast_cuda(x, out, backend)
        if done is not None:
            return done
        several_gpus()  # the fast path needs the GPU count; the first call learns it here
    check_input(x)
    M, N = x.shape
    chosen = resolve_backend(x, backend)
    given = out is not None
    if not given:
        if tracks_grad(x, out, "transpose"):
            return _TransposeGrad.apply(x, backend)
        out = x.new_empty((N, M))
    else:
        check_out(x, out, (N, M))
        tracks_grad(x, out, "transpose")
    if x.numel() == 0:
        return out
    x = resolved(x)
    if backend == "auto":
        chosen = auto_kernel(chosen, x.element_size(), x.stride(1), M, out.data_ptr())
    on_device_of(x, launch, x, out, chosen)
    if given:  # (after the launch: a call its kernel refuses, as cuda-vec may, has changed nothing)
        written(out)
    return out


class _TransposeGrad(torch.autograd.Function):
    """``transpose`` under autograd: y = x.T, so dx = dy.T and the tangent of y is the tangent of x
    transposed, moved by the same kernels (backend ``"auto"``: a gradient's layout is not the call's)."""

    @staticmethod
    def forward(x, backend):
        return _transpose(x, None, backend)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return transpose(grad), None

    @staticmethod
    def jvp(ctx, x_tangent, _):
        return transpose(x_tangent)

    @staticmethod
    def vmap(info, in_dims, x, backend):
        if in_dims[0] is None:
            return transpose(x), None
        from tileflip.ops.permute import permute

        return permute(x.movedim(in_dims[0], 0), (0, 2, 1)), 0
