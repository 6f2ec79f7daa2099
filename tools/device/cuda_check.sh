#!/usr/bin/env bash
# Runs on the GPU machine (through the device tool), from the repository root:
# the CUDA kernel tests, the golden tests, the benchmark and the torch
# baselines, in one call. Binaries come prebuilt in .devcarry/cuda (made by
# tools/device/build_carry.sh on the development machine). Logs go to $OUT;
# the last thing printed is the table.
#
#   tools/device/cuda_check.sh [--quick] [--skip-tests] [--skip-bench] [--no-torch] [--profile]
#
# --profile also runs tools/device/cuda_profile.sh (ncu per-kernel times of an
# eager batch-1 decode step) into $OUT/profile.txt.
set -uo pipefail
out=${OUT:-/tmp/cuda-check}
mkdir -p "$out"
bin=${CARRY_DIR:-.devcarry/cuda}  # as given to build_carry.sh
# The test binaries look for fixtures and scratch space at the paths of the
# development checkout; make those paths lead here.
if [ ! -e /work/main/tests/fixtures ]; then mkdir -p /work && ln -sfn "$PWD" /work/main; fi
quick=""; tests=1; bench=1; profile=0; torch=1
for a in "$@"; do
  case $a in
    --quick) quick=--quick ;;
    --skip-tests) tests=0 ;;
    --skip-bench) bench=0 ;;
    --profile) profile=1 ;;
    --no-torch) torch=0 ;;
  esac
done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$bin:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv | tee "$out/gpu.txt"
status=0
if [ $tests = 1 ]; then
  for t in cuda_kernel_test cuda_golden_test cuda_deepseek_v4_forward_test; do
    # The golden test writes its tiny models under SLUICE_BINARY_DIR's scratch.
    # Line-buffered, so a log cut short by a time limit still says how far it got.
    stdbuf -oL "$bin/$t" --gtest_brief=1 2>&1 | tee "$out/$t.log" | tail -40
    rc=${PIPESTATUS[0]}
    echo "$t exit $rc"
    [ "$rc" = 0 ] || status=1
  done
  # cuda_kernel_test runs every CudaAttention case under each prefill choice
  # (PrefillKernels/CudaAttention.*/mma, .../wgmma_ws, .../cudnn, .../auto).
fi
# End to end through the CLI: the same greedy generation on the CPU reference
# and on CUDA (tiny random llamas: head_dim 64, so the tensor-core paths run,
# and head_dim 128, whose prefill runs on cuDNN or the wgmma_ws kernel).
if [ $tests = 1 ] && [ -x "$bin/sluice" ]; then
  ids=$(seq -s, 1 3 300)
  : >"$out/generate.txt"
  for spec in "64 256" "128 512"; do
    read -r head_dim hidden <<<"$spec"
    m=/tmp/sluice-tiny-llama-$head_dim
    "$bin/sluice" make-model --arch llama --layers 2 --hidden $hidden --heads 4 --kv-heads 2 \
      --intermediate 512 --vocab 1000 --seed 5 --out $m >/dev/null
    cpu=$("$bin/sluice" generate --model $m --prompt-ids "$ids" --max-tokens 32 --ignore-eos --device cpu 2>&1 | tail -1)
    gpu=$("$bin/sluice" generate --model $m --prompt-ids "$ids" --max-tokens 32 --ignore-eos --device cuda 2>&1 | tail -1)
    echo "head_dim $head_dim generate --device cpu : $cpu" | tee -a "$out/generate.txt"
    echo "head_dim $head_dim generate --device cuda: $gpu" | tee -a "$out/generate.txt"
    python3 -c "import sys; a=sys.argv[1].split(','); b=sys.argv[2].split(','); n=next((i for i,(x,y) in enumerate(zip(a,b)) if x!=y), min(len(a),len(b))); print(f'generate: first {n} of {len(a)} greedy tokens identical (cpu f32 vs cuda bf16)')" "$cpu" "$gpu" | tee -a "$out/generate.txt"
  done
fi
if [ $bench = 1 ]; then
  "$bin/cuda_bench" $quick 2>&1 | tee "$out/bench.md"
  if [ $torch = 1 ]; then
    PYTHONUNBUFFERED=1 python3 tools/device/torch_baselines.py $quick 2>&1 | tee "$out/torch.md"
  else
    : >"$out/torch.md"
  fi
fi
if [ $profile = 1 ]; then
  # Only the summary comes back (the device tool returns at most 8 files).
  OUT=/tmp/cuda-profile tools/device/cuda_profile.sh >"$out/profile.txt" 2>&1
  head -30 "$out/profile.txt"
fi
if [ $bench = 1 ]; then
  echo
  echo "=== table ==="
  cat "$out/bench.md" "$out/torch.md" | grep '^|'
fi
[ $tests = 1 ] && grep -h -E "^\[  (PASSED|FAILED) |tests? ran|FAILED TEST" "$out"/cuda_*_test.log | sort | uniq -c
exit $status
