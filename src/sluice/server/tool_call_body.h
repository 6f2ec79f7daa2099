// One tool call's text, complete, read into a function name and its JSON
// arguments. The streaming parser (output_parser.h) finds where a call begins
// and ends; these functions decide what the text between says. Text that is
// not a well-formed call gives nullopt, and the parser returns it as content.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace sluice::server {

struct ToolCallBody {
  std::string name;
  std::string arguments;  // JSON object text, as it goes in function.arguments
};

// {"name": N, "arguments": {...} or "<json text>"} or {"name": N, "parameters": {...}}
// (Hermes, Qwen3, Llama 3.x). With `arguments_required` an object without
// either key is not a call: llama3_json calls have no markers around them, so
// a model answering in plain JSON ({"name": "Ada"}) must stay content.
std::optional<ToolCallBody> json_tool_call(std::string_view text, bool arguments_required);

// Qwen3-Coder's XML body (the text inside <tool_call>...</tool_call>):
//   <function=NAME>
//   <parameter=P>
//   VALUE
//   </parameter>
//   ...
//   </function>
// A value is raw text (one newline after the opening tag and one before the
// closing tag are layout). It is typed by P's JSON schema in `tools` (the
// request's tools array): string types stay strings, integer, number,
// boolean, object and array values are parsed as JSON when they are one of
// those, and anything that does not parse stays the string it was.
std::optional<ToolCallBody> xml_tool_call(std::string_view text, const nlohmann::ordered_json& tools);

}  // namespace sluice::server
