#!/usr/bin/env bash
# Writes the tiny DeepSeek-V4 golden models of golden_deepseek_v4_models.json
# into DIR/<name> with the sluice binary given (default build/sluice).
set -euo pipefail
out=${1:?usage: make-golden-deepseek-v4-models.sh OUT_DIR [SLUICE_BINARY]}
sluice=${2:-build/sluice}
here=$(dirname "$0")
/usr/bin/python3 - "$here/golden_deepseek_v4_models.json" <<'PY' | while read -r name args; do
import json, sys
for name, spec in json.load(open(sys.argv[1]))["models"].items():
    print(name, " ".join(f"--{flag} {value}" for flag, value in spec["make_model"].items()))
PY
  # shellcheck disable=SC2086
  "$sluice" make-model $args --out "$out/$name" >/dev/null
done
