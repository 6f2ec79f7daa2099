// vLLM's parser names onto output formats: the reasoning markers come from
// --reasoning-parser, the tool-call syntax from --tool-call-parser, and a name
// sluice lacks is refused with the names it has.
#include "sluice/server/parser_names.h"

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

TEST(ParserNames, MissingNamesAreRefusedWithWhatExists) {
  for (const char* name : {"llama3_json", "qwen3_coder"}) {
    const Status status = check_parser_names({.tool_call = name});
    ASSERT_FALSE(status.ok()) << name;
    EXPECT_NE(status.error().message.find("is not implemented; sluice reads none, hermes, qwen3"), std::string::npos)
        << status.error().message;
  }
  const Status both = check_parser_names({.reasoning = "deepseek_v41", .tool_call = "deepseek_v41"});
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.error().message.find("--reasoning-parser deepseek_v41"), std::string::npos);
  EXPECT_NE(both.error().message.find("\n--tool-call-parser deepseek_v41"), std::string::npos);
  EXPECT_FALSE(output_format_for_parsers({.reasoning = "hermes_json"}, "llama").ok());
}

}  // namespace
}  // namespace sluice::server
