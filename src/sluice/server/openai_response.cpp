#include "sluice/server/openai_response.h"

namespace sluice::server {

using nlohmann::json;

json usage_json(const Usage& usage, bool with_prompt_tokens_details) {
  json out = {{"prompt_tokens", usage.prompt_tokens},
              {"completion_tokens", usage.completion_tokens},
              {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
  if (with_prompt_tokens_details) out["prompt_tokens_details"] = {{"cached_tokens", usage.cached_tokens}};
  out["completion_tokens_details"] = {{"reasoning_tokens", usage.reasoning_tokens}};
  return out;
}

json chat_delta(const ParsedDelta& delta, bool with_role) {
  json out = json::object();
  if (with_role) out["role"] = "assistant";
  if (!delta.content.empty() || (with_role && delta.reasoning.empty() && delta.tool_calls.empty()))
    out["content"] = delta.content;
  if (!delta.reasoning.empty()) out["reasoning_content"] = delta.reasoning;
  if (!delta.tool_calls.empty()) {
    json calls = json::array();
    for (const ToolCallDelta& call : delta.tool_calls) {
      json entry = {{"index", call.index}};
      if (!call.id.empty()) {
        entry["id"] = call.id;
        entry["type"] = "function";
        entry["function"] = {{"name", call.name}, {"arguments", call.arguments}};
      } else {
        entry["function"] = {{"arguments", call.arguments}};
      }
      calls.push_back(std::move(entry));
    }
    out["tool_calls"] = std::move(calls);
  }
  return out;
}

namespace {
json chunk(const char* object, const ResponseHeader& header, json choices, bool include_usage_key, const json& usage) {
  json out = {{"id", header.id},
              {"object", object},
              {"created", header.created_s},
              {"model", header.model},
              {"choices", std::move(choices)}};
  if (include_usage_key) out["usage"] = usage;
  return out;
}
}  // namespace

json chat_chunk(const ResponseHeader& header, json choices, bool include_usage_key, const json& usage) {
  return chunk("chat.completion.chunk", header, std::move(choices), include_usage_key, usage);
}

json completion_chunk(const ResponseHeader& header, json choices, bool include_usage_key, const json& usage) {
  return chunk("text_completion", header, std::move(choices), include_usage_key, usage);
}

json chat_message(const std::string& content, const std::string& reasoning, const std::vector<ToolCall>& tool_calls) {
  json message = {{"role", "assistant"}};
  // content is null only when the answer is tool calls and nothing else.
  message["content"] = (content.empty() && !tool_calls.empty()) ? json(nullptr) : json(content);
  if (!reasoning.empty()) message["reasoning_content"] = reasoning;
  if (!tool_calls.empty()) {
    json calls = json::array();
    for (const ToolCall& call : tool_calls)
      calls.push_back({{"id", call.id},
                       {"type", "function"},
                       {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
    message["tool_calls"] = std::move(calls);
  }
  return message;
}

namespace {
json bytes_of(const std::string& text) {
  json bytes = json::array();
  for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
  return bytes;
}
}  // namespace

json chat_logprob_entry(const TokenLogprobText& chosen, const std::vector<TokenLogprobText>& top) {
  json top_json = json::array();
  for (const TokenLogprobText& t : top)
    top_json.push_back({{"token", t.token}, {"logprob", t.logprob}, {"bytes", bytes_of(t.token)}});
  return {{"token", chosen.token},
          {"logprob", chosen.logprob},
          {"bytes", bytes_of(chosen.token)},
          {"top_logprobs", std::move(top_json)}};
}

std::string sse_event(const json& data) {
  // Token text may hold invalid UTF-8 only if a decoder produced it; replace
  // rather than throw mid-stream.
  return "data: " + data.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

}  // namespace sluice::server
