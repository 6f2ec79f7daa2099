#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repository root: sessions
# 24 and 25's DeepSeek-V4 KV layout on the device, which was compiled but not
# run there (each block keeps one window; the compressors' pool states; e4m3
# index-key records; fp8_ds_mla latent records), in one call:
#   1. cuda_kernel_test 'DeepseekV4*' (the planned compression and the
#      compressor kernel against the host's fold, the gathers, the paged copy);
#   2. cuda_deepseek_v4_forward_test (the goldens through the device forward,
#      a window of 8 in blocks of 16: slots reused, the step's own latents);
#   3. cuda_bench --deepseek-v4-kernels (the compressor rows time the plan);
#   4. where ncu is installed: the kernel time of each sub-layer of the last
#      8k chunk of a 128k prompt (tools/device/ncu_layer_table.py), for the
#      default (format 2) and the indexer's tf32 head sum (format 12): the
#      indexer's share of the CSA layer;
#   5. deepseek_v4_forward_bench --flash-formats 3 131072 64 0 2,10,11,12
#      (session 23's model rows: prefill to 128k, decode b1 and b64; the
#      default, over f32 index keys, with fp8_ds_mla latents, with the tf32
#      head sum);
#   6. with the sluice binary carried too: `sluice generate` of a tiny V4 at the
#      kernels' widths on the CPU, on CUDA, and on CUDA with --kv-cache-dtype
#      fp8 (the flag through the model runner to the device's records).
# Binaries (stripped, with their non-CUDA libraries) come prebuilt in
# CARRY_DIR, as a directory or as CARRY_DIR/bin.tar.xz. Logs go to $OUT; a
# short table is printed last.
#
#   CARRY_DIR=.devcarry/s25 tools/device/deepseek_v4_kv_check.sh
set -uo pipefail
out=${OUT:-/tmp/v4kv}
mkdir -p "$out"
bin=${CARRY_DIR:-.devcarry/cuda}
if [ -f "$bin/bin.tar.xz" ]; then
  mkdir -p "$bin/unpacked" && tar -xJf "$bin/bin.tar.xz" -C "$bin/unpacked" && bin=$bin/unpacked
fi
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$bin:${LD_LIBRARY_PATH:-}
# The tests look for fixtures under the development checkout's path.
src=$(grep -a -o -m1 -E '/work/[A-Za-z0-9_.+-]+(/[A-Za-z0-9_.+-]+)*/build' "$bin/cuda_kernel_test" | head -1 | sed 's|/build$||')
[ -n "$src" ] && [ ! -e "$src/tests/fixtures" ] && mkdir -p "$(dirname "$src")" && ln -sfn "$PWD" "$src"
t0=$(date +%s)
timeout 150 "$bin/cuda_kernel_test" --gtest_filter='DeepseekV4*' >"$out/kernel_test.log" 2>&1
echo "kernel tests rc $? at $(( $(date +%s) - t0 )) s"
timeout 120 "$bin/cuda_deepseek_v4_forward_test" >"$out/forward_test.log" 2>&1
echo "forward test rc $? at $(( $(date +%s) - t0 )) s"
timeout 60 "$bin/cuda_bench" --deepseek-v4-kernels >"$out/kernels.log" 2>&1
echo "kernel bench rc $? at $(( $(date +%s) - t0 )) s"
if command -v ncu >/dev/null; then
  for format in 2 12; do
    timeout 150 ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv \
      "$bin/deepseek_v4_forward_bench" --flash-formats 3 131072 1 5 "$format" >"$out/ncu_$format.csv" 2>"$out/ncu_$format.err"
    echo "ncu format $format rc $? at $(( $(date +%s) - t0 )) s"
    python3 tools/device/ncu_layer_table.py "$out/ncu_$format.csv" 3 >"$out/layers_$format.txt" 2>&1
  done
fi
timeout 240 "$bin/deepseek_v4_forward_bench" --flash-formats 3 131072 64 0 2,10,11,12 >"$out/model.log" 2>&1
echo "model bench rc $? at $(( $(date +%s) - t0 )) s"
if [ -x "$bin/sluice" ]; then
  tiny=$HOME/v4-kv-check-model
  "$bin/sluice" make-model --arch deepseek_v4 --layers 4 --layer-types schc --hidden 128 --heads 4 --head-dim 512 \
    --qk-rope-head-dim 64 --index-heads 4 --index-head-dim 128 --index-topk 32 --sliding-window 8 --experts 8 \
    --moe-intermediate 128 --vocab 320 --seed 5 --out "$tiny" >"$out/generate.log" 2>&1
  ids=$(seq -s, 1 300)
  for run in "cpu auto" "cuda auto" "cuda fp8"; do
    set -- $run
    echo "--- $run" >>"$out/generate.log"
    timeout 120 "$bin/sluice" generate --model "$tiny" --device "$1" --kv-cache-dtype "$2" --prompt-ids "$ids" \
      --max-tokens 16 --ignore-eos --block-size 128 --prefill-chunk 100 >>"$out/generate.log" 2>&1
  done
  echo "generate at $(( $(date +%s) - t0 )) s"
fi
for log in kernel_test forward_test; do
  echo "=== $log"
  grep -E "^\[  (PASSED|FAILED) |FAILED TEST|Failure" "$out/$log.log" | head -12
done
echo "=== kernels"; grep -iE "compressor|indexer prefill chunk, 8192" "$out/kernels.log" | cut -c1-180
for format in 2 12; do
  [ -f "$out/layers_$format.txt" ] && { echo "=== layers, format $format"; cat "$out/layers_$format.txt"; }
done
echo "=== model"; grep -E "^\| FP8" "$out/model.log" | cut -c1-300
[ -f "$out/generate.log" ] && { echo "=== generate (cpu, cuda, cuda fp8 KV)"; grep -E "^---|^[0-9]+(,[0-9]+)+$" "$out/generate.log"; }
