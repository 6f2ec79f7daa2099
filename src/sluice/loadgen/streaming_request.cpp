#include "sluice/loadgen/streaming_request.h"

#include <limits>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "sluice/loadgen/sse_parser.h"
#include "sluice/loadgen/stream_chunk.h"

namespace sluice::loadgen {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using beast::error_code;

// The error message of an OpenAI error body, else the body's start.
std::string error_text(int status, const std::string& body) {
  const auto json = nlohmann::json::parse(body, nullptr, false);
  if (!json.is_discarded() && json.is_object() && json.contains("error")) {
    const auto& error = json["error"];
    if (error.is_object() && error.contains("message") && error["message"].is_string())
      return "HTTP " + std::to_string(status) + ": " + error["message"].get<std::string>();
  }
  return "HTTP " + std::to_string(status) + ": " + body.substr(0, 200);
}

class BeastStreamingRequest final : public StreamingRequest,
                                    public std::enable_shared_from_this<BeastStreamingRequest> {
 public:
  BeastStreamingRequest(asio::io_context& io, const ServerTarget& target, std::string body, RequestRecord record,
                        const RunClock& clock, OnDone on_done)
      : stream_(io), record_(std::move(record)), clock_(clock), on_done_(std::move(on_done)) {
    request_.method(http::verb::post);
    request_.target(target.request_path());
    request_.version(11);
    request_.set(http::field::host, target.host + ":" + target.port);
    request_.set(http::field::content_type, "application/json");
    request_.set(http::field::accept, "text/event-stream");
    request_.set(http::field::connection, "close");
    if (!target.api_key.empty()) request_.set(http::field::authorization, "Bearer " + target.api_key);
    request_.body() = std::move(body);
    request_.prepare_payload();
    parser_.body_limit(std::numeric_limits<std::uint64_t>::max());
  }

  void run(const tcp::resolver::results_type& endpoints) {
    record_.send_ms = clock_.now_ms();
    stream_.async_connect(endpoints, [self = shared_from_this()](error_code ec, const tcp::endpoint&) {
      if (ec) return self->fail("connect: " + ec.message());
      http::async_write(self->stream_, self->request_, [self](error_code ec2, std::size_t) {
        if (ec2) return self->fail("send: " + ec2.message());
        http::async_read_header(self->stream_, self->buffer_, self->parser_,
                                [self](error_code ec3, std::size_t) { self->on_header(ec3); });
      });
    });
  }

  void cancel() override {
    if (finished_) return;
    cancelled_ = true;
    error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

 private:
  void on_header(error_code ec) {
    if (ec) return fail("read header: " + ec.message());
    record_.http_status = static_cast<int>(parser_.get().result_int());
    if (parser_.get().result() != http::status::ok) {
      // An error before the stream: read the whole (small) body for its message.
      http::async_read(stream_, buffer_, parser_, [self = shared_from_this()](error_code, std::size_t) {
        self->fail(error_text(self->record_.http_status, self->parser_.get().body()));
      });
      return;
    }
    read_more();
  }

  void read_more() {
    if (parser_.is_done()) return fail("the response ended without [DONE]");
    http::async_read_some(stream_, buffer_, parser_,
                          [self = shared_from_this()](error_code ec, std::size_t) { self->on_body(ec); });
  }

  void on_body(error_code ec) {
    const double now_ms = clock_.now_ms();
    // Bytes decoded since the last read (chunked framing already removed).
    std::string& body = parser_.get().body();
    for (const std::string& data : sse_.feed(body)) {
      if (finished_) break;
      const StreamChunk chunk = interpret_stream_data(data);
      if (chunk.error) return fail("stream error: " + *chunk.error);
      if (chunk.num_text_pieces > 0) {
        if (!record_.first_token_ms) record_.first_token_ms = now_ms;
        record_.token_ms.push_back(now_ms);
      }
      if (chunk.usage) {
        record_.num_prompt_tokens = chunk.usage->num_prompt_tokens;
        record_.num_usage_output_tokens = chunk.usage->num_output_tokens;
        record_.num_cached_tokens = chunk.usage->num_cached_tokens;
      }
      if (chunk.done) return finish(RequestStatus::kCompleted, "", now_ms);
    }
    body.clear();
    if (ec) return fail(ec == http::error::end_of_stream ? std::string("connection closed before [DONE]")
                                                         : "read: " + ec.message());
    read_more();
  }

  void fail(const std::string& error) {
    finish(cancelled_ ? RequestStatus::kCancelled : RequestStatus::kFailed, cancelled_ ? "" : error, clock_.now_ms());
  }

  void finish(RequestStatus status, const std::string& error, double now_ms) {
    if (finished_) return;
    finished_ = true;
    record_.status = status;
    record_.error = error;
    record_.end_ms = now_ms;
    error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
    // on_done may drop the last reference to this object: call it last.
    OnDone done = std::move(on_done_);
    done(std::move(record_));
  }

  beast::tcp_stream stream_;
  http::request<http::string_body> request_;
  beast::flat_buffer buffer_;
  http::response_parser<http::string_body> parser_;
  SseParser sse_;
  RequestRecord record_;
  const RunClock& clock_;
  OnDone on_done_;
  bool finished_ = false;
  bool cancelled_ = false;
};

}  // namespace

std::shared_ptr<StreamingRequest> StreamingRequest::start(asio::io_context& io,
                                                          const tcp::resolver::results_type& endpoints,
                                                          const ServerTarget& target, std::string body,
                                                          RequestRecord record, const RunClock& clock, OnDone on_done) {
  auto request = std::make_shared<BeastStreamingRequest>(io, target, std::move(body), std::move(record), clock,
                                                         std::move(on_done));
  request->run(endpoints);
  return request;
}

}  // namespace sluice::loadgen
