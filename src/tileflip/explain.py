"""Plans written out for people: what ``tileflip plan`` and ``tileflip demo`` print. No triton, no torch."""

from __future__ import annotations

from tileflip import plan, tuning
from tileflip.plan.launch import (
    SHIFT_ITEM_BYTES,
    SHIFT_WARPS,
    SPLIT_WARPS,
    THIN_ROW_BYTES,
    THIN_WARPS,
    VECTOR_BYTES,
    cdiv,
    product,
    realign_grid,
    realign_tile,
    store_shift,
)


def plan_text(shape, *, block=None, dtype="float32", programs=12) -> str:
    M, N = shape
    size = plan.element_size(dtype)
    config = tuning.triton_config(size, (M, N), N)  # a contiguous input: row stride N
    BM, BN = block if block else (config.block_m, config.block_n)
    plan.check_tile(BM, BN)
    grid = plan.transpose_grid(M, N, BM, BN, 1 if block else config.group_m)
    chosen = tuning.auto_for(M, N, size, N)
    lines = [
        f"transpose {M}x{N} {dtype} ({size} B/element) -> {N}x{M}, contiguous",
        *([] if chosen == "triton" or M * N == 0 else [
            f"backend auto on a CUDA tensor: {chosen} (the tuning table's choice for {size}-byte "
            f"{tuning.shape_class(M, N, size, N)} cases{AUTO_FALLBACK.get(chosen, '')}); below, the Triton tile "
            "kernel, which backend='triton' runs"]),
        f"tiles {BM}x{BN}"
        + (
            ""
            if block
            else f" (the tuning table's choice for {size}-byte {tuning.shape_class(M, N, size, N)} cases, "
            f"{config.num_warps} warps)"
        ),
        f"grid: {grid.grid_m} x {grid.grid_n} tiles = {grid.programs} programs, launched "
        f"{'2-D' if grid.launch[1] > 1 else '1-D'} as {grid.launch}",
        "       (program pid handles tile (pid // grid_n, pid % grid_n); gridDim.y and z stay 1 for any shape)"
        if grid.group_m == 1
        else "       (program (x, y) of the 2-D grid handles tile (x, y): columns of tiles in turn, no decoding)"
        if grid.launch[1] > 1
        else "       (program pid handles tile (pid % grid_m, pid // grid_m): columns of tiles in turn; "
        "gridDim.y and z stay 1)"
        if grid.group_m in (0, -1)  # -1 past gridDim.y: the same order on a 1-D grid
        else f"       (programs walk bands of {grid.group_m} tile rows, column by column; gridDim.y and z stay 1)",
    ]
    if grid.programs == 0:
        lines.append("empty tensor: nothing is launched")
        return "\n".join(lines)
    covered = grid.programs * BM * BN
    lines.append(f"useful {M * N} of {covered} slots ({M * N / covered:.1%}); masked {covered - M * N}")
    keys = {name: plan.specialization_class(v) for name, v in (("M", M), ("N", N), ("stride_xm", N), ("stride_om", M))}
    lines.append(
        "Triton specialization class: " + ", ".join(f"{k}={'/'.join(filter(None, v))}" for k, v in keys.items())
    )
    lines += SPECIALIZATION_KEY
    lines.append("")
    lines.append(
        f"{'program':>8} {'tile':>10} {'input rows':>12} {'input cols':>12} {'kept':>8} {'masked':>7}   writes output"
    )
    for pid in range(min(programs, grid.programs)):
        pm, pn = grid.tile_of(pid)
        lines.append(tile_line(pid, plan.tile_masks(M, N, BM, BN, pm, pn)))
    if grid.programs > programs:
        lines.append(f"... {grid.programs - programs} more programs (--programs N lists more)")
    return "\n".join(lines)


# what the codes of the class line mean (``plan.specialization_class``), printed under it
SPECIALIZATION_KEY = [
    "       (Triton compiles one kernel per class and reuses it for every shape of the class. Per integer argument:",
    "       i32 = fits in 32 bits, i64 = needs 64; D = divisible by 16; constexpr/1 = equal to 1, compiled in)",
]


# where auto leaves the table's CUDA C++ kernel for the Triton tile (``tileflip.ops.backends.auto_kernel``)
AUTO_FALLBACK = {
    "cuda-vec": "; the Triton tile where that kernel cannot take the call, or NVRTC is missing",
    "cuda-naive": "; the Triton tile where NVRTC is missing",
    "cuda-tiled": "; the Triton tile where NVRTC is missing",
    "cuda-tiled-nopad": "; the Triton tile where NVRTC is missing",
}


def _span(r) -> str:
    return f"{r[0]}..{r[1] - 1}" if r[1] - r[0] > 1 else f"{r[0]}"


def tile_line(pid: int, tm: plan.TileMasks) -> str:
    (r0, r1), (c0, c1) = tm.in_rows, tm.in_cols
    kept = f"{r1 - r0}x{c1 - c0}"
    out = f"rows {_span(tm.out_rows)}, cols {_span(tm.out_cols)}"
    return (
        f"{pid:>8} {str((tm.pid_m, tm.pid_n)):>10} {_span(tm.in_rows):>12} {_span(tm.in_cols):>12} "
        f"{kept:>8} {tm.masked:>7}   {out}"
    )


def permute_text(shape, perm, *, dtype="float32") -> str:
    """The plan of ``x.permute(perm).contiguous()`` for a contiguous x of this shape."""
    size = plan.element_size(dtype)
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= s
    strides = tuple(reversed(strides))
    p = plan.plan_permute(tuple(shape), strides, perm, size)
    lines = [
        f"permute {'x'.join(map(str, shape))} {dtype} by {tuple(plan.check_perm(perm, len(shape)))} -> "
        f"{'x'.join(map(str, p.out_shape))}, contiguous",
        f"input strides {strides} (elements)",
        f"merged (output order): sizes {p.sizes}, input strides {p.in_strides}, output strides {p.out_strides}",
        f"kind: {p.kind}",
    ]
    in_run, out_run = plan.innermost_runs(p, size)
    lines.append(f"innermost contiguous runs: input {in_run} B, output {out_run} B")
    width = tuning.element_width(p, size, VECTOR_BYTES)  # pointers as the allocator gives them: 16-byte aligned
    if width != size:
        p, size = plan.regrouped(p, size, width), width
        lines.append(f"moved as {width}-byte elements (the kept run, every stride and the pointers allow it): "
                     f"sizes {p.sizes}, input strides {p.in_strides}, kind {p.kind}")  # fmt: skip
    lines += _strategy_or(p, size, _permute_launch(p, size))
    lines += _staged_lines(p, size)
    return "\n".join(lines)


def _staged_lines(p, size) -> list[str]:
    """The staged permute's box (backend cuda-staged) and its cost model's terms, or why it cannot take it."""
    if p.kind not in ("rows", "tiles", "transpose2d"):
        return []
    from tileflip.plan import choose, cost, device

    go = choose.staged_launch(p.sizes, p.in_strides, size)
    head = "CUDA staged permute (backend cuda-staged; kernels/cuda/permute_staged.cu):"
    if go is None:
        return [head, f"  cannot take it: {choose.staged_refusal(p.sizes, p.in_strides, size)}"]
    ext = " x ".join(f"dim {d} ({go.extents[d]})" for d in range(len(go.extents)) if go.extents[d] > 1) or "one element"
    cut = ", ".join(f"dim {d} cut to {go.extents[d]} of {p.sizes[d]}" for d in sorted({go.cut_in, go.cut_out} - {-1}))
    dev, card = device.constants()
    m = cost.predict(p.sizes, p.in_strides, go, dev)

    def seg(dims):
        return " x ".join(f"dim {d} ({go.extents[d]})" for d in dims)

    terms = ", ".join(f"{k} {v * 1e6:.1f} us" for k, v in m["terms"].items())
    return [
        head,
        f"  box: {ext} = {go.box_elements * size} B{'; ' + cut if cut else ''}; {go.tiles} boxes",
        f"  segments: input {seg(go.seg_in)} = {go.len_in() * size} B, output {seg(go.seg_out)} = "
        f"{go.len_out() * size} B; vectors: loads {go.vi} B, stores {go.vo} B"
        f"{' (gathered whole)' if go.vector_gather else ''}",
        f"  buffer: rows of {go.pitch} elements, row r turned by (r >> {go.shift}) x {go.rot}; {go.lanes_seg} lanes "
        "on each output segment",
        f"  model ({card}{'' if dev.get('run_efficiency') else ', sectors alone: no run efficiencies measured'}): "
        f"{terms}; bound by {m['bound']}; {m['instructions_per_byte']:.2f} lane instructions and "
        f"{m['wavefronts_per_box'] / (go.box_elements * size):.3f} wavefronts a byte; predicted "
        f"{m['fraction_of_copy']:.0%} of copy",
    ]


def _permute_launch(p, size) -> list[str]:
    if p.kind == "empty":
        return ["nothing to launch"]
    if p.kind == "transpose2d":
        (s0, s1) = p.sizes
        return [
            f"the 2-D transpose kernel on a {s1}x{s0} view:",
            *plan_text((s1, s0), dtype=_dtype(size)).splitlines()[1:4],
        ]
    go = tuning.permute_launch(p, size)  # the launcher's own geometry
    if p.kind == "general":
        return [
            f"general kernel: {product(p.sizes)} elements gathered, {go.blocks[0]} per program, "
            f"grid {go.programs} programs"
        ]
    if go.flat:
        return [
            f"flat rows kernel: the output as one run of {go.vec[0]}-element vectors "
            f"({go.vec[0] * size} B loads and stores), {go.blocks[0]} vectors per program, {go.num_warps} warps; "
            f"each vector's input offset from its row (rows of {p.sizes[-1]} elements); "
            f"{64 if go.offsets64 else 32}-bit offsets",
            f"grid: {go.programs} programs (1-D)",
        ]
    bb, ba = go.blocks

    size_a, size_b = product(p.sizes[d] for d in go.a_dims), product(p.sizes[d] for d in go.b_dims)
    tiles = go.grid[0] * go.grid[1]
    lines = [
        f"tile kernel ({'loads and stores along A' if go.kept else 'loads along A, stores along B'}): "
        f"tile {bb} (B) x {ba} (A), {go.num_warps} warps",
        f"  A (input-fastest first): {_axis(p, go.a_dims)} = {size_a}",
        f"  B (output-fastest first): {_axis(p, go.b_dims)} = {size_b}",
        f"  batch (per program): {_axis(p, go.batch_dims)} = {go.batch}",
        f"vectors on full tiles: loads {go.vec[0]}, stores {go.vec[1]} elements"
        f" ({go.vec[0] * size} B / {go.vec[1] * size} B); {64 if go.offsets64 else 32}-bit offsets"
        f"{'; 64-bit tile indices' if go.wide else ''}{f'; at most {go.maxnreg} registers' if go.maxnreg else ''}",
        f"grid: {go.grid[0]} x {go.grid[1]} = {tiles} tiles x {go.batch} batch elements = {go.programs} programs (1-D),"
        f" consecutive programs along {'B' if go.b_fast else 'A'}",
    ]
    shift = store_shift(p.sizes, p.out_strides, go, size, VECTOR_BYTES)
    if shift:
        more = cdiv(size_b + shift, bb) - go.grid[0]
        lines.append(f"where out starts 16 bytes past a 32-byte sector: B tiles start {shift} elements early, "
                     "so that each tile's stores begin on a sector"
                     + (f" ({more} more B tile)" if more else ""))  # fmt: skip
    flat = go.kept and tuning.permute_launch(p, size, off_sector=True).flat
    if flat:
        lines.append("where out starts off a 32-byte sector: the flat rows kernel, whose warps write whole sectors")
    return lines


def _axis(p, dims) -> str:
    return " x ".join(f"dim {d} ({p.sizes[d]})" for d in dims) or "-"


def _strategy_or(p, size, lines) -> list[str]:
    """``lines`` (the Triton kernel's launch), under the strategy model's choice where a CUDA permute
    kernel could take plan ``p``, or that kernel's launch in front of them where it is chosen."""
    fractions = tuning.strategy_fractions(p, size)
    if len(fractions) < 2:
        return lines
    strategy, go = tuning.permute_strategy(p, size)
    why = ", ".join(f"{name} {f:.2f}" for name, f in fractions.items())
    head = (f"strategy: {strategy} (the model's predicted fractions of copy: {why}; "
            "the largest runs; docs/design.md, Planner)")  # fmt: skip
    if strategy == "tile":
        return [head, *lines]
    otherwise = ["otherwise (backend triton, or NVRTC missing):", *lines]
    if strategy == "shift":
        return [head, *_shift_lines(p, go), *otherwise]
    if strategy == "thin":
        n, s = p.sizes[-2], p.sizes[-1]
        rows = (f"{go.chunks} pieces of {THIN_ROW_BYTES} B a row" if go.chunks > 1 else
                f"the rows of {32 // go.lanes} batch indices a warp, {go.lanes} lanes a row")  # fmt: skip
        return [
            head,
            "CUDA thin-transpose kernel (backend auto; kernels/cuda/permute_words.cu):",
            f"  out (batch, {n}, {s}): {s} input rows of {n} contiguous elements per batch index, turned around "
            f"in registers ({s} compiled in)",
            f"  batch: {_axis(p, go.batch_dims)} = {go.batch}",
            f"  {rows}; 16 B a lane from each of its {s} rows, the warp's output written as aligned 16 B words",
            f"  grid: {go.blocks} blocks of {32 * THIN_WARPS} threads striding over {go.items} warp items",
            *otherwise,
        ]
    if strategy == "split":
        s, n = go.rows, p.sizes[-1]
        return [
            head,
            "CUDA split-transpose kernel (backend auto or cuda-split; kernels/cuda/permute_words.cu):",
            f"  {s} output rows of {n} elements per batch index, split in registers out of {n} x {s} contiguous "
            f"input elements ({s} compiled in)",
            f"  batch: {_axis(p, go.batch_dims)} = {go.batch}",
            f"  {go.chunks} pieces of {THIN_ROW_BYTES} B a row; 16 x {s} B a lane, each row's piece written as "
            "aligned 16 B words",
            f"  grid: {go.blocks} blocks of {32 * SPLIT_WARPS} threads striding over {go.items} warp items",
            *otherwise,
        ]
    ta, step = realign_tile(size)
    pieces = ("on 16-byte boundaries" if tuning.realign_aligned(p, go, size)
              else "at any byte (each shifted into place with the next lane's word)")  # fmt: skip
    return [
        head,
        "CUDA realigned-store kernel (backend auto; kernels/cuda/permute_realign.cu):",
        f"  A (input-fastest first, one input run): {_axis(p, go.a_dims)} = {product(p.sizes[d] for d in go.a_dims)}",
        f"  B (output-fastest first, one output run): {_axis(p, go.b_dims)} = {product(p.sizes[d] for d in go.b_dims)}",
        f"  batch (per block): {_axis(p, go.batch_dims)} = {go.batch}",
        f"  tile {ta} (A) x {step} (B) elements a block, 288 threads; input pieces {pieces}; each output row "
        "written as aligned 16-byte pieces from a 32-byte boundary (its start is at any byte)",
        f"  grid: {realign_grid(p.sizes, go, size)[2]} blocks (1-D), consecutive blocks along A",
        *otherwise,
    ]


def _shift_lines(p, go) -> list[str]:
    """The realigned row copy's launch of rows plan ``p``, which ``backend="cuda-shift"`` runs."""
    return [
        "CUDA realigned row copy (backend auto or cuda-shift; kernels/cuda/permute_words.cu):",
        f"  {go.rows} rows of {go.row} B (outer {_axis(p, go.outer_dims)}), the output written as aligned 16 B "
        "words, each shifted out of the aligned input words that hold its bytes",
        f"  grid: {go.blocks} blocks of {32 * SHIFT_WARPS} threads striding over {go.items} warp items of "
        f"{SHIFT_ITEM_BYTES} B",
    ]


def _rows(p) -> int:
    n = 1
    for s in p.sizes[:-1]:
        n *= s
    return n


def _dtype(size):
    return {1: "int8", 2: "bfloat16", 4: "float32", 8: "float64"}[size]


def in_place_text(shape, *, dtype="float32", card=None, scratch_bytes=None) -> str:
    """``tileflip plan --in-place``: the passes of an in-place transpose of a contiguous (M, N) or (B, M, N)
    tensor, with each pass's traffic and predicted time on ``card`` (default: the planner's default card)."""
    from tileflip.plan import device as devices
    from tileflip.plan.inplace import plan_in_place

    batch, m, n = (1, *shape) if len(shape) == 2 else shape
    size = plan.element_size(dtype)
    dev, measured = devices.constants(card)
    l2 = int(dev.get("l2_cache_bytes") or 0) or None
    p = plan_in_place(batch, m, n, size, scratch_bytes=scratch_bytes, **({"l2_bytes": l2} if l2 else {}))
    lines = [p.describe().replace("-byte elements", f"-byte elements ({dtype})", 1)]
    if p.passes:
        bw, t0 = dev["copy_bandwidth_bytes_per_s"], dev.get("launch_overhead_s", 0.0)
        times = p.predicted_seconds(bw, t0, l2 or 0)
        lines.append(f"predicted on the {measured} (its copy moves {bw / 1e12:.2f} TB/s, reads plus writes):")
        for k, (q, t) in enumerate(zip(p.passes, times), 1):
            traffic = p.pass_traffic(q)
            scratch = traffic["scratch_write_bytes"] + traffic["scratch_read_bytes"]
            note = f", scratch {scratch / 1e9:.2f} GB more (L2 where a wave fits half of it)" if scratch else ""
            lines.append(f"  {k}. {(traffic['read_bytes'] + traffic['write_bytes']) / 1e9:.2f} GB read + written"
                         f"{note}: {t * 1e3:.3f} ms")  # fmt: skip
        copy = 2 * p.nbytes / bw + t0
        lines.append(f"  total {sum(times) * 1e3:.3f} ms, {copy / sum(times):.2f} of a copy of the tensor "
                     f"({copy * 1e3:.3f} ms)")  # fmt: skip
    return "\n".join(lines)
