#include "sluice/server/http_server.h"

#include <deque>
#include <optional>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace sluice::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

// One connection. Reads a request, hands it to the handler, writes what the
// exchange queues, then reads the next one (keep-alive). While a response is
// pending, a one-byte read on the socket notices a client that hangs up.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, const HttpLimits& limits, const HttpHandler& handler,
          std::atomic<std::int64_t>* num_open_connections)
      : stream_(std::move(socket)),
        idle_timer_(stream_.get_executor()),
        limits_(limits),
        handler_(handler),
        num_open_connections_(num_open_connections) {
    if (num_open_connections_) ++*num_open_connections_;
  }

  void start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_request(); });
  }

  net::any_io_executor executor() { return stream_.get_executor(); }

  void respond(int status, std::string body, const std::string& content_type, const HttpHeaders& headers) {
    std::string head = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n", status,
                                   std::string(http::obsolete_reason(static_cast<http::status>(status))), content_type,
                                   body.size());
    for (const auto& [name, value] : headers) head += fmt::format("{}: {}\r\n", name, value);
    head += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    head += body;
    response_complete_ = true;
    enqueue(std::move(head));
  }

  void start_stream() {
    std::string head =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        "X-Accel-Buffering: no\r\nTransfer-Encoding: chunked\r\n";
    head += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    enqueue(std::move(head));
  }

  void write_chunk(std::string data) {
    if (data.empty()) return;  // an empty chunk would end the body
    enqueue(fmt::format("{:x}\r\n", data.size()) + data + "\r\n");
  }

  void end_stream() {
    response_complete_ = true;
    enqueue("0\r\n\r\n");
  }

  void set_on_disconnect(std::function<void()> fn) {
    on_disconnect_ = std::move(fn);
    if (closed_ && on_disconnect_) std::exchange(on_disconnect_, nullptr)();
  }
  bool closed() const { return closed_; }

 private:
  void read_request() {
    if (closed_) return;
    parser_.emplace();
    parser_->body_limit(limits_.max_body_bytes);
    parser_->header_limit(static_cast<std::uint32_t>(limits_.max_header_bytes));
    stream_.expires_after(limits_.idle_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == net::error::operation_aborted ||
        ec == net::error::connection_reset || ec == net::error::eof) {
      close();
      return;
    }
    keep_alive_ = false;  // an error answer closes the connection
    // The client may still be sending the body, unless it has ended its side
    // (a partial message): then there is nothing to drain, and the end of
    // stream, already read, would not be reported to a second read.
    discard_before_close_ = ec != http::error::partial_message;
    in_flight_ = true;
    response_complete_ = false;
    if (ec == http::error::body_limit) {
      respond_error(413, fmt::format("request body exceeds {} bytes", limits_.max_body_bytes), "request_too_large");
      return;
    }
    if (ec == http::error::header_limit) {
      respond_error(431, fmt::format("request headers exceed {} bytes", limits_.max_header_bytes),
                    "request_header_fields_too_large");
      return;
    }
    if (ec) {
      respond_error(400, "malformed HTTP request: " + ec.message(), "bad_request");
      return;
    }
    HttpRequest request = parser_->release();
    keep_alive_ = request.keep_alive();
    discard_before_close_ = false;
    stream_.expires_never();  // timeouts now apply per write
    watch_for_disconnect();
    handler_(std::move(request), std::make_shared<HttpExchange>(shared_from_this()));
  }

  void respond_error(int status, const std::string& message, const std::string& code) {
    const std::string body = fmt::format(
        R"({{"error":{{"message":"{}","type":"invalid_request_error","param":null,"code":"{}"}}}})", message, code);
    respond(status, body, "application/json", {});
  }

  // A read of one byte while the response is being produced: EOF or an error
  // means the client is gone. A byte that arrives is the start of a pipelined
  // request; it is kept for the next read.
  void watch_for_disconnect() {
    if (watching_ || closed_) return;
    watching_ = true;
    stream_.socket().async_read_some(
        net::buffer(probe_), net::bind_executor(stream_.get_executor(), [self = shared_from_this()](
                                                                            beast::error_code ec, std::size_t n) {
          self->watching_ = false;
          if (ec || n == 0) {
            self->close();
            return;
          }
          auto dst = self->buffer_.prepare(n);
          net::buffer_copy(dst, net::buffer(self->probe_, n));
          self->buffer_.commit(n);
          if (!self->in_flight_) {
            self->idle_timer_.cancel();
            self->read_request();
          }
        }));
  }

  void enqueue(std::string data) {
    if (closed_) return;
    queue_.push_back(std::move(data));
    if (!writing_) write_next();
  }

  void write_next() {
    writing_ = true;
    out_.clear();
    while (!queue_.empty()) {  // coalesce: one write per burst of events
      out_ += queue_.front();
      queue_.pop_front();
    }
    stream_.expires_after(limits_.write_timeout);
    net::async_write(stream_, net::buffer(out_), [self = shared_from_this()](beast::error_code ec, std::size_t) {
      self->on_write(ec);
    });
  }

  void on_write(beast::error_code ec) {
    writing_ = false;
    if (ec) {
      close();
      return;
    }
    if (!queue_.empty()) {
      write_next();
      return;
    }
    stream_.expires_never();
    if (!response_complete_) return;
    in_flight_ = false;
    response_complete_ = false;
    on_disconnect_ = nullptr;
    if (!keep_alive_) {
      if (discard_before_close_) discard_then_close();
      else close();
      return;
    }
    if (watching_) {
      // The pending probe read doubles as the wait for the next request; an
      // idle connection is closed after the idle timeout.
      idle_timer_.expires_after(limits_.idle_timeout);
      idle_timer_.async_wait([self = shared_from_this()](beast::error_code timer_ec) {
        if (!timer_ec && !self->in_flight_) self->close();
      });
      return;
    }
    read_request();
  }

  // Reads and drops what the client still sends (the rest of a body the
  // answer refused), then closes: at the client's end of stream, after the
  // bytes its Content-Length announced, or at the bounds in HttpLimits.
  void discard_then_close() {
    if (closed_) return;
    if (!discard_deadline_) {
      discard_deadline_ = std::chrono::steady_clock::now() + limits_.discard_timeout;
      // The part of the body already read, and what is still to come if its length is known.
      num_discarded_bytes_ = buffer_.size();
      keep_discard_tail();
      buffer_.consume(buffer_.size());
      if (parser_ && parser_->content_length_remaining())
        num_expected_discard_bytes_ = *parser_->content_length_remaining();
      else if (parser_ && parser_->content_length())
        num_expected_discard_bytes_ = *parser_->content_length();
      discard_chunked_ = parser_ && parser_->chunked();
    }
    // A chunked body ends with the last chunk and no trailers, "0\r\n\r\n".
    const bool all_read = (num_expected_discard_bytes_ && num_discarded_bytes_ >= *num_expected_discard_bytes_) ||
                          (discard_chunked_ && discard_tail_ == "0\r\n\r\n");
    if (all_read || num_discarded_bytes_ >= limits_.max_discard_bytes ||
        std::chrono::steady_clock::now() >= *discard_deadline_) {
      close();
      return;
    }
    constexpr std::size_t kDiscardChunkBytes = 64 * 1024;
    stream_.expires_at(*discard_deadline_);
    stream_.async_read_some(buffer_.prepare(kDiscardChunkBytes),
                            [self = shared_from_this()](beast::error_code ec, std::size_t n) {
                              if (ec) {
                                self->close();
                                return;
                              }
                              self->num_discarded_bytes_ += n;
                              self->buffer_.commit(n);
                              self->keep_discard_tail();
                              self->buffer_.consume(self->buffer_.size());
                              self->discard_then_close();
                            });
  }

  // The last bytes drained, to see a chunked body's end.
  void keep_discard_tail() {
    constexpr std::size_t kTailBytes = 5;
    const auto data = buffer_.cdata();
    discard_tail_.append(static_cast<const char*>(data.data()), data.size());
    if (discard_tail_.size() > kTailBytes) discard_tail_.erase(0, discard_tail_.size() - kTailBytes);
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    if (num_open_connections_) --*num_open_connections_;
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
    idle_timer_.cancel();
    queue_.clear();
    if (in_flight_ && on_disconnect_) std::exchange(on_disconnect_, nullptr)();
  }

  beast::tcp_stream stream_;
  net::steady_timer idle_timer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  const HttpLimits& limits_;
  const HttpHandler& handler_;
  std::deque<std::string> queue_;
  std::string out_;  // the bytes of the write in progress
  char probe_[1] = {};
  // Counts this connection from its start until close(); may be null. A
  // session destroyed without close() is one the I/O context dropped at
  // shutdown, after the counter's owner may be gone: it is not counted down.
  std::atomic<std::int64_t>* num_open_connections_;
  bool discard_before_close_ = false;  // the request's body may not have been read (an error answer)
  std::optional<std::chrono::steady_clock::time_point> discard_deadline_;
  std::size_t num_discarded_bytes_ = 0;
  std::optional<std::uint64_t> num_expected_discard_bytes_;  // the body's unread part, when its length is known
  bool discard_chunked_ = false;
  std::string discard_tail_;
  std::function<void()> on_disconnect_;
  bool keep_alive_ = true;
  bool in_flight_ = false;          // a request was read and its response has not been fully written
  bool response_complete_ = false;  // the last byte of the response is queued
  bool writing_ = false;
  bool watching_ = false;
  bool closed_ = false;
};

HttpExchange::HttpExchange(std::shared_ptr<Session> session) : session_(std::move(session)) {}

void HttpExchange::post(std::function<void()> fn) { net::post(session_->executor(), std::move(fn)); }

boost::asio::any_io_executor HttpExchange::executor() const { return session_->executor(); }

void HttpExchange::respond(int status, std::string body, const std::string& content_type, const HttpHeaders& headers) {
  if (finished_) return;
  finished_ = true;
  session_->respond(status, std::move(body), content_type, headers);
}

void HttpExchange::start_stream() {
  if (!finished_) session_->start_stream();
}

void HttpExchange::write(std::string data) {
  if (!finished_) session_->write_chunk(std::move(data));
}

void HttpExchange::end_stream() {
  if (finished_) return;
  finished_ = true;
  session_->end_stream();
}

void HttpExchange::set_on_disconnect(std::function<void()> on_disconnect) {
  session_->set_on_disconnect(std::move(on_disconnect));
}

bool HttpExchange::disconnected() const { return session_->closed(); }

struct HttpServer::Impl : std::enable_shared_from_this<HttpServer::Impl> {
  Impl(net::io_context& io_context, HttpLimits http_limits, HttpHandler http_handler,
       std::atomic<std::int64_t>* open_connections)
      : io(io_context),
        acceptor(io_context),
        limits(http_limits),
        handler(std::move(http_handler)),
        num_open_connections(open_connections) {}

  void accept() {
    acceptor.async_accept(net::make_strand(io), [self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
      if (ec) {
        if (ec == net::error::operation_aborted || !self->acceptor.is_open()) return;
        spdlog::warn("accept failed: {}", ec.message());
      } else {
        beast::error_code ignored;
        socket.set_option(tcp::no_delay(true), ignored);
        std::make_shared<Session>(std::move(socket), self->limits, self->handler, self->num_open_connections)
            ->start();
      }
      self->accept();
    });
  }

  net::io_context& io;
  tcp::acceptor acceptor;
  HttpLimits limits;
  HttpHandler handler;
  std::atomic<std::int64_t>* num_open_connections;  // may be null
};

HttpServer::HttpServer(net::io_context& io, HttpLimits limits, HttpHandler handler,
                       std::atomic<std::int64_t>* num_open_connections)
    : impl_(std::make_shared<Impl>(io, limits, std::move(handler), num_open_connections)) {}

HttpServer::~HttpServer() { stop_accepting(); }

Result<std::uint16_t> HttpServer::listen(const std::string& host, std::uint16_t port) {
  beast::error_code ec;
  const auto address = net::ip::make_address(host, ec);
  if (ec) return Error{fmt::format("--host '{}' is not an IP address: {}", host, ec.message())};
  const tcp::endpoint endpoint(address, port);
  auto& acceptor = impl_->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return Error{fmt::format("cannot listen on {}:{}: {}", host, port, ec.message())};
  impl_->accept();
  return acceptor.local_endpoint().port();
}

void HttpServer::stop_accepting() {
  beast::error_code ignored;
  // The acceptor belongs to the io_context's threads; close it there.
  net::post(impl_->io, [impl = impl_] {
    beast::error_code ec;
    impl->acceptor.close(ec);
  });
  (void)ignored;
}

}  // namespace sluice::server
