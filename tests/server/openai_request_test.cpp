// Request parsing and validation: what is accepted becomes the typed fields,
// and each class of bad input is a 400 that names the field.
#include "sluice/server/openai_request.h"

#include <gtest/gtest.h>

namespace sluice::server {
namespace {

using Json = nlohmann::ordered_json;

Json chat_body() {
  return Json::parse(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}]})");
}

ApiError chat_error(const Json& body, const RequestLimits& limits = {}) {
  auto parsed = parse_chat_request(body, limits);
  EXPECT_TRUE(std::holds_alternative<ApiError>(parsed)) << body.dump();
  return std::holds_alternative<ApiError>(parsed) ? std::get<ApiError>(parsed) : ApiError{};
}

ChatRequest chat_ok(const Json& body) {
  auto parsed = parse_chat_request(body, {});
  if (auto* e = std::get_if<ApiError>(&parsed)) ADD_FAILURE() << e->message;
  return std::holds_alternative<ChatRequest>(parsed) ? std::get<ChatRequest>(parsed) : ChatRequest{};
}

TEST(ChatRequest, DefaultsAndFields) {
  Json body = chat_body();
  body["max_tokens"] = 5;
  body["max_completion_tokens"] = 7;  // wins over max_tokens
  body["temperature"] = 0.5;
  body["top_p"] = 0.9;
  body["top_k"] = 40;
  body["seed"] = 123;
  body["stop"] = "END";
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  body["n"] = 3;
  body["logprobs"] = true;
  body["top_logprobs"] = 2;
  body["presence_penalty"] = 0.5;
  body["user"] = "ignored-field";
  const ChatRequest r = chat_ok(body);
  EXPECT_EQ(r.options.model, "m");
  EXPECT_EQ(r.options.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.options.sampling.temperature, 0.5f);
  EXPECT_EQ(r.options.sampling.top_k, 40);
  EXPECT_EQ(r.options.sampling.seed, 123u);
  EXPECT_TRUE(r.options.has_seed);
  EXPECT_EQ(r.options.stop, std::vector<std::string>{"END"});
  EXPECT_TRUE(r.options.stream);
  EXPECT_TRUE(r.options.include_usage);
  EXPECT_EQ(r.options.n, 3);
  EXPECT_EQ(r.options.sampling.num_top_logprobs, 2);
  EXPECT_FLOAT_EQ(r.options.sampling.presence_penalty, 0.5f);
}

TEST(ChatRequest, LogitBiasBecomesSortedTokenBiases) {
  Json body = chat_body();
  body["logit_bias"] = {{"50256", -100}, {"7", 2.5}, {"12", 100}};
  const ChatRequest r = chat_ok(body);
  const std::vector<std::pair<TokenId, float>> want = {{7, 2.5f}, {12, 100.0f}, {50256, -100.0f}};
  EXPECT_EQ(r.options.sampling.logit_bias, want);
  body["logit_bias"] = Json::object();  // what some clients send for none
  EXPECT_TRUE(chat_ok(body).options.sampling.logit_bias.empty());
  body["logit_bias"] = nullptr;
  EXPECT_TRUE(chat_ok(body).options.sampling.logit_bias.empty());
}

TEST(ChatRequest, OpenAiDefaultTemperatureIsOne) {
  EXPECT_FLOAT_EQ(chat_ok(chat_body()).options.sampling.temperature, 1.0f);
  EXPECT_FALSE(chat_ok(chat_body()).options.max_tokens.has_value());
}

TEST(ChatRequest, StreamOptionsToleratedWithoutStream) {
  Json body = chat_body();
  body["stream_options"] = {{"include_usage", true}};
  EXPECT_FALSE(chat_ok(body).options.stream);
}

TEST(ChatRequest, ResponseFormatJsonObjectTurnsOnJsonMode) {
  Json body = chat_body();
  EXPECT_FALSE(chat_ok(body).options.json_mode);
  body["response_format"] = {{"type", "text"}};
  EXPECT_FALSE(chat_ok(body).options.json_mode);
  body["response_format"] = {{"type", "json_object"}};
  EXPECT_TRUE(chat_ok(body).options.json_mode);
}

TEST(ChatRequest, ContentPartsAreJoinedAndDeveloperIsSystem) {
  Json body = chat_body();
  body["messages"] = Json::parse(
      R"([{"role": "developer", "content": [{"type": "text", "text": "be "}, {"type": "text", "text": "brief"}]},
          {"role": "user", "content": "q"},
          {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
             "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
          {"role": "tool", "tool_call_id": "c1", "content": "r"}])");
  const ChatRequest r = chat_ok(body);
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.messages[0]["content"], "be brief");
  EXPECT_EQ(r.messages[2]["tool_calls"][0]["function"]["arguments"]["a"], 1);  // parsed for templates
}

TEST(ChatRequest, BadInputs) {
  struct Case {
    const char* name;
    std::function<void(Json&)> edit;
    const char* param;
  };
  const std::vector<Case> cases = {
      {"missing model", [](Json& b) { b.erase("model"); }, "model"},
      {"model not a string", [](Json& b) { b["model"] = 3; }, "model"},
      {"messages not array", [](Json& b) { b["messages"] = "hi"; }, "messages"},
      {"messages empty", [](Json& b) { b["messages"] = Json::array(); }, "messages"},
      {"unknown role", [](Json& b) { b["messages"][0]["role"] = "wizard"; }, "messages[0].role"},
      {"image part", [](Json& b) { b["messages"][0]["content"] = Json::parse(R"([{"type":"image_url","image_url":{"url":"x"}}])"); }, "messages[0].content"},
      {"negative max_tokens", [](Json& b) { b["max_tokens"] = -1; }, "max_tokens"},
      {"zero max_tokens", [](Json& b) { b["max_tokens"] = 0; }, "max_tokens"},
      {"huge max_tokens", [](Json& b) { b["max_tokens"] = 1e30; }, "max_tokens"},
      {"fractional max_tokens", [](Json& b) { b["max_tokens"] = 2.5; }, "max_tokens"},
      {"string temperature", [](Json& b) { b["temperature"] = "hot"; }, "temperature"},
      {"temperature > 2", [](Json& b) { b["temperature"] = 2.5; }, "temperature"},
      {"top_p 0", [](Json& b) { b["top_p"] = 0; }, "top_p"},
      {"penalty out of range", [](Json& b) { b["frequency_penalty"] = 3; }, "frequency_penalty"},
      {"n too large", [](Json& b) { b["n"] = 1000; }, "n"},
      {"n zero", [](Json& b) { b["n"] = 0; }, "n"},
      {"top_logprobs too large", [](Json& b) { b["top_logprobs"] = 50; }, "top_logprobs"},
      {"stop wrong type", [](Json& b) { b["stop"] = 5; }, "stop"},
      {"too many stops", [](Json& b) { b["stop"] = Json::array({"a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"}); }, "stop"},
      {"stream not bool", [](Json& b) { b["stream"] = "yes"; }, "stream"},
      {"tool_choice without tools", [](Json& b) { b["tool_choice"] = "required"; }, "tool_choice"},
      {"tool without name", [](Json& b) { b["tools"] = Json::parse(R"([{"type":"function","function":{}}])"); }, "tools[0].function.name"},
      {"named tool not in tools", [](Json& b) {
         b["tools"] = Json::parse(R"([{"type":"function","function":{"name":"f"}}])");
         b["tool_choice"] = Json::parse(R"({"type":"function","function":{"name":"g"}})"); }, "tool_choice"},
      {"json_schema without schema", [](Json& b) { b["response_format"] = Json::parse(R"({"type":"json_schema","json_schema":{"name":"x"}})"); }, "response_format.json_schema.schema"},
      {"json_schema with anyOf", [](Json& b) { b["response_format"] = Json::parse(R"({"type":"json_schema","json_schema":{"name":"x","schema":{"anyOf":[]}}})"); }, "response_format.json_schema.schema"},
      {"unknown response_format", [](Json& b) { b["response_format"] = Json::parse(R"({"type":"yaml"})"); }, "response_format.type"},
      {"response_format without type", [](Json& b) { b["response_format"] = Json::object(); }, "response_format.type"},
      {"response_format not an object", [](Json& b) { b["response_format"] = "json"; }, "response_format"},
      {"request template off", [](Json& b) { b["chat_template"] = "{{ messages }}"; }, "chat_template"},
      {"kwargs override messages", [](Json& b) { b["chat_template_kwargs"] = {{"messages", 1}}; }, "chat_template_kwargs"},
      {"logit_bias not an object", [](Json& b) { b["logit_bias"] = Json::array({5}); }, "logit_bias"},
      {"logit_bias key not an id", [](Json& b) { b["logit_bias"] = {{"abc", 1}}; }, "logit_bias"},
      {"logit_bias negative id", [](Json& b) { b["logit_bias"] = {{"-3", 1}}; }, "logit_bias"},
      {"logit_bias fractional id", [](Json& b) { b["logit_bias"] = {{"1.5", 1}}; }, "logit_bias"},
      {"logit_bias id past int32", [](Json& b) { b["logit_bias"] = {{"4294967296", 1}}; }, "logit_bias"},
      {"logit_bias value too large", [](Json& b) { b["logit_bias"] = {{"5", 101}}; }, "logit_bias"},
      {"logit_bias value not a number", [](Json& b) { b["logit_bias"] = {{"5", "high"}}; }, "logit_bias"},
      {"logit_bias one id twice", [](Json& b) { b["logit_bias"] = {{"5", 1}, {"05", 2}}; }, "logit_bias"},
      {"logit_bias too many", [](Json& b) {
         for (int i = 0; i < 1025; ++i) b["logit_bias"][std::to_string(i)] = 1; }, "logit_bias"},
  };
  for (const Case& c : cases) {
    Json body = chat_body();
    c.edit(body);
    const ApiError e = chat_error(body);
    EXPECT_EQ(e.http_status, 400) << c.name;
    EXPECT_EQ(e.type, "invalid_request_error") << c.name;
    EXPECT_EQ(e.param, c.param) << c.name << ": " << e.message;
  }
  EXPECT_EQ(chat_error(Json::array()).http_status, 400);
}

TEST(ChatRequest, ToolCapsFromLimits) {
  Json body = chat_body();
  body["tools"] = Json::array();
  for (int i = 0; i < 3; ++i) body["tools"].push_back({{"type", "function"}, {"function", {{"name", "f" + std::to_string(i)}}}});
  RequestLimits limits;
  limits.max_tools = 2;
  EXPECT_EQ(chat_error(body, limits).param, "tools");
  limits.max_tools = 3;
  auto parsed = parse_chat_request(body, limits);
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(parsed));
  EXPECT_EQ(std::get<ChatRequest>(parsed).tool_choice.kind, ToolChoice::Kind::kAuto);
}

TEST(ChatRequest, ReasoningEffortBecomesATemplateVariable) {
  Json body = chat_body();
  body["reasoning_effort"] = "someday-new-value";
  body["chat_template_kwargs"] = {{"enable_thinking", false}};
  const ChatRequest r = chat_ok(body);
  EXPECT_EQ(r.template_kwargs["reasoning_effort"], "someday-new-value");
  EXPECT_EQ(r.template_kwargs["enable_thinking"], false);
}

TEST(CompletionRequest, PromptShapes) {
  auto parse = [](const char* text) { return parse_completion_request(Json::parse(text), {}); };
  {
    auto r = parse(R"({"model":"m","prompt":"hello"})");
    ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r));
    EXPECT_EQ(std::get<std::string>(std::get<CompletionRequest>(r).prompts.at(0)), "hello");
  }
  {
    auto r = parse(R"({"model":"m","prompt":[1,2,3]})");
    ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r));
    EXPECT_EQ(std::get<std::vector<TokenId>>(std::get<CompletionRequest>(r).prompts.at(0)).size(), 3u);
  }
  {
    auto r = parse(R"({"model":"m","prompt":["a","b"],"n":2})");
    ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r));
    EXPECT_EQ(std::get<CompletionRequest>(r).prompts.size(), 2u);
  }
  {
    auto r = parse(R"({"model":"m","prompt":[[1],[2,3]],"logprobs":2})");
    ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r));
    EXPECT_EQ(std::get<CompletionRequest>(r).options.top_logprobs, 2);
  }
  for (const char* bad : {R"({"model":"m","prompt":""})", R"({"model":"m","prompt":[]})",
                          R"({"model":"m","prompt":[-1]})", R"({"model":"m","prompt":{"x":1}})",
                          R"({"model":"m"})", R"({"model":"m","prompt":"x","echo":true})"}) {
    auto r = parse(bad);
    ASSERT_TRUE(std::holds_alternative<ApiError>(r)) << bad;
    EXPECT_EQ(std::get<ApiError>(r).http_status, 400) << bad;
  }
}

}  // namespace
}  // namespace sluice::server
