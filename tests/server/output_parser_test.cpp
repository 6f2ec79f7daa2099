// Output parsers: whole-text results checked by hand against the formats'
// definitions, and any random chunking of the same text must give the same
// content, reasoning and tool calls as feeding it whole.
#include "sluice/server/output_parser.h"

#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace sluice::server {
namespace {

struct Collected {
  std::string content, reasoning;
  std::vector<std::string> ids, names, arguments;  // per tool-call index
  bool operator==(const Collected&) const = default;
};

void collect(const ParsedDelta& delta, Collected& out) {
  out.content += delta.content;
  out.reasoning += delta.reasoning;
  for (const ToolCallDelta& call : delta.tool_calls) {
    const auto i = static_cast<std::size_t>(call.index);
    if (out.names.size() <= i) {
      ASSERT_FALSE(call.id.empty()) << "the first fragment of a call must carry its id";
      out.ids.resize(i + 1);
      out.names.resize(i + 1);
      out.arguments.resize(i + 1);
    }
    if (!call.id.empty()) {
      out.ids[i] = call.id;
      out.names[i] = call.name;
    }
    out.arguments[i] += call.arguments;
  }
}

Collected parse(const std::string& format_name, const std::vector<std::string>& pieces, OutputParser::Options options) {
  OutputParser parser(output_format_by_name(format_name).value(), options);
  Collected out;
  for (const std::string& piece : pieces) {
    ParsedDelta delta;
    parser.feed(piece, delta);
    collect(delta, out);
  }
  ParsedDelta delta;
  parser.finish(delta);
  collect(delta, out);
  return out;
}

std::vector<std::string> random_chunks(const std::string& text, std::mt19937& rng) {
  std::vector<std::string> chunks;
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t n = std::min<std::size_t>(text.size() - i, 1 + rng() % 7);
    chunks.push_back(text.substr(i, n));
    i += n;
  }
  return chunks;
}

OutputParser::Options with_tools() { return {.parse_tool_calls = true, .tool_call_id_prefix = "call_"}; }

const std::string kDsCallsBegin = "<\uFF5Ctool\u2581calls\u2581begin\uFF5C>";
const std::string kDsCallsEnd = "<\uFF5Ctool\u2581calls\u2581end\uFF5C>";
const std::string kDsCallBegin = "<\uFF5Ctool\u2581call\u2581begin\uFF5C>";
const std::string kDsCallEnd = "<\uFF5Ctool\u2581call\u2581end\uFF5C>";
const std::string kDsSep = "<\uFF5Ctool\u2581sep\uFF5C>";

TEST(OutputParser, Qwen3ReasoningAndToolCalls) {
  const std::string text =
      "<think>Need the file.</think>Reading it.\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": "
      "{\"path\": \"a.py\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"ls\", \"arguments\": {}}\n</tool_call>";
  const Collected got = parse("qwen3", {text}, with_tools());
  EXPECT_EQ(got.reasoning, "Need the file.");
  EXPECT_EQ(got.content, "Reading it.\n");
  ASSERT_EQ(got.names.size(), 2u);
  EXPECT_EQ(got.names[0], "read_file");
  EXPECT_EQ(nlohmann::json::parse(got.arguments[0]), nlohmann::json({{"path", "a.py"}}));
  EXPECT_EQ(got.names[1], "ls");
  EXPECT_EQ(got.arguments[1], "{}");
  EXPECT_NE(got.ids[0], got.ids[1]);
}

TEST(OutputParser, ToolTagsAreContentWhenToolsAreOff) {
  const std::string text = "<tool_call>{\"name\": \"x\"}</tool_call>";
  const Collected got = parse("qwen3", {text}, {});
  EXPECT_EQ(got.content, text);
  EXPECT_TRUE(got.names.empty());
}

TEST(OutputParser, ReasoningOpenedByThePrompt) {
  const Collected got = parse("deepseek_r1", {"thinking...</think>The answer."}, {.starts_in_reasoning = true});
  EXPECT_EQ(got.reasoning, "thinking...");
  EXPECT_EQ(got.content, "The answer.");
}

TEST(OutputParser, UnclosedToolCallIsReturnedAsText) {
  const Collected got = parse("qwen3", {"ok <tool_call>{\"name\": "}, with_tools());
  EXPECT_EQ(got.content, "ok <tool_call>{\"name\": ");
  EXPECT_TRUE(got.names.empty());
}

TEST(OutputParser, DeepSeekV3ToolCalls) {
  const std::string text = "Let me check." + kDsCallsBegin + kDsCallBegin + "function" + kDsSep +
                           "get_weather\n```json\n{\"city\": \"Paris\"}\n```" + kDsCallEnd + kDsCallBegin +
                           "function" + kDsSep + "get_time\n```json\n{}\n```" + kDsCallEnd + kDsCallsEnd;
  const Collected got = parse("deepseek_v3", {text}, with_tools());
  EXPECT_EQ(got.content, "Let me check.");
  ASSERT_EQ(got.names.size(), 2u);
  EXPECT_EQ(got.names[0], "get_weather");
  EXPECT_EQ(got.arguments[0], "{\"city\": \"Paris\"}");
  EXPECT_EQ(got.names[1], "get_time");
  EXPECT_EQ(got.arguments[1], "{}");
}

TEST(OutputParser, DeepSeekV31ToolCalls) {
  const std::string text = kDsCallsBegin + kDsCallBegin + "search" + kDsSep + "{\"q\": \"x\"}" + kDsCallEnd +
                           kDsCallsEnd + " done";
  const Collected got = parse("deepseek_v31", {text}, with_tools());
  ASSERT_EQ(got.names.size(), 1u);
  EXPECT_EQ(got.names[0], "search");
  EXPECT_EQ(got.arguments[0], "{\"q\": \"x\"}");
  EXPECT_EQ(got.content, " done");
}

TEST(OutputParser, DeepSeekArgumentsStreamBeforeTheCallEnds) {
  OutputParser parser(output_format_by_name("deepseek_v3").value(), with_tools());
  ParsedDelta first;
  parser.feed(kDsCallsBegin + kDsCallBegin + "function" + kDsSep + "f\n```json\n{\"a\": 1", first);
  ASSERT_EQ(first.tool_calls.size(), 1u);
  EXPECT_EQ(first.tool_calls[0].name, "f");
  EXPECT_EQ(first.tool_calls[0].arguments, "{\"a\": 1");
}

TEST(OutputParser, RandomChunkingsEqualWhole) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"qwen3",
       "<think>a <b> c</think>\n\nHi <tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": \"</tool\"}}\n</tool_call>"
       "\n<tool_call>{\"name\": \"g\", \"arguments\": \"{}\"}</tool_call>\n"},
      {"qwen3", "plain < text <thin no tags </think"},
      {"deepseek_r1", "<think>r</think>c" + kDsCallsBegin + kDsCallBegin + "function" + kDsSep +
                          "f\n```json\n{\"k\": \"``\"}\n```" + kDsCallEnd + kDsCallsEnd + " tail"},
      {"deepseek_v31", "x" + kDsCallsBegin + kDsCallBegin + "f" + kDsSep + "{\"a\":[1,2]}" + kDsCallEnd +
                           kDsCallBegin + "g" + kDsSep + "{}" + kDsCallEnd + kDsCallsEnd},
  };
  std::mt19937 rng(11);
  for (const auto& [format, text] : cases) {
    for (bool starts_in_reasoning : {false, true}) {
      OutputParser::Options options = with_tools();
      options.starts_in_reasoning = starts_in_reasoning;
      const Collected whole = parse(format, {text}, options);
      for (int trial = 0; trial < 300; ++trial) {
        const Collected chunked = parse(format, random_chunks(text, rng), options);
        ASSERT_EQ(chunked.content, whole.content) << format << ": " << text;
        ASSERT_EQ(chunked.reasoning, whole.reasoning) << format;
        ASSERT_EQ(chunked.names, whole.names) << format;
        ASSERT_EQ(chunked.arguments, whole.arguments) << format;
      }
    }
  }
}

TEST(OutputParser, FormatsByNameAndModelType) {
  EXPECT_FALSE(output_format_by_name("nope").ok());
  EXPECT_EQ(output_format_for_model_type("qwen3").name, "qwen3");
  EXPECT_EQ(output_format_for_model_type("deepseek_v3").name, "deepseek_v3");
  EXPECT_EQ(output_format_for_model_type("llama").name, "none");
}

}  // namespace
}  // namespace sluice::server
