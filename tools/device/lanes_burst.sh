#!/usr/bin/env bash
# The long-context burst (burst_bench.sh) under several serve arrangements in
# one call, e.g. the decode lane on 16 SMs against prefill-first, with the
# per-chat rates (burst_chat_rates.py), the cuDNN plans and the decode lane's
# warm-up before serving, slow captures and growths while serving, and where
# each lane's time went (lane_steps.py).
#
# On the GPU machine, from the repository root, binaries in .devcarry/cuda
# (tools/device/build_carry.sh), with the cuDNN of ../shared/DEVICE.md:
#   . tools/device/cudnn_env.sh
#   tools/device/lanes_burst.sh
# RUNS: arrangements separated by ';', each label|policy|serve flags. OUT: where
# each label's files end up, packed as $OUT/<label>.tar.xz (the device tool
# brings back a few files per call). PER_POLICY_S and MODEL_DIR as in
# burst_bench.sh; RUN_S bounds each arrangement (default 300 s; MODEL_S more,
# default 120, for the one that writes the model).
set -uo pipefail
out=${OUT:-/tmp/lanes-burst}
work=$(mktemp -d)
runs=${RUNS:-"sms16|sluice|--decode-lane sms:16;pf|prefill-first|;hp|sluice|--decode-lane high-priority"}
IFS=';' read -r -a arrangements <<<"$runs"
mkdir -p "$out"
for arrangement in "${arrangements[@]}"; do
  IFS='|' read -r label policy flags <<<"$arrangement"
  dir="$work/$label"
  mkdir -p "$dir"
  started=$(date +%s)
  # The first arrangement also writes the model when it is missing (80-95 s
  # on the H200): that time is not the arrangement's (S18-lead-4 was cut by it).
  bound=${RUN_S:-300}
  [ -e "${MODEL_DIR:-$HOME/sluice-llama3-8b-random}/config.json" ] || bound=$((bound + ${MODEL_S:-120}))
  POLICIES=$policy SERVE_FLAGS="$flags" OUT="$dir" timeout "$bound" tools/device/burst_bench.sh >"$dir/run.log" 2>&1
  echo "$label ($policy $flags): rc=$? $(($(date +%s) - started)) s"
  grep -h "plans built before serving\|warmed before serving\|an SM group of\|two step loops" "$dir/logs.txt" | sed 's/^\[[^]]*\] \[info\] /  /'
  echo "  slow growths: $(grep -c 'step buffer grew\|during a graph capture' "$dir/logs.txt"), slow captures:" \
    "$(grep -c 'decode graph of' "$dir/logs.txt")"
  for f in "$dir"/burst-*.json; do [ -f "$f" ] && python3 tools/device/burst_chat_rates.py "$f"; done
  for f in "$dir"/steps-*.jsonl; do [ -f "$f" ] && python3 tools/device/lane_steps.py "$f"; done
  # The SVG plots stay in the tarball, for docs/plots.
  tar -cJf "$out/$label.tar.xz" -C "$work" "$label"
done
rm -rf "$work"
