#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repository root: where a
# V4-Flash-width step's time goes with the FP8 / FP4 weights (ncu's
# gpu__time_duration of every kernel of one step, summed by kernel), and a
# second sample of deepseek_v4_forward_bench --flash-formats. Binaries as in
# deepseek_v4_fp8_check.sh (CARRY_DIR). Logs to $OUT.
set -uo pipefail
out=${OUT:-/tmp/v4fp8}
mkdir -p "$out"
bin=${CARRY_DIR:-.devcarry/v4fp8}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$bin:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
timeout 60 "$bin/deepseek_v4_forward_bench" --flash-formats 4 32768 64 > "$out/bench2.log" 2> "$out/bench2.err"
echo "bench rc $? at $(( $(date +%s) - t0 )) s"
# format 2: cuBLASLt + wgmma (the default); 0: bf16. mode 1: decode batch 64 at 32k; 3: batch 1 at 32k; 2: prefill 8k.
for run in "2 1" "2 3" "2 2" "0 1" "0 2"; do
  set -- $run
  f=$1 mode=$2
  timeout 45 ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv \
    "$bin/deepseek_v4_forward_bench" --flash-formats 4 32768 64 $mode $f >"$out/ncu_${f}_$mode.csv" 2>"$out/ncu_${f}_$mode.err"
  echo "ncu format $f mode $mode rc $? at $(( $(date +%s) - t0 )) s"
  python3 "$(dirname "$0")/ncu_kernel_table.py" "$out/ncu_${f}_$mode.csv" 22 >"$out/profile_${f}_$mode.txt"
done
cd "$out" && tar -czf ncu.tgz ncu_*.csv ncu_*.err && rm -f ncu_*.csv ncu_*.err && cd - >/dev/null
for p in "$out"/profile_*.txt; do echo "=== $(basename "$p") ==="; cat "$p"; done
echo "=== bench (second sample) ==="; cat "$out/bench2.log"; tail -3 "$out/bench2.err"
