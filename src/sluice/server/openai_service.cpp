#include "sluice/server/openai_service.h"

#include <random>

#include <boost/asio/post.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "sluice/common/check.h"
#include "sluice/engine/request_validation.h"
#include "sluice/server/auth.h"
#include "sluice/server/generation_job.h"
#include "sluice/server/request_json.h"

namespace sluice::server {

namespace http = boost::beast::http;
using nlohmann::json;
using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

namespace {

std::string random_hex(std::size_t num_chars) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(num_chars, '0');
  for (char& c : out) c = kHex[rng() & 15];
  return out;
}

std::int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A request the engine would refuse, as the client sees it: the status its
// code stands for, the field at fault, and for a context overflow both counts
// as fields of their own (as llama.cpp adds them).
ApiError rejection_error(const RequestRejection& rejection, const std::string& prompt_param,
                         std::size_t num_prompt_tokens, const EngineRequestLimits& limits, int retry_after_s) {
  ApiError error = from_error(rejection.error, retry_after_s);
  switch (rejection.field) {
    case RequestField::kRequestId: break;
    case RequestField::kPrompt: error.param = prompt_param; break;
    case RequestField::kMaxTokens: error.param = "max_tokens"; break;
    case RequestField::kMinTokens: error.param = "min_tokens"; break;
    case RequestField::kLogitBias: error.param = "logit_bias"; break;
  }
  if (rejection.error.code == ErrorCode::kOutOfRange)
    error.extra = {{"n_prompt_tokens", num_prompt_tokens}, {"n_ctx", limits.max_model_len_tokens}};
  return error;
}

// vLLM's words, which clients and gateways match on.
constexpr const char* kAutoToolChoiceRefused =
    "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set";

Json parse_body(const HttpRequest& request, std::optional<ApiError>& error) {
  // Not nlohmann's own parser: its string lexing costs ~6 ms on a 300k-token
  // prompt's body, time-to-first-token the client waits for (request_json.h).
  Result<Json> body = parse_request_json(request.body());
  if (!body) {
    error = bad_request("the request body is not valid JSON (or not valid UTF-8): " + body.error().message);
    return Json();
  }
  if (!body->is_object()) error = bad_request("the request body must be a JSON object");
  return std::move(body).value();
}

}  // namespace

OpenAiService::OpenAiService(ServiceOptions options, ServerMetrics& metrics)
    : options_(std::move(options)),
      metrics_(metrics),
      workers_(static_cast<std::size_t>(std::max(1, options_.num_tokenizer_threads))) {}

OpenAiService::~OpenAiService() { workers_.join(); }

void OpenAiService::set_model(std::shared_ptr<const ModelContext> model) {
  std::lock_guard lock(model_mutex_);
  model_ = std::move(model);
}

std::shared_ptr<const ModelContext> OpenAiService::model() const {
  std::lock_guard lock(model_mutex_);
  return model_;
}

void OpenAiService::set_draining() { draining_ = true; }

void OpenAiService::apply_default_seed(GenerationOptions& options) const {
  if (options.has_seed || !options_.default_seed) return;
  options.sampling.seed = *options_.default_seed;
  options.has_seed = true;
}

void OpenAiService::reply_error(const std::shared_ptr<HttpExchange>& exchange, const ApiError& error) {
  metrics_.count_rejected(error.http_status);
  HttpHeaders headers;
  if (error.retry_after_s) headers.emplace_back("Retry-After", std::to_string(*error.retry_after_s));
  exchange->post([exchange, status = error.http_status,
                  body = error.to_json().dump(-1, ' ', false, json::error_handler_t::replace),
                  headers = std::move(headers)]() mutable {
    exchange->respond(status, std::move(body), "application/json", headers);
  });
}

void OpenAiService::reply(const std::shared_ptr<HttpExchange>& exchange, std::string body) {
  exchange->post([exchange, body = std::move(body)]() mutable {
    exchange->respond(200, std::move(body), "application/json");
  });
}

void OpenAiService::handle(HttpRequest&& request, std::shared_ptr<HttpExchange> exchange) {
  const auto arrival = Clock::now();  // the body has been read
  // Route and authorise from one normalised path (CVE-2026-48746): the target
  // without its query, matched exactly; anything unknown is 404 after auth.
  const auto raw_target = request.target();
  const std::string_view target(raw_target.data(), raw_target.size());
  const std::string path(target.substr(0, target.find('?')));
  const auto method = request.method();
  const auto model = this->model();

  if (path == "/health" || path == "/v1/health") {
    // vLLM answers 503 once its engine is dead (EngineDeadError); the body says why.
    const std::optional<std::string> dead = model ? model->engine->fatal_error() : std::nullopt;
    if (dead) {
      reply_error(exchange, engine_dead(*dead));
    } else if (!model || draining_) {
      reply_error(exchange, unavailable(draining_ ? "draining" : "loading model", options_.retry_after_s));
    } else {
      exchange->respond(200, R"({"status":"ok"})", "application/json");
    }
    return;
  }
  if (!options_.api_key.empty()) {
    const auto authorization = request[http::field::authorization];
    const auto x_api_key = request["x-api-key"];
    if (!constant_time_equals(options_.api_key,
                              supplied_api_key(std::string_view(authorization.data(), authorization.size()),
                                               std::string_view(x_api_key.data(), x_api_key.size())))) {
      reply_error(exchange, unauthorized());
      return;
    }
  }
  auto require = [&](http::verb verb) {
    if (method == verb) return true;
    reply_error(exchange, ApiError{.http_status = 405,
                                   .message = fmt::format("{} is not allowed on {}",
                                                          std::string(http::to_string(method)), path)});
    return false;
  };
  const bool known = path == "/v1/chat/completions" || path == "/v1/completions" || path == "/v1/models" ||
                     path == "/metrics" || path == "/tokenize" || path == "/detokenize" || path == "/version";
  if (!known) {
    reply_error(exchange, ApiError{.http_status = 404, .message = "no route " + path, .code = "not_found"});
    return;
  }
  if (path == "/version") {
    if (require(http::verb::get)) exchange->respond(200, R"({"version":"sluice 0.1"})", "application/json");
    return;
  }
  if (!model) {
    reply_error(exchange, unavailable("the model is still loading", options_.retry_after_s));
    return;
  }
  if (path == "/metrics") {
    if (!require(http::verb::get)) return;
    metrics_.observe_timelines(model->engine->take_finished_timelines());
    exchange->respond(200, metrics_.render(model->engine->stats(), model->served_model_names.front()),
                        "text/plain; version=0.0.4; charset=utf-8");
    return;
  }
  if (path == "/v1/models") {
    if (!require(http::verb::get)) return;
    json data = json::array();
    for (const std::string& name : model->served_model_names)
      data.push_back({{"id", name},
                      {"object", "model"},
                      {"created", model->created_s},
                      {"owned_by", "sluice"},
                      {"root", model->served_model_names.front()},
                      {"parent", nullptr},
                      {"max_model_len", model->engine->request_limits().max_model_len_tokens}});
    exchange->respond(200, json{{"object", "list"}, {"data", std::move(data)}}.dump(), "application/json");
    return;
  }
  if (!require(http::verb::post)) return;
  if (path == "/tokenize" || path == "/detokenize") {
    boost::asio::post(workers_, [this, request = std::move(request), exchange, model, path] {
      if (path == "/tokenize") handle_tokenize(request, exchange, *model);
      else handle_detokenize(request, exchange, *model);
    });
    return;
  }
  if (draining_) {
    reply_error(exchange, unavailable("the server is shutting down", options_.retry_after_s));
    return;
  }
  // Bounded admission, decided before any tokenization work.
  const EngineStats stats = model->engine->stats();
  if (stats.num_waiting >= model->engine->config().max_num_queued_requests) {
    reply_error(exchange, overloaded(fmt::format("server overloaded: {} requests waiting", stats.num_waiting),
                                     options_.retry_after_s));
    return;
  }
  ++num_active_jobs_;
  std::shared_ptr<const void> in_flight(nullptr, [this](const void*) { --num_active_jobs_; });
  boost::asio::post(workers_, [this, request = std::move(request), exchange, model, path, arrival, in_flight] {
    if (path == "/v1/chat/completions") handle_chat(request, exchange, model, arrival, in_flight);
    else handle_completion(request, exchange, model, arrival, in_flight);
  });
}

struct OpenAiService::Submission {
  std::vector<std::vector<TokenId>> prompts;
  std::string prompt_param;
};

// Shared tail of chat and completions: check every choice of every prompt the
// way the engine will (check_request), then submit them and start the job.
// Nothing has been written or submitted when this returns a request's error.
static std::optional<ApiError> submit_job(const GenerationOptions& options, const OpenAiService::Submission& submission,
                                          JobSpec spec, const std::shared_ptr<HttpExchange>& exchange,
                                          const std::shared_ptr<const ModelContext>& model, ServerMetrics& metrics,
                                          std::atomic<int>& num_active_jobs, int retry_after_s) {
  spec.submitted = Clock::now();
  if ((options.json_mode || options.json_schema) && !model->json_vocabulary)
    return bad_request(fmt::format("response_format '{}' is not available for this model",
                                   options.json_mode ? "json_object" : "json_schema"),
                       "response_format");
  const EngineRequestLimits& limits = model->engine->request_limits();
  std::uint64_t base_seed = options.has_seed ? options.sampling.seed : std::random_device{}() * 0x9E3779B97F4A7C15ull;
  std::vector<EngineRequest> requests;  // options.n choices of each prompt in turn
  for (const std::vector<TokenId>& prompt : submission.prompts) {
    spec.num_prompt_tokens.push_back(static_cast<std::int32_t>(prompt.size()));
    for (std::int32_t i = 0; i < options.n; ++i) {
      EngineRequest request;
      const auto choice_index = static_cast<std::int32_t>(requests.size());
      request.request_id = fmt::format("{}-{}", spec.header.id, choice_index);
      request.prompt_token_ids = prompt;
      request.sampling = options.sampling;
      // Choice i of a seeded request uses seed + i: reproducible, and the n choices differ.
      request.sampling.seed = base_seed + static_cast<std::uint64_t>(choice_index);
      request.max_tokens = options.max_tokens;  // none: the rest of the context
      // The model's max_new_tokens caps a request without max_tokens, never past the rest of the context.
      if (!request.max_tokens && options.default_max_tokens)
        if (const std::int32_t room = resolved_max_tokens(request, limits); room >= 1)
          request.max_tokens = std::min(*options.default_max_tokens, room);
      request.min_tokens = options.min_tokens;
      request.stop_token_ids = options.stop_token_ids;
      request.eos_token_ids = model->eos_token_ids;
      request.ignore_eos = options.ignore_eos;
      if (std::optional<RequestRejection> rejection = check_request(request, limits))
        return rejection_error(*rejection, submission.prompt_param, prompt.size(), limits, retry_after_s);
      if (options.json_mode || options.json_schema) {
        // Once the document is complete, the end-of-turn tokens (and the
        // request's own stop ids) are the only way on.
        std::vector<TokenId> end_ids = model->eos_token_ids;
        end_ids.insert(end_ids.end(), options.stop_token_ids.begin(), options.stop_token_ids.end());
        request.constraint =
            options.json_schema
                ? std::make_shared<structured::JsonConstraint>(model->json_vocabulary, std::move(end_ids),
                                                               options.json_schema)
                : std::make_shared<structured::JsonConstraint>(model->json_vocabulary, std::move(end_ids));
      }
      requests.push_back(std::move(request));
    }
  }
  // A job without choices would never answer: the parser guarantees n >= 1 and a prompt.
  SLUICE_CHECK(!requests.empty());
  auto job = std::make_shared<GenerationJob>(spec, model, exchange, metrics, num_active_jobs);
  std::vector<std::string> submitted;
  for (EngineRequest& request : requests) {
    const auto prompt_index = static_cast<std::int32_t>(submitted.size()) / options.n;
    std::string engine_id = request.request_id;
    auto stream = model->engine->submit(std::move(request));
    if (!stream) {
      // A full queue or a stopping engine (the checks above passed): nothing of the job may run.
      for (const std::string& id : submitted) model->engine->abort(id);
      if (const std::optional<std::string> dead = model->engine->fatal_error()) return engine_dead(*dead);
      return from_error(stream.error(), retry_after_s);
    }
    submitted.push_back(engine_id);
    job->add_choice(prompt_index, std::move(engine_id), std::move(stream).value());
  }
  job->start();
  return std::nullopt;
}

static JobSpec make_spec(Endpoint endpoint, const GenerationOptions& options, const ServiceOptions& service) {
  JobSpec spec;
  spec.endpoint = endpoint;
  spec.header = {.id = (endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + random_hex(24),
                 .created_s = unix_seconds(),
                 .model = options.model};
  spec.stream = options.stream;
  spec.include_usage = options.stream && options.include_usage;
  spec.logprobs = options.logprobs;
  spec.top_logprobs = options.top_logprobs;
  spec.stop = options.stop;
  spec.skip_special_tokens = options.skip_special_tokens;
  spec.arrival = std::chrono::steady_clock::now();
  spec.keepalive_interval = service.keepalive_interval;
  spec.prompt_tokens_details = service.enable_prompt_tokens_details;
  return spec;
}

void OpenAiService::handle_chat(const HttpRequest& http_request, const std::shared_ptr<HttpExchange>& exchange,
                                const std::shared_ptr<const ModelContext>& model, Clock::time_point arrival,
                                std::shared_ptr<const void> in_flight) {
  const auto worker_started = Clock::now();
  std::optional<ApiError> error;
  const Json body = parse_body(http_request, error);
  if (error) return reply_error(exchange, *error);
  auto parsed = parse_chat_request(body, options_.limits, model->request_defaults);
  if (auto* e = std::get_if<ApiError>(&parsed)) return reply_error(exchange, *e);
  ChatRequest& request = std::get<ChatRequest>(parsed);
  if (!model->serves(request.options.model)) return reply_error(exchange, model_not_found(request.options.model));
  if (request.tool_choice.kind == ToolChoice::Kind::kAuto && !options_.enable_auto_tool_choice)
    return reply_error(exchange, bad_request(kAutoToolChoiceRefused, "tool_choice"));
  apply_default_seed(request.options);

  std::optional<api::ChatTemplate> request_template;
  if (request.chat_template) {
    auto parsed_template = api::ChatTemplate::parse(*request.chat_template);
    if (!parsed_template) return reply_error(exchange, bad_request(parsed_template.error().message, "chat_template"));
    request_template = std::move(parsed_template).value();
  }
  const api::ChatTemplate* chat_template = request_template ? &*request_template
                                           : model->chat_template   ? &*model->chat_template
                                                                    : nullptr;
  if (!chat_template)
    return reply_error(exchange, bad_request("this model has no chat template; use /v1/completions", "messages"));
  api::ChatRenderOptions render_options;
  render_options.add_generation_prompt = request.add_generation_prompt;
  if (request.tool_choice.kind != ToolChoice::Kind::kNone) render_options.tools = request.tools;
  render_options.extra_kwargs = model->template_kwargs(request.template_kwargs);
  render_options.bos_token = model->tokenizer.bos_token();
  render_options.eos_token = model->tokenizer.eos_token();
  auto rendered = chat_template->render(request.messages, render_options);
  if (!rendered) return reply_error(exchange, bad_request("chat template: " + rendered.error().message, "messages"));
  const std::string& prompt_text = rendered.value();

  const auto tokenize_start = Clock::now();
  Submission submission{.prompts = {model->tokenizer.encode(prompt_text, /*add_special_tokens=*/false)},
                        .prompt_param = "messages"};
  JobSpec spec = make_spec(Endpoint::kChat, request.options, options_);
  spec.tokenize_time = Clock::now() - tokenize_start;
  spec.arrival = arrival;
  spec.tool_choice = request.tool_choice.kind;
  spec.parser_options.parse_tool_calls = request.tool_choice.kind == ToolChoice::Kind::kAuto ||
                                         request.tool_choice.kind == ToolChoice::Kind::kRequired ||
                                         request.tool_choice.kind == ToolChoice::Kind::kNamed;
  if (spec.parser_options.parse_tool_calls) spec.parser_options.tools = std::move(request.tools);
  // The template opened the reasoning block itself (DeepSeek-R1, Qwen3 thinking templates).
  const auto last = prompt_text.find_last_not_of(" \n\t\r");
  const std::string_view trimmed = std::string_view(prompt_text).substr(0, last == std::string::npos ? 0 : last + 1);
  spec.parser_options.starts_in_reasoning =
      !model->output_format.reasoning_begin.empty() && trimmed.ends_with(model->output_format.reasoning_begin);
  spec.parser_options.tool_call_id_prefix = "call_" + random_hex(16) + "_";
  spec.worker_started = worker_started;
  spec.tokenized = Clock::now();
  submit_on_strand(request.options, std::move(submission), std::move(spec), exchange, model, std::move(in_flight));
}

// The engine submission and the job's start happen on the exchange's strand,
// where the job lives from then on.
void OpenAiService::submit_on_strand(const GenerationOptions& options, Submission submission, JobSpec spec,
                                     const std::shared_ptr<HttpExchange>& exchange,
                                     const std::shared_ptr<const ModelContext>& model,
                                     std::shared_ptr<const void> in_flight) {
  auto work = std::make_shared<std::tuple<GenerationOptions, Submission, JobSpec>>(options, std::move(submission),
                                                                                   std::move(spec));
  exchange->post([this, work, exchange, model, in_flight = std::move(in_flight)] {
    if (exchange->disconnected()) return;  // gone while its prompt was tokenized: nothing to answer
    auto& [options, submission, spec] = *work;
    if (auto submit_error = submit_job(options, submission, std::move(spec), exchange, model, metrics_,
                                       num_active_jobs_, options_.retry_after_s))
      reply_error(exchange, *submit_error);
  });
}

void OpenAiService::handle_completion(const HttpRequest& http_request, const std::shared_ptr<HttpExchange>& exchange,
                                      const std::shared_ptr<const ModelContext>& model, Clock::time_point arrival,
                                      std::shared_ptr<const void> in_flight) {
  const auto worker_started = Clock::now();
  std::optional<ApiError> error;
  const Json body = parse_body(http_request, error);
  if (error) return reply_error(exchange, *error);
  auto parsed = parse_completion_request(body, options_.limits, model->request_defaults);
  if (auto* e = std::get_if<ApiError>(&parsed)) return reply_error(exchange, *e);
  CompletionRequest& request = std::get<CompletionRequest>(parsed);
  if (!model->serves(request.options.model)) return reply_error(exchange, model_not_found(request.options.model));
  apply_default_seed(request.options);
  Submission submission{.prompt_param = "prompt"};
  Clock::duration tokenize_time{};
  for (const PromptInput& prompt : request.prompts) {
    if (const auto* text = std::get_if<std::string>(&prompt)) {
      const auto tokenize_start = Clock::now();
      submission.prompts.push_back(model->tokenizer.encode(*text, /*add_special_tokens=*/true));
      tokenize_time += Clock::now() - tokenize_start;
    } else {
      submission.prompts.push_back(std::get<std::vector<TokenId>>(prompt));
    }
  }
  JobSpec spec = make_spec(Endpoint::kCompletion, request.options, options_);
  spec.arrival = arrival;
  spec.tokenize_time = tokenize_time;
  spec.worker_started = worker_started;
  spec.tokenized = Clock::now();
  submit_on_strand(request.options, std::move(submission), std::move(spec), exchange, model, std::move(in_flight));
}

void OpenAiService::handle_tokenize(const HttpRequest& http_request, const std::shared_ptr<HttpExchange>& exchange,
                                    const ModelContext& model) {
  std::optional<ApiError> error;
  const Json body = parse_body(http_request, error);
  if (error) return reply_error(exchange, *error);
  std::vector<TokenId> ids;
  if (auto it = body.find("prompt"); it != body.end() && it->is_string()) {
    bool add_special = true;
    if (auto a = body.find("add_special_tokens"); a != body.end() && a->is_boolean()) add_special = a->get<bool>();
    ids = model.tokenizer.encode(it->get<std::string>(), add_special);
  } else if (body.contains("messages")) {
    Json chat = body;
    if (!chat.contains("model")) chat["model"] = model.served_model_names.front();
    auto parsed = parse_chat_request(chat, options_.limits);
    if (auto* e = std::get_if<ApiError>(&parsed)) return reply_error(exchange, *e);
    if (!model.chat_template) return reply_error(exchange, bad_request("this model has no chat template", "messages"));
    auto& request = std::get<ChatRequest>(parsed);
    api::ChatRenderOptions render_options;
    render_options.add_generation_prompt = request.add_generation_prompt;
    render_options.tools = request.tools;
    render_options.extra_kwargs = model.template_kwargs(request.template_kwargs);
    render_options.bos_token = model.tokenizer.bos_token();
    render_options.eos_token = model.tokenizer.eos_token();
    auto rendered = model.chat_template->render(request.messages, render_options);
    if (!rendered) return reply_error(exchange, bad_request("chat template: " + rendered.error().message, "messages"));
    ids = model.tokenizer.encode(rendered.value(), false);
  } else {
    return reply_error(exchange, bad_request("'prompt' (a string) or 'messages' is required", "prompt"));
  }
  json out = {{"count", ids.size()},
              {"max_model_len", model.engine->request_limits().max_model_len_tokens},
              {"tokens", ids}};
  reply(exchange, out.dump());
}

void OpenAiService::handle_detokenize(const HttpRequest& http_request, const std::shared_ptr<HttpExchange>& exchange,
                                      const ModelContext& model) {
  std::optional<ApiError> error;
  const Json body = parse_body(http_request, error);
  if (error) return reply_error(exchange, *error);
  auto it = body.find("tokens");
  if (it == body.end() || !it->is_array()) return reply_error(exchange, bad_request("'tokens' must be an array", "tokens"));
  std::vector<TokenId> ids;
  // The model's vocabulary may be larger than the tokenizer's; such ids decode to nothing.
  const std::int32_t vocab = std::max(model.tokenizer.vocab_size(), model.engine->backend_info().vocab_size);
  for (const Json& id : *it) {
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() >= vocab)
      return reply_error(exchange, bad_request("'tokens' must hold token ids of this model", "tokens"));
    ids.push_back(static_cast<TokenId>(id.get<std::int64_t>()));
  }
  json out = {{"prompt", model.tokenizer.decode(ids, false)}};
  reply(exchange, out.dump(-1, ' ', false, json::error_handler_t::replace));
}

}  // namespace sluice::server
