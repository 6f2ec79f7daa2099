#!/usr/bin/env bash
# On the GPU machine: ncu over `cuda_bench --profile` (two eager Llama-3-8B
# decode steps at batch 1 x 4k, then GQA decode attention at 64 x 8k).
# Prints per-kernel time of the model step and the split-KV kernel's
# speed-of-light, occupancy and stall sections. Binaries from .devcarry/cuda.
set -uo pipefail
out=${OUT:-/tmp/cuda-profile}
mkdir -p "$out"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:.devcarry/cuda:${LD_LIBRARY_PATH:-}
b=.devcarry/cuda/cuda_bench
ncu --clock-control none --metrics gpu__time_duration.sum -c 1100 --csv "$b" --profile >"$out/kernels.csv" 2>"$out/ncu_kernels.err"
python3 - "$out/kernels.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head, rows = rows[0], rows[1:]
ki, vi, ii = head.index("Kernel Name"), head.index("Metric Value"), head.index("ID")
n = len(rows)
# The second decode step: the kernels after the first step's argmax, up to and
# including the second's (steps are identical).
ends = [i for i, r in enumerate(rows) if "argmax" in r[ki]]
step2 = rows[ends[0] + 1:ends[1] + 1] if len(ends) >= 2 else rows[n // 2:]
tot = collections.defaultdict(float); cnt = collections.Counter()
for r in step2:
    name = r[ki].split("(")[0][:70]
    tot[name] += float(r[vi].replace(",", "")) / 1e3; cnt[name] += 1
print(f"kernels profiled: {n}; second step: {len(step2)} kernels, {sum(tot.values()):.0f} us")
for name, us in sorted(tot.items(), key=lambda x: -x[1])[:25]:
    print(f"{us:9.1f} us  x{cnt[name]:4d}  {name}")
PY
ncu --clock-control none -k regex:split_mma -s 64 -c 1 --section SpeedOfLight --section Occupancy \
  --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats --section LaunchStats \
  "$b" --profile >"$out/split_kernel.txt" 2>&1
grep -v "^==PROF==" "$out/split_kernel.txt" | grep -E "Duration|Throughput|Occupancy|Registers|Shared Memory|Stall|Warp Cycles|Eligible|Issued|Block Limit|Grid Size|Waves|Bandwidth|Hit" | head -60
