"""``tileflip check``."""

from __future__ import annotations


def main(argv: list[str]) -> int:
    from tileflip.check.suite import cli

    return cli(argv)
