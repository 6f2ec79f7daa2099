// vLLM's parser names onto output formats: the reasoning markers come from
// --reasoning-parser, the tool-call syntax from --tool-call-parser, and a name
// sluice lacks (or that vLLM has only as a tool-call parser, given as the
// reasoning parser) is refused with the names to use.
#include "sluice/server/parser_names.h"

#include <string>
#include <utility>

#include <gtest/gtest.h>

namespace sluice::server {
namespace {

TEST(ParserNames, AutoFollowsTheModelType) {
  EXPECT_EQ(output_format_for_parsers({}, "qwen3").value().name, "qwen3");
  EXPECT_EQ(output_format_for_parsers({}, "deepseek_v3").value().name, "deepseek_v3");
  EXPECT_EQ(output_format_for_parsers({}, "llama").value().tool_syntax, ToolCallSyntax::kNone);
}

TEST(ParserNames, ReasoningAndToolCallsCombine) {
  // Qwen3's usual line: reasoning qwen3, tool calls hermes.
  const OutputFormat qwen = output_format_for_parsers({.reasoning = "qwen3", .tool_call = "hermes"}, "llama").value();
  EXPECT_EQ(qwen.reasoning_begin, "<think>");
  EXPECT_EQ(qwen.tool_syntax, ToolCallSyntax::kTaggedJson);
  // DeepSeek-V3.1: V3's reasoning markers, V3.1's call syntax (no ```json fence).
  const OutputFormat v31 =
      output_format_for_parsers({.reasoning = "deepseek_v3", .tool_call = "deepseek_v31"}, "deepseek_v3").value();
  EXPECT_EQ(v31.tool_syntax, ToolCallSyntax::kDeepSeek);
  EXPECT_EQ(v31.header_end, output_format_by_name("deepseek_v31").value().header_end);
  EXPECT_EQ(v31.reasoning_end, "</think>");
  // No reasoning parsing, tool calls parsed.
  const OutputFormat plain = output_format_for_parsers({.reasoning = "none", .tool_call = "hermes"}, "qwen3").value();
  EXPECT_TRUE(plain.reasoning_begin.empty());
  EXPECT_EQ(plain.tool_syntax, ToolCallSyntax::kTaggedJson);
  // A tool-call parser alone brings its reasoning markers (the one-name behaviour).
  EXPECT_EQ(output_format_for_parsers({.tool_call = "hermes"}, "llama").value().reasoning_begin, "<think>");
}

TEST(ParserNames, EveryListedNameIsAToolCallParser) {
  // The names issue 16 lists, as --tool-call-parser: each is a syntax sluice reads.
  const std::pair<const char*, ToolCallSyntax> names[] = {
      {"hermes", ToolCallSyntax::kTaggedJson},       {"qwen3", ToolCallSyntax::kTaggedJson},
      {"qwen3_coder", ToolCallSyntax::kTaggedXml},   {"llama3_json", ToolCallSyntax::kBareJson},
      {"deepseek_v3", ToolCallSyntax::kDeepSeek},    {"deepseek_v31", ToolCallSyntax::kDeepSeek},
      {"deepseek_v4", ToolCallSyntax::kDsml},        {"deepseek_v41", ToolCallSyntax::kDsml}};
  for (const auto& [name, syntax] : names) {
    ASSERT_TRUE(check_parser_names({.tool_call = name}).ok()) << name;
    EXPECT_EQ(output_format_for_parsers({.tool_call = name}, "llama").value().tool_syntax, syntax) << name;
  }
  // Qwen3.5's usual line: reasoning qwen3, tool calls qwen3_coder.
  const OutputFormat coder =
      output_format_for_parsers({.reasoning = "qwen3", .tool_call = "qwen3_coder"}, "qwen3").value();
  EXPECT_EQ(coder.reasoning_end, "</think>");
  EXPECT_EQ(coder.tool_syntax, ToolCallSyntax::kTaggedXml);
  // Llama 3.x has no reasoning block.
  EXPECT_TRUE(output_format_for_parsers({.tool_call = "llama3_json"}, "llama").value().reasoning_begin.empty());
}

TEST(ParserNames, ReasoningNamesAreVllmsReasoningParsers) {
  for (const char* name : {"none", "qwen3", "deepseek_r1", "deepseek_v3", "deepseek_v4", "deepseek_v41"})
    EXPECT_TRUE(check_parser_names({.reasoning = name}).ok()) << name;
  // vLLM has these only as tool-call parsers: refused, with the reasoning parser to use.
  const std::pair<const char*, const char*> tool_call_only[] = {{"hermes", "--reasoning-parser qwen3"},
                                                               {"qwen3_coder", "--reasoning-parser qwen3"},
                                                               {"llama3_json", "pass none"},
                                                               {"deepseek_v31", "--reasoning-parser deepseek_v3"}};
  for (const auto& [name, instead] : tool_call_only) {
    const Status status = check_parser_names({.reasoning = name});
    ASSERT_FALSE(status.ok()) << name;
    EXPECT_TRUE(status.error().message.starts_with(std::string("--reasoning-parser ") + name +
                                                   ": vLLM has no reasoning parser of that name"))
        << status.error().message;
    EXPECT_NE(status.error().message.find(instead), std::string::npos) << status.error().message;
  }
}

TEST(ParserNames, MissingNamesAreRefusedWithWhatExists) {
  const Status missing = check_parser_names({.tool_call = "mistral"});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("it has none, hermes, qwen3, qwen3_coder, llama3_json"), std::string::npos)
      << missing.error().message;
  const Status both = check_parser_names({.reasoning = "deepseek_v5", .tool_call = "deepseek_v5"});
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.error().message.find("--reasoning-parser deepseek_v5"), std::string::npos);
  EXPECT_NE(both.error().message.find("\n--tool-call-parser deepseek_v5"), std::string::npos);
  EXPECT_FALSE(output_format_for_parsers({.reasoning = "hermes_json"}, "llama").ok());
}

}  // namespace
}  // namespace sluice::server
