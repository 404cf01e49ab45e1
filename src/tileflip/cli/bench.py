"""``tileflip bench``."""

from __future__ import annotations


def main(argv: list[str]) -> int:
    from tileflip.bench.suites import cli

    return cli(argv)
