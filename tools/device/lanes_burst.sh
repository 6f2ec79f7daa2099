#!/usr/bin/env bash
# The long-context burst (burst_bench.sh) under several serve arrangements in
# one call, e.g. the decode lane on 16 SMs against prefill-first, with the
# per-chat rates (burst_chat_rates.py), the cuDNN plans built before and while
# serving, and where the prefill lane's time went (lane_steps.py).
#
# On the GPU machine, from the repository root, binaries in .devcarry/cuda
# (tools/device/build_carry.sh), with the cuDNN of ../shared/DEVICE.md:
#   . tools/device/cudnn_env.sh
#   tools/device/lanes_burst.sh
# RUNS: arrangements separated by ';', each label|policy|serve flags. OUT: where
# each label's burst_bench.sh output goes ($OUT/<label>/). PER_POLICY_S as there.
set -uo pipefail
out=${OUT:-/tmp/lanes-burst}
runs=${RUNS:-"sms16|sluice|--decode-lane sms:16;pf|prefill-first|;hp|sluice|--decode-lane high-priority"}
IFS=';' read -r -a arrangements <<<"$runs"
for arrangement in "${arrangements[@]}"; do
  IFS='|' read -r label policy flags <<<"$arrangement"
  mkdir -p "$out/$label"
  started=$(date +%s)
  POLICIES=$policy SERVE_FLAGS="$flags" OUT="$out/$label" tools/device/burst_bench.sh >"$out/$label/run.log" 2>&1
  echo "$label ($policy $flags): $(($(date +%s) - started)) s"
  grep -h "plans built before serving" "$out/$label/logs.txt" | sed 's/.*prefill attention/  prefill attention/'
  echo "  cuDNN plans built while serving: $(grep -c 'SDPA plan (' "$out/$label/logs.txt")"
done
for f in "$out"/*/burst-*.json; do python3 tools/device/burst_chat_rates.py "$f"; done
for f in "$out"/*/steps-*.jsonl; do python3 tools/device/lane_steps.py "$f"; done
