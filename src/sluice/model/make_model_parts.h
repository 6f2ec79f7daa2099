// Internal to make-model: the tensor list and config.json of each
// architecture, and how a tensor's random values are drawn.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sluice/backend/tensor.h"
#include "sluice/model/make_model.h"
#include "sluice/model/tokenizer_builder.h"

namespace sluice {

// How a tensor's random values are drawn: uniform in center +- spread.
struct Init {
  float center = 0.0f;
  float spread = 0.0f;
};

struct PendingTensor {
  std::string name;
  Shape shape;
  Init init;
  bool quantizable = false;  // a linear weight: float8 with block scales in an fp8 model
  bool keep_f32 = false;     // stored in f32 whatever the model's dtype (the router's correction bias)
  // > 0: an I32 table whose rows hold distinct values in [0, table_range)
  // (DeepSeek-V4's tid2eid: each token's hash-routed experts); init unused.
  std::int32_t table_range = 0;
  // A routed expert's projection (deepseek_v4): in an fp8 model, e2m1 pairs
  // with E8M0 group scales (model/fp4_weights.h), as expert_dtype fp4 ships.
  bool fp4_expert = false;
};

// How an fp8 model stores the block scales of its quantizable weights.
enum class Fp8ScaleStorage {
  f32_scale_inv,    // DeepSeek-V3: `<name>_scale_inv`, F32 amax / 448
  ue8m0_dot_scale,  // DeepSeek-V4: `<linear>.scale`, F8_E8M0 2^ceil(log2(amax / 448))
};

// Linear weights scaled by fan-in keep activations near unit size, so logits
// spread out and greedy choices are not decided by rounding.
inline Init linear_init(std::int64_t fan_in) { return Init{0.0f, std::sqrt(3.0f / static_cast<float>(fan_in))}; }
inline constexpr Init kNormInit{1.0f, 0.2f};

Status check_deepseek_v3_options(const MakeModelOptions& o);
std::vector<PendingTensor> deepseek_v3_tensors(const MakeModelOptions& o);
nlohmann::ordered_json deepseek_v3_config_json(const MakeModelOptions& o, const BuiltTokenizer& tok);

Status check_deepseek_v4_options(const MakeModelOptions& o);
std::vector<PendingTensor> deepseek_v4_tensors(const MakeModelOptions& o);
nlohmann::ordered_json deepseek_v4_config_json(const MakeModelOptions& o, const BuiltTokenizer& tok);

}  // namespace sluice
