// Output parsers: whole-text results checked by hand against the formats'
// definitions, and any random chunking of the same text must give the same
// content, reasoning and tool calls as feeding it whole.
#include "sluice/server/output_parser.h"

#include <random>
#include <tuple>

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

// DeepSeek-V4's DSML (../shared/models/deepseek-v41-flash.md §5), written as
// its encoder writes calls back into a prompt: a string parameter is the
// string, string="false" is JSON. V4.1's dialect names the block `calls` and
// puts a space after the second ｜ of every tag.
const std::string kDsml = "\uFF5CDSML\uFF5C";
std::string dsml_calls(const std::string& dsml, const std::string& block) {
  return "<" + dsml + block + ">\n<" + dsml + "invoke name=\"get_weather\">\n<" + dsml +
         "parameter name=\"city\" string=\"true\">Paris, \"FR\"</" + dsml + "parameter>\n<" + dsml +
         "parameter name=\"days\" string=\"false\">3</" + dsml + "parameter>\n<" + dsml +
         "parameter name=\"units\" string=\"false\">{\"t\": \"C\", \"list\": [1, 2.5]}</" + dsml + "parameter>\n</" +
         dsml + "invoke>\n<" + dsml + "invoke name=\"ns::now\">\n\n</" + dsml + "invoke>\n</" + dsml + block + ">";
}

TEST(OutputParser, DeepSeekV4DsmlToolCalls) {
  for (const auto& [format, dsml, block] :
       {std::tuple<std::string, std::string, std::string>{"deepseek_v4", kDsml, "tool_calls"},
        std::tuple<std::string, std::string, std::string>{"deepseek_v41", kDsml + " ", "calls"}}) {
    const std::string text = "<think>Weather, then time.</think>Checking.\n\n" + dsml_calls(dsml, block) + "\n";
    const Collected got = parse(format, {text}, with_tools());
    EXPECT_EQ(got.reasoning, "Weather, then time.") << format;
    EXPECT_EQ(got.content, "Checking.") << format;  // the blank line before the block is layout
    ASSERT_EQ(got.names.size(), 2u) << format;
    EXPECT_EQ(got.names[0], "get_weather");
    // As DeepSeek's decoder writes them: a string quoted, other values as written.
    EXPECT_EQ(got.arguments[0], R"({"city": "Paris, \"FR\"", "days": 3, "units": {"t": "C", "list": [1, 2.5]}})");
    EXPECT_EQ(got.names[1], "ns::now");
    EXPECT_EQ(got.arguments[1], "{}");
  }
  // Whitespace that no block follows is content.
  EXPECT_EQ(parse("deepseek_v4", {"a \n", "b\n\n"}, with_tools()).content, "a \nb\n\n");
  // The other dialect's tags are text to each.
  const Collected crossed = parse("deepseek_v41", {dsml_calls(kDsml, "tool_calls")}, with_tools());
  EXPECT_TRUE(crossed.names.empty());
  EXPECT_EQ(crossed.content, dsml_calls(kDsml, "tool_calls"));
}

// A value that is not JSON goes out as the string it was; a call whose next
// parameter is malformed (or named twice) ends there, the rest is text; an
// invoke tag without its name is text.
TEST(OutputParser, DeepSeekV4MalformedInvokes) {
  const std::string open = "<" + kDsml + "tool_calls>\n", close = "</" + kDsml + "tool_calls>";
  const std::string invoke = "<" + kDsml + "invoke", end = "</" + kDsml + "invoke>";
  const std::string p = "<" + kDsml + "parameter", pe = "</" + kDsml + "parameter>";
  const Collected loose = parse("deepseek_v4", {open + invoke + " name=\"g\">\n" + p +
                                                " name=\"when\" string=\"false\">next monday" + pe + "\n" + end +
                                                "\n" + close + " after"},
                                with_tools());
  ASSERT_EQ(loose.names.size(), 1u);
  EXPECT_EQ(loose.arguments[0], R"({"when": "next monday"})");
  EXPECT_EQ(loose.content, " after");
  const std::string second = p + " name=\"a\" string=\"true\">2" + pe + "\n" + end + "\n" + close;
  const Collected twice =
      parse("deepseek_v4", {open + invoke + " name=\"f\">\n" + p + " name=\"a\" string=\"true\">1" + pe + "\n" + second},
            with_tools());
  ASSERT_EQ(twice.names.size(), 1u);
  EXPECT_EQ(twice.arguments[0], R"({"a": "1"})");
  EXPECT_EQ(twice.content, "\n" + second);
  const Collected unnamed = parse("deepseek_v4", {"x" + open + invoke + ">"}, with_tools());
  EXPECT_TRUE(unnamed.names.empty());
  EXPECT_EQ(unnamed.content, "x" + invoke + ">");
}

// A string value streams as the model writes it: a long file's content reaches the
// client before the call ends.
TEST(OutputParser, DeepSeekV4StringArgumentsStream) {
  OutputParser parser(output_format_by_name("deepseek_v4").value(), with_tools());
  ParsedDelta first;
  parser.feed("<" + kDsml + "tool_calls>\n<" + kDsml + "invoke name=\"write\">\n<" + kDsml +
                  "parameter name=\"text\" string=\"true\">line \"1\"\nline 2",
              first);
  ASSERT_EQ(first.tool_calls.size(), 1u);
  EXPECT_EQ(first.tool_calls[0].name, "write");
  EXPECT_EQ(first.tool_calls[0].arguments, R"({"text": "line \"1\"\nline 2)");
  ParsedDelta rest;
  parser.feed(" end</" + kDsml + "parameter>\n</" + kDsml + "invoke>", rest);
  ASSERT_EQ(rest.tool_calls.size(), 1u);
  EXPECT_TRUE(rest.tool_calls[0].id.empty());
  EXPECT_EQ(rest.tool_calls[0].arguments, " end\"}");
  // Whatever the string holds, the arguments are JSON whose value is that string.
  const std::string value = "q\"uote \\ back\nslash\ttab \x01 \u00e9\u4e2d </x>";
  const Collected got = parse("deepseek_v4", {"<" + kDsml + "tool_calls><" + kDsml + "invoke name=\"w\"><" + kDsml +
                                              "parameter name=\"s\" string=\"true\">" + value + "</" + kDsml +
                                              "parameter></" + kDsml + "invoke></" + kDsml + "tool_calls>"},
                              with_tools());
  ASSERT_EQ(got.arguments.size(), 1u);
  EXPECT_EQ(nlohmann::json::parse(got.arguments[0]), nlohmann::json({{"s", value}}));
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
      {"llama3_json", "  <|python_tag|>{\"name\": \"f\", \"parameters\": {\"s\": \"}{\\\"\"}}  ;\n{\"name\": \"g\", "
                      "\"arguments\": \"{}\"} tail"},
      {"qwen3_coder", "<think>t</think>a<tool_call>\n<function=f>\n<parameter=p>\n<x>\n</parameter>\n</function>\n"
                      "</tool_call>\n<tool_call><function=g></tool_call>b"},
      {"deepseek_v31", "x" + kDsCallsBegin + kDsCallBegin + "f" + kDsSep + "{\"a\":[1,2]}" + kDsCallEnd +
                           kDsCallBegin + "g" + kDsSep + "{}" + kDsCallEnd + kDsCallsEnd},
      {"deepseek_v4", "<think>r <" + kDsml + "</think>c " + dsml_calls(kDsml, "tool_calls") + " tail"},
      {"deepseek_v41", "a \n\n" + dsml_calls(kDsml + " ", "calls") + "\n"},
      {"deepseek_v4", "keep  \n these spaces \n"},
      {"deepseek_v4", "<" + kDsml + "tool_calls><" + kDsml + "invoke name=\"w\"><" + kDsml +
                          "parameter name=\"s\" string=\"true\">q\"\\ </" + kDsml + "par \u00e9\t\x01</" + kDsml +
                          "parameter><" + kDsml + "parameter name=\"n\" string=\"false\"> [1, {\"a\": 2}] </" + kDsml +
                          "parameter></" + kDsml + "invoke><" + kDsml + "invoke name=\"d\"><" + kDsml +
                          "parameter name=\"k\" string=\"true\">1</" + kDsml + "parameter><" + kDsml +
                          "parameter name=\"k\" string=\"true\">2</" + kDsml + "parameter></" + kDsml + "invoke>"},
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

// A hand-written model output and the result it must give, whatever the cuts.
struct Expected {
  std::string content, reasoning;
  std::vector<std::string> names;
  std::vector<nlohmann::json> arguments;  // compared as JSON values
};

void expect_parsed(const Collected& got, const Expected& want, const std::string& label) {
  ASSERT_EQ(got.content, want.content) << label;
  ASSERT_EQ(got.reasoning, want.reasoning) << label;
  ASSERT_EQ(got.names, want.names) << label;
  ASSERT_EQ(got.arguments.size(), want.arguments.size()) << label;
  for (std::size_t i = 0; i < want.arguments.size(); ++i) {
    const auto parsed = nlohmann::json::parse(got.arguments[i], nullptr, /*allow_exceptions=*/false);
    ASSERT_EQ(parsed, want.arguments[i]) << label << ": call " << i << " arguments " << got.arguments[i];
  }
}

// The text whole, byte by byte, and cut in two at every byte boundary.
void expect_at_every_cut(const std::string& format, const std::string& text, const OutputParser::Options& options,
                         const Expected& want) {
  expect_parsed(parse(format, {text}, options), want, format + " whole: " + text);
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  expect_parsed(parse(format, bytes, options), want, format + " byte by byte: " + text);
  for (std::size_t cut = 1; cut < text.size(); ++cut)
    expect_parsed(parse(format, {text.substr(0, cut), text.substr(cut)}, options), want,
                  format + " cut at " + std::to_string(cut) + ": " + text);
}

TEST(OutputParser, Llama3JsonCallsAfterThePythonTag) {
  // Two calls joined by ';', one with "parameters" and one with "arguments"; a string holding
  // braces, an escaped quote and a backslash must not end the object early.
  const std::string text =
      "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"note\": \"a } \\\" \\\\ {\"}}"
      "; {\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}";
  expect_at_every_cut("llama3_json", text, with_tools(),
                      {.names = {"get_weather", "get_time"},
                       .arguments = {{{"city", "Paris"}, {"note", "a } \" \\ {"}}, {{"tz", "UTC"}}}});
}

TEST(OutputParser, Llama3JsonBareObjectAtTheStart) {
  const std::string text = "\n {\"name\": \"search\", \"parameters\": {\"q\": \"x\", \"opts\": {\"n\": [1, 2]}}}\n\nDone.";
  expect_at_every_cut("llama3_json", text, with_tools(),
                      {.content = "\n\nDone.",
                       .names = {"search"},
                       .arguments = {{{"q", "x"}, {"opts", {{"n", {1, 2}}}}}}});
}

TEST(OutputParser, Llama3JsonThatIsNotACallStaysContent) {
  // Plain JSON answers (no parameters or arguments), JSON after text, a tag with text after it,
  // an object never closed, and tool calls off.
  for (const std::string& text :
       {std::string("{\"name\": \"Ada\", \"age\": 36}"), std::string("[1, 2]"),
        std::string("Here: {\"name\": \"f\", \"parameters\": {}}"), std::string("<|python_tag|>print(1)"),
        std::string("<|python_tag|>{\"name\": \"f\", \"parameters\": {\"a\": "),
        std::string("{\"name\": \"f\", \"parameters\": {}} {\"name\": \"g\", \"parameters\": {}}x")}) {
    if (text.ends_with("}x")) {  // a second object without ';' is content
      expect_at_every_cut("llama3_json", text, with_tools(),
                          {.content = " {\"name\": \"g\", \"parameters\": {}}x", .names = {"f"}, .arguments = {nlohmann::json::object()}});
      continue;
    }
    expect_at_every_cut("llama3_json", text, with_tools(), {.content = text});
  }
  expect_at_every_cut("llama3_json", "{\"name\": \"f\", \"parameters\": {}}", {},
                      {.content = "{\"name\": \"f\", \"parameters\": {}}"});
}

TEST(OutputParser, Llama3JsonMalformedSecondCallStaysContent) {
  const std::string text = "{\"name\": \"f\", \"parameters\": {\"a\": 1}}; oops";
  expect_at_every_cut("llama3_json", text, with_tools(),
                      {.content = "; oops", .names = {"f"}, .arguments = {{{"a", 1}}}});
}

const nlohmann::ordered_json kCoderTools = nlohmann::ordered_json::parse(R"([
  {"type": "function", "function": {"name": "run", "parameters": {"type": "object", "properties": {
    "cmd": {"type": "string"}, "retries": {"type": "integer"}, "timeout_s": {"type": "number"},
    "ratio": {"type": "number"}, "dry_run": {"type": "boolean"}, "env": {"type": "object"},
    "args": {"type": "array"}, "code": {"type": "string"}, "limit": {"type": ["integer", "null"]},
    "bad_count": {"type": "integer"}, "flag": {"type": "boolean"}}}}},
  {"type": "function", "function": {"name": "ls", "parameters": {"type": "object", "properties": {}}}}
])");

OutputParser::Options coder_options() {
  OutputParser::Options options = with_tools();
  options.tools = kCoderTools;
  return options;
}

TEST(OutputParser, Qwen3CoderValuesTypedByTheToolSchema) {
  const std::string text =
      "<think>plan</think>\n\nRunning it.\n<tool_call>\n<function=run>\n"
      "<parameter=cmd>\n42\n</parameter>\n"
      "<parameter=retries>\n3\n</parameter>\n"
      "<parameter=timeout_s>\n2.5\n</parameter>\n"
      "<parameter=ratio>\n4.0\n</parameter>\n"
      "<parameter=dry_run>\nTrue\n</parameter>\n"
      "<parameter=env>\n{\"A\": \"1\"}\n</parameter>\n"
      "<parameter=args>\n[\"-l\", 2]\n</parameter>\n"
      "<parameter=code>\nif a < b:\n    print(\"</tool_call>\")\n</parameter>\n"
      "<parameter=limit>\nnull\n</parameter>\n"
      "<parameter=bad_count>\nmany\n</parameter>\n"
      "<parameter=flag>\nmaybe\n</parameter>\n"
      "<parameter=extra>\n7\n</parameter>\n"
      "</function>\n</tool_call>\n<tool_call>\n<function=ls>\n</function>\n</tool_call>";
  // The code value holds "</tool_call>": the call ends at the first one, so this call is not
  // well formed and must come back as text. Without it, every value is typed.
  const std::string well_formed = [&] {
    std::string t = text;
    const std::string inner = "print(\"</tool_call>\")";
    t.replace(t.find(inner), inner.size(), "print(\"<done>\")");
    return t;
  }();
  const nlohmann::json run_arguments = {{"cmd", "42"},          {"retries", 3},         {"timeout_s", 2.5},
                                        {"ratio", 4},           {"dry_run", true},      {"env", {{"A", "1"}}},
                                        {"args", {"-l", 2}},    {"code", "if a < b:\n    print(\"<done>\")"},
                                        {"limit", nullptr},     {"bad_count", "many"},  {"flag", "maybe"},
                                        {"extra", "7"}};
  expect_at_every_cut("qwen3_coder", well_formed, coder_options(),
                      {.content = "\n\nRunning it.\n",
                       .reasoning = "plan",
                       .names = {"run", "ls"},
                       .arguments = {run_arguments, nlohmann::json::object()}});
  const Collected broken = parse("qwen3_coder", {text}, coder_options());
  EXPECT_EQ(broken.names, std::vector<std::string>{"ls"});
  EXPECT_NE(broken.content.find("<tool_call>\n<function=run>"), std::string::npos) << broken.content;
}

TEST(OutputParser, Qwen3CoderWithoutSchemaKeepsStrings) {
  // A function the request does not declare: every value stays the text it was.
  const std::string text = "<tool_call>\n<function=other>\n<parameter=n>\n5\n</parameter>\n</function>\n</tool_call>";
  expect_at_every_cut("qwen3_coder", text, coder_options(), {.names = {"other"}, .arguments = {{{"n", "5"}}}});
}

TEST(OutputParser, Qwen3CoderMalformedCallsStayContent) {
  for (const std::string& text :
       {std::string("<tool_call>\n<function=f>\n<parameter=x>\n1\n</tool_call>"),   // parameter never closed
        std::string("<tool_call>\n{\"name\": \"f\"}\n</tool_call>"),                  // Hermes JSON, not XML
        std::string("<tool_call>\n<function=>\n</function>\n</tool_call>"),          // no name
        std::string("<tool_call>\n<function=f>\nstray\n</function>\n</tool_call>"),  // text between parameters
        std::string("<tool_call>\n<function=f>\n</function>\n<function=g>\n</function>\n</tool_call>"),
        std::string("ok <tool_call>\n<function=f>\n<parameter=x>\n1\n</parameter>\n")}) {  // never closed
    expect_at_every_cut("qwen3_coder", text, coder_options(), {.content = text});
  }
}

TEST(OutputParser, FormatsByNameAndModelType) {
  EXPECT_FALSE(output_format_by_name("nope").ok());
  EXPECT_EQ(output_format_by_name("llama3_json").value().tool_syntax, ToolCallSyntax::kBareJson);
  EXPECT_EQ(output_format_by_name("qwen3_coder").value().tool_syntax, ToolCallSyntax::kTaggedXml);
  EXPECT_EQ(output_format_for_model_type("qwen3").name, "qwen3");
  EXPECT_EQ(output_format_for_model_type("deepseek_v3").name, "deepseek_v3");
  EXPECT_EQ(output_format_for_model_type("deepseek_v4").name, "deepseek_v4");
  EXPECT_EQ(output_format_for_model_type("llama").name, "none");
}

}  // namespace
}  // namespace sluice::server
