#!/usr/bin/env python3
"""Expected logits and greedy tokens from transformers for DeepSeek-V3.

The DeepSeek-V3 counterpart of golden.py: for each tiny model of
golden_deepseek_v3_models.json (made by make-golden-deepseek-v3-models.sh
with `sluice make-model --arch deepseek_v3`), loads it with
AutoModelForCausalLM in float32 on the CPU (eager attention, eager experts)
and writes tests/fixtures/golden_deepseek_v3_<name>.json with, per prompt:
the next-token logits after the prompt, NUM_GREEDY_TOKENS greedy tokens
(full recompute each step, no cache) and the logits of the last greedy step.

Prompts are longer than golden.py's: the longest of each YaRN model runs past
rope_scaling.original_max_position_embeddings. The load must match the
checkpoint exactly (no missing, unexpected or resized tensor), or the model
fails: a tensor transformers did not find would be random.

Usage: golden_deepseek_v3.py --models DIR_WITH_ONE_SUBDIR_PER_MODEL --out DIR
"""
import argparse
import json
import os
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden import greedy_case  # noqa: E402  (one fixture format for every family)


def prompt_ids(length, vocab, seed):
    """A deterministic prompt: the LCG of golden.py, seeded per model and length."""
    state = (12345 + 7919 * seed + length) % (1 << 31)
    ids = []
    for _ in range(length):
        state = (state * 1103515245 + 12345) % (1 << 31)
        ids.append(state % vocab)
    return ids


def load(path):
    loaded = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager",
                                                  experts_implementation="eager", output_loading_info=True)
    model, info = loaded
    problems = {key: info[key] for key in ("missing_keys", "unexpected_keys", "mismatched_keys") if info.get(key)}
    if problems:
        raise RuntimeError(f"the checkpoint does not match {type(model).__name__}: {problems}")
    if type(model).__name__ != "DeepseekV3ForCausalLM":
        raise RuntimeError(f"loaded {type(model).__name__}, expected DeepseekV3ForCausalLM")
    model.eval()
    return model


@torch.no_grad()
def run_model(path, lengths, seed):
    model = load(path)
    vocab = model.config.vocab_size
    cases = []
    for length in lengths:
        cases.append(greedy_case(model, prompt_ids(length, vocab, seed)))
    rope = getattr(model.config, "rope_parameters", None) or getattr(model.config, "rope_scaling", None)
    return cases, {"rope": rope, "rope_interleave": getattr(model.config, "rope_interleave", None)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    here = os.path.dirname(os.path.abspath(__file__))
    spec = json.load(open(os.path.join(here, "golden_deepseek_v3_models.json")))["models"]
    failures = 0
    for name, model_spec in spec.items():
        try:
            cases, seen = run_model(os.path.join(args.models, name), model_spec["prompt_lengths"],
                                    model_spec["make_model"]["seed"])
        except Exception as error:  # report every model, then fail
            print(f"{name}: FAILED: {error!r}")
            failures += 1
            continue
        fixture = {"model": name, "make_model": model_spec["make_model"], "transformers": transformers.__version__,
                   "torch": torch.__version__, "transformers_saw": seen, "cases": cases}
        path = os.path.join(args.out, f"golden_deepseek_v3_{name}.json")
        with open(path, "w") as f:
            json.dump(fixture, f, separators=(",", ":"), default=str)
        print(f"{name}: {len(cases)} prompts of {model_spec['prompt_lengths']} tokens -> {path}")
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()
