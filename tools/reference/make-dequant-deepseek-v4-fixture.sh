#!/usr/bin/env bash
# Remakes tests/fixtures/dequant_deepseek_v4_fp8.safetensors: a tiny
# DeepSeek-V4 model written by make-model in V4-Flash's FP8 + FP4 layout, its
# scaled weights dequantized by numpy (dequant_fp4_fp8.py), the make-model
# flags recorded in the fixture so tests rebuild the same model.
# Usage: make-dequant-deepseek-v4-fixture.sh [SLUICE_BINARY]   (from the repository root)
set -euo pipefail
sluice="${1:-build/sluice}"
# Shapes that leave partial blocks and groups: wq_b and the indexer's wq_b
# cross 128 rows, wo_a 128 rows and wo_b 128 columns; w1 / w3 take 80 inputs
# (groups of 32, 32, 16) and w2 16 (one partial group).
flags='{"arch": "deepseek_v4", "dtype": "fp8", "layers": 2, "layer-types": "ch", "hash-layers": 1,
        "hidden": 80, "heads": 5, "head-dim": 32, "o-lora-rank": 72, "moe-intermediate": 16,
        "experts": 4, "experts-per-token": 2, "seed": 7}'
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
mapfile -t args < <(/usr/bin/python3 -c 'import json, sys
for k, v in json.loads(sys.argv[1]).items(): print(f"--{k}"); print(v)' "$flags")
"$sluice" make-model "${args[@]}" --out "$out/model"
/usr/bin/python3 "$(dirname "$0")/dequant_fp4_fp8.py" "$out/model/model.safetensors" \
  tests/fixtures/dequant_deepseek_v4_fp8.safetensors --make-model "$flags"
