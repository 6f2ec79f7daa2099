// ApiError: one failed request as the client sees it, in OpenAI's envelope
// {"error": {"message", "type", "param", "code"}} with the HTTP status. Every
// validation failure anywhere in the server is one of these; nothing else
// reaches the wire as an error.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace sluice::server {

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty = null
  std::string code;   // empty = null
  std::optional<int> retry_after_s;  // 503/429: the Retry-After header
  nlohmann::json extra = nlohmann::json::object();  // merged into "error" (n_prompt_tokens, n_ctx)

  nlohmann::json to_json() const;
};

// The common shapes, so every call site spells type/code the same way.
ApiError bad_request(std::string message, std::string param = {});
ApiError model_not_found(const std::string& model);
ApiError unauthorized();
ApiError overloaded(std::string message, int retry_after_s);
ApiError internal_error(std::string message);

}  // namespace sluice::server
