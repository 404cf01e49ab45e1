"""The ``tileflip`` command: demo, plan, analyze, check, bench.

Each command's options are parsed in its own module here (``tileflip.cli.<command>``), with the parsers
of ``tileflip.cli.parse``; nothing else in the package imports this one.
"""

from __future__ import annotations

import importlib
import os
import sys


def use_interpreter_without_gpu() -> str:
    """Turn on Triton's interpreter when there is no GPU; must run before tileflip's kernels are imported."""
    import torch

    if torch.cuda.is_available():
        return "cuda"
    os.environ.setdefault("TRITON_INTERPRET", "1")
    return "cpu"


# command -> what it does, one line each (``tileflip --help``)
COMMANDS = {
    "demo": "walk a 31x65 transpose tile by tile, then transpose awkward cases exactly (no GPU needed)",
    "plan": "print the launch plan of a transpose or a permute: grid, tiles, masks, kernel",
    "analyze": "model a transpose kernel's memory accesses and predict its fraction of copy bandwidth",
    "check": "run anyone's transpose kernel through adversarial cases and name what is wrong",
    "bench": "time tileflip against a same-run device copy and its peers on a GPU",
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: tileflip COMMAND [options]   (tileflip COMMAND --help for each command's options)", "",
             "commands:"] + [f"  {name:<{width}}  {what}" for name, what in COMMANDS.items()]  # fmt: skip
    options = ["", "options:", "  -h, --help  show this message", "  --version   show tileflip's version"]
    return "\n".join(lines + options)


def _run(command: str, argv: list[str]) -> int:
    return importlib.import_module(f"tileflip.cli.{command}").main(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--version":
        from tileflip import __version__

        print(f"tileflip {__version__}")
        return 0
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        known = ", ".join(COMMANDS)
        print(f"tileflip: error: unknown command {argv[0]!r}; the commands are {known}\n", file=sys.stderr)
        print(_usage(), file=sys.stderr)
        return 2
    try:
        return _run(argv[0], argv[1:]) or 0
    except BrokenPipeError:  # the reader went away (`tileflip plan ... | head`): stop quietly, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (so that the exit's flush fails no more)
        return 141  # 128 + SIGPIPE, a shell's status for a writer its pipe closed on
    except (ValueError, TypeError, OverflowError, OSError) as error:  # a refused argument: its message, not a trace
        if os.environ.get("TILEFLIP_TRACEBACK"):
            raise
        print(f"tileflip {argv[0]}: error: {error} (TILEFLIP_TRACEBACK=1 shows where)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
