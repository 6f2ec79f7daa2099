#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repository root: what the
# weight-multicast FP8 expert kernel (issue 15; GroupedGemmFp8Kernel::
# tma_weight_multicast, kernels/grouped_gemm_fp8_ws.cu, the paired plan of
# moe_permute.cu) needs before it can become the default. Binaries come
# prebuilt in CARRY_DIR: cuda_kernel_test, cuda_golden_test and cuda_bench with
# their libraries (tools/device/build_carry.sh --no-cli), loose or packed as
# CARRY_DIR/bin.tar.xz (unpacked into CARRY_DIR/u). Logs go to $OUT (and one
# tarball of them); the last thing printed is the table.
#
#   CARRY_DIR=.devcarry/moe-wmc tools/device/moe_fp8_wmc_check.sh
#
# 1. CudaMoe.* (the plan in both tile orders, the ring kernel) and every
#    CudaMoeFp8Ws test (each ws kernel, a block an SM and 3 blocks; UnevenLoads
#    against the host, OddTileCountsMatchTheRingKernel bit for bit), a process
#    and a timeout a kernel so that a hang names its kernel and the rest still
#    run; tma-weight-multicast's first;
# 2. the DeepSeek golden that compares every ws kernel with the ring kernel;
# 3. cuda_bench --deepseek-moe-fp8 under tma, tma-weight-multicast (the
#    default since session 29) and its two-accumulator form (session 30)
#    (MoE layer, prefill 4096 tokens and decode batch 64), then again in the
#    reverse order;
# 4. ncu of the first prefill layer's gate_up and down under each: time, DRAM
#    bytes read, L2 hit rate and throughput.
set -uo pipefail
out=${OUT:-/tmp/moe-fp8-wmc}
logs=$out/logs
mkdir -p "$logs"
bin=${CARRY_DIR:-.devcarry/moe-wmc}
. tools/device/carried_bin.sh
kernels=(tma tma-weight-multicast tma-weight-multicast-overlap)  # the old default, the default, its two-accumulator form
start_logs moe_fp8_wmc

timeout 120 "$bin/cuda_kernel_test" --gtest_filter='CudaMoe.*' --gtest_brief=1 > "$logs/moe_test.log" 2>&1
echo "CudaMoe.* rc $?" | tee -a "$summary"
grep -E "^\[  FAILED  \]|Failure" "$logs/moe_test.log" | head -10
# The suite's kernels (test names end in /KERNEL_grid3 or /KERNEL_grid_sms), the new one first; a
# process a kernel (its 4 tests), so that a hang names its kernel.
suite_kernels=$("$bin/cuda_kernel_test" --gtest_list_tests --gtest_filter='*CudaMoeFp8Ws*' |
  awk '/^  /{print $1}' | sed -E 's#^.*/##; s/_grid.*$//' | sort -u |
  awk '{print ($0 == "tma_weight_multicast" ? 0 : 1), $0}' | sort -s -k1,1 | cut -d' ' -f2)
failed_kernels=" "
for k in $suite_kernels; do
  timeout 100 "$bin/cuda_kernel_test" --gtest_filter="*CudaMoeFp8Ws*/${k}_grid*" > "$logs/ws_$k.log" 2>&1
  rc=$?
  echo "CudaMoeFp8Ws $k rc $rc$([ $rc = 124 ] && echo ' (HUNG)') at ${SECONDS}s" | tee -a "$summary"
  grep -E "^\[       OK \]|^\[  FAILED  \]" "$logs/ws_$k.log" | grep -v "tests, listed below" | tee -a "$summary"
  [ $rc = 0 ] || grep -E "Failure|Expected|first at|error" "$logs/ws_$k.log" | head -4
  [ $rc = 0 ] || failed_kernels="$failed_kernels$(echo "$k" | tr _ -) "
done
echo "ws kernels that failed or hung:${failed_kernels}" | tee -a "$summary"
finish
# A kernel that failed above could hang the runs below: leave it out of them.
case "$failed_kernels" in
  " ")
    timeout 150 "$bin/cuda_golden_test" --gtest_filter='*WarpSpecializedExpertsMatchTheRingKernel*' --gtest_brief=1 \
      > "$logs/golden.log" 2>&1
    echo "golden (ws kernels vs the ring kernel) rc $?" | tee -a "$summary"
    grep -E "Failure|FAILED" "$logs/golden.log" | head -6
    grep -F "[ info ]" "$logs/golden.log" | grep -F "kernel vs the ring" | tee -a "$summary"
    ;;
  *) echo "golden: skipped (a ws kernel failed above)" | tee -a "$summary" ;;
esac
finish
for kernel in "${kernels[@]}"; do
  case "$failed_kernels" in *" $kernel "*) echo "bench/ncu $kernel: skipped (failed above)" | tee -a "$summary"; continue ;; esac
  timeout 90 "$bin/cuda_bench" --deepseek-moe-fp8 "$kernel" > "$logs/bench_$kernel.log" 2>&1
  echo "bench $kernel rc $?" | tee -a "$summary"
  # The ws kernel's first two launches: the first prefill layer's gate_up and down
  # (decode's 64-slot tiles run the ring kernel, grouped_gemm_fp8_kernel, not matched).
  timeout 120 ncu --clock-control none -k regex:grouped_gemm_fp8_ws -c 2 --csv --print-units base \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct,lts__throughput.avg.pct_of_peak_sustained_elapsed \
    "$bin/cuda_bench" --deepseek-moe-fp8 "$kernel" > "$logs/ncu_$kernel.csv" 2> "$logs/ncu_$kernel.err"
  echo "ncu $kernel rc $?" | tee -a "$summary"
  # Where gate_up's consumers wait (session 29: bound by them under the weight multicast):
  # the first launch's issue slots, pipe use and stall reasons.
  timeout 120 ncu --clock-control none -k regex:grouped_gemm_fp8_ws -c 1 --section SpeedOfLight \
    --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
    "$bin/cuda_bench" --deepseek-moe-fp8 "$kernel" > "$logs/ncu_sections_$kernel.txt" 2>&1
  echo "ncu sections $kernel rc $?" | tee -a "$summary"
  finish
done
# A second round of the bench in the reverse order: on the H200 the first kernel run read 10%
# faster than the next (S31-8), and S30-2 saw a 10% order effect between two rows of another bench.
for ((i = ${#kernels[@]} - 1; i >= 0; i--)); do
  kernel=${kernels[$i]}
  case "$failed_kernels" in *" $kernel "*) continue ;; esac
  timeout 90 "$bin/cuda_bench" --deepseek-moe-fp8 "$kernel" > "$logs/bench2_$kernel.log" 2>&1
  echo "bench (reverse order) $kernel rc $?" | tee -a "$summary"
done
finish
echo
echo "=== MoE layer (cuda_bench --deepseek-moe-fp8; weights moved once at best): in order, then reversed"
for round in bench bench2; do
  for kernel in "${kernels[@]}"; do
    [ -f "$logs/${round}_$kernel.log" ] && grep -h "MoE layer" "$logs/${round}_$kernel.log" | sed "s/^/$round /" | cut -c1-266
  done
done
echo "=== first prefill layer's grouped GEMMs (ncu)"
for kernel in "${kernels[@]}"; do
  [ -s "$logs/ncu_$kernel.csv" ] && python3 tools/device/ncu_metrics_table.py "$logs/ncu_$kernel.csv" "$kernel" gate_up down
done
echo "=== gate_up's first launch (ncu sections; logs/ncu_sections_*.txt)"
for kernel in "${kernels[@]}"; do
  grep -v "^==PROF==" "$logs/ncu_sections_$kernel.txt" 2>/dev/null |
    grep -E "Duration|Compute \(SM\) Throughput|Issue Slots Busy|Executed Ipc Active|Issued Warp|No Eligible|Stall" |
    sed "s/^/$kernel: /" | cut -c1-150
done
grep -E "rc [1-9]|HUNG|failed or hung" "$summary"
