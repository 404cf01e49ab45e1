"""Backends: the name -> launcher table every op dispatches through, ``auto``'s choice, and the lazy
loading of the kernel modules.

* ``"triton"``: the Triton tile kernel. On a CUDA tensor it runs natively; on a CPU tensor in Triton's
  interpreter when ``TRITON_INTERPRET=1`` was set before tileflip's kernels were imported (else refused).
* ``"triton-gather"``: the Triton gather kernel (one lane per output element, no shared memory), the
  shortest program for launch-bound tiny and thin shapes; same device rules as ``"triton"``.
* ``"cuda-naive"``, ``"cuda-tiled"``, ``"cuda-tiled-nopad"``: the CUDA C++ kernels (CUDA tensors only).
* ``"cuda-vec"``: the CUDA C++ kernel with 16-byte accesses for 1- and 2-byte elements whose rows need
  not start on 16-byte boundaries; a call it cannot take (``vec_refusal``) is refused with the reason.
* ``"torch"``: ``out.copy_(x.t())``, the reference path, on any device.
* ``"auto"``: on a CUDA tensor, the backend the tuning table names for the case (the Triton kernel where
  the named CUDA C++ kernel cannot run); on a CPU tensor, ``"triton"`` under the interpreter, else ``"torch"``.
"""

from __future__ import annotations

import importlib
from functools import lru_cache

import torch

from tileflip import tuning
from tileflip.kernels.dtypes import as_width
from tileflip.plan import regrouped as plan_regrouped
from tileflip.plan.choose import staged_launch, staged_refusal
from tileflip.plan.device import card_of
from tileflip.plan.launch import SECTOR_BYTES, shift_refusal, split_refusal, thin_refusal

BACKENDS = ("auto", "triton", "triton-gather", "cuda-naive", "cuda-tiled", "cuda-tiled-nopad", "cuda-vec", "torch")
TRITON_BACKENDS = ("triton", "triton-gather")
CUDA_BACKENDS = {"cuda-naive": "naive", "cuda-tiled": "tiled", "cuda-tiled-nopad": "tiled_nopad", "cuda-vec": "vec"}
PERMUTE_BACKENDS = ("auto", "triton", "cuda-staged", "cuda-realign", "cuda-thin", "cuda-split", "cuda-shift", "torch")
# the CUDA C++ permute kernels, refused where they cannot run
CUDA_PERMUTE_BACKENDS = ("cuda-staged", "cuda-realign", "cuda-thin", "cuda-split", "cuda-shift")

_modules: dict = {}


def kernels(name: str):
    """The kernel module ``tileflip.kernels.<name>`` (e.g. ``"triton.transpose"``), imported on first use:
    importing triton costs about a second, and the CUDA C++ backend needs an optional extra."""
    module = _modules.get(name)
    if module is None:
        module = _modules[name] = importlib.import_module(f"tileflip.kernels.{name}")
    return module


NVRTC_MISSING = "it needs NVRTC and cuda-python (pip install 'tileflip[cuda]')"


def nvrtc_available() -> bool:
    """Whether the CUDA C++ kernels can be compiled here (the optional extra ``tileflip[cuda]``)."""
    return kernels("cuda.nvrtc").available()


def interpreted() -> bool:
    """Whether the Triton kernels run in Triton's interpreter (TRITON_INTERPRET=1 before their import)."""
    return kernels("triton.transpose").is_interpreted()


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


def auto_kernel(chosen: str, element_size: int, sxn: int, M: int, out_address: int) -> str:
    """The kernel ``auto`` runs once the table has named ``chosen``: the Triton kernel where the table
    names cuda-vec for a call that kernel cannot take, or a CUDA C++ kernel where those cannot run (no
    cuda-python or NVRTC: the optional extra ``tileflip[cuda]``)."""
    if chosen in CUDA_BACKENDS:
        if not nvrtc_available():
            return "triton"
        if chosen == "cuda-vec" and vec_refusal(element_size, sxn, M, out_address) is not None:
            return "triton"
    return chosen


def resolve_backend(x: torch.Tensor, backend: str) -> str:
    """The concrete backend a call runs on, after checking that it can run on x's device."""
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    on_cpu = not x.is_cuda
    if backend == "auto":
        if on_cpu:
            return "triton" if interpreted() else "torch"
        return tuning.auto_backend(x)
    if backend in CUDA_BACKENDS and on_cpu:
        raise ValueError(f"backend={backend!r} needs a CUDA tensor, but x is on {x.device}")
    if backend in TRITON_BACKENDS and on_cpu and not interpreted():
        raise ValueError(
            f"backend={backend!r} got a CPU tensor, but Triton's interpreter is off: set TRITON_INTERPRET=1 "
            "before importing tileflip to run the kernel on the CPU, or pass backend='auto' or 'torch'"
        )
    return backend


gpu_count = None  # read by the transpose's fast path; None until the first checked call learns it


def several_gpus() -> bool:
    """Whether a launch may need to switch devices (checked once: the count does not change)."""
    global gpu_count
    if gpu_count is None:
        gpu_count = torch.cuda.device_count()
    return gpu_count > 1


def on_device_of(x: torch.Tensor, fn, *args) -> None:
    """Call ``fn(*args)`` with x's GPU current, as launches on the current stream need."""
    if x.is_cuda and several_gpus() and x.device.index != torch.cuda.current_device():
        with torch.cuda.device(x.device):
            fn(*args)
    else:
        fn(*args)


def _triton(x, out):
    kernels("triton.transpose").launch(x, out, tuning.triton_config(x.element_size(), x.shape, x.stride(0)))


def _triton_gather(x, out):
    kernels("triton.transpose").launch_gather(x, out)


def _torch(x, out):
    out.copy_(x.t())


def _cuda(variant: str):
    def go(x, out):
        if variant == "vec":
            reason = vec_refusal(x.element_size(), x.stride(1), x.shape[0], out.data_ptr())
            if reason is not None:
                raise ValueError(f"backend='cuda-vec' cannot take this call: {reason} (backend='auto' picks "
                                 "another kernel for it)")  # fmt: skip
        kernels("cuda.transpose").launch(x, out, variant)

    return go


# backend name -> launch(x, out) of a 2-D transpose
LAUNCHERS = {"triton": _triton, "triton-gather": _triton_gather, "torch": _torch} | {
    name: _cuda(variant) for name, variant in CUDA_BACKENDS.items()
}


def launch(x: torch.Tensor, out: torch.Tensor, backend: str) -> None:
    """Transpose ``x`` into ``out`` on a concrete ``backend``; both are non-empty and checked. Kernels
    receive the tensors in their own dtype and view them as unsigned integers only where a view matters
    (compiling, the interpreter)."""
    LAUNCHERS[backend](x, out)


def permute_refusal(backend: str, x, p, out=None) -> str | None:
    """Why the CUDA C++ permute kernel of ``backend`` (``CUDA_PERMUTE_BACKENDS``) cannot take a call
    (None: it can); ``out`` None: a new tensor's (16-byte aligned)."""
    if not x.is_cuda:
        return f"it needs a CUDA tensor, but x is on {x.device}"
    es = x.element_size()
    if backend == "cuda-shift":
        return NVRTC_MISSING if not nvrtc_available() else shift_refusal(p.sizes, p.in_strides, es)
    if backend == "cuda-staged":
        if not nvrtc_available():
            return NVRTC_MISSING
        if p.kind not in ("rows", "tiles", "transpose2d"):
            return f"it moves boxes of an N-D permute, not a plan of kind {p.kind!r}"
        # the launch the call will take (cached per plan), so that a call that can go plans its box once
        if _staged_launch(p.sizes, p.in_strides, es, *_alignments(x, out), card_of_device(x)) is not None:
            return None
        return staged_refusal(p.sizes, p.in_strides, es, *_alignments(x, out))
    if es not in tuning.REALIGN_SIZES:
        return f"it moves 1- and 2-byte elements, got {es}-byte ones"
    if not nvrtc_available():
        return NVRTC_MISSING
    if backend in ("cuda-thin", "cuda-split"):
        if p.kind not in ("tiles", "transpose2d"):
            return "it transposes: the output's fastest dimension must not be the input's"
        return (thin_refusal if backend == "cuda-thin" else split_refusal)(p.sizes, p.in_strides, es)
    go = _realign_candidate(p, es) if p.kind in ("tiles", "transpose2d") else None
    if go is None or kernels("cuda.permute").params_of(p, go, es) is None:
        return ("it transposes: the output's fastest dimension must not be the input's, one input dimension must "
                "have stride 1, and the indices must fit 32 bits")  # fmt: skip
    return None


@lru_cache(maxsize=16)
def _card_of(index: int) -> str:
    return card_of(torch.cuda.get_device_name(index))


def card_of_device(x) -> str | None:
    """The device constants' card of x's GPU (``tileflip.plan.device.card_of``), None off the GPU."""
    return _card_of(x.get_device()) if x.is_cuda else None


def _alignments(x, out) -> tuple[int, int]:
    """The largest powers of two, at most a sector (32), that divide x's and out's addresses (bytes)."""
    a = x.data_ptr() | 32
    b = (out.data_ptr() if out is not None else 0) | 32
    return a & -a, b & -b


def pointer_alignment(x, out) -> int:
    """The largest power of two, at most 16, that divides both tensors' addresses and storage offsets (bytes)."""
    v = x.data_ptr() | out.data_ptr() | 16
    v |= x.storage_offset() * x.element_size() | out.storage_offset() * out.element_size()
    return v & -v


def moved_as(x, out, p) -> tuple:
    """(x, out, p) as the permute is moved: a rows plan in the element size ``tuning.element_width``
    picks (the same bytes; x and out as flat tensors of that width at their own addresses), anything else
    as it is."""
    if p.kind != "rows":
        return x, out, p
    es = x.element_size()
    width = _element_width(p, es, pointer_alignment(x, out))
    if width == es:
        return x, out, p
    return as_width(x, width), as_width(out, width, out.numel() * es // width), _regrouped(p, es, width)


def launch_permute(x, out, p, backend: str = "triton") -> None:
    """Run permute plan ``p`` on ``backend``: ``"cuda-realign"`` / ``"cuda-thin"`` / ``"cuda-split"`` /
    ``"cuda-shift"`` (checked by ``permute_refusal``) the CUDA kernel that realigns 1- and 2-byte rows /
    that turns thin sides around in registers / that splits interleaved input rows in registers / that
    copies kept rows as realigned 16-byte words; ``"auto"`` the
    strategy the model picks (``tuning.permute_strategy``) where NVRTC is there for a CUDA kernel; else
    the 2-D transpose kernel or the Triton permute kernels."""
    es = x.element_size()
    alignment = pointer_alignment(x, out) if p.kind == "rows" else 16
    if backend == "cuda-staged":
        strategy, go = "staged", _staged_launch(p.sizes, p.in_strides, es, *_alignments(x, out), card_of_device(x))
    elif backend == "cuda-realign":
        strategy, go = "realign", _realign_candidate(p, es)
    elif backend == "cuda-thin":
        strategy, go = "thin", _thin_candidate(p, es)
    elif backend == "cuda-split":
        strategy, go = "split", _split_candidate(p, es)
    elif backend == "cuda-shift":
        strategy, go = "shift", _shift_candidate(p, es)
    elif backend == "auto" and x.is_cuda:
        strategy, go = _permute_strategy(p, es, alignment)
    else:
        strategy, go = "tile", None
    if go is not None and nvrtc_available():
        if strategy == "staged":
            kernels("cuda.staged").launch(x, out, p, go)
            return
        if strategy in ("thin", "split", "shift"):
            getattr(kernels("cuda.words"), f"launch_{strategy}")(x, out, p, go)
            return
        cuda_permute = kernels("cuda.permute")
        if cuda_permute.params_of(p, go, es) is not None:
            cuda_permute.launch(x, out, p, go)
            return
    if p.kind == "transpose2d":
        # Output (s0, s1) contiguous is the transpose of the input seen as (s1, s0) with swapped strides.
        (s0, s1), (st0, st1) = p.sizes, p.in_strides
        x2 = x.as_strided((s1, s0), (st1, st0), x.storage_offset())
        kernels("triton.transpose").launch(x2, out.view(s0, s1), tuning.triton_config(es, (s1, s0), st1))
        return
    off_sector = p.kind == "rows" and out.data_ptr() % SECTOR_BYTES != 0  # only a kept tile's launch depends on it
    kernels("triton.permute").launch(x, out, p, _permute_launch(p, es, off_sector=off_sector))


# The launch descriptions, once per plan: the policy's Python costs tens of microseconds, a call's budget.
_permute_launch = lru_cache(maxsize=256)(tuning.permute_launch)
_permute_strategy = lru_cache(maxsize=256)(tuning.permute_strategy)
_realign_candidate = lru_cache(maxsize=256)(tuning.realign_candidate)
_thin_candidate = lru_cache(maxsize=256)(tuning.thin_candidate)
_split_candidate = lru_cache(maxsize=256)(tuning.split_candidate)
_shift_candidate = lru_cache(maxsize=256)(tuning.shift_candidate)
_staged_launch = lru_cache(maxsize=256)(staged_launch)
_element_width = lru_cache(maxsize=256)(tuning.element_width)
_regrouped = lru_cache(maxsize=256)(plan_regrouped)
