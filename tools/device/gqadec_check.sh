#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repository root: the checks
# and timings of session 12's decode fusions (the split-KV kernels merging
# their own splits, the q|k|v GEMV with RoPE and the KV page write as its
# epilogue, the lazy O rescale), in one call. Binaries come prebuilt in
# CARRY_DIR (cuda_kernel_test, cuda_golden_test and cuda_bench with their
# libraries: tools/device/build_carry.sh --no-cli makes a superset). Logs go
# to $OUT (one tarball and the table); the last thing printed is the table.
#
#   CARRY_DIR=.devcarry/gqadec tools/device/gqadec_check.sh [--bench-only]
#
# 1. cuda_bench --decode-sweep (GQA decode attention, each case merged in the
#    split kernel and in the combine kernel, and under the other tile layout),
#    --decode-sweep-pages (the default and the other tile layout at pages of
#    16 and 64) and --decode1 (the GEMV rows and
#    batch-1 decode under each fusion off, and session 11's kernels), first,
#    so that a failing test leaves the timings standing;
# 2. cuda_kernel_test: CudaOps.*, the decode attention suite
#    (CudaDecodeAttention.*, the CudaAttention decode cases under the default
#    prefill choice) and EngineOnCuda.*;
# 3. cuda_golden_test 'Architectures/*' (decode steps under graphs: the fused
#    GEMV runs in llama and mistral).
set -uo pipefail
out=${OUT:-/tmp/gqadec-check}
mkdir -p "$out/logs"
bin=${CARRY_DIR:-.devcarry/gqadec}
tests=1
[ "${1:-}" = --bench-only ] && tests=0
src=$(grep -a -o -m1 -E '/work/[A-Za-z0-9_.+-]+(/[A-Za-z0-9_.+-]+)*/build' "$bin/cuda_golden_test" | head -1 | sed 's|/build$||')
if [ -n "$src" ] && [ ! -e "$src/tests/fixtures" ]; then mkdir -p "$(dirname "$src")" && ln -sfn "$PWD" "$src"; fi
mkdir -p build
. tools/device/cudnn_env.sh
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$bin:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv,noheader |
  tee "$out/logs/gpu.txt"
summary=""
timeout 60 "$bin/cuda_bench" --decode-sweep > "$out/logs/sweep.md" 2>&1
summary="$summary sweep rc $?;"
timeout 90 "$bin/cuda_bench" --decode-sweep-pages > "$out/logs/sweep_pages.md" 2>&1
summary="$summary sweep_pages rc $?;"
timeout 90 "$bin/cuda_bench" --decode1 > "$out/logs/decode1.md" 2>&1
summary="$summary decode1 rc $?;"
if [ $tests = 1 ]; then
  filter='CudaOps.*:CudaDecodeAttention.*:EngineOnCuda.*'
  for t in GraphReplayedDecodeSteps GraphDecodeStepsWithFusedRope GraphReplayedBatchOneDecode RowSplitsAtEdges \
    SmallHeadDimsUseSplitKernel HeadDim256 GroupOfSixteenLongDecode; do
    filter="$filter:PrefillKernels/CudaAttention.$t/auto"
  done
  stdbuf -oL timeout 120 "$bin/cuda_kernel_test" --gtest_filter="$filter" --gtest_brief=1 2>&1 |
    tee "$out/logs/kernel_test.log" | tail -25
  summary="$summary kernel_test rc ${PIPESTATUS[0]};"
  stdbuf -oL timeout 75 "$bin/cuda_golden_test" --gtest_filter='Architectures/*' --gtest_brief=1 2>&1 |
    tee "$out/logs/golden_test.log" | tail -15
  summary="$summary golden_test rc ${PIPESTATUS[0]};"
fi
tar -czf "$out/logs.tgz" -C "$out" logs
echo
echo "=== table ==="
grep -h -E "kernels only|Llama-3-8B decode step|GEMV" "$out/logs/sweep.md" "$out/logs/sweep_pages.md" \
  "$out/logs/decode1.md" | sed -E 's/decode attention //; s/, 32\/8 heads//; s/, split plan adaptive//; s/ \(K\+V bytes\)//' |
  tee "$out/table.md"
grep -h -E "^\[  (PASSED|FAILED) |tests? ran|FAILED TEST" "$out"/logs/*_test.log 2>/dev/null | sort | uniq -c
echo "$summary"
