// OpenAiService: the routes. Authorises (every route but /health), parses and
// validates, renders the chat template, tokenizes, checks the context, submits
// to the engine and hands the streams to a GenerationJob. Every refusal is
// decided here, before a byte of the response is written.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "sluice/server/http_server.h"
#include "sluice/server/metrics.h"
#include "sluice/server/model_context.h"
#include "sluice/server/openai_request.h"

namespace sluice::server {

struct ServiceOptions {
  RequestLimits limits;
  std::string api_key;  // empty = no authentication
  std::chrono::milliseconds keepalive_interval{10'000};  // SSE comment lines while nothing else is sent
  int retry_after_s = 1;  // Retry-After on 503
};

class OpenAiService {
 public:
  OpenAiService(ServiceOptions options, ServerMetrics& metrics);

  // The model is loaded and warmed up: /health turns 200, requests are served.
  void set_model(std::shared_ptr<const ModelContext> model);
  // SIGTERM: new generation requests get 503, /health turns 503.
  void set_draining();
  bool draining() const { return draining_; }
  int num_active_jobs() const { return num_active_jobs_; }

  void handle(HttpRequest&& request, std::shared_ptr<HttpExchange> exchange);

 private:
  std::shared_ptr<const ModelContext> model() const;
  void handle_chat(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange,
                   const std::shared_ptr<const ModelContext>& model);
  void handle_completion(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange,
                         const std::shared_ptr<const ModelContext>& model);
  void handle_tokenize(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange,
                       const ModelContext& model);
  void handle_detokenize(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange,
                         const ModelContext& model);
  void reply_error(const std::shared_ptr<HttpExchange>& exchange, const ApiError& error);

  ServiceOptions options_;
  ServerMetrics& metrics_;
  mutable std::mutex model_mutex_;
  std::shared_ptr<const ModelContext> model_;
  std::atomic<bool> draining_{false};
  std::atomic<int> num_active_jobs_{0};
};

}  // namespace sluice::server
