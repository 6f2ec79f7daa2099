#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repository root: the checks
# and measurements the warp-specialised FP8 expert kernel (issue 15,
# kernels/grouped_gemm_fp8_ws.cu) needs before it becomes the default. Binaries
# come prebuilt in CARRY_DIR (tools/device/build_carry.sh --no-cli, or any
# directory holding cuda_kernel_test, cuda_golden_test and cuda_bench with
# their libraries). Logs go to $OUT; the last thing printed is the table.
#
#   CARRY_DIR=.devcarry/cuda tools/device/moe_fp8_ws_check.sh [--no-ncu]
#
# 1. CudaMoe.* (Fp8WgmmaExpertsUnderUnevenLoads runs both ws kernels, with a
#    block an SM and with 3 blocks, and the ring kernel);
# 2. the DeepSeek goldens (WarpSpecializedExpertsMatchTheRingKernel compares
#    the kernels on the FP8 checkpoint's 300-token prompt);
# 3. cuda_bench --deepseek (MoE prefill 4096 tokens and decode batch 64 under
#    each kernel side by side, the dense FP8 GEMM anchor);
# 4. ncu of the ws kernel's prefill gate_up and down (unless --no-ncu).
# A hang in step 1 (a ring that never fills) stops the script there.
set -uo pipefail
out=${OUT:-/tmp/moe-fp8-ws}
mkdir -p "$out"
bin=${CARRY_DIR:-.devcarry/cuda}
ncu_on=1
[ "${1:-}" = --no-ncu ] && ncu_on=0
# The test binaries look for fixtures and scratch under the build's source dir.
# (SLUICE_SOURCE_DIR, seen here through the binary dir SOURCE/build baked into the binary.)
src=$(grep -a -o -m1 -E '/work/[A-Za-z0-9_.+-]+(/[A-Za-z0-9_.+-]+)*/build' "$bin/cuda_golden_test" | head -1 | sed 's|/build$||')
if [ -n "$src" ] && [ ! -e "$src/tests/fixtures" ]; then mkdir -p "$(dirname "$src")" && ln -sfn "$PWD" "$src"; fi
mkdir -p build
. tools/device/cudnn_env.sh
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$bin:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$out/gpu.txt"
timeout 90 "$bin/cuda_kernel_test" --gtest_filter='CudaMoe.*' --gtest_brief=1 2>&1 | tee "$out/moe_test.log" | tail -15
rc=${PIPESTATUS[0]}
echo "CudaMoe rc $rc"
[ "$rc" = 124 ] && { echo "CudaMoe hung: stopping"; exit 1; }
timeout 150 "$bin/cuda_golden_test" --gtest_filter='*Deepseek*' --gtest_brief=1 2>&1 | tee "$out/golden.log" | tail -15
echo "goldens rc ${PIPESTATUS[0]}"
grep -F "[ info ]" "$out/golden.log" | grep -F "kernel vs the ring"
timeout 180 "$bin/cuda_bench" --deepseek > "$out/bench.log" 2>&1
echo "bench rc $?"
if [ $ncu_on = 1 ]; then
  # The ws kernel's first two launches: the first prefill layer's gate_up and down.
  timeout 90 ncu --clock-control none -k regex:grouped_gemm_fp8_ws -c 2 --section SpeedOfLight \
    --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    --section ComputeWorkloadAnalysis "$bin/cuda_bench" --deepseek-moe-fp8 > "$out/ncu.txt" 2>&1
  echo "ncu rc $?"
  grep -E "grouped_gemm_fp8_ws|Duration|Throughput|Hit Rate|Issued Warp|No Eligible|Executed Ipc" "$out/ncu.txt" | head -30
fi
grep -E "MoE layer|DeepSeek GEMM" "$out/bench.log"
