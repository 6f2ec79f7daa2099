#!/usr/bin/env bash
# The host KV tier on one H200 (issue 17's device target): a Llama-3-8B-shape
# random bf16 model (128 KiB of KV per token) served by `sluice serve --device
# cuda` with the GPU KV capped near 20 GB and a 60 GiB host tier, under a
# sessions workload whose prefixes overflow the GPU but fit in host RAM:
# SESSIONS sessions, each with its own PREFIX_LEN-token prefix (behind a shared
# system prompt), taking turns: the turn 0s arrive SESSION_INTERVAL_MS apart
# (about one 40k prefill each, so they do not queue), and each turn 1 THINK_MS
# after its turn 0 ended, by when every turn 0 is done and the session's
# prefix has left the GPU; so the turn 1s arrive as spaced as the turn 0s and
# a recomputed turn 1 costs what a turn 0 did. CHATS short chats decode
# throughout. Then:
#   - the same workload with the host tier off (--kv-offloading-size 0): the
#     returning turns recompute their prefix;
#   - the host link measured in the same session (host_link_bench: a plain
#     pinned copy, and the tier's own copy methods);
#   - both runs again on `--device sim` (the roofline of sluice's kernels on
#     one H200, h200_sluice_cuda, paced SIM_SPEED times faster), the
#     simulator's prediction of the same numbers.
# Prints one table last: host->device load rate from /metrics
# (sluice:kv_host_loaded_bytes_total / sluice:kv_host_load_seconds_total) vs
# the link, returning turns' TTFT with and without the tier, and the chats'
# longest inter-token gap (overall, and while returning turns load).
#
# On the GPU machine (through the device tool), from the repository root,
# binaries from .devcarry/cuda (tools/device/build_carry.sh):
#   tools/device/host_tier_bench.sh
# Writes $OUT/sessions-<run>.json, $OUT/metrics-<run>.txt, $OUT/serve-<run>.log,
# $OUT/host_link.md, $OUT/logs.txt and $OUT/table.md. About 7-8 minutes, 2 of
# them writing the 16 GB model.
#
# Knobs (environment): SESSIONS (12), PREFIX_LEN (40960 incl. the system
# prompt), SYSTEM_LEN (1024), TURN_LEN (256), OUTPUT_LEN (64), THINK_MS
# (42000), SESSION_INTERVAL_MS (3500), CHATS (6), CHAT_OUTPUT_LEN (4096),
# GPU_MEMORY_UTILIZATION (0.265: weights 16 GB + activations 3.4 GB + ~20 GB of KV of
# the 150 GB; the table reports the KV it got), OFFLOAD_GIB (60), RUNS
# ("cuda-tier cuda-recompute sim-tier sim-recompute"), SIM_SPEED (4),
# MODEL_DIR, SIM_MODEL_DIR, SERVE_FLAGS (more flags for every run),
# SIM_DECODE_LANE (sms:8, what cuda's serve resolves `auto` to for this model;
# "off" runs the sim arms on one loop).
set -uo pipefail

sessions=${SESSIONS:-12}
prefix_len=${PREFIX_LEN:-40960}
system_len=${SYSTEM_LEN:-1024}
turn_len=${TURN_LEN:-256}
output_len=${OUTPUT_LEN:-64}
think_ms=${THINK_MS:-42000}
session_interval_ms=${SESSION_INTERVAL_MS:-3500}
chats=${CHATS:-6}
chat_output_len=${CHAT_OUTPUT_LEN:-4096}
utilization=${GPU_MEMORY_UTILIZATION:-0.265}
offload_gib=${OFFLOAD_GIB:-60}
runs=${RUNS:-"cuda-tier cuda-recompute sim-tier sim-recompute"}
sim_speed=${SIM_SPEED:-4}
max_model_len=${MAX_MODEL_LEN:-49152}
port=${PORT:-8766}
out=${OUT:-/tmp/host-tier-bench}
carry=.devcarry/cuda
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$carry:${LD_LIBRARY_PATH:-}
bin=$carry/sluice
[ -x "$bin" ] || bin=${SLUICE_BINARY:-build/sluice}
cuda_model=${MODEL_DIR:-$HOME/sluice-llama3-8b-random}
sim_model=${SIM_MODEL_DIR:-/tmp/sluice-sim-llama3-vocab}

# shellcheck source=serve_lib.sh
source "$(dirname "$0")/serve_lib.sh"
start_log
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv | tee -a "$log"

if [ -x "$carry/host_link_bench" ]; then
  say "host link: host_link_bench"
  "$carry/host_link_bench" 2>&1 | tee "$out/host_link.md" | tee -a "$log"
fi

metrics() { python3 -c "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())" \
  "http://127.0.0.1:$port/metrics"; }

for run in $runs; do
  mode=${run%%-*}
  offload=$offload_gib
  [ "${run#*-}" = recompute ] && offload=0
  if [ "$mode" = cuda ]; then
    [ -x "$carry/sluice" ] || { say "$run: no CUDA sluice binary in $carry"; continue; }
    model=$cuda_model
  else
    model=$sim_model
  fi
  ensure_model "$max_model_len" || exit 1
  serve_args=(serve --model "$model" --port "$port" --max-model-len "$max_model_len" --served-model-name llama3-8b
              --stats-log-interval 5 --kv-offloading-size "$offload")
  read -r -a extra_flags <<<"${SERVE_FLAGS:-}"
  serve_args+=("${extra_flags[@]}")
  bench_speedup=1
  if [ "$mode" = cuda ]; then
    serve_args+=(--device cuda --gpu-memory-utilization "$utilization")
  else
    # The GPU run's KV, when it ran: the simulator models the same device tier.
    kv_bytes=${SIM_KV_BYTES:-}
    if [ -z "$kv_bytes" ] && [ -f "$out/metrics-cuda-tier.txt" ]; then
      kv_bytes=$(python3 - "$out/metrics-cuda-tier.txt" "$out/serve-cuda-tier.log" <<'PY'
import os, re, sys
t = open(sys.argv[1]).read()
blocks = re.search(r'(?m)^sluice:kv_cache_tier_capacity_blocks\{[^}]*tier="device"[^}]*\} ([0-9.e+]+)$', t)
# Tokens a block: serve's start-up line (cuda pages by 64 since session 18), else 16.
log = open(sys.argv[2]).read() if os.path.exists(sys.argv[2]) else ""
size = re.search(r"KV blocks of ([0-9]+) tokens", log)
print(int(float(blocks.group(1)) * (int(size.group(1)) if size else 16) * 131072) if blocks else "")
PY
)
    fi
    # Pages of 64 and the decode lane on 8 SMs, as cuda's serve runs (session
    # 18's defaults): the tier moves a page a copy.
    serve_args+=(--device sim --sim-profile llama-3-8b --sim-speed "$sim_speed" --kv-cache-memory "${kv_bytes:-21474836480}"
                 --block-size 64 --decode-lane "${SIM_DECODE_LANE:-sms:8}")
    bench_speedup=$sim_speed
  fi
  say "$run: $bin ${serve_args[*]}"
  serve_log="$out/serve-$run.log"
  if ! start_server "$serve_log" "${serve_args[@]}"; then
    say "$run: the server exited during start-up:"
    tail -20 "$serve_log" | tee -a "$log"
    continue
  fi
  say "$run: server listening"
  "$bin" bench serve --base-url "http://127.0.0.1:$port" --wait-for-server-s 300 --workload sessions --seed 1 \
    --token-id-max 400 --sessions "$sessions" --turns 2 --system-len "$system_len" \
    --session-prefix-len $((prefix_len - system_len)) --input-len "$turn_len" --output-len "$output_len" \
    --think-ms "$think_ms" --session-interval-ms "$session_interval_ms" --chats "$chats" \
    --chat-output-len "$chat_output_len" --server-speedup "$bench_speedup" --max-duration-s 240 --token-times \
    --label "$run" --output-json "$out/sessions-$run.json" --no-progress 2>&1 | tee -a "$log"
  metrics >"$out/metrics-$run.txt" 2>&1
  stop_server
  say "$run: done"
done

python3 - "$out" "$sim_speed" $runs <<'PY' | tee "$out/table.md"
import json, os, re, sys
out, sim_speed, runs = sys.argv[1], float(sys.argv[2]), sys.argv[3:]

def metric(text, name, labels=""):
    m = re.search(r"(?m)^" + re.escape(name) + r"(\{[^}]*" + re.escape(labels) + r"[^}]*\})? ([0-9.e+-]+)$", text)
    return float(m.group(2)) if m else None

link = None
sim_link = 55 * 0.9  # what the simulator models (h200_sluice_cuda: 55 GB/s x 0.9), when no link was measured
path = os.path.join(out, "host_link.md")
if os.path.exists(path):
    m = re.search(r"host_link_gbps ([0-9.]+) ([0-9.]+)", open(path).read())
    link = float(m.group(1)) if m else None

print("| run | GPU KV (GiB) | host loads (GiB) | load rate (GB/s) | of the link | returning TTFT p50 / max (s) "
      "| first-turn TTFT p50 (s) | chat max gap (ms) | chat max gap while loading (ms) | completed |")
print("|---|---|---|---|---|---|---|---|---|---|")
rows = {}
for run in runs:
    jpath, mpath = os.path.join(out, f"sessions-{run}.json"), os.path.join(out, f"metrics-{run}.txt")
    if not os.path.exists(jpath):
        print(f"| {run} | (no report) | | | | | | | | |")
        continue
    report = json.load(open(jpath))
    text = open(mpath).read() if os.path.exists(mpath) else ""
    blocks = metric(text, "sluice:kv_cache_tier_capacity_blocks", 'tier="device"')
    # Tokens a block, from serve's start-up line (cuda pages by 64 since session 18), else 16.
    lpath = os.path.join(out, f"serve-{run}.log")
    size = re.search(r"KV blocks of ([0-9]+) tokens", open(lpath).read()) if os.path.exists(lpath) else None
    block_tokens = int(size.group(1)) if size else 16
    loaded = metric(text, "sluice:kv_host_loaded_bytes_total") or 0.0
    load_s = metric(text, "sluice:kv_host_load_seconds_total") or 0.0
    # Load seconds are the server's wall clock; a paced sim runs sim_speed times faster than it models.
    if run.startswith("sim-"):
        load_s *= sim_speed
    rate = loaded / load_s / 1e9 if load_s > 0 else None
    recs = report["requests"]
    def ttft(r):
        return (r["first_token_ms"] - r["send_ms"]) / 1000 if r.get("first_token_ms") is not None else None
    back = sorted(t for r in recs if r["label"].endswith("turn 1") and (t := ttft(r)) is not None)
    first = sorted(t for r in recs if r["label"].endswith("turn 0") and (t := ttft(r)) is not None)
    loading = [(r["send_ms"], r["first_token_ms"]) for r in recs
               if r["label"].endswith("turn 1") and r.get("first_token_ms") is not None]
    gap = gap_loading = 0.0
    for r in recs:
        if r["role"] != "background":
            continue
        times = r.get("token_ms", [])
        for a, b in zip(times, times[1:]):
            gap = max(gap, b - a)
            if any(a < end and b > start for start, end in loading):
                gap_loading = max(gap_loading, b - a)
    p50 = lambda v: v[len(v) // 2] if v else float("nan")
    s = report["summary"]
    rows[run] = {"back": p50(back), "rate": rate}
    print(f"| {run} | {blocks * block_tokens * 131072 / 2**30 if blocks else float('nan'):.1f} | {loaded / 2**30:.1f} "
          f"| {rate if rate else float('nan'):.1f} | {100 * rate / (link or sim_link) if rate else float('nan'):.0f}% "
          f"| {p50(back):.2f} / {max(back) if back else float('nan'):.2f} | {p50(first):.2f} | {gap:.0f} | {gap_loading:.0f} "
          f"| {s['num_completed']}/{s['num_foreground']} |")
if link:
    print(f"\nhost link (plain pinned copy, host -> device): {link:.1f} GB/s")
for mode in ("cuda", "sim"):
    tier, rec = rows.get(f"{mode}-tier"), rows.get(f"{mode}-recompute")
    if tier and rec and rec["back"] > 0:
        print(f"{mode}: returning turn TTFT with the tier / recomputed = {tier['back'] / rec['back']:.3f} (target <= 0.2)")
cuda, sim = rows.get("cuda-tier"), rows.get("sim-tier")
if cuda and sim and cuda["back"] > 0:
    print(f"sim / GPU, returning turn TTFT p50: {sim['back'] / cuda['back']:.2f} (target within 0.8-1.2)")
    if cuda["rate"] and sim["rate"]:
        print(f"sim / GPU, load rate: {sim['rate'] / cuda['rate']:.2f}")
PY
say "total"
