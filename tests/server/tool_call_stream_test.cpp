// A tool call emitted end to end through the real server, in each tool-call
// syntax (hermes, llama3_json, qwen3_coder). A random-weight model never
// decides to call a tool, so a scripted Backend stands in for one that does:
// it "samples" the token ids of the syntax's call and then EOS, whatever the
// prompt. Everything else is production code on its
// production path: HttpServer on a loopback socket, OpenAiService (parse,
// template, tokenize on the worker pool, submit), the Engine, GenerationJob
// (detokenizer, stop matcher, output parser, SSE). The oracle is OpenAI's
// wire format: incremental tool_calls (index, id, type, name, then argument
// fragments that concatenate to the JSON the model wrote), finish_reason
// "tool_calls", usage last with choices [], then [DONE]. qwen3_coder's values
// are typed by the request's tool schema ("days" is an integer there), so its
// case also shows the request's tools reach the parser.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../support/scripted_backend.h"
#include "loopback_server.h"

namespace sluice::server {
namespace {

using nlohmann::json;

struct SyntaxCase {
  std::string format;     // --tool-call-parser
  std::string call_text;  // what the scripted model writes
};

std::string case_name(const ::testing::TestParamInfo<SyntaxCase>& info) { return info.param.format; }

const SyntaxCase kCases[] = {
    {.format = "hermes",
     .call_text = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n"
                  "</tool_call>"},
    {.format = "llama3_json",
     .call_text = "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 3}}"},
    {.format = "qwen3_coder",
     .call_text = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
                  "</parameter>\n</function>\n</tool_call>"},
};

class ToolCallStreamTest : public ::testing::TestWithParam<SyntaxCase> {
 protected:
  void SetUp() override {
    loopback::TinyChatModel tiny = loopback::make_tiny_chat_model("qwen3", GetParam().format);
    model_ = tiny.context;
    std::vector<TokenId> script = model_->tokenizer.encode(GetParam().call_text, /*add_special_tokens=*/false);
    script.push_back(tiny.end_of_turn_token_id);
    model_->engine = std::make_unique<Engine>(
        std::make_unique<testing::ScriptedBackend>(std::move(script), model_->tokenizer.vocab_size()), nullptr, EngineConfig{});
    server_ = std::make_unique<loopback::LoopbackServer>(model_);
  }

  std::pair<int, std::string> post(const json& body) { return server_->post("/v1/chat/completions", body); }

  static json request(bool stream) {
    const json tool = json::parse(R"({"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}})");
    json body = {{"model", "m"},
                 {"messages", json::array({{{"role", "user"}, {"content", "Weather in Paris?"}}})},
                 {"tools", json::array({tool})},
                 {"tool_choice", "auto"},
                 {"max_tokens", 200}};
    if (stream) {
      body["stream"] = true;
      body["stream_options"] = {{"include_usage", true}};
    }
    return body;
  }

  static json expected_arguments() { return {{"city", "Paris"}, {"days", 3}}; }

  std::shared_ptr<ModelContext> model_;
  std::unique_ptr<loopback::LoopbackServer> server_;
};

TEST_P(ToolCallStreamTest, StreamingCarriesIncrementalToolCallDeltas) {
  const auto [status, body] = post(request(/*stream=*/true));
  ASSERT_EQ(status, 200) << body;
  const std::vector<std::string> events = loopback::sse_data_events(body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  const json usage_chunk = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage_chunk["choices"].empty());
  EXPECT_GT(usage_chunk["usage"]["prompt_tokens"].get<int>(), 0);

  std::string id, name, arguments, finish_reason, content;
  int num_first_fragments = 0;
  for (std::size_t i = 0; i + 2 < events.size(); ++i) {
    const json chunk = json::parse(events[i]);
    EXPECT_EQ(chunk["object"], "chat.completion.chunk");
    EXPECT_TRUE(chunk["created"].is_number_integer());
    for (const json& choice : chunk["choices"]) {
      if (!choice["finish_reason"].is_null()) finish_reason = choice["finish_reason"];
      const json& delta = choice["delta"];
      if (delta.contains("content") && delta["content"].is_string()) content += delta["content"].get<std::string>();
      if (!delta.contains("tool_calls")) continue;
      for (const json& call : delta["tool_calls"]) {
        EXPECT_EQ(call["index"], 0);
        if (call.contains("id")) {
          ++num_first_fragments;
          id = call["id"];
          EXPECT_EQ(call["type"], "function");
          name = call["function"]["name"];
        }
        if (call.contains("function") && call["function"].contains("arguments"))
          arguments += call["function"]["arguments"].get<std::string>();
      }
    }
  }
  EXPECT_EQ(num_first_fragments, 1) << "the id, type and name come once, in the first fragment";
  EXPECT_TRUE(id.starts_with("call_")) << id;
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(json::parse(arguments), expected_arguments()) << arguments;
  EXPECT_EQ(finish_reason, "tool_calls");
  EXPECT_EQ(content.find_first_of("<{"), std::string::npos) << "markup leaked into content: " << content;
}

TEST_P(ToolCallStreamTest, NonStreamingMessageHoldsTheToolCall) {
  const auto [status, body] = post(request(/*stream=*/false));
  ASSERT_EQ(status, 200) << body;
  const json response = json::parse(body);
  const json& choice = response["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  const json& calls = choice["message"]["tool_calls"];
  ASSERT_EQ(calls.size(), 1u) << body;
  EXPECT_EQ(calls[0]["type"], "function");
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(calls[0]["function"]["arguments"].get<std::string>()), expected_arguments());
  EXPECT_EQ(response["usage"]["completion_tokens"].get<int>(),
            static_cast<int>(model_->tokenizer.encode(GetParam().call_text, false).size()) + 1);
  EXPECT_TRUE(choice["message"]["content"].is_null() || choice["message"]["content"] == "") << body;
}

INSTANTIATE_TEST_SUITE_P(Syntaxes, ToolCallStreamTest, ::testing::ValuesIn(kCases), case_name);

}  // namespace
}  // namespace sluice::server
