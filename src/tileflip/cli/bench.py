"""``tileflip bench``: time tileflip on the GPU against a same-run copy and its peers; write results files.

The shape suites (``2d``, ``2d-extra``, ``square``, ``permute``, ``permute-random``, ``permute-wide``)
and ``host`` share one set of options; ``cast``, ``quantize``, ``tune``, ``device``, ``distributed``,
``stability``, ``models`` and ``in-place`` have their own (``tileflip bench --suite cast --help``). Results go
to ``<out>/<device>/<suite>.json``.
"""

from __future__ import annotations

import argparse
import functools
import shlex
import sys

from tileflip.cli import parse

SHAPE_SUITES = ("2d", "2d-extra", "square", "permute", "permute-random", "permute-wide")
# suites with their own options
OWN_OPTIONS = ("cast", "quantize", "tune", "device", "distributed", "stability", "models", "in-place")
OUT_HELP = "results root: files go to OUT/<device>/<suite>.json (default benchmarks/results)"
DEFAULT_OUT = "benchmarks/results"


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _command(argv: list[str]) -> str:
    return shlex.join(["tileflip", "bench", *argv])


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _part(text: str) -> str:
    from tileflip.bench.cases import parse_part

    try:
        parse_part(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _backends(text: str) -> list[str]:
    from tileflip.bench.cases import PEERS, TILEFLIP_BACKENDS
    from tileflip.bench.peers import PERMUTE_STRATEGIES

    known = list(dict.fromkeys([*TILEFLIP_BACKENDS, *PERMUTE_STRATEGIES, *PEERS]))
    names = [b for b in text.split(",") if b]
    unknown = [b for b in names if b not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated names from {known}, got {text!r}")
    return names


def _shapes(text: str) -> list[tuple[int, int]]:
    return [parse.pair(s) for s in text.split(",") if s]


def _no_gpu(what: str = "tileflip bench") -> bool:
    import torch

    if torch.cuda.is_available():
        return False
    print(f"{what} needs a CUDA GPU (use --plot FILE.json to draw committed results)", file=sys.stderr)
    return True


def _own_suite(argv: list[str]) -> tuple[str | None, list[str]]:
    """A suite with its own options, and argv without its ``--suite`` (the option may come anywhere)."""
    for i, arg in enumerate(argv):
        if arg.startswith("--suite="):
            suite, rest = arg.split("=", 1)[1], argv[:i] + argv[i + 1 :]
        elif arg == "--suite" and i + 1 < len(argv):
            suite, rest = argv[i + 1], argv[:i] + argv[i + 2 :]
        else:
            continue
        return (suite, rest) if suite in OWN_OPTIONS else (None, argv)
    return None, argv


def main(argv: list[str]) -> int:
    suite, rest = _own_suite(argv)
    if suite is not None:
        return {"cast": _cast, "quantize": _quantize, "tune": _tune, "device": _device, "distributed": _distributed,
                "stability": _stability, "models": _models, "in-place": _in_place}[suite](rest, argv)  # fmt: skip
    p = argparse.ArgumentParser(prog="tileflip bench", description="Time tileflip on the GPU against a same-run "
                                "device copy and its peers, and write the results files.")  # fmt: skip
    p.add_argument("--suite", default="2d", choices=[*SHAPE_SUITES, "host", *OWN_OPTIONS],
                   help="a shape suite (permute-wide: random permutes in int8, bf16 and fp32 and layouts of "
                        "real models; split it with --part); 'host' for host time per call of small cases; cast, "
                        "quantize, tune, device, distributed, stability, models and in-place take their own options "
                        "(tileflip bench "
                        "--suite cast --help)")  # fmt: skip
    p.add_argument("--part", type=_part, default=None,
                   help="K/N: run every N-th case from the K-th, merged into the suite's results file")
    p.add_argument("--quick", action="store_true",
                   help="shorter timing: 10 warm-up calls and 40 timed repetitions per figure (else 25 and 100)")
    p.add_argument("--rounds", type=_positive, default=3, help="interleaved rounds per case (default 3)")
    p.add_argument("--backends", type=_backends, default=None,
                   help="comma-separated (default: every backend and peer; permute suites: auto and the peers). "
                        "Permute suites time auto, triton, cuda-staged, cuda-realign, cuda-thin, cuda-split and "
                        "cuda-shift: more than one without peers is the strategy sweep, e.g. --suite permute-wide "
                        "--backends auto,triton,cuda-staged,cuda-realign,cuda-thin,cuda-split,cuda-shift")  # fmt: skip
    p.add_argument("--out", default=None, help=OUT_HELP + "; with --plot, the folder for the PNGs "
                   "(default: beside the file)")  # fmt: skip
    p.add_argument("--plot", metavar="FILE.json", help="draw PNG plots from a results file and exit")
    args = p.parse_args(argv)
    if args.plot:
        from tileflip.bench import plots

        for path in plots.draw(args.plot, args.out):
            print(path)
        return 0
    if args.part and args.suite not in SHAPE_SUITES:
        p.error(f"--part is for the shape suites {list(SHAPE_SUITES)}, not {args.suite!r}")
    if _no_gpu():
        return 2
    out = args.out or DEFAULT_OUT
    if args.suite == "host":
        from tileflip.bench import host

        written = host.run(args.rounds, out, _command(argv), _log)
    else:
        from tileflip.bench import suites

        written = suites.run(args.suite, part=args.part, quick=args.quick, rounds=args.rounds,
                             backends=args.backends, out_dir=out, command=_command(argv), log=_log)  # fmt: skip
    for path in written:
        print(f"wrote {path}")
    return 0


def _cast(argv: list[str], whole: list[str]) -> int:
    from tileflip.bench import cast

    p = argparse.ArgumentParser(prog="tileflip bench --suite cast",
                                description="The fused fp8 cast-transpose against eager torch, torch.compile "
                                            "and a same-run copy.")  # fmt: skip
    p.add_argument("--shapes", type=_shapes, default=cast.SHAPES, help="comma-separated MxN of the bf16 input")
    p.add_argument("--rounds", type=_positive, default=3, help="interleaved rounds per shape (default 3)")
    p.add_argument("--quick", action="store_true",
                   help="shorter timing: 10 warm-up calls and 40 timed repetitions per figure (else 25 and 100)")
    p.add_argument("--tiles", default="",
                   help="extra tile configs to time, comma-separated BMxBNwW[gG][rR] (e.g. 64x128w8, 128x128w8g8, "
                        "128x128w8g4r80: bands of 4 tile rows, at most 80 registers per thread; suffixes -i64 "
                        "for int64 offsets, -atomic for the atomic amax, else partials and a reduction kernel)")
    p.add_argument("--out", default=DEFAULT_OUT, help=OUT_HELP)
    args = p.parse_args(argv)
    cast.parse_tiles(args.tiles)  # refuse a bad spec before any GPU work
    if _no_gpu("the cast_transpose benchmark"):
        return 2
    written = cast.run(args.shapes, rounds=args.rounds, quick=args.quick, tiles=args.tiles, out_dir=args.out,
                       command=_command(whole), log=_log)  # fmt: skip
    for path in written:
        print(f"wrote {path}")
    return 0


def _quantize(argv: list[str], whole: list[str]) -> int:
    from tileflip.bench import cases, quantize

    p = argparse.ArgumentParser(prog="tileflip bench --suite quantize",
                                description="Block-scaled quantization (each recipe; row-wise, column-wise and "
                                            "both) against torchao's kernels, torch.compile and a same-run "
                                            "copy.")  # fmt: skip
    p.add_argument("--shapes", type=_shapes, default=quantize.SHAPES, help="comma-separated MxN of the bf16 input")
    p.add_argument("--part", type=_part, default=None,
                   help="K/N: measure every N-th shape from the K-th, merged into the suite's results file")
    p.add_argument("--rounds", type=_positive, default=3, help="interleaved rounds per case (default 3)")
    p.add_argument("--quick", action="store_true",
                   help="shorter timing: 10 warm-up calls and 40 timed repetitions per figure (else 25 and 100)")
    p.add_argument("--out", default=DEFAULT_OUT, help=OUT_HELP)
    args = p.parse_args(argv)
    if args.part and cases.parse_part(args.part)[0] > len(args.shapes):
        p.error(f"argument --part: {args.part} selects none of the {len(args.shapes)} shapes")
    if _no_gpu("the quantize benchmark"):
        return 2
    written = quantize.run(args.shapes, part=args.part, rounds=args.rounds, quick=args.quick, out_dir=args.out,
                           command=_command(whole), log=_log)  # fmt: skip
    for path in written:
        print(f"wrote {path}")
    return 0


def _tune(argv: list[str], whole: list[str]) -> int:
    from tileflip import tuning

    p = argparse.ArgumentParser(prog="tileflip bench --suite tune",
                                description="Sweep the Triton tile configurations of the 2-D transpose and "
                                            "choose the tuning table.")  # fmt: skip
    p.add_argument("--sizes", default="1,2,4,8", help="element sizes to sweep, comma-separated (default 1,2,4,8)")
    p.add_argument("--classes", default="", help="comma-separated shape classes to sweep (default: all)")
    p.add_argument("--write", action="store_true", help="also merge the chosen tiles into --table")
    p.add_argument("--table", default=str(tuning.TABLE_FILE), help="the committed table to update")
    p.add_argument("--auto-from", metavar="BENCH.json",
                   help="instead of sweeping: derive the auto table from a 2-d suite's results file into --table")
    p.add_argument("--out", default=DEFAULT_OUT, help=OUT_HELP)
    args = p.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        sizes = []
    if not sizes or set(sizes) - {1, 2, 4, 8}:
        p.error(f"--sizes must be comma-separated element sizes from 1,2,4,8, got {args.sizes!r}")
    from tileflip.bench import tune

    classes = [c for c in args.classes.split(",") if c]
    unknown = [c for c in classes if c not in tune.REPRESENTATIVE]
    if unknown:
        p.error(f"--classes: unknown class(es) {unknown}; known: {sorted(tune.REPRESENTATIVE)}")
    if args.auto_from:
        tune.run_auto_from(args.auto_from, table_file=args.table, command=_command(whole))
        return 0
    if _no_gpu("the tuning sweep"):
        return 2
    written = tune.run(sizes=sizes, classes=classes, out_dir=args.out, command=_command(whole),
                       table_file=args.table, write=args.write, log=_log)  # fmt: skip
    for path in written:
        print(f"wrote {path}")
    return 0


def _device(argv: list[str], whole: list[str]) -> int:
    p = argparse.ArgumentParser(prog="tileflip bench --suite device",
                                description="Measure the analyzer's device constants on this GPU and write "
                                            "them as JSON.")  # fmt: skip
    p.add_argument("--constants", default=None,
                   help="JSON to write (default: tileflip's data/h200.json, which the analyzer reads)")
    p.add_argument("--reps", type=_positive, default=30, help="timed repetitions per measurement (median kept)")
    p.add_argument("--print", action="store_true", help="print the JSON, not only the summary")
    p.add_argument("--dry-run", action="store_true", help="measure and print, write nothing")
    args = p.parse_args(argv)
    if _no_gpu("tileflip bench --suite device"):
        return 2
    from tileflip.bench import device

    return device.run(args.constants or device.DEFAULT_OUT, reps=args.reps, print_json=args.print,
                      dry_run=args.dry_run)  # fmt: skip


def _distributed(argv: list[str], whole: list[str]) -> int:
    import os

    from tileflip.bench import distributed

    p = argparse.ArgumentParser(prog="tileflip bench --suite distributed",
                                description="tileflip.distributed against the bare all-to-all and the "
                                            "DeepSpeed-style sequence, one process per GPU (NCCL).")  # fmt: skip
    p.add_argument("--gpus", type=_positive, default=None,
                   help="processes to start (default: every visible GPU; 2 with --device cpu)")
    p.add_argument("--rounds", type=_positive, default=3, help="interleaved rounds per case (default 3)")
    p.add_argument("--reps", type=_positive, default=20, help="timed calls per figure (default 20)")
    p.add_argument("--scale", type=_positive, default=1, help="divide the sizes by this (a quick trial)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cpu: a smoke run on gloo with Triton's interpreter, not a measurement")
    p.add_argument("--out", default=DEFAULT_OUT, help=OUT_HELP)
    args = p.parse_args(argv)
    if distributed.under_launcher():
        return distributed.run(out_dir=args.out, rounds=args.rounds, reps=args.reps, scale=args.scale,
                               device=args.device, command=_command(whole),
                               log_all=functools.partial(print, flush=True))  # fmt: skip
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # inherited by the ranks before their kernels load
        nproc = args.gpus or 2
    else:
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        nproc = args.gpus or count
        if count < 2 or nproc > count:
            print(f"tileflip bench --suite distributed needs {max(2, nproc)} CUDA GPUs, found {count} "
                  "(--device cpu: a smoke run on gloo)", file=sys.stderr)  # fmt: skip
            return 2
    return distributed.launch(whole, nproc)


def _stability(argv: list[str], whole: list[str]) -> int:
    from tileflip.bench import stability

    p = argparse.ArgumentParser(prog="tileflip bench --suite stability",
                                description="Measure each stability case's permute (do_bench median, out=) "
                                            "several times at other input and output addresses (2 MiB steps "
                                            "and 16-byte-aligned offsets within 2 MiB) and in other case "
                                            "orders; report each case's spread, max/min of its times "
                                            f"(stable: <= {stability.LIMIT}).")  # fmt: skip
    p.add_argument("--measurements", type=_positive, default=stability.MEASUREMENTS,
                   help=f"measurements per case (default {stability.MEASUREMENTS})")
    p.add_argument("--seed", type=int, default=stability.SEED,
                   help=f"seed of the offsets and orders (default {stability.SEED})")
    p.add_argument("--out", default=DEFAULT_OUT, help=OUT_HELP)
    args = p.parse_args(argv)
    if _no_gpu("tileflip bench --suite stability"):
        return 2
    written = stability.run(measurements=args.measurements, seed=args.seed, out_dir=args.out,
                            command=_command(whole), log=_log)  # fmt: skip
    for path in written:
        print(f"wrote {path}")
    return 0


def _models(argv: list[str], whole: list[str]) -> int:
    p = argparse.ArgumentParser(prog="tileflip bench --suite models",
                                description="Real models (torchvision, transformers, einops; random weights "
                                            "from their configs) in eager mode with tileflip.enable() off and "
                                            "on: bit-identical outputs and gradients, the layout copies' "
                                            "device time (torch.profiler), the step time, and the host time "
                                            "the override adds to a copy_ call.")  # fmt: skip
    p.add_argument("--rounds", type=_positive, default=3, help="interleaved off/on rounds (default 3)")
    p.add_argument("--steps", type=_positive, default=5, help="timed steps per round (default 5)")
    p.add_argument("--out", default=DEFAULT_OUT, help=OUT_HELP)
    args = p.parse_args(argv)
    if _no_gpu("tileflip bench --suite models"):
        return 2
    from tileflip.bench import models

    written = models.run(rounds=args.rounds, steps=args.steps, out_dir=args.out, command=_command(whole), log=_log)
    for path in written:
        print(f"wrote {path}")
    return 0


def _in_place(argv: list[str], whole: list[str]) -> int:
    p = argparse.ArgumentParser(prog="tileflip bench --suite in-place",
                                description="tileflip.transpose_in_place on 256 MiB to 8 GiB matrices (square, "
                                            "rectangular, prime, skinny, batched) against a same-run copy of the "
                                            "same bytes: fraction of copy, each pass's, the scratch and the "
                                            "peak memory added; results checked against the fill formula. Then "
                                            "one matrix of more than half the free memory.")  # fmt: skip
    p.add_argument("--reps", type=_positive, default=10, help="timed calls per case (default 10)")
    p.add_argument("--warmup", type=_positive, default=2, help="untimed calls first (default 2)")
    p.add_argument("--no-large", action="store_true", help="leave out the matrix of more than half the free memory")
    p.add_argument("--out", default=DEFAULT_OUT, help=OUT_HELP)
    args = p.parse_args(argv)
    if _no_gpu("tileflip bench --suite in-place"):
        return 2
    from tileflip.bench import inplace

    written = inplace.run(reps=args.reps, warmup=args.warmup, out_dir=args.out, command=_command(whole), log=_log,
                          large=not args.no_large)  # fmt: skip
    for path in written:
        print(f"wrote {path}")
    return 0
