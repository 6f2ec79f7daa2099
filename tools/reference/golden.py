#!/usr/bin/env python3
"""Expected logits and greedy tokens from Hugging Face transformers.

Runs where torch and transformers are installed (the GPU machine). For each
model directory made by `sluice make-model` (see golden_models.json), loads it
with AutoModelForCausalLM in float32 on the CPU (exact f32, no TF32) and writes
tests/fixtures/golden_<name>.json with, per prompt: the next-token logits after
the prompt, 32 greedy tokens (full recompute each step, no cache), and the
logits of the last greedy step.

With --bf16, loads the models in bfloat16 on the GPU instead (sdpa attention)
and writes golden_bf16_<name>.json: the logits transformers computes in bf16
at the same two positions, teacher-forced on the float32 fixture's greedy
tokens (read from --out), so a bf16 backend can be compared with a bf16
reference and both with float32.

Usage: golden.py --models DIR_WITH_ONE_SUBDIR_PER_MODEL --out DIR [--bf16]
"""
import argparse
import json
import os

import torch
import transformers
from transformers import AutoModelForCausalLM

NUM_GREEDY_TOKENS = 32


# One token, a partial block, several blocks, and positions in the thousands
# (hundreds of blocks; rope, llama3 scaling included, far from position 0).
PROMPT_LENGTHS = (1, 13, 50, 2000)


def prompts(vocab_limit):
    """Deterministic prompts of PROMPT_LENGTHS tokens."""
    state = 12345
    out = []
    for length in PROMPT_LENGTHS:
        ids = []
        for _ in range(length):
            state = (state * 1103515245 + 12345) % (1 << 31)
            ids.append(state % vocab_limit)
        out.append(ids)
    return out


@torch.no_grad()
def greedy_case(model, prompt):
    """One fixture case: the logits after the prompt, NUM_GREEDY_TOKENS greedy
    tokens (each step recomputes the whole sequence, no cache) and the logits
    of the last step."""
    ids = list(prompt)
    prompt_logits = None
    last_logits = None
    generated = []
    for step in range(NUM_GREEDY_TOKENS):
        logits = model(torch.tensor([ids]), use_cache=False).logits[0, -1].float()
        if step == 0:
            prompt_logits = logits.tolist()
        last_logits = logits.tolist()
        token = int(torch.argmax(logits))
        generated.append(token)
        ids.append(token)
    return {"prompt": list(prompt), "prompt_logits": prompt_logits,
            "greedy_tokens": generated, "final_logits": last_logits}


@torch.no_grad()
def run_model(path):
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    return [greedy_case(model, prompt) for prompt in prompts(model.config.vocab_size)]


@torch.no_grad()
def run_model_bf16(path, f32_cases):
    """bf16 logits after the prompt and at the last greedy step, on the f32 tokens."""
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, attn_implementation="sdpa").to("cuda")
    model.eval()
    cases = []
    for case in f32_cases:
        ids = case["prompt"] + case["greedy_tokens"][:NUM_GREEDY_TOKENS - 1]
        logits = model(torch.tensor([ids], device="cuda")).logits[0].float()
        cases.append({"prompt": case["prompt"], "prompt_logits": logits[len(case["prompt"]) - 1].tolist(),
                      "final_logits": logits[-1].tolist()})
    return cases


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--bf16", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    spec = json.load(open(os.path.join(os.path.dirname(__file__), "golden_models.json")))["models"]
    failures = 0
    for name, make_args in spec.items():
        prefix = "golden_bf16_" if args.bf16 else "golden_"
        try:
            if args.bf16:
                f32 = json.load(open(os.path.join(args.out, f"golden_{name}.json")))
                cases = run_model_bf16(os.path.join(args.models, name), f32["cases"])
            else:
                cases = run_model(os.path.join(args.models, name))
        except Exception as error:  # report every model, then fail
            print(f"{name}: FAILED: {error!r}")
            failures += 1
            continue
        fixture = {"model": name, "make_model": make_args, "transformers": transformers.__version__,
                   "torch": torch.__version__, "cases": cases}
        if args.bf16:
            fixture["dtype"] = "bfloat16"
        path = os.path.join(args.out, f"{prefix}{name}.json")
        with open(path, "w") as f:
            json.dump(fixture, f, separators=(",", ":"))
        print(f"{name}: {len(cases)} prompts -> {path}")
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()
