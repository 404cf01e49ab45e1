"""``permute``: ``x.permute(dims).contiguous()`` bit for bit, as a new tensor or into ``out``, with autograd."""

from __future__ import annotations

from functools import lru_cache

import torch

from tileflip import plan
from tileflip.ops.backends import (
    CUDA_PERMUTE_BACKENDS,
    NVRTC_MISSING,
    PERMUTE_BACKENDS,
    launch_permute,
    moved_as,
    on_device_of,
    permute_refusal,
    resolve_backend,
)
from tileflip.ops.checks import check_input, check_out, resolved, tracks_grad, written


def permute(x: torch.Tensor, dims, out: torch.Tensor | None = None, *, backend: str = "auto") -> torch.Tensor:
    """Return ``x.permute(dims).contiguous()`` (bit for bit), or write it into ``out`` and return ``out``.

    Any rank from 0 to 8, any permutation (negative dims allowed), any input strides including 0. ``dims``
    is a tuple or list (a ``torch.Size`` too) of ints, or of what torch's ``permute`` takes as ints
    (NumPy integers, 0-d integer tensors); not bools.
    The planner (``tileflip.plan.plan_permute``) merges dimensions that stay adjacent and picks one of
    a few fixed-rank kernels; ``tileflip plan --shape ... --perm ...`` prints the plan.
    Backends: ``"triton"`` (the Triton kernels; on a CPU tensor only under the interpreter),
    ``"cuda-realign"`` (the CUDA C++ kernel of ``kernels/cuda/permute_realign.cu`` for 1- and 2-byte
    elements whose rows start at any element), ``"cuda-thin"`` (a CUDA C++ kernel of
    ``kernels/cuda/permute_words.cu`` for 1- and 2-byte permutes whose output's fastest dimension spans
    2 to 16 bytes against an input-contiguous one), ``"cuda-split"`` (its mirror, in the same file: the
    input's contiguous dimension, 2 to 8 bytes, interleaves the output's rows), ``"cuda-shift"`` (the
    realigned row copy of ``permute_words.cu``: permutes that keep the input's contiguous dimension
    innermost, rows of 16 bytes or more, any element size and alignment); each refuses a call it cannot
    take, with the reason;
    ``"torch"`` (``out.copy_(x.permute(dims))``) and ``"auto"``: on a GPU, the strategy the model
    predicts fastest (``tuning.permute_strategy``: the Triton kernels, or where NVRTC is installed the
    realigned-store, thin or split kernel for 1- and 2-byte transposes, the row copy for kept rows off 16-byte
    boundaries); on a CPU tensor as for ``transpose``. A permute that keeps the contiguous dimension is
    moved as 4-byte words where its run, strides and pointers allow (``tuning.element_width``).
    """
    if torch.compiler.is_compiling():
        dims = list(dims) if isinstance(dims, (tuple, list)) else dims
        if out is None:
            return torch.ops.tileflip.permute(x, dims, backend)
        torch.ops.tileflip.permute_out(x, dims, out, backend)
        return out
    return _permute(x, dims, out, backend)


def _permute(x, dims, out, backend):
    check_input(x, ndim=None)
    if x.dim() > plan.MAX_RANK:
        raise ValueError(f"x must have at most {plan.MAX_RANK} dimensions, got {x.dim()}")
    dims = plan.check_perm(dims, x.dim())
    if not isinstance(backend, str) or backend not in PERMUTE_BACKENDS:
        raise ValueError(f"backend must be one of {PERMUTE_BACKENDS} for permute, got {backend!r}")
    # The tuning table's auto choice is for 2-D cases; an N-D permute on a GPU runs the permute kernels.
    if backend in CUDA_PERMUTE_BACKENDS:
        chosen = backend
    else:
        chosen = resolve_backend(x, "triton" if backend == "auto" and x.device.type == "cuda" else backend)
    out_shape = tuple(x.shape[d] for d in dims)
    given = out is not None
    if not given:
        if tracks_grad(x, out, "permute"):
            return _PermuteGrad.apply(x, dims, backend)
        out = x.new_empty(out_shape)  # (a tensor subclass stays one, as in transpose)
    else:
        check_out(x, out, out_shape)
        tracks_grad(x, out, "permute")
    if x.numel() == 0:
        return out
    x = resolved(x)
    if chosen == "torch":
        out.copy_(x.permute(dims))  # (moves out's version counter itself)
        return out
    p = _plan_permute(tuple(x.shape), tuple(x.stride()), dims, x.element_size())
    xm, om, p = moved_as(x, out, p)  # a rows plan in the element size it is moved in
    if chosen in CUDA_PERMUTE_BACKENDS:
        reason = permute_refusal(chosen, xm, p, om)
        if reason is not None:  # refused before anything is written
            regrouped = xm.element_size() != x.element_size() and x.is_cuda and reason != NVRTC_MISSING
            moved = (f"; this permute is moved as {xm.element_size()}-byte elements, which its kept run, "
                     "strides and pointers allow" if regrouped else "")  # fmt: skip
            raise ValueError(f"backend={chosen!r} cannot take this call: {reason}{moved} (backend='auto' picks "
                             "another kernel for it)")  # fmt: skip
    on_device_of(x, launch_permute, xm, om, p, backend)
    if given:
        written(out)
    return out


class _PermuteGrad(torch.autograd.Function):
    """``permute`` under autograd: the gradient goes back through the inverse permutation, the tangent
    forward through the same one (backend ``"auto"``)."""

    @staticmethod
    def forward(x, dims, backend):
        return _permute(x, dims, None, backend)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.dims = inputs[1]
        ctx.inverse = inverse_perm(inputs[1])

    @staticmethod
    def backward(ctx, grad):
        return permute(grad, ctx.inverse), None, None

    @staticmethod
    def jvp(ctx, x_tangent, *_):
        return permute(x_tangent, ctx.dims)

    @staticmethod
    def vmap(info, in_dims, x, dims, backend):
        if in_dims[0] is None:
            return permute(x, dims), None
        x = x.movedim(in_dims[0], 0)
        if x.dim() <= plan.MAX_RANK:
            return permute(x, (0, *(d + 1 for d in dims))), 0
        # x of the largest rank: with the batch dimension it has one past the planner's limit, so each batch
        # element is permuted alone (torch.stack only copies: the bits stay)
        return torch.stack([permute(x[i], dims) for i in range(x.shape[0])]), 0


def inverse_perm(dims) -> tuple:
    """The permutation that undoes ``dims`` (a checked permutation of non-negative dims)."""
    inverse = [0] * len(dims)
    for i, d in enumerate(dims):
        inverse[d] = i
    return tuple(inverse)


_plan_permute = lru_cache(maxsize=256)(plan.plan_permute)  # a call's arguments here are all tuples and ints
