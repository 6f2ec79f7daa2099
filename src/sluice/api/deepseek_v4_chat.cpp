#include "sluice/api/deepseek_v4_chat.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <vector>

namespace sluice::api {
namespace {

using Json = nlohmann::ordered_json;

// The encoder's markers; U+FF5C is the fullwidth vertical line, U+2581 the lower one-eighth block.
const std::string kBos = "<\uFF5Cbegin\u2581of\u2581sentence\uFF5C>";
const std::string kEos = "<\uFF5Cend\u2581of\u2581sentence\uFF5C>";
const std::string kUser = "<\uFF5CUser\uFF5C>";
const std::string kAssistant = "<\uFF5CAssistant\uFF5C>";
const std::string kThinkBegin = "<think>";
const std::string kThinkEnd = "</think>";
const std::string kDsml = "\uFF5CDSML\uFF5C";

// What the encoder writes first in thinking mode at reasoning_effort "max".
const std::string kMaxEffortPreamble =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root cause, "
    "rigorously stress-testing your logic against all potential paths, edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";

// The tools section of a system message, around the schemas (one JSON line each).
std::string tools_section(const std::vector<std::string>& schemas) {
  std::string joined;
  for (const std::string& s : schemas) joined += (joined.empty() ? "" : "\n") + s;
  return "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools by "
         "writing a \"<" + kDsml + "tool_calls>\" block like the following:\n\n<" + kDsml + "tool_calls>\n<" + kDsml +
         "invoke name=\"$TOOL_NAME\">\n<" + kDsml +
         "parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" + kDsml + "parameter>\n...\n</" +
         kDsml + "invoke>\n<" + kDsml + "invoke name=\"$TOOL_NAME2\">\n...\n</" + kDsml + "invoke>\n</" + kDsml +
         "tool_calls>\n\nString parameters should be specified as is and set `string=\"true\"`. For all other types "
         "(numbers, booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\nIf "
         "thinking_mode is enabled (triggered by " + kThinkBegin + "), you MUST output your complete reasoning inside " +
         kThinkBegin + "..." + kThinkEnd + " BEFORE any tool calls or final response.\n\nOtherwise, output directly "
         "after " + kThinkEnd + " with tool calls or final response.\n\n### Available Tool Schemas\n\n" + joined +
         "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";
}

struct Invalid : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string string_field(const Json& msg, const char* key) {
  const auto it = msg.find(key);
  if (it == msg.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  throw Invalid(std::string("'") + key + "' must be a string");
}

// A message's content: a string, null, or text parts (joined as they come).
std::string content_text(const Json& content) {
  if (content.is_null()) return {};
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) throw Invalid("'content' must be a string or an array of text parts");
  std::string out;
  for (const Json& part : content) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
      throw Invalid("only text content parts are supported");
    out += part["text"].get<std::string>();
  }
  return out;
}

// A message's content field, null when it has none.
const Json& content_of(const Json& msg) {
  static const Json kNone;
  const auto it = msg.find("content");
  return it == msg.end() ? kNone : *it;
}

// One assistant tool call's DSML invoke: each argument a parameter.
std::string dsml_invoke(const Json& call) {
  const Json* function = call.is_object() && call.contains("function") ? &call["function"] : nullptr;
  if (function == nullptr || !function->is_object() || !function->contains("name") || !(*function)["name"].is_string())
    throw Invalid("a tool call needs function.name");
  Json arguments = Json::object();
  if (const auto a = function->find("arguments"); a != function->end() && !a->is_null()) {
    if (a->is_string()) {
      Json parsed = Json::parse(a->get<std::string>(), nullptr, /*allow_exceptions=*/false);
      // Text that is not JSON is the encoder's single "arguments" parameter.
      arguments = parsed.is_discarded() ? Json{{"arguments", *a}} : std::move(parsed);
    } else {
      arguments = *a;
    }
  }
  if (!arguments.is_object()) throw Invalid("tool call arguments must be a JSON object");
  std::string params;
  for (const auto& [key, value] : arguments.items()) {
    const bool is_string = value.is_string();
    params += (params.empty() ? "" : "\n") + ("<" + kDsml + "parameter name=\"" + key + "\" string=\"" +
                                              (is_string ? "true" : "false") + "\">") +
              (is_string ? value.get<std::string>() : python_json_dumps(value)) + "</" + kDsml + "parameter>";
  }
  return "<" + kDsml + "invoke name=\"" + (*function)["name"].get<std::string>() + "\">\n" + params + "\n</" + kDsml +
         "invoke>";
}

// Tool messages into user turns (the encoder's merge_tool_messages): a tool
// result, and every user message, joins the user turn before it as a block;
// the blocks are {"type": "text"|"tool_result", ...}.
std::vector<Json> merge_tool_messages(const std::vector<Json>& messages) {
  std::vector<Json> merged;
  auto open_user = [&merged] {
    return !merged.empty() && merged.back().value("role", "") == "user" && merged.back().contains("content_blocks");
  };
  for (const Json& msg : messages) {
    const std::string role = msg.value("role", "");
    if (role == "tool") {
      Json block = {{"type", "tool_result"},
                    {"tool_use_id", string_field(msg, "tool_call_id")},
                    {"content", msg.contains("content") ? content_of(msg) : Json("")}};
      if (open_user()) merged.back()["content_blocks"].push_back(std::move(block));
      else merged.push_back({{"role", "user"}, {"content_blocks", Json::array({std::move(block)})}});
    } else if (role == "user") {
      Json block = {{"type", "text"}, {"text", content_text(content_of(msg))}};
      if (open_user()) merged.back()["content_blocks"].push_back(std::move(block));
      else merged.push_back({{"role", "user"}, {"content_blocks", Json::array({std::move(block)})}});
    } else {
      merged.push_back(msg);
    }
  }
  return merged;
}

// Tool results in the order of the calls of the assistant turn before them.
void sort_tool_results_by_call_order(std::vector<Json>& messages) {
  std::map<std::string, std::size_t> order;
  for (Json& msg : messages) {
    const std::string role = msg.value("role", "");
    if (role == "assistant" && msg.contains("tool_calls") && msg["tool_calls"].is_array() && !msg["tool_calls"].empty()) {
      order.clear();
      std::size_t i = 0;
      for (const Json& call : msg["tool_calls"]) {
        if (call.is_object() && call.contains("id") && call["id"].is_string() && !call["id"].get<std::string>().empty())
          order[call["id"].get<std::string>()] = i;
        ++i;
      }
    } else if (role == "user" && msg.contains("content_blocks")) {
      Json& blocks = msg["content_blocks"];
      std::vector<Json> results;
      for (const Json& b : blocks)
        if (b["type"] == "tool_result") results.push_back(b);
      if (results.size() < 2 || order.empty()) continue;
      auto rank = [&order](const Json& b) {
        const auto it = order.find(b["tool_use_id"].get<std::string>());
        return it == order.end() ? std::size_t{0} : it->second;
      };
      std::stable_sort(results.begin(), results.end(), [&](const Json& a, const Json& b) { return rank(a) < rank(b); });
      std::size_t next = 0;
      for (Json& b : blocks)
        if (b["type"] == "tool_result") b = results[next++];
    }
  }
}

std::int64_t last_user_index(const std::vector<Json>& messages) {
  for (std::size_t i = messages.size(); i-- > 0;) {
    const std::string role = messages[i].value("role", "");
    if (role == "user" || role == "developer") return static_cast<std::int64_t>(i);
  }
  return -1;
}

// Earlier turns without their reasoning (the encoder's _drop_thinking_messages):
// before the last user turn an assistant loses reasoning_content and a developer message goes.
std::vector<Json> drop_thinking(const std::vector<Json>& messages) {
  const std::int64_t last_user = last_user_index(messages);
  std::vector<Json> kept;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const std::string role = messages[i].value("role", "");
    if (role == "user" || role == "system" || role == "tool" || static_cast<std::int64_t>(i) >= last_user) {
      kept.push_back(messages[i]);
    } else if (role == "assistant") {
      Json copy = messages[i];
      copy.erase("reasoning_content");
      kept.push_back(std::move(copy));
    }
  }
  return kept;
}

struct Mode {
  bool thinking = false;
  bool drop_thinking = true;
  bool max_effort = false;
};

bool truthy(const Json& v) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0.0;
  if (v.is_string()) return !v.get<std::string>().empty();
  return !v.is_null();
}

Mode mode_of(const Json& kwargs) {
  Mode m;
  if (!kwargs.is_object()) return m;
  for (const char* key : {"thinking", "enable_thinking"})
    if (kwargs.contains(key)) m.thinking = truthy(kwargs[key]);
  if (kwargs.contains("drop_thinking")) m.drop_thinking = truthy(kwargs["drop_thinking"]);
  // Gateways forward OpenAI's reasoning_effort verbatim (none ... xhigh): DeepSeek's
  // max (and OpenAI's xhigh) takes the preamble, any other value nothing.
  if (kwargs.contains("reasoning_effort") && kwargs["reasoning_effort"].is_string()) {
    const std::string value = kwargs["reasoning_effort"].get<std::string>();
    m.max_effort = value == "max" || value == "xhigh";
  }
  return m;
}

// Message `index` of `messages`, whose last user turn is `last_user` (last_user_index).
std::string render_message(std::size_t index, const std::vector<Json>& messages, std::int64_t last_user,
                           const Mode& mode, bool drop_thinking, bool generation_prompt) {
  const Json& msg = messages[index];
  const std::string role = msg.value("role", "");
  const auto at = static_cast<std::int64_t>(index);
  std::string prompt;
  if (index == 0 && mode.thinking && mode.max_effort) prompt += kMaxEffortPreamble;
  auto tools_of = [&msg]() {
    std::string out;
    if (!msg.contains("tools")) return out;
    std::vector<std::string> schemas;
    for (const Json& tool : msg["tools"]) {
      if (!tool.is_object() || !tool.contains("function")) throw Invalid("each tool needs a 'function'");
      schemas.push_back(python_json_dumps(tool["function"]));
    }
    return "\n\n" + tools_section(schemas);
  };
  if (role == "system") {
    prompt += content_text(content_of(msg)) + tools_of();
  } else if (role == "developer") {
    const std::string content = content_text(content_of(msg));
    if (content.empty()) throw Invalid("a developer message needs content");
    prompt += kUser + content + tools_of();
  } else if (role == "user") {
    prompt += kUser;
    std::string parts;
    bool first = true;
    for (const Json& block : msg["content_blocks"]) {
      std::string part;
      if (block["type"] == "text") {
        part = block["text"].get<std::string>();
      } else {
        const Json& content = block["content"];
        std::string text;
        if (content.is_array()) {  // a tool result's parts, joined by blank lines
          bool first_part = true;
          for (const Json& b : content) {
            text += first_part ? "" : "\n\n";
            first_part = false;
            text += b.is_object() && b.value("type", "") == "text" && b.contains("text") && b["text"].is_string()
                        ? b["text"].get<std::string>()
                        : "[Unsupported " + (b.is_object() ? b.value("type", "") : std::string()) + "]";
          }
        } else {
          text = content_text(content);
        }
        part = "<tool_result>" + text + "</tool_result>";
      }
      parts += (first ? "" : "\n\n") + part;
      first = false;
    }
    prompt += parts;
  } else if (role == "assistant") {
    std::string calls;
    if (msg.contains("tool_calls") && msg["tool_calls"].is_array() && !msg["tool_calls"].empty()) {
      std::string invokes;
      for (const Json& call : msg["tool_calls"]) invokes += (invokes.empty() ? "" : "\n") + dsml_invoke(call);
      calls = "\n\n<" + kDsml + "tool_calls>\n" + invokes + "\n</" + kDsml + "tool_calls>";
    }
    std::string reasoning;
    if (mode.thinking && (!drop_thinking || at > last_user)) reasoning = string_field(msg, "reasoning_content") + kThinkEnd;
    prompt += reasoning + content_text(content_of(msg)) + calls + kEos;
  } else {
    throw Invalid("unknown role '" + role + "'");
  }
  // The assistant turn's opening after a user turn, when an assistant turn follows or this is the last message.
  if (index + 1 < messages.size() && messages[index + 1].value("role", "") != "assistant") return prompt;
  if (role == "user" || role == "developer") {
    if (index + 1 == messages.size() && !generation_prompt) return prompt;
    prompt += kAssistant;
    prompt += mode.thinking && (!drop_thinking || at >= last_user) ? kThinkBegin : kThinkEnd;
  }
  return prompt;
}

}  // namespace

Result<std::string> render_deepseek_v4_chat(const nlohmann::ordered_json& messages, const ChatRenderOptions& options) {
  try {
    if (!messages.is_array()) throw Invalid("messages must be an array");
    std::vector<Json> list;
    for (const Json& m : messages) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) throw Invalid("each message needs a role");
      list.push_back(m);
    }
    // The request's tools join the first system message, or an empty one put first.
    if (options.tools.is_array() && !options.tools.empty()) {
      auto system = std::find_if(list.begin(), list.end(), [](const Json& m) { return m["role"] == "system"; });
      if (system == list.end()) system = list.insert(list.begin(), Json{{"role", "system"}, {"content", ""}});
      (*system)["tools"] = options.tools;
    }
    const Mode mode = mode_of(options.extra_kwargs);
    std::vector<Json> full = merge_tool_messages(list);
    sort_tool_results_by_call_order(full);
    const bool has_tools = std::any_of(full.begin(), full.end(), [](const Json& m) { return m.contains("tools"); });
    const bool drop = mode.drop_thinking && !has_tools;
    if (mode.thinking && drop) full = drop_thinking(full);
    std::string prompt = kBos;
    const std::int64_t last_user = last_user_index(full);
    for (std::size_t i = 0; i < full.size(); ++i)
      prompt += render_message(i, full, last_user, mode, drop, options.add_generation_prompt);
    if (prompt.size() > options.max_output_bytes) return Error{"deepseek_v4 chat: the prompt exceeds the output cap"};
    return prompt;
  } catch (const Invalid& e) {
    return Error{std::string("deepseek_v4 chat: ") + e.what()};
  } catch (const std::exception& e) {  // a malformed message's JSON access, or a too-deep value
    return Error{std::string("deepseek_v4 chat: ") + e.what()};
  }
}

}  // namespace sluice::api
