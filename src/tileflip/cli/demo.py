"""``tileflip demo``: the tile picture and exact transposes of awkward cases."""

from __future__ import annotations

import argparse

from tileflip.cli import use_interpreter_without_gpu


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="tileflip demo", description="Walk a 31x65 transpose tile by tile, then transpose awkward cases exactly."
    )
    p.add_argument("--png", default="tileflip-demo-tiles.png", help="where to save the tile-grid picture")
    p.add_argument("--quick", action="store_true", help="fewer dtypes")
    args = p.parse_args(argv)
    device = use_interpreter_without_gpu()
    from tileflip import demo

    return demo.run(device, png=args.png, quick=args.quick)
