// OpenAiService: the routes. Authorises (every route but /health), parses and
// validates, renders the chat template, tokenizes, checks the context, submits
// to the engine and hands the streams to a GenerationJob. Every refusal is
// decided here, before a byte of the response is written.
//
// Threads: routing, auth and admission run on the connection's strand (an I/O
// thread); the request body's work (JSON, template, tokenizer) on a small
// worker pool; the response goes back to the strand (HttpExchange::post).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <boost/asio/thread_pool.hpp>

#include "sluice/server/http_server.h"
#include "sluice/server/metrics.h"
#include "sluice/server/model_context.h"
#include "sluice/server/openai_request.h"

namespace sluice::server {

struct JobSpec;

struct ServiceOptions {
  RequestLimits limits;
  std::string api_key;  // empty = no authentication
  std::chrono::milliseconds keepalive_interval{10'000};  // SSE comment lines while nothing else is sent
  int retry_after_s = 1;  // Retry-After on 503
  // Parsing, chat templates and tokenization run here, not on the HTTP
  // threads: a 300k-token prompt takes long enough to stall every connection
  // that shares its I/O thread.
  int num_tokenizer_threads = 2;
  // --enable-auto-tool-choice: without it tool_choice "auto" (the default when
  // tools are sent) is refused, as vLLM refuses it.
  bool enable_auto_tool_choice = false;
  // usage.prompt_tokens_details.cached_tokens (--enable-prompt-tokens-details).
  bool enable_prompt_tokens_details = true;
  // --seed: the seed of requests that send none; unset: a random one each.
  std::optional<std::uint64_t> default_seed;
};

class OpenAiService {
 public:
  OpenAiService(ServiceOptions options, ServerMetrics& metrics);
  ~OpenAiService();  // joins the workers

  // The model is loaded and warmed up: /health turns 200, requests are served.
  void set_model(std::shared_ptr<const ModelContext> model);
  // SIGTERM: new generation requests get 503, /health turns 503.
  void set_draining();
  bool draining() const { return draining_; }
  // Generation requests accepted and not finished: being prepared on a
  // worker, or streaming. A drain waits for these.
  int num_active_jobs() const { return num_active_jobs_; }

  void handle(HttpRequest&& request, std::shared_ptr<HttpExchange> exchange);

  struct Submission;  // a request's prompts, tokenized (openai_service.cpp)

 private:
  using Clock = std::chrono::steady_clock;
  std::shared_ptr<const ModelContext> model() const;
  // On a worker: parse, validate, render, tokenize; then submit_on_strand().
  // `in_flight` counts the request in num_active_jobs() until its job exists
  // (the job counts itself from then on).
  void handle_chat(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange,
                   const std::shared_ptr<const ModelContext>& model, Clock::time_point arrival,
                   std::shared_ptr<const void> in_flight);
  void handle_completion(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange,
                         const std::shared_ptr<const ModelContext>& model, Clock::time_point arrival,
                         std::shared_ptr<const void> in_flight);
  void submit_on_strand(const GenerationOptions& options, Submission submission, JobSpec spec,
                        const std::shared_ptr<HttpExchange>& exchange, const std::shared_ptr<const ModelContext>& model,
                        std::shared_ptr<const void> in_flight);
  void handle_tokenize(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange,
                       const ModelContext& model);
  void handle_detokenize(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange,
                         const ModelContext& model);
  // --seed: a request without a seed takes the server's.
  void apply_default_seed(GenerationOptions& options) const;
  // Safe from any thread: the response is written on the exchange's strand.
  void reply_error(const std::shared_ptr<HttpExchange>& exchange, const ApiError& error);
  void reply(const std::shared_ptr<HttpExchange>& exchange, std::string body);

  ServiceOptions options_;
  ServerMetrics& metrics_;
  mutable std::mutex model_mutex_;
  std::shared_ptr<const ModelContext> model_;
  std::atomic<bool> draining_{false};
  std::atomic<int> num_active_jobs_{0};
  boost::asio::thread_pool workers_;
};

}  // namespace sluice::server
