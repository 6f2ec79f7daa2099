#include "sluice/server/parser_names.h"

#include <array>

#include <fmt/format.h>

namespace sluice::server {
namespace {

// Reasoning parsers: each reads <think>...</think> (DeepSeek-R1, V3 and V3.1
// and Qwen3 share the markers; hermes is accepted as Qwen3's, as sluice's
// output formats always were).
constexpr std::array<std::string_view, 6> kReasoningNames = {"none",        "qwen3",       "hermes",
                                                             "deepseek_r1", "deepseek_v3", "deepseek_v31"};
// Tool-call parsers: hermes (and qwen3, its alias here) read
// <tool_call>{json}</tool_call>; deepseek_v3 and deepseek_v31 the DeepSeek
// sections (deepseek_r1 writes V3's).
constexpr std::array<std::string_view, 6> kToolCallNames = {"none",        "hermes",      "qwen3",
                                                            "deepseek_r1", "deepseek_v3", "deepseek_v31"};
// vLLM's tool-call parsers whose syntax sluice does not read yet, with what it is.
struct Missing {
  std::string_view name;
  std::string_view syntax;
};
constexpr std::array<Missing, 2> kMissingToolCallNames = {
    Missing{"llama3_json", "bare JSON calls ({\"name\": ..., \"parameters\": ...}, after <|python_tag|> or alone)"},
    Missing{"qwen3_coder", "XML calls (<function=NAME><parameter=P>...)"},
};

template <std::size_t N>
bool contains(const std::array<std::string_view, N>& names, std::string_view name) {
  for (std::string_view n : names)
    if (n == name) return true;
  return false;
}

template <std::size_t N>
std::string listed(const std::array<std::string_view, N>& names) {
  std::string out;
  for (std::string_view n : names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

Status check_reasoning(std::string_view name) {
  if (name == "auto" || contains(kReasoningNames, name)) return Ok{};
  return Error{fmt::format("--reasoning-parser {}: not a reasoning parser sluice has; it has auto (by the model's "
                           "model_type), {}",
                           name, listed(kReasoningNames))};
}

Status check_tool_call(std::string_view name) {
  if (name.empty() || contains(kToolCallNames, name)) return Ok{};
  for (const Missing& missing : kMissingToolCallNames)
    if (missing.name == name)
      return Error{fmt::format("--tool-call-parser {}: its syntax, {}, is not implemented; sluice reads {}", name,
                               missing.syntax, listed(kToolCallNames))};
  return Error{fmt::format("--tool-call-parser {}: not a tool-call parser sluice has; it has {}", name,
                           listed(kToolCallNames))};
}

}  // namespace

Status check_parser_names(const ParserNames& names) {
  Status reasoning = check_reasoning(names.reasoning);
  Status tool_call = check_tool_call(names.tool_call);
  if (reasoning && tool_call) return Ok{};
  if (!reasoning && !tool_call) return Error{reasoning.error().message + "\n" + tool_call.error().message};
  return reasoning ? tool_call : reasoning;
}

Result<OutputFormat> output_format_for_parsers(const ParserNames& names, std::string_view model_type) {
  SLUICE_TRY(check_parser_names(names));
  const bool reasoning_named = names.reasoning != "auto";
  if (names.tool_call.empty()) {
    if (!reasoning_named) return output_format_for_model_type(model_type);
    return output_format_by_name(names.reasoning);
  }
  SLUICE_TRY_ASSIGN(format, output_format_by_name(names.tool_call));
  // Only a tool-call parser named: its format whole, reasoning markers included
  // (one name picked both before the two were split).
  if (!reasoning_named) return format;
  SLUICE_TRY_ASSIGN(reasoning, output_format_by_name(names.reasoning));
  format.reasoning_begin = reasoning.reasoning_begin;
  format.reasoning_end = reasoning.reasoning_end;
  if (reasoning.name != format.name) format.name = fmt::format("reasoning {}, tool calls {}", reasoning.name, format.name);
  return format;
}

}  // namespace sluice::server
