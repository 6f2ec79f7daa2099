#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repository root: the checks
# of kernels built without a device (sessions 27-28), grouped to fit calls of
# under 10 minutes. CARRY_DIR holds bin.tar.xz from tools/device/pack_carry.sh
# (cuda_kernel_test, cuda_deepseek_v4_forward_test, cuda_golden_test,
# cuda_bench, deepseek_v4_forward_bench).
#
#   CARRY_DIR=.devcarry/s29 tools/device/waiting_checks.sh 1   # issue 18's indexer (formats 2, 14, 15),
#                                                              # MLA keys-as-M (issue 15), device sampling
#   CARRY_DIR=.devcarry/s29 tools/device/waiting_checks.sh 2   # cuda_bench --fp8-dense, the MoE weight multicast
#   CARRY_DIR=.devcarry/s29 tools/device/waiting_checks.sh 3   # the GQA decode's TMA loads (issue 14)
# Each part prints its summaries as it goes; full logs under $OUT.
set -uo pipefail
export CARRY_DIR=${CARRY_DIR:-.devcarry/s29}
base=${OUT:-/tmp/waiting-checks}
mkdir -p "$base"
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
case ${1:-1} in
  1)
    FORMATS="2 14 15" BENCH_RUNS=1 MODEL_FORMATS=2,14,15 OUT=$base/indexer \
      bash tools/device/deepseek_v4_indexer_check.sh > "$base/indexer.txt" 2>&1
    echo "##### indexer done at $(elapsed) s"; tail -40 "$base/indexer.txt"
    if [ "$(elapsed)" -lt 330 ]; then
      OUT=$base/mla bash tools/device/mla_keys_m_check.sh --no-ncu > "$base/mla.txt" 2>&1
      echo "##### mla done at $(elapsed) s"; tail -22 "$base/mla.txt"
    fi
    if [ "$(elapsed)" -lt 480 ]; then
      bin=$CARRY_DIR; . tools/device/carried_bin.sh
      timeout 60 "$bin/cuda_kernel_test" --gtest_filter='DeviceSampling.*' > "$base/sampling.txt" 2>&1
      echo "##### device sampling rc $? at $(elapsed) s"; grep -E "device sampling:|PASSED|FAILED" "$base/sampling.txt" | head -5
    fi
    ;;
  2)
    bin=$CARRY_DIR; . tools/device/carried_bin.sh
    timeout 150 "$bin/cuda_bench" --fp8-dense > "$base/fp8_dense.md" 2> "$base/fp8_dense.err"
    echo "##### fp8-dense rc $? at $(elapsed) s"; cat "$base/fp8_dense.md"; tail -3 "$base/fp8_dense.err"
    OUT=$base/moe bash tools/device/moe_fp8_wmc_check.sh > "$base/moe.txt" 2>&1
    echo "##### moe done at $(elapsed) s"; tail -30 "$base/moe.txt"
    ;;
  3)
    OUT=$base/gqa PARTS="tests sweep" bash tools/device/gqa_decode_tma_check.sh > "$base/gqa.txt" 2>&1
    echo "##### gqa done at $(elapsed) s"; tail -40 "$base/gqa.txt"
    ;;
  *) echo "usage: waiting_checks.sh 1|2|3" >&2; exit 2 ;;
esac
