"""Public operations: argument checks, backend choice, launch.

Every call is checked before anything is written, in this order: ``x`` (type, layout, rank, dtype),
``backend``, ``out`` (type, layout, shape, dtype, device, contiguity, a conjugate or negative view, an
inference tensor outside inference mode, overlap with ``x``), the backend's device, then ``out=`` under
autograd. Each refusal is a ``TypeError`` or ``ValueError`` whose message names the argument.

``x`` may be a conjugate or negative view (``c.conj()``, ``c.conj().imag``): its values are resolved
into a temporary first, as ``x.resolve_conj().resolve_neg()``. Autograd: ``transpose(x)`` and
``permute(x, dims)`` of an ``x`` that requires grad (in grad mode) or carries a forward-mode tangent
return a result whose gradient is the inverse transpose or permute of the incoming one (and whose tangent
the same op of x's), moved by backend ``"auto"``; with ``out`` such a call is refused, as torch refuses
``out=`` arguments under autograd. A write into ``out`` counts as an in-place change of ``out`` for
autograd (its version counter moves once the kernel has run), so a tensor saved for backward and then
overwritten is caught.

Backends:

* ``"triton"``: the Triton tile kernel. On a CUDA tensor it runs natively. On a CPU tensor it runs in
  Triton's interpreter when ``TRITON_INTERPRET=1`` was set before tileflip's kernels were imported;
  without the interpreter a CPU tensor is refused.
* ``"triton-gather"``: the Triton gather kernel (one lane per output element, no shared memory), the
  shortest program for launch-bound tiny and thin shapes; same device rules as ``"triton"``.
* ``"cuda-naive"``, ``"cuda-tiled"``, ``"cuda-tiled-nopad"``: the CUDA C++ kernels (CUDA tensors only).
* ``"cuda-vec"``: the CUDA C++ kernel with 16-byte accesses for 1- and 2-byte elements whose rows need
  not start on 16-byte boundaries; a call it cannot take (``vec_refusal``) is refused with the reason.
  ``"auto"`` picks it where the table names it and the call qualifies, else the Triton kernel.
* ``"torch"``: ``out.copy_(x.t())``, the reference path, on any device.
* ``"auto"``: on a CUDA tensor, the backend the committed tuning table names for the case; on a CPU
  tensor, ``"triton"`` under the interpreter and ``"torch"`` otherwise.
"""

from __future__ import annotations

from functools import lru_cache

import torch
import torch.autograd.forward_ad as _forward_ad

from tileflip import plan, tuning

from tileflip.kernels import dtypes

BACKENDS = ("auto", "triton", "triton-gather", "cuda-naive", "cuda-tiled", "cuda-tiled-nopad", "cuda-vec", "torch")
TRITON_BACKENDS = ("triton", "triton-gather")
CUDA_BACKENDS = {"cuda-naive": "naive", "cuda-tiled": "tiled", "cuda-tiled-nopad": "tiled_nopad", "cuda-vec": "vec"}


def vec_refusal(element_size: int, sxn: int, M: int, out_address: int) -> str | None:
    """Why the ``cuda-vec`` kernel cannot take a call (None: it can). It moves 16-byte pieces of output
    rows, each 16 / element_size input rows long, and reads input rows as 16-byte words."""
    if element_size not in (1, 2):
        return f"it moves 1- and 2-byte elements, got {element_size}-byte ones"
    if sxn != 1:
        return f"x's columns must be adjacent (stride 1), got stride {sxn}"
    if M * element_size % 16:
        return f"out's rows must be whole 16-byte units: x's {M} rows of {element_size} bytes are not"
    if out_address % 16:
        return "out must start on a 16-byte boundary"
    return None


def _auto_kernel(chosen: str, element_size: int, sxn: int, M: int, out_address: int) -> str:
    """The kernel ``auto`` runs once the table has named ``chosen``: the Triton kernel where the table
    names cuda-vec for a call that kernel cannot take, or a CUDA C++ kernel where those cannot run (no
    cuda-python or NVRTC: the optional extra ``tileflip[cuda]``)."""
    if chosen in CUDA_BACKENDS:
        from tileflip.kernels.cuda import nvrtc

        if not nvrtc.available():
            return "triton"
        if chosen == "cuda-vec" and vec_refusal(element_size, sxn, M, out_address) is not None:
            return "triton"
    return chosen

_triton_module = None
_cuda_module = None


def _cuda():
    # Imported on first use: cuda-python is an optional extra.
    global _cuda_module
    if _cuda_module is None:
        from tileflip.kernels.cuda import transpose as cuda_transpose

        _cuda_module = cuda_transpose
    return _cuda_module


def _triton():
    # Imported on first use: importing triton costs ~1 s, and tileflip's CPU tools must not need it.
    global _triton_module
    if _triton_module is None:
        from tileflip.kernels.triton import transpose as triton_transpose

        _triton_module = triton_transpose
    return _triton_module


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


def resolve_backend(x: torch.Tensor, backend: str) -> str:
    """The concrete backend a call runs on, after checking that it can run on x's device."""
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    on_cpu = not x.is_cuda
    if backend == "auto":
        if on_cpu:
            return "triton" if _triton().is_interpreted() else "torch"
        return tuning.auto_backend(x)
    if backend in CUDA_BACKENDS and on_cpu:
        raise ValueError(f"backend={backend!r} needs a CUDA tensor, but x is on {x.device}")
    if backend in TRITON_BACKENDS and on_cpu and not _triton().is_interpreted():
        raise ValueError(
            f"backend={backend!r} got a CPU tensor, but Triton's interpreter is off: set TRITON_INTERPRET=1 "
            "before importing tileflip to run the kernel on the CPU, or pass backend='auto' or 'torch'"
        )
    return backend


_gpu_count = None


def _several_gpus() -> bool:
    """Whether a launch may need to switch devices (checked once: the count does not change)."""
    global _gpu_count
    if _gpu_count is None:
        _gpu_count = torch.cuda.device_count()
    return _gpu_count > 1


def _on_device_of(x: torch.Tensor, fn, *args) -> None:
    """Call ``fn(*args)`` with x's GPU current, as launches on the current stream need."""
    if x.is_cuda and _several_gpus() and x.device.index != torch.cuda.current_device():
        with torch.cuda.device(x.device):
            fn(*args)
    else:
        fn(*args)


def _run(x: torch.Tensor, out: torch.Tensor, backend: str) -> None:
    """Launch; x and out are non-empty and checked. Kernels receive the tensors in their own dtype and
    view them as unsigned integers only where a view matters (compiling, the interpreter)."""
    if backend == "triton":
        _triton().launch(x, out, tuning.triton_config(x.element_size(), x.shape, x.stride(0)))
    elif backend == "triton-gather":
        _triton().launch_gather(x, out)
    elif backend == "torch":
        out.copy_(x.t())
    else:
        from tileflip.kernels.cuda import transpose as cuda_transpose

        if backend == "cuda-vec":
            reason = vec_refusal(x.element_size(), x.stride(1), x.shape[0], out.data_ptr())
            if reason is not None:
                raise ValueError(f"backend='cuda-vec' cannot take this call: {reason} (backend='auto' picks "
                                 "another kernel for it)")  # fmt: skip
        cuda_transpose.launch(x, out, CUDA_BACKENDS[backend])


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
    if _gpu_count is None or (_gpu_count > 1 and device != torch.cuda.current_device()):
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
    es = dtypes.ELEMENT_SIZE.get(dtype)
    if es is None or M == 0 or N == 0:
        return None
    if backend == "auto":
        backend = _auto_kernel(tuning.auto_for(M, N, es, sxm), es, sxn, M, oa)
    elif backend == "cuda-vec" and vec_refusal(es, sxn, M, oa) is not None:
        return None  # the checked path says why
    spans = ((M - 1) * sxm + (N - 1) * sxn + 1) * es, M * N * es
    if backend == "triton":
        config = tuning.triton_config(es, (M, N), sxm)
        direct = _triton().direct_launch(M, N, sxm, sxn, M, es, device, config, xa, oa)
        if direct is None:  # not compiled yet: this call compiles it, and the next one prepares again
            return (lambda x, out, x0, o0: _triton().launch_known(x, out, x0, o0, M, N, sxm, sxn, M, es, device,
                                                                  config)), *spans  # fmt: skip
        go = direct
    elif backend == "triton-gather":
        go = _triton().direct_launch_gather(M, N, sxm, sxn, M, es, device, xa, oa)
        if go is None:  # not compiled yet: this call compiles it, and the next one prepares again
            return (lambda x, out, x0, o0: _triton().launch_gather_known(x, out, M, N, sxm, sxn, M)), *spans
    elif backend in CUDA_BACKENDS:
        variant = CUDA_BACKENDS[backend]
        go = _cuda().direct_launch(M, N, sxm, sxn, es, device, variant)
        if go is None:  # not loaded yet: this call loads it, and the next one prepares again
            return (lambda x, out, x0, o0: _cuda().launch_known(x, out, M, N, sxm, sxn, device, variant)), *spans
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
        _several_gpus()  # the fast path needs the GPU count; the first call learns it here
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
        chosen = _auto_kernel(chosen, x.element_size(), x.stride(1), M, out.data_ptr())
    _on_device_of(x, _run, x, out, chosen)
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
        return permute(x.movedim(in_dims[0], 0), (0, 2, 1)), 0


PERMUTE_BACKENDS = ("auto", "triton", "torch")


def permute(x: torch.Tensor, dims, out: torch.Tensor | None = None, *, backend: str = "auto") -> torch.Tensor:
    """Return ``x.permute(dims).contiguous()`` (bit for bit), or write it into ``out`` and return ``out``.

    Any rank from 0 to 8, any permutation (negative dims allowed), any input strides including 0. ``dims``
    is a tuple or list (a ``torch.Size`` too) of ints, or of what torch's ``permute`` takes as ints
    (NumPy integers, 0-d integer tensors); not bools.
    The planner (``tileflip.plan.plan_permute``) merges dimensions that stay adjacent and picks one of
    a few fixed-rank kernels; ``tileflip plan --shape ... --perm ...`` prints the plan.
    Backends: ``"triton"`` (the Triton kernels; on a CPU tensor only under the interpreter), ``"torch"``
    (``out.copy_(x.permute(dims))``) and ``"auto"``: the Triton kernels on a GPU, but for 1-byte
    permutes whose output rows start at any byte (``tuning.realign_launch``) the CUDA C++ kernel of
    ``kernels/cuda/permute_realign.cu`` where NVRTC is installed; on a CPU tensor as for ``transpose``.
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
    # The tuning table's auto choice is for 2-D cases; an N-D permute on a GPU runs the Triton kernels.
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
    _on_device_of(x, _run_permute, x, out, p, backend == "auto")
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


def _run_permute(x, out, p, auto: bool = False) -> None:
    """Run plan ``p``: the 2-D transpose kernel, the Triton permute kernels, or (``auto`` only, on the
    launches ``tuning.realign_launch`` gives it) the CUDA kernel that realigns 1-byte output rows."""
    if p.kind == "transpose2d":
        # Output (s0, s1) contiguous is the transpose of the input seen as (s1, s0) with swapped strides.
        (s0, s1), (st0, st1) = p.sizes, p.in_strides
        x2 = x.as_strided((s1, s0), (st1, st0), x.storage_offset())
        _triton().launch(x2, out.view(s0, s1), tuning.triton_config(x.element_size(), (s1, s0), st1))
        return
    if auto and x.element_size() == 1 and x.is_cuda:
        from tileflip.kernels.cuda import permute as cuda_permute

        if cuda_permute.usable(x, p):
            cuda_permute.launch(x, out, p)
            return
    from tileflip.kernels.triton import permute as triton_permute

    triton_permute.launch(x, out, p)


# --------------------------------------------------------------------------------------------------
# Registered ops, so that torch.compile(fullgraph=True) can trace a call (custom_op with a fake
# implementation works for every backend, the interpreter included; triton_op + wrap_triton cannot
# be traced under the interpreter).
# --------------------------------------------------------------------------------------------------


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
