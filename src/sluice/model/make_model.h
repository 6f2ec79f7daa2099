// make-model: writes a random-weight Hugging Face model directory (config.json,
// model.safetensors, tokenizer files, generation_config.json), bit-for-bit
// reproducible from the seed. Used for tests, goldens and the built-in default.
#pragma once

#include <cstdint>
#include <string>

#include "sluice/backend/tensor.h"
#include "sluice/common/result.h"
#include "sluice/model/config.h"

namespace sluice {

struct MakeModelOptions {
  Architecture architecture = Architecture::llama;
  std::int32_t num_layers = 2;
  std::int32_t hidden_size = 64;
  std::int32_t num_heads = 4;
  std::int32_t num_kv_heads = 2;
  std::int32_t intermediate_size = 128;
  std::int32_t vocab_size = 512;
  std::int32_t head_dim = 0;  // 0 = hidden / heads
  std::uint64_t seed = 0;
  DType dtype = DType::bf16;
  std::int32_t max_position_embeddings = 4096;
  std::string out_dir;
};

Status make_model(const MakeModelOptions& options);

}  // namespace sluice
