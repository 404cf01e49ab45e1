"""``tileflip.enable()``: PyTorch's own layout copies of CUDA tensors run on tileflip's permute kernels.

``x.permute(...).contiguous()``, ``x.transpose(...).contiguous()``, ``reshape`` of a permuted view,
``.to(memory_format=...)``, ``clone(memory_format=...)`` and the permutes einops' ``rearrange`` emits all
reach ``aten::copy_`` (``clone`` and ``contiguous`` allocate the result, then call it), so one kernel is
overridden: ``aten::copy_``'s CUDA kernel, through ``torch.library.Library("aten", "IMPL")``. Under
autograd the override sits below the autograd kernel, so gradients and version counters are PyTorch's.

A call is taken only where it is a dense layout change that tileflip moves faster; everything else goes
to PyTorch's kernel unchanged, decided from the tensors' metadata before the planner is asked
(``_route``). A decision is cached per signature (shapes, strides, dtypes, devices), so a repeated call
pays one dictionary lookup; each new decision is logged at DEBUG level on the ``tileflip.enable`` logger.
``enabled_stats()`` counts what was taken and why the rest was declined. The registration is
process-wide: ``enabled()`` is not thread-local.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter
from contextlib import contextmanager
from functools import lru_cache

import torch

from tileflip import plan, tuning
from tileflip.kernels.dtypes import ELEMENT_SIZE
from tileflip.ops.backends import card_of_device, launch_permute, moved_as, on_device_of
from tileflip.plan import device as plan_device
from tileflip.plan.launch import product
from tileflip.plan.torchcopy import torch_copy_terms

OP = "aten::copy_"
ENV = "TILEFLIP_ENABLE"

# The host time a taken call adds to PyTorch's own (seconds): the planner's cached lookups and a Triton or
# NVRTC launch from Python, against PyTorch's C++ launch. A stated estimate, not yet measured on a device. A
# call whose predicted device-time gain is smaller goes to PyTorch's kernel.
ADDED_HOST_S = 15e-6

_lock = threading.RLock()
_inside = threading.local()  # set while a taken call runs: tileflip's own copies go to PyTorch's kernel
_installed: dict = {}  # {"lib": Library, "key": dispatch key} while enabled
_launched: set = set()  # (plan, dtype) of the calls taken so far: their kernels are compiled and loaded
counts: Counter = Counter()  # "taken" and each decline reason, since the last enable()
_decisions: dict = {}  # signature -> a decline reason, or (order, broadcast, plan) of a taken layout
_small: dict = {}  # device -> the element count at or below which a copy is declined as "small"
MAX_DECISIONS = 4096  # signatures kept; the cache starts again when full
_log = logging.getLogger("tileflip.enable")


class EnableError(RuntimeError):
    """``tileflip.enable()`` refused: another library already overrides the kernel."""


def is_enabled() -> bool:
    return bool(_installed)


def enabled_stats() -> dict:
    """What the override did since the last ``enable()``: ``{"taken": n, "declined": {reason: n}}``."""
    with _lock:
        snapshot = dict(counts)
    taken = snapshot.pop("taken", 0)
    return {"taken": taken, "declined": dict(sorted(snapshot.items()))}


def _foreign_kernel(key: str) -> str | None:
    """The registration of ``aten::copy_`` for ``key`` that some other library made (None: PyTorch's own)."""
    for line in torch._C._dispatch_dump(OP).splitlines():
        if line.startswith(f"{key}:"):
            return line
    return None


def enable() -> None:
    """Route PyTorch's layout copies of CUDA tensors to tileflip (see the module's docstring); a second call
    does nothing. Raises ``EnableError`` where another library (FlagGems, say) already overrides
    ``aten::copy_`` on CUDA: tileflip does not replace it silently."""
    _install("CUDA")


def disable() -> None:
    """Restore PyTorch's own ``aten::copy_`` kernel exactly (nothing happens where tileflip is not enabled)."""
    with _lock:
        lib = _installed.pop("lib", None)
        _installed.clear()
        if lib is not None:
            lib._destroy()


@contextmanager
def enabled():
    """``with tileflip.enabled():`` enables tileflip's layout copies for the block, then restores the
    state before it (process-wide, not per thread)."""
    with _lock:
        was = is_enabled()
        enable()
    try:
        yield
    finally:
        if not was:
            disable()


def _install(key: str) -> None:
    """Register the override for dispatch key ``key`` ("CUDA"; the CPU tests register "CPU" to run the same
    path through Triton's interpreter)."""
    with _lock:
        if _installed:
            return
        foreign = _foreign_kernel(key)
        if foreign is not None:
            raise EnableError(f"tileflip.enable(): {OP} already has a {key} kernel registered outside PyTorch "
                              f"({foreign.strip()}); another library overrides it (FlagGems' enable(), say). "
                              "Disable that library first: tileflip does not replace its kernel.")  # fmt: skip
        original = torch.library.get_kernel(OP, key)
        keyset = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, key))
        device_type = key.lower()

        def copy_(dst, src, non_blocking=False):
            if not isinstance(src, torch.Tensor):
                # a wrapped number (``x * 3`` copies one) reaches a Python kernel as a Python scalar
                return original.call_boxed(keyset, dst, _wrapped(src), non_blocking)
            if getattr(_inside, "active", False):  # tileflip's own copies (its torch backend)
                return original.call_boxed(keyset, dst, src, non_blocking)
            route = "non_blocking" if non_blocking else _taken(dst, src, device_type)
            if isinstance(route, str):
                counts[route] += 1
                return original.call_boxed(keyset, dst, src, non_blocking)
            x, out, p = route
            if x.is_cuda and (p, x.dtype) not in _launched and torch.cuda.is_current_stream_capturing():
                # a first launch compiles and loads its kernel, which a stream capture does not allow
                counts["not compiled while capturing"] += 1
                return original.call_boxed(keyset, dst, src, non_blocking)
            counts["taken"] += 1
            _inside.active = True
            try:
                xm, om, pm = moved_as(x, out, p)
                on_device_of(x, launch_permute, xm, om, pm, "auto")
            finally:
                _inside.active = False
            _launched.add((p, x.dtype))
            return dst

        lib = torch.library.Library("aten", "IMPL")  # noqa: TOR901 - an override of aten's own kernel
        lib.impl("copy_", copy_, key)
        counts.clear()
        _decisions.clear()
        _small.clear()
        _installed.update(lib=lib, key=key)


def _wrapped(value) -> torch.Tensor:
    """The 0-d CPU tensor PyTorch wraps a Python scalar in: int64, float64, complex128 or bool."""
    dtype = {bool: torch.bool, int: torch.int64, float: torch.float64, complex: torch.complex128}[type(value)]
    return torch.tensor(value, dtype=dtype)


def _dense_order(t: torch.Tensor):
    """The permutation of ``t``'s dimensions that makes it contiguous, or None where no permutation does
    (overlapping or gapped memory)."""
    if t.is_contiguous():
        return tuple(range(t.dim()))
    order = tuple(sorted(range(t.dim()), key=lambda d: (-t.stride(d), -t.shape[d], d)))
    return order if t.permute(order).is_contiguous() else None


def _taken(dst, src, device_type: str):
    """(x, out, plan) of a call tileflip takes, or the reason it goes to PyTorch's kernel: the signature's
    cached decision (``_route``), then the checks that depend on the tensors' memory, not their metadata."""
    device = dst.device
    small = _small.get(device)
    if small is None:
        card = card_of_device(dst) if dst.device.type == "cuda" else None
        small = _small[device] = _min_elements(card)
    if dst.numel() <= small:
        return "small"
    if dst.layout != torch.strided or src.layout != torch.strided or src.is_nested or dst.is_nested:
        return "layout"  # before the key: such tensors have no strides
    key = (dst.dtype, src.dtype, device, src.device, dst.shape, dst.stride(), src.shape, src.stride(),
           dst.is_conj() or dst.is_neg(), src.is_conj() or src.is_neg(), dst.layout, src.layout)  # fmt: skip
    decision = _decisions.get(key)
    if decision is None:
        decision = _route(dst, src, device_type)
        if len(_decisions) >= MAX_DECISIONS:
            _decisions.clear()
        _decisions[key] = decision
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug("%s %s %s <- %s %s: %s", tuple(dst.shape), dst.dtype, dst.stride(), tuple(src.shape),
                       src.stride(), decision if isinstance(decision, str) else f"taken ({decision[2].kind})")
    if isinstance(decision, str):
        return decision
    if src.untyped_storage().data_ptr() == dst.untyped_storage().data_ptr():
        return "shared storage"
    order, broadcast, p = decision
    x = src.expand(dst.shape) if broadcast else src
    return x.permute(order), dst.permute(order), p


def _route(dst, src, device_type: str):
    """The decision for a signature: a decline reason, or (order, broadcast, plan) of a layout tileflip
    takes. It reads only metadata, so that it holds for every call with the same shapes, strides, dtypes
    and devices."""
    if src.device != dst.device or dst.device.type != device_type:
        return "devices"
    if src.dtype != dst.dtype:
        return "dtype cast"
    if dst.layout != torch.strided or src.layout != torch.strided or src.is_nested or dst.is_nested:
        return "layout"
    if dst.is_conj() or src.is_conj() or dst.is_neg() or src.is_neg():
        return "conjugate or negative bit"
    es = ELEMENT_SIZE.get(dst.dtype)
    if es is None:
        return "dtype"
    card = card_of_device(dst) if dst.is_cuda else None
    broadcast = src.shape != dst.shape
    if broadcast:
        if src.dim() > dst.dim():
            return "shapes"
        try:
            src = src.expand(dst.shape)
        except RuntimeError:
            return "shapes"
    if dst.dim() > plan.MAX_RANK:
        return "rank"
    order = _dense_order(dst)
    if order is None:
        return "strided destination"
    x = src.permute(order)
    p = _plan(tuple(x.shape), tuple(x.stride()), es)
    if p.kind == "copy":
        return "no layout change"
    if _slower(p, es, card, ADDED_HOST_S):
        return "predicted no faster"
    return order, broadcast, p


def _min_elements(card) -> float:
    """Elements below which no layout change can gain ``ADDED_HOST_S``: PyTorch's kernel at its slowest
    reads one sector an element (the card's ``l2_read_sectors_per_s``), tileflip's at its fastest copies."""
    return ADDED_HOST_S * _device(card)["l2_read_sectors_per_s"]


@lru_cache(maxsize=16)
def _device(card) -> dict:
    return plan_device.constants(card)[0]


@lru_cache(maxsize=256)
def _plan(shape, strides, es):
    return plan.plan_permute(shape, strides, tuple(range(len(shape))), es)


@lru_cache(maxsize=256)
def _slower(p, es: int, card, added_host_s: float) -> bool:
    """Whether PyTorch's kernel is predicted to move this layout at least as fast as tileflip's, counting the
    host time a taken call adds. tileflip's speed is the planner's predicted fraction of
    copy for its strategy where it has one (``tuning.strategy_fractions``), else copy speed."""
    dev = _device(card)
    theirs = torch_copy_terms(p.sizes, p.in_strides, es, dev)
    fractions = tuning.strategy_fractions(p, es)
    ours_fraction = max(fractions.values()) if fractions else 1.0
    copy_time = 2 * product(p.sizes) * es / dev["copy_bandwidth_bytes_per_s"] + dev["launch_overhead_s"]
    ours = copy_time / ours_fraction
    return theirs["time"] - ours <= added_host_s


def from_environment() -> None:
    """Enable at import where ``TILEFLIP_ENABLE=1`` (``tileflip/__init__.py`` calls it)."""
    value = os.environ.get(ENV, "")
    if value not in ("", "0", "1"):
        raise ValueError(f"{ENV} must be 1 (enable tileflip's layout copies) or 0, got {value!r}")
    if value == "1":
        enable()
