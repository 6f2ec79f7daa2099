#include "sluice/server/api_error.h"

namespace sluice::server {

nlohmann::json ApiError::to_json() const {
  nlohmann::json error = {{"message", message},
                          {"type", type},
                          {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
                          {"code", code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code)}};
  for (const auto& [key, value] : extra.items()) error[key] = value;
  return {{"error", std::move(error)}};
}

ApiError bad_request(std::string message, std::string param) {
  return ApiError{.http_status = 400, .message = std::move(message), .param = std::move(param)};
}

ApiError model_not_found(const std::string& model) {
  return ApiError{.http_status = 404,
                  .message = "The model `" + model + "` does not exist.",
                  .type = "invalid_request_error",
                  .param = "model",
                  .code = "model_not_found"};
}

ApiError unauthorized() {
  // "authentication_error" only for real auth failures: gateways disable a
  // channel on it (api-conventions §1.9).
  return ApiError{.http_status = 401,
                  .message = "Invalid or missing API key.",
                  .type = "authentication_error",
                  .code = "invalid_api_key"};
}

ApiError overloaded(std::string message, int retry_after_s) {
  return ApiError{.http_status = 503,
                  .message = std::move(message),
                  .type = "server_overloaded",
                  .code = "server_overloaded",
                  .retry_after_s = retry_after_s};
}

ApiError unavailable(std::string message, int retry_after_s) {
  return ApiError{.http_status = 503,
                  .message = std::move(message),
                  .type = "unavailable_error",
                  .retry_after_s = retry_after_s};
}

ApiError engine_dead(const std::string& reason) {
  return ApiError{.http_status = 503,
                  .message = "the engine is dead: " + reason + " (restart the server)",
                  .type = "unavailable_error",
                  .code = "engine_dead"};
}

ApiError internal_error(std::string message) {
  return ApiError{.http_status = 500, .message = std::move(message), .type = "server_error", .code = "internal_error"};
}

ApiError from_error(const Error& error, int retry_after_s) {
  switch (error.code) {
    case ErrorCode::kInvalidArgument: return bad_request(error.message);
    case ErrorCode::kOutOfRange: {
      ApiError api_error = bad_request(error.message);
      api_error.code = "context_length_exceeded";  // the code agentic clients compact their context on
      return api_error;
    }
    case ErrorCode::kResourceExhausted: return overloaded(error.message, retry_after_s);
    case ErrorCode::kUnavailable: return unavailable(error.message, retry_after_s);
    case ErrorCode::kUnknown: break;
  }
  return internal_error(error.message);
}

}  // namespace sluice::server
