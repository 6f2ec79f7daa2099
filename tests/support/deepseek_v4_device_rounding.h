// The CPU reference's V4 kernels with the device forward's roundings
// (model/cuda/deepseek_v4_forward.h), so that the CPU can say how far those
// roundings alone move the logits, and the device can be held to the
// rounded reference tightly:
//   - every linear: input and weight rounded to bf16 (the bf16 GEMMs), f32 sums;
//   - the experts: x, gate/up and down weights in bf16, the clamped SwiGLU's
//     output rounded to bf16 (the down GEMM's input), f32 sums;
//   - the sparse attention: queries and keys in bf16.
// Everything else (norms, ropes, mHC, routing, compression) as the reference.
// DeviceRoundingKernels::e4m3_activations() adds, where the device forward's
// default FP8 GEMMs (Fp8DenseGemm::cublaslt, MoeExpertGemm::fp8_wgmma) put
// them, the roundings of their inputs to e4m3 per 1x128 block (scale
// amax / 448, launch_quantize_fp8_rows' rule): a linear stored FP8 (its
// dequantized values have at most 3 significand bits, which a bf16-stored
// weight's 8 random ones never all do) with K a multiple of 128 over more
// than 16 rows of the step (cuBLASLt's path of fp8_matmul.h); the routed experts' input
// and activation at every size, their gate/up and down outputs in bf16 (the
// wgmma kernel's); the shared expert's input and activation over more than
// 16 rows (the rows of the step: those of the linear before it, the router).
// Also the make-model options of the checkpoint the device goldens run: V4-Flash's
// head widths (the kernels' widths) on a narrow, shallow body.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "sluice/backend/cpu/deepseek_v4_ops.h"
#include "sluice/backend/float_convert.h"
#include "sluice/model/deepseek_v4_fp8_ds_mla.h"
#include "sluice/model/make_model.h"

namespace sluice::testing {

// Bounds of the device goldens (max |Δlogit| / max |logit| on
// deepseek_v4_flash_width_options' checkpoints over the device golden's
// steps), each twice what the CPU measures
// (tests/model/deepseek_v4_device_rounding_test.cpp, which fails if the
// measure passes half the bound):
//  - cost: against the exact reference, what the device's roundings cost;
//  - spread: against the reference with those roundings, what one f32 ulp of
//    noise (other summation orders) costs once those roundings amplify it.
// Measured on the CPU (2026-12-03, 3 noise seeds):
//   f32 checkpoint, bf16 roundings:           cost 1.83e-2, spread 8.15e-3
//   FP8 + FP4 experts (widths 128), bf16:     cost 3.90e-2, spread 2.46e-2
//   FP8 + FP8 experts (widths 128), bf16:     cost 2.17e-1, spread 4.86e-2
//   FP8 + FP4 experts, e4m3 activations:      cost 3.80e-1, spread 5.30e-1
//   FP8 + FP8 experts, e4m3 activations:      cost 3.83e-1, spread 3.84e-1
// The FP8 + FP8 bf16 row is chaotic too, at some steps: over 16 seeds
// (2026-12-04) one ulp moves its logits by 0.218-0.230 at prefill 2 B (5
// seeds) and decode 0 A (2 seeds; seeds 12 and 14), 0.049 at most over the
// first 3. Session 22's warpgroup-MMA attention (another summation order)
// lands there on the H200: 0.231 at decode 0 A. Its spread bound is twice
// the 16 seeds' 0.23.
// The bf16 rows are what the device's FP8 weights give with bf16 activations
// (Fp8DenseGemm::kernel, MoeExpertGemm::grouped): e4m3 x 2^k is a bf16, so
// those GEMMs compute the bf16 path's numbers. Under e4m3 activations these
// random models are chaotic: one ulp of noise moves a rounding to e4m3's
// 3-bit significand, a routing pick flips, and the logits move by a third
// of their scale or more; so the e4m3 bounds (1 and more) only catch gross
// errors (a wrong scale, layout or offset gives NaN or logits many times
// their scale), and the e4m3 kernels are held tightly by their own tests
// (V3's cuBLASLt block-scaled and grouped_gemm_fp8 tests in cuda_kernel_test).
// The greedy picks of these random models come as close as 1.2e-3 to a tie,
// so a token is only compared where the margin exceeds twice the bound.
enum class DeepseekV4GoldenWeights { f32, fp8_fp4_experts, fp8_fp8_experts };
struct DeepseekV4GoldenBounds {
  float cost = 0.0f, spread = 0.0f;
};
inline DeepseekV4GoldenBounds deepseek_v4_device_bounds(DeepseekV4GoldenWeights weights, bool e4m3 = false) {
  switch (weights) {
    case DeepseekV4GoldenWeights::f32: return {4e-2f, 2e-2f};
    case DeepseekV4GoldenWeights::fp8_fp4_experts: return e4m3 ? DeepseekV4GoldenBounds{1.0f, 1.2f}
                                                               : DeepseekV4GoldenBounds{1e-1f, 6e-2f};
    case DeepseekV4GoldenWeights::fp8_fp8_experts: return e4m3 ? DeepseekV4GoldenBounds{1.0f, 1.0f}
                                                               : DeepseekV4GoldenBounds{5e-1f, 5e-1f};
  }
  return {};
}
inline constexpr float kDeepseekV4DeviceRoundingBoundF32 = 4e-2f;  // the f32 checkpoint's cost (engine goldens)
// The f32 checkpoint with fp8_ds_mla KV records on top of the bf16 roundings
// (DeviceRoundingKernels::set_fp8_kv_records; DeepseekV4DeviceRoundingFp8Kv
// measures it). On the CPU (2026-12-05): cost 0.383 (0.058-0.123 at 15 of the
// golden's 16 sequence steps, 0.383 at decode 0 B, the step the FP8 rows show
// chaotic too), spread 0.124 over 16 noise seeds (at that step; 0.04 at most
// elsewhere). This random model was not trained with FP8 keys, as DeepSeek's
// are, so the cost says what the records do to its attention, not what they
// do to V4-Flash's; the spread is what holds the device to the emulation.
inline constexpr DeepseekV4GoldenBounds kDeepseekV4DeviceBoundsFp8Kv{0.8f, 0.25f};  // the f32 checkpoint's cost (engine goldens)

// The engine golden's generation (the f32 checkpoint, a 61-token prompt in
// chunks of 23, then 12 greedy steps) is chaotic at one step: one f32 ulp of
// noise in the linears' and the attention's outputs moves the rounded
// reference's logits at step 10 by up to 0.171 of their scale (2 of 6 noise
// seeds; 0.02 in the others: a near tie of this random model flips), with
// its tokens unchanged. A summation order is such noise, so a correct kernel
// with another order can land on either side (session 18's tensor-core
// attention: 0.169 at the worst step on the H200). Per step, the largest
// move over the 6 seeds, measured on the CPU (2026-12-04: 0.0252 0.0134
// 0.0171 0.0233 0.0270 0.0282 0.0233 0.0272 0.0256 0.0365 0.171 0.0204;
// DeepseekV4DeviceRoundingGeneration.EngineFlowSpreadStaysWithinItsRecord),
// rounded up by ~10%; the engine golden holds step i to
// max(kDeepseekV4DeviceRoundingBoundF32, 2 * spread[i]).
inline constexpr std::array<float, 12> kDeepseekV4EngineFlowSpreadF32 = {
    0.028f, 0.015f, 0.019f, 0.026f, 0.030f, 0.031f, 0.026f, 0.030f, 0.028f, 0.040f, 0.19f, 0.023f};
inline DType deepseek_v4_golden_dtype(DeepseekV4GoldenWeights w) {
  return w == DeepseekV4GoldenWeights::f32 ? DType::f32 : DType::f8_e4m3;
}
inline const char* deepseek_v4_golden_name(DeepseekV4GoldenWeights w) {
  switch (w) {
    case DeepseekV4GoldenWeights::f32: return "f32";
    case DeepseekV4GoldenWeights::fp8_fp4_experts: return "fp8_fp4_experts";
    case DeepseekV4GoldenWeights::fp8_fp8_experts: return "fp8_fp8_experts";
  }
  return "";
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
// 8, CSA rate 4, HCA rate 16, 8 experts top 2. The FP8 checkpoint (dtype
// f8_e4m3: FP8 dense, FP4 routed experts, or FP8 ones with fp8_experts)
// takes hidden, q_lora, o_lora and the experts' width at 128, so that every
// FP8 kernel of the device forward takes it (128-row scale blocks).
inline MakeModelOptions deepseek_v4_flash_width_options(const std::string& dir, std::int32_t vocab,
                                                        DType dtype = DType::f32, bool fp8_experts = false) {
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
  if (dtype == DType::f8_e4m3) {
    o.hidden_size = 128;
    d.q_lora_rank = 128;
    d.o_lora_rank = 128;
    d.moe_intermediate_size = 128;
    d.fp8_experts = fp8_experts;
  }
  o.out_dir = dir;
  return o;
}

inline MakeModelOptions deepseek_v4_golden_options(const std::string& dir, std::int32_t vocab,
                                                   DeepseekV4GoldenWeights w) {
  return deepseek_v4_flash_width_options(dir, vocab, deepseek_v4_golden_dtype(w),
                                         w == DeepseekV4GoldenWeights::fp8_fp8_experts);
}

// With noise_seed set, every linear's and the attention's f32 outputs are
// also scaled by 1 + u, u uniform in +-2^-23 (one f32 ulp: what another
// summation order, the device's, changes), to measure how far such noise
// alone moves the logits once the bf16 roundings amplify it.
class DeviceRoundingKernels final : public DeepseekV4Kernels {
 public:
  DeviceRoundingKernels() = default;
  explicit DeviceRoundingKernels(std::uint64_t noise_seed) : noisy_(true), rng_(noise_seed) {}
  static std::unique_ptr<DeviceRoundingKernels> e4m3_activations(std::optional<std::uint64_t> noise_seed = {}) {
    auto k = noise_seed ? std::make_unique<DeviceRoundingKernels>(*noise_seed) : std::make_unique<DeviceRoundingKernels>();
    k->e4m3_ = true;
    return k;
  }
  // The sparse attention's keys as fp8_ds_mla records hold them (CUDA's
  // blocks under --kv-cache-dtype fp8, DeepseekV4KvFormats::cuda_fp8()): every
  // window latent and compressed entry encoded and decoded
  // (model/deepseek_v4_fp8_ds_mla.h), its last rope_dim values roped.
  void set_fp8_kv_records(std::int64_t rope_dim) { fp8_kv_rope_dim_ = rope_dim; }

  void linear(std::span<const float> x, std::span<const float> w, std::int64_t in, std::span<float> y) const override {
    // The reference runs wo_a a row at a time; the device over the step's
    // rows: a one-row call keeps the rows of the last wider one (the goldens'
    // steps have two rows or more).
    if (const auto rows = static_cast<std::int64_t>(x.size()) / in; rows > 1) step_rows_ = rows;
    const bool e4m3 = e4m3_ && in % kBlock == 0 && step_rows_ > kKernelMaxRows &&
                      (static_cast<std::int64_t>(w.size()) / in) % 16 == 0 && fp8_values(w);
    k_.linear(e4m3 ? e4m3_blocks(x) : bf16(x), bf16(w), in, y);
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
  std::vector<std::int64_t> indexer_top_k(std::span<const float> q, std::span<const float> weights,
                                          std::span<const float> keys, std::int64_t head_dim, std::int64_t visible,
                                          std::int64_t top_k) const override {
    return k_.indexer_top_k(q, weights, keys, head_dim, visible, top_k);
  }
  void sink_attention(std::span<const float> q, std::span<const float> keys, std::span<const float> sinks,
                      const SinkAttentionShape& shape, std::span<float> out) const override {
    k_.sink_attention(bf16(q), fp8_kv_rope_dim_ >= 0 ? fp8_ds_mla_keys(keys, shape.head_dim) : bf16(keys), sinks,
                      shape, out);
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
    // The reference passes the shared expert with weight 1 (a routed one's is
    // a normalized score times routed_scaling_factor: never exactly 1 here).
    const bool shared = weight == 1.0f;
    const bool e4m3 = e4m3_ && hidden % kBlock == 0 && inter % kBlock == 0 && fp8_values(gate_up) &&
                      (!shared || step_rows_ > kKernelMaxRows);
    const bool bf16_out = e4m3 && !shared;  // the wgmma kernel's outputs
    const std::vector<float> xb = e4m3 ? e4m3_blocks(x) : bf16(x), gu = bf16(gate_up), dn = bf16(down);
    const auto out_rounded = [&](double v) { return bf16_out ? round(static_cast<float>(v)) : static_cast<float>(v); };
    std::vector<float> act(static_cast<std::size_t>(inter));
    for (std::int64_t i = 0; i < inter; ++i) {
      const float gate = std::min(out_rounded(dot(gu.data() + i * hidden, xb.data(), hidden)), limit);
      const float up = std::clamp(out_rounded(dot(gu.data() + (inter + i) * hidden, xb.data(), hidden)), -limit, limit);
      act[static_cast<std::size_t>(i)] =
          round(static_cast<float>(gate / (1.0 + std::exp(-static_cast<double>(gate)))) * up * noise());
    }
    if (e4m3) act = e4m3_blocks(act);
    for (std::int64_t h = 0; h < hidden; ++h)
      out[static_cast<std::size_t>(h)] += out_rounded(dot(dn.data() + h * inter, act.data(), inter)) * noise() * weight;
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
  // Each 128-wide block of each row of x: e4m3(v / s) * s, s = amax / 448
  // (launch_quantize_fp8_rows' rule; a zero block stays zero).
  static std::vector<float> e4m3_blocks(std::span<const float> x) {
    std::vector<float> out(x.begin(), x.end());
    for (std::size_t b = 0; b < out.size(); b += kBlock) {
      const std::size_t end = std::min(out.size(), b + kBlock);
      float amax = 0.0f;
      for (std::size_t i = b; i < end; ++i) amax = std::max(amax, std::fabs(round(out[i])));
      const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
      for (std::size_t i = b; i < end; ++i) out[i] = fp8_e4m3_to_f32(f32_to_fp8_e4m3(round(out[i]) / s)) * s;
    }
    return out;  // blocks never straddle rows: callers' widths are multiples of 128
  }
  // Whether w's first values have at most 3 significand bits (e4m3 or e2m1 times a power of two).
  static bool fp8_values(std::span<const float> w) {
    for (std::size_t i = 0; i < std::min<std::size_t>(w.size(), 256); ++i) {
      std::uint32_t bits = 0;
      std::memcpy(&bits, &w[i], 4);
      if ((bits & 0xfffffu) != 0) return false;
    }
    return true;
  }
  std::vector<float> fp8_ds_mla_keys(std::span<const float> keys, std::int64_t head_dim) const {
    const Fp8DsMlaShape shape{.head_dim = head_dim, .rope_dim = fp8_kv_rope_dim_};
    std::vector<float> out(keys.size());
    std::vector<std::uint8_t> record(static_cast<std::size_t>(shape.bytes()));
    for (std::size_t k = 0; k < keys.size(); k += static_cast<std::size_t>(head_dim)) {
      fp8_ds_mla_encode(shape, keys.subspan(k, static_cast<std::size_t>(head_dim)), record);
      fp8_ds_mla_decode(shape, record, std::span(out).subspan(k, static_cast<std::size_t>(head_dim)));
    }
    return out;
  }
  static constexpr std::int64_t kBlock = 128;
  static constexpr std::int64_t kKernelMaxRows = 16;  // fp8_matmul.h's kFp8KernelMaxRows
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
  bool e4m3_ = false;
  std::int64_t fp8_kv_rope_dim_ = -1;  // >= 0: the attention's keys as fp8_ds_mla records
  mutable std::int64_t step_rows_ = 0;  // rows of the last linear over more than one: the step's
  mutable std::mt19937_64 rng_;
};

}  // namespace sluice::testing
