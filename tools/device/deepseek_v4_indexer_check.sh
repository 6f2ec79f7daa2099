#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repository root: issue 18's
# indexer target (scores + top-k <= 25% of the CSA layer's prefill).
# - the indexer tests (session 27's top-k form among them) and the tf32
#   forward goldens;
# - cuda_bench --deepseek-v4-kernels twice: the top-k in session 23's and 27's
#   forms; the scores with the FMA, the tf32 and the register-key tf32 head
#   sums at 1,024-8,192 rows (where tf32_head_sum_min_rows belongs);
# - ncu's layer table of the last 8k chunk at 128k for formats 2 (the
#   default: tf32 head sum from 2,048 rows, since session 29), 12 (tf32 at
#   every size), 13 (the FMA head sum, the default until session 29), 14 (12,
#   keys in registers), 15 (14 with session 27's top-k), 16 (2 with session
#   32's bulk-copy top-k); the model rows.
# Binaries (cuda_kernel_test, cuda_deepseek_v4_forward_test, cuda_bench,
# deepseek_v4_forward_bench; stripped, with their libraries) in
# CARRY_DIR/bin.tar.xz.
#
#   CARRY_DIR=.devcarry/s27 tools/device/deepseek_v4_indexer_check.sh
set -uo pipefail
out=${OUT:-/tmp/s27}; mkdir -p "$out"
bin=${CARRY_DIR:-.devcarry/cuda}
. tools/device/carried_bin.sh
# FORMATS, BENCH_RUNS, MODEL_FORMATS and INDEXER_TESTS trim the call when device time is short.
formats=${FORMATS:-2 12 13 14 15}
bench_runs=${BENCH_RUNS:-2}
model_formats=${MODEL_FORMATS:-2,12,13,14,15}
t0=$(date +%s)
# The indexer tests take ~150 s on an H100 (the scores kernels' alone over 60 s, S37-3):
# INDEXER_TESTS=all (the default), scores or none.
case ${INDEXER_TESTS:-all} in
  all) test_filter='DeepseekV4*Indexer*' ;;
  scores) test_filter='DeepseekV4*IndexerScores*' ;;
  none) test_filter='' ;;
  *) echo "INDEXER_TESTS is all, scores or none" >&2; exit 2 ;;
esac
if [ -n "$test_filter" ]; then
  timeout -s KILL 150 "$bin/cuda_kernel_test" --gtest_filter="$test_filter" >"$out/kernel_test.log" 2>&1
  echo "kernel tests ($test_filter) rc $? at $(( $(date +%s) - t0 )) s"
else
  : >"$out/kernel_test.log"
fi
grep -E "^\[  (PASSED|FAILED) " "$out/kernel_test.log"
timeout -s KILL 90 "$bin/cuda_deepseek_v4_forward_test" --gtest_filter='*tf32*:*Engine*' >"$out/forward_test.log" 2>&1
echo "forward test rc $? at $(( $(date +%s) - t0 )) s"
grep -E "^\[  (PASSED|FAILED) " "$out/forward_test.log"
for run in $(seq 1 "$bench_runs"); do
  timeout -s KILL 90 "$bin/cuda_bench" --deepseek-v4-kernels >"$out/kernels_$run.log" 2>&1
  echo "kernel bench $run rc $? at $(( $(date +%s) - t0 )) s"
  grep -iE "indexer prefill chunk, 8192" "$out/kernels_$run.log" | grep -iE "scores, warp|top-512, sampled" | cut -c1-160
done
for format in $formats; do
  timeout 150 ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv \
    "$bin/deepseek_v4_forward_bench" --flash-formats 3 131072 1 5 "$format" >"$out/ncu_$format.csv" 2>/dev/null
  python3 tools/device/ncu_layer_table.py "$out/ncu_$format.csv" 3 >"$out/layers_$format.txt" 2>&1
  echo "ncu $format at $(( $(date +%s) - t0 )) s"
  grep -E "layer 1 attention" "$out/layers_$format.txt"
done
rm -f "$out"/ncu_*.csv
timeout 240 "$bin/deepseek_v4_forward_bench" --flash-formats 3 131072 64 0 "$model_formats" >"$out/model.log" 2>&1
echo "model rc $? at $(( $(date +%s) - t0 )) s"
for log in kernel_test forward_test; do
  echo "=== $log"; grep -E "^\[  (PASSED|FAILED) |FAILED TEST|Failure|^\[  FAILED" "$out/$log.log" | head -20
done
echo "=== kernels (scores: FMA / tf32 head sum at 1,024-8,192 rows; top-k: session 23 / 27; crowded rows)"
grep -hiE "indexer prefill chunk" "$out"/kernels_*.log | grep -iE "scores, warp|top-512, sampled" | cut -c1-150
grep -hiE "growing 9x" "$out"/kernels_*.log | cut -c1-150
for format in $formats; do echo "=== layers $format"; head -1 "$out/layers_$format.txt"; grep -E "layer 1 attention|^layer 1" "$out/layers_$format.txt"; done
echo "=== model"; grep -E "^\| FP8" "$out/model.log" | cut -c1-330
