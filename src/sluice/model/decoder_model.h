// DecoderModel: one architecture written against Ops, as ModelRunner sees it:
// the KV geometry it needs and the forward pass of a step. The dense Llama
// family (llama.h), DeepSeek-V3 (deepseek_v3.h) and DeepSeek-V4 on the CPU
// (deepseek_v4_model.h) implement it.
#pragma once

#include <memory>

#include "sluice/backend/ops.h"
#include "sluice/dist/communicator.h"
#include "sluice/model/config.h"
#include "sluice/model/kv_cache_dtype.h"
#include "sluice/model/safetensors.h"
#include "sluice/model/weight_binder.h"

namespace sluice {

class DecoderModel {
 public:
  virtual ~DecoderModel() = default;

  virtual const ModelConfig& config() const = 0;
  // (optional) Fixes the KV block size, before kv_cache_spec: an architecture
  // whose paged state depends on it (DeepSeek-V4: block boundaries on
  // compression windows) refuses a size it cannot use.
  virtual Status set_kv_block_size(std::int32_t block_size_tokens) {
    (void)block_size_tokens;
    return Ok{};
  }
  // (optional) How the KV cache stores its values, before set_kv_block_size:
  // an architecture (or backend) without an FP8 layout refuses kFp8.
  virtual Status set_kv_cache_dtype(KvCacheDtype dtype) {
    if (dtype == KvCacheDtype::kAuto) return Ok{};
    return Error{"--kv-cache-dtype fp8: this architecture keeps its KV cache in the model's dtype (only deepseek_v4 "
                 "on --device cuda has an FP8 layout: fp8_ds_mla records)",
                 ErrorCode::kInvalidArgument};
  }
  // The paged cache this architecture writes: K and V per head (dense), one
  // latent per position (MLA) or an area it lays out itself (DeepSeek-V4).
  // Its bytes per block size the KV pool.
  virtual KvCacheSpec kv_cache_spec(std::int32_t num_blocks, std::int32_t block_size_tokens) const = 0;
  // Runs the step's rows through the model; returns logits [num sample rows, vocab].
  virtual Result<Tensor> forward(Ops& ops, const StepLayout& layout) const = 0;
};

// The end of every decoder: residual += block_out, the final norm, then the
// logits [num sample rows, vocab] of the rows that sample.
struct FinalLogitsInputs {
  Tensor residual;    // [rows, hidden], the stream before the last block's output
  Tensor block_out;   // [rows, hidden], the last block's output
  Tensor final_norm;  // [hidden]
  float eps = 1e-6f;
  Tensor lm_head;     // [vocab, hidden]
  Tensor normed;      // [rows, hidden] workspace
};
Tensor final_logits(Ops& ops, const StepLayout& layout, const FinalLogitsInputs& in);

// Whether `num_ranks` tensor-parallel ranks can split this model, the message
// starting with the flag, as serve's flag checks report refusals. The dense
// family: heads, KV heads, MLP width and vocabulary divisible. DeepSeek-V3:
// heads, vocabulary, the dense and shared-expert MLP widths, and the routed
// experts (expert_parallel: their count, else each expert's width).
// expert_parallel on a model without experts is refused, as sim refuses it.
Status check_tensor_parallel(const ModelConfig& config, std::int32_t num_ranks, bool expert_parallel = false);

// Checks every tensor's name and shape against the config, rejects tensors the
// architecture does not use, and uploads the weights through `ops`. With a
// communicator of size > 1, this rank's tensor-parallel share of them, routed
// experts split whole over the ranks when expert_parallel
// (--enable-expert-parallel).
Result<std::unique_ptr<DecoderModel>> load_decoder_model(const ModelConfig& config, const Checkpoint& checkpoint,
                                                         Ops& ops, const LoadProgress& progress,
                                                         Communicator* comm = nullptr, bool expert_parallel = false);

}  // namespace sluice
