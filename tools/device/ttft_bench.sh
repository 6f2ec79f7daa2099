#!/usr/bin/env bash
# Runs on the GPU machine (through the device tool), from the repository root:
# the server's share of time-to-first-token for a ~300k-token prompt
# (bench/server/ttft_long_prompt.py) on that machine's idle CPUs, where
# scheduling noise from other work on the 2-core development box is absent.
# The simulator backend is used; no GPU is touched. Prepare the carry here:
#
#   mkdir -p .devcarry/server && cp build/sluice .devcarry/server/ && tools/device/carry_libs.sh .devcarry/server
#
#   tools/device/ttft_bench.sh [rounds=9]      (run with carry [".devcarry/server"])
set -euo pipefail
out=${OUT:-/tmp/ttft-bench}
mkdir -p "$out"
bin=${CARRY_DIR:-.devcarry/server}
export LD_LIBRARY_PATH=$PWD/$bin:${LD_LIBRARY_PATH:-}
nproc
python3 bench/server/ttft_long_prompt.py "$bin/sluice" 300000 "${1:-9}" | tee "$out/ttft.json" |
  grep -E '"(server_overhead_ms|server_split|prompt_tokens|median_server_overhead_ms|max_server_overhead_ms)"'
