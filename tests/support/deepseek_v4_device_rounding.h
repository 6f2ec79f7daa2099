// The CPU reference's V4 kernels with the device forward's roundings
// (model/cuda/deepseek_v4_forward.h), so that the CPU can say how far those
// roundings alone move the logits, and the device can be held to the
// rounded reference tightly:
//   - every linear: input and weight rounded to bf16 (the bf16 GEMMs), f32 sums;
//   - the experts: x, gate/up and down weights in bf16, the clamped SwiGLU's
//     output rounded to bf16 (the down GEMM's input), f32 sums;
//   - the sparse attention: queries and keys in bf16.
// Everything else (norms, ropes, mHC, routing, compression) as the reference.
// Also the make-model options of the checkpoint the device goldens run: V4-Flash's
// head widths (the kernels' widths) on a narrow, shallow body.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "sluice/backend/cpu/deepseek_v4_ops.h"
#include "sluice/backend/float_convert.h"
#include "sluice/model/make_model.h"

namespace sluice::testing {

// Bounds of the device goldens (max |Δlogit| / max |logit| on
// deepseek_v4_flash_width_options' checkpoints over the device golden's
// steps), each twice what the CPU measures
// (tests/model/deepseek_v4_device_rounding_test.cpp, which fails if the
// measure passes half the bound):
//  - against the exact reference: what the device's bf16 roundings cost;
//  - against the reference with those roundings: what one f32 ulp of noise
//    (other summation orders) costs once those roundings amplify it.
// Measured on the CPU (2026-12-03): cost 1.83e-2 (f32 weights) and 9.43e-2
// (FP8 / FP4-expert weights, whose logits are more sensitive); spread 8.15e-3
// and 2.30e-2 (3 noise seeds). The greedy picks of these random models come
// as close as 1.2e-3 to a tie, so a token is only compared where the margin
// exceeds twice the bound.
inline constexpr float kDeepseekV4DeviceRoundingBoundF32 = 4e-2f;
inline constexpr float kDeepseekV4DeviceRoundingBoundFp8 = 2e-1f;
inline constexpr float kDeepseekV4DeviceSpreadBoundF32 = 2e-2f;
inline constexpr float kDeepseekV4DeviceSpreadBoundFp8 = 5e-2f;
inline float deepseek_v4_device_rounding_bound(DType weights) {
  return weights == DType::f32 ? kDeepseekV4DeviceRoundingBoundF32 : kDeepseekV4DeviceRoundingBoundFp8;
}
inline float deepseek_v4_device_spread_bound(DType weights) {
  return weights == DType::f32 ? kDeepseekV4DeviceSpreadBoundF32 : kDeepseekV4DeviceSpreadBoundFp8;
}

// (top - second) / max |v|: how far the greedy pick is from a tie.
inline float greedy_margin(std::span<const float> v) {
  std::vector<float> sorted(v.begin(), v.end());
  std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
  float top = 0.0f;
  for (float x : v) top = std::max(top, std::fabs(x));
  return (sorted[0] - sorted[1]) / std::max(top, 1e-30f);
}

// max |a - b| / max |b| (infinite where a is not finite).
inline float scaled_error(std::span<const float> a, std::span<const float> b) {
  float diff = 0.0f, top = 0.0f;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    diff = std::max(diff, std::fabs(a[i] - b[i]));
    top = std::max(top, std::fabs(b[i]));
  }
  return diff / std::max(top, 1e-30f);
}

inline std::int32_t argmax(std::span<const float> v) {
  return static_cast<std::int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// 4 layers (sliding, CSA, HCA, CSA; the first hash-routed), hidden 64, 4
// heads of 512 (64 rope dims), index heads 4 x 128, index_topk 32, window
// 8, CSA rate 4, HCA rate 16, 8 experts top 2.
inline MakeModelOptions deepseek_v4_flash_width_options(const std::string& dir, std::int32_t vocab,
                                                        DType dtype = DType::f32) {
  MakeModelOptions o;
  o.architecture = Architecture::deepseek_v4;
  o.num_layers = 4;
  o.hidden_size = 64;
  o.num_heads = 4;
  o.head_dim = 512;
  o.vocab_size = vocab;
  o.dtype = dtype;
  o.seed = 11;
  DeepseekV4Shape& d = o.deepseek_v4;
  std::strcpy(d.layer_types.data(), "schc");
  d.q_lora_rank = 64;
  d.qk_rope_head_dim = 64;
  d.o_groups = 2;
  d.o_lora_rank = 32;
  d.csa_compress_rate = 4;
  d.hca_compress_rate = 16;
  d.sliding_window = 8;
  d.index_n_heads = 4;
  d.index_head_dim = 128;
  d.index_topk = 32;
  d.num_hash_layers = 1;
  d.n_routed_experts = 8;
  d.num_experts_per_tok = 2;
  d.moe_intermediate_size = 64;
  o.out_dir = dir;
  return o;
}

// With noise_seed set, every linear's and the attention's f32 outputs are
// also scaled by 1 + u, u uniform in +-2^-23 (one f32 ulp: what another
// summation order, the device's, changes), to measure how far such noise
// alone moves the logits once the bf16 roundings amplify it.
class DeviceRoundingKernels final : public DeepseekV4Kernels {
 public:
  DeviceRoundingKernels() = default;
  explicit DeviceRoundingKernels(std::uint64_t noise_seed) : noisy_(true), rng_(noise_seed) {}

  void linear(std::span<const float> x, std::span<const float> w, std::int64_t in, std::span<float> y) const override {
    k_.linear(bf16(x), bf16(w), in, y);
    add_noise(y);
  }
  void rms_norm(std::span<float> x, std::int64_t dim, std::span<const float> w, float eps) const override {
    k_.rms_norm(x, dim, w, eps);
  }
  void rope_tail(std::span<float> x, std::int64_t dim, std::int64_t pieces, std::span<const std::int64_t> positions,
                 const RotaryTable& rope, bool inverse) const override {
    k_.rope_tail(x, dim, pieces, positions, rope, inverse);
  }
  void hc_pre(std::span<const float> streams, const HyperConnectionWeights& w, const HyperConnectionShape& shape,
              HyperConnectionMix& out) const override {
    k_.hc_pre(streams, w, shape, out);
  }
  void hc_post(std::span<float> streams, std::span<const float> y, const HyperConnectionMix& mix,
               const HyperConnectionShape& shape) const override {
    k_.hc_post(streams, y, mix, shape);
  }
  void hc_head(std::span<const float> streams, const HyperConnectionWeights& w, const HyperConnectionShape& shape,
               std::span<float> out) const override {
    k_.hc_head(streams, w, shape, out);
  }
  void softmax_pool(std::span<const float> values, std::span<const float> gates, std::int64_t dim,
                    std::span<float> out) const override {
    k_.softmax_pool(values, gates, dim, out);
  }
  std::vector<std::int64_t> indexer_top_k(std::span<const float> q, std::span<const float> weights,
                                          std::span<const float> keys, std::int64_t head_dim, std::int64_t visible,
                                          std::int64_t top_k) const override {
    return k_.indexer_top_k(q, weights, keys, head_dim, visible, top_k);
  }
  void sink_attention(std::span<const float> q, std::span<const float> keys, std::span<const float> sinks,
                      const SinkAttentionShape& shape, std::span<float> out) const override {
    k_.sink_attention(bf16(q), bf16(keys), sinks, shape, out);
    add_noise(out);
  }
  void route_sqrtsoftplus(std::span<const float> logits, std::span<const float> bias,
                          std::span<const std::int32_t> hash_experts, std::int64_t k, float scale,
                          std::span<std::int32_t> ids, std::span<float> weights) const override {
    k_.route_sqrtsoftplus(logits, bias, hash_experts, k, scale, ids, weights);
  }
  // DeepseekV4CpuKernels::clamped_swiglu with the device's roundings.
  void clamped_swiglu(std::span<const float> x, std::span<const float> gate_up, std::span<const float> down,
                      float limit, float weight, std::span<float> out) const override {
    const auto hidden = static_cast<std::int64_t>(x.size());
    const auto inter = static_cast<std::int64_t>(gate_up.size()) / (2 * hidden);
    const std::vector<float> xb = bf16(x), gu = bf16(gate_up), dn = bf16(down);
    std::vector<float> act(static_cast<std::size_t>(inter));
    for (std::int64_t i = 0; i < inter; ++i) {
      const float gate = std::min(static_cast<float>(dot(gu.data() + i * hidden, xb.data(), hidden)), limit);
      const float up =
          std::clamp(static_cast<float>(dot(gu.data() + (inter + i) * hidden, xb.data(), hidden)), -limit, limit);
      act[static_cast<std::size_t>(i)] =
          round(static_cast<float>(gate / (1.0 + std::exp(-static_cast<double>(gate)))) * up * noise());
    }
    for (std::int64_t h = 0; h < hidden; ++h)
      out[static_cast<std::size_t>(h)] +=
          static_cast<float>(dot(dn.data() + h * inter, act.data(), inter)) * noise() * weight;
  }

 private:
  float noise() const {
    if (!noisy_) return 1.0f;
    return 1.0f + std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng_) * 0x1p-23f;
  }
  void add_noise(std::span<float> y) const {
    if (noisy_)
      for (float& v : y) v *= noise();
  }
  static float round(float v) { return bf16_to_f32(f32_to_bf16(v)); }
  static std::vector<float> bf16(std::span<const float> v) {
    std::vector<float> out(v.begin(), v.end());
    for (float& x : out) x = round(x);
    return out;
  }
  static double dot(const float* a, const float* b, std::int64_t n) {
    double s = 0.0;
    for (std::int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
    return s;
  }
  cpu::DeepseekV4CpuKernels k_;
  bool noisy_ = false;
  mutable std::mt19937_64 rng_;
};

}  // namespace sluice::testing
