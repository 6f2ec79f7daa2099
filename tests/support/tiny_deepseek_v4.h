// The tiny random-weight DeepSeek-V4 the model and engine tests make: one
// layer of each kind (sliding, CSA at rate 4 with its indexer keeping 4 of
// its entries, HCA at rate 16), window 8, 4 experts; f32 weights.
#pragma once

#include <cstdint>
#include <string>

#include "sluice/model/make_model.h"

namespace sluice::testing {

inline constexpr std::int32_t kTinyDeepseekV4Vocab = 320;

inline MakeModelOptions tiny_deepseek_v4_options(const std::string& dir, std::uint64_t seed) {
  MakeModelOptions o;
  o.architecture = Architecture::deepseek_v4;
  o.num_layers = 3;
  o.hidden_size = 32;
  o.num_heads = 2;
  o.head_dim = 16;
  o.vocab_size = kTinyDeepseekV4Vocab;
  o.dtype = DType::f32;
  o.seed = seed;
  o.deepseek_v4.q_lora_rank = 16;
  o.deepseek_v4.o_lora_rank = 8;
  o.deepseek_v4.index_head_dim = 8;
  o.deepseek_v4.index_n_heads = 4;
  o.deepseek_v4.n_routed_experts = 4;
  o.deepseek_v4.moe_intermediate_size = 16;
  o.out_dir = dir;
  return o;
}

}  // namespace sluice::testing
