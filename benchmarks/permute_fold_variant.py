"""Run a permute bench suite with another ``tileflip.tuning.FOLD_FACTOR`` (an experiment, not a setting):
``python benchmarks/permute_fold_variant.py FACTOR SUITE OUT_DIR``."""

import sys

from tileflip import cli, tuning

tuning.FOLD_FACTOR = int(sys.argv[1])
sys.exit(cli.main(["bench", "--suite", sys.argv[2], "--quick", "--out", sys.argv[3]]))
