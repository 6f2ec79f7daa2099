#include "sluice/model/decoder_model.h"

#include "sluice/model/deepseek_v3.h"
#include "sluice/model/llama.h"

namespace sluice {

Result<std::unique_ptr<DecoderModel>> load_decoder_model(const ModelConfig& config, const Checkpoint& checkpoint,
                                                         Ops& ops, const LoadProgress& progress) {
  if (config.architecture == Architecture::deepseek_v3) {
    SLUICE_TRY_ASSIGN(model, DeepseekV3Model::load(config, checkpoint, ops, progress));
    return std::unique_ptr<DecoderModel>(std::move(model));
  }
  SLUICE_TRY_ASSIGN(model, LlamaModel::load(config, checkpoint, ops, progress));
  return std::unique_ptr<DecoderModel>(std::move(model));
}

}  // namespace sluice
