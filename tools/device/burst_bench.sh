#!/usr/bin/env bash
# The user report's long-context burst, reproduced on one H200: a
# Llama-3-8B-shape random bf16 model served by `sluice serve --device cuda`,
# once per scheduling policy, with `sluice bench serve --workload burst`
# (8 prompts of 16k-128k tokens arriving within 5 s while 8 chats decode).
# Prints one side-by-side table last.
#
# On the GPU machine (through the device tool), from the repository root,
# binaries from .devcarry/cuda (tools/device/build_carry.sh):
#   tools/device/burst_bench.sh
# Writes $OUT/burst-<policy>.json and .svg, $OUT/steps-<policy>.jsonl (one line
# per engine step: `sluice calibrate --trace` fits the cost model to it),
# $OUT/logs.txt and $OUT/table.md.
#
# Another model (any architecture `sluice serve --device cuda` takes, e.g. the
# DeepSeek-V3 FP8 checkpoint of tools/device/deepseek_serve.sh):
#   tools/device/burst_bench.sh --model DIR
# Its lengths then follow its config's max_position_embeddings (MAX_MODEL_LEN):
# long prompts from MAX_MODEL_LEN / 8 to MAX_MODEL_LEN - OUTPUT_LEN, unless
# MIN_LEN / MAX_LEN say otherwise.
#
# Simulator calibration, on the development machine, with the JSONs brought
# back in DIR: the same workload against `sluice serve --device sim` (the
# roofline cost model of Llama-3-8B on an H200, paced to the wall clock) and
# `sluice bench compare` per policy:
#   tools/device/burst_bench.sh --sim DIR [SLUICE_BINARY]
#
# Knobs (environment): POLICIES, MIN_LEN, MAX_LEN, NUM_PROMPTS, CHATS,
# OUTPUT_LEN, CHAT_OUTPUT_LEN, PER_POLICY_S (cancel a policy's run after this
# long), MODEL_DIR, SIM_SPEED (sim mode), SIM_KV_BYTES (sim mode),
# SERVE_FLAGS (more `sluice serve` flags for every run, e.g. --async-scheduling), SLUICE_BIN (cuda
# mode: the binary, .devcarry/cuda/sluice by default).
set -uo pipefail

policies=${POLICIES:-"sluice prefill-first decode-first-token-budget"}
num_prompts=${NUM_PROMPTS:-8}
chats=${CHATS:-8}
output_len=${OUTPUT_LEN:-128}
chat_output_len=${CHAT_OUTPUT_LEN:-1024}
per_policy_s=${PER_POLICY_S:-140}
port=${PORT:-8765}
mode=cuda
reference_dir=""
model_arg=""
served_name=llama3-8b
if [ "${1:-}" = "--sim" ]; then
  mode=sim
  reference_dir=${2:?usage: burst_bench.sh --sim DIR_WITH_GPU_JSONS [SLUICE_BINARY]}
elif [ "${1:-}" = "--model" ]; then
  model_arg=${2:?usage: burst_bench.sh --model DIR}
  [ -f "$model_arg/config.json" ] || { echo "no config.json in $model_arg" >&2; exit 1; }
  served_name=$(basename "$model_arg")
fi
if [ -n "$model_arg" ]; then
  max_model_len=${MAX_MODEL_LEN:-$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['max_position_embeddings'])" "$model_arg/config.json")}
  min_len=${MIN_LEN:-$((max_model_len / 8))}
  max_len=${MAX_LEN:-$((max_model_len - output_len))}
else
  min_len=${MIN_LEN:-16384}
  # Prompt + output must fit max_model_len 131072: the longest prompt is 128k - 128.
  max_len=${MAX_LEN:-130944}
  max_model_len=${MAX_MODEL_LEN:-131072}
fi

# Prompt ids stay below 400: inside the vocabulary of make-model's tokenizer,
# which the server checks prompts against (the ids' values cost nothing).
if [ $mode = cuda ]; then
  out=${OUT:-/tmp/burst-bench}
  bin=${SLUICE_BIN:-.devcarry/cuda/sluice}
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64:.devcarry/cuda:${LD_LIBRARY_PATH:-}
  model=${model_arg:-${MODEL_DIR:-$HOME/sluice-llama3-8b-random}}
else
  out=${OUT:-$reference_dir/sim}
  bin=${3:-build/sluice}
  model=${MODEL_DIR:-/tmp/sluice-sim-llama3-vocab}
fi
# shellcheck source=serve_lib.sh
source "$(dirname "$0")/serve_lib.sh"
start_log
ensure_model "$max_model_len" || exit 1
[ $mode = cuda ] && nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv | tee -a "$log"

for policy in $policies; do
  serve_args=(serve --model "$model" --port "$port" --scheduling-policy "$policy" --max-model-len "$max_model_len"
              --served-model-name "$served_name" --stats-log-interval 5 --step-trace "$out/steps-$policy.jsonl")
  read -r -a extra_flags <<<"${SERVE_FLAGS:-}"
  serve_args+=("${extra_flags[@]}")
  bench_speedup=1
  if [ $mode = cuda ]; then
    serve_args+=(--device cuda)
  else
    sim_speed=${SIM_SPEED:-4}
    # The H200 server's KV cache: 54,848 blocks of 16 tokens x 128 KB (S11-lead-c).
    # Less (100 GB until session 11) leaves the burst's last prompt waiting for
    # blocks that the H200 had: prefill-first's chats then decode in a gap the
    # H200 never had.
    serve_args+=(--device sim --sim-profile llama-3-8b --sim-speed "$sim_speed"
                 --kv-cache-memory "${SIM_KV_BYTES:-115000000000}")
    bench_speedup=$sim_speed
  fi
  say "policy $policy: sluice ${serve_args[*]}"
  serve_log=$(mktemp)
  if ! start_server "$serve_log" "${serve_args[@]}"; then
    say "policy $policy: the server exited during start-up:"
    tail -20 "$serve_log" | tee -a "$log"
    continue
  fi
  say "policy $policy: server listening"
  echo "===== bench $policy =====" >>"$log"
  "$bin" bench serve --base-url "http://127.0.0.1:$port" --wait-for-server-s 300 --workload burst --seed 1 \
    --token-id-max 400 --num-prompts "$num_prompts" --min-input-len "$min_len" --max-input-len "$max_len" \
    --output-len "$output_len" --chats "$chats" --chat-output-len "$chat_output_len" \
    --server-speedup "$bench_speedup" --max-duration-s "$per_policy_s" \
    --label "$policy ($mode)" --output-json "$out/burst-$policy.json" --plot "$out/burst-$policy.svg" --no-progress \
    2>&1 | tee -a "$log"
  # What the online cost correction learned (per term: measured / predicted
  # step time): the calibration of the simulator's H200 reads it from here.
  { echo "===== metrics $policy ====="
    python3 -c "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())" \
      "http://127.0.0.1:$port/metrics" | grep -E "cost_model_correction|step_time_seconds|engine_steps|max_step_seconds" ; } >>"$log" 2>&1
  stop_server
  { echo "===== serve $policy ====="; cat "$serve_log"; } >>"$log"
  rm -f "$serve_log"
  say "policy $policy: done"
done

if [ $mode = sim ]; then
  for policy in $policies; do
    [ -f "$reference_dir/burst-$policy.json" ] && [ -f "$out/burst-$policy.json" ] || continue
    echo "### $policy: GPU (reference) vs sim (predicted)" | tee -a "$out/calibration.md"
    "$bin" bench compare "$reference_dir/burst-$policy.json" "$out/burst-$policy.json" \
      --output-json "$out/calibration-$policy.json" | tee -a "$out/calibration.md"
  done
fi

# The side-by-side table.
python3 - "$out" $policies <<'PY' | tee "$out/table.md"
import json, os, sys
out, policies = sys.argv[1], sys.argv[2:]
print("| policy | TTFT p50 (s) | TTFT p99 (s) | longest decode stall (s) | zero-decode seconds "
      "| decode tok/s during burst | burst done at (s) | completed | text chunks / tokens |")
print("|---|---|---|---|---|---|---|---|---|")
for p in policies:
    path = os.path.join(out, f"burst-{p}.json")
    if not os.path.exists(path):
        print(f"| {p} | (no report) | | | | | | | |")
        continue
    s = json.load(open(path))["summary"]
    print(f"| {p} | {s['ttft_ms']['p50']/1000:.2f} | {s['ttft_ms']['p99']/1000:.2f} "
          f"| {s['longest_decode_stall_ms']/1000:.2f} | {s['num_zero_decode_seconds']} "
          f"| {s['decode_tokens_per_s_during_foreground']:.0f} | {s['foreground_end_ms']/1000:.1f} "
          f"| {s['num_completed']}/{s['num_foreground']} | {s['num_output_chunks']}/{s['num_output_tokens']} |")
# Gaps are measured between text chunks: with far fewer chunks than tokens
# (tokens without text), TTFT and stalls are not per token.
for p in policies:
    path = os.path.join(out, f"burst-{p}.json")
    if os.path.exists(path):
        s = json.load(open(path))["summary"]
        if s["num_output_chunks"] * 11 < s["num_output_tokens"] * 10:
            print(f"WARNING {p}: {s['num_output_tokens']} tokens arrived in {s['num_output_chunks']} text chunks; "
                  "timings are per chunk, not per token")
PY
say "total"
