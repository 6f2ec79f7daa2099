#!/usr/bin/env bash
# DeepSeek-V3 end to end on one H200 (issue 15): a truncated-depth, full-width
# random FP8 checkpoint (hidden 7168, 128 heads, 256 experts top-8, moe
# intermediate 2048; 3 dense + MOE_LAYERS MoE layers) served by
# `sluice serve --device cuda`, then: `sluice plan` on it, a chat completion, a
# streamed one, a tool-call request (tools + tool_choice auto through the
# deepseek_v3 parser), the same and more through the official openai npm
# client where node is (openai_client_check.mjs), and short timings with `sluice bench serve` (decode at
# concurrency 1 and 64, prefill of 8k-token prompts). Prints a table last.
#
# On the GPU machine (through the device tool), from the repository root,
# binaries from .devcarry/cuda (tools/device/build_carry.sh):
#   tools/device/deepseek_serve.sh [make|serve|all]     (default all)
# "make" only writes the checkpoint (kept in MODEL_DIR while the machine stays
# warm), "serve" expects it; split them when make-model and the serving runs
# do not fit one command's time limit together.
# Then the burst workload against the same checkpoint:
#   tools/device/burst_bench.sh --model "$HOME/sluice-deepseek-v3-fp8" (see its header for lengths)
#
# Size (FP8 linear weights at 1 byte; embedding and lm_head in bf16; kv_b_proj
# dequantized to bf16 on upload): a dense layer ~0.6 GB, a MoE layer ~11.5 GB
# (256 x 3 x 7168 x 2048 expert weights), embedding + lm_head 3.7 GB. 3 dense +
# 3 MoE: ~40 GB on disk and on the GPU, the rest of the 139 GiB for the KV cache
# (MLA: 576 bf16 a token a layer). 6 MoE layers (~75 GB) fit the GPU but not the
# single-GPU machine's 64 GiB disk: the script checks the disk first.
# make-model time: ~40 ns of CPU a value (random draw + e4m3 quantization),
# now on every core: 42 G values on the machine's 16 cores ~2 min, plus
# writing 40 GB (estimate from a 781 MB full-width slice on the development
# machine; the script prints the real time).
#
# Writes $OUT/logs.txt (everything), $OUT/make-model.log, $OUT/serve.log,
# $OUT/plan.txt, $OUT/requests.txt, $OUT/bench-*.json, $OUT/table.md.
# Knobs (environment): MOE_LAYERS (3), MODEL_DIR, PORT, MAX_MODEL_LEN (32768),
# SERVE_FLAGS (more `sluice serve` flags), BENCH_PROMPTS (64), PREFILL_PROMPTS (16); for a dry run
# of the serve phase on the development machine, on a tiny model made by hand:
# SLUICE_BIN=build/sluice DEVICE=cpu MODEL_DIR=DIR tools/device/deepseek_serve.sh serve
set -uo pipefail

phase=${1:-all}
case "$phase" in make | serve | all) ;; *) echo "usage: $0 [make|serve|all]" >&2; exit 2 ;; esac
out=${OUT:-/tmp/deepseek-serve}
bin=${SLUICE_BIN:-.devcarry/cuda/sluice}
device=${DEVICE:-cuda}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:.devcarry/cuda:${LD_LIBRARY_PATH:-}
moe_layers=${MOE_LAYERS:-3}
dense_layers=3
model=${MODEL_DIR:-$HOME/sluice-deepseek-v3-fp8}
port=${PORT:-8766}
max_model_len=${MAX_MODEL_LEN:-32768}
bench_prompts=${BENCH_PROMPTS:-64}
# shellcheck source=serve_lib.sh
source "$(dirname "$0")/serve_lib.sh"
start_log
if [ ! -x "$bin" ]; then say "no sluice binary at $bin (tools/device/build_carry.sh)"; exit 1; fi
[ "$device" = cuda ] && nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv | tee -a "$log"

make_seconds="(made earlier)"
if [ "$phase" != serve ] && [ ! -f "$model/config.json" ]; then
  # Bytes: FP8 linear weights + bf16 embedding/lm_head, with 5% for scales and norms.
  need_gb=$(python3 -c "
h, moe, dense = 7168, $moe_layers, $dense_layers
mla = h*1536 + 1536*128*192 + h*576 + 512*128*256 + 128*128*h
dense_mlp = 3*h*18432
moe_mlp = 257*3*h*2048 + 256*h
emb = 2*2*129280*h
print(round(1.05*(dense*(mla+dense_mlp) + moe*(mla+moe_mlp) + emb)/1e9, 1))")
  free_gb=$(df -BG --output=avail "$(dirname "$model")" | tail -1 | tr -dc 0-9)
  say "making $model: $dense_layers dense + $moe_layers MoE layers, ~$need_gb GB; $free_gb GB free on its disk"
  if python3 -c "import sys; sys.exit(0 if $need_gb + 2 < $free_gb else 1)"; then :; else
    say "not enough disk for the checkpoint: lower MOE_LAYERS"; exit 1
  fi
  start=$(date +%s)
  "$bin" make-model --arch deepseek_v3 --dtype fp8 --layers $((dense_layers + moe_layers)) \
    --dense-layers "$dense_layers" --hidden 7168 --heads 128 --intermediate 18432 --vocab 129280 \
    --q-lora-rank 1536 --kv-lora-rank 512 --qk-nope-head-dim 128 --qk-rope-head-dim 64 --v-head-dim 128 \
    --experts 256 --experts-per-token 8 --shared-experts 1 --moe-intermediate 2048 --expert-groups 8 \
    --topk-groups 4 --routed-scale 2.5 --max-position "$max_model_len" --yarn-factor 4 --shards 8 --seed 1 \
    --out "$model" >"$out/make-model.log" 2>&1
  status=$?
  make_seconds=$(($(date +%s) - start))
  cat "$out/make-model.log" >>"$log"
  say "make-model: exit $status after $make_seconds s; $(du -sh "$model" | cut -f1) on disk"
  [ $status -eq 0 ] || exit 1
fi
[ "$phase" = make ] && exit 0
if [ ! -f "$model/config.json" ]; then say "no checkpoint in $model: run '$0 make' first"; exit 1; fi

say "sluice plan --model $model"
"$bin" plan --model "$model" --max-model-len "$max_model_len" >"$out/plan.txt" 2>&1
say "plan: exit $?"
cat "$out/plan.txt" >>"$log"

serve_args=(serve --model "$model" --device "$device" --port "$port" --max-model-len "$max_model_len"
            --served-model-name deepseek-v3-random --enable-auto-tool-choice --tool-call-parser deepseek_v3
            --stats-log-interval 5)
read -r -a extra_flags <<<"${SERVE_FLAGS:-}"
serve_args+=("${extra_flags[@]}")
say "sluice ${serve_args[*]}"
start=$(date +%s)
if ! start_server "$out/serve.log" "${serve_args[@]}"; then
  say "the server exited during start-up:"
  tail -30 "$out/serve.log" | tee -a "$log"
  exit 1
fi
# Listening comes before the weights are loaded: wait for /health.
python3 - "$port" <<'PY'
import sys, time, urllib.request
for _ in range(600):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=5)
        sys.exit(0)
    except Exception:
        time.sleep(1)
sys.exit(1)
PY
load_seconds=$(($(date +%s) - start))
say "server healthy after $load_seconds s"

# The three requests, each checked for the shape of its answer (random
# weights: the text is noise, and a tool call is not expected, only accepted).
python3 - "$port" >"$out/requests.txt" 2>&1 <<'PY'
import json, sys, time, urllib.error, urllib.request
base = f"http://127.0.0.1:{sys.argv[1]}/v1"
model = "deepseek-v3-random"
def post(body):
    req = urllib.request.Request(base + "/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=300)
def chat(messages):
    t = time.time()
    r = json.load(post({"model": model, "messages": messages, "max_tokens": 32}))
    c = r["choices"][0]
    print(f"chat: {time.time() - t:.2f} s, finish {c['finish_reason']}, usage {r['usage']}, "
          f"text {c['message'].get('content')!r:.120}")
    return r["usage"]["completion_tokens"] > 0
def stream(messages):
    t = time.time()
    chunks, done, first = 0, False, None
    with post({"model": model, "messages": messages, "max_tokens": 32, "stream": True}) as s:
        for line in s:
            line = line.decode().strip()
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                chunks += 1
                first = first or time.time() - t
    print(f"stream: {chunks} chunks, first after {first or 0:.3f} s, [DONE] {done}, {time.time() - t:.2f} s")
    return done and chunks > 1
def tool_call(_):
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "weather in a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    t = time.time()
    r = json.load(post({"model": model, "max_tokens": 32, "tools": tools, "tool_choice": "auto",
                        "messages": [{"role": "user", "content": "Weather in Paris?"}]}))
    c = r["choices"][0]
    print(f"tools: {time.time() - t:.2f} s, finish {c['finish_reason']}, tool_calls {c['message'].get('tool_calls')}, "
          f"text {c['message'].get('content')!r:.80}")
    return "message" in c
def openai_client(messages):
    try:
        import openai
    except ImportError:
        print("python openai package: not here (urllib only; openai_client_check.mjs runs the npm client)")
        return True
    out = openai.OpenAI(base_url=base, api_key="none").chat.completions.create(
        model=model, messages=messages, max_tokens=8)
    print(f"openai client {openai.__version__}: finish {out.choices[0].finish_reason}")
    return True
messages = [{"role": "user", "content": "Say hello in three languages."}]
ok = True
for check in (chat, stream, tool_call, openai_client):
    try:
        ok &= check(messages)
    except urllib.error.HTTPError as e:
        print(f"{check.__name__}: HTTP {e.code}: {e.read().decode()[:400]}")
        ok = False
    except Exception as e:  # the next check still runs
        print(f"{check.__name__}: {type(e).__name__}: {e}")
        ok = False
print("requests:", "ok" if ok else "FAILED")
sys.exit(0 if ok else 1)
PY
requests_status=$?
tee -a "$log" <"$out/requests.txt"

# The same through the official openai npm client, where node and
# node_modules/openai are (waiting_checks.sh part 5 unpacks both from CARRY_DIR).
if command -v node >/dev/null && [ -d node_modules/openai ]; then
  node tools/device/openai_client_check.mjs "$port" deepseek-v3-random >"$out/openai_client.txt" 2>&1
  openai_status=$?
else
  echo "openai npm client: not run (no node or node_modules/openai here)" >"$out/openai_client.txt"
  openai_status=none
fi
tee -a "$log" <"$out/openai_client.txt"

# Timings through the server: decode at concurrency 1 and 64 (1k-token
# prompts, 128 tokens out), prefill of 8k-token prompts (1 token out). The
# prefill run draws its own prompts (seed 2): with seed 1 their first 1k
# tokens were the decode runs' prompts, prefix hits (S31-2). Its first
# prompt also builds the cuDNN plans; the rest are clean prefill steps, enough
# for `sluice calibrate` to fit gemm_compute.
bench() {
  local name=$1 seed=$2
  shift 2
  say "bench $name: $*"
  "$bin" bench serve --base-url "http://127.0.0.1:$port" --wait-for-server-s 60 --seed "$seed" --token-id-max 400 \
    --ignore-eos --label "$name" --output-json "$out/bench-$name.json" --no-progress "$@" >>"$log" 2>&1
}
bench decode-c1 1 --num-prompts 8 --input-len 1024 --output-len 128 --max-concurrency 1
bench decode-c64 1 --num-prompts "$bench_prompts" --input-len 1024 --output-len 128 --max-concurrency 64
bench prefill-8k 2 --num-prompts "${PREFILL_PROMPTS:-16}" --input-len 8192 --output-len 1 --max-concurrency 1
stop_server
cat "$out/serve.log" >>"$log"

python3 - "$out" "$make_seconds" "$load_seconds" "$requests_status" "$model" "$openai_status" <<'PY' | tee "$out/table.md"
import json, os, sys
out, make_s, load_s, requests_status, model, openai_status = sys.argv[1:7]
c = json.load(open(os.path.join(model, "config.json")))
layers, dense = c["num_hidden_layers"], c.get("first_k_dense_replace", 0)
quant = c.get("quantization_config", {}).get("quant_method", "bf16")
made = "made earlier" if make_s == "(made earlier)" else f"{make_s} s"
print(f"DeepSeek-V3 {quant}, hidden {c['hidden_size']}, {c['num_attention_heads']} heads, "
      f"{c.get('n_routed_experts')} experts top-{c.get('num_experts_per_tok')}, {dense} dense + {layers - dense} MoE "
      f"layers: make-model {made}, load {load_s} s, requests {'ok' if requests_status == '0' else 'FAILED'}, "
      f"openai npm client {dict(none='not run').get(openai_status, 'ok' if openai_status == '0' else 'FAILED')}")
print("| run | output tok/s | total tok/s | TTFT p50 (ms) | TPOT p50 (ms) | completed |")
print("|---|---|---|---|---|---|")
for name in ["decode-c1", "decode-c64", "prefill-8k"]:
    path = os.path.join(out, f"bench-{name}.json")
    if not os.path.exists(path):
        print(f"| {name} | (no report) | | | | |")
        continue
    s = json.load(open(path))["summary"]
    print(f"| {name} | {s['output_tokens_per_s']:.1f} | {s['total_tokens_per_s']:.1f} | {s['ttft_ms'].get('p50', 0):.1f} "
          f"| {s['tpot_ms'].get('p50', 0):.2f} | {s.get('num_completed', '?')} |")
PY
say "total"
