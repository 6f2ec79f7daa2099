#include "sluice/loadgen/simple_http.h"

#include <chrono>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

namespace sluice::loadgen {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = boost::asio::ip::tcp;

Result<HttpReply> http_get(const ServerTarget& target, const std::string& path) {
  boost::asio::io_context io;
  tcp::resolver resolver(io);
  beast::tcp_stream stream(io);
  beast::error_code ec;
  const auto endpoints = resolver.resolve(target.host, target.port, ec);
  if (ec) return Error{"resolve " + target.host + ": " + ec.message()};
  stream.expires_after(std::chrono::seconds(30));
  stream.connect(endpoints, ec);
  if (ec) return Error{"connect " + target.host + ":" + target.port + ": " + ec.message()};
  http::request<http::empty_body> request{http::verb::get, target.path(path), 11};
  request.set(http::field::host, target.host + ":" + target.port);
  request.set(http::field::connection, "close");
  if (!target.api_key.empty()) request.set(http::field::authorization, "Bearer " + target.api_key);
  http::write(stream, request, ec);
  if (ec) return Error{"GET " + path + ": " + ec.message()};
  beast::flat_buffer buffer;
  http::response<http::string_body> response;
  http::read(stream, buffer, response, ec);
  if (ec) return Error{"GET " + path + ": " + ec.message()};
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  return HttpReply{.status = static_cast<int>(response.result_int()), .body = std::move(response.body())};
}

Status wait_for_health(const ServerTarget& target, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::string last = "no answer";
  while (true) {
    auto reply = http_get(target, "/health");
    if (reply.ok() && reply->status == 200) return Ok{};
    last = reply.ok() ? "HTTP " + std::to_string(reply->status) : reply.error_message();
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return Error{"the server at " + target.host + ":" + target.port + " did not become healthy within " +
               std::to_string(timeout_s) + " s (" + last + ")"};
}

Result<std::string> first_served_model(const ServerTarget& target) {
  SLUICE_TRY_ASSIGN(reply, http_get(target, "/v1/models"));
  if (reply.status != 200) return Error{"GET /v1/models: HTTP " + std::to_string(reply.status) + ": " + reply.body};
  const auto json = nlohmann::json::parse(reply.body, nullptr, false);
  if (json.is_discarded() || !json.contains("data") || !json["data"].is_array() || json["data"].empty() ||
      !json["data"][0].contains("id") || !json["data"][0]["id"].is_string())
    return Error{"GET /v1/models: no model listed; pass --model"};
  return json["data"][0]["id"].get<std::string>();
}

}  // namespace sluice::loadgen
