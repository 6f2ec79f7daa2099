// --generation-config: a model's generation_config.json as request defaults,
// the way vLLM reads it (its default, "auto"): temperature, top_p, top_k,
// min_p, repetition_penalty, and max_new_tokens as the default max_tokens.
// "vllm" reads nothing (the API's neutral defaults); any other value is a
// directory whose generation_config.json is read instead of the model's.
#pragma once

#include <string>

#include "sluice/common/result.h"
#include "sluice/server/openai_request.h"

namespace sluice::server {

// `setting`: auto | vllm | DIR. "auto" without a generation_config.json in
// the model directory is no defaults; a DIR without one is an error. A value
// out of the API's range is an error naming the file and the key.
Result<RequestDefaults> read_generation_defaults(const std::string& setting, const std::string& model_dir);

// The start-up log's words for them ("temperature 0.6, top_p 0.95" or "none").
std::string describe(const RequestDefaults& defaults);

}  // namespace sluice::server
