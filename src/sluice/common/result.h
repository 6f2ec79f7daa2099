// Result<T>: the return type of every fallible operation (load, parse, allocate,
// disk I/O). The caller cannot ignore it; the error carries a message that names
// the file, tensor or field at fault, and a code for callers that must react to
// the kind of failure rather than read its text.
#pragma once

#include <string>
#include <utility>
#include <variant>

#include "sluice/common/check.h"

namespace sluice {

// The kind of a failure, for callers that react differently to each: the
// server maps a code to an HTTP status and an OpenAI error type
// (server/api_error.h), and a client retries only the transient ones. Closed:
// a new code comes with a caller that tells it apart.
enum class ErrorCode {
  kUnknown,            // not classified (the default): a load, parse or I/O failure reported as it stands
  kInvalidArgument,    // the input is malformed or out of its domain: fixing the request fixes it
  kOutOfRange,         // a length past a limit of this model or server (context length, KV capacity)
  kResourceExhausted,  // a capacity limit reached for now (a full queue): retry later, or elsewhere
  kUnavailable,        // the service is stopping: retry elsewhere
};

// Error{"message"} is an unclassified failure; Error{"message", ErrorCode::k...}
// a classified one.
struct Error {
  std::string message;
  ErrorCode code = ErrorCode::kUnknown;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Error error) : state_(std::move(error)) {}  // NOLINT

  bool ok() const { return std::holds_alternative<T>(state_); }
  explicit operator bool() const { return ok(); }

  T& value() & {
    SLUICE_CHECK_MSG(ok(), error_message());
    return std::get<T>(state_);
  }
  const T& value() const& {
    SLUICE_CHECK_MSG(ok(), error_message());
    return std::get<T>(state_);
  }
  T&& value() && {
    SLUICE_CHECK_MSG(ok(), error_message());
    return std::get<T>(std::move(state_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

  const Error& error() const { return std::get<Error>(state_); }
  std::string error_message() const { return ok() ? std::string() : error().message; }

 private:
  std::variant<T, Error> state_;
};

// For operations that return nothing but can fail.
struct Ok {};
using Status = Result<Ok>;

}  // namespace sluice

// Propagate an error from a Result-returning expression: the value is bound to `var`.
#define SLUICE_TRY_ASSIGN(var, expr)                       \
  auto var##_result_ = (expr);                             \
  if (!var##_result_.ok()) return var##_result_.error();   \
  auto var = std::move(var##_result_).value()

#define SLUICE_TRY(expr)                                   \
  do {                                                     \
    auto try_result_ = (expr);                             \
    if (!try_result_.ok()) return try_result_.error();     \
  } while (0)
