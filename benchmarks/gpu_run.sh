#!/usr/bin/env bash
# One call on the GPU machine: `bash benchmarks/gpu_run.sh STEP...` runs the named steps in order, each
# under its own time limit, logging to $OUT/log.txt and leaving its JSON in $OUT (at most 8 files
# come back from a device call, so steps share the log).
set -u
OUT=${OUT:-/tmp/tileflip-out}
mkdir -p "$OUT"
export PYTHONPATH=src PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
LOG="$OUT/log.txt"

run() {  # run NAME SECONDS COMMAND...
  local name=$1 limit=$2
  shift 2
  echo "=== $name: $*" | tee -a "$LOG"
  local t0=$SECONDS
  timeout "$limit" "$@" >>"$LOG" 2>&1
  echo "=== $name: exit $? after $((SECONDS - t0)) s" | tee -a "$LOG"
}

for step in "$@"; do
  case $step in
    env) run env 60 python3 -c "import torch, triton, sys; print(sys.version, torch.__version__, triton.__version__, torch.cuda.get_device_name(), torch.cuda.device_count())" ;;
    xdist) run xdist 60 python3 -m pip install -q --no-index .wheels/execnet-*.whl .wheels/pytest_xdist-*.whl ;;
    tests-par) run tests-par 380 python3 -m pytest -m "gpu and not multigpu" -q -p no:cacheprovider -n 8 --maxfail=20 -rs ;;
    tests-2d) run tests-2d 240 python3 -m pytest -m gpu -q -p no:cacheprovider -n 4 tests/test_transpose.py tests/test_cuda_launch_gpu.py tests/test_compile.py ;;
    tests-multi) run tests-multi 200 python3 -m pytest -m multigpu -q -p no:cacheprovider -rs ;;
    tests) run tests 540 python3 -m pytest -m "gpu and not multigpu" -q -p no:cacheprovider --maxfail=20 --durations=5 ;;
    device) run device 120 python3 benchmarks/measure_device.py && cp src/tileflip/data/h200.json "$OUT/" ;;
    analyze) run analyze-16384x16384-float32 120 python3 -m tileflip.cli analyze --measure --shape 16384x16384 --dtype float32
             for s in "4096x4096 float32" "16384x16384 bfloat16"; do
               set -- $s; run "analyze-$1-$2" 120 python3 -m tileflip.cli analyze --measure --no-ncu --shape "$1" --dtype "$2"; done ;;
    tests-permute) run tests-permute 240 python3 -m pytest -m gpu -q -p no:cacheprovider -n 8 tests/test_permute.py ;;
    permute-variants) run permute-variants 420 python3 benchmarks/permute_variants.py "$OUT/permute-variants.json" \
                        ${PERMUTE_VARIANTS:-rules off64:off32=0 n-half8:nhalve=1,nwarps=8 n-quarter8:nhalve=2,nwarps=8 n-half4:nwarps=4} ;;
    tests-new) run tests-new 240 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_permute.py tests/test_cast_transpose.py tests/test_transpose.py ;;
    analyze-json) for s in "16384x16384 float32" "4096x4096 float32" "16384x16384 bfloat16"; do
               set -- $s; run "analyze-$1-$2" 120 sh -c "python3 -m tileflip.cli analyze --measure --no-ncu --json --shape $1 --dtype $2 > $OUT/analyze-$1-$2.json"; done ;;
    fold1) mkdir -p "$OUT/fold1"; run fold1-random 200 python3 benchmarks/permute_fold_variant.py 1 permute-random "$OUT/fold1"
           run fold1-named 120 python3 benchmarks/permute_fold_variant.py 1 permute "$OUT/fold1" ;;
    tune) run tune 240 python3 -m tileflip.tune --out "$OUT/tune.json" ;;
    tune-write) run tune-write 400 python3 -m tileflip.tune --write --out "$OUT/tune.json" ${TUNE_ARGS:-} && cp src/tileflip/data/tuning-h200.json "$OUT/" ;;
    ragged-tiles) run ragged-tiles 300 python3 benchmarks/ragged_tiles.py "$OUT/ragged-tiles.json" ;;
    inductor-code) run inductor-code 200 python3 benchmarks/inductor_code.py ${INDUCTOR_CASES:-} ;;
    bench-2d) run bench-2d 420 python3 -m tileflip.cli bench --suite 2d --quick --out "$OUT" ;;
    bench-host) run bench-host 120 python3 -m tileflip.cli bench --suite host --out "$OUT" ;;
    bench-permute) run bench-permute 200 python3 -m tileflip.cli bench --suite permute --quick --out "$OUT" ;;
    bench-permute-random) run bench-permute-random 300 python3 -m tileflip.cli bench --suite permute-random --quick --out "$OUT" ;;
    bench-cast-tiles) run bench-cast-tiles 300 python3 -m tileflip.cli bench --suite cast --quick --out "$OUT" \
                        --tiles "${CAST_TILES:-128x128w8g4,128x128w8-atomic,128x128w16g4-atomic,128x128w8g4-i64-atomic}" ;;
    permute-ncu) run permute-ncu 300 python3 benchmarks/permute_ncu.py "$OUT/permute-ncu.json" ${PERMUTE_NCU_CASES:-} ;;
    cast-ncu) run cast-ncu 240 python3 benchmarks/cast_ncu.py 8192 28672 ${CAST_NCU:-128x128w8g4-atomic 128x128w8g4} ;;
    order-2d) run order-2d 560 python3 benchmarks/order_2d.py "$OUT/order-2d.json" ${ORDER_SECTIONS:-large small host} ;;
    maxnreg) run maxnreg 400 python3 benchmarks/maxnreg.py "$OUT/maxnreg.json" --quick ;;
    residency) run residency 400 python3 benchmarks/residency.py "$OUT/residency.json" --quick ;;
    tests-cast) run tests-cast 240 python3 -m pytest -m gpu -q -p no:cacheprovider -n 8 tests/test_cast_transpose.py ;;
    bench-cast) run bench-cast 200 python3 -m tileflip.cli bench --suite cast --quick --out "$OUT" ;;
    tests-compile) run tests-compile 120 python3 -m pytest -m gpu -q -p no:cacheprovider "tests/test_transpose.py::test_no_recompile_for_new_shapes_of_a_class" ;;
    dist-tests) run dist-tests 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_distributed.py ;;
    dist-overlap) for e in ${DIST_ENVS:-default}; do
                    run "dist-overlap-$e" 200 env $([ "$e" != default ] && echo "$e") python3 -m torch.distributed.run \
                      --standalone --nproc-per-node 2 benchmarks/dist_overlap.py "$OUT/dist-overlap.json" "$e" ${DIST_SECTIONS:-}; done ;;
    flush-check) run flush-check 200 python3 benchmarks/flush_check.py "$OUT/flush-check.json" ;;
    tests-timing) run tests-timing 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_timing.py ;;
    unaligned-vec) run unaligned-vec 300 python3 benchmarks/unaligned_vec.py "$OUT/unaligned-vec.json" ;;
    dist-bench) run dist-bench 300 python3 -m torch.distributed.run --standalone --nproc-per-node 2 -m tileflip.bench_distributed --out "$OUT/h200x2-distributed.json" ;;
    tma-2d) run tma-2d 540 python3 benchmarks/tma_2d.py "$OUT/tma-2d.json" ${TMA_CASES:-} ;;
    *) echo "unknown step $step" | tee -a "$LOG" ;;
  esac
done
