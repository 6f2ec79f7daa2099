#!/usr/bin/env bash
# Writes the tiny golden models described in golden_models.json into DIR/<name>
# with the sluice binary given (default build/sluice).
set -euo pipefail
out=${1:?usage: make-golden-models.sh OUT_DIR [SLUICE_BINARY]}
sluice=${2:-build/sluice}
here=$(dirname "$0")
/usr/bin/python3 - "$here/golden_models.json" <<'PY' | while read -r name args; do
import json, sys
for name, a in json.load(open(sys.argv[1]))["models"].items():
    head = f" --head-dim {a['head_dim']}" if a["head_dim"] else ""
    print(name, f"--arch {a['arch']} --layers {a['layers']} --hidden {a['hidden']} --heads {a['heads']} "
                f"--kv-heads {a['kv_heads']} --intermediate {a['intermediate']} --vocab {a['vocab']} --seed {a['seed']}{head}")
PY
  # shellcheck disable=SC2086
  "$sluice" make-model $args --out "$out/$name" >/dev/null
done
