"""PNG plots drawn from a ``tileflip bench`` results file (never from live measurements): one bar chart
per dtype of each op's fraction of the same-run copy, written beside the file as ``<suite>-<dtype>.png``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tileflip.bench.cases import PEERS, TILEFLIP_BACKENDS
from tileflip.bench.records import load_records, medians

# One fixed colour per backend, distinct across every tileflip backend and peer, so that a backend keeps
# its colour from plot to plot and no two share one (matplotlib's default cycle repeats after 10).
BACKEND_COLORS = {
    "auto": "#1f77b4",
    "triton": "#2ca02c",
    "triton-gather": "#98df8a",
    "cuda-naive": "#ff9896",
    "cuda-tiled": "#d62728",
    "cuda-tiled-nopad": "#ff7f0e",
    "cuda-vec": "#9467bd",
    "torch-contiguous": "#7f7f7f",
    "torch-copy": "#c7c7c7",
    "torch-compile": "#8c564b",
    "cupy": "#e377c2",
    "xla": "#17becf",
}


def draw(path, out_dir=None) -> list[str]:
    """Plots of a results file's transposes or permutes, in ``out_dir`` (default: the file's folder)."""
    records = [r for r in load_records(path) if r.get("op") in ("copy", "transpose", "permute")]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stem = Path(out_dir or Path(path).parent) / Path(path).stem
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
    written = []
    for dtype in sorted({k[1] for k in medians(records)}):
        fig = figure(records, dtype)
        out = f"{stem}-{dtype}.png"
        fig.savefig(out, dpi=110)
        plt.close(fig)
        written.append(out)
    return written


def figure(records: list[dict], dtype: str):
    """The bar chart of one dtype's records: each backend's fraction of copy per case, in its own colour,
    with the legend outside the axes to the right so that it covers no bar."""
    import matplotlib.pyplot as plt

    med = {k: v for k, v in medians(records).items() if k[1] == dtype}
    permutes = any(r["op"] == "permute" for r in records)
    shapes = sorted({s for s, _, _ in med}, key=lambda s: -_numel(s))
    backends = [b for b in [*TILEFLIP_BACKENDS, *PEERS] if any(k[2] == b for k in med)]
    # constrained layout makes room for a legend placed "outside"; the figure widens by the legend's column
    fig, ax = plt.subplots(figsize=(max(8, 1.3 * len(shapes)) + 1.8, 4.5), layout="constrained")
    width = 0.8 / max(len(backends), 1)
    for i, b in enumerate(backends):
        values = [med.get((s, dtype, b), (0, 0, 0))[2] * 100 for s in shapes]
        ax.bar([j + i * width for j in range(len(shapes))], values, width, label=b, color=BACKEND_COLORS[b])
    ax.axhline(100, color="black", lw=0.8, ls="--")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(shapes))], [_label(s) for s in shapes],
                  rotation=30, ha="right", fontsize=7 if permutes else None)  # fmt: skip
    ax.set_ylabel("% of same-run device copy")
    what = "N-D permute" if permutes else "2-D transpose"
    ax.set_title(f"{what}, {dtype}, {records[0]['gpu']} (median of rounds; copy = 100%)")
    if backends:
        fig.legend(loc="outside right upper", fontsize=7, title="backend", title_fontsize=8)
    return fig


def draw_if_possible(path, log=print) -> list[str]:
    """``draw`` where matplotlib is installed; else a note and nothing (``tileflip bench --plot`` later)."""
    if importlib.util.find_spec("matplotlib") is None:
        log(f"plots: matplotlib is not installed; draw them later with tileflip bench --plot {path}")
        return []
    return draw(path)


def _numel(key) -> int:
    """Elements of a case key: a 2-D shape, or a permute's (shape, perm)."""
    shape = key[0] if isinstance(key[0], tuple) else key
    n = 1
    for v in shape:
        n *= v
    return n


def _label(key) -> str:
    if isinstance(key[0], tuple):  # a permute: shape and dims
        return "x".join(map(str, key[0])) + " (" + ",".join(map(str, key[1])) + ")"
    return "x".join(map(str, key))
