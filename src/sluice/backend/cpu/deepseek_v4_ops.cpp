#include "sluice/backend/cpu/deepseek_v4_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "sluice/common/check.h"

namespace sluice::cpu {
namespace {

double dot(const float* a, const float* b, std::int64_t n) {
  double sum = 0.0;
  for (std::int64_t i = 0; i < n; ++i) sum += static_cast<double>(a[i]) * b[i];
  return sum;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// torch's softplus (beta 1, threshold 20): the identity above 20.
double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

// The flattened streams' unweighted RMSNorm, then fn . that: the mixes of a site.
std::vector<double> stream_mixes(std::span<const float> streams, std::span<const float> fn, std::int64_t num_mixes,
                                 float norm_eps) {
  const auto width = static_cast<std::int64_t>(streams.size());
  double sum_sq = 0.0;
  for (float v : streams) sum_sq += static_cast<double>(v) * v;
  const float inv_rms = static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(width) + norm_eps));
  std::vector<float> normed(streams.size());
  for (std::size_t i = 0; i < streams.size(); ++i) normed[i] = streams[i] * inv_rms;
  std::vector<double> mixes(static_cast<std::size_t>(num_mixes));
  for (std::int64_t m = 0; m < num_mixes; ++m) mixes[m] = dot(fn.data() + m * width, normed.data(), width);
  return mixes;
}

}  // namespace

void DeepseekV4CpuKernels::linear(std::span<const float> x, std::span<const float> w, std::int64_t in,
                                  std::span<float> y) const {
  SLUICE_CHECK(in > 0 && x.size() % in == 0 && w.size() % in == 0);
  const auto n = static_cast<std::int64_t>(x.size()) / in, out = static_cast<std::int64_t>(w.size()) / in;
  SLUICE_CHECK_EQ(static_cast<std::int64_t>(y.size()), n * out);
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t o = 0; o < out; ++o) y[r * out + o] = static_cast<float>(dot(x.data() + r * in, w.data() + o * in, in));
}

void DeepseekV4CpuKernels::rms_norm(std::span<float> x, std::int64_t dim, std::span<const float> weight,
                                    float eps) const {
  SLUICE_CHECK(dim > 0 && x.size() % dim == 0);
  SLUICE_CHECK(weight.empty() || static_cast<std::int64_t>(weight.size()) == dim);
  for (std::size_t begin = 0; begin < x.size(); begin += dim) {
    float* v = x.data() + begin;
    const double mean_sq = dot(v, v, dim) / static_cast<double>(dim);
    const auto inv_rms = static_cast<float>(1.0 / std::sqrt(mean_sq + eps));
    for (std::int64_t i = 0; i < dim; ++i) v[i] = v[i] * inv_rms * (weight.empty() ? 1.0f : weight[i]);
  }
}

void DeepseekV4CpuKernels::rope_tail(std::span<float> x, std::int64_t dim, std::int64_t pieces_per_row,
                                     std::span<const std::int64_t> positions, const RotaryTable& rope,
                                     bool inverse) const {
  const std::int64_t rope_dim = rope.rope_dim();
  SLUICE_CHECK(rope_dim <= dim);
  SLUICE_CHECK_EQ(static_cast<std::int64_t>(x.size()),
                  static_cast<std::int64_t>(positions.size()) * pieces_per_row * dim);
  for (std::size_t r = 0; r < positions.size(); ++r) {
    // The angle is one f32 product, as transformers forms it (inv_freq @ position_ids in f32).
    const auto position = static_cast<float>(positions[r]);
    for (std::int64_t p = 0; p < pieces_per_row; ++p) {
      float* v = x.data() + (static_cast<std::int64_t>(r) * pieces_per_row + p) * dim + (dim - rope_dim);
      for (std::size_t i = 0; i < rope.inv_freq.size(); ++i) {
        const float angle = rope.inv_freq[i] * position;
        const float c = static_cast<float>(std::cos(static_cast<double>(angle))) * rope.cos_sin_scale;
        float s = static_cast<float>(std::sin(static_cast<double>(angle))) * rope.cos_sin_scale;
        if (inverse) s = -s;
        const float even = v[2 * i], odd = v[2 * i + 1];
        v[2 * i] = even * c - odd * s;
        v[2 * i + 1] = odd * c + even * s;
      }
    }
  }
}

void DeepseekV4CpuKernels::hc_pre(std::span<const float> streams, const HyperConnectionWeights& w,
                                  const HyperConnectionShape& shape, HyperConnectionMix& out) const {
  const std::int64_t hc = shape.hc_mult, hidden = shape.hidden;
  SLUICE_CHECK_EQ(static_cast<std::int64_t>(streams.size()), hc * hidden);
  const std::vector<double> mixes = stream_mixes(streams, w.fn, (2 + hc) * hc, shape.norm_eps);
  std::vector<double> pre(hc), comb(hc * hc);
  out.post.assign(hc, 0.0f);
  for (std::int64_t j = 0; j < hc; ++j) {
    pre[j] = sigmoid(mixes[j] * w.scale[0] + w.base[j]) + shape.hc_eps;
    out.post[j] = static_cast<float>(2.0 * sigmoid(mixes[hc + j] * w.scale[1] + w.base[hc + j]));
  }
  // comb: a softmax over each row (its last index), plus eps, then Sinkhorn:
  // one column normalization, then (iters - 1) rounds of rows then columns.
  for (std::int64_t j = 0; j < hc; ++j) {
    double* row = comb.data() + j * hc;
    double row_max = -std::numeric_limits<double>::infinity();
    for (std::int64_t k = 0; k < hc; ++k) {
      row[k] = mixes[2 * hc + j * hc + k] * w.scale[2] + w.base[2 * hc + j * hc + k];
      row_max = std::max(row_max, row[k]);
    }
    double sum = 0.0;
    for (std::int64_t k = 0; k < hc; ++k) sum += (row[k] = std::exp(row[k] - row_max));
    for (std::int64_t k = 0; k < hc; ++k) row[k] = row[k] / sum + shape.hc_eps;
  }
  auto normalize_columns = [&] {
    for (std::int64_t k = 0; k < hc; ++k) {
      double sum = 0.0;
      for (std::int64_t j = 0; j < hc; ++j) sum += comb[j * hc + k];
      for (std::int64_t j = 0; j < hc; ++j) comb[j * hc + k] /= sum + shape.hc_eps;
    }
  };
  auto normalize_rows = [&] {
    for (std::int64_t j = 0; j < hc; ++j) {
      double sum = 0.0;
      for (std::int64_t k = 0; k < hc; ++k) sum += comb[j * hc + k];
      for (std::int64_t k = 0; k < hc; ++k) comb[j * hc + k] /= sum + shape.hc_eps;
    }
  };
  normalize_columns();
  for (std::int32_t i = 1; i < shape.sinkhorn_iters; ++i) {
    normalize_rows();
    normalize_columns();
  }
  out.comb.assign(comb.begin(), comb.end());
  out.collapsed.assign(hidden, 0.0f);
  for (std::int64_t d = 0; d < hidden; ++d) {
    double sum = 0.0;
    for (std::int64_t j = 0; j < hc; ++j) sum += pre[j] * streams[j * hidden + d];
    out.collapsed[d] = static_cast<float>(sum);
  }
}

void DeepseekV4CpuKernels::hc_post(std::span<float> streams, std::span<const float> y, const HyperConnectionMix& mix,
                                   const HyperConnectionShape& shape) const {
  const std::int64_t hc = shape.hc_mult, hidden = shape.hidden;
  SLUICE_CHECK_EQ(static_cast<std::int64_t>(streams.size()), hc * hidden);
  std::vector<float> mixed(streams.size());
  for (std::int64_t k = 0; k < hc; ++k)
    for (std::int64_t d = 0; d < hidden; ++d) {
      double sum = static_cast<double>(mix.post[k]) * y[d];
      for (std::int64_t j = 0; j < hc; ++j) sum += static_cast<double>(mix.comb[j * hc + k]) * streams[j * hidden + d];
      mixed[k * hidden + d] = static_cast<float>(sum);
    }
  std::copy(mixed.begin(), mixed.end(), streams.begin());
}

void DeepseekV4CpuKernels::hc_head(std::span<const float> streams, const HyperConnectionWeights& w,
                                   const HyperConnectionShape& shape, std::span<float> out) const {
  const std::int64_t hc = shape.hc_mult, hidden = shape.hidden;
  const std::vector<double> mixes = stream_mixes(streams, w.fn, hc, shape.norm_eps);
  for (std::int64_t d = 0; d < hidden; ++d) {
    double sum = 0.0;
    for (std::int64_t j = 0; j < hc; ++j)
      sum += (sigmoid(mixes[j] * w.scale[0] + w.base[j]) + shape.hc_eps) * streams[j * hidden + d];
    out[d] = static_cast<float>(sum);
  }
}

std::vector<std::int64_t> DeepseekV4CpuKernels::indexer_top_k(std::span<const float> q, std::span<const float> weights,
                                                              std::span<const float> keys, std::int64_t head_dim,
                                                              std::int64_t num_visible, std::int64_t top_k) const {
  const auto heads = static_cast<std::int64_t>(weights.size());
  SLUICE_CHECK_EQ(static_cast<std::int64_t>(q.size()), heads * head_dim);
  SLUICE_CHECK(num_visible * head_dim <= static_cast<std::int64_t>(keys.size()));
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  std::vector<double> scores(num_visible);
  for (std::int64_t t = 0; t < num_visible; ++t) {
    double score = 0.0;
    for (std::int64_t h = 0; h < heads; ++h)
      score += std::max(0.0, dot(q.data() + h * head_dim, keys.data() + t * head_dim, head_dim)) * scale * weights[h];
    scores[t] = score;
  }
  std::vector<std::int64_t> order(num_visible);
  std::iota(order.begin(), order.end(), 0);
  const std::int64_t keep = std::min(top_k, num_visible);
  std::partial_sort(order.begin(), order.begin() + keep, order.end(),
                    [&](std::int64_t a, std::int64_t b) { return scores[a] > scores[b] || (scores[a] == scores[b] && a < b); });
  order.resize(keep);
  std::sort(order.begin(), order.end());
  return order;
}

void DeepseekV4CpuKernels::sink_attention(std::span<const float> q, std::span<const float> keys,
                                          std::span<const float> sinks, const SinkAttentionShape& shape,
                                          std::span<float> out) const {
  const std::int64_t d = shape.head_dim;
  const auto num_keys = static_cast<std::int64_t>(keys.size()) / d;
  std::vector<double> logits(num_keys);
  for (std::int64_t h = 0; h < shape.num_heads; ++h) {
    const float* qh = q.data() + h * d;
    double top = sinks[h];
    for (std::int64_t j = 0; j < num_keys; ++j) {
      logits[j] = dot(qh, keys.data() + j * d, d) * shape.softmax_scale;
      top = std::max(top, logits[j]);
    }
    double denominator = std::exp(sinks[h] - top);
    for (std::int64_t j = 0; j < num_keys; ++j) denominator += (logits[j] = std::exp(logits[j] - top));
    for (std::int64_t c = 0; c < d; ++c) {
      double sum = 0.0;
      for (std::int64_t j = 0; j < num_keys; ++j) sum += logits[j] * keys[j * d + c];
      out[h * d + c] = static_cast<float>(sum / denominator);
    }
  }
}

void DeepseekV4CpuKernels::route_sqrtsoftplus(std::span<const float> logits, std::span<const float> bias,
                                              std::span<const std::int32_t> hash_experts, std::int64_t k, float scale,
                                              std::span<std::int32_t> expert_ids,
                                              std::span<float> expert_weights) const {
  const auto num_experts = static_cast<std::int64_t>(logits.size());
  std::vector<double> scores(num_experts);
  for (std::int64_t e = 0; e < num_experts; ++e) scores[e] = std::sqrt(softplus(logits[e]));
  if (!hash_experts.empty()) {
    SLUICE_CHECK_EQ(static_cast<std::int64_t>(hash_experts.size()), k);
    std::copy(hash_experts.begin(), hash_experts.end(), expert_ids.begin());
  } else {
    std::vector<std::int32_t> order(num_experts);
    std::iota(order.begin(), order.end(), 0);
    auto choice = [&](std::int32_t e) { return scores[e] + (bias.empty() ? 0.0 : bias[e]); };
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](std::int32_t a, std::int32_t b) { return choice(a) > choice(b) || (choice(a) == choice(b) && a < b); });
    std::copy(order.begin(), order.begin() + k, expert_ids.begin());
  }
  double sum = 0.0;
  for (std::int64_t i = 0; i < k; ++i) {
    SLUICE_CHECK(expert_ids[i] >= 0 && expert_ids[i] < num_experts);
    sum += scores[expert_ids[i]];
  }
  for (std::int64_t i = 0; i < k; ++i)
    expert_weights[i] = static_cast<float>(scores[expert_ids[i]] / (sum + 1e-20) * scale);
}

void DeepseekV4CpuKernels::clamped_swiglu(std::span<const float> x, std::span<const float> gate_up,
                                          std::span<const float> down, float limit, float weight,
                                          std::span<float> out) const {
  const auto hidden = static_cast<std::int64_t>(x.size());
  const auto inter = static_cast<std::int64_t>(gate_up.size()) / (2 * hidden);
  SLUICE_CHECK_EQ(static_cast<std::int64_t>(down.size()), hidden * inter);
  std::vector<float> act(inter);
  for (std::int64_t i = 0; i < inter; ++i) {
    const float gate = std::min(static_cast<float>(dot(gate_up.data() + i * hidden, x.data(), hidden)), limit);
    const float up = std::clamp(static_cast<float>(dot(gate_up.data() + (inter + i) * hidden, x.data(), hidden)),
                                -limit, limit);
    act[i] = static_cast<float>(gate / (1.0 + std::exp(-static_cast<double>(gate)))) * up;
  }
  for (std::int64_t h = 0; h < hidden; ++h) out[h] += static_cast<float>(dot(down.data() + h * inter, act.data(), inter)) * weight;
}

}  // namespace sluice::cpu
