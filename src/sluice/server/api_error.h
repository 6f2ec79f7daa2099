// ApiError: one failed request as the client sees it, in OpenAI's envelope
// {"error": {"message", "type", "param", "code"}} with the HTTP status. Every
// validation failure anywhere in the server is one of these; nothing else
// reaches the wire as an error.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "sluice/common/result.h"

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
ApiError unavailable(std::string message, int retry_after_s);  // loading, draining, stopping
// 503 without Retry-After: the engine died (Engine::fatal_error) and this
// process serves nothing again.
ApiError engine_dead(const std::string& reason);
ApiError internal_error(std::string message);

// An error from below the server (the engine's request checks and submit) as
// the client sees it, by its code: kInvalidArgument 400; kOutOfRange 400
// context_length_exceeded; kResourceExhausted 503 server_overloaded and
// kUnavailable 503 unavailable_error, both with Retry-After (a gateway tries
// another replica); an unclassified error 500.
ApiError from_error(const Error& error, int retry_after_s);

}  // namespace sluice::server
