#include "sluice/tokenizer/json_fields.h"

#include <fmt/format.h>

namespace sluice::tokenizer_detail {

void throw_load_error(std::string_view path, std::string_view message) {
  throw LoadError(path.empty() ? std::string(message) : fmt::format("{}: {}", path, message));
}

std::string json_type_name(const Json& value) { return value.type_name(); }

std::string join_path(std::string_view path, std::string_view key) {
  return path.empty() ? std::string(key) : fmt::format("{}.{}", path, key);
}

const Json& expect_object(const Json& value, std::string_view path) {
  if (!value.is_object()) throw_load_error(path, fmt::format("expected an object, got {}", json_type_name(value)));
  return value;
}

const Json& expect_array(const Json& value, std::string_view path) {
  if (!value.is_array()) throw_load_error(path, fmt::format("expected an array, got {}", json_type_name(value)));
  return value;
}

const std::string& expect_string(const Json& value, std::string_view path) {
  if (!value.is_string()) throw_load_error(path, fmt::format("expected a string, got {}", json_type_name(value)));
  return value.get_ref<const std::string&>();
}

bool expect_bool(const Json& value, std::string_view path) {
  if (!value.is_boolean()) throw_load_error(path, fmt::format("expected a boolean, got {}", json_type_name(value)));
  return value.get<bool>();
}

std::int64_t expect_int(const Json& value, std::string_view path) {
  if (!value.is_number_integer()) {
    throw_load_error(path, fmt::format("expected an integer, got {}", json_type_name(value)));
  }
  return value.get<std::int64_t>();
}

const Json& required_field(const Json& object, std::string_view key, std::string_view path) {
  expect_object(object, path);
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) {
    throw_load_error(join_path(path, key), "missing");
  }
  return *it;
}

const Json* optional_field(const Json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

bool bool_or(const Json& object, std::string_view key, bool fallback, std::string_view path) {
  const Json* value = optional_field(object, key);
  return value == nullptr ? fallback : expect_bool(*value, join_path(path, key));
}

std::string string_or(const Json& object, std::string_view key, std::string_view fallback,
                      std::string_view path) {
  const Json* value = optional_field(object, key);
  return value == nullptr ? std::string(fallback) : expect_string(*value, join_path(path, key));
}

std::int64_t int_or(const Json& object, std::string_view key, std::int64_t fallback,
                    std::string_view path) {
  const Json* value = optional_field(object, key);
  return value == nullptr ? fallback : expect_int(*value, join_path(path, key));
}

}  // namespace sluice::tokenizer_detail
