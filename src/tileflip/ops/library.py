"""The registered ``torch.library`` ops, so that ``torch.compile(fullgraph=True)`` can trace a call.

``custom_op`` with a fake implementation works for every backend, the interpreter included (``triton_op``
with ``wrap_triton`` cannot be traced under the interpreter). Schemas take and return tensors only, with
fixed outputs; the Python wrappers in ``tileflip.ops`` handle optional arguments and build results.
Importing ``tileflip`` 's public names imports this module.
"""

from __future__ import annotations

import torch

from tileflip import plan
from tileflip.ops.cast import cast_transpose_fake, cast_transpose_impl
from tileflip.ops.checks import check_input, check_out
from tileflip.ops.permute import _permute, inverse_perm
from tileflip.ops.transpose import _transpose


@torch.library.custom_op("tileflip::transpose", mutates_args=())
def _transpose_op(x: torch.Tensor, backend: str) -> torch.Tensor:
    return _transpose(x, None, backend)


@_transpose_op.register_fake
def _(x, backend):
    check_input(x)
    return x.new_empty((x.shape[1], x.shape[0]))


def _transpose_op_backward(ctx, grad):
    return torch.ops.tileflip.transpose(grad, "auto"), None


_transpose_op.register_autograd(_transpose_op_backward)


@torch.library.custom_op("tileflip::transpose_out", mutates_args=("out",))
def _transpose_out_op(x: torch.Tensor, out: torch.Tensor, backend: str) -> None:
    _transpose(x, out, backend)


@_transpose_out_op.register_fake
def _(x, out, backend):
    check_input(x)
    check_out(x, out, (x.shape[1], x.shape[0]), memory=False)  # fake tensors: no addresses


@torch.library.custom_op("tileflip::permute", mutates_args=())
def _permute_op(x: torch.Tensor, dims: list[int], backend: str) -> torch.Tensor:
    return _permute(x, tuple(dims), None, backend)


@_permute_op.register_fake
def _(x, dims, backend):
    check_input(x, ndim=None)
    dims = plan.check_perm(tuple(dims), x.dim())
    return x.new_empty(tuple(x.shape[d] for d in dims))


def _permute_op_setup(ctx, inputs, output):
    x, dims, _ = inputs
    ctx.inverse = list(inverse_perm(plan.check_perm(tuple(dims), x.dim())))


def _permute_op_backward(ctx, grad):
    return torch.ops.tileflip.permute(grad, ctx.inverse, "auto"), None, None


_permute_op.register_autograd(_permute_op_backward, setup_context=_permute_op_setup)


@torch.library.custom_op("tileflip::permute_out", mutates_args=("out",))
def _permute_out_op(x: torch.Tensor, dims: list[int], out: torch.Tensor, backend: str) -> None:
    _permute(x, tuple(dims), out, backend)


@_permute_out_op.register_fake
def _(x, dims, out, backend):
    check_input(x, ndim=None)
    dims = plan.check_perm(tuple(dims), x.dim())
    check_out(x, out, tuple(x.shape[d] for d in dims), memory=False)


@torch.library.custom_op("tileflip::cast_transpose", mutates_args=())
def _cast_transpose_op(x: torch.Tensor, scale_value: float, scale: torch.Tensor | None, dtype: torch.dtype,
                       transpose: bool, amax: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    y, y_t, top = cast_transpose_impl(x, dtype, scale_value if scale is None else scale, transpose, amax)
    if y_t is None:
        y_t = x.new_empty((0,), dtype=dtype)
    if top is None:
        top = x.new_empty((0,), dtype=torch.float32)
    return y, y_t, top


@_cast_transpose_op.register_fake
def _(x, scale_value, scale, dtype, transpose, amax):
    return cast_transpose_fake(x, dtype, scale_value if scale is None else scale, transpose, amax)


# Block-scaled quantization: five fixed outputs (data, scale, data_t, scale_t, global_scale), an empty (0,)
# placeholder for each one not asked for; ``tileflip.quantize`` builds the named result.
from tileflip.ops.quantize import quantize_fake, quantize_op_impl  # noqa: E402


@torch.library.custom_op("tileflip::quantize", mutates_args=())
def _quantize_op(x: torch.Tensor, recipe: str, rowwise: bool, columnwise: bool, scale: str | None,
                 scale_layout: str, global_mode: str, global_scale: torch.Tensor | None, rule: str | None,
                 backend: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                        torch.Tensor]:  # fmt: skip
    return quantize_op_impl(x, recipe, rowwise, columnwise, scale, scale_layout, global_mode, global_scale, rule,
                            backend)  # fmt: skip


@_quantize_op.register_fake
def _(x, recipe, rowwise, columnwise, scale, scale_layout, global_mode, global_scale, rule, backend):
    return quantize_fake(x, recipe, rowwise, columnwise, scale, scale_layout, global_mode, global_scale, rule, backend)


from tileflip.ops import inplace  # noqa: E402


@torch.library.custom_op("tileflip::transpose_in_place_", mutates_args=("x",))
def _transpose_in_place_op(x: torch.Tensor, scratch_bytes: int) -> None:
    inplace.run(x, scratch_bytes)


@_transpose_in_place_op.register_fake
def _(x, scratch_bytes):
    inplace.check_in_place(x, None if scratch_bytes == -1 else scratch_bytes, memory=False)
