#!/usr/bin/env bash
# Runs on the GPU machine (device tool): the check branch v4speed-hcpre needs
# before its hc_pre kernel (512 threads, float4 loads, the Sinkhorn rounds on
# hc * hc threads) replaces session 11's: the mHC kernel test and the V4
# kernel tests, the forward goldens, then the V4-Flash-width bench (decode
# batch 1 was 5.98 ms at 32k with the old kernel, 1.73 ms of it in hc_pre).
#
#   CARRY_DIR=.devcarry/v4speed-hcpre tools/device/deepseek_v4_hcpre_check.sh
set -uo pipefail
out=${OUT:-/tmp/v4hcpre}
mkdir -p "$out"
bin=${CARRY_DIR:-.devcarry/v4speed-hcpre}
t0=$(date +%s)
[ -e /work/main/tests/fixtures ] || { mkdir -p /work && ln -sfn "$PWD" /work/main; }
[ -f tools/device/cudnn_env.sh ] && . tools/device/cudnn_env.sh
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$bin:${LD_LIBRARY_PATH:-}
timeout 60 "$bin/cuda_v4_kernel_test" --gtest_filter='DeepseekV4CudaKernels.*' >"$out/kernel_test.log" 2>&1
echo "V4 kernel tests rc $? at $(( $(date +%s) - t0 )) s"
timeout 90 "$bin/cuda_deepseek_v4_forward_test" >"$out/test.log" 2>&1
echo "forward test rc $? at $(( $(date +%s) - t0 )) s"
timeout 100 "$bin/deepseek_v4_forward_bench" --flash 4 32768 64 >"$out/bench_flash.log" 2>&1
echo "flash bench rc $? at $(( $(date +%s) - t0 )) s"
grep -E "Failure|Expected|actual|^\[  (PASSED|FAILED) |FAILED TEST" "$out/kernel_test.log" | head -20
grep -E "^\[ v4 forward \]|Failure|Expected|actual|^\[  (PASSED|FAILED) |FAILED TEST" "$out/test.log" | head -30
cat "$out/bench_flash.log"
