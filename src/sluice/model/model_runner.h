// ModelRunner: a Backend that computes batches with a model architecture on an
// Ops implementation (CPU or CUDA). It owns the checkpoint mapping, the uploaded
// weights and the KV cache geometry.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sluice/backend/backend.h"
#include "sluice/backend/ops.h"
#include "sluice/model/kv_cache_dtype.h"

namespace sluice {

struct ModelRunnerOptions {
  std::int32_t block_size_tokens = 16;
  std::int32_t num_kv_blocks = 0;           // 0 = derive from kv_cache_bytes
  std::int64_t kv_cache_bytes = 1LL << 30;  // used when num_kv_blocks == 0
  std::int32_t max_model_len_tokens = 0;    // 0 = the config's max_position_embeddings
  bool show_progress = false;               // weight-loading progress on stderr
  // > 0: size the KV pool after the weights are uploaded (--gpu-memory-utilization):
  // it gets what is left of this budget once the device memory in use at that
  // point (device_memory_total_bytes - Ops::device_memory_free_bytes(): weights,
  // scratch, the runtime's context, other processes) is taken away. Replaces
  // num_kv_blocks / kv_cache_bytes; fails on an Ops without device memory.
  std::int64_t device_memory_budget_bytes = 0;
  std::int64_t device_memory_total_bytes = 0;
  // With several ranks, MoE routed experts split whole over them (vLLM's
  // --enable-expert-parallel) instead of each expert's width.
  bool enable_expert_parallel = false;
  // --kv-cache-dtype: FP8 where the architecture and backend have an FP8 layout, else refused.
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kAuto;
};

Result<std::unique_ptr<Backend>> make_model_runner(const std::string& model_dir, std::unique_ptr<Ops> ops,
                                                   const ModelRunnerOptions& options);

// Tensor parallel over rank_ops.size() ranks: one Ops each (its KV pages,
// scratch and threads), a CpuCommunicatorGroup between them, each rank's
// forward on its own thread; rank 0's logits are sampled. One Ops is
// make_model_runner. Every rank has the same num_kv_blocks, each holding its
// share of the KV heads (dense) or the whole latent (MLA); kv_cache_bytes is
// all ranks' together. No host KV
// tier or device-memory sizing yet. A rank that fails (an error or an
// exception) aborts the group: the step fails with that rank's reason, and
// so does every later step.
Result<std::unique_ptr<Backend>> make_tensor_parallel_model_runner(const std::string& model_dir,
                                                                   std::vector<std::unique_ptr<Ops>> rank_ops,
                                                                   const ModelRunnerOptions& options);

}  // namespace sluice
