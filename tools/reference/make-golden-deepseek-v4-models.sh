#!/usr/bin/env bash
# Writes the tiny DeepSeek-V4 golden models of golden_deepseek_v4_models.json
# into DIR/<name> with the sluice binary given (default build/sluice).
set -euo pipefail
exec "$(dirname "$0")/make-golden-from-json.sh" "$(dirname "$0")/golden_deepseek_v4_models.json" \
  "${1:?usage: make-golden-deepseek-v4-models.sh OUT_DIR [SLUICE_BINARY]}" "${2:-build/sluice}"
