#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repository root: the checks
# of session 29's defaults and of the targets they move, grouped to fit calls
# of under 10 minutes. CARRY_DIR holds bin.tar.xz from tools/device/pack_carry.sh
# (cuda_kernel_test, cuda_deepseek_v4_forward_test, cuda_golden_test,
# cuda_bench, deepseek_v4_forward_bench).
#
#   CARRY_DIR=.devcarry/s29 tools/device/waiting_checks.sh 0   # the goldens, then the kernel suite in six shards
#   CARRY_DIR=.devcarry/s29 tools/device/waiting_checks.sh 1   # issue 18's indexer share (formats 2 and 18)
#   CARRY_DIR=.devcarry/s29 tools/device/waiting_checks.sh 2   # cuda_bench --fp8-dense, the MoE weight multicast
#   CARRY_DIR=.devcarry/s29 tools/device/waiting_checks.sh 3   # the GQA decode sweep, cp.async against TMA; batch-1 decode (issue 14)
#   CARRY_DIR=.devcarry/s29 tools/device/waiting_checks.sh 4   # MLA decode: wgmma, 16 heads on mma.sync (MLA_KERNELS)
#   CARRY_DIR=.devcarry/s30cli tools/device/waiting_checks.sh 5   # DeepSeek-V3 served whole, then sluice calibrate
#   CARRY_DIR=.devcarry/s30cli tools/device/waiting_checks.sh 6   # the burst against it (after 5, same machine;
#                                                                 # alone, it makes the checkpoint first: MOE_LAYERS=0 is quickest)
#   CARRY_DIR=.devcarry/s35 tools/device/waiting_checks.sh 7      # the MoE layer at 4,096 tokens, x gathered / in slot order
#   CARRY_DIR=.devcarry/s36 tools/device/waiting_checks.sh 8      # every 128-slot loader in slot order; ncu of three
#   CARRY_DIR=.devcarry/s36 tools/device/waiting_checks.sh 9      # GQA decode: the split kernel alone (ncu) beside the op, its timeline
#   CARRY_DIR=.devcarry/s36 tools/device/waiting_checks.sh 10     # MLA prefill through cuDNN: prompts, chunks over cached prefixes
#   CARRY_DIR=.devcarry/s40c BASE_DIR=.devcarry/s40base tools/device/waiting_checks.sh 11  # this build's decode rows
#                                                                 # against a base cuda_bench, alternated
#   CARRY_DIR=.devcarry/s40d tools/device/waiting_checks.sh 12  # GQA decode: work stealing against tma, cp.async
#   CARRY_DIR=.devcarry/s41b BASE_DIR=.devcarry/s41 tools/device/waiting_checks.sh 13  # the MoE routing and plan
#                                                                 # kernels against a base cuda_bench, alternated
#   CARRY_DIR=.devcarry/s42 BASE_DIR=.devcarry/s41c tools/device/waiting_checks.sh 14  # every test not yet run
#                                                                 # on a GPU, the MoE layer against a base, --decode1
#   CARRY_DIR=.devcarry/s43b tools/device/waiting_checks.sh 15     # the MoE GEMM's wide tiles: tests, layer, dense
#   CARRY_DIR=.devcarry/s43c tools/device/waiting_checks.sh 16     # goldens + V4 suite, ncu of the MoE GEMMs
#   CARRY_DIR=.devcarry/s44b tools/device/waiting_checks.sh 17     # which operand reads gate_up's extra DRAM bytes
#   CARRY_DIR=.devcarry/s62 MAIN_DIR=.devcarry/s60b tools/device/waiting_checks.sh 23
#                                                                 # two-acc-async against main: suites, layer, probes
#   BASE_DIR=.devcarry/mb SWIGLU_DIR=.devcarry/f SPLIT_DIR=.devcarry/s tools/device/waiting_checks.sh 25
#                                                                 # S48-1: the fast SwiGLU and the split tiles (since reverted) against main
#   BASE_DIR=.devcarry/mb0 TRIM_DIR=.devcarry/hb CARRY_DIR=.devcarry/n tools/device/waiting_checks.sh 27
#                                                                 # S49-1: A boxes cut to a tile's rows, the narrow tail
#   CARRY_DIR=.devcarry/c tools/device/waiting_checks.sh 28   # the plan's odd couples against its pairs, one binary
#   CARRY_DIR=.devcarry/c tools/device/waiting_checks.sh 29   # the swapped MoE GEMM (swap-ab) against the default
#   CARRY_DIR=.devcarry/c tools/device/waiting_checks.sh 30   # cuda_bench --fp8-dense alone (cuBLASLt's best algorithms)
#   CARRY_DIR=.devcarry/s36 tools/device/waiting_checks.sh targets  # 7, 4, 3, 9, 10 and 1 with a summary last (one H200 call)
# Sessions 29-31 ran every part on an H100, and 1-4 once on an H200 (S31-6..S31-8); the targets
# are stated on the H200. Part 2 now times the MoE kernels twice, the second round reversed; part 3
# adds TMA with a ring of 3 tiles; part 5 returns its logs and step trace as v3_logs.tgz.
# Each part prints its summaries as it goes; full logs under $OUT.
set -uo pipefail
export CARRY_DIR=${CARRY_DIR:-.devcarry/s29}
base=${OUT:-/tmp/waiting-checks}
mkdir -p "$base"
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
# The GQA decode's rows of one cuda_bench binary, each line led by PREFIX:
#   sweep_rows BIN CASE [LOADS] PREFIX: the sweep's kernels-only rows (the 2-tile rings);
#   timeline_rows BIN CASE PREFIX: the split kernel's timeline, one launch a loader.
sweep_rows() {
  timeout 120 "$1/cuda_bench" --decode-sweep-loads "$2" ${3:+"$3"} 2>&1 | grep "kernels only" | grep -v "3 stages" |
    sed -E "s/.*split plan /$4/" | cut -c1-170
}
timeline_rows() {
  timeout 60 "$1/cuda_bench" --decode-timeline "$2" 2>&1 | grep -E "kernels only|timeline|steps between" |
    sed -E "s/.*split plan /$3/" | cut -c1-400
}
# The MoE GEMM's rows (parts 23, 25), each line led by TAG:
#   suite_result NAME: a gtest log's verdict ($base/NAME.txt) and its first failures;
#   moe_suites BIN NAME FILTER: BIN's cuda_kernel_test (FILTER) and cuda_golden_test side by side
#   ($base/testsNAME.txt, goldenNAME.txt), then their verdicts;
#   moe_compare ORDER PROBES: the layer of each tag in ORDER (alternated as written), then ncu's rows
#   of each probe in PROBES for each tag once; the part defines tag_bin TAG and tag_kernel TAG, and may
#   define tag_order TAG (the paired plan's order, cuda_bench's ORDER: pairs or couples);
#   moe_layer_row BIN KERNEL TAG: cuda_bench --deepseek-moe-fp8's slot-order layer times;
#   moe_gemm_ncu BIN KERNEL PROBE TAG: ncu's time, tensor pipe and instructions of gate_up and down at 4,096
#   tokens (launches 41-42) under the path probe (none, mmas-only, loads-only).
# Both pass MOE_ORDER, when set, as cuda_bench's ORDER.
suite_result() {
  echo "##### $1: $(grep -E '^\[  (PASSED|FAILED) ' "$base/$1.txt" | tr '\n' ' ')"
  grep -E "^\[  FAILED|Failure" "$base/$1.txt" | head -6
}
moe_suites() {
  timeout -s KILL 100 "$1/cuda_kernel_test" --gtest_brief=1 --gtest_filter="$3" > "$base/tests$2.txt" 2>&1 &
  timeout -s KILL 100 "$1/cuda_golden_test" --gtest_brief=1 > "$base/golden$2.txt" 2>&1 &
  wait
  suite_result "tests$2"
  suite_result "golden$2"
}
# moe_candidate BIN NAME: moe_suites under BIN, then its V4 forward suite ($base/v4_NAME.txt).
moe_candidate() {
  moe_suites "$1" "$2" '*CudaMoeFp8Ws.*:CudaMoe.*:CudaDeepseekV3Fp8*'
  timeout -s KILL 100 "$1/cuda_deepseek_v4_forward_test" --gtest_brief=1 > "$base/v4_$2.txt" 2>&1
  suite_result "v4_$2"
}
tag_order() { :; }
moe_compare() {
  local v p
  for v in $1; do MOE_ORDER=$(tag_order "$v") moe_layer_row "$(tag_bin "$v")" "$(tag_kernel "$v")" "$v"; done
  for p in $2; do
    for v in $(printf '%s\n' $1 | awk '!seen[$0]++'); do
      MOE_ORDER=$(tag_order "$v") moe_gemm_ncu "$(tag_bin "$v")" "$(tag_kernel "$v")" "$p" "$v"
    done
  done
}
moe_layer_row() {
  local o="$base/moe_$3.$RANDOM.md"
  timeout 60 "$1/cuda_bench" --deepseek-moe-fp8 "$2" ${MOE_ORDER:+none "$MOE_ORDER"} > "$o" 2>&1
  echo "$3: $(grep 'slot order) prefill' "$o" | grep -oE 'prefill [0-9]+ tokens|[0-9.]+ ms' | paste -sd' ')"
}
moe_gemm_ncu() {
  local csv="$base/ncu_$4_$3.csv" regex=grouped_gemm_fp8_ws skip=40
  # The swapped kernel runs only in the slot-order rows (gathered x takes the ring kernel): its first two.
  if [ "$2" = swap-ab ]; then regex=grouped_gemm_fp8_swap; skip=0; fi
  timeout 60 ncu --clock-control none -k regex:$regex -s $skip -c 2 --csv \
    --metrics gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,dram__bytes_read.sum \
    "$1/cuda_bench" --deepseek-moe-fp8 "$2" "$3" ${MOE_ORDER:+"$MOE_ORDER"} > "$csv" 2>&1
  echo "##### ncu $4 $3: $(grep -E '^"[0-9]' "$csv" | awk -F'","' '{print $(NF-2) "=" $NF}' | tr -d '"' |
    sed -E 's/gpu__time_duration.sum/ns/; s/sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active/tensor%/;
      s/smsp__inst_executed.sum/inst/; s/dram__bytes_read.sum/dram/' |
    paste -sd' ')"
}
case ${1:-1} in
  0)
    # The goldens and the whole kernel suite at today's defaults. One kernel-suite process needs
    # more than a call's 600 s; six gtest shards side by side took 336 s on an H100 (S30-1). The
    # goldens run first, alone.
    bin=$CARRY_DIR; . tools/device/carried_bin.sh
    for t in cuda_golden_test cuda_deepseek_v4_forward_test; do
      timeout -s KILL 120 "$bin/$t" --gtest_brief=1 > "$base/$t.txt" 2>&1
      echo "##### $t rc $? at $(elapsed) s"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$base/$t.txt" | head -12
    done
    # CudaDeviceMemory takes the whole device for a moment: alone, before the shards.
    timeout -s KILL 60 "$bin/cuda_kernel_test" --gtest_brief=1 --gtest_filter='CudaDeviceMemory.*' \
      > "$base/device_memory.txt" 2>&1
    echo "##### CudaDeviceMemory rc $? at $(elapsed) s"; grep -E "^\[  (PASSED|FAILED) |Failure" "$base/device_memory.txt"
    limit=$(( 570 - $(elapsed) ))
    for i in 0 1 2 3 4 5; do
      GTEST_TOTAL_SHARDS=6 GTEST_SHARD_INDEX=$i timeout -s KILL $limit "$bin/cuda_kernel_test" \
        --gtest_filter='-CudaDeviceMemory.*' > "$base/kernel_shard$i.txt" 2>&1 &
    done
    wait
    for i in 0 1 2 3 4 5; do
      echo "##### kernel shard $i: $(grep -c '^\[       OK' "$base/kernel_shard$i.txt") ok;" \
        "$(grep -E '^\[  (PASSED|FAILED) ' "$base/kernel_shard$i.txt" | head -2 | tr '\n' ' ')"
    done
    for i in 0 1 2 3 4 5; do  # a shard that crashed or was killed: where it stopped
      grep -qE '^\[  (PASSED|FAILED) ' "$base/kernel_shard$i.txt" || { echo "shard $i stopped:"; tail -3 "$base/kernel_shard$i.txt"; }
    done
    grep -h -A8 "Failure" "$base"/kernel_shard*.txt | head -40
    grep -h "^\[  FAILED  \]" "$base"/kernel_shard*.txt | sort -u | head -20
    tar -C "$base" -czf "$base/kernel_shards.tgz" $(cd "$base" && ls kernel_shard*.txt) && rm "$base"/kernel_shard*.txt
    echo "##### done at $(elapsed) s"
    ;;
  1)
    # Issue 18's indexer share on this card: formats 2 (the default: tf32 from 2,048 rows, its keys
    # in registers since session 37) and 18 (the keys in shared memory, the default before it).
    FORMATS=${FORMATS:-2 18} BENCH_RUNS=1 MODEL_FORMATS=${MODEL_FORMATS:-2,18} OUT=$base/indexer \
      bash tools/device/deepseek_v4_indexer_check.sh > "$base/indexer.txt" 2>&1
    echo "##### indexer done at $(elapsed) s"; tail -30 "$base/indexer.txt"
    # The per-kernel layer tables and logs as one file (the tool returns at most 8).
    tar -C "$base" -czf "$base/indexer_logs.tgz" indexer && rm -rf "$base/indexer"
    ;;
  2)
    # Issue 15's dense FP8 and MoE rows: cuBLASLt against bf16; tma against the weight multicast.
    bin=$CARRY_DIR; . tools/device/carried_bin.sh
    timeout 150 "$bin/cuda_bench" --fp8-dense > "$base/fp8_dense.md" 2> "$base/fp8_dense.err"
    echo "##### fp8-dense rc $? at $(elapsed) s"; cat "$base/fp8_dense.md"; tail -3 "$base/fp8_dense.err"
    OUT=$base/moe bash tools/device/moe_fp8_wmc_check.sh > "$base/moe.txt" 2>&1
    echo "##### moe done at $(elapsed) s"; tail -30 "$base/moe.txt"
    ;;
  3)
    # Issue 14's GQA decode: cp.async against TMA loads over the sweep.
    OUT=$base/gqa PARTS="sweep" bash tools/device/gqa_decode_tma_check.sh > "$base/gqa.txt" 2>&1
    echo "##### gqa done at $(elapsed) s"; tail -40 "$base/gqa.txt"
    # Issue 14's batch-1 decode at 4k (target 85% of HBM; 81.4-82.1% on the H200 in S20-2, before
    # the TMA decode loads): the GEMV rows and the batch-1 steps.
    bin=$CARRY_DIR; . tools/device/carried_bin.sh
    timeout 200 "$bin/cuda_bench" --decode1 > "$base/decode1.md" 2> "$base/decode1.err"
    echo "##### decode1 rc $? at $(elapsed) s"; grep -E "^device|batch 1|GEMV" "$base/decode1.md" | cut -c1-200
    ;;
  4)
    # Issue 15's MLA decode on this card: wgmma's kernel and the 16-head mma.sync kernels
    # (session 38's, its pairs form of session 39, the default, and session 40's one-barrier form;
    # the MLA suite under all three first), each with session 30's rows of a layer in an 8-layer
    # decode graph.
    bin=$CARRY_DIR; . tools/device/carried_bin.sh
    timeout 200 "$bin/cuda_kernel_test" --gtest_filter='*CudaMlaAttention*/mma_16_heads*' \
      > "$base/mla_16_heads_tests.txt" 2>&1
    echo "##### MLA suite under mma_16_heads rc $? at $(elapsed) s"
    grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$base/mla_16_heads_tests.txt" | head -12
    for k in ${MLA_KERNELS:-wgmma mma-16-heads-pairs mma-16-heads-one-barrier mma-16-heads}; do
      timeout 200 "$bin/cuda_bench" --mla-decode "$k" > "$base/mla_$k.md" 2> "$base/mla_$k.err"
      echo "##### mla-decode $k rc $? at $(elapsed) s"; grep -E "^\| MLA|^device" "$base/mla_$k.md"
    done
    ;;
  5)
    # Issue 15's whole truncated DeepSeek-V3 (3 dense + MOE_LAYERS MoE, full width, random FP8) served
    # with a step trace, then `sluice calibrate` of h200_sluice_cuda_deepseek_v3() on it: the first
    # measurement of the whole model at today's kernels and the fit of its assumed gemm_compute.
    # CARRY_DIR must hold the sluice binary (pack_carry.sh .devcarry/s30cli build/sluice).
    bin=$CARRY_DIR; . tools/device/carried_bin.sh
    # The official openai npm client's check needs node and node_modules/openai: carried as
    # CARRY_DIR/node.xz and CARRY_DIR/openai.tar.xz where this machine lacks them.
    if ! command -v node >/dev/null && [ -f "$CARRY_DIR/node.xz" ]; then
      mkdir -p "$HOME/bin" && xz -dc "$CARRY_DIR/node.xz" >"$HOME/bin/node" && chmod +x "$HOME/bin/node"
      export PATH=$HOME/bin:$PATH
    fi
    [ -d node_modules/openai ] || [ ! -f "$CARRY_DIR/openai.tar.xz" ] || tar -xJf "$CARRY_DIR/openai.tar.xz"
    echo "node: $(command -v node || echo none) $(node --version 2>/dev/null)"
    export SLUICE_BIN=$bin/sluice MOE_LAYERS=${MOE_LAYERS:-2}
    OUT=$base/v3 SERVE_FLAGS="--step-trace $base/v3/steps.jsonl" bash tools/device/deepseek_serve.sh all \
      > "$base/v3.txt" 2>&1
    echo "##### deepseek_serve rc $? at $(elapsed) s"; tail -12 "$base/v3.txt"
    "$bin/sluice" calibrate --model "${MODEL_DIR:-$HOME/sluice-deepseek-v3-fp8}" --trace "$base/v3/steps.jsonl" \
      > "$base/v3_calibrate.txt" 2>&1
    echo "##### calibrate rc $? at $(elapsed) s"; cat "$base/v3_calibrate.txt"
    # One file back (the tool returns at most 8): the step trace, the bench reports, the server log.
    tar -C "$base" -czf "$base/v3_logs.tgz" v3 && rm -rf "$base/v3"
    ;;
  6)
    # Issue 15's end to end: the report's burst against part 5's truncated V3 (run 5 first on the
    # same warm machine: the checkpoint stays in $HOME), sluice against prefill-first, prompts of
    # 4k-32k (its max_position_embeddings); then calibrate on the sluice run's step trace.
    bin=$CARRY_DIR; . tools/device/carried_bin.sh
    model=${MODEL_DIR:-$HOME/sluice-deepseek-v3-fp8}
    # MLA's plans before serving at the kernel level first, where the pack has the suite.
    if [ -x "$bin/cuda_kernel_test" ]; then
      timeout 120 "$bin/cuda_kernel_test" --gtest_brief=1 --gtest_filter='CudaMlaCudnnPlans.*:CudaMlaCudnnPrefill.*' \
        > "$base/mla_plans_test.txt" 2>&1
      echo "##### CudaMlaCudnnPlans rc $? at $(elapsed) s"; grep -E "^\[  (PASSED|FAILED) |Failure" "$base/mla_plans_test.txt"
    fi
    # Alone on a fresh machine: the checkpoint first (MOE_LAYERS=0, 3 dense layers: 77 s on an H100).
    if [ ! -f "$model/config.json" ]; then
      SLUICE_BIN=$bin/sluice MODEL_DIR=$model OUT=$base/make bash tools/device/deepseek_serve.sh make > "$base/make.txt" 2>&1
      echo "##### make-model (MOE_LAYERS=${MOE_LAYERS:-3}) rc $? at $(elapsed) s"
    fi
    SLUICE_BIN=$bin/sluice POLICIES="sluice prefill-first" PER_POLICY_S=${PER_POLICY_S:-200} OUT=$base/v3burst \
      bash tools/device/burst_bench.sh --model "$model" > "$base/v3burst.txt" 2>&1
    echo "##### burst rc $? at $(elapsed) s"; tail -14 "$base/v3burst.txt"
    "$bin/sluice" calibrate --model "$model" --trace "$base/v3burst/steps-sluice.jsonl" > "$base/v3burst_calibrate.txt" 2>&1
    echo "##### calibrate rc $? at $(elapsed) s"; cat "$base/v3burst_calibrate.txt"
    # MLA's cuDNN plans before serving (S34-4): the log line, and the steps that still built one.
    grep -h "MLA prefill attention cudnn\|largest prefill chunk" "$base/v3burst/logs.txt" | cut -c1-200
    python3 - "$base/v3burst/steps-sluice.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
setup = [r for r in rows if r.get("setup_ms", 0) > 0]
print(f"sluice steps with setup on their path: {len(setup)} of {len(rows)}, {sum(r['setup_ms'] for r in setup):.0f} ms")
PY
    tar -C "$base" -czf "$base/v3burst_logs.tgz" v3burst && rm -rf "$base/v3burst"
    ;;
  7)
    # Issue 15's MoE prefill on this card (S35-5): the layer with x gathered, then in slot order (the
    # default since session 35), under the default kernel (192-row tiles since session 43), twice in
    # one call; the MoE tests first (the leading * takes the parameterised Kernels/CudaMoeFp8Ws too).
    bin=$CARRY_DIR; . tools/device/carried_bin.sh
    timeout -s KILL 200 "$bin/cuda_kernel_test" --gtest_brief=1 --gtest_filter='*CudaMoe*:CudaFp8Quantize.*' \
      > "$base/moe_tests.txt" 2>&1
    echo "##### MoE tests rc $? at $(elapsed) s"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$base/moe_tests.txt" | head
    for round in 1 2; do
      timeout 120 "$bin/cuda_bench" --deepseek-moe-fp8 tma-weight-multicast-n192 > "$base/moe_$round.md" 2>&1
      echo "##### MoE bench $round rc $? at $(elapsed) s"
      grep "prefill" "$base/moe_$round.md" | sed -E 's/\| MoE layer FP8 wgmma grouped kernel //' | cut -c1-200
    done
    ;;
  8)
    # Issue 15's MoE prefill on this card: every 128-slot loader with x in slot order, twice; then
    # ncu of gate_up and down (the slot-order layer's first: launches 41-42 of the ws kernel, after
    # the gathered layer's 20 at 4,096 tokens and 20 at 16,384) under
    # three of them: time, DRAM read, L2 hit rate and throughput. Which stream bounds the layer now.
    bin=$CARRY_DIR; . tools/device/carried_bin.sh
    kernels="tma tma-weight-multicast tma-weight-multicast-n192"
    for round in 1 2; do
      for k in $kernels; do
        timeout 120 "$bin/cuda_bench" --deepseek-moe-fp8 "$k" > "$base/moe8_${k}_$round.md" 2>&1
        echo "$k: $(grep 'slot order) prefill' "$base/moe8_${k}_$round.md" | grep -oE '[0-9.]+% of 1979|[0-9.]+ ms' | tr '\n' ' ')"
      done
      echo "##### round $round at $(elapsed) s"
    done
    for k in tma tma-weight-multicast tma-weight-multicast-n192; do
      timeout 120 ncu --clock-control none -k regex:grouped_gemm_fp8_ws -s 40 -c 2 --csv --print-units base \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct,lts__throughput.avg.pct_of_peak_sustained_elapsed \
        "$bin/cuda_bench" --deepseek-moe-fp8 "$k" > "$base/ncu8_$k.csv" 2> "$base/ncu8_$k.err"
      python3 tools/device/ncu_metrics_table.py "$base/ncu8_$k.csv" "$k" gate_up down
    done
    echo "##### ncu at $(elapsed) s"
    tar -C "$base" -czf "$base/moe_loaders.tgz" $(cd "$base" && ls moe8_* ncu8_*) && rm "$base"/moe8_* "$base"/ncu8_*
    ;;
  9)
    # Issue 14's GQA decode on this card: the split kernel's own time (ncu) beside the op the sweep
    # times, which adds a standalone KV-write kernel (a served decode graph writes K/V in the RoPE
    # or q|k|v GEMV epilogue instead, cuda_ops.cpp write_kv_pages). TMA loads (the default).
    bin=$CARRY_DIR; . tools/device/carried_bin.sh
    for c in "8 x 8k" "16 x 8k" "8 x 32k"; do
      f="$base/ncu9_$(echo "$c" | tr -d ' ').csv"
      timeout 120 ncu --clock-control none -k 'regex:split_mma_keys|kv_write' -s 8 -c 8 --csv --print-units base \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum "$bin/cuda_bench" --decode-sweep-loads "$c" tma \
        > "$f" 2> "$f.err"
      python3 tools/device/ncu_metrics_table.py "$f" "$c (ncu)" kv_write split
      sweep_rows "$bin" "$c" tma ""
      # Where the split kernel's ~12 us of fixed time goes (session 37): each block's moments, one launch.
      timeline_rows "$bin" "$c" ""
    done
    echo "##### done at $(elapsed) s"
    tar -C "$base" -czf "$base/gqa_ncu.tgz" $(cd "$base" && ls ncu9_*) && rm "$base"/ncu9_*
    ;;
  10)
    # Issue 15's cost model: MLA prefill through cuDNN on whole prompts and on chunks over cached
    # prefixes (the V3 traces put the latter at 1.3-1.5x the simulator's price; docs/cost-model.md).
    bin=$CARRY_DIR; . tools/device/carried_bin.sh
    timeout 300 "$bin/cuda_bench" --mla-prefill > "$base/mla_prefill.md" 2> "$base/mla_prefill.err"
    echo "##### mla-prefill rc $? at $(elapsed) s"; grep -E "^\| MLA prefill" "$base/mla_prefill.md" | cut -c1-170
    ;;
  11)
    # A change's rows against the binary before it, alternated in one call (session 40: Q's copy
    # ahead of the first tiles' loads in the GQA split kernel under TMA and the 16-head MLA
    # kernels). BASE_DIR holds bin.tar.xz with the base cuda_bench alone (the libraries come from
    # CARRY_DIR's pack). The tests of what changed first, under this build.
    bin=$CARRY_DIR; . tools/device/carried_bin.sh
    base_bin=${BASE_DIR:?BASE_DIR: the base cuda_bench}/u
    mkdir -p "$base_bin" && tar -xJf "$BASE_DIR/bin.tar.xz" -C "$base_bin"
    # (Every CudaDecodeAttention test in one process ran past 200 s on an H100: S40-2.)
    timeout 200 "$bin/cuda_kernel_test" --gtest_filter="${AB_TESTS:-*CudaMlaAttention*/mma_16_heads*:CudaDecodeAttention.Tma*:CudaDecodeAttention.StaleNanSlotsStayOut:CudaDecodeAttention.DecodeSplitRingOfThree:CudaDecodeAttention.GraphReplayedDecodeSteps}" \
      > "$base/ab_tests.txt" 2>&1
    echo "##### tests rc $? at $(elapsed) s: $(grep -c '^\[       OK' "$base/ab_tests.txt") ok"
    grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$base/ab_tests.txt" | head -12
    [ -n "${AB_TESTS_ONLY:-}" ] && exit 0
    for round in 1 2; do
      for which in base new; do
        b=$bin; [ $which = base ] && b=$base_bin
        for c in "8 x 8k" "16 x 8k"; do
          sweep_rows "$b" "$c" tma "$which r$round: "
        done
        timeout 120 "$b/cuda_bench" --mla-decode "${AB_MLA:-mma-16-heads-pairs}" > "$base/ab_mla_${which}_$round.md" 2>&1
        grep -E "16 heads, a layer of an 8-layer decode graph" "$base/ab_mla_${which}_$round.md" |
          sed "s/^/$which r$round: /" | cut -d'|' -f1,2,4 | cut -c1-170
      done
    done
    for which in base new; do
      b=$bin; [ $which = base ] && b=$base_bin
      timeline_rows "$b" "8 x 8k" "$which: "
    done
    echo "##### done at $(elapsed) s"
    ;;
  12)
    # Session 40's work stealing in the GQA split kernel (DecodeSplitLoads::tma_steal) against
    # tma and cp.async in one binary: the decode tests that run every loader, then the sweep's
    # rows (two rounds, alternated) and the timeline at 8 x 8k.
    bin=$CARRY_DIR; . tools/device/carried_bin.sh
    timeout 240 "$bin/cuda_kernel_test" --gtest_filter="${STEAL_TESTS:-CudaDecodeAttention.Tma*:CudaDecodeAttention.StaleNanSlotsStayOut:CudaDecodeAttention.GraphReplayedDecodeSteps:CudaDecodeAttention.EvenBatchSplitsGroupOfFour}" \
      > "$base/steal_tests.txt" 2>&1
    echo "##### tests rc $? at $(elapsed) s: $(grep -c '^\[       OK' "$base/steal_tests.txt") ok"
    grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|Expected|Which is" "$base/steal_tests.txt" | head -16
    for c in "8 x 8k" "16 x 8k"; do sweep_rows "$bin" "$c" "" ""; done
    timeline_rows "$bin" "8 x 8k" ""
    echo "##### done at $(elapsed) s"
    ;;
  13)
    # Issue 15's MoE prefill: the routing (a warp a row) and the plan (a block-wide scan, loads
    # ahead of their atomics) of session 41 against the base binary, alternated in one call: the
    # MoE tests under this build, the layer at 4,096 tokens twice each, then ncu of both kernels
    # (the first 16 launches, route and plan in turn) in either binary. BASE_DIR as in part 11.
    bin=$CARRY_DIR; . tools/device/carried_bin.sh
    base_bin=${BASE_DIR:?BASE_DIR: the base cuda_bench}/u
    mkdir -p "$base_bin" && tar -xJf "$BASE_DIR/bin.tar.xz" -C "$base_bin"
    timeout -s KILL 200 "$bin/cuda_kernel_test" --gtest_brief=1 --gtest_filter='CudaMoe*' > "$base/moe_tests.txt" 2>&1
    echo "##### MoE tests rc $? at $(elapsed) s: $(grep -c '^\[       OK' "$base/moe_tests.txt") ok"
    grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$base/moe_tests.txt" | head -12
    for round in 1 2; do
      for which in base new; do
        b=$bin; [ $which = base ] && b=$base_bin
        timeout 120 "$b/cuda_bench" --deepseek-moe-fp8 tma-weight-multicast > "$base/moe13_${which}_$round.md" 2>&1
        echo "$which r$round: $(grep 'slot order) prefill' "$base/moe13_${which}_$round.md" | grep -oE '[0-9.]+% of 1979|[0-9.]+ ms' | tr '\n' ' ')"
      done
    done
    for which in base new; do
      b=$bin; [ $which = base ] && b=$base_bin
      timeout 120 ncu --clock-control none -k 'regex:moe_route|moe_plan' -c 16 --csv --print-units base \
        --metrics gpu__time_duration.sum "$b/cuda_bench" --deepseek-moe-fp8 tma-weight-multicast \
        > "$base/ncu13_$which.csv" 2> "$base/ncu13_$which.err"
      python3 tools/device/ncu_metrics_table.py "$base/ncu13_$which.csv" "$which (ncu)" route plan
    done
    echo "##### done at $(elapsed) s"
    ;;
  14)
    # Session 42's short call (~5 min): every test of the kernels not yet run on a GPU (session
    # 41's MoE routing and plan, session 40's per-warp TMA loop and stealing, session 42's
    # 6-block one-row GEMVs), the MoE layer at 4,096 tokens against BASE_DIR's cuda_bench (part
    # 13's rows, one round), then cuda_bench --decode1 (the one-row GEMVs at 8 and 6 blocks).
    bin=$CARRY_DIR; . tools/device/carried_bin.sh
    base_bin=${BASE_DIR:?BASE_DIR: the base cuda_bench}/u
    mkdir -p "$base_bin" && tar -xJf "$BASE_DIR/bin.tar.xz" -C "$base_bin"
    timeout -s KILL 240 "$bin/cuda_kernel_test" --gtest_brief=1 \
      --gtest_filter='CudaMoe*:CudaOps.OneRowGemvs*:CudaDecodeAttention.Tma*:CudaDecodeAttention.StaleNanSlotsStayOut:CudaDecodeAttention.GraphReplayedDecodeSteps' \
      > "$base/tests14.txt" 2>&1
    echo "##### tests rc $? at $(elapsed) s: $(grep -c '^\[       OK' "$base/tests14.txt") ok"
    grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$base/tests14.txt" | head -12
    for which in base new; do
      b=$bin; [ $which = base ] && b=$base_bin
      timeout 120 "$b/cuda_bench" --deepseek-moe-fp8 tma-weight-multicast > "$base/moe14_$which.md" 2>&1
      echo "$which: $(grep 'slot order) prefill' "$base/moe14_$which.md" | grep -oE '[0-9.]+% of 1979|[0-9.]+ ms' | tr '\n' ' ')"
    done
    timeout 150 "$bin/cuda_bench" --decode1 > "$base/decode1.md" 2>&1
    grep -E "decode step, batch 1 at" "$base/decode1.md" | cut -d'|' -f2,4 | cut -c1-150
    echo "##### done at $(elapsed) s"
    ;;
  15)
    # Session 43's wide tiles for the MoE's grouped FP8 GEMM (~3 min): their tests (bit-equal to
    # the ring kernel, uneven loads, odd tile counts, the DeepSeek-V3 FP8 golden), then the MoE
    # layer at 4,096 and 16,384 tokens under 128 and 192 rows (160 until S43-1), twice, the second round
    # reversed, then the dense rows (cuda_bench --fp8-dense: the kernels on one group).
    bin=$CARRY_DIR; . tools/device/carried_bin.sh
    timeout -s KILL 200 "$bin/cuda_kernel_test" --gtest_brief=1 --gtest_filter='*CudaMoeFp8Ws.*tma_weight_multicast*' \
      > "$base/tests15.txt" 2>&1
    echo "##### kernel tests rc $? at $(elapsed) s: $(grep -c '^\[       OK' "$base/tests15.txt") ok"
    grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$base/tests15.txt" | head -12
    timeout -s KILL 200 "$bin/cuda_golden_test" --gtest_filter='*WarpSpecializedExpertsMatchTheRingKernel*' \
      > "$base/golden15.txt" 2>&1
    echo "##### golden rc $? at $(elapsed) s"
    grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|\[ info \]" "$base/golden15.txt" | cut -c1-200 | head -16
    for round in 1 2; do
      kernels="tma-weight-multicast tma-weight-multicast-n192"  # (160 rows: removed after S43-1)
      [ $round = 2 ] && kernels="tma-weight-multicast-n192 tma-weight-multicast"
      for kern in $kernels; do
        timeout 120 "$bin/cuda_bench" --deepseek-moe-fp8 "$kern" > "$base/moe15_${kern}_$round.md" 2>&1
        grep 'slot order) prefill' "$base/moe15_${kern}_$round.md" | while read -r line; do
          echo "$round $kern: $(echo "$line" | grep -oE 'prefill [0-9]+ tokens|[0-9.]+% of 1979|[0-9.]+ ms' | paste -sd' ')"
        done
      done
    done
    timeout 200 "$bin/cuda_bench" --fp8-dense > "$base/fp8_dense15.md" 2> "$base/fp8_dense15.err"
    echo "##### fp8-dense rc $? at $(elapsed) s"; cut -c1-400 "$base/fp8_dense15.md"
    ;;
  16)
    # Session 43's new MoE default (192-row tiles) under the whole golden suite and the V4 forward
    # suite, then ncu's sections for gate_up and down (the slot-order layer's first, launches 41-42)
    # under 128 and 192 rows: where the wide tiles' time goes (tensor pipe, stalls, L2, shared memory).
    bin=$CARRY_DIR; . tools/device/carried_bin.sh
    for t in cuda_golden_test cuda_deepseek_v4_forward_test; do
      timeout -s KILL 150 "$bin/$t" --gtest_brief=1 > "$base/$t.txt" 2>&1
      echo "##### $t rc $? at $(elapsed) s"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$base/$t.txt" | head -8
    done
    for k in tma-weight-multicast tma-weight-multicast-n192; do
      timeout 150 ncu --clock-control none -k regex:grouped_gemm_fp8_ws -s 40 -c 2 --section SpeedOfLight \
        --section ComputeWorkloadAnalysis --section WarpStateStats --section MemoryWorkloadAnalysis \
        --section SchedulerStats "$bin/cuda_bench" --deepseek-moe-fp8 "$k" > "$base/ncu16_$k.txt" 2>&1
      echo "##### ncu $k rc $? at $(elapsed) s"
      grep -E "^  [a-z_].*kernel|Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued" \
        "$base/ncu16_$k.txt" | sed -E 's/  +/ /g' | cut -c1-120 | head -24
    done
    ;;
  17)
    # Where gate_up's extra DRAM bytes come from (S43-2: 6.6 GB read for 4.4 GB of touched weights):
    # ncu's DRAM and L2 counters of the slot-order layer's gate_up and down at 4,096 tokens (launches
    # 41-42) with the weights' tensor map cut to one expert, A's to one tile, both, or neither
    # (set_grouped_gemm_fp8_ws_bytes_probe: boxes out of bounds read no memory).
    bin=$CARRY_DIR; . tools/device/carried_bin.sh
    metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read.sum
    metrics=$metrics,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum
    for probe in none weights a both; do
      timeout 150 ncu --clock-control none -k regex:grouped_gemm_fp8_ws -s 40 -c 2 --metrics "$metrics" --csv \
        "$bin/cuda_bench" --deepseek-moe-fp8 tma-weight-multicast-n192 "$probe" > "$base/ncu17_$probe.csv" 2>&1
      echo "##### probe $probe rc $? at $(elapsed) s"
      grep -E '^"[0-9]' "$base/ncu17_$probe.csv" | awk -F'","' '{print $5 "|" $(NF-2) "|" $NF}' |
        sed -E 's/grouped_gemm_fp8_ws_kernel<([a-z]+), .*/gemm swiglu=\1/' | tr -d '"' | cut -c1-120
    done
    ;;
  23)
    # Session 47: the two accumulators on top of the scales' async arrivals (branch two-acc-async;
    # CARRY_DIR: its cuda_kernel_test, cuda_golden_test, cuda_bench, cuda_deepseek_v4_forward_test)
    # against main's kernel (MAIN_DIR: main's cuda_bench). The branch's suites (the MoE tests, the
    # goldens, the V4 forward suite), then the layer alternated: main's n192 (m), the branch's n192
    # (a: main + async arrivals), 2acc (t) and n128 (o); then ncu's whole / MMAs-only / loads-only.
    bin=$MAIN_DIR; . tools/device/carried_bin.sh; M=$bin
    bin=$CARRY_DIR; . tools/device/carried_bin.sh; B=$bin
    moe_suites "$B" 23 '*CudaMoeFp8Ws.*:CudaMoe.*'
    timeout -s KILL 100 "$B/cuda_deepseek_v4_forward_test" --gtest_brief=1 > "$base/v4_23.txt" 2>&1
    suite_result v4_23
    tag_bin() { if [ "$1" = m ]; then echo "$M"; else echo "$B"; fi; }
    tag_kernel() {
      case $1 in
        m | a) echo tma-weight-multicast-n192 ;;
        t) echo tma-weight-multicast-2acc ;;
        o) echo tma-weight-multicast ;;
      esac
    }
    moe_compare "m a t o o t a m m a t o" "none mmas-only loads-only"
    ;;
  25)
    # Session 48's two MoE GEMM changes against main's kernel (BASE_DIR: a cuda_bench of main):
    # the fast SwiGLU (SWIGLU_DIR) and, on top of it, the split tiles (SPLIT_DIR), each with its
    # cuda_kernel_test, cuda_golden_test and cuda_bench (SPLIT_DIR also the V4 forward test). Each
    # build's MoE and V3 FP8 tests and goldens, the split build's V4 suite, then the layer
    # alternated (m, f, s), then ncu's gate_up and down, whole and MMAs only.
    bin=$BASE_DIR; . tools/device/carried_bin.sh; M=$bin
    bin=$SWIGLU_DIR; . tools/device/carried_bin.sh; F=$bin
    bin=$SPLIT_DIR; . tools/device/carried_bin.sh; S=$bin
    moe_suites "$F" 25f '*CudaMoeFp8Ws.*:CudaMoe.*:CudaDeepseekV3Fp8*'
    moe_suites "$S" 25s '*CudaMoeFp8Ws.*:CudaMoe.*:CudaDeepseekV3Fp8*'
    timeout -s KILL 100 "$S/cuda_deepseek_v4_forward_test" --gtest_brief=1 > "$base/v4_25s.txt" 2>&1
    suite_result v4_25s
    tag_bin() { case $1 in m) echo "$M" ;; f) echo "$F" ;; s) echo "$S" ;; esac; }
    tag_kernel() { echo tma-weight-multicast-n192; }
    moe_compare "m f s s f m m f s" "none mmas-only"
    ;;
  27)
    # S49-1: A's boxes cut to a tile's rows (by 16) and the narrow tail of the 192-row tiles, against
    # main: BASE_DIR main's cuda_bench, TRIM_DIR the A boxes alone (cuda_bench), CARRY_DIR both
    # (cuda_kernel_test, cuda_golden_test, cuda_bench, cuda_deepseek_v4_forward_test). Suites under
    # both, the layer alternated, ncu's gate_up and down whole and with no MMA.
    bin=$BASE_DIR; . tools/device/carried_bin.sh; M=$bin
    bin=$TRIM_DIR; . tools/device/carried_bin.sh; H=$bin
    bin=$CARRY_DIR; . tools/device/carried_bin.sh; N=$bin
    moe_candidate "$N" 27n
    tag_bin() { case $1 in m) echo "$M" ;; h) echo "$H" ;; n) echo "$N" ;; esac; }
    tag_kernel() { echo tma-weight-multicast-n192; }
    moe_compare "m h n n h m m h n" "none loads-only"
    grep -h "slot order) prefill" "$base"/moe_n.*.md | head -2 | grep -oE "prefill [0-9]+ tokens|[0-9.]+% filled.*issued\)"
    ;;
  28)
    # The paired plan's odd couples (MoeTileOrder::paired_odd_couples, opt-in: even experts first,
    # then the odd ones in couples, each couple's odd tiles between its two experts' pairs) against
    # its pairs, in one binary (CARRY_DIR: cuda_kernel_test, cuda_golden_test, cuda_bench,
    # cuda_deepseek_v4_forward_test). The suites (the MoE tests run the couples' cases), the layer
    # alternated (p pairs, c couples), ncu with DRAM bytes. Keep it if gate_up reads less and runs faster.
    bin=$CARRY_DIR; . tools/device/carried_bin.sh; C=$bin
    moe_candidate "$C" 28
    tag_bin() { echo "$C"; }
    tag_kernel() { echo tma-weight-multicast-n192; }
    tag_order() { case $1 in p) echo pairs ;; c) echo couples ;; esac; }
    moe_compare "p c c p p c c p" "none loads-only"
    ;;
  29)
    # The swapped grouped FP8 GEMM (GroupedGemmFp8Kernel::swap_ab, session 50, never run before:
    # weight rows as wgmma's M, an expert's tokens as its N over balanced tiles of up to 192 slots)
    # against the default (tma-weight-multicast-n192), in one binary (CARRY_DIR as part 28's). Its
    # tests against the host and the V3 goldens under it first; then the layer alternated (d the
    # default, s swapped) and ncu's gate_up / down with DRAM bytes. Only if the tests pass do the
    # times mean anything.
    bin=$CARRY_DIR; . tools/device/carried_bin.sh; S=$bin
    moe_suites "$S" 29 '*CudaMoeFp8Swap.*:CudaMoe.*:CudaDeepseekV3Fp8*'
    tag_bin() { echo "$S"; }
    tag_kernel() { case $1 in d) echo tma-weight-multicast-n192 ;; s) echo swap-ab ;; esac; }
    moe_compare "d s s d d s s d" "none"
    grep -h "slot order) prefill" "$base"/moe_s.*.md | head -2 |
      grep -oE "prefill [0-9]+ tokens|[0-9.]+% of the swapped kernel's token columns"
    ;;
  30)
    # Issue 15's dense FP8 row alone: cuda_bench --fp8-dense (bf16 and FP8 cuBLASLt, the best of
    # the heuristic's first 8 algorithms of each and their ratio, our grouped kernels as one group,
    # the swapped one among them).
    bin=$CARRY_DIR; . tools/device/carried_bin.sh
    timeout 240 "$bin/cuda_bench" --fp8-dense > "$base/fp8_dense.md" 2> "$base/fp8_dense.err"
    echo "##### fp8-dense rc $? at $(elapsed) s"; cat "$base/fp8_dense.md"; tail -3 "$base/fp8_dense.err"
    ;;
  targets)
    # Every H200 target of issues 14, 15 and 18 in one call (parts 7, 4, 3, 9 and 1 took ~200 s on
    # session 36's H200; part 10 is new; part 12, session 40's stealing tests, ~150 s), each
    # part's output to its own file and a short summary
    # printed last: the device tool returns only the last 12,000 characters of a call's output
    # (S36-1 lost its first parts). Needs the pack of parts 1-10 (cuda_kernel_test, cuda_bench,
    # cuda_deepseek_v4_forward_test, deepseek_v4_forward_bench; cuda_golden_test too for 28 and 29).
    # Session 50's call: PARTS="3 4 1 28 29 30" (~400 s): the H200 rows, the two MoE candidates
    # and the dense FP8 row with cuBLASLt's other algorithms.
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
    echo "GPU: $gpu"
    # PARTS: a subset, to split the call in two where one would pass 600 s.
    for p in ${PARTS:-12 7 4 3 9 10 1}; do
      if [ "$p" = 1 ]; then
        FORMATS="2 18" MODEL_FORMATS=2,18 INDEXER_TESTS=${INDEXER_TESTS:-scores} OUT=$base/p$p \
          bash "$0" 1 > "$base/part$p.txt" 2>&1
      elif [ "$p" = 12 ]; then
        STEAL_TESTS=${STEAL_TESTS:-CudaDecodeAttention.Tma*:CudaDecodeAttention.StaleNanSlotsStayOut:CudaDecodeAttention.GraphReplayedDecodeSteps} \
          OUT=$base/p$p bash "$0" 12 > "$base/part$p.txt" 2>&1
      else
        OUT=$base/p$p bash "$0" "$p" > "$base/part$p.txt" 2>&1
      fi
      echo "part $p rc $? at $(elapsed) s"
    done
    (cd "$base" && tar -czf targets_logs.tgz $(ls -d p[0-9] p1[02] p2[89] p30 2>/dev/null)) &&
      rm -rf "$base"/p[0-9] "$base"/p1[02] "$base"/p2[89] "$base"/p30
    echo "=== summary ($gpu)"
    exec 2>/dev/null  # the parts PARTS left out have no files
    echo "-- 14 GQA decode: the decode tests under every loader (work stealing, session 40, first):"
    grep -E "##### tests|^\[  (PASSED|FAILED) |^\[  FAILED" "$base/part12.txt" | head -6
    echo "-- 15 MoE prefill 4,096 / 16,384 tokens, x in slot order (target 50% of 1979):"
    grep -E "PASSED|FAILED" "$base/part7.txt" | head -3
    grep "slot order) prefill" "$base/part7.txt" | while read -r line; do
      echo "$line" | grep -oE "prefill [0-9]+ tokens|[0-9.]+% of 1979|[0-9.]+ ms|[0-9.]+% filled" | paste -sd' '
    done
    echo "-- 15 MLA decode 64 x 8k, 16 heads, a layer of a decode graph (target 80% of the copy; the suite under mma_16_heads first):"
    grep -A1 "MLA suite under mma_16_heads" "$base/part4.txt" | head -2
    grep -h "16 heads, a layer of an 8-layer decode graph" "$base/part4.txt" | cut -d'|' -f2,4 | cut -c1-140
    echo "-- 14 GQA decode 8 x 8k and 16 x 8k (target 85%), batch-1 decode at 4k (target 85%):"
    grep -E "^\| (8|16) x 8k " "$base/part3.txt" | cut -c1-160
    grep -E "batch 1 at (0|4096) context" "$base/part3.txt" | head -8 | cut -d'|' -f2,4 | cut -c1-150
    grep -E "^\| split|kernels only" "$base/part9.txt" | head -12 | cut -c1-120
    grep -E "timeline|steps between" "$base/part9.txt" | head -12 | cut -c1-300
    echo "-- 15 cost model: MLA prefill through cuDNN, prompts and chunks over cached prefixes:"
    grep -E "MLA prefill cudnn" "$base/part10.txt" | cut -d'|' -f2,3,4 | cut -c1-150
    echo "-- 18 indexer share of the CSA layer (formats 2, 18: keys in registers in pairs / in shared memory; target <= 25%):"
    grep -E "PASSED|FAILED|layer 1 attention" "$base/part1.txt" | head -8
    echo "-- 15 MoE plan order, part 28 (p pairs, c odd couples: layer ms, then ncu's gate_up / down):"
    grep -E "^#####|^[pc]: " "$base/part28.txt" | cut -c1-200
    echo "-- 15 MoE swapped GEMM, part 29 (d default, s swap-ab: suites, layer ms, ncu's gate_up / down):"
    grep -E "^#####|^[ds]: |token columns" "$base/part29.txt" | cut -c1-200
    echo "-- 15 dense FP8 (target 1.6x bf16 at M >= 4096), part 30: the first algorithms' and the best ones' ratios:"
    # Shape, bf16, FP8 (the first algorithms), swap-ab, the best bf16, the best FP8 with its ratio.
    grep -E "^\| V[34]" "$base/part30.txt" | sed 's/gate|up/gate+up/' |
      awk -F'|' '{print $2 "|" $3 "|" $4 "|" $(NF-3) "|" $(NF-2) "|" $(NF-1)}' | sed -E 's/ TFLOP\/s//g'
    ;;
  *) echo "usage: waiting_checks.sh 0|1|...|17|23|25|27|28|29|30|targets" >&2; exit 2 ;;
esac
