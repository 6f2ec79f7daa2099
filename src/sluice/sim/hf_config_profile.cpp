// A dense profile from a Hugging Face model directory, through the model
// module's config.json parser (which rejects fields it does not understand).
#include <string>

#include "sluice/model/config.h"
#include "sluice/sim/model_profile.h"

namespace sluice::sim {

Result<ModelProfile> profile_from_hf_dir(const std::string& dir) {
  SLUICE_TRY_ASSIGN(config, load_model_config(dir));
  DenseShape shape;
  shape.name = dir;
  shape.num_layers = config.num_layers;
  shape.hidden_size = config.hidden_size;
  shape.num_attention_heads = config.num_heads;
  shape.num_kv_heads = config.num_kv_heads;
  shape.head_dim = config.head_dim;
  shape.intermediate_size = config.intermediate_size;
  shape.vocab_size = config.vocab_size;
  shape.max_position_embeddings = config.max_position_embeddings;
  shape.tie_word_embeddings = config.tie_word_embeddings;
  shape.dtype_bytes = 2;  // served in bf16 whatever the checkpoint's dtype
  ModelProfile profile = make_dense_profile(shape);
  profile.source = dir + "/config.json (" + architecture_name(config.architecture) + ", served in bf16)";
  return profile;
}

}  // namespace sluice::sim
