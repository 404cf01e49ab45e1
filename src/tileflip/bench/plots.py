"""PNG plots drawn from a ``tileflip bench`` results file (never from live measurements)."""

from __future__ import annotations

import json
from pathlib import Path

from tileflip.bench.suites import PEERS, TILEFLIP_BACKENDS, medians


def _records(path: str) -> list[dict]:
    """The records of a ``tileflip bench`` results file, or a ValueError naming the file."""
    try:
        records = json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"--plot {path!r} is not JSON ({e})") from None
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise ValueError(f"--plot {path!r} is not a results file of tileflip bench (a JSON list of records)")
    return records


def draw(path: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [r for r in _records(path) if r.get("op") in ("copy", "transpose", "permute")]
    med = medians(records)
    permutes = any(r["op"] == "permute" for r in records)
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
        out = str(Path(path).with_suffix("")) + f"-{dtype}.png"
        fig.savefig(out, dpi=110)
        plt.close(fig)
        written.append(out)
    return written


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
