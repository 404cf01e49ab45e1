"""Device constants per card: ``data/<card>.json``, as ``tileflip bench --suite device`` measures them
(copy bandwidth, SMs, clock, sector rates, launch overhead). The planner's cost models and the analyzer
read them. A card without a file gets the H200's constants, with a warning, once, that names the command
that measures its own. Pure Python, no torch."""

from __future__ import annotations

import json
import math
import re
import warnings
from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"
DEFAULT_CARD = "h200"


def card_of(name: str) -> str:
    """The card's file stem from its device name: ``"NVIDIA H100 80GB HBM3"`` -> ``"h100"``,
    ``"NVIDIA H200"`` -> ``"h200"``; other names without "NVIDIA", lower-cased, their words joined by hyphens
    (``"NVIDIA GeForce RTX 4090"`` -> ``"geforce-rtx-4090"``)."""
    name = name.replace("NVIDIA", "")
    m = re.search(r"\b([A-Z]+\d{2,4}[A-Z]?)\b", name)
    return (m.group(1) if m else "-".join(re.findall(r"[0-9a-zA-Z]+", name))).lower()


def load_device(device=None) -> dict:
    """Device constants: a card's committed file by default (``DEFAULT_CARD``), a path, or a dict used as
    is."""
    if isinstance(device, dict):
        return device
    path = Path(device) if device is not None else DATA / f"{DEFAULT_CARD}.json"
    with open(path, encoding="utf-8") as f:
        try:
            constants = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"device file {str(path)!r} is not JSON ({e})") from None
    if not isinstance(constants, dict):
        raise ValueError(f"device file {str(path)!r} must hold a JSON object of device constants")
    return constants


@lru_cache(maxsize=16)
def _constants(card: str) -> tuple:
    path = DATA / f"{card}.json"
    if path.is_file():
        return load_device(path), card
    warnings.warn(f"tileflip has no device constants for {card!r}: its cost models use the {DEFAULT_CARD}'s "
                  f"(data/{DEFAULT_CARD}.json). `tileflip bench --suite device --constants "
                  f"src/tileflip/data/{card}.json` measures this card's.", stacklevel=3)  # fmt: skip
    return load_device(DATA / f"{DEFAULT_CARD}.json"), DEFAULT_CARD


def constants(card: str | None = None) -> tuple[dict, str]:
    """(constants, the card they were measured on) for ``card`` (a file stem such as ``"h100"``; default
    ``DEFAULT_CARD``)."""
    return _constants(card or DEFAULT_CARD)


def run_efficiency(dev: dict, side: str, nbytes: float) -> float:
    """The DRAM efficiency of ``side`` ("read" or "write") moving runs of ``nbytes`` (whole sectors) that
    share no 128-byte line with another run: the card's measured table (``run_efficiency`` in its file),
    linear in log2 of the length between the lengths measured, the nearest measured beyond them. A file
    without the table (measured before it was) gives 1: runs cost their sectors alone."""
    table = (dev.get("run_efficiency") or {}).get(side)
    if not table:
        return 1.0
    points = sorted((math.log2(int(k)), float(v)) for k, v in table.items())
    x = math.log2(max(nbytes, 1.0))
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]
