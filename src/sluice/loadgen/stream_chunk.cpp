#include "sluice/loadgen/stream_chunk.h"

#include <nlohmann/json.hpp>

namespace sluice::loadgen {
namespace {

using Json = nlohmann::json;

bool non_empty_string(const Json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() && !it->get_ref<const std::string&>().empty();
}

std::int64_t integer_or_zero(const Json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_number_integer() ? it->get<std::int64_t>() : 0;
}

}  // namespace

StreamChunk interpret_stream_data(std::string_view data) {
  StreamChunk chunk;
  if (data == "[DONE]") {
    chunk.done = true;
    return chunk;
  }
  const Json json = Json::parse(data, nullptr, false);
  if (json.is_discarded() || !json.is_object()) {
    chunk.error = "stream payload is not a JSON object: " + std::string(data.substr(0, 200));
    return chunk;
  }
  if (const auto error = json.find("error"); error != json.end()) {
    chunk.error = error->is_object() && error->contains("message") && (*error)["message"].is_string()
                      ? (*error)["message"].get<std::string>()
                      : error->dump();
    return chunk;
  }
  if (const auto choices = json.find("choices"); choices != json.end() && choices->is_array()) {
    for (const Json& choice : *choices) {
      if (!choice.is_object()) continue;
      // A completions choice with empty text before the finish is still a
      // token (vLLM streams one chunk per token, text or not).
      const auto text = choice.find("text");
      const auto finish = choice.find("finish_reason");
      const bool unfinished = finish == choice.end() || finish->is_null();
      bool has_text = non_empty_string(choice, "text") || (text != choice.end() && text->is_string() && unfinished);
      if (const auto delta = choice.find("delta"); delta != choice.end() && delta->is_object())
        has_text = has_text || non_empty_string(*delta, "content") || non_empty_string(*delta, "reasoning_content") ||
                   non_empty_string(*delta, "reasoning");
      if (has_text) ++chunk.num_text_pieces;
    }
  }
  if (const auto usage = json.find("usage"); usage != json.end() && usage->is_object()) {
    StreamUsage u{.num_prompt_tokens = integer_or_zero(*usage, "prompt_tokens"),
                  .num_output_tokens = integer_or_zero(*usage, "completion_tokens")};
    if (const auto details = usage->find("prompt_tokens_details"); details != usage->end() && details->is_object())
      u.num_cached_tokens = integer_or_zero(*details, "cached_tokens");
    chunk.usage = u;
  }
  return chunk;
}

}  // namespace sluice::loadgen
