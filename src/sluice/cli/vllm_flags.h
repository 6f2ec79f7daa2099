// vLLM launch-line compatibility for `sluice serve`: one table says, for each
// vLLM flag an operator is likely to paste, whether sluice has the same flag,
// accepts it as a no-op (and why that is true), or refuses it (and what sluice
// does instead). The start-up check, `sluice serve --vllm-flags` and the
// README's "Coming from vLLM" table all read this table.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "sluice/common/result.h"

namespace sluice::cli {

enum class VllmFlagKind {
  kSame,     // sluice has this flag with vLLM's meaning: its own parser handles it
  kNoOp,     // accepted for the values in `accepted`; it changes nothing, `note` says why
  kRefused,  // refused (for values outside `accepted`, when set); `note` says what sluice does instead
};

struct VllmFlag {
  std::string_view name;      // with the leading "--"
  bool takes_value;           // consumes one value ("--flag v" or "--flag=v")
  VllmFlagKind kind;
  std::string_view accepted;  // '|'-separated values accepted as a no-op; empty = any (kNoOp) or none (kRefused)
  std::string_view note;
};

// clang-format off
inline constexpr std::array kVllmFlags = {
    VllmFlag{"--model", true, VllmFlagKind::kSame, "", "also positional: sluice serve MODEL"},
    VllmFlag{"--host", true, VllmFlagKind::kSame, "", ""},
    VllmFlag{"--port", true, VllmFlagKind::kSame, "", ""},
    VllmFlag{"--api-key", true, VllmFlagKind::kSame, "", ""},
    VllmFlag{"--served-model-name", true, VllmFlagKind::kSame, "", "several names: each is accepted in requests and listed by /v1/models"},
    VllmFlag{"--max-model-len", true, VllmFlagKind::kSame, "", "auto (the model's) and 128k / 128K (x1000 / x1024) forms"},
    VllmFlag{"--max-num-seqs", true, VllmFlagKind::kSame, "", ""},
    VllmFlag{"--max-num-batched-tokens", true, VllmFlagKind::kSame, "", ""},
    VllmFlag{"--long-prefill-token-threshold", true, VllmFlagKind::kSame, "", ""},
    VllmFlag{"--enable-prefix-caching", false, VllmFlagKind::kSame, "", ""},
    VllmFlag{"--no-enable-prefix-caching", false, VllmFlagKind::kSame, "", ""},
    VllmFlag{"--async-scheduling", false, VllmFlagKind::kSame, "", ""},
    VllmFlag{"--block-size", true, VllmFlagKind::kSame, "", ""},
    VllmFlag{"--gpu-memory-utilization", true, VllmFlagKind::kSame, "", "--device cuda and sim; cpu sizes KV by --kv-cache-memory"},
    VllmFlag{"--tensor-parallel-size", true, VllmFlagKind::kSame, "", "also -tp; on cpu, N ranks as threads (the dense family: N divides the KV heads; DeepSeek-V3: heads and experts sharded); 1 on cuda until the NCCL communicator is wired; any on --device sim, which replays an N-GPU launch"},
    VllmFlag{"--reasoning-parser", true, VllmFlagKind::kSame, "", "the reasoning markers: auto (by model_type), none, qwen3, deepseek_r1, deepseek_v3, deepseek_v4, deepseek_v41; vLLM's tool-call-only names (hermes, qwen3_coder, llama3_json, deepseek_v31) are refused with the one to use"},
    VllmFlag{"--tool-call-parser", true, VllmFlagKind::kSame, "", "the tool-call syntax: hermes, qwen3, qwen3_coder (values typed by the tool schema), llama3_json, deepseek_r1, deepseek_v3, deepseek_v31, deepseek_v4 and deepseek_v41 (DSML; values typed by their string attribute) (alone it sets the reasoning markers too)"},
    VllmFlag{"--trust-remote-code", false, VllmFlagKind::kNoOp, "", "sluice never runs code from a checkpoint"},
    VllmFlag{"--disable-log-requests", false, VllmFlagKind::kNoOp, "", "sluice does not log requests"},
    VllmFlag{"--enable-log-requests", false, VllmFlagKind::kRefused, "", "sluice does not log requests; /metrics and the stats line report them"},
    VllmFlag{"--disable-log-stats", false, VllmFlagKind::kSame, "", "same as --stats-log-interval 0"},
    VllmFlag{"--enable-chunked-prefill", false, VllmFlagKind::kNoOp, "", "sluice always chunks prefill, by predicted step time (--max-step-ms)"},
    VllmFlag{"--no-enable-chunked-prefill", false, VllmFlagKind::kRefused, "", "sluice always chunks prefill, by predicted step time (--max-step-ms); it cannot be turned off"},
    VllmFlag{"--enable-prompt-tokens-details", false, VllmFlagKind::kSame, "", "usage.prompt_tokens_details.cached_tokens; on by default in sluice (--no-enable-prompt-tokens-details drops it)"},
    VllmFlag{"--enable-auto-tool-choice", false, VllmFlagKind::kSame, "", "without it tool_choice auto (the default when tools are sent) is a 400, as in vLLM; needs a format that parses tool calls"},
    VllmFlag{"--kv-cache-dtype", true, VllmFlagKind::kSame, "", "auto (the model's dtype); fp8, fp8_e4m3 or fp8_ds_mla: DeepSeek-V4 on --device cuda stores fp8_ds_mla records (584 B a latent against bf16's 1024); --device sim prices a profile's FP8 layout; refused for other models, --device cpu and profiles without one"},
    VllmFlag{"--dtype", true, VllmFlagKind::kSame, "", "auto; bfloat16 with --device cuda (what it computes in), float32 with --device cpu (what it computes in); anything else is refused with the device's reason"},
    VllmFlag{"--quantization", true, VllmFlagKind::kRefused, "", "sluice reads the quantization from the checkpoint's config.json; no override"},
    VllmFlag{"--load-format", true, VllmFlagKind::kRefused, "auto|safetensors", "only safetensors checkpoints load"},
    VllmFlag{"--tokenizer-mode", true, VllmFlagKind::kRefused, "auto|deepseek_v4", "sluice always reads the model directory's tokenizer.json; a deepseek_v4 model without a chat template is encoded as DeepSeek's encoding_dsv4.py does, the mode vLLM names deepseek_v4 (V4.1's deepseek_v41 encoder is not implemented)"},
    VllmFlag{"--tokenizer", true, VllmFlagKind::kSame, "", "a directory with tokenizer.json (and its chat template)"},
    VllmFlag{"--chat-template", true, VllmFlagKind::kSame, "", "a Jinja file; an inline template string is not taken"},
    VllmFlag{"--default-chat-template-kwargs", true, VllmFlagKind::kSame, "", "a request's chat_template_kwargs override it key by key"},
    VllmFlag{"--generation-config", true, VllmFlagKind::kSame, "", "auto (default): the model's generation_config.json sets the default temperature, top_p, top_k, min_p, repetition_penalty and max_tokens (max_new_tokens); vllm: neutral defaults; DIR: that folder's file"},
    VllmFlag{"--seed", true, VllmFlagKind::kSame, "", "the seed of every request that sends none (choice i: seed + i)"},
    VllmFlag{"--speculative-config", true, VllmFlagKind::kRefused, "", "speculative decoding is not implemented; sluice decodes one token per step"},
    VllmFlag{"--enable-expert-parallel", false, VllmFlagKind::kSame, "", "with -tp N > 1: routed experts split whole over the ranks (cpu: threads; sim: replays the launch); cuda runs one device"},
    VllmFlag{"--data-parallel-size", true, VllmFlagKind::kRefused, "", "one engine per process; run several sluice processes behind a balancer"},
    VllmFlag{"--pipeline-parallel-size", true, VllmFlagKind::kRefused, "", "sluice runs on one device"},
    VllmFlag{"--compilation-config", true, VllmFlagKind::kRefused, "", "there is no torch.compile; the CUDA backend's launch options are the --cuda-* flags"},
    VllmFlag{"--enforce-eager", false, VllmFlagKind::kRefused, "", "there is no torch.compile; the CUDA backend's launch options are the --cuda-* flags"},
    VllmFlag{"--mm-encoder-tp-mode", true, VllmFlagKind::kRefused, "", "no multimodal encoder: sluice serves text only"},
    VllmFlag{"--limit-mm-per-prompt", true, VllmFlagKind::kRefused, "", "no multimodal encoder: sluice serves text only"},
    VllmFlag{"--swap-space", true, VllmFlagKind::kRefused, "", "preemption swaps to the host tier of --kv-offloading-size when storing and reloading is cheaper than recomputing; without that tier a preempted request recomputes its prefix"},
    VllmFlag{"--kv-offloading-size", true, VllmFlagKind::kSame, "", "GiB of host memory for the KV tier below the device"},
    VllmFlag{"--kv-offloading-backend", true, VllmFlagKind::kSame, "native", "only native: sluice's own host memory tier"},
    VllmFlag{"--cpu-offload-gb", true, VllmFlagKind::kRefused, "", "no weight offload: weights stay on the device"},
    VllmFlag{"--kv-transfer-config", true, VllmFlagKind::kRefused, "", "no KV connectors: the host tier is --kv-offloading-size"},
    VllmFlag{"--enable-lora", false, VllmFlagKind::kRefused, "", "LoRA adapters are not supported"},
};
// clang-format on

// Rewrites a `serve` argument list (program name and "serve" excluded) before
// CLI11 sees it: drops no-op vLLM flags (logging each why) and refuses refused
// and unknown flags. The error
// holds one line per bad flag; an unknown one names the nearest known flag.
Result<std::vector<std::string>> translate_vllm_flags(const CLI::App& serve, std::vector<std::string> args);

// Logs each line of a refusal message as its own error line, so every line
// starts with the flag it names.
void log_error_lines(std::string_view message);

// The table as Markdown, one row per flag (README's "Coming from vLLM").
std::string vllm_flags_markdown();

// Levenshtein distance, for "did you mean".
std::size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace sluice::cli
