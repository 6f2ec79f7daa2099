#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repository root: the MLA
# decode checks and timings of issue 15 in one call (session 17). Binaries
# come prebuilt in CARRY_DIR (cuda_kernel_test, cuda_golden_test and
# cuda_bench with their libraries, as tools/device/build_carry.sh --no-cli
# makes them), or packed as CARRY_DIR/bin.tar.xz. Logs go to $OUT; the last
# thing printed is the bench's table.
#
#   CARRY_DIR=.devcarry/mla tools/device/mla_decode_check.sh [--no-ncu]
#
# 1. cuda_kernel_test 'CudaMla*:*CudaMlaAttention*' (every MLA kernel set);
# 2. cuda_golden_test '*Deepseek*';
# 3. cuda_bench --mla-decode: every decode set side by side;
# 4. ncu: each kernel's GPU time over the first op calls of
#    `cuda_bench --mla-decode mma-16-heads-pairs` (the op's fixed kernels) and
#    the warp states of one of its decode launches at 64 x 8k.
# Every step has a time limit (KILL): a hang in a kernel cannot eat the call.
set -uo pipefail
out=${OUT:-/tmp/mla-decode-check}
mkdir -p "$out"
bin=${CARRY_DIR:-.devcarry/mla}
if [ -f "$bin/bin.tar.xz" ]; then mkdir -p "$bin/bin" && tar -xJf "$bin/bin.tar.xz" -C "$bin/bin" && bin=$bin/bin; fi
# The tests read fixtures at the build checkout's path.
src=$(grep -a -o -m1 -E '/work/[A-Za-z0-9_.+-]+(/[A-Za-z0-9_.+-]+)*/build' "$bin/cuda_golden_test" | head -1 | sed 's|/build$||')
if [ -n "$src" ] && [ ! -e "$src/tests/fixtures" ]; then mkdir -p "$(dirname "$src")" && ln -sfn "$PWD" "$src"; fi
. tools/device/cudnn_env.sh
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/$bin:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee "$out/gpu.txt"
timeout -s KILL 150 stdbuf -oL "$bin/cuda_kernel_test" --gtest_brief=1 --gtest_filter='CudaMla*:*CudaMlaAttention*' \
  > "$out/kernel_test.log" 2>&1
echo "cuda_kernel_test exit $? ($(($(date +%s) - t0)) s)"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]|invariant" "$out/kernel_test.log" | head -30
timeout -s KILL 60 stdbuf -oL "$bin/cuda_golden_test" --gtest_brief=1 --gtest_filter='*Deepseek*' > "$out/golden_test.log" 2>&1
echo "cuda_golden_test exit $? ($(($(date +%s) - t0)) s)"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]" "$out/golden_test.log" | head -20
timeout -s KILL 60 "$bin/cuda_bench" --mla-decode > "$out/bench.log" 2>&1
bench_rc=$?
echo "cuda_bench exit $bench_rc ($(($(date +%s) - t0)) s)"
if [ "${1:-}" != --no-ncu ] && [ $bench_rc = 0 ]; then
  timeout -s KILL 45 ncu --clock-control none --metrics gpu__time_duration.sum -c 80 \
    "$bin/cuda_bench" --mla-decode mma-16-heads-pairs > "$out/ncu_times.log" 2>&1
  echo "ncu times exit $? ($(($(date +%s) - t0)) s)"
  timeout -s KILL 45 ncu --clock-control none -k regex:16_heads -s 3 -c 1 --section SpeedOfLight \
    --section WarpStateStats --section SchedulerStats --section Occupancy \
    "$bin/cuda_bench" --mla-decode mma-16-heads-pairs > "$out/ncu_tma.log" 2>&1
  echo "ncu stalls exit $? ($(($(date +%s) - t0)) s)"
  grep -E "Duration|SM Frequency|DRAM Throughput|Compute \(SM\)|Issued Warp" "$out/ncu_tma.log" | head -8
  # Mean GPU time a launch, by kernel, in launch order.
  python3 - "$out/ncu_times.log" <<'PY' || true
import collections, re, sys
name, total, count = None, collections.OrderedDict(), collections.Counter()
scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"\s+(\S.*?) \(\d+, \d+, \d+\)x\(\d+, \d+, \d+\)", line)
    if m:
        name = m.group(1)[:90]
        continue
    m = re.search(r"gpu__time_duration.sum\s+(\S+)\s+([\d.,]+)", line)
    if m and name:
        total[name] = total.get(name, 0.0) + float(m.group(2).replace(",", "")) * scale.get(m.group(1), 1.0)
        count[name] += 1
for k, v in total.items():
    print(f"{v / count[k]:9.1f} us  x{count[k]:3d}  {k}")
PY
fi
echo "total $(($(date +%s) - t0)) s"
echo
grep -E "^\| MLA decode" "$out/bench.log"
