// The CPU implementation of DeepseekV4Kernels (backend/deepseek_v4_kernels.h):
// plain loops with double accumulators, the numerical reference the CUDA
// kernels of issue 18 stage 3 will be checked against.
#pragma once

#include "sluice/backend/deepseek_v4_kernels.h"

namespace sluice::cpu {

class DeepseekV4CpuKernels final : public DeepseekV4Kernels {
 public:
  void linear(std::span<const float> x, std::span<const float> w, std::int64_t in, std::span<float> y) const override;
  void rms_norm(std::span<float> x, std::int64_t dim, std::span<const float> weight, float eps) const override;
  void rope_tail(std::span<float> x, std::int64_t dim, std::int64_t pieces_per_row,
                 std::span<const std::int64_t> positions, const RotaryTable& rope, bool inverse) const override;
  void hc_pre(std::span<const float> streams, const HyperConnectionWeights& w, const HyperConnectionShape& shape,
              HyperConnectionMix& out) const override;
  void hc_post(std::span<float> streams, std::span<const float> y, const HyperConnectionMix& mix,
               const HyperConnectionShape& shape) const override;
  void hc_head(std::span<const float> streams, const HyperConnectionWeights& w, const HyperConnectionShape& shape,
               std::span<float> out) const override;
  std::vector<std::int64_t> indexer_top_k(std::span<const float> q, std::span<const float> weights,
                                          std::span<const float> keys, std::int64_t head_dim,
                                          std::int64_t num_visible, std::int64_t top_k) const override;
  void sink_attention(std::span<const float> q, std::span<const float> keys, std::span<const float> sinks,
                      const SinkAttentionShape& shape, std::span<float> out) const override;
  void route_sqrtsoftplus(std::span<const float> logits, std::span<const float> bias,
                          std::span<const std::int32_t> hash_experts, std::int64_t k, float scale,
                          std::span<std::int32_t> expert_ids, std::span<float> expert_weights) const override;
  void clamped_swiglu(std::span<const float> x, std::span<const float> gate_up, std::span<const float> down,
                      float limit, float weight, std::span<float> out) const override;
};

}  // namespace sluice::cpu
