// The real HTTP server and OpenAI service on a loopback port, over a model
// context whose engine runs whatever Backend a test supplies (a scripted
// "model" that emits chosen tokens). Everything between the socket and the
// Backend is production code on its production path.
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <utility>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "sluice/common/check.h"
#include "sluice/model/tokenizer_builder.h"
#include "sluice/server/http_server.h"
#include "sluice/server/openai_service.h"

namespace sluice::server::loopback {

// make-model's byte-level tokenizer and chat template, with the end-of-text
// and end-of-turn ids as EOS; the engine is left for the test to attach.
struct TinyChatModel {
  std::shared_ptr<ModelContext> context;
  TokenId end_of_turn_token_id = 0;
};

inline TinyChatModel make_tiny_chat_model(const std::string& model_type, const std::string& output_format) {
  auto built = build_byte_level_tokenizer(2048);
  SLUICE_CHECK_MSG(built.ok(), built.error_message());
  auto tokenizer = Tokenizer::from_json(built->tokenizer_json, built->tokenizer_config_json);
  SLUICE_CHECK_MSG(tokenizer.ok(), tokenizer.error_message());
  auto model = std::make_shared<ModelContext>(ModelContext{.tokenizer = std::move(tokenizer).value()});
  model->served_model_names = {"m"};
  model->model_type = model_type;
  auto chat_template = api::ChatTemplate::parse(model->tokenizer.chat_template());
  SLUICE_CHECK_MSG(chat_template.ok(), chat_template.error_message());
  model->chat_template = std::move(chat_template).value();
  model->output_format = output_format_by_name(output_format).value();
  model->eos_token_ids = {built->eos_token_id, built->end_of_turn_token_id};
  return {std::move(model), built->end_of_turn_token_id};
}

class LoopbackServer {
 public:
  // Starts the model's engine and serves it on 127.0.0.1 (any free port).
  explicit LoopbackServer(std::shared_ptr<ModelContext> model) : model_(std::move(model)) {
    model_->engine->start();
    service_.set_model(model_);
    auto port = http_server_.listen("127.0.0.1", 0);
    SLUICE_CHECK_MSG(port.ok(), port.error_message());
    port_ = *port;
    io_thread_ = std::thread([this] { io_.run(); });
  }
  LoopbackServer(const LoopbackServer&) = delete;
  LoopbackServer& operator=(const LoopbackServer&) = delete;
  ~LoopbackServer() {
    model_->engine->stop(Engine::StopMode::kAbort);
    work_.reset();
    io_.stop();
    if (io_thread_.joinable()) io_thread_.join();
  }

  // One POST over a real socket; the status and the whole body.
  std::pair<int, std::string> post(const std::string& path, const nlohmann::json& body) {
    return exchange(boost::beast::http::verb::post, path, body.dump());
  }
  // One GET, as post().
  std::pair<int, std::string> get(const std::string& path) {
    return exchange(boost::beast::http::verb::get, path, "");
  }

  const ModelContext& model() const { return *model_; }

 private:
  std::pair<int, std::string> exchange(boost::beast::http::verb verb, const std::string& path, std::string body) {
    namespace http = boost::beast::http;
    boost::asio::io_context client_io;
    boost::asio::ip::tcp::socket socket(client_io);
    socket.connect({boost::asio::ip::make_address("127.0.0.1"), port_});
    http::request<http::string_body> request{verb, path, 11};
    request.set(http::field::host, "127.0.0.1");
    if (verb == http::verb::post) request.set(http::field::content_type, "application/json");
    request.body() = std::move(body);
    request.prepare_payload();
    http::write(socket, request);
    boost::beast::flat_buffer buffer;
    http::response<http::string_body> response;
    http::read(socket, buffer, response);
    return {static_cast<int>(response.result_int()), response.body()};
  }

  std::shared_ptr<ModelContext> model_;
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_ = boost::asio::make_work_guard(io_);
  ServerMetrics metrics_;
  // As `sluice serve --enable-auto-tool-choice`: the scripted models emit tool calls.
  OpenAiService service_{ServiceOptions{.enable_auto_tool_choice = true}, metrics_};
  HttpServer http_server_{io_, HttpLimits{}, [this](HttpRequest&& request, std::shared_ptr<HttpExchange> exchange) {
                            service_.handle(std::move(request), std::move(exchange));
                          }};
  std::uint16_t port_ = 0;
  std::thread io_thread_;
};

// The data payloads of an SSE body, in order ("[DONE]" included).
inline std::vector<std::string> sse_data_events(const std::string& body) {
  std::vector<std::string> events;
  for (std::size_t at = 0; at < body.size();) {
    const std::size_t end = body.find("\n\n", at);
    SLUICE_CHECK_MSG(end != std::string::npos, "unterminated SSE event");
    const std::string event = body.substr(at, end - at);
    if (event.starts_with("data: ")) events.push_back(event.substr(6));
    at = end + 2;
  }
  return events;
}

}  // namespace sluice::server::loopback
