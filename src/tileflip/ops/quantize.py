"""``quantize``: block-scaled quantization of a 2-D tensor, row-wise and column-wise, with the block scales
in the layouts the scaled GEMMs read. Recipes ``fp8_1x128`` and ``fp8_128x128`` (DeepSeek-V3's blockwise
fp8), ``mxfp8`` (1 x 32, e8m0 scales) and ``nvfp4`` (1 x 16, e4m3 scales, optional global scale).

Backends: ``"triton"``, one kernel that reads x once for both layouts
(``tileflip.kernels.triton.quantize``); ``"cuda"``, the CUDA C++ kernel (``tileflip.kernels.cuda.quantize``),
also one read, for x of whole 128 x 128 tiles; and ``"torch"``, the plain-torch reference
(``tileflip.ops.quantize_reference``), which reads x once per output. All give the same bits.
``"auto"`` runs a kernel wherever one can run: CUDA tensors (the CUDA C++ one where the tuning table
names it and it takes the call), and CPU tensors under Triton's interpreter. Not differentiable: an x
that requires grad is refused in grad mode. Every refusal is a ``TypeError`` or ``ValueError`` naming
the argument, raised before any work.
Rules and layouts: ``docs/design.md`` (Block-scaled quantization).
"""

from __future__ import annotations

from functools import lru_cache, partial
from typing import NamedTuple

import torch

from tileflip import plan as planner
from tileflip import tuning
from tileflip.ops import quantize_reference as ref
from tileflip.ops.backends import NVRTC_MISSING, kernels, launch_permute, nvrtc_available, on_device_of
from tileflip.ops.checks import check_float_matrix, check_scalar_tensor
from tileflip.plan import scales

RECIPES = tuple(scales.RECIPES)
BACKENDS = ("auto", "triton", "cuda", "torch")
SCALE_KINDS = ("fp32", "ue8m0")
SCALE_LAYOUTS = ("plain", "blocked")
RULES = ("floor", "rceil")
FP8_RECIPES = ("fp8_1x128", "fp8_128x128")


class Quantized(NamedTuple):
    """``quantize``'s result. An output that was not asked for is None; ``global_scale`` is the nvfp4
    per-tensor scale that was used (given or computed), else None."""

    data: torch.Tensor | None
    scale: torch.Tensor | None
    data_t: torch.Tensor | None
    scale_t: torch.Tensor | None
    global_scale: torch.Tensor | None


def quantize(
    x: torch.Tensor,
    recipe: str,
    *,
    rowwise: bool = True,
    columnwise: bool = False,
    scale: str | None = None,
    scale_layout: str = "plain",
    global_scale: str | torch.Tensor | None = "auto",
    rule: str | None = None,
    backend: str = "auto",
) -> Quantized:
    """Quantize the 2-D fp32, fp16 or bf16 tensor ``x`` (M, K), any strides, by ``recipe``.

    ``rowwise``: ``data`` and ``scale``, x in groups along its rows. ``columnwise``: ``data_t`` and
    ``scale_t``, x's transpose quantized the same way (for ``fp8_128x128``: the same blocks, transposed).

    - ``fp8_1x128``: data (M, K) e4m3; scale (M, K/128) fp32 with strides (1, M); data_t (K, M);
      scale_t (K, M/128) with strides (1, K). Row-wise needs K % 128 == 0, column-wise M % 128 == 0.
    - ``fp8_128x128``: data (M, K) e4m3; scale (M/128, K/128) fp32; data_t (K, M); scale_t (K/128, M/128)
      = scale.t() in its own memory. M and K must be multiples of 128.
    - ``mxfp8``: data (M, K) e4m3; scale (M, K/32) ``float8_e8m0fnu``; data_t (K, M), scale_t (K, M/32).
    - ``nvfp4``: data (M, K/2) ``float4_e2m1fn_x2``, the even element in the low nibble; scale (M, K/16)
      e4m3; data_t (K, M/2), scale_t (K, M/16).

    Options, each refused by a recipe that does not have it: ``scale`` (fp8 recipes) ``"fp32"`` (the
    default) or ``"ue8m0"`` (each scale rounded up to a power of two, still fp32); ``scale_layout``
    (mxfp8, nvfp4) ``"plain"`` or ``"blocked"`` (cuBLAS's 128 x 4 tiles, zero-padded, as torchao's
    ``to_blocked``); ``global_scale`` (nvfp4) ``"auto"`` (max|x| / 2688, from an extra pass over x), a
    0-d fp32 tensor on x's device, or None (single-level scaling); ``rule`` (mxfp8) ``"floor"`` (the
    default, OCP MX v1.0) or ``"rceil"`` (the smallest power of two >= amax / 448). ``backend``:
    ``"triton"`` (one read of x; on the CPU only under TRITON_INTERPRET=1), ``"cuda"`` (one read of x; a CUDA
    x of 128 x 128 tiles with contiguous, 16-byte aligned rows, a GPU of compute capability 8.9 or later,
    and the [cuda] extra), ``"torch"`` (the plain-torch reference), or ``"auto"``: a kernel where one can run, else the
    reference; the bits are the same.

    Returns ``Quantized(data, scale, data_t, scale_t, global_scale)``, new tensors; None for an output
    not asked for, and ``global_scale`` (0-d fp32: a copy of the given one, or the computed one) only for
    nvfp4 with two-level scaling. Under ``torch.compile`` the call goes through the registered op
    ``tileflip::quantize``; eager calls skip the dispatcher.
    """
    mode, given = global_mode(global_scale)
    if torch.compiler.is_compiling():
        check_call(x, recipe, rowwise, columnwise, scale, scale_layout, mode, given, rule, backend)
        outs = torch.ops.tileflip.quantize(x, recipe, rowwise, columnwise, scale, scale_layout, mode, given, rule,
                                           backend)  # fmt: skip
        kept = (rowwise, rowwise, columnwise, columnwise, recipe == "nvfp4" and mode != "none")
        return Quantized(*(out if keep else None for out, keep in zip(outs, kept)))
    return quantize_impl(x, recipe, rowwise, columnwise, scale, scale_layout, mode, given, rule, backend)


def global_mode(global_scale) -> tuple[str, torch.Tensor | None]:
    """``global_scale`` as the registered op takes it: a mode ("auto", "given", "none") and the tensor."""
    if isinstance(global_scale, torch.Tensor):
        return "given", global_scale
    if global_scale is None:
        return "none", None
    if isinstance(global_scale, str):
        return global_scale, None  # a mode other than "auto" is refused by name in check_call
    raise TypeError(f"global_scale must be 'auto', a 0-d float32 tensor or None, got {type(global_scale).__name__}")


def _check_x(x) -> None:
    check_float_matrix(x, "quantize")


def _check_choice(name: str, value, choices: tuple) -> None:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def _check_option(name: str, value, default, recipe: str, allowed: tuple, choices: tuple) -> None:
    """An option only some recipes have: one of ``choices`` there, and left at ``default`` elsewhere."""
    if recipe in allowed:
        if value is not None or default is not None:
            _check_choice(name, value, choices)
    elif not (value is None and default is None) and not (isinstance(value, str) and value == default):
        names = " and ".join(allowed)
        raise ValueError(f"{name} applies to recipe {names} only; recipe {recipe!r} takes {name}={default!r}, "
                         f"got {value!r}")  # fmt: skip


def _check_global(mode: str, given, x: torch.Tensor, recipe: str) -> None:
    if recipe != "nvfp4":
        if mode != "auto":
            shown = "a tensor" if mode == "given" else repr(None if mode == "none" else mode)
            raise ValueError(f"global_scale applies to recipe nvfp4 only; recipe {recipe!r} takes the default, "
                             f"got {shown}")  # fmt: skip
        return
    if mode in ("auto", "none"):
        return
    if mode != "given":
        raise ValueError(f"global_scale must be 'auto', a 0-d float32 tensor or None, got {mode!r}")
    if not isinstance(given, torch.Tensor):
        raise TypeError(f"global_scale must be a torch.Tensor, got {type(given).__name__}")
    check_scalar_tensor(given, x, "global_scale", "quantize")


def check_call(x, recipe, rowwise, columnwise, scale, scale_layout, mode, given, rule, backend) -> None:
    """Every refusal of ``quantize``, in order: x, recipe, rowwise, columnwise, scale, scale_layout,
    global_scale, rule, backend, then x's sizes against the recipe's table."""
    _check_x(x)
    _check_choice("recipe", recipe, RECIPES)
    for name, flag in (("rowwise", rowwise), ("columnwise", columnwise)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be a bool, got {type(flag).__name__}")
    if not (rowwise or columnwise):
        raise ValueError("rowwise and columnwise are both False: ask for at least one output")
    _check_option("scale", scale, None, recipe, FP8_RECIPES, SCALE_KINDS)
    if scales.RECIPES[recipe].blocked:
        _check_choice("scale_layout", scale_layout, SCALE_LAYOUTS)
    else:
        _check_option("scale_layout", scale_layout, "plain", recipe, ("mxfp8", "nvfp4"), SCALE_LAYOUTS)
    _check_global(mode, given, x, recipe)
    _check_option("rule", rule, None, recipe, ("mxfp8",), RULES)
    _check_choice("backend", backend, BACKENDS)
    if backend == "triton" and x.device.type == "cpu" and not _kernels().is_interpreted():
        raise ValueError("backend='triton' got a CPU tensor, but Triton's interpreter is off: set "
                         "TRITON_INTERPRET=1 before importing tileflip, or use backend='torch'")  # fmt: skip
    scales.check_sizes(recipe, x.shape[0], x.shape[1], rowwise, columnwise)
    if backend == "cuda" and not torch.compiler.is_compiling():
        # Traced calls are checked when they run (runs_cuda): the check loads the CUDA bindings.
        _check_cuda(x, recipe, address=False)


def _cuda_refusal(x, recipe, *, address: bool) -> str | None:
    """Why the CUDA C++ kernel cannot take the call here (None: it can)."""
    why = cuda_kernel().refusal(x, recipe, address=address)
    return NVRTC_MISSING if why is None and not nvrtc_available() else why


def _check_cuda(x, recipe, *, address: bool) -> None:
    """backend='cuda': refused, with the reason, where the CUDA C++ kernel cannot take the call."""
    why = _cuda_refusal(x, recipe, address=address)
    if why:
        raise ValueError(f"backend='cuda' cannot take this call: {why}; use backend='auto' or 'triton'")


def cuda_kernel():
    return kernels("cuda.quantize")


def _kernels():
    return kernels("triton.quantize")


def runs_kernel(x: torch.Tensor, backend: str) -> bool:
    """Whether the call runs a fused kernel (``backend`` already checked)."""
    if backend == "auto":
        return x.device.type == "cuda" or _kernels().is_interpreted()
    return backend in ("triton", "cuda")


def runs_cuda(x: torch.Tensor, recipe: str, rowwise: bool, columnwise: bool, backend: str) -> bool:
    """Whether the call runs the CUDA C++ kernel: asked for (then checked here, x's address included),
    or auto's choice where the tuning table names it and the kernel takes the call."""
    if backend == "cuda":
        _check_cuda(x, recipe, address=True)
        return True
    return (backend == "auto" and x.device.type == "cuda" and tuning.quantize_prefers_cuda(recipe, rowwise, columnwise)
            and _cuda_refusal(x, recipe, address=True) is None)  # fmt: skip


def quantize_impl(x, recipe, rowwise, columnwise, scale, scale_layout, mode, given, rule, backend) -> Quantized:
    """``quantize`` without the dispatcher: checks, then the torch backend (the eager path)."""
    check_call(x, recipe, rowwise, columnwise, scale, scale_layout, mode, given, rule, backend)
    M, K = x.shape
    blocked = scale_layout == "blocked"
    lay = scales.layouts(recipe, M, K, rowwise, columnwise, blocked)
    x = x.resolve_neg()
    if runs_kernel(x, backend):
        cuda = runs_cuda(x, recipe, rowwise, columnwise, backend)
        return _kernel_backend(x, recipe, lay, scale == "ue8m0", blocked, mode, given, rule or "floor", cuda)
    outs = _torch_backend(x, recipe, rowwise, columnwise, scale == "ue8m0", blocked, mode, given, rule or "floor")
    placed = [None if out is None else _place(out, layout) for out, layout in zip(outs[:4], lay)]
    return Quantized(*placed, outs[4])


def _global_scale(x: torch.Tensor, mode: str, given) -> torch.Tensor | None:
    """nvfp4's per-tensor scale: max|x| / 2688 from one extra read of x ("auto"), a copy of the given
    one, or None."""
    if mode == "given":
        return given.clone()
    if mode != "auto":
        return None
    if x.numel() == 0:
        return ref.nvfp4_global_scale(x)
    amax = torch.linalg.vector_norm(x, float("inf"), dtype=torch.float32)  # NaN-propagating, no temporary
    return torch.div(amax, torch.full((), ref.E4M3_MAX * ref.E2M1_MAX, device=x.device))


def _kernel_backend(x, recipe, lay: scales.Layouts, ue8m0, blocked, mode, given, rule, cuda: bool) -> Quantized:
    """A fused kernel (the CUDA C++ one where ``cuda``, else Triton's): every output allocated with its
    layout (blocked scales zeroed where they hold padding), then one launch."""
    data_dtype, scale_dtype = _output_dtypes(recipe)
    M, K = x.shape
    spec = scales.RECIPES[recipe]
    counts = (0, M * (K // spec.block), 0, K * (M // spec.block))  # scales held by each output (0: data)
    outs = []
    for layout, dtype, scale_count in zip(lay, (data_dtype, scale_dtype) * 2, counts):
        if layout is None:
            outs.append(None)
        elif blocked and scale_count and scale_count != layout.shape[0] * layout.shape[1]:
            outs.append(torch.zeros(layout.shape, dtype=torch.uint8, device=x.device).view(dtype))  # padding
        else:
            outs.append(torch.empty_strided(layout.shape, layout.strides, dtype=dtype, device=x.device))
    global_scale = _global_scale(x, mode, given) if recipe == "nvfp4" else None
    if x.numel():
        rowwise, columnwise = lay.data is not None, lay.data_t is not None
        tile = (128, 128, 8) if cuda else tuning.quantize_tile(spec.block, spec.square, rowwise, columnwise)
        unblock = cuda and spec.blocked and not blocked and recipe in tuning.QUANTIZE_PLAIN_VIA_BLOCKED
        plan = scales.quantize_launch(recipe, M, K, *x.stride(), rowwise, columnwise, blocked or unblock, ue8m0,
                                      rule, tile)  # fmt: skip
        if cuda:
            # plain scales: the kernel writes them blocked into temporaries, a permute puts them in place
            blocked_of = {i: torch.empty(scales.blocked_shape(*outs[i].shape), dtype=torch.uint8, device=x.device)
                          for i in (1, 3) if unblock and outs[i] is not None}  # fmt: skip
            launched = [blocked_of[i].view(out.dtype) if i in blocked_of else out for i, out in enumerate(outs)]
            on_device_of(x, cuda_kernel().launch, x, *launched, global_scale, plan)
            for i, temporary in blocked_of.items():
                on_device_of(x, _blocked_to_plain, temporary, outs[i])
        else:
            on_device_of(x, _kernels().launch, x, *outs, global_scale, plan)
    return Quantized(*outs, global_scale)


def _blocked_to_plain(blocked: torch.Tensor, plain: torch.Tensor) -> None:
    """The (R, C) byte scales, R a multiple of 128 and C of 4 (no padding), from the blocked layout into
    the row-major ``plain``: as 4-byte words the blocked tiles are (R/128, C/4, 32, 4), word (t, u, a, b)
    holding row 128t + 32b + a, words 4u .. 4u + 3; the plain words are (R/128, 4, 32, C/4)."""
    R, C = plain.shape
    words = blocked.view(torch.uint8).view(torch.int32).view(R // 128, C // 4, 32, 4)
    out = plain.view(torch.uint8).view(torch.int32).view(R // 128, 4, 32, C // 4)
    launch_permute(words, out, _unblock_plan(tuple(words.shape)))


@lru_cache(maxsize=64)
def _unblock_plan(shape: tuple):
    return planner.plan_permute(shape, (shape[1] * 128, 128, 4, 1), (0, 3, 2, 1), 4)


def _place(value: torch.Tensor, layout: scales.Layout) -> torch.Tensor:
    """``value`` with the layout's strides (the reference computes contiguous results), so that the real
    op's outputs have the strides of its fake implementation's, empty ones included."""
    if tuple(value.stride()) == layout.strides:
        return value
    out = torch.empty_strided(layout.shape, layout.strides, dtype=value.dtype, device=value.device)
    raw = torch.uint8 if out.element_size() == 1 else out.dtype  # fp4, e8m0: copy their bytes
    out.view(raw).copy_(value.view(raw))
    return out


def _torch_backend(x, recipe, rowwise, columnwise, ue8m0, blocked, mode, given, rule):
    """(data, scale, data_t, scale_t, global_scale) from the reference, contiguous, None where not asked."""
    data = scale = data_t = scale_t = global_scale = None
    if recipe == "fp8_128x128":
        d, s = ref.fp8_blocks(x, 128, 128, ue8m0)
        if rowwise:
            data, scale = d, s
        if columnwise:
            data_t, scale_t = d.t().contiguous(), s.t().contiguous()
        return data, scale, data_t, scale_t, None
    if recipe == "fp8_1x128":
        one = partial(ref.fp8_blocks, rows=1, cols=128, ue8m0=ue8m0)
    elif recipe == "mxfp8":
        one = partial(ref.mxfp8, rule=rule)
    else:
        if mode == "auto":
            global_scale = ref.nvfp4_global_scale(x)
        elif mode == "given":
            global_scale = given.clone()
        one = partial(ref.nvfp4, global_scale=global_scale)
    if rowwise:
        data, scale = one(x)
    if columnwise:
        data_t, scale_t = one(x.t())
    if blocked:
        scale = None if scale is None else ref.to_blocked(scale)
        scale_t = None if scale_t is None else ref.to_blocked(scale_t)
    return data, scale, data_t, scale_t, global_scale


def _output_dtypes(recipe: str) -> tuple[torch.dtype, torch.dtype]:
    spec = scales.RECIPES[recipe]
    return getattr(torch, spec.data), getattr(torch, spec.scale)


def quantize_fake(x, recipe, rowwise, columnwise, scale, scale_layout, mode, given, rule, backend):
    """The registered op's outputs without data: five tensors, an empty (0,) placeholder for each output
    that was not asked for."""
    check_call(x, recipe, rowwise, columnwise, scale, scale_layout, mode, given, rule, backend)
    M, K = x.shape
    lay = scales.layouts(recipe, M, K, rowwise, columnwise, scale_layout == "blocked")
    data_dtype, scale_dtype = _output_dtypes(recipe)
    outs = []
    for layout, dtype in zip(lay, (data_dtype, scale_dtype, data_dtype, scale_dtype)):
        outs.append(x.new_empty((0,), dtype=dtype) if layout is None
                    else x.new_empty_strided(layout.shape, layout.strides, dtype=dtype))  # fmt: skip
    two_level = recipe == "nvfp4" and mode != "none"
    outs.append(x.new_empty(() if two_level else (0,), dtype=torch.float32))
    return tuple(outs)


def quantize_op_impl(x, recipe, rowwise, columnwise, scale, scale_layout, mode, given, rule, backend):
    """The registered op's real implementation: ``quantize_impl`` with placeholders for absent outputs."""
    result = quantize_impl(x, recipe, rowwise, columnwise, scale, scale_layout, mode, given, rule, backend)
    data_dtype, scale_dtype = _output_dtypes(recipe)
    dtypes = (data_dtype, scale_dtype, data_dtype, scale_dtype, torch.float32)
    return tuple(x.new_empty((0,), dtype=d) if out is None else out for out, d in zip(result, dtypes))
