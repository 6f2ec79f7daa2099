// response_format json_object end to end through the real server. A
// stand-in "model" samples among the tokens the engine allows: it prefers a
// fixed list of tokens (so it builds and closes an object), or, in the
// random variant, picks any allowed token. The oracles, on the text the
// client receives: nlohmann's JSON parser for whole answers, and the
// JSON-prefix oracle (tests/support/json_prefix.py) for every answer, those
// cut off at max_tokens included.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <utility>

#include "loopback_server.h"
#include "../support/json_prefix_oracle.h"
#include "../support/mask_following_backend.h"

namespace sluice::server {
namespace {

using nlohmann::json;

class JsonModeTest : public ::testing::Test {
 protected:
  void start(bool prefer_closing) {
    loopback::TinyChatModel tiny = loopback::make_tiny_chat_model("llama", "none");
    model_ = tiny.context;
    model_->json_vocabulary = structured::make_json_vocabulary(model_->tokenizer, model_->tokenizer.vocab_size());
    std::vector<TokenId> preference;
    if (prefer_closing)
      for (const char* text : {"\"", ":", "}", "{"})
        for (TokenId t : model_->tokenizer.encode(text, false)) preference.push_back(t);
    model_->engine = std::make_unique<Engine>(
        std::make_unique<testing::MaskFollowingBackend>(model_->tokenizer.vocab_size(), preference), nullptr, EngineConfig{});
    server_ = std::make_unique<loopback::LoopbackServer>(model_);
  }

  static json chat(bool stream, std::int32_t max_tokens) {
    json body = {{"model", "m"},
                 {"messages", json::array({{{"role", "user"}, {"content", "Answer in JSON."}}})},
                 {"response_format", {{"type", "json_object"}}},
                 {"max_tokens", max_tokens}};
    if (stream) body["stream"] = true;
    return body;
  }

  std::shared_ptr<ModelContext> model_;
  std::unique_ptr<loopback::LoopbackServer> server_;
};

TEST_F(JsonModeTest, TheObjectClosesAndTheAnswerEnds) {
  start(/*prefer_closing=*/true);
  const auto [status, body] = server_->post("/v1/chat/completions", chat(false, 64));
  ASSERT_EQ(status, 200) << body;
  const json response = json::parse(body);
  const json& choice = response["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "stop");
  const std::string content = choice["message"]["content"];
  // Preferring '"', ':', '}' and '{' in that order, where allowed, spells
  // an object with one empty key and an empty string value.
  EXPECT_EQ(content, "{\"\":\"\"}");
  EXPECT_TRUE(json::parse(content).is_object());
}

// A streamed completion's text and finish reason, from its SSE body.
std::pair<std::string, std::string> streamed_completion(const std::string& body) {
  std::string text, finish_reason;
  for (const std::string& event : loopback::sse_data_events(body)) {
    if (event == "[DONE]") continue;
    const json chunk = json::parse(event);
    for (const json& choice : chunk["choices"]) {
      text += choice.value("text", "");
      if (!choice["finish_reason"].is_null()) finish_reason = choice["finish_reason"];
    }
  }
  return {text, finish_reason};
}

// A streamed answer: what the client got and why it ended.
struct Answer {
  std::string text, finish_reason;
};

// Every answer is a prefix of a JSON document by the oracle, a whole one when
// it stopped, starts its object first thing, and ends only by closing it
// ("stop") or at the length cap.
void expect_json_prefixes(const std::vector<Answer>& answers) {
  std::vector<std::string> texts;
  for (const Answer& a : answers) texts.push_back(a.text);
  const auto verdicts = testing::json_prefix_verdicts(texts);
  ASSERT_TRUE(verdicts.ok()) << verdicts.error_message();
  for (std::size_t i = 0; i < answers.size(); ++i) {
    const Answer& a = answers[i];
    const testing::JsonPrefixVerdict& v = verdicts.value()[i];
    EXPECT_EQ(a.text.find_first_not_of(" \t\r\n"), a.text.find('{')) << a.text;
    EXPECT_TRUE(a.finish_reason == "stop" || a.finish_reason == "length") << a.finish_reason;
    EXPECT_TRUE(v.prefix) << a.finish_reason << ": " << a.text;
    if (a.finish_reason == "stop") {
      EXPECT_TRUE(v.complete) << a.text;
    }
  }
}

TEST_F(JsonModeTest, RandomAllowedTokensStreamAValidJsonPrefix) {
  start(/*prefer_closing=*/false);
  std::vector<Answer> answers;
  for (int round = 0; round < 3; ++round) {
    const auto [status, body] = server_->post("/v1/completions", json{{"model", "m"},
                                                                      {"prompt", "JSON: "},
                                                                      {"response_format", {{"type", "json_object"}}},
                                                                      {"max_tokens", 40},
                                                                      {"stream", true}});
    ASSERT_EQ(status, 200) << body;
    const auto [text, finish_reason] = streamed_completion(body);
    ASSERT_FALSE(text.empty()) << body;
    if (finish_reason == "stop") {
      EXPECT_TRUE(json::parse(text).is_object()) << text;
    }
    answers.push_back({text, finish_reason});
  }
  // Random walks rarely close the object in 40 tokens: the cut-off answers
  // are what this checks.
  expect_json_prefixes(answers);
}

// response_format json_schema: the same stand-in model, the schema's keys,
// types and required properties enforced; the oracle is nlohmann's parser
// plus the schema's rules checked by hand.
const json kSchemaFormat = {
    {"type", "json_schema"},
    {"json_schema",
     {{"name", "answer"},
      {"strict", true},
      {"schema",
       json::parse(R"({"type":"object","properties":{"answer":{"type":"string"},"n":{"type":"integer"},
                        "ok":{"type":"boolean"},"tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":2}},
                       "required":["answer","n","ok"],"additionalProperties":false})")}}}};

void expect_matches_schema(const std::string& text) {
  const json value = json::parse(text);
  ASSERT_TRUE(value.is_object()) << text;
  EXPECT_TRUE(value["answer"].is_string()) << text;
  EXPECT_TRUE(value["n"].is_number_integer()) << text;
  EXPECT_TRUE(value["ok"].is_boolean()) << text;
  for (const auto& [key, v] : value.items()) {
    EXPECT_TRUE(key == "answer" || key == "n" || key == "ok" || key == "tags") << text;
    if (key == "tags") {
      EXPECT_TRUE(v.is_array() && v.size() <= 2) << text;
      for (const json& tag : v) EXPECT_TRUE(tag == "a" || tag == "b") << text;
    }
  }
}

TEST_F(JsonModeTest, JsonSchemaOutputMatchesTheSchema) {
  start(/*prefer_closing=*/true);
  json body = chat(false, 64);
  body["response_format"] = kSchemaFormat;
  const auto [status, reply] = server_->post("/v1/chat/completions", body);
  ASSERT_EQ(status, 200) << reply;
  const json response = json::parse(reply);
  const json& choice = response["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "stop");
  const std::string content = choice["message"]["content"];
  std::printf("json_schema with closing preferred: %s\n", content.c_str());
  expect_matches_schema(content);
}

TEST_F(JsonModeTest, JsonSchemaRandomAllowedTokensStreamAValidPrefix) {
  start(/*prefer_closing=*/false);
  int num_complete = 0;
  std::vector<Answer> answers;
  for (int round = 0; round < 6; ++round) {
    const auto [status, body] = server_->post("/v1/completions", json{{"model", "m"},
                                                                      {"prompt", "JSON: "},
                                                                      {"response_format", kSchemaFormat},
                                                                      {"max_tokens", 60},
                                                                      {"seed", round},
                                                                      {"stream", true}});
    ASSERT_EQ(status, 200) << body;
    const auto [text, finish_reason] = streamed_completion(body);
    ASSERT_FALSE(text.empty()) << body;
    if (finish_reason == "stop") {
      expect_matches_schema(text);
      ++num_complete;
    }
    answers.push_back({text, finish_reason});
  }
  expect_json_prefixes(answers);
  std::printf("json_schema random walks: %d of 6 completed within 60 tokens\n", num_complete);
}

TEST_F(JsonModeTest, UnsupportedSchemaKeywordsAreRefusedBeforeAnythingIsWritten) {
  start(/*prefer_closing=*/true);
  json body = chat(true, 16);
  body["response_format"] = kSchemaFormat;
  body["response_format"]["json_schema"]["schema"]["properties"]["answer"]["pattern"] = "^[a-z]+$";
  const auto [status, reply] = server_->post("/v1/chat/completions", body);
  EXPECT_EQ(status, 400) << reply;
  const json error = json::parse(reply)["error"];
  EXPECT_EQ(error["param"], "response_format.json_schema.schema");
  EXPECT_EQ(error["message"], "unsupported JSON schema: unsupported keyword 'pattern' at $.properties.answer");
  body["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}};
  const auto [status2, reply2] = server_->post("/v1/completions", json{{"model", "m"}, {"prompt", "x"},
                                                                         {"response_format", body["response_format"]}});
  EXPECT_EQ(status2, 400) << reply2;
  EXPECT_EQ(json::parse(reply2)["error"]["param"], "response_format.json_schema.schema");
}

}  // namespace
}  // namespace sluice::server
