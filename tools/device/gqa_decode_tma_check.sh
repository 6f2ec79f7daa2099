#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repository root: what the
# TMA loads of the keys-as-rows GQA decode kernel (issue 14 item 5;
# CudaOptions::decode_split_loads = tma, kernels/attention_split.cu's
# TmaKvRing) need before they can become the default. Binaries come prebuilt
# in CARRY_DIR: cuda_kernel_test and cuda_bench with their libraries
# (tools/device/build_carry.sh --no-cli makes a superset), loose or packed as
# CARRY_DIR/bin.tar.xz (unpacked into CARRY_DIR/u). Logs go to $OUT (and one
# tarball of them); the last thing printed is the table.
#
#   CARRY_DIR=.devcarry/gqa-tma tools/device/gqa_decode_tma_check.sh
#
# PARTS (default "tests sweep ncu") picks the parts below, so that a call that
# would pass the device tool's 10 minutes can be split in two:
# PARTS=tests, then PARTS="sweep ncu".
#
# 1. CudaDecodeAttention.*, a process and a timeout a test (an mbarrier that
#    never completes hangs its test, not the rest), the TMA-specific tests
#    first: every case runs the keys-as-rows kernel under cp.async and TMA
#    loads and the heads-as-rows kernel; then the CudaAttention decode cases
#    (default loads);
# 2. cuda_bench --decode-sweep-loads: every sweep case (8-64 x 8k-128k, the
#    burst's step, mixed 64) at pages of 16 and 64, cp.async and TMA in
#    alternation, two rounds;
# 3. ncu (where installed) of the split kernel at 8 x 8k, pages of 16, under
#    each loader: duration, DRAM bytes and throughput, issue, eligible warps
#    and the main warp stall reasons (CSV), and the SpeedOfLight /
#    WarpStateStats / Occupancy / SchedulerStats sections of one launch.
set -uo pipefail
out=${OUT:-/tmp/gqa-tma}
logs=$out/logs
mkdir -p "$logs"
bin=${CARRY_DIR:-.devcarry/gqa-tma}
parts=" ${PARTS:-tests sweep ncu} "
. tools/device/carried_bin.sh
start_logs gqa_decode_tma

# 1. Tests.
case $parts in *" tests "*)
tests=$("$bin/cuda_kernel_test" --gtest_list_tests --gtest_filter='CudaDecodeAttention.*' |
  awk '/^  /{print $1}' | awk '{print (/Tma|Nan/ ? 0 : 1), $0}' | sort -s -k1,1 | cut -d' ' -f2)
for t in $tests; do
  timeout -s KILL 180 "$bin/cuda_kernel_test" --gtest_filter="CudaDecodeAttention.$t" > "$logs/test_$t.log" 2>&1
  rc=$?
  echo "CudaDecodeAttention.$t rc $rc$([ $rc = 137 ] && echo ' (KILLED: hung or over 180 s)') at ${SECONDS}s" |
    tee -a "$summary"
  [ $rc = 0 ] || grep -E "Failure|Expected|Which is|loads |error" "$logs/test_$t.log" | head -8
done
filter=""
for t in GraphReplayedDecodeSteps GraphDecodeStepsWithFusedRope GraphReplayedBatchOneDecode RowSplitsAtEdges; do
  filter="$filter:PrefillKernels/CudaAttention.$t/auto"
done
timeout -s KILL 180 "$bin/cuda_kernel_test" --gtest_filter="${filter#:}" --gtest_brief=1 > "$logs/attention_test.log" 2>&1
echo "CudaAttention decode cases rc $? at ${SECONDS}s" | tee -a "$summary"
finish
;; esac

# 2. The sweep, cp.async against TMA.
case $parts in *" sweep "*)
timeout -s KILL 300 "$bin/cuda_bench" --decode-sweep-loads > "$logs/sweep_loads.md" 2>&1
echo "sweep rc $? at ${SECONDS}s" | tee -a "$summary"
finish
;; esac

# 3. ncu at 8 x 8k, pages of 16 (the mode runs pages of 16 first): launches 4-6 of each loader's kernel.
stalls=""
for r in long_scoreboard barrier wait short_scoreboard mio_throttle lg_throttle math_pipe_throttle sleeping \
  not_selected selected branch_resolving no_instruction dispatch_stall; do
  stalls="$stalls,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
done
metrics="gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed"
metrics="$metrics,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__warps_eligible.avg.per_cycle_active"
metrics="$metrics,sm__warps_active.avg.pct_of_peak_sustained_active$stalls"
loaders="cp-async tma"
if [[ $parts == *" ncu "* ]] && command -v ncu > /dev/null; then
  for loads in $loaders; do
    timeout -s KILL 120 ncu --clock-control none -k regex:split_mma_keys -s 3 -c 3 --csv --print-units base \
      --metrics "$metrics" "$bin/cuda_bench" --decode-sweep-loads "8 x 8k" "$loads" \
      > "$logs/ncu_$loads.csv" 2> "$logs/ncu_$loads.err"
    echo "ncu metrics $loads rc $? at ${SECONDS}s" | tee -a "$summary"
    timeout -s KILL 120 ncu --clock-control none -k regex:split_mma_keys -s 3 -c 1 --section SpeedOfLight \
      --section WarpStateStats --section Occupancy --section SchedulerStats --section LaunchStats \
      "$bin/cuda_bench" --decode-sweep-loads "8 x 8k" "$loads" > "$logs/ncu_sections_$loads.txt" 2>&1
    echo "ncu sections $loads rc $? at ${SECONDS}s" | tee -a "$summary"
    finish
  done
elif [[ $parts == *" ncu "* ]]; then
  echo "ncu: not installed, skipped" | tee -a "$summary"
fi

echo
echo "=== ncu, split kernel at 8 x 8k, pages of 16 (sections: logs/ncu_sections_*.txt)"
for loads in $loaders; do
  grep -v "^==PROF==" "$logs/ncu_sections_$loads.txt" 2>/dev/null |
    grep -E "^  [a-z_]+kernel|Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Block Limit Shared|Eligible Warps|No Eligible|Issued Warp" |
    sed "s/^/$loads: /" | cut -c1-150
done
echo "=== ncu metrics (3 launches each; stalls: warps stalled per issued instruction)"
for loads in $loaders; do
  [ -s "$logs/ncu_$loads.csv" ] && python3 tools/device/ncu_metrics_table.py "$logs/ncu_$loads.csv" "$loads" |
    sed -E 's/smsp__average_warps_issue_stalled_([a-z_]+)_per_issue_active.ratio/\1/g'
done
echo "=== sweep (kernels only, % of HBM; rounds 1 and 2)"
[ -f "$logs/sweep_loads.md" ] && python3 - "$logs/sweep_loads.md" <<'PY'
import collections, re, sys
cells = collections.OrderedDict()  # (case, pages) -> {loads: [pct, ...]}
for line in open(sys.argv[1]):
    m = re.match(r"\| decode attention (.+?), 32/8 heads, pages of (\d+), split plan .*loads ([a-z-]+(?:, 3 stages)?), "
                 r"round \d, kernels only .*\| ([\d.]+)% of HBM, ([\d.]+) us", line)
    if m:
        case, pages, loads, pct, us = m.groups()
        cells.setdefault((case, pages), {}).setdefault(loads, []).append(f"{pct}% ({us} us)")
print("| case | pages | cp-async | tma | tma, 3 stages | tma-steal |")
print("|---|---|---|---|---|---|")
for (case, pages), by in cells.items():
    print(f"| {case} | {pages} | {' / '.join(by.get('cp-async', []))} | {' / '.join(by.get('tma', []))} | "
          f"{' / '.join(by.get('tma, 3 stages', []))} | {' / '.join(by.get('tma-steal', []))} |")
PY
echo "=== runs"
cat "$summary"
