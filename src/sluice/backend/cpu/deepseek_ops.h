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

void rope_partial(ThreadPool& pool, const StepLayout& layout, Tensor x, std::int32_t head_stride,
                  std::int32_t rotary_offset, const RopeParams& params);

void mla_attention(ThreadPool& pool, const StepLayout& layout, const LatentCacheView& cache, const Tensor& q,
                   const Tensor& latent, const Tensor& k_rope, const Tensor& kv_b_proj, const MlaShape& shape,
                   Tensor out);

void moe_route(ThreadPool& pool, const Tensor& router_logits, const Tensor& correction_bias,
               const MoeRouting& routing, Tensor expert_ids, Tensor expert_weights);

void moe_experts(ThreadPool& pool, const Tensor& x, const Tensor& w_gate_up, const Tensor& w_down,
                 const Tensor& expert_ids, const Tensor& expert_weights, Tensor out);

}  // namespace sluice::cpu
