"""PNG plots drawn from a ``tileflip bench`` results file (never from live measurements)."""

from __future__ import annotations

import json
from pathlib import Path

from tileflip.bench import PEERS, TILEFLIP_BACKENDS, medians


def draw(path: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [r for r in json.loads(Path(path).read_text()) if r.get("op") in ("copy", "transpose")]
    med = medians(records)
    written = []
    for dtype in sorted({d for _, d, _ in med}):
        shapes = sorted({s for s, d, _ in med if d == dtype}, key=lambda s: -s[0] * s[1])
        backends = [b for b in [*TILEFLIP_BACKENDS, *PEERS] if any(k[1] == dtype and k[2] == b for k in med)]
        fig, ax = plt.subplots(figsize=(max(8, 1.3 * len(shapes)), 4.5))
        width = 0.8 / max(len(backends), 1)
        for i, b in enumerate(backends):
            values = [med.get((s, dtype, b), (0, 0, 0))[2] * 100 for s in shapes]
            ax.bar([j + i * width for j in range(len(shapes))], values, width, label=b)
        ax.axhline(100, color="black", lw=0.8, ls="--")
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(shapes))], ["x".join(map(str, s)) for s in shapes],
                      rotation=30, ha="right")  # fmt: skip
        ax.set_ylabel("% of same-run device copy")
        gpu = records[0]["gpu"]
        ax.set_title(f"2-D transpose, {dtype}, {gpu} (median of rounds; copy = 100%)")
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        out = str(Path(path).with_suffix("")) + f"-{dtype}.png"
        fig.savefig(out, dpi=110)
        plt.close(fig)
        written.append(out)
    return written
