// What one SSE `data:` payload of an OpenAI stream says, for a load generator:
// how many output pieces it carries (completions `text`, also empty before the
// finish as vLLM streams tokens without text; chat `delta.content` or
// `delta.reasoning_content`), the usage block of the last chunk, an in-band
// error, or the final "[DONE]".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::loadgen {

struct StreamUsage {
  std::int64_t num_prompt_tokens = 0;
  std::int64_t num_output_tokens = 0;
  std::int64_t num_cached_tokens = 0;  // prompt_tokens_details.cached_tokens, 0 when absent
};

struct StreamChunk {
  bool done = false;                  // "[DONE]"
  std::int32_t num_text_pieces = 0;   // choices carrying an output token (or text) in this chunk
  std::optional<StreamUsage> usage;
  std::optional<std::string> error;   // an {"error": ...} event, or a payload that is not a chunk
};

StreamChunk interpret_stream_data(std::string_view data);

}  // namespace sluice::loadgen
