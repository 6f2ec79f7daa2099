// HttpServer: HTTP/1.1 on Boost.Beast/Asio. Keep-alive, idle and write
// timeouts, header and body size limits, chunked streaming for SSE, and
// disconnect detection while a response is still being produced (a client
// that goes away is noticed even when nothing is being written to it, so its
// request can be aborted; non-streaming requests are the commonly missed case).
//
// Threading: each connection runs on its own strand. A handler receives an
// HttpExchange and answers through it; every HttpExchange method must run on
// the exchange's strand (use post() to get there from another thread).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include "sluice/common/result.h"

namespace sluice::server {

struct HttpLimits {
  std::size_t max_body_bytes = 8u << 20;    // 413 beyond
  std::size_t max_header_bytes = 16u << 10;  // 431 beyond
  std::chrono::milliseconds idle_timeout{60'000};   // keep-alive idle and request read
  std::chrono::milliseconds write_timeout{60'000};  // one write to a stalled client
  // After an error answer on a request whose body was not read (413, a
  // malformed request), the rest of the body is read and dropped before the
  // connection closes, up to this many bytes and this long: closing with
  // unread data makes the kernel send a reset, and a client still sending
  // (node's fetch/undici) then reports "fetch failed" instead of the answer.
  std::size_t max_discard_bytes = 64u << 20;
  std::chrono::milliseconds discard_timeout{10'000};
};

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;
using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

class Session;

class HttpExchange {
 public:
  explicit HttpExchange(std::shared_ptr<Session> session);

  // Runs `fn` on this exchange's strand.
  void post(std::function<void()> fn);
  // The strand, for timers that belong to the exchange.
  boost::asio::any_io_executor executor() const;

  // A complete response; ends the exchange.
  void respond(int status, std::string body, const std::string& content_type, const HttpHeaders& headers = {});
  // 200 with the SSE headers; then write() events and end_stream().
  void start_stream();
  void write(std::string data);  // queued, sent as soon as the socket takes it
  void end_stream();

  // Called once, on the strand, if the client goes away before the exchange ends.
  void set_on_disconnect(std::function<void()> on_disconnect);
  bool disconnected() const;
  bool finished() const { return finished_; }

 private:
  std::shared_ptr<Session> session_;
  bool finished_ = false;
};

using HttpHandler = std::function<void(HttpRequest&& request, std::shared_ptr<HttpExchange> exchange)>;

class HttpServer {
 public:
  // `num_open_connections`, if given, counts the connections whose socket is
  // open (the /metrics gauge); it must outlive the server's I/O.
  HttpServer(boost::asio::io_context& io, HttpLimits limits, HttpHandler handler,
             std::atomic<std::int64_t>* num_open_connections = nullptr);
  ~HttpServer();
  // Binds and starts accepting. Returns the bound port (useful with port 0).
  Result<std::uint16_t> listen(const std::string& host, std::uint16_t port);
  void stop_accepting();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace sluice::server
