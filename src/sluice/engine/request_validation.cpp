#include "sluice/engine/request_validation.h"

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "sluice/common/token_ids.h"

namespace sluice {
namespace {

RequestRejection invalid(RequestField field, std::string message) {
  return {.field = field, .error = Error{std::move(message), ErrorCode::kInvalidArgument}};
}

RequestRejection too_long(RequestField field, std::string message) {
  return {.field = field, .error = Error{std::move(message), ErrorCode::kOutOfRange}};
}

// What one request may grow to: the context, or less when the KV cache holds
// less. A request that outgrows the cache would preempt itself and wait forever.
std::int64_t room_tokens(const EngineRequestLimits& limits) {
  return std::min<std::int64_t>(limits.max_model_len_tokens, limits.max_kv_tokens);
}

}  // namespace

std::int32_t resolved_max_tokens(const EngineRequest& request, const EngineRequestLimits& limits) {
  return request.max_tokens.value_or(static_cast<std::int32_t>(room_tokens(limits)) -
                                     static_cast<std::int32_t>(request.prompt_token_ids.size()));
}

std::optional<RequestRejection> check_request(const EngineRequest& request, const EngineRequestLimits& limits) {
  if (request.request_id.empty()) return invalid(RequestField::kRequestId, "the request id is empty");
  const std::int64_t num_prompt_tokens = static_cast<std::int64_t>(request.prompt_token_ids.size());
  if (num_prompt_tokens == 0) return invalid(RequestField::kPrompt, "the prompt is empty");
  // vLLM's sentences: agentic clients parse them to decide to compact their context.
  if (num_prompt_tokens >= limits.max_model_len_tokens) {
    return too_long(RequestField::kPrompt,
                    fmt::format("This model's maximum context length is {} tokens. However, your request has {} input "
                                "tokens. Please reduce the length of the input messages.",
                                limits.max_model_len_tokens, num_prompt_tokens));
  }
  if (num_prompt_tokens + 1 > limits.max_kv_tokens) {
    return too_long(RequestField::kPrompt,
                    fmt::format("This server's KV cache holds at most {} tokens of one request. However, your request "
                                "has {} input tokens, and needs room for one generated token more. Please reduce the "
                                "length of the input messages.",
                                limits.max_kv_tokens, num_prompt_tokens));
  }
  if (Status in_vocabulary = check_token_ids(request.prompt_token_ids, limits.vocab_size); !in_vocabulary)
    return RequestRejection{.field = RequestField::kPrompt, .error = in_vocabulary.error()};
  if (request.max_tokens && *request.max_tokens < 1)
    return invalid(RequestField::kMaxTokens, fmt::format("max_tokens must be at least 1, got {}", *request.max_tokens));
  if (request.min_tokens < 0)
    return invalid(RequestField::kMinTokens, fmt::format("min_tokens must be at least 0, got {}", request.min_tokens));
  const std::int32_t max_tokens = resolved_max_tokens(request, limits);
  if (num_prompt_tokens + max_tokens > limits.max_model_len_tokens) {
    return too_long(RequestField::kMaxTokens,
                    fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens "
                                "({} in the messages, {} in the completion). Please reduce the length of the messages "
                                "or completion.",
                                limits.max_model_len_tokens, num_prompt_tokens + max_tokens, num_prompt_tokens,
                                max_tokens));
  }
  if (num_prompt_tokens + max_tokens > limits.max_kv_tokens) {
    return too_long(RequestField::kMaxTokens,
                    fmt::format("This server's KV cache holds at most {} tokens of one request. However, you requested "
                                "{} tokens ({} in the messages, {} in the completion). Please reduce the length of the "
                                "messages or completion.",
                                limits.max_kv_tokens, num_prompt_tokens + max_tokens, num_prompt_tokens, max_tokens));
  }
  if (request.min_tokens > max_tokens) {
    return invalid(RequestField::kMinTokens,
                   fmt::format("min_tokens ({}) must not exceed max_tokens ({}{})", request.min_tokens, max_tokens,
                               request.max_tokens ? "" : ": the rest of the context or KV cache"));
  }
  for (const auto& [token, bias] : request.sampling.logit_bias)
    if (token < 0 || token >= limits.vocab_size)
      return invalid(RequestField::kLogitBias, fmt::format("logit_bias names token id {}, outside this model's "
                                                           "vocabulary of {}",
                                                           token, limits.vocab_size));
  return std::nullopt;
}

}  // namespace sluice
