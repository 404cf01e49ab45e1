"""PNG pictures of the block model and the memory model (matplotlib, imported only when drawing).

* ``draw_tile_grid``: the program grid over a matrix, masked slots shaded, programs labelled
  (also used by ``tileflip demo``);
* ``draw_warp_access``: one warp's addresses laid over the 32-byte sectors and 128-byte lines
  they touch, one row per line;
* ``draw_bank_map``: the bank of every element of a shared-memory tile, with and without padding,
  and the lanes of a column read;
* ``draw_report``: the read and write warps (and the shared-memory access) of analyzer reports.

Figures are built on matplotlib's Agg canvas directly, so no pyplot state or display is involved.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tileflip.analyze.access import BANK_WIDTH, BANKS, LINE, SECTOR, WarpAccess, bank_conflicts
from tileflip.plan import tile_masks, transpose_grid

_MASKED = "#d9d9d9"
_VALID = "#cfe3f6"


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path) -> str:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", bbox_inches="tight")
    return str(path)


# ---------------------------------------------------------------------------------------------------
# Tile grid
# ---------------------------------------------------------------------------------------------------


def draw_tile_grid(M: int, N: int, BM: int, BN: int, path, *, title=None) -> str:
    """Draw a transpose's BM x BN program grid: the M x N input on the left, the N x M output on the right,
    each program's tile in its own colour on both (masked slots hatched grey), and an arrow from where a tile
    is read to where it lands, transposed. Returns the path."""
    from matplotlib import colormaps
    from matplotlib.patches import ConnectionPatch, Rectangle

    grid = transpose_grid(M, N, BM, BN)
    rows, cols = grid.grid_m * BM, grid.grid_n * BN
    scale = 5.5 / max(rows, cols, 1)
    width = max(7.0, (cols + rows) * scale + 3.0)
    fig = _figure(width, max(3.8, max(rows, cols) * scale + 1.8))
    ax_in, ax_out = fig.subplots(1, 2, gridspec_kw={"width_ratios": [max(cols, 1), max(rows, 1)]})
    label = grid.programs <= 24
    palette = colormaps["tab10"]
    for pid in range(grid.programs):
        pid_m, pid_n = grid.tile_of(pid)
        masks = tile_masks(M, N, BM, BN, pid_m, pid_n)
        colour = palette(pid % 10) if label else _VALID
        (r0, r1), (c0, c1) = masks.in_rows, masks.in_cols
        y0, x0 = pid_m * BM, pid_n * BN
        # the input tile (rows of x, columns of x) and where it lands in the output (columns become rows)
        for ax, (tx, ty, tw, th), (vx, vy, vw, vh) in (
            (ax_in, (x0, y0, BN, BM), (c0, r0, c1 - c0, r1 - r0)),
            (ax_out, (y0, x0, BM, BN), (r0, c0, r1 - r0, c1 - c0)),
        ):
            ax.add_patch(Rectangle((tx, ty), tw, th, facecolor=_MASKED, hatch="//", edgecolor="#9a9a9a", lw=0))
            ax.add_patch(Rectangle((vx, vy), vw, vh, facecolor="white", edgecolor="none"))  # no hatch under it
            ax.add_patch(Rectangle((vx, vy), vw, vh, facecolor=colour, alpha=0.55, edgecolor="none"))
            ax.add_patch(Rectangle((tx, ty), tw, th, fill=False, edgecolor="#1f4e79", lw=1.2))
            if label:
                ax.text(tx + tw / 2, ty + th / 2, f"pid {pid}\n{masks.valid} valid\n{masks.masked} masked",
                        ha="center", va="center", fontsize=9)  # fmt: skip
        if label and masks.valid:
            # from inside the tile's valid part to inside the part it lands on
            start = (c0 + (c1 - c0) * 0.8, r0 + (r1 - r0) * 0.8)
            end = (r0 + (r1 - r0) * 0.2, c0 + (c1 - c0) * 0.8)
            arrow = ConnectionPatch(start, end, "data", "data",
                                    axesA=ax_in, axesB=ax_out, arrowstyle="->", color=colour, lw=1.8)  # fmt: skip
            fig.add_artist(arrow)
    for ax, w, h, name in ((ax_in, N, M, f"input x: {M}x{N}"), (ax_out, M, N, f"output x.T: {N}x{M}")):
        ax.add_patch(Rectangle((0, 0), w, h, fill=False, edgecolor="#c00000", lw=2))
        ax.set_aspect("equal")
        ax.set_title(name, fontsize=10)
    ax_in.set_xlim(0, max(cols, 1))
    ax_in.set_ylim(max(rows, 1), 0)
    ax_out.set_xlim(0, max(rows, 1))
    ax_out.set_ylim(max(cols, 1), 0)
    ax_in.set_xlabel("column j of x")
    ax_in.set_ylabel("row i of x")
    ax_out.set_xlabel("column i of x.T")
    ax_out.set_ylabel("row j of x.T")
    masked = grid.programs * BM * BN - M * N
    fig.suptitle(title or f"{M}x{N} in {BM}x{BN} tiles: {grid.programs} programs, {masked} masked slots (hatched); "
                 "each tile lands transposed", fontsize=11)  # fmt: skip
    return _save(fig, path)


# ---------------------------------------------------------------------------------------------------
# Warp accesses
# ---------------------------------------------------------------------------------------------------


def _as_access(access) -> WarpAccess:
    if isinstance(access, WarpAccess):
        return access
    return WarpAccess(access["name"], access["space"], access["op"], access["width"], tuple(access["addresses"]))


def _plot_warp_access(ax, access: WarpAccess, title=None) -> None:
    """One row per 128-byte line touched; sectors as quarters, each lane's bytes as a numbered box."""
    from matplotlib import colormaps
    from matplotlib.patches import Rectangle

    lines = access.lines
    if not lines:
        ax.text(0.5, 0.5, "no active lane", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    row_of = {line: i for i, line in enumerate(lines)}
    touched = set(access.sectors)
    lane_color = colormaps["viridis"]
    for line, y in row_of.items():
        for q in range(LINE // SECTOR):
            sector = line * (LINE // SECTOR) + q
            ax.add_patch(Rectangle((q * SECTOR, y), SECTOR, 0.9, facecolor="#fde7c8" if sector in touched else "white",
                                   edgecolor="#7f7f7f", lw=0.8))
    for lane, addr in enumerate(access.addresses):
        if addr is None:
            continue
        y = row_of[addr // LINE]
        x = addr % LINE
        ax.add_patch(Rectangle((x, y + 0.15), access.width, 0.6, facecolor=lane_color(lane / 31), edgecolor="black",
                               lw=0.3))
        ax.text(x + access.width / 2, y + 0.45, str(lane), ha="center", va="center", fontsize=5,
                color="white" if lane < 20 else "black")
    ax.set_xlim(0, LINE)
    ax.set_ylim(len(lines), 0)
    ax.set_xticks(range(0, LINE + 1, SECTOR))
    ax.set_xlabel("byte within the 128-byte line (sectors of 32 bytes)")
    base = lines[0] * LINE
    ticks = range(len(lines)) if len(lines) <= 16 else range(0, len(lines), max(1, len(lines) // 16))
    ax.set_yticks([t + 0.45 for t in ticks])
    ax.set_yticklabels([f"+{lines[t] * LINE - base:,} B" for t in ticks], fontsize=6)
    ax.set_title(title or (
        f"{access.name} ({access.op}, {access.width} B/lane): {len(access.active)} lanes, "
        f"{len(access.sectors)} sectors, {len(lines)} lines, {access.efficiency:.1%} useful"), fontsize=8)


def _plot_shared_access(ax, access: WarpAccess, title=None) -> None:
    """Lanes per bank: one column per bank, a dot per distinct word a lane asks of it."""
    info = bank_conflicts(access.addresses, access.width)
    words_by_bank: dict[int, list] = {}
    for lane, addr in enumerate(access.addresses):
        if addr is None:
            continue
        word = addr // BANK_WIDTH
        words_by_bank.setdefault(word % BANKS, [])
        if word not in [w for w, _ in words_by_bank[word % BANKS]]:
            words_by_bank[word % BANKS].append((word, lane))
    for bank, words in words_by_bank.items():
        for depth, (_, lane) in enumerate(words):
            ax.scatter(bank, depth, s=30, color="#c00000" if len(words) > 1 else "#1f4e79")
            ax.text(bank, depth + 0.35, str(lane), ha="center", fontsize=5)
    ax.set_xlim(-1, BANKS)
    ax.set_ylim(max(info["ways"], 1) + 0.5, -0.7)
    ax.set_xlabel("bank")
    ax.set_ylabel("distinct words (wavefront)")
    ax.set_title(title or f"{access.name}: {info['ways']}-way conflict, {info['wavefronts']} wavefronts", fontsize=8)


def draw_warp_access(access, path=None, *, ax=None, title=None):
    """Draw one warp access (a WarpAccess or its to_dict()); to ``path`` (returns it) or into ``ax``."""
    access = _as_access(access)
    fig = None
    if ax is None:
        height = 1.2 + 0.28 * max(1, len(access.lines)) if access.space == "global" else 3.0
        fig = _figure(7.5, height)
        ax = fig.add_subplot(1, 1, 1)
    if access.space == "global":
        _plot_warp_access(ax, access, title)
    else:
        _plot_shared_access(ax, access, title)
    return _save(fig, path) if fig is not None and path is not None else ax


# ---------------------------------------------------------------------------------------------------
# Shared-memory banks
# ---------------------------------------------------------------------------------------------------


def _tile_banks(tile: int, width: int, itemsize: int) -> np.ndarray:
    addr = (np.arange(tile)[:, None] * width + np.arange(width)[None, :]) * itemsize
    return (addr // BANK_WIDTH) % BANKS


def draw_bank_map(path, *, tile: int = 32, itemsize: int = 4, pads=(0, 1), column: int = 0, title=None) -> str:
    """Bank of every element of a tile x (tile + pad) shared tile, one panel per pad.

    The outlined cells are the 32 lanes of a warp reading ``column`` (the transposed read of the
    tiled kernel, ``tile[lane][column]``); each panel's title gives that access's conflict degree.
    """
    from matplotlib import colormaps
    from matplotlib.patches import Rectangle

    fig = _figure(5.2 * len(pads), 5.6)
    for i, pad in enumerate(pads):
        ax = fig.add_subplot(1, len(pads), i + 1)
        width = tile + pad
        banks = _tile_banks(tile, width, itemsize).astype(float)
        if pad:
            banks[:, tile:] = np.nan
        ax.imshow(banks, cmap=colormaps["twilight"], vmin=0, vmax=BANKS - 1, interpolation="nearest")
        lanes = [(lane * width + column) * itemsize for lane in range(min(tile, 32))]
        info = bank_conflicts(lanes, itemsize)
        for lane in range(min(tile, 32)):
            ax.add_patch(Rectangle((column - 0.5, lane - 0.5), 1, 1, fill=False, edgecolor="red", lw=1.0))
        if tile <= 40:
            for r in range(tile):
                for c in range(width):
                    if not np.isnan(banks[r, c]):
                        ax.text(c, r, str(int(banks[r, c])), ha="center", va="center", fontsize=3.2, color="white")
        ax.set_title(f"{tile}x{width} tile, {itemsize}-byte elements: column read {info['ways']}-way", fontsize=9)
        ax.set_xlabel(f"column (column {tile} is padding, left blank)" if pad else "column")
        ax.set_ylabel("row = lane of the column read")
    if title:
        fig.suptitle(title, fontsize=10)
    return _save(fig, path)


# ---------------------------------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------------------------------


def draw_report(reports, path) -> str:
    """The example read and write warp of each report, and its shared-memory load when it has one."""
    if not isinstance(reports, (list, tuple)):
        reports = [reports]
    panels = []
    for r in reports:
        names = [a.name for a in r.accesses]
        chosen = [n for n in ("global_load", "global_store", "smem_load") if n in names]
        panels.append((r, [r.access(n) for n in chosen]))
    width = max(len(p[1]) for p in panels)
    heights = [max(2.4, 0.25 * max((len(a.example.lines) for a in acc if a.space == "global"), default=4) + 1.2)
               for _, acc in panels]
    fig = _figure(6.5 * width, sum(heights) + 0.4 * len(panels))
    fig.set_layout_engine("constrained")
    gs = fig.add_gridspec(len(panels), width, height_ratios=heights)
    for row, (r, accesses) in enumerate(panels):
        for col, a in enumerate(accesses):
            ax = fig.add_subplot(gs[row, col])
            prefix = f"{r.kernel} {r.shape[0]}x{r.shape[1]} {r.dtype}: "
            ex = a.example
            if a.space == "global":
                title = (f"{prefix}{a.name}, warp 0: {len(ex.sectors)} sectors, {len(ex.lines)} lines, "
                         f"{ex.efficiency:.1%} useful")
            else:
                title = f"{prefix}{a.name}, warp 0: {bank_conflicts(ex.addresses, ex.width)['ways']}-way"
                if r.kernel == "triton":
                    title += " (assumed: Triton swizzles the conversion)"
            draw_warp_access(ex, ax=ax, title=title)
    return _save(fig, path)
