// The DeepSeek-V3 part of config.json parsing (internal to the model module):
// MLA and MoE fields, YaRN rope scaling and the FP8 quantization_config.
#pragma once

#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "sluice/model/config.h"
#include "sluice/model/config_reader.h"

namespace sluice {

// kInformationalKeys plus DeepSeek's training-only and remote-code keys.
const std::set<std::string, std::less<>>& deepseek_v3_informational_keys();

// Reads the MLA/MoE fields, quantization_config and num_nextn_predict_layers into config.deepseek_v3.
Status parse_deepseek_v3_fields(ConfigReader& reader, ModelConfig& config);

// quantization_config {quant_method: fp8, fmt: e4m3, weight_block_size, activation_scheme: dynamic}.
Result<Fp8BlockQuantization> parse_fp8_quantization(const nlohmann::json& value, const std::string& origin);

// rope_scaling / rope_parameters of rope_type "yarn"; `where` names the object in errors.
Result<YarnRopeScaling> parse_yarn_rope_scaling(const nlohmann::json& rope, const std::string& where,
                                                std::int32_t max_position_embeddings);

// YaRN's cos/sin multiplier as transformers derives it: attention_factor, else
// mscale(factor, mscale) / mscale(factor, mscale_all_dim) when both are set,
// else 0.1 ln(factor) + 1.
float yarn_attention_factor(const YarnRopeScaling& yarn);

}  // namespace sluice
