"""N-D permute plans: ``x.permute(dims).contiguous()`` reduced to the fewest merged dimensions and one of a
few kernel kinds (``plan_permute``). Pure Python, no torch."""

from __future__ import annotations

import operator
from dataclasses import dataclass

PERMUTE_KINDS = ("empty", "copy", "transpose2d", "rows", "tiles", "general")
MAX_RANK = 8
# Runs shorter than this many bytes on both sides are reported apart by the benchmarks (innermost_runs).
MIN_RUN_BYTES = 16
# A 2-D permute goes to the tuned 2-D transpose kernel when both sides are at least this long (its tiles
# are 64 to 256 elements a side); a thinner one runs the tile kernel, whose tile reshapes to the short side.
TRANSPOSE2D_MIN_BYTES = 256


@dataclass(frozen=True)
class PermutePlan:
    """How ``x.permute(dims).contiguous()`` is carried out.

    Dimensions of size 1 are dropped and output-adjacent dimensions that are also adjacent and in
    order in the input's memory are merged, so ``sizes`` / ``in_strides`` (in elements) describe the
    same copy with the fewest dimensions, in output order; the output is contiguous in that order.

    Kinds:
      * ``empty``: nothing to move;
      * ``copy``: one contiguous run (the identity, after merging);
      * ``transpose2d``: exactly two merged dimensions, swapped, each of at least TRANSPOSE2D_MIN_BYTES:
        the 2-D transpose kernel;
      * ``rows`` (inner dimension kept): the output's innermost dimension is also the input's
        contiguous one; ``tiles`` (inner dimension moved): it is not. Both run the tile kernel: a 2-D
        tile whose axis A folds the input's fastest dimensions (starting at ``a``) and whose axis B
        folds the output's fastest, batched over the rest (``tileflip.plan.launch.tile_launch``); rows
        loads and stores along A, tiles loads along A and stores along B (so does rows where the kept
        run is short, with B starting from it: ``tileflip.tuning.short_kept_run``); a rows plan may be
        moved in elements of another size (``regrouped``);
      * ``general``: a 1-D gather (one merged dimension of stride != 1), or no dimension but the
        output's last with a non-zero input stride: each output element gathered from its input offset.
    """

    kind: str
    out_shape: tuple
    sizes: tuple
    in_strides: tuple
    a: int | None = None

    @property
    def out_strides(self) -> tuple:
        return contiguous_strides(self.sizes)


def contiguous_strides(sizes) -> tuple:
    """Strides (in elements) of a contiguous tensor of these sizes."""
    strides, acc = [], 1
    for size in reversed(sizes):
        strides.append(acc)
        acc *= size
    return tuple(reversed(strides))


def merge_dims(sizes, strides) -> tuple[tuple, tuple]:
    """Drop size-1 dimensions and merge each dimension into the next where it steps over it exactly."""
    dims = [(s, st) for s, st in zip(sizes, strides) if s != 1]
    merged: list = []
    for size, stride in reversed(dims):
        if merged and stride == merged[-1][1] * merged[-1][0]:
            inner_size, inner_stride = merged.pop()
            merged.append((size * inner_size, inner_stride))
        else:
            merged.append((size, stride))
    merged.reverse()
    return tuple(s for s, _ in merged), tuple(st for _, st in merged)


def _index(d) -> int:
    """``d`` as an int where it is one (NumPy integers and 0-d integer tensors included, as torch's
    ``permute`` takes them); bools and anything else raise TypeError."""
    if isinstance(d, bool):
        raise TypeError("a bool is not a dimension")
    return operator.index(d)


def check_perm(dims, rank: int) -> tuple:
    """``dims`` as a tuple of non-negative ints, or ValueError/TypeError naming it. A tuple or list (a
    ``torch.Size`` included) of ints or of what torch's ``permute`` takes as ints."""
    try:
        if not isinstance(dims, (tuple, list)):
            raise TypeError
        dims = tuple(_index(d) for d in dims)
    except TypeError:
        raise TypeError(f"dims must be a tuple or list of ints, got {dims!r}") from None
    norm = tuple(d + rank if d < 0 else d for d in dims)
    if sorted(norm) != list(range(rank)):
        raise ValueError(f"dims must be a permutation of range({rank}) (x has {rank} dimensions), got {tuple(dims)}")
    return norm


def plan_permute(shape, strides, dims, element_size: int) -> PermutePlan:
    """Plan ``x.permute(dims).contiguous()`` for x of this shape and these strides (in elements)."""
    rank = len(shape)
    if rank > MAX_RANK:
        raise ValueError(f"x must have at most {MAX_RANK} dimensions, got {rank}")
    dims = check_perm(dims, rank)
    out_shape = tuple(shape[d] for d in dims)
    numel = 1
    for s in shape:
        numel *= s
    if numel == 0:
        return PermutePlan("empty", out_shape, (), ())
    sizes, in_strides = merge_dims(out_shape, tuple(strides[d] for d in dims))
    if not sizes:  # every dimension has size 1: one element
        sizes, in_strides = (1,), (1,)
    last = len(sizes) - 1
    if len(sizes) == 1:
        return PermutePlan("copy" if in_strides[0] == 1 else "general", out_shape, sizes, in_strides, 0)
    if in_strides[-1] == 1:
        return PermutePlan("rows", out_shape, sizes, in_strides, last)
    others = [i for i in range(last) if in_strides[i] > 0]
    if not others:
        return PermutePlan("general", out_shape, sizes, in_strides)
    a = min(others, key=lambda i: (in_strides[i], -i))
    if len(sizes) == 2 and min(sizes) * element_size >= TRANSPOSE2D_MIN_BYTES:
        return PermutePlan("transpose2d", out_shape, sizes, in_strides, a)
    return PermutePlan("tiles", out_shape, sizes, in_strides, a)


def regrouped(plan: PermutePlan, element_size: int, width: int) -> PermutePlan:
    """Plan ``plan`` (kind rows) as the same copy of bytes over elements of ``width`` bytes: its kept run
    and every input stride counted in them, re-merged and re-classified (a run of ``width`` bytes becomes
    one element: the plan then transposes). ``width`` must divide the run's bytes and every stride's."""
    if plan.kind != "rows":
        raise ValueError(f"only a rows plan can be regrouped, got kind {plan.kind!r}")
    last = len(plan.sizes) - 1
    run = plan.sizes[last] * element_size
    strides = tuple(s * element_size for s in plan.in_strides[:last])
    if width < 1 or run % width or any(s % width for s in strides):
        raise ValueError(f"width must divide the kept run ({run} B) and every input stride {strides} (bytes), "
                         f"got {width}")  # fmt: skip
    sizes = (*plan.sizes[:last], run // width)
    return plan_permute(sizes, (*(s // width for s in strides), 1), tuple(range(len(sizes))), width)


def innermost_runs(plan: PermutePlan, element_size: int) -> tuple[int, int]:
    """Bytes of the longest contiguous run on the input side and on the output side of a permute."""
    if plan.kind == "empty":
        return 0, 0
    out_run = plan.sizes[-1] * element_size
    in_run = max((s for s, st in zip(plan.sizes, plan.in_strides) if st == 1), default=1) * element_size
    return in_run, out_run
