// OpenAI response objects, built exactly as clients and gateways decode them:
// integer `created`, the same id/created on every chunk, `choices: []` on the
// usage chunk, both usage detail objects always present, tool-call fragments
// with index/id/type/name on the first fragment of a call only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sluice/server/output_parser.h"

namespace sluice::server {

struct Usage {
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
  std::int64_t cached_tokens = 0;
  std::int64_t reasoning_tokens = 0;
};
// Without `with_prompt_tokens_details` (--no-enable-prompt-tokens-details) the
// prompt_tokens_details object is left out, as vLLM leaves it out by default.
nlohmann::json usage_json(const Usage& usage, bool with_prompt_tokens_details = true);

// What every object of one response shares.
struct ResponseHeader {
  std::string id;         // "chatcmpl-..." or "cmpl-..."
  std::int64_t created_s = 0;  // Unix seconds, an integer on the wire
  std::string model;
};

// Chat streaming: the delta for one piece of parsed output. with_role adds
// role "assistant" (the first delta of a choice).
nlohmann::json chat_delta(const ParsedDelta& delta, bool with_role);
// One "chat.completion.chunk"; `usage` is added (null or the object) when
// include_usage is on, since clients then expect the key on every chunk.
nlohmann::json chat_chunk(const ResponseHeader& header, nlohmann::json choices, bool include_usage_key,
                          const nlohmann::json& usage = nullptr);
nlohmann::json completion_chunk(const ResponseHeader& header, nlohmann::json choices, bool include_usage_key,
                                const nlohmann::json& usage = nullptr);

// A finished tool call of a non-streaming message.
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text
};
nlohmann::json chat_message(const std::string& content, const std::string& reasoning,
                            const std::vector<ToolCall>& tool_calls);

// One token's entry in chat logprobs ({token, logprob, bytes, top_logprobs}).
struct TokenLogprobText {
  std::string token;
  float logprob = 0.0f;
};
nlohmann::json chat_logprob_entry(const TokenLogprobText& chosen, const std::vector<TokenLogprobText>& top);

// SSE framing.
std::string sse_event(const nlohmann::json& data);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";
inline constexpr const char* kSseKeepAlive = ": keep-alive\n\n";

}  // namespace sluice::server
