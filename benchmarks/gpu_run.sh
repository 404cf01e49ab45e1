#!/usr/bin/env bash
# The GPU machine's steps: `bash benchmarks/gpu_run.sh STEP...` runs the named steps in order, each under
# its own time limit, logging to $OUT/log.txt. The bench steps write into the tree's benchmarks/results
# (so that --part runs merge into the suite's file) and copy each file they wrote to $OUT/results/.
# Steps: env xdist torchao (wheels from .wheels/; torchao for the quantize peers and tests)
#        tests tests-par tests-multi tests-only (TESTS="tests/x.py ...")
#        bench-2d bench-2d-extra bench-square bench-host bench-permute bench-permute-random bench-cast bench-quantize
#        bench-distributed (BENCH_ARGS: extra options, e.g. "--part 1/2") device tune tune-write analyze
#        analyze-json
#        bench-permute-wide (too long for one call: BENCH_ARGS="--part K/6", the parts merge into one file)
#        bench-permute-strategies (the strategy sweep of the same suite, no peers; BENCH_ARGS="--part K/N")
#        bench-stability (STABILITY_ARGS, not BENCH_ARGS, so that it can share a call with a --part step:
#        e.g. "--measurements 10 --seed 0")
set -u
OUT=${OUT:-/tmp/tileflip-out}
RESULTS=benchmarks/results
mkdir -p "$OUT/results"
export PYTHONPATH=src PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
LOG="$OUT/log.txt"
TILEFLIP="python3 -m tileflip.cli"

run() {  # run NAME SECONDS COMMAND...
  local name=$1 limit=$2
  shift 2
  echo "=== $name: $*" | tee -a "$LOG"
  local t0=$SECONDS
  timeout "$limit" "$@" >>"$LOG" 2>&1
  echo "=== $name: exit $? after $((SECONDS - t0)) s" | tee -a "$LOG"
}

bench() {  # bench NAME SECONDS OPTIONS...: a tileflip bench step, its new results copied to $OUT/results
  local stamp="$OUT/.stamp-$1"
  touch "$stamp"
  run "$@"
  find "$RESULTS" -name '*.json' -newer "$stamp" | while read -r f; do
    mkdir -p "$OUT/results/$(dirname "${f#"$RESULTS"/}")" && cp "$f" "$OUT/results/${f#"$RESULTS"/}"
  done
  rm -f "$stamp"
}

for step in "$@"; do
  case $step in
    env) run env 60 python3 -c "import torch, triton, sys; print(sys.version, torch.__version__, triton.__version__, torch.cuda.get_device_name(), torch.cuda.device_count())" ;;
    xdist) run xdist 60 python3 -m pip install -q --no-index .wheels/execnet-*.whl .wheels/pytest_xdist-*.whl ;;
    torchao) run torchao 60 python3 -m pip install -q --no-deps --no-index .wheels/torchao-*.whl ;;
    tests) run tests 540 python3 -m pytest -m "gpu and not multigpu" -q -p no:cacheprovider --maxfail=20 --durations=5 ;;
    tests-par) run tests-par 380 python3 -m pytest -m "gpu and not multigpu" -q -p no:cacheprovider -n 8 --maxfail=20 -rs ;;
    tests-multi) run tests-multi 200 python3 -m pytest -m multigpu -q -p no:cacheprovider -rs ;;
    tests-only) run tests-only 400 python3 -m pytest -m gpu -q -p no:cacheprovider -rs ${TESTS:-} ;;
    bench-2d) bench bench-2d 420 $TILEFLIP bench --suite 2d --quick --out "$RESULTS" ${BENCH_ARGS:-} ;;
    bench-2d-extra) bench bench-2d-extra 300 $TILEFLIP bench --suite 2d-extra --quick --out "$RESULTS" ${BENCH_ARGS:-} ;;
    bench-square) bench bench-square 120 $TILEFLIP bench --suite square --out "$RESULTS" ${BENCH_ARGS:-} ;;
    bench-host) bench bench-host 120 $TILEFLIP bench --suite host --out "$RESULTS" ${BENCH_ARGS:-} ;;
    bench-permute) bench bench-permute 200 $TILEFLIP bench --suite permute --quick --out "$RESULTS" ${BENCH_ARGS:-} ;;
    bench-permute-random) bench bench-permute-random 300 $TILEFLIP bench --suite permute-random --quick --out "$RESULTS" ${BENCH_ARGS:-} ;;
    bench-permute-wide) bench bench-permute-wide 570 $TILEFLIP bench --suite permute-wide --quick --out "$RESULTS" ${BENCH_ARGS:-} ;;
    bench-permute-strategies) bench bench-permute-strategies 570 $TILEFLIP bench --suite permute-wide --quick \
                                --backends auto,triton,cuda-realign,cuda-thin,cuda-split,cuda-shift --out "$RESULTS" \
                                ${BENCH_ARGS:-} ;;
    bench-stability) bench bench-stability 500 $TILEFLIP bench --suite stability --out "$RESULTS" ${STABILITY_ARGS:-} ;;
    bench-quantize) bench bench-quantize 570 $TILEFLIP bench --suite quantize --quick --out "$RESULTS" ${BENCH_ARGS:-} ;;
    bench-cast) bench bench-cast 200 $TILEFLIP bench --suite cast --quick --out "$RESULTS" ${BENCH_ARGS:-} ;;
    bench-distributed) bench bench-distributed 300 $TILEFLIP bench --suite distributed --out "$RESULTS" ${BENCH_ARGS:-} ;;
    device) run device 120 $TILEFLIP bench --suite device && cp src/tileflip/data/h200.json "$OUT/" ;;
    tune) bench tune 240 $TILEFLIP bench --suite tune --out "$RESULTS" ${BENCH_ARGS:-} ;;
    tune-write) bench tune-write 400 $TILEFLIP bench --suite tune --write --out "$RESULTS" ${BENCH_ARGS:-} \
                  && cp src/tileflip/data/tuning-h200.json "$OUT/" ;;
    analyze) run analyze-16384x16384-float32 120 $TILEFLIP analyze --measure --shape 16384x16384 --dtype float32
             for s in "4096x4096 float32" "16384x16384 bfloat16"; do
               set -- $s; run "analyze-$1-$2" 120 $TILEFLIP analyze --measure --no-ncu --shape "$1" --dtype "$2"; done ;;
    analyze-json) for s in "16384x16384 float32" "4096x4096 float32" "16384x16384 bfloat16"; do
               set -- $s; run "analyze-$1-$2" 120 sh -c "$TILEFLIP analyze --measure --no-ncu --json --shape $1 --dtype $2 > $OUT/analyze-$1-$2.json"; done ;;
    *) echo "unknown step $step" | tee -a "$LOG" ;;
  esac
done
