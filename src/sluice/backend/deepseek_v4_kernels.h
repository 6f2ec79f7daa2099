// The kernels DeepSeek-V4 adds to a decoder, as an interface the model module
// calls and a backend implements: hyper-connection mixing (mHC with Sinkhorn),
// softmax-pooled window compression, the lightning indexer's top-k, attention
// with a per-head sink over a gathered key set, sqrt(softplus) and hash
// routing, and the clamped SwiGLU expert.
//
// Issue 18 stages 1-2: host f32 rows only, implemented by the CPU backend
// (backend/cpu/deepseek_v4_ops.h; Ops::deepseek_v4_kernels hands them out)
// for the CPU reference and the engine's DeepseekV4Model. Every matrix is
// row-major; [a, b] below means a rows of b floats.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace sluice {

// One rotary embedding: inv_freq for the rotated pairs and YaRN's multiplier.
struct RotaryTable {
  std::vector<float> inv_freq;  // [rope_dim / 2]
  float cos_sin_scale = 1.0f;

  std::int64_t rope_dim() const { return 2 * static_cast<std::int64_t>(inv_freq.size()); }
};

// A hyper-connection site's parameters (attn_hc / ffn_hc; hc_head with comb absent).
struct HyperConnectionWeights {
  std::span<const float> fn;     // [(2 + hc) * hc, hc * hidden] (hc_head: [hc, hc * hidden])
  std::span<const float> base;   // [(2 + hc) * hc] (hc_head: [hc])
  std::span<const float> scale;  // [3]: pre, post, comb (hc_head: [1])
};

struct HyperConnectionShape {
  std::int64_t hc_mult = 4;
  std::int64_t hidden = 0;
  std::int32_t sinkhorn_iters = 20;
  float hc_eps = 1e-6f;
  float norm_eps = 1e-6f;  // the unweighted RMSNorm of the flattened streams
};

// One row's mixing weights: collapse by pre, expand by post, mix by comb.
struct HyperConnectionMix {
  std::vector<float> post;       // [hc]
  std::vector<float> comb;       // [hc, hc], comb[j * hc + k]: stream j's share of new stream k
  std::vector<float> collapsed;  // [hidden]: sum_j pre_j * stream_j
};

struct SinkAttentionShape {
  std::int64_t num_heads = 0;
  std::int64_t head_dim = 0;
  float softmax_scale = 1.0f;
};

class DeepseekV4Kernels {
 public:
  virtual ~DeepseekV4Kernels() = default;

  // y[n, out] = x[n, in] . w[out, in]^T, out = w.size() / in.
  virtual void linear(std::span<const float> x, std::span<const float> w, std::int64_t in, std::span<float> y) const = 0;
  // Each `dim`-wide piece of x: x * rsqrt(mean(x^2) + eps), times weight[dim] unless weight is empty.
  virtual void rms_norm(std::span<float> x, std::int64_t dim, std::span<const float> weight, float eps) const = 0;
  // Rotates the trailing rope_dim of each `dim`-wide piece of x; row r (of
  // pieces_per_row pieces) at positions[r]. Pairs (2i, 2i + 1) rotate as
  // complex numbers; `inverse` rotates by the negative angle.
  virtual void rope_tail(std::span<float> x, std::int64_t dim, std::int64_t pieces_per_row,
                         std::span<const std::int64_t> positions, const RotaryTable& rope, bool inverse) const = 0;

  // mHC, one row: streams [hc, hidden] -> pre/post/comb and the collapsed input.
  virtual void hc_pre(std::span<const float> streams, const HyperConnectionWeights& w,
                      const HyperConnectionShape& shape, HyperConnectionMix& out) const = 0;
  // streams_k <- post_k * y + sum_j comb[j, k] * streams_j, one row.
  virtual void hc_post(std::span<float> streams, std::span<const float> y, const HyperConnectionMix& mix,
                       const HyperConnectionShape& shape) const = 0;
  // The final collapse (hc_head): sum_j (sigmoid(mix_j * scale + base_j) + eps) * stream_j.
  virtual void hc_head(std::span<const float> streams, const HyperConnectionWeights& w,
                       const HyperConnectionShape& shape, std::span<float> out) const = 0;

  // The lightning indexer for one query: score_t = sum_h relu(q_h . k_t) *
  // head_dim^-0.5 * weights_h over the first num_visible keys [T, head_dim],
  // then the top min(top_k, num_visible) entries (ascending entry order).
  virtual std::vector<std::int64_t> indexer_top_k(std::span<const float> q, std::span<const float> weights,
                                                  std::span<const float> keys, std::int64_t head_dim,
                                                  std::int64_t num_visible, std::int64_t top_k) const = 0;

  // One query row q [heads, head_dim] over keys [m, head_dim] that are also
  // the values (shared K=V), with a per-head sink logit in the softmax's
  // denominator only: out [heads, head_dim].
  virtual void sink_attention(std::span<const float> q, std::span<const float> keys, std::span<const float> sinks,
                              const SinkAttentionShape& shape, std::span<float> out) const = 0;

  // sqrt(softplus(logits)) scores; the experts are `hash_experts` when given,
  // else the top k of scores + bias; weights = picked scores / their sum * scale.
  virtual void route_sqrtsoftplus(std::span<const float> logits, std::span<const float> bias,
                                  std::span<const std::int32_t> hash_experts, std::int64_t k, float scale,
                                  std::span<std::int32_t> expert_ids, std::span<float> expert_weights) const = 0;

  // out += weight * down . (silu(min(gate, limit)) * clamp(up, -limit, limit)),
  // [gate; up] = gate_up [2 * inter, hidden] . x, one row.
  virtual void clamped_swiglu(std::span<const float> x, std::span<const float> gate_up, std::span<const float> down,
                              float limit, float weight, std::span<float> out) const = 0;
};

}  // namespace sluice
