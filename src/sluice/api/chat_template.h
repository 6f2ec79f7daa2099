// Chat templates: renders a model's Jinja2 `chat_template` (from tokenizer_config.json)
// the way Hugging Face's apply_chat_template does, byte for byte, for the Jinja
// subset real templates use. Templates outside the subset are refused at parse
// time with the offending line; rendering is bounded by an operation budget and an
// output cap, and can only read the data it is given.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "sluice/common/result.h"

namespace sluice::jinja {
struct Template;
}

namespace sluice::api {

// JSON values are order-preserving (nlohmann::ordered_json) because HF renders the
// request's key order (e.g. `tools | tojson`); a plain nlohmann::json converts
// implicitly, with its keys in sorted order.
struct ChatRenderOptions {
  bool add_generation_prompt = true;
  nlohmann::ordered_json tools;  // null = none (the template sees `tools` = None)
  // chat_template_kwargs, reasoning_effort, thinking, enable_thinking, ...: each key
  // becomes a template variable. May override bos_token/eos_token, not messages,
  // tools, documents or add_generation_prompt.
  nlohmann::ordered_json extra_kwargs = nlohmann::ordered_json::object();
  std::string bos_token, eos_token;  // empty = not defined, as when the tokenizer has none
  std::int64_t max_operations = 10'000'000;  // evaluated nodes + loop iterations
  std::size_t max_output_bytes = 64u << 20;
  // `strftime_now(format)` as HF defines it; empty = format the local wall-clock time.
  // Tests inject a fixed clock.
  std::function<std::string(std::string_view format)> strftime_now;
};

class ChatTemplate {
 public:
  // A model's chat encoding written in C++, for checkpoints that ship a
  // program instead of a Jinja template (DeepSeek-V4: deepseek_v4_chat.h).
  using Encoder = Result<std::string> (*)(const nlohmann::ordered_json& messages, const ChatRenderOptions& options);

  // Parse errors name the template line and column, e.g.
  // "chat template line 3, column 5: encountered unknown tag 'foo'".
  static Result<ChatTemplate> parse(std::string_view source);
  static ChatTemplate native(Encoder encoder) { return ChatTemplate(encoder); }

  // `messages` is the OpenAI/HF message list, passed through as given: system,
  // user, assistant (tool_calls, reasoning_content), tool (tool_call_id); content
  // as a string or a list of parts. Errors (raise_exception, undefined values
  // used in an operation, budget exhaustion) name the template line.
  Result<std::string> render(const nlohmann::ordered_json& messages, const ChatRenderOptions& options) const;

 private:
  explicit ChatTemplate(std::shared_ptr<const jinja::Template> tmpl) : template_(std::move(tmpl)) {}
  explicit ChatTemplate(Encoder encoder) : encoder_(encoder) {}
  std::shared_ptr<const jinja::Template> template_;
  Encoder encoder_ = nullptr;  // set: render() runs it instead of a template
};

// Python's json.dumps(value, ensure_ascii=False): the spelling chat encoders
// and HF's tojson write JSON in (", " and ": " separators, Python's floats).
std::string python_json_dumps(const nlohmann::ordered_json& value);

}  // namespace sluice::api
