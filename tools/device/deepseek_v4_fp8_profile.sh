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
  python3 - "$out/ncu_${f}_$mode.csv" >"$out/profile_${f}_$mode.txt" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows:
    sys.exit("no kernels in the ncu output")
head, rows = rows[0], rows[1:]
ki, vi = head.index("Kernel Name"), head.index("Metric Value")
tot = collections.defaultdict(float); cnt = collections.Counter()
for r in rows:
    name = r[ki].split("(")[0][:80]
    tot[name] += float(r[vi].replace(",", "")) / 1e3; cnt[name] += 1
print(f"{len(rows)} kernels, {sum(tot.values()):.0f} us of kernel time")
for name, us in sorted(tot.items(), key=lambda x: -x[1])[:22]:
    print(f"{us:9.1f} us  x{cnt[name]:4d}  {name}")
PY
done
cd "$out" && tar -czf ncu.tgz ncu_*.csv ncu_*.err && rm -f ncu_*.csv ncu_*.err && cd - >/dev/null
for p in "$out"/profile_*.txt; do echo "=== $(basename "$p") ==="; cat "$p"; done
echo "=== bench (second sample) ==="; cat "$out/bench2.log"; tail -3 "$out/bench2.err"
