// Bad input: malformed templates fail at parse time naming the line; hostile
// templates hit the operation budget, the output cap or the call-depth limit and
// return an error instead of hanging or crashing.
#include <gtest/gtest.h>

#include <string>

#include "sluice/api/chat_template.h"

namespace sluice::api {
namespace {

std::string parse_error(std::string_view source) {
  auto parsed = ChatTemplate::parse(source);
  EXPECT_FALSE(parsed.ok()) << "expected a parse error for: " << source;
  return parsed.error_message();
}

Result<std::string> render(std::string_view source, const ChatRenderOptions& options = {}) {
  auto parsed = ChatTemplate::parse(source);
  if (!parsed.ok()) return parsed.error();
  return parsed->render(nlohmann::ordered_json::array(), options);
}

TEST(JinjaParseErrors, NameTheLine) {
  EXPECT_NE(parse_error("ok\n{% if x %}\nnever closed\n").find("line 2"), std::string::npos);
  EXPECT_NE(parse_error("a\nb\n{{ x ").find("line 3"), std::string::npos);
  const std::string unknown_tag = parse_error("a\nb\n  {% frobnicate x %}");
  EXPECT_NE(unknown_tag.find("line 3"), std::string::npos) << unknown_tag;
  EXPECT_NE(unknown_tag.find("frobnicate"), std::string::npos) << unknown_tag;
  const std::string unknown_filter = parse_error("{{ a }}\n{{ x | trim | frobnicate }}");
  EXPECT_NE(unknown_filter.find("line 2"), std::string::npos) << unknown_filter;
  EXPECT_NE(unknown_filter.find("'frobnicate'"), std::string::npos) << unknown_filter;
  EXPECT_NE(parse_error("{% for x in y %}\n{% endif %}").find("line 2"), std::string::npos);
  EXPECT_NE(parse_error("{{ x is frobnicated }}").find("frobnicated"), std::string::npos);
  EXPECT_NE(parse_error("\n\n{% include 'other.jinja' %}").find("line 3"), std::string::npos);
  EXPECT_NE(parse_error("{# unterminated").find("comment"), std::string::npos);
  EXPECT_NE(parse_error("{{ 'unterminated }}").find("line 1"), std::string::npos);
  EXPECT_NE(parse_error("{% set %}").find("line 1"), std::string::npos);
  EXPECT_NE(parse_error("{{ (1 }}").find("line 1"), std::string::npos);
}

TEST(JinjaParseErrors, DeepNestingIsAnErrorNotACrash) {
  const std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_FALSE(ChatTemplate::parse(deep).ok());
  std::string nots = "{{ ";
  for (int i = 0; i < 5000; ++i) nots += "not ";
  EXPECT_FALSE(ChatTemplate::parse(nots + "x }}").ok());
  // Long chains are built by loops but evaluated (and destroyed) recursively.
  std::string sum = "{{ 1";
  for (int i = 0; i < 100000; ++i) sum += " + 1";
  EXPECT_FALSE(ChatTemplate::parse(sum + " }}").ok());
  std::string filters = "{{ 'x'";
  for (int i = 0; i < 100000; ++i) filters += "|trim";
  EXPECT_FALSE(ChatTemplate::parse(filters + " }}").ok());
  std::string attributes = "{{ x";
  for (int i = 0; i < 100000; ++i) attributes += ".a";
  EXPECT_FALSE(ChatTemplate::parse(attributes + " }}").ok());
  std::string blocks;
  for (int i = 0; i < 20000; ++i) blocks += "{% if true %}";
  EXPECT_FALSE(ChatTemplate::parse(blocks).ok());
  // Moderate nesting stays fine.
  std::string moderate = "{{ 1";
  for (int i = 0; i < 100; ++i) moderate += " + 1";
  auto ok = ChatTemplate::parse(moderate + " }}");
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(ok->render(nlohmann::ordered_json::array(), {}).value(), "101");
}

TEST(JinjaLimits, OperationBudgetStopsNestedLoops) {
  // 10^10 iterations if unbounded; range() itself is capped at 100000 like jinja2's sandbox.
  const std::string source =
      "{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}{% endfor %}";
  ChatRenderOptions options;
  options.max_operations = 200'000;
  auto r = render(source, options);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error_message().find("budget"), std::string::npos) << r.error_message();
  // The default budget (10M) also stops it.
  auto r_default = render(source);
  ASSERT_FALSE(r_default.ok());
  EXPECT_NE(r_default.error_message().find("budget"), std::string::npos) << r_default.error_message();
}

TEST(JinjaLimits, BudgetCountsStringWork) {
  ChatRenderOptions options;
  options.max_operations = 100'000;
  options.max_output_bytes = 1u << 30;
  // Quadratic string growth: each step copies the whole string.
  auto r = render("{% set ns = namespace(s='x' * 100000) %}{% for i in range(100000) %}"
                  "{% set ns.s = ns.s + 'y' %}{% endfor %}{{ ns.s|length }}",
                  options);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error_message().find("budget"), std::string::npos) << r.error_message();
}

TEST(JinjaLimits, OutputCap) {
  ChatRenderOptions options;
  options.max_output_bytes = 1u << 20;
  auto r = render("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", options);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error_message().find("bytes"), std::string::npos) << r.error_message();
  auto huge = render("{{ 'x' * 1000000000000 }}", options);
  ASSERT_FALSE(huge.ok());
}

TEST(JinjaLimits, RecursionDepth) {
  auto r = render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error_message().find("nested"), std::string::npos) << r.error_message();
}

TEST(JinjaErrors, RenderErrorsNameTheLine) {
  auto r = render("line 1\n{% if true %}\n{{ raise_exception('bad roles') }}\n{% endif %}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error_message().find("line 3"), std::string::npos) << r.error_message();
  EXPECT_NE(r.error_message().find("bad roles"), std::string::npos) << r.error_message();
  auto u = render("\n\n{{ missing.attribute }}");
  ASSERT_FALSE(u.ok());
  EXPECT_NE(u.error_message().find("line 3"), std::string::npos) << u.error_message();
  EXPECT_NE(u.error_message().find("'missing' is undefined"), std::string::npos) << u.error_message();
}

TEST(ChatTemplateApi, RejectsReservedKwargsAndBadMessages) {
  auto parsed = ChatTemplate::parse("{{ messages|length }}");
  ASSERT_TRUE(parsed.ok());
  ChatRenderOptions options;
  options.extra_kwargs = {{"messages", 1}};
  EXPECT_FALSE(parsed->render(nlohmann::ordered_json::array(), options).ok());
  EXPECT_FALSE(parsed->render(nlohmann::ordered_json::object(), ChatRenderOptions{}).ok());
  auto ok = parsed->render(nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])"), ChatRenderOptions{});
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(*ok, "1");
}

TEST(ChatTemplateApi, AcceptsPlainJson) {
  // Callers holding nlohmann::json (sorted keys) convert implicitly.
  auto parsed = ChatTemplate::parse("{{ messages[0].content }}|{{ tools|tojson }}|{{ effort }}");
  ASSERT_TRUE(parsed.ok());
  const nlohmann::json messages = nlohmann::json::parse(R"([{"role": "user", "content": "hi"}])");
  ChatRenderOptions options;
  options.tools = nlohmann::json::parse(R"([{"b": 1, "a": 2}])");
  options.extra_kwargs = nlohmann::json{{"effort", "low"}};
  auto out = parsed->render(messages, options);
  ASSERT_TRUE(out.ok()) << out.error_message();
  EXPECT_EQ(*out, R"(hi|[{"a": 2, "b": 1}]|low)");
}

}  // namespace
}  // namespace sluice::api
