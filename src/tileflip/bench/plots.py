"""PNG plots drawn from a ``tileflip bench`` results file (never from live measurements): one bar chart
per dtype of each op's fraction of the same-run copy, written beside the file as ``<suite>-<dtype>.png``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tileflip.bench.cases import PEERS, TILEFLIP_BACKENDS
from tileflip.bench.records import load_records, medians


def draw(path, out_dir=None) -> list[str]:
    """Plots of a results file's transposes or permutes, in ``out_dir`` (default: the file's folder)."""
    records = [r for r in load_records(path) if r.get("op") in ("copy", "transpose", "permute")]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    med = medians(records)
    permutes = any(r["op"] == "permute" for r in records)
    stem = Path(out_dir or Path(path).parent) / Path(path).stem
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
    written = []
    for dtype in sorted({d for _, d, _ in med}):
        shapes = sorted({s for s, d, _ in med if d == dtype}, key=lambda s: -_numel(s))
        backends = [b for b in [*TILEFLIP_BACKENDS, *PEERS] if any(k[1] == dtype and k[2] == b for k in med)]
        fig, ax = plt.subplots(figsize=(max(8, 1.3 * len(shapes)), 4.5))
        width = 0.8 / max(len(backends), 1)
        for i, b in enumerate(backends):
            values = [med.get((s, dtype, b), (0, 0, 0))[2] * 100 for s in shapes]
            ax.bar([j + i * width for j in range(len(shapes))], values, width, label=b)
        ax.axhline(100, color="black", lw=0.8, ls="--")
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(shapes))], [_label(s) for s in shapes],
                      rotation=30, ha="right", fontsize=7 if permutes else None)  # fmt: skip
        ax.set_ylabel("% of same-run device copy")
        gpu = records[0]["gpu"]
        what = "N-D permute" if permutes else "2-D transpose"
        ax.set_title(f"{what}, {dtype}, {gpu} (median of rounds; copy = 100%)")
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        out = f"{stem}-{dtype}.png"
        fig.savefig(out, dpi=110)
        plt.close(fig)
        written.append(out)
    return written


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
