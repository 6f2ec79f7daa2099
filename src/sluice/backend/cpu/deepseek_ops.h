// The CPU reference of the DeepSeek-V3 ops (ops.h): partial and interleaved
// rope, MLA over the latent cache in its two forms, and DeepSeekMoE routing
// and experts. Free functions over the CPU backend's state, called by CpuOps.
#pragma once

#include <vector>

#include "sluice/backend/cpu/thread_pool.h"
#include "sluice/backend/ops.h"

namespace sluice::cpu {

// The paged latent cache of one layer: [num_blocks, block_size_tokens, width]
// with width = kv_lora_rank + qk_rope_head_dim, [latent | k_rope] per slot.
struct LatentCacheView {
  float* data = nullptr;
  const KvCacheSpec* spec = nullptr;

  float* slot(const SequenceLayout& seq, std::int64_t position) const;
};

// The step the ops run in.
struct CpuStep {
  ThreadPool& pool;
  const StepLayout& layout;
};

// Where rope_partial rotates within each head.
struct RotaryRange {
  std::int32_t head_stride = 0;    // x holds heads of this many dims
  std::int32_t rotary_offset = 0;  // the first rotated dim of a head
};

void rope_partial(const CpuStep& step, Tensor x, const RotaryRange& range, const RopeParams& params);

void mla_attention(const CpuStep& step, const LatentCacheView& cache, const MlaInputs& in, const MlaShape& shape,
                   Tensor out);

void moe_route(ThreadPool& pool, const Tensor& router_logits, const Tensor& correction_bias,
               const MoeRouting& routing, const MoeAssignment& out);

void moe_experts(ThreadPool& pool, const Tensor& x, const MoeExpertWeights& experts, const MoeAssignment& assignment,
                 Tensor out);

}  // namespace sluice::cpu
