"""``tileflip demo``: the tile picture and exact transposes of awkward cases."""

from __future__ import annotations

import argparse

from tileflip.cli import parse, use_interpreter_without_gpu


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="tileflip demo",
        description="Walk a 31x65 transpose tile by tile, then check tileflip.transpose bit for bit on awkward "
        "inputs (float32, bfloat16, int8).",
    )
    p.add_argument("--png", type=parse.png("tiles.png"), default="tileflip-demo-tiles.png",
                   help="where to save the tile-grid picture")
    p.add_argument("--all-dtypes", action="store_true", help="also float8_e4m3fn, float64, complex64 and bool (slower)")
    args = p.parse_args(argv)
    device = use_interpreter_without_gpu()
    from tileflip import demo

    return demo.run(device, png=args.png, all_dtypes=args.all_dtypes)
