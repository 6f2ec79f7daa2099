#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repository root: DeepSeek-V4's
# FP8 / FP4 weights kept quantized on the device (issue 18, stage 4). Binaries
# come prebuilt in CARRY_DIR (cuda_deepseek_v4_forward_test and
# deepseek_v4_forward_bench, stripped, with tools/device/carry_libs.sh's
# libraries). Logs go to $OUT (one tarball); the table is printed last.
#   1. the conversion kernels' tests (DeepseekV4Quantized.*);
#   2. the device goldens, one process a case (a failed check in one does not
#      hide the others);
#   3. deepseek_v4_forward_bench --flash-formats 4 32768 64: V4-Flash's width,
#      bf16 against FP8 side by side.
set -uo pipefail
out=${OUT:-/tmp/v4fp8}
logs=$out/logs
mkdir -p "$logs"
bin=${CARRY_DIR:-.devcarry/v4fp8}
src=$(grep -a -o -m1 -E '/work/[A-Za-z0-9_.+-]+(/[A-Za-z0-9_.+-]+)*/build' "$bin/cuda_deepseek_v4_forward_test" | head -1 | sed 's|/build$||')
if [ -n "$src" ] && [ ! -e "$src/tests" ]; then mkdir -p "$(dirname "$src")" && ln -sfn "$PWD" "$src"; fi
mkdir -p build
. tools/device/cudnn_env.sh
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$bin:${LD_LIBRARY_PATH:-}
summary=$logs/summary.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv,noheader | tee "$logs/gpu.txt"
finish() { echo "t=${SECONDS}s" >> "$summary"; tar -C "$out" -czf "$out/v4fp8_logs.tgz" logs; }
trap finish EXIT

timeout 40 "$bin/cuda_deepseek_v4_forward_test" --gtest_filter='DeepseekV4Quantized.*' > "$logs/quantized.log" 2>&1
echo "DeepseekV4Quantized.* rc $?" | tee -a "$summary"
grep -E "Failure|FAILED|Expected|actual" "$logs/quantized.log" | head -8 | tee -a "$summary"
for c in f32 fp8_fp4_experts_host_bf16 fp8_fp4_experts_kept_bf16_activations fp8_fp4_experts_kept_e4m3 \
         fp8_fp8_experts_kept_bf16_activations fp8_fp8_experts_kept_e4m3; do
  timeout 25 "$bin/cuda_deepseek_v4_forward_test" --gtest_filter="*DeepseekV4DeviceForwardTest*/$c" > "$logs/golden_$c.log" 2>&1
  echo "golden $c rc $?" | tee -a "$summary"
  grep -E "v4 forward|Failure|actual|Which is" "$logs/golden_$c.log" | head -12 | tee -a "$summary"
done
timeout 40 "$bin/cuda_deepseek_v4_forward_test" --gtest_filter='DeepseekV4DeviceForwardEngine.*:DeepseekV4DeviceForwardWidths.*' > "$logs/engine.log" 2>&1
echo "engine + widths rc $?" | tee -a "$summary"
grep -E "v4 forward|Failure|actual" "$logs/engine.log" | head -8 | tee -a "$summary"
finish
timeout 100 "$bin/deepseek_v4_forward_bench" --flash-formats 4 32768 64 > "$logs/bench.log" 2> "$logs/bench.err"
echo "bench rc $?" | tee -a "$summary"
tail -5 "$logs/bench.err" | tee -a "$summary"
cat "$logs/bench.log"
