"""``tileflip analyze``."""

from __future__ import annotations


def main(argv: list[str]) -> int:
    from tileflip.analyze.model import cli

    return cli(argv)
