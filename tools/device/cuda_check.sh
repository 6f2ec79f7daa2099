#!/usr/bin/env bash
# Runs on the GPU machine (through the device tool), from the repository root:
# the CUDA kernel tests, the golden tests, the benchmark and the torch
# baselines, in one call. Binaries come prebuilt in .devcarry/cuda (made by
# tools/device/build_carry.sh on the development machine). Logs go to $OUT;
# the last thing printed is the table.
#
#   tools/device/cuda_check.sh [--quick] [--skip-tests] [--skip-bench]
set -uo pipefail
out=${OUT:-/tmp/cuda-check}
mkdir -p "$out"
bin=.devcarry/cuda
# The test binaries look for fixtures and scratch space at the paths of the
# development checkout; make those paths lead here.
if [ ! -e /work/main/tests/fixtures ]; then mkdir -p /work && ln -sfn "$PWD" /work/main; fi
quick=""; tests=1; bench=1
for a in "$@"; do
  case $a in
    --quick) quick=--quick ;;
    --skip-tests) tests=0 ;;
    --skip-bench) bench=0 ;;
  esac
done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$bin:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv | tee "$out/gpu.txt"
status=0
if [ $tests = 1 ]; then
  for t in cuda_kernel_test cuda_golden_test; do
    # The golden test writes its tiny models under SLUICE_BINARY_DIR's scratch.
    "$bin/$t" --gtest_brief=1 2>&1 | tee "$out/$t.log" | tail -40
    rc=${PIPESTATUS[0]}
    echo "$t exit $rc"
    [ "$rc" = 0 ] || status=1
  done
fi
if [ $bench = 1 ]; then
  "$bin/cuda_bench" $quick 2>&1 | tee "$out/bench.md"
  PYTHONUNBUFFERED=1 python3 tools/device/torch_baselines.py $quick 2>&1 | tee "$out/torch.md"
  echo
  echo "=== table ==="
  cat "$out/bench.md" "$out/torch.md" | grep '^|'
fi
[ $tests = 1 ] && grep -h -E "^\[  (PASSED|FAILED) |tests? ran|FAILED TEST" "$out"/cuda_*_test.log | sort | uniq -c
exit $status
