#!/usr/bin/env bash
# Decode through the whole server, inline against --async-scheduling: the
# Llama-3-8B-shape random bf16 model on one H200 (`sluice serve --device
# cuda`), loaded by `sluice bench serve` at batch 1 @ 4k and batch 64 @ 8k
# context. The step rows of cuda_bench time the model alone; these time what a
# client sees, host work included, so their difference per mode is what async
# scheduling hides. Prints one table last.
#
# On the GPU machine (through the device tool), from the repository root,
# binaries from .devcarry/cuda (tools/device/build_carry.sh):
#   tools/device/async_bench.sh
# On the development machine, a dry run against the simulator (a 1-layer model
# with the 8B's vocabulary, priced as Llama-3-8B on an H200, paced in real time):
#   tools/device/async_bench.sh --sim [SLUICE_BINARY]
# Writes $OUT/async-<case>-<mode>.json, $OUT/logs.txt and $OUT/table.md.
#
# Knobs (environment): CASES ("b1x4k b64x8k"), OUTPUT_LEN (256), MODEL_DIR, PORT.
set -uo pipefail

cases=${CASES:-"b1x4k b64x8k"}
output_len=${OUTPUT_LEN:-256}
port=${PORT:-8766}
mode=cuda
if [ "${1:-}" = "--sim" ]; then mode=sim; fi
if [ $mode = cuda ]; then
  out=${OUT:-/tmp/async-bench}
  bin=.devcarry/cuda/sluice
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64:.devcarry/cuda:${LD_LIBRARY_PATH:-}
  model=${MODEL_DIR:-$HOME/sluice-llama3-8b-random}
else
  out=${OUT:-/tmp/async-bench-sim}
  bin=${2:-build/sluice}
  model=${MODEL_DIR:-/tmp/sluice-sim-llama3-vocab}
fi
# shellcheck source=serve_lib.sh
source "$(dirname "$0")/serve_lib.sh"
start_log
ensure_model 131072 || exit 1

# case -> bench flags: batch (concurrency) x context (prompt tokens).
case_flags() {
  case $1 in
    b1x4k) echo "--num-prompts 4 --input-len 4096 --max-concurrency 1" ;;
    b64x8k) echo "--num-prompts 64 --input-len 8192 --max-concurrency 64" ;;
    *) echo "unknown case $1" >&2; return 1 ;;
  esac
}

for c in $cases; do
  read -r -a bench_flags <<<"$(case_flags "$c")" || exit 1
  for scheduling in inline async; do
    serve_args=(serve --model "$model" --port "$port" --max-model-len 16384 --max-num-seqs 64
                --served-model-name llama3-8b --stats-log-interval 5)
    [ $scheduling = async ] && serve_args+=(--async-scheduling) || serve_args+=(--no-async-scheduling)
    if [ $mode = cuda ]; then
      serve_args+=(--device cuda)
    else
      serve_args+=(--device sim --sim-profile llama-3-8b --sim-speed 1 --kv-cache-memory 100000000000)
    fi
    say "$c $scheduling: sluice ${serve_args[*]}"
    serve_log=$(mktemp)
    if ! start_server "$serve_log" "${serve_args[@]}"; then
      say "$c $scheduling: the server exited during start-up:"
      tail -20 "$serve_log" | tee -a "$log"
      continue
    fi
    echo "===== bench $c $scheduling =====" >>"$log"
    "$bin" bench serve --base-url "http://127.0.0.1:$port" --wait-for-server-s 300 --workload random --seed 1 \
      --token-id-max 400 --ignore-eos --output-len "$output_len" "${bench_flags[@]}" --label "$c $scheduling" \
      --output-json "$out/async-$c-$scheduling.json" --no-progress 2>&1 | tee -a "$log"
    stop_server
    { echo "===== serve $c $scheduling ====="; cat "$serve_log"; } >>"$log"
    rm -f "$serve_log"
  done
done

python3 - "$out" $cases <<'PY' | tee "$out/table.md"
import json, os, sys
out, cases = sys.argv[1], sys.argv[2:]
print("| case | TPOT p50 inline (ms) | TPOT p50 async (ms) | output tok/s inline | output tok/s async | async / inline |")
print("|---|---|---|---|---|---|")
for c in cases:
    runs = {}
    for s in ("inline", "async"):
        path = os.path.join(out, f"async-{c}-{s}.json")
        runs[s] = json.load(open(path))["summary"] if os.path.exists(path) else None
    if not all(runs.values()):
        print(f"| {c} | (missing run) | | | | |")
        continue
    i, a = runs["inline"], runs["async"]
    print(f"| {c} | {i['tpot_ms']['p50']:.2f} | {a['tpot_ms']['p50']:.2f} | {i['output_tokens_per_s']:.0f} "
          f"| {a['output_tokens_per_s']:.0f} | {a['output_tokens_per_s'] / i['output_tokens_per_s']:.3f} |")
PY
