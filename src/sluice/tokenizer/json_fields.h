// Typed access to tokenizer.json / tokenizer_config.json fields. A wrong or
// missing field throws LoadError naming its path ("model.vocab"); the loader
// catches it at the API boundary and returns it as a Result error.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace sluice::tokenizer_detail {

using Json = nlohmann::json;

class LoadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_load_error(std::string_view path, std::string_view message);

std::string json_type_name(const Json& value);
std::string join_path(std::string_view path, std::string_view key);

// The field, which must exist and not be null.
const Json& required_field(const Json& object, std::string_view key, std::string_view path);
// The field, or nullptr when absent or null.
const Json* optional_field(const Json& object, std::string_view key);

const Json& expect_object(const Json& value, std::string_view path);
const Json& expect_array(const Json& value, std::string_view path);
const std::string& expect_string(const Json& value, std::string_view path);
bool expect_bool(const Json& value, std::string_view path);
std::int64_t expect_int(const Json& value, std::string_view path);

// Convenience: optional typed fields with defaults.
bool bool_or(const Json& object, std::string_view key, bool fallback, std::string_view path);
std::string string_or(const Json& object, std::string_view key, std::string_view fallback,
                      std::string_view path);
std::int64_t int_or(const Json& object, std::string_view key, std::int64_t fallback,
                    std::string_view path);

}  // namespace sluice::tokenizer_detail
