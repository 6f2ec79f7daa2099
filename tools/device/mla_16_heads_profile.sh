#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repository root: where the
# 16-head MLA decode kernels spend their time. The pairs form's bench rows
# (MlaKernels::mma_16_heads_pairs, two 4-warp blocks an SM), then one 64 x 8k
# launch at 16 heads of PROFILE_SET (default: the pairs form) under ncu's full
# set, its warp-state summary, and its SASS with the stall samples of each
# instruction (the development machine has neither ncu nor cuobjdump).
# CARRY_DIR holds bin.tar.xz with cuda_bench.
#
#   CARRY_DIR=.devcarry/s39 tools/device/mla_16_heads_profile.sh
#
# $OUT gets the report, the source page as CSV and the kernel's SASS; printed
# last: duration, throughputs, warp states and the instructions that collect
# the most stall samples.
set -uo pipefail
out=${OUT:-/tmp/mla-16-heads-profile}
mkdir -p "$out"
bin=${CARRY_DIR:-.devcarry/s39}
. tools/device/carried_bin.sh
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
set_name=${PROFILE_SET:-mma-16-heads-pairs}
timeout -s KILL 100 "$bin/cuda_bench" --mla-decode mma-16-heads-pairs > "$out/bench_pairs.md" 2>&1
echo "bench mma-16-heads-pairs exit $? ($(($(date +%s) - t0)) s)"
grep -E "16 heads" "$out/bench_pairs.md" | cut -d'|' -f2-4
# The bench's first 16-head launches are the 64 x 8k op (a warm-up, then the timed runs); -s 2 skips
# two of them.
timeout -s KILL 240 ncu --clock-control none -k regex:decode_16_heads -s 2 -c 1 --set full \
  --import-source no -f -o "$out/mla16" "$bin/cuda_bench" --mla-decode "$set_name" > "$out/ncu_run.log" 2>&1
echo "ncu exit $? ($(($(date +%s) - t0)) s)"
ncu -i "$out/mla16.ncu-rep" --page details > "$out/details.txt" 2>&1
ncu -i "$out/mla16.ncu-rep" --page source --csv --print-source sass > "$out/source_sass.csv" 2>&1
echo "source page exit $? ($(wc -l < "$out/source_sass.csv") lines)"
if command -v cuobjdump > /dev/null || [ -x /usr/local/cuda/bin/cuobjdump ]; then
  cuobjdump=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
  "$cuobjdump" -sass -fun decode_16_heads "$bin/cuda_bench" > "$out/kernel.sass" 2>&1 ||
    "$cuobjdump" -sass "$bin/cuda_bench" 2>/dev/null | awk '/Function : .*decode_16_heads/,/\.\.\.\.\.\.\.\.\.\./' > "$out/kernel.sass"
  echo "sass: $(wc -l < "$out/kernel.sass") lines"
fi
grep -E "Duration|SM Frequency|DRAM Throughput|Memory Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Compute \(SM\) Throughput|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Registers Per|Shared Memory Configuration|Bank Conflicts|Achieved Occupancy" \
  "$out/details.txt" | head -40
# The stall reasons of the warp-state section, largest first.
grep -iE "stall|cycles being stalled|on average, each warp" "$out/details.txt" | head -20
python3 - "$out/source_sass.csv" << 'EOF'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
head = next((i for i, r in enumerate(rows) if any("Source" == c for c in r)), None)
if head is None:
    sys.exit("no source table")
cols, body = rows[head], rows[head + 1:]
src = cols.index("Source")
samp = next((i for i, c in enumerate(cols) if c.startswith("Warp Stall Sampling (All")), None)
if samp is None:
    sys.exit("no stall sampling column: " + ", ".join(cols))
def value(r):
    try:
        return float(r[samp].replace(",", ""))
    except (ValueError, IndexError):
        return 0.0
total = sum(value(r) for r in body) or 1.0
print(f"stall samples {total:.0f}; the top 40 instructions (share, address, SASS):")
for r in sorted(body, key=value, reverse=True)[:40]:
    print(f"{100 * value(r) / total:5.1f}% {r[0]:>8} {r[src][:110]}")
EOF
echo "total $(($(date +%s) - t0)) s"
