// MemoryPlan: where one GPU's memory goes for a profile and a parallelism
// (weights, activations, KV) and how many KV tokens and blocks that leaves.
// Shared by the sim backend (its num_kv_blocks) and `sluice plan`.
#pragma once

#include "sluice/model/kv_cache_dtype.h"
#include <cstdint>
#include <string>

#include "sluice/sim/hardware.h"
#include "sluice/sim/model_profile.h"
#include "sluice/sim/parallelism.h"

namespace sluice::sim {

using sluice::KvCacheDtype;

struct MemoryOptions {
  double gpu_memory_utilization = 0.9;   // share of HBM sluice may use
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kAuto;
  std::int32_t max_num_seqs = 64;        // per-sequence state (window rings) is reserved for each
  std::int32_t max_num_batched_tokens = 8192;  // activations are sized for this many tokens
  std::int32_t block_size_tokens = 16;
  std::int32_t max_model_len_tokens = 0;  // 0: the profile's max_position_embeddings
};

struct MemoryPlan {
  // Per GPU.
  double budget_bytes = 0;              // capacity x utilization
  double weight_bytes = 0;
  double activation_bytes = 0;         // runtime reserve + per-token buffers + logits + workspace
  double sequence_state_bytes = 0;      // max_num_seqs x window rings
  double kv_bytes = 0;                  // what is left for the paged KV cache (may be < 0)
  double kv_bytes_per_token = 0;        // on one GPU (replicated or sharded by TP)
  // Whole instance (all data-parallel replicas).
  std::int64_t kv_capacity_tokens = 0;
  std::int32_t num_kv_blocks = 0;
  double host_table_bytes = 0;          // in host RAM, whole instance

  bool fits() const { return kv_bytes > 0 && num_kv_blocks > 0; }
};

// Why a plan does not fit, as one line: "weights 308.9 GB + activations ... =
// 320.7 GB per GPU, budget 126.9 GB (short by 193.8 GB)". `sluice plan` and the
// sim server both say it.
std::string describe_shortfall(const MemoryPlan& plan);

// Bytes of the KV cache per token for the chosen dtype, whole model.
double kv_bytes_per_token(const ModelProfile& profile, KvCacheDtype dtype);

MemoryPlan plan_memory(const ModelProfile& profile, const HardwareSpec& hardware,
                       const Parallelism& parallelism, const MemoryOptions& options);

}  // namespace sluice::sim
