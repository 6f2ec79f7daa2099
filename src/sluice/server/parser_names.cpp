#include "sluice/server/parser_names.h"

#include <array>

#include <fmt/format.h>

namespace sluice::server {
namespace {

// Reasoning parsers, the ones vLLM has under these names: each reads
// <think>...</think> (DeepSeek-R1, V3, V3.1, V4 and V4.1 and Qwen3 share the markers).
constexpr std::array<std::string_view, 6> kReasoningNames = {"none",        "qwen3",       "deepseek_r1",
                                                             "deepseek_v3", "deepseek_v4", "deepseek_v41"};
// Tool-call parsers: hermes (and qwen3, its alias here) read
// <tool_call>{json}</tool_call>, qwen3_coder <tool_call><function=...>,
// llama3_json bare JSON objects; deepseek_v3 and deepseek_v31 the DeepSeek
// sections (deepseek_r1 writes V3's); deepseek_v4 and deepseek_v41 the DSML
// blocks of V4 and V4.1.
constexpr std::array<std::string_view, 10> kToolCallNames = {
    "none",        "hermes",      "qwen3",        "qwen3_coder", "llama3_json",
    "deepseek_r1", "deepseek_v3", "deepseek_v31", "deepseek_v4", "deepseek_v41"};
// Tool-call parser names that vLLM has no reasoning parser for, with the one to use.
struct NotReasoning {
  std::string_view name;
  std::string_view instead;
};
constexpr std::array<NotReasoning, 4> kNotReasoningNames = {
    NotReasoning{"hermes", "Hermes and Qwen3's <think> block is --reasoning-parser qwen3"},
    NotReasoning{"qwen3_coder", "Qwen's <think> block is --reasoning-parser qwen3"},
    NotReasoning{"llama3_json", "Llama 3.x writes no reasoning block: leave the flag out or pass none"},
    NotReasoning{"deepseek_v31", "DeepSeek-V3.1's <think> block is --reasoning-parser deepseek_v3"},
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
  for (const NotReasoning& tool_call_only : kNotReasoningNames)
    if (tool_call_only.name == name)
      return Error{fmt::format("--reasoning-parser {}: vLLM has no reasoning parser of that name (it is a tool-call "
                               "parser); {}",
                               name, tool_call_only.instead)};
  return Error{fmt::format("--reasoning-parser {}: not a reasoning parser sluice has; it has auto (by the model's "
                           "model_type), {}",
                           name, listed(kReasoningNames))};
}

Status check_tool_call(std::string_view name) {
  if (name.empty() || contains(kToolCallNames, name)) return Ok{};
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
