// The DeepSeek-V4 config.json parser (internal to the model module): every
// field transformers' DeepseekV4Config defines, the legacy spellings folded in
// as its __post_init__ folds them, anything else rejected by name.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "sluice/model/config.h"

namespace sluice {

// `root` is the whole config.json object (model_type "deepseek_v4").
Result<ModelConfig> parse_deepseek_v4_config(const nlohmann::json& root, const std::string& origin);

}  // namespace sluice
