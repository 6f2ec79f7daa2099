// OpenAI request bodies -> typed, range-checked structs. Everything a client
// can get wrong is found here, before anything is submitted or any byte of the
// response is written (gateways only fail over if nothing was written). What
// needs the model (token counts, vocabulary, context length) is checked by
// the service right after, still before the response starts.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "sluice/common/ids.h"
#include "sluice/common/sampling_params.h"
#include "sluice/server/api_error.h"
#include "sluice/structured/json_schema.h"

namespace sluice::server {

// Caps on what one request may ask for (api-conventions §4.3). Each has a flag.
struct RequestLimits {
  std::int32_t max_n = 16;
  std::int32_t max_logprobs = 20;  // top_logprobs (chat) and logprobs (completions)
  std::int32_t max_stop_sequences = 16;
  std::size_t max_stop_sequence_bytes = 512;
  std::int32_t max_tools = 128;
  std::size_t max_tools_json_bytes = 1 << 20;
  std::size_t max_template_kwargs_json_bytes = 64 << 10;
  std::int32_t max_messages = 100'000;
  std::int32_t max_prompts = 64;  // completions: prompts in one request
  bool allow_request_chat_template = false;
};

// Fields chat and completions share. Numeric ranges (a value outside is a 400
// whose param names the field; an integer field takes 3.0 as 3 and refuses 3.5):
//   n, best_of             [1, --max-n]; best_of must equal n
//   max_tokens, max_completion_tokens  [1, 2^31-1], then the context (engine)
//   min_tokens             [0, 2^31-1] and <= max_tokens
//   temperature [0, 2]   top_p (0, 1]   min_p [0, 1]   top_k -1 or [0, 2^31-1]
//   presence_penalty, frequency_penalty [-2, 2]   repetition_penalty (0, 10]
//   seed                   a signed 64-bit integer (vLLM's range)
//   top_logprobs (chat), logprobs (completions)  [0, --max-logprobs]
// null is the default for every one of them: OpenAI declares each of its
// fields here nullable, and vLLM's extensions (top_k, min_p,
// repetition_penalty, min_tokens) are Optional with None meaning the default.
struct GenerationOptions {
  std::string model;
  std::optional<std::int32_t> max_tokens;  // max_completion_tokens, else max_tokens; nullopt = rest of the context
  std::optional<std::int32_t> default_max_tokens;  // RequestDefaults::max_tokens, when max_tokens is nullopt
  std::int32_t min_tokens = 0;
  SamplingParams sampling;
  bool has_seed = false;  // false: the service draws one per choice
  std::vector<std::string> stop;
  std::vector<TokenId> stop_token_ids;
  bool ignore_eos = false;
  bool skip_special_tokens = true;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage (tolerated without stream)
  std::int32_t n = 1;
  bool logprobs = false;
  std::int32_t top_logprobs = 0;
  bool json_mode = false;  // response_format json_object: the output is one JSON object
  // response_format json_schema: the output is one document valid against it (compiled at parse time).
  std::shared_ptr<const structured::JsonSchema> json_schema;
};

// Defaults of a model's requests where its generation_config.json sets them
// (--generation-config): a field the request omits (or sends as null) takes
// the value here, else the API's own default.
struct RequestDefaults {
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<std::int32_t> top_k;
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;
  // max_new_tokens: the cap of a request without max_tokens, and of the rest
  // of the context, whichever is smaller (vLLM's rule).
  std::optional<std::int32_t> max_tokens;
};

struct ToolChoice {
  enum class Kind { kNone, kAuto, kRequired, kNamed };
  Kind kind = Kind::kAuto;
  std::string name;  // kNamed
};

struct ChatRequest {
  GenerationOptions options;
  // Messages as the template receives them: content parts joined into one
  // string, "developer" renamed "system", tool-call arguments parsed to objects.
  nlohmann::ordered_json messages;
  nlohmann::ordered_json tools;  // null when none
  ToolChoice tool_choice;
  // chat_template_kwargs plus reasoning_effort: template variables.
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();
  std::optional<std::string> chat_template;  // only when RequestLimits allows it
  bool add_generation_prompt = true;
};

using PromptInput = std::variant<std::string, std::vector<TokenId>>;

struct CompletionRequest {
  GenerationOptions options;
  std::vector<PromptInput> prompts;  // one or more; each yields n choices
};

template <class T>
using Parsed = std::variant<T, ApiError>;

// `body` must already be valid JSON (the caller maps parse errors to 400).
Parsed<ChatRequest> parse_chat_request(const nlohmann::ordered_json& body, const RequestLimits& limits,
                                       const RequestDefaults& defaults = {});
Parsed<CompletionRequest> parse_completion_request(const nlohmann::ordered_json& body, const RequestLimits& limits,
                                                   const RequestDefaults& defaults = {});

}  // namespace sluice::server
