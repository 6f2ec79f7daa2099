// DeepSeek-V4's chat encoding (api/deepseek_v4_chat.h) against DeepSeek's own
// encoder: every case of deepseek_v4_chat_cases.json renders byte for byte
// the prompt encoding_dsv4.py wrote for it (deepseek_v4_chat_expected.json, from
// tools/reference/deepseek_v4_chat_fixtures.py; a missing fixture fails). Then
// what the encoder has no case for: no generation prompt, bad input refused.
#include "sluice/api/deepseek_v4_chat.h"

#include <gtest/gtest.h>

#include <random>

#include "sluice/common/io.h"

namespace sluice::api {
namespace {

using Json = nlohmann::ordered_json;

Json read_json(const std::string& name) {
  auto text = read_file(std::string(SLUICE_SOURCE_DIR) + "/tests/api/" + name);
  EXPECT_TRUE(text.ok()) << text.error_message();
  return text.ok() ? Json::parse(*text) : Json();
}

ChatRenderOptions options_of(const Json& c) {
  ChatRenderOptions options;
  if (c.contains("tools")) options.tools = c["tools"];
  options.extra_kwargs = c.value("kwargs", Json::object());
  return options;
}

TEST(DeepseekV4Chat, RendersWhatDeepSeeksEncoderWrites) {
  const Json cases = read_json("deepseek_v4_chat_cases.json");
  const Json expected = read_json("deepseek_v4_chat_expected.json");
  ASSERT_TRUE(cases.is_array());
  ASSERT_EQ(expected["prompts"].size(), cases.size()) << "regenerate the fixture";
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Json& c = cases[i];
    ASSERT_EQ(expected["prompts"][i]["name"], c["name"]);
    auto prompt = render_deepseek_v4_chat(c["messages"], options_of(c));
    ASSERT_TRUE(prompt.ok()) << c["name"] << ": " << prompt.error_message();
    EXPECT_EQ(*prompt, expected["prompts"][i]["prompt"].get<std::string>()) << c["name"];
  }
}

TEST(DeepseekV4Chat, ThroughTheChatTemplateInterface) {
  const ChatTemplate native = ChatTemplate::native(&render_deepseek_v4_chat);
  const Json messages = Json::array({{{"role", "user"}, {"content", "Hi"}}});
  auto prompt = native.render(messages, {});
  ASSERT_TRUE(prompt.ok()) << prompt.error_message();
  EXPECT_EQ(*prompt, "<\uFF5Cbegin\u2581of\u2581sentence\uFF5C><\uFF5CUser\uFF5C>Hi<\uFF5CAssistant\uFF5C></think>");
  // Without a generation prompt the user turn is the end.
  auto bare = native.render(messages, {.add_generation_prompt = false});
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(*bare, "<\uFF5Cbegin\u2581of\u2581sentence\uFF5C><\uFF5CUser\uFF5C>Hi");
}

TEST(DeepseekV4Chat, RefusesWhatItCannotEncode) {
  const std::vector<std::pair<Json, std::string>> bad = {
      {Json::array({{{"role", "narrator"}, {"content", "x"}}}), "unknown role 'narrator'"},
      {Json::array({{{"content", "x"}}}), "each message needs a role"},
      {Json::array({{{"role", "user"}, {"content", Json::array({{{"type", "image_url"}}})}}}), "only text content parts"},
      {Json::array({{{"role", "assistant"},
                     {"tool_calls", Json::array({{{"function", {{"name", "f"}, {"arguments", "[1, 2]"}}}}})}}}),
       "tool call arguments must be a JSON object"},
      {Json::array({{{"role", "developer"}, {"content", ""}}}), "a developer message needs content"},
  };
  for (const auto& [messages, message] : bad) {
    auto prompt = render_deepseek_v4_chat(messages, {});
    ASSERT_FALSE(prompt.ok()) << messages.dump();
    EXPECT_NE(prompt.error_message().find(message), std::string::npos) << prompt.error_message();
  }
}

// reasoning_effort as gateways forward it: max and xhigh take the preamble, any other value
// (OpenAI's none ... high, or one it does not know) renders as no effort given.
TEST(DeepseekV4Chat, ReasoningEffortNeverRefused) {
  const Json messages = Json::array({{{"role", "user"}, {"content", "x"}}});
  auto with = [&](const Json& effort) {
    auto prompt = render_deepseek_v4_chat(messages, {.extra_kwargs = {{"thinking", true}, {"reasoning_effort", effort}}});
    EXPECT_TRUE(prompt.ok()) << effort.dump();
    return prompt.ok() ? *prompt : std::string();
  };
  const std::string plain = with(Json());
  const std::string max = with("max");
  EXPECT_NE(max, plain);
  EXPECT_TRUE(max.find("Reasoning Effort: Absolute maximum") != std::string::npos);
  EXPECT_EQ(with("xhigh"), max);
  for (const char* other : {"none", "minimal", "low", "medium", "high", "extreme"}) EXPECT_EQ(with(other), plain) << other;
  EXPECT_EQ(with(7), plain);
}

// Random message lists (roles, contents, tool calls and results of every
// JSON type, with and without tools and kwargs): each renders or is refused
// with a message, none throws past the encoder.
TEST(DeepseekV4Chat, RandomMessagesRenderOrAreRefused) {
  std::mt19937 rng(25);
  auto pick = [&rng](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  const std::vector<Json> values = {Json(), Json("text"), Json(""), Json(3), Json(2.5), Json(true),
                                    Json::array({1, "a"}), Json::object({{"k", "v"}}),
                                    Json::array({{{"type", "text"}, {"text", "part"}}})};
  const std::vector<std::string> roles = {"system", "user", "assistant", "tool", "developer", "other"};
  int rendered = 0, refused = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    Json messages = Json::array();
    const std::size_t n = 1 + pick(6);
    for (std::size_t i = 0; i < n; ++i) {
      Json m = {{"role", roles[pick(roles.size())]}};
      if (pick(4) != 0) m["content"] = values[pick(values.size())];
      if (pick(3) == 0) m["reasoning_content"] = values[pick(values.size())];
      if (pick(3) == 0) m["tool_call_id"] = pick(2) == 0 ? Json("c" + std::to_string(pick(3))) : values[pick(values.size())];
      if (pick(3) == 0) {
        Json calls = Json::array();
        for (std::size_t c = pick(3); c > 0; --c)
          calls.push_back({{"id", "c" + std::to_string(pick(3))},
                           {"function", {{"name", "f"}, {"arguments", pick(2) == 0 ? Json(R"({"a": [1, {"b": null}]})")
                                                                                   : values[pick(values.size())]}}}});
        m["tool_calls"] = calls;
      }
      messages.push_back(std::move(m));
    }
    ChatRenderOptions options;
    if (pick(2) == 0) options.tools = Json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}});
    if (pick(2) == 0) options.extra_kwargs = {{"thinking", pick(2) == 0}, {"drop_thinking", pick(2) == 0}};
    const Result<std::string> prompt = render_deepseek_v4_chat(messages, options);
    if (prompt.ok()) {
      ++rendered;
      EXPECT_TRUE(prompt->starts_with("<\uFF5Cbegin\u2581of\u2581sentence\uFF5C>"));
    } else {
      ++refused;
      EXPECT_TRUE(prompt.error_message().starts_with("deepseek_v4 chat: ")) << prompt.error_message();
    }
  }
  EXPECT_GT(rendered, 100);
  EXPECT_GT(refused, 100);
}

}  // namespace
}  // namespace sluice::api
