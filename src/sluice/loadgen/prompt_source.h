// Prompts of a known token count for a server whose tokenizer we do not know.
// A prompt is a list of segments; each segment is the first `num_tokens` of a
// deterministic token stream named by its key. Two prompts that start with
// the same segments therefore share a real prefix (trace hash ids, session
// history), and nothing is materialised until the request is sent: a trace of
// 12k requests of 12k tokens each stays small in memory.
//
// Sent as token ids (the completions API accepts a list of ints) by default,
// or as text, one common English word per token, for servers that do not take
// ids (and for the chat API): about one token per word for real tokenizers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::loadgen {

struct PromptSegment {
  std::uint64_t key = 0;
  std::int32_t num_tokens = 0;
};

struct PromptSpec {
  std::vector<PromptSegment> segments;
  std::string literal_text;  // a trace's own prompt text; used instead of segments when set

  std::int64_t num_planned_tokens() const;
};

// Token ids are drawn uniformly from [min_token_id, max_token_id).
struct TokenSpace {
  std::int32_t min_token_id = 100;
  std::int32_t max_token_id = 1000;
  std::uint64_t seed = 0;
};

std::vector<std::int32_t> prompt_token_ids(const PromptSpec& prompt, const TokenSpace& space);
std::string prompt_text(const PromptSpec& prompt, const TokenSpace& space);

}  // namespace sluice::loadgen
