#include "sluice/server/generation_job.h"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace sluice::server {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct GenerationJob::Choice {
  Choice(const JobSpec& spec, const ModelContext& model, std::int32_t index_, std::int32_t prompt_index_,
         std::string engine_id_, std::shared_ptr<RequestStream> stream_)
      : index(index_),
        prompt_index(prompt_index_),
        engine_id(std::move(engine_id_)),
        stream(std::move(stream_)),
        detokenizer(model.tokenizer, spec.skip_special_tokens),
        stop(spec.stop),
        parser(model.output_format, spec.parser_options) {}

  std::int32_t index;
  std::int32_t prompt_index;
  std::string engine_id;
  std::shared_ptr<RequestStream> stream;
  IncrementalDetokenizer detokenizer;
  StopMatcher stop;
  OutputParser parser;
  // Non-streaming: the whole answer so far.
  std::string content, reasoning;
  std::vector<ToolCall> tool_calls;
  json logprobs = json::array();  // chat: content entries; completions: see completion_logprobs
  json completion_logprobs = {{"tokens", json::array()}, {"token_logprobs", json::array()},
                              {"top_logprobs", json::array()}, {"text_offset", json::array()}};
  std::int64_t text_offset = 0;
  std::int32_t num_generated_tokens = 0;
  std::int32_t num_reasoning_tokens = 0;
  std::int32_t num_cached_tokens = 0;
  bool role_sent = false;
  bool finished = false;
  std::string finish_reason;
  std::optional<ApiError> error;  // failed or aborted by the server
  std::optional<Clock::time_point> last_token_time;
};

GenerationJob::GenerationJob(JobSpec spec, std::shared_ptr<const ModelContext> model,
                             std::shared_ptr<HttpExchange> exchange, ServerMetrics& metrics,
                             std::atomic<int>& num_active_jobs)
    : spec_(std::move(spec)),
      model_(std::move(model)),
      exchange_(std::move(exchange)),
      metrics_(metrics),
      num_active_jobs_(num_active_jobs) {
  ++num_active_jobs_;
}

GenerationJob::~GenerationJob() { --num_active_jobs_; }

void GenerationJob::add_choice(std::int32_t prompt_index, std::string engine_request_id,
                               std::shared_ptr<RequestStream> stream) {
  const auto index = static_cast<std::int32_t>(choices_.size());
  choices_.push_back(
      std::make_unique<Choice>(spec_, *model_, index, prompt_index, std::move(engine_request_id), std::move(stream)));
}

void GenerationJob::start() {
  std::weak_ptr<GenerationJob> weak = weak_from_this();
  // The exchange's disconnect handler now holds the job until the response
  // ends or the client goes away; engine callbacks only hold it weakly.
  exchange_->set_on_disconnect([self = shared_from_this()] { self->on_disconnect(); });
  if (spec_.stream) {
    exchange_->start_stream();
    arm_keepalive();
  }
  for (auto& choice : choices_) {
    choice->stream->set_on_ready([weak, exchange = exchange_, pushed_ns = first_output_pushed_ns_] {
      std::int64_t expected = 0;
      pushed_ns->compare_exchange_strong(expected, Clock::now().time_since_epoch().count());
      exchange->post([weak] {
        if (auto self = weak.lock()) self->pump();
      });
    });
  }
}

void GenerationJob::arm_keepalive() {
  if (spec_.keepalive_interval.count() <= 0) return;
  if (!keepalive_timer_) keepalive_timer_.emplace(exchange_->executor());
  keepalive_timer_->expires_after(spec_.keepalive_interval);
  keepalive_timer_->async_wait([weak = weak_from_this()](boost::system::error_code ec) {
    auto self = weak.lock();
    if (ec || !self || self->done_) return;
    // A comment line resets gateway idle timers without counting as output.
    if (!self->wrote_since_keepalive_) self->exchange_->write(kSseKeepAlive);
    self->wrote_since_keepalive_ = false;
    self->arm_keepalive();
  });
}

void GenerationJob::pump() {
  if (done_) return;
  for (auto& choice : choices_) {
    while (!choice->finished) {
      auto output = choice->stream->poll();
      if (!output) break;
      process(*choice, std::move(*output));
    }
  }
  if (std::all_of(choices_.begin(), choices_.end(), [](const auto& c) { return c->finished; })) complete();
}

json GenerationJob::logprob_entry(const GeneratedToken& token) const {
  const Tokenizer& tok = model_->tokenizer;
  auto text_of = [&](TokenId id) { return tok.decode(std::span<const TokenId>(&id, 1), false); };
  std::vector<TokenLogprobText> top;
  for (const TokenLogprob& t : token.top_logprobs) top.push_back({text_of(t.token), t.logprob});
  return chat_logprob_entry({text_of(token.token), token.logprob}, top);
}

void GenerationJob::process(Choice& choice, RequestOutput output) {
  const auto now = Clock::now();
  if (choice.num_generated_tokens == 0 && !output.tokens.empty())
    metrics_.observe_time_to_first_token(std::chrono::duration<double>(now - spec_.arrival).count());
  if (choice.last_token_time && !output.tokens.empty()) {
    const double gap_s = std::chrono::duration<double>(now - *choice.last_token_time).count();
    // Tokens that arrive together split the gap (one step made them all).
    for (std::size_t i = 0; i < output.tokens.size(); ++i)
      metrics_.observe_inter_token_latency(gap_s / static_cast<double>(output.tokens.size()));
  }
  if (!output.tokens.empty()) choice.last_token_time = now;
  choice.num_cached_tokens = std::max(choice.num_cached_tokens, output.num_cached_tokens);

  ParsedDelta delta;
  json logprobs = json::array();
  for (std::size_t i = 0; i < output.tokens.size() && !choice.stop.stopped(); ++i) {
    const GeneratedToken& token = output.tokens[i];
    ++choice.num_generated_tokens;
    // The stop/EOS id that ended the request is not part of the answer.
    const bool is_final_stop_token =
        output.finished() && i + 1 == output.tokens.size() && output.stop_token == token.token;
    const std::string text = is_final_stop_token ? std::string() : choice.detokenizer.push(token.token);
    const bool was_reasoning = choice.parser.in_reasoning();
    const StopMatcher::Step step = choice.stop.feed(text);
    choice.parser.feed(step.text, delta);
    if (was_reasoning || choice.parser.in_reasoning()) ++choice.num_reasoning_tokens;
    if (spec_.logprobs) {
      if (spec_.endpoint == Endpoint::kChat) {
        logprobs.push_back(logprob_entry(token));
      } else {
        const json entry = logprob_entry(token);
        json top = json::object();
        for (const json& t : entry["top_logprobs"]) top[t["token"].get<std::string>()] = t["logprob"];
        json& lp = choice.completion_logprobs;
        lp["tokens"].push_back(entry["token"]);
        lp["token_logprobs"].push_back(entry["logprob"]);
        lp["top_logprobs"].push_back(std::move(top));
        lp["text_offset"].push_back(choice.text_offset);
      }
    }
    choice.text_offset += static_cast<std::int64_t>(step.text.size());
    if (step.stopped) {
      // The stop string ends this choice now; the engine stops at its next step.
      model_->engine->abort(choice.engine_id);
      choice.finish_reason = "stop";
      choice.parser.finish(delta);
      choice.finished = true;
    }
  }
  if (!choice.finished && output.finished()) {
    const StopMatcher::Step step = choice.stop.feed(choice.detokenizer.flush());
    choice.parser.feed(step.text, delta);
    if (!step.stopped) choice.parser.feed(choice.stop.flush(), delta);
    choice.parser.finish(delta);
    choice.finished = true;
    switch (*output.finish_reason) {
      case FinishReason::kStop: choice.finish_reason = "stop"; break;
      case FinishReason::kLength: choice.finish_reason = step.stopped ? "stop" : "length"; break;
      case FinishReason::kAbort:
        choice.error = overloaded("the request was aborted: " +
                                      (output.error_message.empty() ? std::string("server shutting down")
                                                                    : output.error_message),
                                  1);
        break;
      case FinishReason::kError: choice.error = internal_error("generation failed: " + output.error_message); break;
    }
  }
  if (choice.finished && choice.parser.num_tool_calls() > 0 &&
      (spec_.tool_choice == ToolChoice::Kind::kAuto || spec_.tool_choice == ToolChoice::Kind::kRequired))
    choice.finish_reason = "tool_calls";

  if (spec_.stream) {
    emit_stream_delta(choice, delta, std::move(logprobs));
    if (!output.tokens.empty()) observe_first_token();
    return;
  }
  if (!output.tokens.empty()) observe_first_token();
  choice.content += delta.content;
  choice.reasoning += delta.reasoning;
  for (ToolCallDelta& call : delta.tool_calls) {
    if (!call.id.empty()) choice.tool_calls.push_back({call.id, call.name, ""});
    if (!choice.tool_calls.empty()) choice.tool_calls.back().arguments += call.arguments;
  }
  for (json& entry : logprobs) choice.logprobs.push_back(std::move(entry));
}

void GenerationJob::emit_stream_delta(Choice& choice, const ParsedDelta& delta, json logprobs) {
  const bool include_usage_key = spec_.include_usage;
  if (spec_.endpoint == Endpoint::kChat) {
    if (!delta.empty()) {
      json entry = {{"index", choice.index},
                    {"delta", chat_delta(delta, !choice.role_sent)},
                    {"logprobs", spec_.logprobs ? json{{"content", std::move(logprobs)}} : json(nullptr)},
                    {"finish_reason", nullptr}};
      choice.role_sent = true;
      exchange_->write(sse_event(chat_chunk(spec_.header, json::array({std::move(entry)}), include_usage_key)));
      wrote_since_keepalive_ = true;
    }
    if (choice.finished && !choice.error) {
      json entry = {{"index", choice.index},
                    {"delta", choice.role_sent ? json::object() : chat_delta({}, true)},
                    {"logprobs", nullptr},
                    {"finish_reason", choice.finish_reason}};
      choice.role_sent = true;
      exchange_->write(sse_event(chat_chunk(spec_.header, json::array({std::move(entry)}), include_usage_key)));
      wrote_since_keepalive_ = true;
    }
    return;
  }
  const bool has_text = !delta.content.empty();
  if (has_text || (choice.finished && !choice.error)) {
    json lp = nullptr;
    if (spec_.logprobs) {
      lp = choice.completion_logprobs;
      for (auto& [key, list] : choice.completion_logprobs.items()) list = json::array();
    }
    json entry = {{"index", choice.index},
                  {"text", delta.content},
                  {"logprobs", std::move(lp)},
                  {"finish_reason", choice.finished && !choice.error ? json(choice.finish_reason) : json(nullptr)}};
    exchange_->write(sse_event(completion_chunk(spec_.header, json::array({std::move(entry)}), include_usage_key)));
    wrote_since_keepalive_ = true;
  }
}

Usage GenerationJob::usage() const {
  Usage usage;
  std::vector<std::int32_t> cached(spec_.num_prompt_tokens.size(), 0);
  for (const auto& choice : choices_) {
    usage.completion_tokens += choice->num_generated_tokens;
    usage.reasoning_tokens += choice->num_reasoning_tokens;
    auto& c = cached[static_cast<std::size_t>(choice->prompt_index)];
    c = std::max(c, choice->num_cached_tokens);
  }
  for (std::size_t i = 0; i < cached.size(); ++i) {
    usage.prompt_tokens += spec_.num_prompt_tokens[i];
    usage.cached_tokens += std::min(cached[i], spec_.num_prompt_tokens[i]);
  }
  return usage;
}

void GenerationJob::complete() {
  if (done_) return;
  done_ = true;
  if (keepalive_timer_) keepalive_timer_->cancel();
  const Usage totals = usage();
  const double e2e_s = std::chrono::duration<double>(Clock::now() - spec_.arrival).count();
  for (const auto& choice : choices_) {
    const RequestOutcome outcome = choice->error ? (choice->error->http_status == 500 ? RequestOutcome::kError
                                                                                       : RequestOutcome::kAbort)
                                   : choice->finish_reason == "length" ? RequestOutcome::kLength
                                                                       : RequestOutcome::kStop;
    metrics_.observe_request_finished(outcome, e2e_s,
                                      choice->index == 0 ? totals.prompt_tokens : 0, choice->num_generated_tokens);
  }
  const Choice* failed = nullptr;
  for (const auto& choice : choices_)
    if (choice->error && !failed) failed = choice.get();

  if (spec_.stream) {
    if (failed) {
      // Headers are gone: the error travels in-band, then [DONE] (vLLM's shape).
      exchange_->write(sse_event(failed->error->to_json()));
    } else if (spec_.include_usage) {
      const json usage = usage_json(totals, spec_.prompt_tokens_details);
      exchange_->write(sse_event(spec_.endpoint == Endpoint::kChat
                                     ? chat_chunk(spec_.header, json::array(), true, usage)
                                     : completion_chunk(spec_.header, json::array(), true, usage)));
    }
    exchange_->write(kSseDone);
    exchange_->end_stream();
    return;
  }
  if (failed) {
    const ApiError& error = *failed->error;
    HttpHeaders headers;
    if (error.retry_after_s) headers.emplace_back("Retry-After", std::to_string(*error.retry_after_s));
    exchange_->respond(error.http_status, error.to_json().dump(), "application/json", headers);
    return;
  }
  json choices = json::array();
  for (const auto& choice : choices_) {
    if (spec_.endpoint == Endpoint::kChat) {
      choices.push_back({{"index", choice->index},
                         {"message", chat_message(choice->content, choice->reasoning, choice->tool_calls)},
                         {"logprobs", spec_.logprobs ? json{{"content", choice->logprobs}} : json(nullptr)},
                         {"finish_reason", choice->finish_reason}});
    } else {
      choices.push_back({{"index", choice->index},
                         {"text", choice->content},
                         {"logprobs", spec_.logprobs ? choice->completion_logprobs : json(nullptr)},
                         {"finish_reason", choice->finish_reason}});
    }
  }
  json body = {{"id", spec_.header.id},
               {"object", spec_.endpoint == Endpoint::kChat ? "chat.completion" : "text_completion"},
               {"created", spec_.header.created_s},
               {"model", spec_.header.model},
               {"choices", std::move(choices)},
               {"usage", usage_json(totals, spec_.prompt_tokens_details)}};
  exchange_->respond(200, body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

// The server's share of the time to first token: everything but tokenization
// and the engine's own time (queue + prefill, submit to first output pushed).
void GenerationJob::observe_first_token() {
  if (first_token_observed_) return;
  first_token_observed_ = true;
  const auto now = Clock::now();
  const std::int64_t pushed_ns = first_output_pushed_ns_->load();
  if (pushed_ns == 0) return;  // cannot happen: a token arrived through the callback
  const Clock::time_point pushed{Clock::duration(pushed_ns)};
  using Ms = std::chrono::duration<double, std::milli>;
  const double ttft_ms = Ms(now - spec_.arrival).count();
  const double tokenize_ms = Ms(spec_.tokenize_time).count();
  const double engine_ms = Ms(pushed - spec_.submitted).count();
  const double overhead_ms = std::max(0.0, ttft_ms - tokenize_ms - engine_ms);
  metrics_.observe_ttft_server_overhead(overhead_ms / 1e3);
  spdlog::debug("{}: first token after {:.3f} ms = tokenize {:.3f} + engine (submit to first output) {:.3f} + "
                "server {:.3f} ({} prompt tokens; server: to worker {:.3f}, parse and validate {:.3f}, to strand "
                "{:.3f}, first output to written {:.3f})",
                spec_.header.id, ttft_ms, tokenize_ms, engine_ms, overhead_ms,
                spec_.num_prompt_tokens.empty() ? 0 : spec_.num_prompt_tokens.front(),
                Ms(spec_.worker_started - spec_.arrival).count(),
                Ms(spec_.tokenized - spec_.worker_started - spec_.tokenize_time).count(),
                Ms(spec_.submitted - spec_.tokenized).count(), Ms(now - pushed).count());
}

void GenerationJob::on_disconnect() {
  if (done_) return;
  client_gone_ = true;
  for (auto& choice : choices_) {
    if (choice->finished) continue;
    model_->engine->abort(choice->engine_id);
    choice->finished = true;
    choice->error = ApiError{.http_status = 499, .message = "client disconnected"};
  }
  spdlog::debug("{}: client disconnected; aborted", spec_.header.id);
  complete();
}

}  // namespace sluice::server
