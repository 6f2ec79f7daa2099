// A tool call emitted end to end through the real server. A random-weight
// model never decides to call a tool, so a scripted Backend stands in for one
// that does: it "samples" the token ids of a Hermes <tool_call> block and then
// EOS, whatever the prompt. Everything else is production code on its
// production path: HttpServer on a loopback socket, OpenAiService (parse,
// template, tokenize on the worker pool, submit), the Engine, GenerationJob
// (detokenizer, stop matcher, output parser, SSE). The oracle is OpenAI's
// wire format: incremental tool_calls (index, id, type, name, then argument
// fragments that concatenate to the JSON the model wrote), finish_reason
// "tool_calls", usage last with choices [], then [DONE].
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sluice/model/tokenizer_builder.h"
#include "sluice/server/http_server.h"
#include "sluice/server/openai_service.h"

namespace sluice::server {
namespace {

namespace net = boost::asio;
namespace http = boost::beast::http;
using nlohmann::json;

const std::string kToolCallText =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>";

// Samples script[k] as the k-th generated token of every sequence.
class ScriptedBackend final : public Backend {
 public:
  ScriptedBackend(std::vector<TokenId> script, std::int32_t vocab_size)
      : script_(std::move(script)),
        info_{.name = "scripted", .block_size_tokens = 16, .num_kv_blocks = 512, .vocab_size = vocab_size,
              .max_model_len_tokens = 4096} {}
  const BackendInfo& info() const override { return info_; }
  Result<StepOutput> execute(const Batch& batch) override {
    StepOutput out;
    for (const SequenceStep& seq : batch.sequences) {
      SequenceOutput so{.seq_id = seq.seq_id};
      if (seq.sample) {
        const auto k = static_cast<std::size_t>(std::max(0, seq.end_position() - seq.num_prompt_tokens));
        so.token = script_[std::min(k, script_.size() - 1)];
      }
      out.sequences.push_back(std::move(so));
    }
    return out;
  }

 private:
  std::vector<TokenId> script_;
  BackendInfo info_;
};

class ToolCallStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto built = build_byte_level_tokenizer(2048);
    ASSERT_TRUE(built) << built.error().message;
    auto tokenizer = Tokenizer::from_json(built->tokenizer_json, built->tokenizer_config_json);
    ASSERT_TRUE(tokenizer) << tokenizer.error().message;
    auto model = std::make_shared<ModelContext>(ModelContext{.tokenizer = std::move(tokenizer).value()});
    model->served_model_names = {"m"};
    model->model_type = "qwen3";
    auto chat_template = api::ChatTemplate::parse(model->tokenizer.chat_template());
    ASSERT_TRUE(chat_template) << chat_template.error().message;
    model->chat_template = std::move(chat_template).value();
    model->output_format = output_format_by_name("hermes").value();
    model->eos_token_ids = {built->eos_token_id, built->end_of_turn_token_id};
    model->max_model_len_tokens = 4096;
    std::vector<TokenId> script = model->tokenizer.encode(kToolCallText, /*add_special_tokens=*/false);
    script.push_back(built->end_of_turn_token_id);
    model->engine = std::make_unique<Engine>(
        std::make_unique<ScriptedBackend>(std::move(script), model->tokenizer.vocab_size()), nullptr, EngineConfig{});
    model->engine->start();
    service_.set_model(model);
    model_ = model;
    auto port = http_server_.listen("127.0.0.1", 0);
    ASSERT_TRUE(port) << port.error().message;
    port_ = *port;
    io_thread_ = std::thread([this] { io_.run(); });
  }

  void TearDown() override {
    if (model_) model_->engine->stop(Engine::StopMode::kAbort);
    work_.reset();
    io_.stop();
    if (io_thread_.joinable()) io_thread_.join();
  }

  // One POST over a real socket; returns status and the whole body.
  std::pair<int, std::string> post(const json& body) {
    net::io_context client_io;
    net::ip::tcp::socket socket(client_io);
    socket.connect({net::ip::make_address("127.0.0.1"), port_});
    http::request<http::string_body> request{http::verb::post, "/v1/chat/completions", 11};
    request.set(http::field::host, "127.0.0.1");
    request.set(http::field::content_type, "application/json");
    request.body() = body.dump();
    request.prepare_payload();
    http::write(socket, request);
    boost::beast::flat_buffer buffer;
    http::response<http::string_body> response;
    http::read(socket, buffer, response);
    return {static_cast<int>(response.result_int()), response.body()};
  }

  static json request(bool stream) {
    const json tool = json::parse(R"({"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})");
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

  static json expected_arguments() { return {{"city", "Paris"}, {"unit", "celsius"}}; }

  net::io_context io_;
  net::executor_work_guard<net::io_context::executor_type> work_ = net::make_work_guard(io_);
  ServerMetrics metrics_;
  OpenAiService service_{ServiceOptions{}, metrics_};
  HttpServer http_server_{io_, HttpLimits{}, [this](HttpRequest&& request, std::shared_ptr<HttpExchange> exchange) {
                            service_.handle(std::move(request), std::move(exchange));
                          }};
  std::shared_ptr<ModelContext> model_;
  std::uint16_t port_ = 0;
  std::thread io_thread_;
};

TEST_F(ToolCallStreamTest, StreamingCarriesIncrementalToolCallDeltas) {
  const auto [status, body] = post(request(/*stream=*/true));
  ASSERT_EQ(status, 200) << body;
  std::vector<std::string> events;
  for (std::size_t at = 0; at < body.size();) {
    const std::size_t end = body.find("\n\n", at);
    ASSERT_NE(end, std::string::npos) << "unterminated SSE event";
    const std::string event = body.substr(at, end - at);
    if (event.starts_with("data: ")) events.push_back(event.substr(6));
    at = end + 2;
  }
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
  EXPECT_EQ(content.find("<tool_call>"), std::string::npos) << "markup leaked into content: " << content;
}

TEST_F(ToolCallStreamTest, NonStreamingMessageHoldsTheToolCall) {
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
            static_cast<int>(model_->tokenizer.encode(kToolCallText, false).size()) + 1);
}

}  // namespace
}  // namespace sluice::server
