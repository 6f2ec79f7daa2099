#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repository root: the split-K
# FP8 GEMV of decode (kernels/fp8_gemv.h, session 14). Binaries come prebuilt
# in CARRY_DIR (cuda_kernel_test, cuda_golden_test,
# cuda_deepseek_v4_forward_test, cuda_bench, deepseek_v4_forward_bench,
# stripped, with tools/device/carry_libs.sh's libraries). Logs go to $OUT; a
# summary is printed last. Steps (STEPS, default all: "tests bench v4 goldens"):
#   tests:   CudaFp8Gemv.* and the FP8 matmul tests of cuda_kernel_test;
#   bench:   cuda_bench --fp8-gemv (GEMV against the grouped kernel and cuBLASLt);
#   v4:      deepseek_v4_forward_bench --flash-formats 4 8192 64 (batch-1 decode,
#            the GEMV in the default format against the grouped dense format);
#   goldens: cuda_golden_test '*Deepseek*', cuda_deepseek_v4_forward_test.
set -uo pipefail
out=${OUT:-/tmp/fp8gemv}
mkdir -p "$out"
bin=${CARRY_DIR:-.devcarry/fp8gemv}
steps=${STEPS:-tests bench v4 goldens}
# The tests find fixtures under the source directory baked in at build time.
src=${SLUICE_BUILT_FROM:-/work/wt/fp8gemv}
if [ ! -e "$src/tests" ]; then mkdir -p "$(dirname "$src")" && ln -sfn "$PWD" "$src"; fi
. tools/device/cudnn_env.sh
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$bin:${LD_LIBRARY_PATH:-}
summary=$out/summary.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv,noheader | tee "$summary"
step() { [[ " $steps " == *" $1 "* ]]; }

if step tests; then
  timeout 60 "$bin/cuda_kernel_test" --gtest_filter='CudaFp8Gemv.*:CudaMoe.Fp8*' > "$out/tests.log" 2>&1
  echo "tests rc $? (t=${SECONDS}s)" | tee -a "$summary"
  grep -E "^\[  (PASSED|FAILED) |Failure|Expected|Which is|actual|trace|relative_error" "$out/tests.log" | head -30 |
    tee -a "$summary"
fi
if step bench; then
  timeout 120 "$bin/cuda_bench" --fp8-gemv > "$out/bench.md" 2> "$out/bench.err"
  echo "bench rc $? (t=${SECONDS}s)" | tee -a "$summary"
  tail -5 "$out/bench.err" >> "$summary"
fi
if step v4; then
  timeout 90 "$bin/deepseek_v4_forward_bench" --flash-formats 4 8192 64 > "$out/v4.md" 2> "$out/v4.err"
  echo "v4 rc $? (t=${SECONDS}s)" | tee -a "$summary"
  tail -6 "$out/v4.err" >> "$summary"
fi
if step goldens; then
  timeout 90 "$bin/cuda_golden_test" --gtest_filter='*Deepseek*' > "$out/golden.log" 2>&1
  echo "cuda_golden_test *Deepseek* rc $? (t=${SECONDS}s)" | tee -a "$summary"
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$out/golden.log" | head -12 | tee -a "$summary"
  timeout 120 "$bin/cuda_deepseek_v4_forward_test" > "$out/v4_forward_test.log" 2>&1
  echo "cuda_deepseek_v4_forward_test rc $? (t=${SECONDS}s)" | tee -a "$summary"
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$out/v4_forward_test.log" | head -12 | tee -a "$summary"
fi
echo "=== summary"
cat "$summary"
[ -f "$out/bench.md" ] && cat "$out/bench.md"
[ -f "$out/v4.md" ] && cat "$out/v4.md"
exit 0
