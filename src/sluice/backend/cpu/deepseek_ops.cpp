#include "sluice/backend/cpu/deepseek_ops.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "sluice/backend/cpu/cpu_math.h"
#include "sluice/backend/rope.h"

namespace sluice::cpu {
namespace {

// Softmax over scores in place; returns nothing, leaves probabilities.
void softmax(std::vector<float>& scores) {
  const float max_score = *std::max_element(scores.begin(), scores.end());
  float total = 0.0f;
  for (float& s : scores) total += (s = std::exp(s - max_score));
  for (float& s : scores) s /= total;
}

// Indices of the k largest values, larger first, ties to the lower index.
std::vector<std::int32_t> top_k(const std::vector<float>& values, std::int32_t k) {
  std::vector<std::int32_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](std::int32_t a, std::int32_t b) {
    return values[a] > values[b] || (values[a] == values[b] && a < b);
  });
  order.resize(static_cast<std::size_t>(k));
  return order;
}

// The decompressed form's per-sequence state: kv[p] = kv_b_proj . c[p] for
// every context position, [context, heads * (nope + v)].
struct DecompressedContext {
  const SequenceLayout* seq = nullptr;
  std::vector<float> kv;
};

}  // namespace

float* LatentCacheView::slot(const SequenceLayout& seq, std::int64_t position) const {
  const std::int64_t block = seq.block_table[position / spec->block_size_tokens];
  SLUICE_CHECK(block >= 0 && block < spec->num_blocks);
  return data + (block * spec->block_size_tokens + position % spec->block_size_tokens) * spec->head_dim;
}

void rope_partial(const CpuStep& step, Tensor x, const RotaryRange& range, const RopeParams& params) {
  const StepLayout& layout = step.layout;
  const std::int64_t head_stride = range.head_stride, rotary_offset = range.rotary_offset;
  const std::vector<float> inv_freq = rope_inverse_frequencies(params);
  const std::int64_t half = params.head_dim / 2;
  const std::int64_t num_heads = x.cols() / head_stride;
  SLUICE_CHECK_EQ(num_heads * head_stride, x.cols());
  SLUICE_CHECK_LE(rotary_offset + params.head_dim, head_stride);
  step.pool.parallel_for(layout.num_rows(), [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> cos_row(static_cast<std::size_t>(half)), sin_row(static_cast<std::size_t>(half));
    std::vector<float> x1(static_cast<std::size_t>(half)), x2(static_cast<std::size_t>(half));
    for (std::int64_t r = begin; r < end; ++r) {
      const float position = static_cast<float>(layout.positions[r]);
      for (std::int64_t i = 0; i < half; ++i) {
        const float angle = position * inv_freq[i];
        cos_row[i] = std::cos(angle) * params.cos_sin_scale;
        sin_row[i] = std::sin(angle) * params.cos_sin_scale;
      }
      for (std::int64_t head = 0; head < num_heads; ++head) {
        float* v = x.as<float>() + r * x.cols() + head * head_stride + rotary_offset;
        for (std::int64_t i = 0; i < half; ++i) {
          x1[i] = params.interleaved ? v[2 * i] : v[i];
          x2[i] = params.interleaved ? v[2 * i + 1] : v[i + half];
        }
        for (std::int64_t i = 0; i < half; ++i) {
          v[i] = x1[i] * cos_row[i] - x2[i] * sin_row[i];
          v[i + half] = x2[i] * cos_row[i] + x1[i] * sin_row[i];
        }
      }
    }
  });
}

void mla_attention(const CpuStep& step, const LatentCacheView& cache, const MlaInputs& in, const MlaShape& shape,
                   Tensor out) {
  ThreadPool& pool = step.pool;
  const StepLayout& layout = step.layout;
  const Tensor& q = in.q;
  const Tensor& kv_b_proj = in.kv_b_proj;
  const std::int64_t heads = shape.num_heads, nope = shape.qk_nope_head_dim, rope = shape.qk_rope_head_dim;
  const std::int64_t v_dim = shape.v_head_dim, rank = shape.kv_lora_rank;
  const std::int64_t qk_dim = nope + rope, kv_width = nope + v_dim;
  SLUICE_CHECK_EQ(cache.spec->head_dim, rank + rope);
  SLUICE_CHECK_EQ(q.cols(), heads * qk_dim);
  SLUICE_CHECK_EQ(out.cols(), heads * v_dim);
  SLUICE_CHECK_EQ(kv_b_proj.rows(), heads * kv_width);
  SLUICE_CHECK_EQ(kv_b_proj.cols(), rank);

  // 1. The step's latents and rope keys into their slots.
  for (const SequenceLayout& seq : layout.sequences)
    for (std::int64_t i = 0; i < seq.num_rows; ++i) {
      float* slot = cache.slot(seq, seq.num_computed_tokens + i);
      const std::int64_t row = seq.row_begin + i;
      std::copy_n(in.latent.as<const float>() + row * rank, rank, slot);
      std::copy_n(in.k_rope.as<const float>() + row * rope, rope, slot + rank);
    }
  std::vector<float> w_buffer;
  const float* w = f32_rows(kv_b_proj, 0, kv_b_proj.rows(), w_buffer);  // [heads * (nope + v), rank]

  // 2. Prefill sequences: decompress every context position once.
  std::vector<DecompressedContext> contexts;
  for (const SequenceLayout& seq : layout.sequences) {
    if (seq.num_rows < 2) continue;
    DecompressedContext& ctx = contexts.emplace_back();
    ctx.seq = &seq;
    const std::int64_t num_positions = seq.num_computed_tokens + seq.num_rows;
    ctx.kv.resize(static_cast<std::size_t>(num_positions * heads * kv_width));
    pool.parallel_for(num_positions, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t p = begin; p < end; ++p) {
        const float* c = cache.slot(seq, p);
        float* kv = ctx.kv.data() + p * heads * kv_width;
        for (std::int64_t j = 0; j < heads * kv_width; ++j) kv[j] = dot(w + j * rank, c, rank);
      }
    });
  }

  // 3. One work item per (row, head).
  struct Item {
    const SequenceLayout* seq;
    std::int64_t index;                      // row within the sequence
    const DecompressedContext* decompressed;  // null: absorbed form
  };
  std::vector<Item> items;
  std::size_t next_context = 0;
  for (const SequenceLayout& seq : layout.sequences) {
    const DecompressedContext* ctx = seq.num_rows >= 2 ? &contexts[next_context++] : nullptr;
    for (std::int64_t i = 0; i < seq.num_rows; ++i) items.push_back({&seq, i, ctx});
  }
  pool.parallel_for(static_cast<std::int64_t>(items.size()) * heads, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> scores, query(static_cast<std::size_t>(rank + rope)), mixed(static_cast<std::size_t>(rank));
    for (std::int64_t work = begin; work < end; ++work) {
      const Item& item = items[work / heads];
      const std::int64_t h = work % heads;
      const std::int64_t row = item.seq->row_begin + item.index;
      const std::int64_t num_positions = item.seq->num_computed_tokens + item.index + 1;
      const float* q_head = q.as<const float>() + row * q.cols() + h * qk_dim;  // [nope | rope]
      float* o = out.as<float>() + row * out.cols() + h * v_dim;
      scores.resize(static_cast<std::size_t>(num_positions));
      if (item.decompressed) {
        // K_h[p] = [kv[p, h, :nope] | k_rope[p]], V_h[p] = kv[p, h, nope:].
        const float* kv = item.decompressed->kv.data();
        for (std::int64_t p = 0; p < num_positions; ++p) {
          const float* kv_head = kv + (p * heads + h) * kv_width;
          scores[p] = (dot(q_head, kv_head, nope) + dot(q_head + nope, cache.slot(*item.seq, p) + rank, rope)) *
                      shape.softmax_scale;
        }
        softmax(scores);
        std::fill(o, o + v_dim, 0.0f);
        for (std::int64_t p = 0; p < num_positions; ++p) {
          const float* value = kv + (p * heads + h) * kv_width + nope;
          for (std::int64_t d = 0; d < v_dim; ++d) o[d] += scores[p] * value[d];
        }
        continue;
      }
      // Absorbed: query = [W_UK_h^T q_nope | q_rope] against each slot [c | k_rope].
      const float* w_uk = w + h * kv_width * rank;  // [nope, rank]
      std::fill(query.begin(), query.begin() + rank, 0.0f);
      for (std::int64_t d = 0; d < nope; ++d)
        for (std::int64_t j = 0; j < rank; ++j) query[j] += q_head[d] * w_uk[d * rank + j];
      std::copy_n(q_head + nope, rope, query.begin() + rank);
      for (std::int64_t p = 0; p < num_positions; ++p)
        scores[p] = dot(query.data(), cache.slot(*item.seq, p), rank + rope) * shape.softmax_scale;
      softmax(scores);
      std::fill(mixed.begin(), mixed.end(), 0.0f);
      for (std::int64_t p = 0; p < num_positions; ++p) {
        const float* c = cache.slot(*item.seq, p);
        for (std::int64_t j = 0; j < rank; ++j) mixed[j] += scores[p] * c[j];
      }
      const float* w_uv = w_uk + nope * rank;  // [v, rank]
      for (std::int64_t d = 0; d < v_dim; ++d) o[d] = dot(w_uv + d * rank, mixed.data(), rank);
    }
  });
}

void moe_route(ThreadPool& pool, const Tensor& router_logits, const Tensor& correction_bias,
               const MoeRouting& routing, const MoeAssignment& out) {
  const Tensor& expert_ids = out.expert_ids;
  const Tensor& expert_weights = out.expert_weights;
  const std::int64_t num_experts = routing.num_experts, k = routing.num_experts_per_token;
  const std::int64_t group_size = num_experts / routing.num_groups;
  SLUICE_CHECK_EQ(router_logits.cols(), num_experts);
  SLUICE_CHECK_EQ(correction_bias.numel(), num_experts);
  SLUICE_CHECK(expert_ids.dtype == DType::i32 && expert_ids.cols() == k && expert_weights.cols() == k);
  std::vector<float> bias(static_cast<std::size_t>(num_experts));
  to_f32(correction_bias, 0, num_experts, bias.data());
  pool.parallel_for(router_logits.rows(), [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> scores(static_cast<std::size_t>(num_experts)), choice(scores.size());
    std::vector<float> group_scores(static_cast<std::size_t>(routing.num_groups));
    for (std::int64_t r = begin; r < end; ++r) {
      const float* logits = router_logits.as<const float>() + r * num_experts;
      for (std::int64_t e = 0; e < num_experts; ++e) {
        scores[e] = 1.0f / (1.0f + std::exp(-logits[e]));
        choice[e] = scores[e] + bias[e];
      }
      for (std::int64_t g = 0; g < routing.num_groups; ++g) {
        const std::vector<float> group(choice.begin() + g * group_size, choice.begin() + (g + 1) * group_size);
        const std::vector<std::int32_t> best = top_k(group, 2);
        group_scores[g] = group[best[0]] + group[best[1]];
      }
      std::vector<bool> kept(static_cast<std::size_t>(routing.num_groups), false);
      for (std::int32_t g : top_k(group_scores, routing.num_groups_selected)) kept[g] = true;
      for (std::int64_t e = 0; e < num_experts; ++e)
        if (!kept[e / group_size]) choice[e] = 0.0f;
      const std::vector<std::int32_t> chosen = top_k(choice, static_cast<std::int32_t>(k));
      float total = 0.0f;
      for (std::int32_t e : chosen) total += scores[e];
      for (std::int64_t i = 0; i < k; ++i) {
        float weight = scores[chosen[i]];
        if (routing.normalize) weight /= total + 1e-20f;
        expert_ids.as<std::int32_t>()[r * k + i] = chosen[i];
        expert_weights.as<float>()[r * k + i] = weight * routing.scale;
      }
    }
  });
}

void moe_experts(ThreadPool& pool, const Tensor& x, const MoeExpertWeights& experts, const MoeAssignment& assignment,
                 Tensor out) {
  const Tensor& w_gate_up = experts.gate_up;
  const Tensor& w_down = experts.down;
  const Tensor& expert_ids = assignment.expert_ids;
  const Tensor& expert_weights = assignment.expert_weights;
  const std::int64_t hidden = x.cols(), inter = w_down.cols(), k = expert_ids.cols();
  SLUICE_CHECK_EQ(w_gate_up.cols(), hidden);
  const std::int64_t num_local = w_down.rows() / hidden, first = experts.first_expert;
  SLUICE_CHECK_EQ(w_gate_up.rows() / (2 * inter), num_local);
  SLUICE_CHECK_EQ(out.cols(), hidden);
  // FP8 experts (kept so only under CpuFp8Activations::e4m3_1x128) see their
  // inputs quantized as the FP8 grouped GEMM's do: x once per token, the
  // SwiGLU activation per (token, expert).
  const bool quantize_in = w_gate_up.dtype == DType::f8_e4m3, quantize_act = w_down.dtype == DType::f8_e4m3;
  // Row by row, experts in routing order: a row's result never depends on
  // which other rows share the step.
  pool.parallel_for(x.rows(), [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> gate_up(static_cast<std::size_t>(2 * inter)), act(static_cast<std::size_t>(inter));
    std::vector<float> buffer_gate_up, buffer_down, in_quantized(quantize_in ? static_cast<std::size_t>(hidden) : 0);
    for (std::int64_t r = begin; r < end; ++r) {
      const float* in = x.as<const float>() + r * hidden;
      if (quantize_in) {
        quantize_fp8_activations(in, hidden, in_quantized.data());
        in = in_quantized.data();
      }
      float* o = out.as<float>() + r * hidden;
      for (std::int64_t i = 0; i < k; ++i) {
        const std::int64_t e = expert_ids.as<const std::int32_t>()[r * k + i] - first;
        if (e < 0 || e >= num_local) continue;  // another expert-parallel rank's
        const float weight = expert_weights.as<const float>()[r * k + i];
        const float* wgu = f32_rows(w_gate_up, e * 2 * inter, 2 * inter, buffer_gate_up);
        for (std::int64_t j = 0; j < 2 * inter; ++j) gate_up[j] = dot(wgu + j * hidden, in, hidden);
        for (std::int64_t j = 0; j < inter; ++j) {
          const float gate = gate_up[j];
          act[j] = gate / (1.0f + std::exp(-gate)) * gate_up[inter + j];
        }
        if (quantize_act) quantize_fp8_activations(act.data(), inter, act.data());
        const float* wd = f32_rows(w_down, e * hidden, hidden, buffer_down);
        for (std::int64_t j = 0; j < hidden; ++j) o[j] += weight * dot(wd + j * inter, act.data(), inter);
      }
    }
  });
}

}  // namespace sluice::cpu
