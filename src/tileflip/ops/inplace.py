"""``tileflip.transpose_in_place``: a contiguous (M, N) or (B, M, N) tensor's storage rewritten to hold
its contiguous transpose, with scratch of O(max(M, N)) elements instead of a second copy of the tensor.

Unlike ``torch.Tensor.t_()`` and ``transpose_()``, which only swap strides, this moves the bytes. The
passes come from ``tileflip.plan.inplace``; they are all enqueued on the current stream before the call
returns. The call goes through the registered mutating op ``tileflip::transpose_in_place_``, so autograd
sees a version bump and ``torch.compile`` traces the mutation.
"""

from __future__ import annotations

import torch

from tileflip.kernels import dtypes
from tileflip.ops.backends import card_of_device, kernels, on_device_of
from tileflip.ops.checks import check_dense
from tileflip.plan import device as devices
from tileflip.plan.inplace import InPlaceError, InPlacePlan, plan_in_place

__all__ = ["transpose_in_place", "plan_for", "InPlaceError"]


def _kernels():
    return kernels("triton.inplace")


def check_in_place(x, scratch_bytes=None, *, memory: bool = True) -> None:
    """Every refusal, before anything is allocated or written (``memory``: a real tensor, whose storage
    can be measured; the registered op's fake tensors skip that test)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    check_dense(x, "x")
    if x.dim() not in (2, 3):
        raise ValueError(f"x must be 2-D (M, N) or 3-D (B, M, N), got a {x.dim()}-D tensor of shape {tuple(x.shape)}")
    dtypes.check_dtype(x.dtype, "x")
    if x.requires_grad:
        raise ValueError("x requires grad: an in-place transpose of a leaf or a graph's tensor would corrupt "
                         "autograd's saved values; call it on x.detach() (it shares x's storage)")  # fmt: skip
    if x.is_conj() or x.is_neg():
        raise ValueError("x must not be a conjugate or negative view: the kernels move stored bits; resolve it "
                         "first (x.resolve_conj().resolve_neg())")  # fmt: skip
    if not x.is_contiguous():
        raise ValueError(f"x must be contiguous, got strides {tuple(x.stride())} for shape {tuple(x.shape)}")
    if memory:
        storage = x.untyped_storage().nbytes()
        if x.storage_offset() != 0 or storage != x.nbytes:
            raise ValueError(f"x must span its whole storage (storage offset 0 and {x.nbytes} bytes), got offset "
                             f"{x.storage_offset()} in a storage of {storage} bytes: rewriting it in place would "
                             "move bytes of the storage's other views; pass a tensor that owns its storage "
                             "(x.clone())")  # fmt: skip
        if x.device.type == "cpu" and not _kernels()._INTERPRETED:
            raise ValueError("transpose_in_place got a CPU tensor, but Triton's interpreter is off: set "
                             "TRITON_INTERPRET=1 before importing tileflip to run the kernels on the CPU")  # fmt: skip
        if x.device.type not in ("cpu", "cuda"):
            raise ValueError(f"x must be on a CPU or CUDA device, got {x.device}")
    if scratch_bytes is not None:
        if isinstance(scratch_bytes, bool) or not isinstance(scratch_bytes, int):
            raise TypeError(f"scratch_bytes must be an int or None, got {scratch_bytes!r}")
        if scratch_bytes < 0:
            raise ValueError(f"scratch_bytes must be 0 or more, got {scratch_bytes}")


def _shape(x) -> tuple[int, int, int]:
    return (1, *x.shape) if x.dim() == 2 else tuple(x.shape)


def plan_for(x: torch.Tensor, scratch_bytes: int | None = None) -> InPlacePlan:
    """The passes ``transpose_in_place(x, scratch_bytes=...)`` runs, planned for ``x``'s card."""
    batch, m, n = _shape(x)
    card = card_of_device(x)
    l2 = devices.constants(card)[0].get("l2_cache_bytes") if card else None
    kwargs = {"l2_bytes": int(l2)} if l2 else {}
    try:
        return plan_in_place(batch, m, n, x.element_size(), scratch_bytes=scratch_bytes, **kwargs)
    except InPlaceError as e:
        raise ValueError(str(e)) from None


def run(x: torch.Tensor, scratch_bytes: int) -> None:
    """The registered op's body: plan, allocate the scratch, enqueue every pass (``scratch_bytes`` -1: the
    default budget). The op checks its tensor too, so that a direct call of it is refused as the public
    function's is."""
    budget = None if scratch_bytes == -1 else scratch_bytes
    check_in_place(x, budget)
    if x.numel() == 0:
        return
    plan = plan_for(x, budget)
    if plan.passes:
        on_device_of(x, _kernels().run_plan, x, plan, scratch_for(x, plan))


def scratch_for(x: torch.Tensor, plan: InPlacePlan) -> torch.Tensor | None:
    """The plan's scratch on x's device, as unsigned integers of x's element size (None: it needs none)."""
    if not plan.scratch_bytes:
        return None
    try:
        scratch = torch.empty(-(-plan.scratch_bytes // 8) * 8, dtype=torch.uint8, device=x.device)
    except torch.OutOfMemoryError as e:
        raise MemoryError(f"transpose_in_place needs {plan.scratch_bytes} bytes of scratch, which could not be "
                          f"allocated on {x.device}; nothing was written. Free memory, or pass a smaller "
                          f"scratch_bytes (one staged group is the least; see tileflip.ops.inplace.plan_for)"
                          ) from e  # fmt: skip
    return scratch.view(dtypes.UINT_OF_SIZE[x.element_size()])


def transpose_in_place(x: torch.Tensor, *, scratch_bytes: int | None = None) -> torch.Tensor:
    """Rewrite the storage of contiguous ``x`` of shape (M, N) to hold its contiguous (N, M) transpose (a
    (B, M, N) ``x``: each matrix in place), and return the (N, M) (or (B, N, M)) tensor on that storage.

    ``x`` itself keeps its shape and strides, so it then reads the transposed bytes in the old shape: use
    the returned tensor. An empty ``x`` gets the view and nothing else. ``scratch_bytes`` bounds the scratch
    (default: one staged row or column stripe, raised to half the card's L2 but at most half the tensor).
    Refusals raise before anything is written: a non-contiguous ``x``, one that does not span its whole
    storage, one that requires grad, a dtype outside 1, 2, 4 and 8 bytes, a scratch budget below one
    staged group, or scratch that cannot be allocated."""
    if not torch.compiler.is_compiling():  # traced, the op's fake implementation checks
        check_in_place(x, scratch_bytes)  # before the op's schema sees the arguments; the op plans and refuses
    torch.ops.tileflip.transpose_in_place_(x, -1 if scratch_bytes is None else scratch_bytes)
    if x.dim() == 2:
        return x.view(x.shape[1], x.shape[0])
    return x.view(x.shape[0], x.shape[2], x.shape[1])
