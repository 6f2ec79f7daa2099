// The one check of a request against what the engine can run. Engine::submit
// runs it, and the server runs it right after tokenizing, so a bad request is a
// 400 before anything is submitted, with the message submit would give. Each
// message is built from the limit its check compares against.
//
// The server's JSON layer checks types and ranges of its own (max_tokens >= 1,
// min_tokens <= an explicit max_tokens); what depends on the model and the
// engine (vocabulary, context length, KV capacity) is checked only here.
#pragma once

#include <cstdint>
#include <optional>

#include "sluice/common/result.h"
#include "sluice/engine/engine.h"

namespace sluice {

// What one request may ask of an engine (Engine::request_limits()).
struct EngineRequestLimits {
  std::int32_t max_model_len_tokens = 0;  // prompt + generated tokens
  std::int32_t vocab_size = 0;            // token ids are in [0, vocab_size)
  // The KV cache's room for one request beside the admission reserve: a prompt
  // and its first generated token must fit, or the request would wait forever.
  std::int64_t max_kv_tokens = 0;
};

// Which part of the request a rejection is about: the field a client changes
// (the server reports it as the error's `param`).
enum class RequestField { kRequestId, kPrompt, kMaxTokens, kMinTokens, kLogitBias };

struct RequestRejection {
  RequestField field = RequestField::kPrompt;
  // kInvalidArgument (malformed: empty, outside the vocabulary, a bad count)
  // or kOutOfRange (longer than the context or the KV cache allows).
  Error error;
};

// nullopt: the request can run. Checks, in order: the request id, the prompt
// (empty, token ids, longer than the context, longer than the KV cache), then
// max_tokens against what the prompt leaves of the context and of the KV
// cache, then min_tokens, then the logit bias's token ids.
std::optional<RequestRejection> check_request(const EngineRequest& request, const EngineRequestLimits& limits);

// The most tokens the request may generate: its max_tokens, or, when it has
// none, the rest of the context (max_model_len - prompt), as vLLM does, or of
// the KV cache's room for one request where that is smaller (vLLM refuses to
// start then; sluice runs, and a request never outgrows the cache).
std::int32_t resolved_max_tokens(const EngineRequest& request, const EngineRequestLimits& limits);

}  // namespace sluice
