#!/usr/bin/env python3
"""Checks that src/sluice keeps the layering docs/architecture.md draws.

Two rules, both from the #include lines:
  1. A module includes only the modules listed for it in ALLOWED (directly).
  2. The modules in NO_BACKEND reach no backend/ header, even through other
     headers (the engine's public header only forward-declares the backend).
Prints every violation with the include chain and exits 1 if there is any.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
SRC = ROOT / "src"

# Module -> the modules it may include. A module is a folder under src/sluice;
# backend/cpu, backend/cuda and model/cuda are modules of their own.
ALLOWED = {
    "common": set(),
    "backend": {"common"},
    "dist": {"common"},
    "backend/cpu": {"backend", "common"},
    "backend/cuda": {"backend", "backend/cpu", "common"},
    "model": {"backend", "common", "dist"},
    "model/cuda": {"backend", "backend/cpu", "backend/cuda", "common", "dist", "model"},
    "kv": {"common"},
    "sched": {"common", "kv"},
    "engine": {"backend", "common", "kv", "sched"},
    "sim": {"backend", "common", "engine", "kv", "model", "sched"},
    "tokenizer": {"common"},
    "structured": {"common", "engine", "tokenizer"},
    "api": {"common", "tokenizer"},
    "server": {"api", "common", "engine", "structured", "tokenizer"},
    "loadgen": {"common"},
    "cli": None,  # the top: may include anything
}
NO_BACKEND = {"sched", "kv", "tokenizer", "server", "structured", "api"}

INCLUDE = re.compile(r'^\s*#\s*include\s+"(sluice/[^"]+)"', re.M)


def module_of(rel):  # rel: "sluice/backend/cuda/x.h" -> "backend/cuda"
    parts = rel.split("/")[1:-1]
    if len(parts) >= 2 and "/".join(parts[:2]) in ALLOWED:
        return "/".join(parts[:2])
    return parts[0] if parts else ""


def includes(path):
    return INCLUDE.findall(path.read_text(errors="replace"))


def main():
    files = [p for p in (SRC / "sluice").rglob("*") if p.suffix in (".h", ".cpp", ".cu", ".cuh")]
    if not files:
        print(f"no sources under {SRC}/sluice")
        return 1
    errors = []
    for path in files:
        rel = str(path.relative_to(SRC))
        mod = module_of(rel)
        if mod not in ALLOWED:
            errors.append(f"{rel}: module '{mod}' is not in the layering table (tools/lint/check_layering.py)")
            continue
        allowed = ALLOWED[mod]
        for inc in includes(path):
            dep = module_of(inc)
            if allowed is not None and dep != mod and dep not in allowed:
                errors.append(f"{rel}: includes {inc} ({mod} may include {sorted(allowed) or 'nothing'})")

    # Rule 2: transitive closure over headers.
    for path in files:
        rel = str(path.relative_to(SRC))
        if module_of(rel) not in NO_BACKEND:
            continue
        seen, stack = {rel: None}, [rel]
        while stack:
            cur = stack.pop()
            cur_path = SRC / cur
            if not cur_path.exists():
                continue
            for inc in includes(cur_path):
                if inc in seen:
                    continue
                seen[inc] = cur
                if module_of(inc).startswith("backend"):
                    chain, node = [inc], cur
                    while node:
                        chain.append(node)
                        node = seen[node]
                    errors.append(f"{rel}: reaches {inc} via {' <- '.join(chain)}")
                    continue
                stack.append(inc)
    for e in sorted(set(errors)):
        print(e)
    print(f"{len(files)} files checked, {len(set(errors))} layering violations")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
