#include "sluice/server/request_json.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <fmt/format.h>
#include <simdjson.h>

#include "sluice/common/utf8_checker.h"

namespace sluice::server {
namespace {

using Json = nlohmann::ordered_json;
namespace ondemand = simdjson::ondemand;

struct ParseError {
  std::string what;
};

[[noreturn]] void fail(simdjson::error_code error) { throw ParseError{simdjson::error_message(error)}; }

template <class T>
T get(simdjson::simdjson_result<T>&& result) {
  T value{};
  if (const auto error = std::move(result).get(value); error) fail(error);
  return value;
}

// -?(0|[1-9][0-9]*): a well-formed integer, which simdjson refuses only when
// it does not fit in 64 bits.
bool is_integer_token(std::string_view token) {
  if (token.starts_with('-')) token.remove_prefix(1);
  if (token.empty() || (token[0] == '0' && token.size() > 1)) return false;
  return token.find_first_not_of("0123456789") == std::string_view::npos;
}

// A number typed as nlohmann types it: non-negative integers unsigned,
// negative ones (and -0) signed, integers past 64 bits doubles.
Json number(ondemand::value& value) {
  std::string_view token = value.raw_json_token();
  token = token.substr(0, token.find_first_of(" \t\n\r"));
  ondemand::number_type type{};
  simdjson::error_code error = value.get_number_type().get(type);
  if (!error) {
    switch (type) {
      case ondemand::number_type::floating_point_number: {
        double d = 0;
        if (!(error = value.get_double().get(d))) return d;
        break;
      }
      case ondemand::number_type::unsigned_integer: {
        std::uint64_t u = 0;
        if (!(error = value.get_uint64().get(u))) return u;
        break;
      }
      case ondemand::number_type::signed_integer: {
        std::int64_t i = 0;
        if (!(error = value.get_int64().get(i)))
          return i >= 0 && !token.starts_with('-') ? Json(static_cast<std::uint64_t>(i)) : Json(i);
        break;
      }
    }
  }
  if (!is_integer_token(token)) fail(error);
  const double as_double = std::strtod(std::string(token).c_str(), nullptr);
  if (!std::isfinite(as_double)) fail(simdjson::NUMBER_ERROR);
  return as_double;
}

// `depth`: containers open around `value`, itself included if it is one.
Json to_json(ondemand::value value, int depth) {
  switch (get(value.type())) {
    case ondemand::json_type::object: {
      if (depth > kMaxJsonDepth) throw ParseError{fmt::format("nesting deeper than {}", kMaxJsonDepth)};
      Json object = Json::object();
      for (auto result : get(value.get_object())) {
        ondemand::field field = get(std::move(result));
        std::string key(get(field.unescaped_key()));
        object[std::move(key)] = to_json(field.value(), depth + 1);  // the last of duplicate keys wins
      }
      return object;
    }
    case ondemand::json_type::array: {
      if (depth > kMaxJsonDepth) throw ParseError{fmt::format("nesting deeper than {}", kMaxJsonDepth)};
      Json array = Json::array();
      for (auto element : get(value.get_array())) array.push_back(to_json(get(std::move(element)), depth + 1));
      return array;
    }
    case ondemand::json_type::string: return std::string(get(value.get_string()));
    case ondemand::json_type::number: return number(value);
    case ondemand::json_type::boolean: {
      bool b = false;
      if (value.get_bool().get(b)) throw ParseError{"invalid literal"};
      return b;
    }
    case ondemand::json_type::null: {
      bool is_null = false;
      if (value.is_null().get(is_null) || !is_null) throw ParseError{"invalid literal"};
      return nullptr;
    }
  }
  fail(simdjson::INCORRECT_TYPE);
}

// simdjson's first pass reports bad UTF-8 and unescaped control characters
// without a position; these find it, on the error path only.
std::size_t first_invalid_utf8(std::string_view text) {
  Utf8Checker utf8;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto byte = static_cast<std::uint8_t>(text[i]);
    if ((byte >= 0x80 || utf8.mid_character()) && !utf8.feed(byte)) return i;
  }
  return text.size();  // a character cut off by the end
}

std::size_t first_control_in_string(std::string_view text) {
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (!in_string) in_string = c == '"';
    else if (escaped) escaped = false;
    else if (c == '\\') escaped = true;
    else if (c == '"') in_string = false;
    else if (static_cast<std::uint8_t>(c) < 0x20) return i;
  }
  return text.size();
}

// The parser and the padded copy of the body, kept per thread (the tokenizer
// workers): allocated for each body they cost more than the parse, since
// fresh pages fault in. They keep the size of the largest body seen, about
// 6.7x it (the copy, simdjson's index at 4 bytes a byte, its string buffer at
// 5/3): 53 MB a thread at the server's default 8 MB body limit.
struct ThreadBuffers {
  ondemand::parser parser;
  std::string wrapped;
};

ThreadBuffers& thread_buffers() {
  thread_local ThreadBuffers buffers;
  return buffers;
}

}  // namespace

Result<nlohmann::ordered_json> parse_request_json(std::string_view text) {
  std::size_t offset = 0;  // of `text` in the body, for error positions
  if (text.starts_with("\xEF\xBB\xBF")) {  // a UTF-8 BOM, as nlohmann allows
    text.remove_prefix(3);
    offset = 3;
  }
  auto error_at = [&](std::string_view what, std::size_t byte) {
    return Error{fmt::format("{} at byte {}", what, offset + byte)};
  };
  // The text inside one array: simdjson 3.0.1 checks a document's root scalar
  // loosely ("falsee" passes) and array elements strictly, and the end of the
  // array shows whether anything follows the value. simdjson reads up to
  // SIMDJSON_PADDING bytes past the end: spaces.
  ThreadBuffers& buffers = thread_buffers();
  std::string& wrapped = buffers.wrapped;
  wrapped.clear();
  wrapped.reserve(text.size() + 2 + simdjson::SIMDJSON_PADDING);
  wrapped.push_back('[');
  wrapped.append(text);
  wrapped.push_back(']');
  const std::size_t num_bytes = wrapped.size();
  wrapped.append(simdjson::SIMDJSON_PADDING, ' ');

  ondemand::document document;
  if (const auto error = buffers.parser.iterate(wrapped.data(), num_bytes, wrapped.size()).get(document); error) {
    if (error == simdjson::UTF8_ERROR) return error_at(simdjson::error_message(error), first_invalid_utf8(text));
    if (error == simdjson::UNESCAPED_CHARS)
      return error_at(simdjson::error_message(error), first_control_in_string(text));
    if (error == simdjson::UNCLOSED_STRING) return error_at(simdjson::error_message(error), text.size());
    return Error{simdjson::error_message(error)};
  }
  auto located = [&](std::string_view what) {
    const char* at = nullptr;
    if (document.current_location().get(at) == simdjson::SUCCESS && at > wrapped.data() &&
        at <= wrapped.data() + num_bytes)
      return error_at(what, static_cast<std::size_t>(at - wrapped.data() - 1));
    return error_at(what, text.size());
  };
  try {
    Json value;
    int num_values = 0;
    for (auto element : get(document.get_array())) {
      ondemand::value v = get(std::move(element));
      if (++num_values > 1) return located("unexpected data after the JSON value");
      value = to_json(v, 1);
    }
    if (num_values == 0) return error_at("no JSON value", text.size());
    // Everything read: the iterator stands at the end (3.0.1 has no at_end()).
    if (document.current_location().error() != simdjson::OUT_OF_BOUNDS)
      return located("unexpected data after the JSON value");
    return value;
  } catch (const ParseError& e) {
    return located(e.what);
  }
}

}  // namespace sluice::server
