#include "sluice/server/openai_request.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace sluice::server {
namespace {

using Json = nlohmann::ordered_json;

// Thrown by the field readers below and caught in parse_*(): keeps each check
// on one line. Never escapes this file.
struct Invalid {
  ApiError error;
};

[[noreturn]] void fail(std::string message, std::string param) {
  throw Invalid{bad_request(std::move(message), std::move(param))};
}

const Json* find(const Json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<double> read_number(const Json& body, const char* key, double min, double max) {
  const Json* value = find(body, key);
  if (!value) return std::nullopt;
  if (!value->is_number()) fail(fmt::format("'{}' must be a number", key), key);
  const double x = value->get<double>();
  if (!std::isfinite(x) || x < min || x > max)
    fail(fmt::format("'{}' = {} is out of range: must be in [{}, {}]", key, x, min, max), key);
  return x;
}

// An integer field in [min, max]. A float with no fractional part counts
// (1.0 is 1, as pydantic reads it for vLLM); the wire's non-negative integers
// arrive unsigned, so both signed and unsigned values are checked against both
// bounds (an unsigned 0 once slipped past min = 1: "n": 0 hung the request).
std::optional<std::int64_t> read_integer(const Json& body, const char* key, std::int64_t min, std::int64_t max) {
  const Json* value = find(body, key);
  if (!value) return std::nullopt;
  auto out_of_range = [&](const auto& x) {
    fail(fmt::format("'{}' = {} is out of range: must be in [{}, {}]", key, x, min, max), key);
  };
  if (value->is_number_float()) {
    const double x = value->get<double>();
    if (!std::isfinite(x) || x != std::floor(x)) fail(fmt::format("'{}' must be an integer", key), key);
    // max + 1 is exact in a double for int32 and int64 bounds; x < it keeps the cast defined.
    if (x < static_cast<double>(min) || !(x < static_cast<double>(max) + 1.0)) out_of_range(x);
    return static_cast<std::int64_t>(x);
  }
  if (value->is_number_unsigned()) {
    const auto x = value->get<std::uint64_t>();
    if (x > static_cast<std::uint64_t>(max) || (min > 0 && x < static_cast<std::uint64_t>(min))) out_of_range(x);
    return static_cast<std::int64_t>(x);
  }
  if (!value->is_number_integer()) fail(fmt::format("'{}' must be an integer", key), key);
  const auto x = value->get<std::int64_t>();
  if (x < min || x > max) out_of_range(x);
  return x;
}

std::optional<bool> read_bool(const Json& body, const char* key) {
  const Json* value = find(body, key);
  if (!value) return std::nullopt;
  if (!value->is_boolean()) fail(fmt::format("'{}' must be a boolean", key), key);
  return value->get<bool>();
}

std::optional<std::string> read_string(const Json& body, const char* key) {
  const Json* value = find(body, key);
  if (!value) return std::nullopt;
  if (!value->is_string()) fail(fmt::format("'{}' must be a string", key), key);
  return value->get<std::string>();
}

constexpr std::int64_t kMaxInt32 = std::numeric_limits<std::int32_t>::max();

// Bounds the host's and the device sampler's work a row and step.
constexpr std::size_t kMaxLogitBiasEntries = 1024;

// OpenAI's logit_bias: {"token id": bias in [-100, 100]}, by ascending token.
// The ids' range against the vocabulary is check_request's.
std::vector<std::pair<TokenId, float>> parse_logit_bias(const Json& body) {
  const Json* bias = find(body, "logit_bias");
  if (!bias) return {};
  if (!bias->is_object()) fail("'logit_bias' must be an object mapping token ids to numbers", "logit_bias");
  if (bias->size() > kMaxLogitBiasEntries)
    fail(fmt::format("'logit_bias' has {} entries; at most {} are allowed", bias->size(), kMaxLogitBiasEntries),
         "logit_bias");
  std::vector<std::pair<TokenId, float>> out;
  for (auto it = bias->begin(); it != bias->end(); ++it) {
    const std::string& key = it.key();
    TokenId token = -1;
    const auto [end, error] = std::from_chars(key.data(), key.data() + key.size(), token);
    if (error != std::errc{} || end != key.data() + key.size() || token < 0)
      fail(fmt::format("'logit_bias' key '{}' is not a token id", key), "logit_bias");
    if (!it.value().is_number()) fail(fmt::format("'logit_bias' value for token {} must be a number", key), "logit_bias");
    const double value = it.value().get<double>();
    if (!(value >= -kMaxLogitBias && value <= kMaxLogitBias))
      fail(fmt::format("'logit_bias' value for token {} = {} is out of range: must be in [-100, 100]", key, value),
           "logit_bias");
    out.emplace_back(token, static_cast<float>(value));
  }
  std::sort(out.begin(), out.end());
  // "5" and "05" name one token: the object's keys differ, the ids do not.
  for (std::size_t i = 1; i < out.size(); ++i)
    if (out[i].first == out[i - 1].first)
      fail(fmt::format("'logit_bias' names token {} twice", out[i].first), "logit_bias");
  return out;
}

void parse_stop(const Json& body, const RequestLimits& limits, GenerationOptions& options) {
  const Json* stop = find(body, "stop");
  if (!stop) return;
  std::vector<std::string> sequences;
  if (stop->is_string()) {
    sequences.push_back(stop->get<std::string>());
  } else if (stop->is_array()) {
    for (const Json& item : *stop) {
      if (!item.is_string()) fail("'stop' must be a string or an array of strings", "stop");
      sequences.push_back(item.get<std::string>());
    }
  } else {
    fail("'stop' must be a string or an array of strings", "stop");
  }
  if (static_cast<std::int64_t>(sequences.size()) > limits.max_stop_sequences)
    fail(fmt::format("'stop' has {} sequences; at most {} are allowed", sequences.size(), limits.max_stop_sequences),
         "stop");
  for (const std::string& s : sequences) {
    if (s.size() > limits.max_stop_sequence_bytes)
      fail(fmt::format("a 'stop' sequence is {} bytes; at most {} are allowed", s.size(),
                       limits.max_stop_sequence_bytes),
           "stop");
    if (!s.empty()) options.stop.push_back(s);  // "" would stop at once; OpenAI ignores it
  }
}

// Fields common to chat and completions. `logprobs` differs between the two
// APIs, so the callers read it.
// response_format {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}:
// the schema compiled, or a 400 naming the first keyword outside the supported
// subset (structured/json_schema.h). `strict` false is enforced all the same:
// a client that sent a schema relies on the output matching it.
std::shared_ptr<const structured::JsonSchema> parse_json_schema(const Json& format) {
  constexpr std::size_t kMaxSchemaBytes = 64 * 1024;
  const Json* spec = find(format, "json_schema");
  if (!spec || !spec->is_object()) fail("response_format 'json_schema' needs a 'json_schema' object", "response_format.json_schema");
  if (const Json* name = find(*spec, "name"); name && !name->is_string())
    fail("'json_schema.name' must be a string", "response_format.json_schema.name");
  if (const Json* strict = find(*spec, "strict"); strict && !strict->is_null() && !strict->is_boolean())
    fail("'json_schema.strict' must be a boolean", "response_format.json_schema.strict");
  const Json* schema = find(*spec, "schema");
  if (!schema) fail("'json_schema' needs a 'schema'", "response_format.json_schema.schema");
  if (schema->dump().size() > kMaxSchemaBytes)
    fail(fmt::format("the JSON schema is larger than {} bytes", kMaxSchemaBytes), "response_format.json_schema.schema");
  auto compiled = structured::compile_json_schema(*schema);
  if (!compiled) fail("unsupported JSON schema: " + compiled.error().message, "response_format.json_schema.schema");
  return std::move(compiled).value();
}

GenerationOptions parse_common(const Json& body, const RequestLimits& limits, const RequestDefaults& defaults) {
  GenerationOptions options;
  const Json* model = find(body, "model");
  if (!model) fail("'model' is required", "model");
  if (!model->is_string()) fail("'model' must be a string", "model");
  options.model = model->get<std::string>();

  // max_completion_tokens wins over the deprecated max_tokens.
  auto max_tokens = read_integer(body, "max_tokens", 1, kMaxInt32);
  if (auto mct = read_integer(body, "max_completion_tokens", 1, kMaxInt32)) max_tokens = mct;
  if (max_tokens) options.max_tokens = static_cast<std::int32_t>(*max_tokens);
  else options.default_max_tokens = defaults.max_tokens;
  if (auto v = read_integer(body, "min_tokens", 0, kMaxInt32)) options.min_tokens = static_cast<std::int32_t>(*v);
  if (options.max_tokens && options.min_tokens > *options.max_tokens)
    fail(fmt::format("'min_tokens' ({}) must not exceed 'max_tokens' ({})", options.min_tokens, *options.max_tokens),
         "min_tokens");

  SamplingParams& s = options.sampling;
  s.temperature = defaults.temperature.value_or(1.0f);  // OpenAI's default, unless the model's config says
  s.top_p = defaults.top_p.value_or(s.top_p);
  s.top_k = defaults.top_k.value_or(s.top_k);
  s.min_p = defaults.min_p.value_or(s.min_p);
  s.repetition_penalty = defaults.repetition_penalty.value_or(s.repetition_penalty);
  if (auto v = read_number(body, "temperature", 0.0, 2.0)) s.temperature = static_cast<float>(*v);
  if (auto v = read_number(body, "top_p", 0.0, 1.0)) {
    if (*v <= 0.0) fail("'top_p' must be in (0, 1]", "top_p");
    s.top_p = static_cast<float>(*v);
  }
  if (auto v = read_integer(body, "top_k", -1, kMaxInt32)) s.top_k = *v < 0 ? 0 : static_cast<std::int32_t>(*v);
  if (auto v = read_number(body, "min_p", 0.0, 1.0)) s.min_p = static_cast<float>(*v);
  if (auto v = read_number(body, "presence_penalty", -2.0, 2.0)) s.presence_penalty = static_cast<float>(*v);
  if (auto v = read_number(body, "frequency_penalty", -2.0, 2.0)) s.frequency_penalty = static_cast<float>(*v);
  if (auto v = read_number(body, "repetition_penalty", 0.0, 10.0)) {
    if (*v <= 0.0) fail("'repetition_penalty' must be > 0", "repetition_penalty");
    s.repetition_penalty = static_cast<float>(*v);
  }
  // vLLM's range: a 64-bit signed integer. A negative seed is used as its
  // two's-complement bit pattern.
  if (auto seed = read_integer(body, "seed", std::numeric_limits<std::int64_t>::min(),
                               std::numeric_limits<std::int64_t>::max())) {
    s.seed = static_cast<std::uint64_t>(*seed);
    options.has_seed = true;
  }
  parse_stop(body, limits, options);
  if (const Json* ids = find(body, "stop_token_ids")) {
    if (!ids->is_array()) fail("'stop_token_ids' must be an array of integers", "stop_token_ids");
    for (const Json& id : *ids) {
      if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() > kMaxInt32)
        fail("'stop_token_ids' must be an array of token ids", "stop_token_ids");
      options.stop_token_ids.push_back(static_cast<TokenId>(id.get<std::int64_t>()));
    }
    if (static_cast<std::int64_t>(options.stop_token_ids.size()) > limits.max_stop_sequences)
      fail(fmt::format("'stop_token_ids' has more than {} entries", limits.max_stop_sequences), "stop_token_ids");
  }
  if (auto v = read_bool(body, "ignore_eos")) options.ignore_eos = *v;
  if (auto v = read_bool(body, "skip_special_tokens")) options.skip_special_tokens = *v;
  if (auto v = read_bool(body, "stream")) options.stream = *v;
  // Tolerated without stream (gateways always send it); it then changes nothing.
  if (const Json* so = find(body, "stream_options")) {
    if (!so->is_object()) fail("'stream_options' must be an object", "stream_options");
    if (auto v = read_bool(*so, "include_usage")) options.include_usage = *v;
  }
  if (auto v = read_integer(body, "n", 1, limits.max_n)) options.n = static_cast<std::int32_t>(*v);
  if (auto v = read_integer(body, "best_of", 1, limits.max_n); v && *v != options.n)
    fail("'best_of' different from 'n' is not supported", "best_of");
  s.logit_bias = parse_logit_bias(body);
  if (const Json* format = find(body, "response_format"); format && !format->is_null()) {
    if (!format->is_object()) fail("'response_format' must be an object", "response_format");
    const auto type = read_string(*format, "type");
    if (!type) fail("'response_format' needs a 'type'", "response_format.type");
    if (*type == "json_object") {
      options.json_mode = true;
    } else if (*type == "json_schema") {
      options.json_schema = parse_json_schema(*format);
    } else if (*type != "text") {
      fail(fmt::format("unknown response_format type '{}' (text, json_object, json_schema)", *type),
           "response_format.type");
    }
  }
  return options;
}

void check_sampling(const GenerationOptions& options) {
  if (auto status = options.sampling.validate(); !status) fail(status.error().message, "");
}

// One message's content as the template sees it: a string (text parts joined).
Json normalize_content(const Json& content, std::size_t index) {
  if (content.is_null() || content.is_string()) return content;
  const std::string param = fmt::format("messages[{}].content", index);
  if (!content.is_array()) fail("message content must be a string or an array of content parts", param);
  std::string text;
  for (const Json& part : content) {
    if (!part.is_object()) fail("a content part must be an object", param);
    const auto type = read_string(part, "type");
    if (type == "text") {
      const auto value = read_string(part, "text");
      if (!value) fail("a text content part needs 'text'", param);
      text += *value;
    } else if (type == "image_url" || type == "input_audio" || type == "file") {
      fail(fmt::format("content part type '{}' is not supported: this model is text-only", *type), param);
    } else {
      fail(fmt::format("unknown content part type '{}'", type.value_or("")), param);
    }
  }
  return text;
}

Json normalize_messages(const Json& body, const RequestLimits& limits) {
  const Json* messages = find(body, "messages");
  if (!messages) fail("'messages' is required", "messages");
  if (!messages->is_array()) fail("'messages' must be an array", "messages");
  if (messages->empty()) fail("'messages' must not be empty", "messages");
  if (static_cast<std::int64_t>(messages->size()) > limits.max_messages)
    fail(fmt::format("'messages' has {} entries; at most {} are allowed", messages->size(), limits.max_messages),
         "messages");
  Json out = Json::array();
  for (std::size_t i = 0; i < messages->size(); ++i) {
    const Json& message = (*messages)[i];
    const std::string param = fmt::format("messages[{}]", i);
    if (!message.is_object()) fail("each message must be an object", param);
    auto role = read_string(message, "role");
    if (!role) fail("each message needs a 'role'", param + ".role");
    if (*role == "developer") role = "system";
    if (*role != "system" && *role != "user" && *role != "assistant" && *role != "tool")
      fail(fmt::format("unknown role '{}'", *role), param + ".role");
    Json copy = message;
    copy["role"] = *role;
    auto content_it = message.find("content");
    const bool has_tool_calls = message.contains("tool_calls") && !message["tool_calls"].is_null();
    if (content_it == message.end() || content_it->is_null()) {
      if (!(*role == "assistant" && has_tool_calls)) fail("message 'content' is required", param + ".content");
      copy["content"] = "";  // templates concatenate it
    } else {
      copy["content"] = normalize_content(*content_it, i);
    }
    if (has_tool_calls) {
      if (*role != "assistant") fail("only assistant messages may carry 'tool_calls'", param + ".tool_calls");
      if (!message["tool_calls"].is_array()) fail("'tool_calls' must be an array", param + ".tool_calls");
      for (Json& call : copy["tool_calls"]) {
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
          fail("each tool call needs a 'function' object", param + ".tool_calls");
        Json& function = call["function"];
        if (!function.contains("name") || !function["name"].is_string())
          fail("each tool call needs 'function.name'", param + ".tool_calls");
        // Templates read arguments as a mapping (`arguments | tojson`, `.items()`).
        if (function.contains("arguments") && function["arguments"].is_string()) {
          Json parsed = Json::parse(function["arguments"].get<std::string>(), nullptr, false);
          if (!parsed.is_discarded()) function["arguments"] = std::move(parsed);
        }
      }
    }
    out.push_back(std::move(copy));
  }
  return out;
}

Json parse_tools(const Json& body, const RequestLimits& limits) {
  const Json* tools = find(body, "tools");
  if (!tools) return nullptr;
  if (!tools->is_array()) fail("'tools' must be an array", "tools");
  if (static_cast<std::int64_t>(tools->size()) > limits.max_tools)
    fail(fmt::format("'tools' has {} entries; at most {} are allowed", tools->size(), limits.max_tools), "tools");
  if (tools->dump().size() > limits.max_tools_json_bytes)
    fail(fmt::format("'tools' is larger than {} bytes", limits.max_tools_json_bytes), "tools");
  for (std::size_t i = 0; i < tools->size(); ++i) {
    const Json& tool = (*tools)[i];
    const std::string param = fmt::format("tools[{}]", i);
    if (!tool.is_object() || read_string(tool, "type").value_or("function") != "function")
      fail("each tool must be an object with type 'function'", param);
    const Json* function = find(tool, "function");
    if (!function || !function->is_object()) fail("each tool needs a 'function' object", param + ".function");
    const auto name = read_string(*function, "name");
    if (!name || name->empty()) fail("each tool function needs a non-empty 'name'", param + ".function.name");
    if (const Json* parameters = find(*function, "parameters"); parameters && !parameters->is_object())
      fail("'parameters' must be a JSON Schema object", param + ".function.parameters");
  }
  if (tools->empty()) return nullptr;
  return *tools;
}

ToolChoice parse_tool_choice(const Json& body, const Json& tools) {
  const Json* choice = find(body, "tool_choice");
  ToolChoice result;
  result.kind = tools.is_null() ? ToolChoice::Kind::kNone : ToolChoice::Kind::kAuto;
  if (!choice) return result;
  if (choice->is_string()) {
    const auto s = choice->get<std::string>();
    if (s == "none") result.kind = ToolChoice::Kind::kNone;
    else if (s == "auto") result.kind = ToolChoice::Kind::kAuto;
    else if (s == "required") result.kind = ToolChoice::Kind::kRequired;
    else fail(fmt::format("unknown tool_choice '{}'", s), "tool_choice");
  } else if (choice->is_object()) {
    const Json* function = find(*choice, "function");
    const auto name = function && function->is_object() ? read_string(*function, "name") : std::nullopt;
    if (!name) fail("a named tool_choice needs 'function.name'", "tool_choice");
    result.kind = ToolChoice::Kind::kNamed;
    result.name = *name;
  } else {
    fail("'tool_choice' must be a string or an object", "tool_choice");
  }
  if (result.kind != ToolChoice::Kind::kNone && tools.is_null())
    fail("'tool_choice' needs 'tools'", "tool_choice");
  if (result.kind == ToolChoice::Kind::kNamed) {
    bool found = false;
    for (const Json& tool : tools) found = found || tool["function"]["name"] == result.name;
    if (!found) fail(fmt::format("tool_choice names '{}', which is not in 'tools'", result.name), "tool_choice");
  }
  return result;
}

}  // namespace

Parsed<ChatRequest> parse_chat_request(const Json& body, const RequestLimits& limits,
                                       const RequestDefaults& defaults) {
  try {
    if (!body.is_object()) fail("the request body must be a JSON object", "");
    ChatRequest request;
    request.options = parse_common(body, limits, defaults);
    GenerationOptions& options = request.options;
    if (auto v = read_bool(body, "logprobs")) options.logprobs = *v;
    if (auto v = read_integer(body, "top_logprobs", 0, limits.max_logprobs)) {
      options.top_logprobs = static_cast<std::int32_t>(*v);
      if (options.top_logprobs > 0) options.logprobs = true;
    }
    options.sampling.num_top_logprobs = options.top_logprobs;
    check_sampling(options);
    request.messages = normalize_messages(body, limits);
    request.tools = parse_tools(body, limits);
    request.tool_choice = parse_tool_choice(body, request.tools);
    if (const Json* kwargs = find(body, "chat_template_kwargs")) {
      if (!kwargs->is_object()) fail("'chat_template_kwargs' must be an object", "chat_template_kwargs");
      if (kwargs->dump().size() > limits.max_template_kwargs_json_bytes)
        fail("'chat_template_kwargs' is too large", "chat_template_kwargs");
      for (const char* reserved : {"messages", "tools", "documents", "add_generation_prompt", "tokenize"})
        if (kwargs->contains(reserved))
          fail(fmt::format("'chat_template_kwargs' may not set '{}'", reserved), "chat_template_kwargs");
      request.template_kwargs = *kwargs;
    }
    // Forwarded verbatim by gateways: an unknown value is passed on, never an error.
    if (const Json* effort = find(body, "reasoning_effort")) {
      if (!effort->is_string()) fail("'reasoning_effort' must be a string", "reasoning_effort");
      request.template_kwargs["reasoning_effort"] = *effort;
    }
    if (auto v = read_string(body, "chat_template")) {
      if (!limits.allow_request_chat_template)
        fail("request-supplied 'chat_template' is disabled on this server (--trust-request-chat-template)",
             "chat_template");
      request.chat_template = *v;
    }
    if (auto v = read_bool(body, "add_generation_prompt")) request.add_generation_prompt = *v;
    return request;
  } catch (const Invalid& invalid) {
    return invalid.error;
  }
}

Parsed<CompletionRequest> parse_completion_request(const Json& body, const RequestLimits& limits,
                                                   const RequestDefaults& defaults) {
  try {
    if (!body.is_object()) fail("the request body must be a JSON object", "");
    CompletionRequest request;
    request.options = parse_common(body, limits, defaults);
    GenerationOptions& options = request.options;
    if (auto v = read_integer(body, "logprobs", 0, limits.max_logprobs)) {
      options.logprobs = true;
      options.top_logprobs = static_cast<std::int32_t>(*v);
    }
    options.sampling.num_top_logprobs = options.top_logprobs;
    check_sampling(options);
    if (read_bool(body, "echo").value_or(false)) fail("'echo' is not supported", "echo");
    if (!read_string(body, "suffix").value_or("").empty()) fail("'suffix' is not supported", "suffix");

    const Json* prompt = find(body, "prompt");
    if (!prompt) fail("'prompt' is required", "prompt");
    auto as_ids = [](const Json& list) -> std::optional<std::vector<TokenId>> {
      std::vector<TokenId> ids;
      for (const Json& id : list) {
        if (!id.is_number_integer()) return std::nullopt;
        const auto value = id.get<std::int64_t>();
        if (value < 0 || value > kMaxInt32) fail("'prompt' token ids must be non-negative integers", "prompt");
        ids.push_back(static_cast<TokenId>(value));
      }
      return ids;
    };
    const char* shape = "'prompt' must be a string, an array of strings, an array of token ids, or an array of those";
    if (prompt->is_string()) {
      request.prompts.emplace_back(prompt->get<std::string>());
    } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number()) {
      auto ids = as_ids(*prompt);
      if (!ids) fail(shape, "prompt");
      request.prompts.emplace_back(std::move(*ids));
    } else if (prompt->is_array()) {
      for (const Json& item : *prompt) {
        if (item.is_string()) {
          request.prompts.emplace_back(item.get<std::string>());
        } else if (item.is_array()) {
          auto ids = as_ids(item);
          if (!ids) fail(shape, "prompt");
          request.prompts.emplace_back(std::move(*ids));
        } else {
          fail(shape, "prompt");
        }
      }
    } else {
      fail(shape, "prompt");
    }
    if (request.prompts.empty()) fail("'prompt' must not be empty", "prompt");
    if (static_cast<std::int64_t>(request.prompts.size()) > limits.max_prompts)
      fail(fmt::format("'prompt' has {} entries; at most {} are allowed", request.prompts.size(), limits.max_prompts),
           "prompt");
    if (static_cast<std::int64_t>(request.prompts.size()) * options.n > limits.max_n)
      fail(fmt::format("prompts x n = {} exceeds the cap of {} choices", request.prompts.size() * options.n,
                       limits.max_n),
           "n");
    for (const PromptInput& p : request.prompts) {
      const bool empty = std::visit([](const auto& v) { return v.empty(); }, p);
      if (empty) fail("'prompt' must not be empty", "prompt");
    }
    return request;
  } catch (const Invalid& invalid) {
    return invalid.error;
  }
}

}  // namespace sluice::server
