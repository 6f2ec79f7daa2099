#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repository root: the checks
# and measurements the warp-specialised FP8 expert kernels (issue 15,
# kernels/grouped_gemm_fp8_ws.cu: cp.async, TMA, TMA with the weight multicast) need
# before one becomes the default. Binaries come prebuilt in CARRY_DIR
# (tools/device/build_carry.sh --no-cli, or any directory holding
# cuda_kernel_test, cuda_golden_test and cuda_bench with their libraries).
# Logs go to $OUT (one tarball); the last thing printed is the table.
#
#   CARRY_DIR=.devcarry/cuda tools/device/moe_fp8_ws_check.sh [NCU_KERNEL...]
#
# 1. CudaMoe.* (the ring kernel, 64-slot tiles) and CudaMoeFp8Ws (each
#    warp-specialised kernel, a block an SM and 3 blocks), each test under its
#    own timeout so that a hang names its kernel and the others still run;
# 2. the DeepSeek goldens (WarpSpecializedExpertsMatchTheRingKernel compares
#    every kernel with the ring kernel on the FP8 checkpoint's 300-token prompt);
# 3. cuda_bench --deepseek (MoE prefill 4096 tokens and decode batch 64 under
#    each kernel side by side, the dense FP8 GEMM anchor);
# 4. ncu of the prefill gate_up and down under each NCU_KERNEL named
#    (grouped_gemm_fp8_kernel.h's name_of; default: tma-weight-multicast-n192), and every
#    kernel's duration in the MoE layer under the first.
set -uo pipefail
out=${OUT:-/tmp/moe-fp8-ws}
logs=$out/logs
mkdir -p "$logs"
bin=${CARRY_DIR:-.devcarry/cuda}
ncu_kernels=("$@")
[ ${#ncu_kernels[@]} = 0 ] && ncu_kernels=(tma-weight-multicast-n192)
. tools/device/carried_bin.sh
start_logs moe_fp8_ws

timeout 60 "$bin/cuda_kernel_test" --gtest_filter='CudaMoe.*' --gtest_brief=1 > "$logs/moe_test.log" 2>&1
echo "CudaMoe.* rc $?" | tee -a "$summary"
tests=$("$bin/cuda_kernel_test" --gtest_list_tests --gtest_filter='*CudaMoeFp8Ws*' | awk '/^Kernels/{s=$1} /^  /{print s $1}')
failed_kernels=" "
for t in $tests; do
  timeout 20 "$bin/cuda_kernel_test" --gtest_filter="$t" --gtest_brief=1 > "$logs/ws_$(echo "$t" | tr '/' '_').log" 2>&1
  rc=$?
  echo "$t rc $rc$([ $rc = 124 ] && echo ' (HUNG)')" | tee -a "$summary"
  # UnevenLoads/tma_weight_multicast_grid3 -> tma-weight-multicast
  [ $rc = 0 ] || failed_kernels="$failed_kernels$(echo "${t##*/}" | sed -E 's/_grid.*$//; s/_/-/g') "
done
echo "ws kernels that failed or hung:${failed_kernels}" | tee -a "$summary"
finish
# A kernel that failed above could hang the runs below: leave it out of them.
golden_filter='*Deepseek*'
[ "$failed_kernels" = " " ] || golden_filter='*Deepseek*:-*WarpSpecializedExpertsMatchTheRingKernel*'
timeout 120 "$bin/cuda_golden_test" --gtest_filter="$golden_filter" --gtest_brief=1 > "$logs/golden.log" 2>&1
echo "goldens ($golden_filter) rc $?" | tee -a "$summary"
grep -E "FAILED|Failure" "$logs/golden.log" | head -10
grep -F "[ info ]" "$logs/golden.log" | grep -F "kernel vs the ring" | tee -a "$summary"
finish
if [ "$failed_kernels" = " " ]; then
  timeout 150 "$bin/cuda_bench" --deepseek > "$logs/bench.log" 2>&1
  echo "bench rc $?" | tee -a "$summary"
else
  for kernel in ring warp-specialized tma tma-weight-multicast tma-weight-multicast-n192; do
    case "$failed_kernels" in *" $kernel "*) continue ;; esac
    timeout 60 "$bin/cuda_bench" --deepseek-moe-fp8 "$kernel" >> "$logs/bench.log" 2>&1
    echo "bench $kernel rc $?" | tee -a "$summary"
  done
fi
for kernel in "${ncu_kernels[@]}"; do
  case "$failed_kernels" in *" $kernel "*) echo "ncu $kernel: skipped (failed above)"; continue ;; esac
  # The kernel's first two launches: the first prefill layer's gate_up and down.
  timeout 80 ncu --clock-control none -k regex:grouped_gemm_fp8_ws -c 2 --section SpeedOfLight \
    --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    --section ComputeWorkloadAnalysis --section LaunchStats "$bin/cuda_bench" --deepseek-moe-fp8 "$kernel" \
    > "$logs/ncu_$kernel.txt" 2>&1
  echo "ncu $kernel rc $?" | tee -a "$summary"
  finish
  grep -E "grouped_gemm_fp8_ws|Duration|Throughput|Hit Rate|Issued Warp|No Eligible|Executed Ipc|Registers Per" \
    "$logs/ncu_$kernel.txt" | head -40
done
# Every kernel's duration under the first NCU_KERNEL (decode layers, then
# prefill): where the layer's time outside the GEMMs goes.
case "$failed_kernels" in
  *" ${ncu_kernels[0]} "*) ;;
  *)
    timeout 80 ncu --clock-control none --metrics gpu__time_duration.sum --csv -c 220 \
      "$bin/cuda_bench" --deepseek-moe-fp8 "${ncu_kernels[0]}" > "$logs/ncu_durations.csv" 2>&1
    echo "ncu durations rc $?" | tee -a "$summary"
    ;;
esac
grep -E "MoE layer|DeepSeek GEMM" "$logs/bench.log"
