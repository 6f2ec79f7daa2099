// from_error: every ErrorCode the layers below the server return, as the client
// sees it. The oracle is the contract in api_error.h: OpenAI's envelope, the
// statuses gateways act on (400: fix the request; 503 + Retry-After: try
// another replica; 500: a bug), and context_length_exceeded, the code agentic
// clients compact their context on.
#include "sluice/server/api_error.h"

#include <gtest/gtest.h>

namespace sluice::server {
namespace {

struct Expected {
  std::string name;
  ErrorCode code;
  int http_status;
  std::string type;
  nlohmann::json code_field;  // null or a string
  bool retry_after;
};

TEST(ApiError, MapsEachErrorCode) {
  const Expected expected[] = {
      {"invalid argument", ErrorCode::kInvalidArgument, 400, "invalid_request_error", nullptr, false},
      {"out of range", ErrorCode::kOutOfRange, 400, "invalid_request_error", "context_length_exceeded", false},
      {"resource exhausted", ErrorCode::kResourceExhausted, 503, "server_overloaded", "server_overloaded", true},
      {"unavailable", ErrorCode::kUnavailable, 503, "unavailable_error", nullptr, true},
      {"unknown", ErrorCode::kUnknown, 500, "server_error", "internal_error", false},
  };
  for (const Expected& e : expected) {
    const ApiError error = from_error(Error{"what happened", e.code}, 7);
    const std::string& name = e.name;
    EXPECT_EQ(error.http_status, e.http_status) << name;
    EXPECT_EQ(error.message, "what happened") << name;
    EXPECT_EQ(error.retry_after_s.value_or(0), e.retry_after ? 7 : 0) << name;
    const nlohmann::json wire = error.to_json();
    EXPECT_EQ(wire["error"]["message"], "what happened") << name;
    EXPECT_EQ(wire["error"]["type"], e.type) << name;
    EXPECT_EQ(wire["error"]["code"], e.code_field) << name;
    EXPECT_TRUE(wire["error"].contains("param")) << name;
  }
}

TEST(ApiError, AnUncodedErrorIsTheServersFault) {
  const ApiError error = from_error(Error{"something broke"}, 7);
  EXPECT_EQ(error.http_status, 500);
  EXPECT_FALSE(error.retry_after_s.has_value());
}

}  // namespace
}  // namespace sluice::server
