// GenerationJob: one accepted chat or completions request after validation,
// from the first submitted engine request to the last byte of the response.
// For each choice it turns engine tokens into text (incremental detokenizer),
// holds back stop strings (StopMatcher), splits reasoning and tool calls
// (OutputParser), and writes SSE chunks or one JSON body. A client that goes
// away aborts every choice still running.
//
// Runs on its exchange's strand: engine callbacks only post a pump there.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/steady_timer.hpp>

#include "sluice/engine/engine.h"
#include "sluice/server/http_server.h"
#include "sluice/server/metrics.h"
#include "sluice/server/model_context.h"
#include "sluice/server/openai_request.h"
#include "sluice/server/openai_response.h"
#include "sluice/server/output_parser.h"
#include "sluice/server/stop_matcher.h"

namespace sluice::server {

enum class Endpoint { kChat, kCompletion };

struct JobSpec {
  Endpoint endpoint = Endpoint::kChat;
  ResponseHeader header;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
  std::int32_t top_logprobs = 0;
  std::vector<std::string> stop;
  bool skip_special_tokens = true;
  bool prompt_tokens_details = true;  // usage carries prompt_tokens_details.cached_tokens
  OutputParser::Options parser_options;
  ToolChoice::Kind tool_choice = ToolChoice::Kind::kNone;
  std::vector<std::int32_t> num_prompt_tokens;  // per prompt
  std::chrono::milliseconds keepalive_interval{10'000};
  // Time to first token, split so the server's own share is visible:
  // arrival (body read) ... tokenization ... submitted to the engine ... the
  // engine pushes the first output ... its chunk is written.
  std::chrono::steady_clock::time_point arrival;
  std::chrono::steady_clock::time_point worker_started;  // a tokenizer thread picked it up
  std::chrono::steady_clock::duration tokenize_time{};
  std::chrono::steady_clock::time_point tokenized;  // the worker is done with it
  std::chrono::steady_clock::time_point submitted;  // on the strand, submitting to the engine
};

class GenerationJob : public std::enable_shared_from_this<GenerationJob> {
 public:
  GenerationJob(JobSpec spec, std::shared_ptr<const ModelContext> model, std::shared_ptr<HttpExchange> exchange,
                ServerMetrics& metrics, std::atomic<int>& num_active_jobs);
  ~GenerationJob();

  // Before start(): one per choice, in choice order.
  void add_choice(std::int32_t prompt_index, std::string engine_request_id, std::shared_ptr<RequestStream> stream);
  // Sends the stream headers (streaming), hooks the streams and the disconnect
  // handler. Call on the exchange's strand.
  void start();

 private:
  struct Choice;
  void pump();
  void process(Choice& choice, RequestOutput output);
  void finish_choice(Choice& choice, const RequestOutput& output);
  void emit_stream_delta(Choice& choice, const ParsedDelta& delta, nlohmann::json logprobs);
  void complete();
  void on_disconnect();
  void arm_keepalive();
  void observe_first_token();
  nlohmann::json logprob_entry(const GeneratedToken& token) const;
  Usage usage() const;

  JobSpec spec_;
  std::shared_ptr<const ModelContext> model_;
  std::shared_ptr<HttpExchange> exchange_;
  ServerMetrics& metrics_;
  std::atomic<int>& num_active_jobs_;
  std::vector<std::unique_ptr<Choice>> choices_;
  std::optional<boost::asio::steady_timer> keepalive_timer_;
  // Engine thread: when the first output of any choice was pushed (ns on the
  // steady clock; 0 = not yet).
  std::shared_ptr<std::atomic<std::int64_t>> first_output_pushed_ns_ =
      std::make_shared<std::atomic<std::int64_t>>(0);
  bool first_token_observed_ = false;
  bool wrote_since_keepalive_ = false;
  bool done_ = false;
  bool client_gone_ = false;
};

}  // namespace sluice::server
