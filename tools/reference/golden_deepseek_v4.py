#!/usr/bin/env python3
"""Expected logits and greedy tokens from transformers for DeepSeek-V4.

For each tiny model of golden_deepseek_v4_models.json (written by
make-golden-deepseek-v4-models.sh with `sluice make-model --arch deepseek_v4`,
in the layout DeepSeek publishes: embed, layers.N.attn.*, layers.N.ffn.*,
hc_*), builds DeepseekV4ForCausalLM from the model's config.json in float32
on the CPU (eager attention and experts), renames the checkpoint's tensors to
transformers' names here (so the result does not depend on which conversion
mapping the installed transformers ships), loads them strictly, and writes
tests/fixtures/golden_deepseek_v4_<name>.json with, per prompt: the input ids,
the next-token logits after the prompt, NUM_GREEDY_TOKENS greedy tokens and
the logits of the last greedy step.

The greedy steps run the way generate() does: one prefill, then one token per
step through the model's own cache (the compressors' windows fill and close
across calls). As a check of transformers against itself, the last step is
also recomputed without a cache over the whole sequence (final_logits_uncached);
a disagreement over 1e-4 is printed as a WARNING, and the C++ test holds its
one-prefill run to the uncached logits, its stepwise run to the cached ones.

Usage: golden_deepseek_v4.py --models DIR_WITH_ONE_SUBDIR_PER_MODEL --out DIR
"""
import argparse
import json
import os
import sys
import traceback

import torch
import transformers
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_deepseek_v3 import prompt_ids  # noqa: E402  (the same prompts, seeded per model)

NUM_GREEDY_TOKENS = 32
MAX_SELF_DISAGREEMENT = 1e-4

# DeepSeek's in-layer names -> transformers' (DeepseekV4DecoderLayer), first match wins.
IN_LAYER_RENAMES = (
    ("attn.indexer.compressor.ape", "self_attn.compressor.indexer.position_bias"),
    ("attn.indexer.compressor.wkv", "self_attn.compressor.indexer.kv_proj"),
    ("attn.indexer.compressor.wgate", "self_attn.compressor.indexer.gate_proj"),
    ("attn.indexer.compressor.norm", "self_attn.compressor.indexer.kv_norm"),
    ("attn.indexer.wq_b", "self_attn.compressor.indexer.q_b_proj"),
    ("attn.indexer.weights_proj", "self_attn.compressor.indexer.scorer.weights_proj"),
    ("attn.compressor.ape", "self_attn.compressor.position_bias"),
    ("attn.compressor.wkv", "self_attn.compressor.kv_proj"),
    ("attn.compressor.wgate", "self_attn.compressor.gate_proj"),
    ("attn.compressor.norm", "self_attn.compressor.kv_norm"),
    ("attn.attn_sink", "self_attn.sinks"),
    ("attn.wq_a", "self_attn.q_a_proj"),
    ("attn.wq_b", "self_attn.q_b_proj"),
    ("attn.q_norm", "self_attn.q_a_norm"),
    ("attn.wkv", "self_attn.kv_proj"),
    ("attn.kv_norm", "self_attn.kv_norm"),
    ("attn.wo_a", "self_attn.o_a_proj"),
    ("attn.wo_b", "self_attn.o_b_proj"),
    ("attn_norm", "input_layernorm"),
    ("ffn_norm", "post_attention_layernorm"),
    ("hc_attn_fn", "attn_hc.fn"),
    ("hc_attn_base", "attn_hc.base"),
    ("hc_attn_scale", "attn_hc.scale"),
    ("hc_ffn_fn", "ffn_hc.fn"),
    ("hc_ffn_base", "ffn_hc.base"),
    ("hc_ffn_scale", "ffn_hc.scale"),
    ("ffn.gate.bias", "mlp.gate.e_score_correction_bias"),
    ("ffn.gate.tid2eid", "mlp.gate.tid2eid"),
    ("ffn.gate.weight", "mlp.gate.weight"),
    ("ffn.shared_experts.w1", "mlp.shared_experts.gate_proj"),
    ("ffn.shared_experts.w3", "mlp.shared_experts.up_proj"),
    ("ffn.shared_experts.w2", "mlp.shared_experts.down_proj"),
)
GLOBAL_RENAMES = {
    "embed.weight": "model.embed_tokens.weight",
    "norm.weight": "model.norm.weight",
    "head.weight": "lm_head.weight",
    "hc_head_fn": "model.hc_head.hc_fn",
    "hc_head_base": "model.hc_head.hc_base",
    "hc_head_scale": "model.hc_head.hc_scale",
}


def in_layer_name(suffix):
    for native, hf in IN_LAYER_RENAMES:
        if suffix == native or suffix.startswith(native + "."):
            return hf + suffix[len(native):]
    raise KeyError(f"no transformers name known for layer tensor {suffix!r}")


def hf_state_dict(native, num_experts):
    """transformers' state dict from DeepSeek's names; routed experts fused as
    gate_up_proj [E, 2I, H] (w1 rows, then w3) and down_proj [E, H, I]."""
    out, experts = {}, {}
    for name, tensor in native.items():
        if name.startswith("mtp."):
            continue  # transformers ignores the MTP block (_keys_to_ignore_on_load_unexpected)
        if name in GLOBAL_RENAMES:
            out[GLOBAL_RENAMES[name]] = tensor
            continue
        parts = name.split(".")
        if parts[0] != "layers":
            raise KeyError(f"unexpected checkpoint tensor {name!r}")
        layer, suffix = int(parts[1]), ".".join(parts[2:])
        if suffix.startswith("ffn.experts."):
            _, _, expert, proj, _ = suffix.split(".")
            experts.setdefault(layer, {})[(int(expert), proj)] = tensor
            continue
        if suffix == "ffn.gate.tid2eid":
            tensor = tensor.long()
        out[f"model.layers.{layer}.{in_layer_name(suffix)}"] = tensor
    for layer, parts in experts.items():
        gate_up = [torch.cat([parts[(e, "w1")], parts[(e, "w3")]], dim=0) for e in range(num_experts)]
        out[f"model.layers.{layer}.mlp.experts.gate_up_proj"] = torch.stack(gate_up)
        out[f"model.layers.{layer}.mlp.experts.down_proj"] = torch.stack([parts[(e, "w2")] for e in range(num_experts)])
    return out


def load(path):
    config = AutoConfig.from_pretrained(path)
    if type(config).__name__ != "DeepseekV4Config":
        raise RuntimeError(f"config.json loads as {type(config).__name__}, expected DeepseekV4Config")
    config._attn_implementation = "eager"
    kwargs = {"torch_dtype": torch.float32, "attn_implementation": "eager"}
    try:
        model = AutoModelForCausalLM.from_config(config, experts_implementation="eager", **kwargs)
    except (TypeError, ValueError):  # a transformers without experts_implementation: eager is all it has
        model = AutoModelForCausalLM.from_config(config, **kwargs)
    if type(model).__name__ != "DeepseekV4ForCausalLM":
        raise RuntimeError(f"built {type(model).__name__}, expected DeepseekV4ForCausalLM")
    files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
    native = {}
    for f in files:
        native.update(load_file(os.path.join(path, f)))
    state = {k: v.float() if v.is_floating_point() else v for k, v in hf_state_dict(native, config.n_routed_experts).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        expected = sorted(model.state_dict().keys())
        raise RuntimeError(f"the renamed checkpoint does not match DeepseekV4ForCausalLM: missing {missing}, "
                           f"unexpected {unexpected}; the model's own keys: {expected}")
    model.float().eval()
    return model


@torch.no_grad()
def greedy_case(model, prompt):
    """Prefill, then NUM_GREEDY_TOKENS greedy steps through the model's cache."""
    # Positions are passed, not left to the cache's own count (a sliding cache keeps only its window).
    out = model(input_ids=torch.tensor([prompt]), position_ids=torch.arange(len(prompt)).unsqueeze(0), use_cache=True)
    logits = out.logits[0, -1].float()
    prompt_logits = logits.tolist()
    generated = []
    for step in range(NUM_GREEDY_TOKENS):
        token = int(torch.argmax(logits))
        generated.append(token)
        if step == NUM_GREEDY_TOKENS - 1:
            break
        position = len(prompt) + step
        out = model(input_ids=torch.tensor([[token]]), position_ids=torch.tensor([[position]]),
                    past_key_values=out.past_key_values, use_cache=True)
        logits = out.logits[0, -1].float()
    final_logits = logits
    # transformers against itself: the last step without a cache.
    whole = list(prompt) + generated[:-1]
    uncached = model(input_ids=torch.tensor([whole]), use_cache=False).logits[0, -1].float()
    disagreement = float((uncached - final_logits).abs().max())
    if disagreement > MAX_SELF_DISAGREEMENT:
        print(f"WARNING: prompt of {len(prompt)}: transformers' cached and uncached last logits differ by "
              f"{disagreement:.3g}; both are written, and the C++ test checks its prefill against the uncached ones")
    return {"prompt": list(prompt), "prompt_logits": prompt_logits, "greedy_tokens": generated,
            "final_logits": final_logits.tolist(), "final_logits_uncached": uncached.tolist(),
            "uncached_final_disagreement": disagreement}


def run_model(path, lengths, seed):
    model = load(path)
    cases = [greedy_case(model, prompt_ids(length, model.config.vocab_size, seed)) for length in lengths]
    c = model.config
    seen = {"layer_types": c.layer_types, "mlp_layer_types": c.mlp_layer_types, "compress_rates": c.compress_rates,
            "rope_parameters": c.rope_parameters, "qk_rope_head_dim": getattr(c, "qk_rope_head_dim", None)}
    return cases, seen


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    here = os.path.dirname(os.path.abspath(__file__))
    spec = json.load(open(os.path.join(here, "golden_deepseek_v4_models.json")))["models"]
    failures = 0
    for name, model_spec in spec.items():
        try:
            cases, seen = run_model(os.path.join(args.models, name), model_spec["prompt_lengths"],
                                    model_spec["make_model"]["seed"])
        except Exception:  # report every model, then fail
            print(f"{name}: FAILED:\n{traceback.format_exc()}")
            failures += 1
            continue
        fixture = {"model": name, "make_model": model_spec["make_model"], "transformers": transformers.__version__,
                   "torch": torch.__version__, "transformers_saw": seen, "cases": cases}
        path = os.path.join(args.out, f"golden_deepseek_v4_{name}.json")
        with open(path, "w") as f:
            json.dump(fixture, f, separators=(",", ":"), default=str)
        worst = max(c["uncached_final_disagreement"] for c in cases)
        print(f"{name}: {len(cases)} prompts of {model_spec['prompt_lengths']} tokens -> {path} "
              f"(cached vs uncached: {worst:.3g})")
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()
