#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repository root: DeepSeek-V4's
# device forward after stage 4's first steps (bf16 GEMMs, grouped experts, one
# sync a step), in one call:
#   1. cuda_deepseek_v4_forward_test (goldens against the exact reference and
#      the one with the device's roundings, prefix hit, engine, widths);
#   2. deepseek_v4_forward_bench at session 11's baseline shapes;
#   3. deepseek_v4_forward_bench --flash: V4-Flash's width, 4 layers, prefill
#      8k / 32k, decode batch 1 and 64;
#   4. (--profile) ncu's time of every kernel of one batch-1 decode step at
#      V4-Flash's width after an 8k prefill, and of one 8k prefill chunk,
#      summed by kernel (a decode step's wall time less its kernel time is
#      the host's share).
# Binaries (stripped, with their non-CUDA libraries) come prebuilt in
# CARRY_DIR. Logs go to $OUT; the tables are printed last.
#
#   CARRY_DIR=.devcarry/v4speed tools/device/deepseek_v4_speed_check.sh
set -uo pipefail
out=${OUT:-/tmp/v4speed}
mkdir -p "$out"
bin=${CARRY_DIR:-.devcarry/v4speed}
profile=0
[ "${1:-}" = --profile ] && profile=1
t0=$(date +%s)
# The test binary looks for fixtures under the development checkout's path.
[ -e /work/main/tests/fixtures ] || { mkdir -p /work && ln -sfn "$PWD" /work/main; }
[ -f tools/device/cudnn_env.sh ] && . tools/device/cudnn_env.sh
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$bin:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv,noheader | tee "$out/gpu.txt"
timeout 90 stdbuf -oL "$bin/cuda_deepseek_v4_forward_test" >"$out/test.log" 2>&1
echo "forward test rc $? at $(( $(date +%s) - t0 )) s"
timeout 50 "$bin/deepseek_v4_forward_bench" /tmp/v4bench 1024 3 8 2048 >"$out/bench_base.log" 2>&1
echo "baseline bench rc $? at $(( $(date +%s) - t0 )) s"
timeout 100 "$bin/deepseek_v4_forward_bench" --flash 4 32768 64 >"$out/bench_flash.log" 2>&1
echo "flash bench rc $? at $(( $(date +%s) - t0 )) s"
if [ $profile = 1 ]; then
  # mode 1: one batch-1 decode step after an 8k prefill; mode 2: an 8k prefill chunk.
  for mode in 1 2; do
    timeout 60 ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv \
      "$bin/deepseek_v4_forward_bench" --flash 4 8192 8 $mode >"$out/ncu$mode.csv" 2>"$out/ncu$mode.err"
    echo "ncu mode $mode rc $? at $(( $(date +%s) - t0 )) s"
    python3 "$(dirname "$0")/ncu_kernel_table.py" "$out/ncu$mode.csv" 25 >"$out/profile$mode.txt"
  done
  echo "=== decode step (batch 1, V4-Flash width, 4 layers, at 8k) ==="; cat "$out/profile1.txt"
  echo "=== prefill chunk (8192 rows from 0) ==="; cat "$out/profile2.txt"
  cd "$out" && tar -czf ncu.tgz ncu1.csv ncu2.csv ncu1.err ncu2.err && rm -f ncu1.csv ncu2.csv ncu1.err ncu2.err && cd - >/dev/null
fi
grep -E "^\[ v4 forward \]|Failure|Expected|actual|Which is|^\[  (PASSED|FAILED) |FAILED TEST|invariant" "$out/test.log" | head -40
cat "$out/bench_base.log" "$out/bench_flash.log"
