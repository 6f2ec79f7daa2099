#!/usr/bin/env bash
# Writes the tiny golden models of a models json whose entries carry
# `make_model` flags (golden_deepseek_v3_models.json, golden_deepseek_v4_models.json)
# into DIR/<name> with the sluice binary given (default build/sluice).
set -euo pipefail
models=${1:?usage: make-golden-from-json.sh MODELS_JSON OUT_DIR [SLUICE_BINARY]}
out=${2:?usage: make-golden-from-json.sh MODELS_JSON OUT_DIR [SLUICE_BINARY]}
sluice=${3:-build/sluice}
/usr/bin/python3 - "$models" <<'PY' | while read -r name args; do
import json, sys
for name, spec in json.load(open(sys.argv[1]))["models"].items():
    print(name, " ".join(f"--{flag} {value}" for flag, value in spec["make_model"].items()))
PY
  # shellcheck disable=SC2086
  "$sluice" make-model $args --out "$out/$name" >/dev/null
done
