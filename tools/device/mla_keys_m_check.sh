#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repository root: the checks
# and timings of the keys-as-M MLA decode kernel (MlaKernels::wgmma_keys_m,
# kernels/mla_decode_keys_m.cu; issue 15 at 16 heads a GPU) in one call.
# Binaries come prebuilt in CARRY_DIR (cuda_kernel_test and cuda_bench with
# their libraries, as tools/device/build_carry.sh --no-cli makes them), or
# packed as CARRY_DIR/bin.tar.xz. Logs go to $OUT; the last thing printed is
# the bench rows of wgmma and wgmma-keys-m side by side.
#
#   CARRY_DIR=.devcarry/mla-keys tools/device/mla_keys_m_check.sh [--no-ncu]
#
# 1. cuda_kernel_test '*CudaMlaAttention*/wgmma_keys_m' (the new set first:
#    16, 12 and 8 heads take its kernel, 64 and 128 heads wgmma's);
# 2. the rest of the MLA suite, 'CudaMla*:*CudaMlaAttention*' (every set);
# 3. cuda_bench --mla-decode wgmma, then wgmma-keys-m: 64 x 8k at 128 heads
#    (keys-m falls back to wgmma's kernel there) and at 16 heads (whole op,
#    attention only, L2-resident probe), 1 x 32k;
# 4. ncu (unless --no-ncu): one 64 x 8k launch of the keys-as-M kernel at 16
#    heads: duration, DRAM throughput, warp states.
# Every step has a time limit (KILL): a hang in a kernel cannot eat the call.
set -uo pipefail
out=${OUT:-/tmp/mla-keys-m-check}
mkdir -p "$out"
bin=${CARRY_DIR:-.devcarry/mla-keys}
. tools/device/carried_bin.sh
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee "$out/gpu.txt"
summary() { grep -E "^\[  (PASSED|FAILED) |FAILED  \]|invariant|max \|delta\||error" "$1" | head -30; }
timeout -s KILL 150 stdbuf -oL "$bin/cuda_kernel_test" --gtest_brief=1 \
  --gtest_filter='*CudaMlaAttention*/wgmma_keys_m' > "$out/kernel_test_keys_m.log" 2>&1
echo "cuda_kernel_test (wgmma_keys_m) exit $? ($(($(date +%s) - t0)) s)"
summary "$out/kernel_test_keys_m.log"
timeout -s KILL 220 stdbuf -oL "$bin/cuda_kernel_test" --gtest_brief=1 \
  --gtest_filter='CudaMla*:*CudaMlaAttention*-*/wgmma_keys_m' > "$out/kernel_test.log" 2>&1
echo "cuda_kernel_test (the other MLA sets) exit $? ($(($(date +%s) - t0)) s)"
summary "$out/kernel_test.log"
for set in wgmma wgmma-keys-m; do
  timeout -s KILL 80 "$bin/cuda_bench" --mla-decode "$set" > "$out/bench_$set.log" 2>&1
  echo "cuda_bench --mla-decode $set exit $? ($(($(date +%s) - t0)) s)"
done
if [ "${1:-}" != --no-ncu ] && command -v ncu > /dev/null; then
  # The keys-as-M kernel runs in the 16-head rows only; skip the 64-key (fixed cost) launches' warm-up.
  timeout -s KILL 60 ncu --clock-control none -k regex:decode_keys_m -s 3 -c 1 --section SpeedOfLight \
    --section WarpStateStats --section SchedulerStats --section Occupancy \
    "$bin/cuda_bench" --mla-decode wgmma-keys-m > "$out/ncu_keys_m.log" 2>&1
  echo "ncu exit $? ($(($(date +%s) - t0)) s)"
  grep -E "Grid Size|Duration|SM Frequency|DRAM Throughput|Memory Throughput|Compute \(SM\)|Issued Warp" \
    "$out/ncu_keys_m.log" | head -10
fi
echo "total $(($(date +%s) - t0)) s"
echo
grep -h -E "^\| MLA decode" "$out/bench_wgmma.log" "$out/bench_wgmma-keys-m.log"
