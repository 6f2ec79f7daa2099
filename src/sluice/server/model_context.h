// ModelContext: everything the request handlers need about the served model,
// built once at start and then only read (from any thread). The engine is the
// one mutable part, and it is thread-safe by contract.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sluice/api/chat_template.h"
#include "sluice/engine/engine.h"
#include "sluice/server/openai_request.h"
#include "sluice/server/output_parser.h"
#include "sluice/structured/json_constraint.h"
#include "sluice/tokenizer/tokenizer.h"

namespace sluice::server {

struct ModelContext {
  std::vector<std::string> served_model_names;  // the first is reported in responses
  std::string model_type;                       // config.json model_type
  std::int64_t created_s = 0;                   // when it was loaded (for /v1/models)
  Tokenizer tokenizer;
  std::optional<api::ChatTemplate> chat_template;  // none: chat completions are refused
  // Template variables every chat request starts from (--default-chat-template-kwargs);
  // a request's own chat_template_kwargs override them key by key.
  nlohmann::ordered_json default_template_kwargs = nlohmann::ordered_json::object();
  std::vector<TokenId> eos_token_ids;
  OutputFormat output_format;
  // Request defaults from the model's generation_config.json (--generation-config).
  RequestDefaults request_defaults;
  // The vocabulary indexed for JSON mode (built at load); null: JSON mode is refused.
  std::shared_ptr<const structured::JsonVocabulary> json_vocabulary;
  std::unique_ptr<Engine> engine;

  nlohmann::ordered_json template_kwargs(const nlohmann::ordered_json& request_kwargs) const {
    nlohmann::ordered_json merged = default_template_kwargs;
    for (const auto& [key, value] : request_kwargs.items()) merged[key] = value;
    return merged;
  }

  bool serves(const std::string& name) const {
    for (const std::string& n : served_model_names)
      if (n == name) return true;
    return false;
  }
};

}  // namespace sluice::server
