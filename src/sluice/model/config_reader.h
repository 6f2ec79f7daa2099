// ConfigReader: typed reads of config.json fields that remember which keys were
// read, so that any key nobody read is rejected by name. Internal to the model
// module's config parsers (config.cpp, deepseek_v3_config.cpp).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "sluice/common/result.h"

namespace sluice {

class ConfigReader {
 public:
  using json = nlohmann::json;

  // `informational`: keys that describe the checkpoint but do not change the computation.
  ConfigReader(const json& root, const std::string& origin, const std::set<std::string, std::less<>>& informational)
      : root_(root), origin_(origin), informational_(informational) {}

  const std::string& origin() const { return origin_; }
  const json& root() const { return root_; }

  Error error(std::string_view key, std::string_view why) const {
    return Error{fmt::format("{}: field '{}' {}", origin_, key, why)};
  }

  // A required positive integer.
  Result<std::int32_t> positive_int(const char* key) {
    used_.insert(key);
    auto it = root_.find(key);
    if (it == root_.end()) return error(key, "is missing");
    if (!it->is_number_integer() || it->get<std::int64_t>() <= 0 || it->get<std::int64_t>() > (1LL << 30))
      return error(key, "must be a positive integer");
    return static_cast<std::int32_t>(it->get<std::int64_t>());
  }
  Result<std::int32_t> positive_int_or(const char* key, std::int32_t fallback) {
    auto it = root_.find(key);
    if (it == root_.end() || it->is_null()) {
      used_.insert(key);
      return fallback;
    }
    return positive_int(key);
  }
  // An integer >= 0, `fallback` when absent.
  Result<std::int32_t> count_or(const char* key, std::int32_t fallback) {
    used_.insert(key);
    auto it = root_.find(key);
    if (it == root_.end() || it->is_null()) return fallback;
    if (!it->is_number_integer() || it->get<std::int64_t>() < 0 || it->get<std::int64_t>() > (1LL << 30))
      return error(key, "must be a non-negative integer");
    return static_cast<std::int32_t>(it->get<std::int64_t>());
  }
  Result<float> positive_float_or(const char* key, float fallback) {
    used_.insert(key);
    auto it = root_.find(key);
    if (it == root_.end() || it->is_null()) return fallback;
    if (!it->is_number() || it->get<double>() <= 0) return error(key, "must be a positive number");
    return static_cast<float>(it->get<double>());
  }
  Result<bool> boolean_or(const char* key, bool fallback) {
    used_.insert(key);
    auto it = root_.find(key);
    if (it == root_.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) return error(key, "must be true or false");
    return it->get<bool>();
  }
  // A field we accept only at the value that needs no support.
  Status require_value(const char* key, const json& allowed, std::string_view why) {
    used_.insert(key);
    auto it = root_.find(key);
    if (it == root_.end() || it->is_null() || *it == allowed) return Ok{};
    return error(key, fmt::format("= {} is not supported: {}", it->dump(), why));
  }
  // A token id or a list of them (bos_token_id, eos_token_id); empty when absent.
  Result<std::vector<std::int32_t>> token_ids(const char* key) {
    std::vector<std::int32_t> ids;
    const json* value = find(key);
    if (!value) return ids;
    if (value->is_number_integer()) return std::vector<std::int32_t>{value->get<std::int32_t>()};
    if (!value->is_array()) return error(key, "must be a token id or a list of them");
    for (const auto& id : *value) {
      if (!id.is_number_integer()) return error(key, "must be a token id or a list of them");
      ids.push_back(id.get<std::int32_t>());
    }
    return ids;
  }
  const json* find(const char* key) {
    used_.insert(key);
    auto it = root_.find(key);
    return it == root_.end() || it->is_null() ? nullptr : &*it;
  }
  Status reject_unknown_keys() const {
    for (const auto& [key, value] : root_.items()) {
      if (used_.count(key) || informational_.count(key)) continue;
      return error(key, "is not supported by sluice (refusing to ignore it)");
    }
    return Ok{};
  }

 private:
  const json& root_;
  const std::string& origin_;
  const std::set<std::string, std::less<>>& informational_;
  std::set<std::string, std::less<>> used_;
};

}  // namespace sluice
