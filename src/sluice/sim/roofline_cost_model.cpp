#include "sluice/sim/roofline_cost_model.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace sluice::sim {

double expected_experts_touched(double num_experts, double top_k, double num_tokens) {
  if (num_experts <= 0 || top_k <= 0 || num_tokens <= 0) return 0;
  // Each token misses a given expert with probability 1 - k/N.
  return num_experts * (1.0 - std::pow(1.0 - top_k / num_experts, num_tokens));
}

RooflineCostModel::RooflineCostModel(ModelProfile profile, HardwareSpec hardware, Parallelism parallelism)
    : profile_(std::move(profile)), hardware_(std::move(hardware)), parallelism_(parallelism) {
  const Status valid = validate(parallelism_, profile_);
  SLUICE_CHECK_MSG(valid.ok(), valid.error_message());
}

namespace {

// How many of a sequence's new tokens run through a group, and the sum of the
// context lengths those queries see (a query at position q sees q + 1 positions).
struct GroupQueries {
  double num_queries = 0;
  double sum_context_tokens = 0;
};

GroupQueries queries_in(const LayerGroup& group, const StepShape::Sequence& seq, std::int32_t replay_tokens) {
  const double n = seq.num_new_tokens;
  const double p = seq.num_computed_tokens;
  double q = n;
  if (group.scope == TokenScope::kReplayTail && replay_tokens > 0) q = std::min(n, double(replay_tokens));
  const double first = p + n - q;  // position of the group's first query
  return {q, q * first + q * (q + 1) / 2};
}

// The context positions a prefill kernel with `tile_rows`-row query tiles
// computes for `queries` queries from `first` on: each tile runs all its rows
// against the keys up to its last query (a chunk of one row is a decode, run
// by the split-KV kernel without tiles).
double tiled_context_tokens(const GroupQueries& g, double first, std::int32_t tile_rows) {
  if (tile_rows <= 1 || g.num_queries <= 1) return g.sum_context_tokens;
  const double tile = tile_rows;
  const double tiles = std::ceil(g.num_queries / tile);
  // sum over tiles i of tile * (first + min((i + 1) * tile, q)): every tile
  // but the last ends at (i + 1) * tile, the last at q.
  const double full = tiles - 1;
  return tile * (tiles * first + tile * full * (full + 1) / 2 + g.num_queries);
}

}  // namespace

StepCost RooflineCostModel::predict(const StepShape& shape) const {
  StepCost cost;
  if (shape.sequences.empty() || shape.num_tokens() == 0) return cost;

  const ModelProfile& m = profile_;
  const HardwareSpec& hw = hardware_;
  const Efficiency& eff = hw.efficiency;
  const double gpus = parallelism_.num_gpus;
  const double tp = parallelism_.tensor_parallel;
  const double ep = parallelism_.expert_parallel;
  const double dp = parallelism_.data_parallel();
  // KV heads split over TP ranks up to their count; beyond that they replicate.
  const double kv_split = std::max(1, std::min(parallelism_.tensor_parallel, m.num_kv_heads));
  const double peak_gemm = m.gemm_uses_fp8 ? hw.peak_fp8_flops_per_s : hw.peak_bf16_flops_per_s;
  const double num_sequences = static_cast<double>(shape.sequences.size());

  double dense_flops = 0;   // whole instance
  double expert_flops = 0;  // whole instance
  double attn_flops = 0;
  double attn_flops_long_chunks = 0;  // of sequences past hw.attention_long_chunk_rows
  double scan_flops_fp8 = 0;
  double kv_bytes = 0;      // whole instance, before the KV-head split
  double comm_ms = 0;
  bool any_group_ran = false;

  for (const LayerGroup& g : m.layer_groups) {
    double tokens = 0;
    for (const auto& seq : shape.sequences) {
      const GroupQueries q = queries_in(g, seq, m.decoder_replay_tokens);
      if (q.num_queries <= 0) continue;
      tokens += q.num_queries;
      const AttentionCost& a = g.attention;
      const bool long_chunk = hw.attention_long_chunk_rows > 0 && seq.num_new_tokens >= hw.attention_long_chunk_rows;
      double& bf16_flops = long_chunk ? attn_flops_long_chunks : attn_flops;
      bf16_flops += q.num_queries * a.flops_per_query;
      const double first_query = double(seq.num_computed_tokens) + seq.num_new_tokens - q.num_queries;
      // The chunk's context is scanned once (flash-attention tiling reuses it
      // across the chunk's queries); gathered entries are bounded by what exists.
      const double context_tokens = double(seq.num_computed_tokens) + seq.num_new_tokens;
      const bool chunk_form = q.num_queries > 1 && a.chunk_flops_per_query_context_token > 0;
      (a.scan_uses_fp8 ? scan_flops_fp8 : bf16_flops) +=
          (chunk_form ? a.chunk_flops_per_query_context_token : a.flops_per_query_context_token) *
          tiled_context_tokens(q, first_query, hw.attention_query_tile_rows);
      if (chunk_form) bf16_flops += a.chunk_flops_per_context_token * context_tokens;
      kv_bytes += a.scan_bytes_per_context_token * context_tokens;
      kv_bytes += std::min(q.num_queries * a.gather_bytes_per_query,
                           m.kv_bytes_per_token * context_tokens + m.kv_state_bytes_per_sequence);
    }
    if (tokens <= 0) continue;  // weights of a group nobody runs are not read
    any_group_ran = true;
    cost.layer_floor_ms += g.num_layers * hw.overhead.per_layer_floor_ms;

    dense_flops += 2.0 * static_cast<double>(g.dense_params) * tokens;
    cost.weight_bytes_per_gpu += g.dense_weight_bytes / tp;
    if (g.num_routed_experts > 0) {
      const double n = g.num_routed_experts;
      const double k = g.num_experts_per_token;
      expert_flops += 2.0 * g.num_layers * k * static_cast<double>(g.expert_params) * tokens;
      double touched_per_gpu = 0;
      if (parallelism_.expert_parallel > 1) {
        // A rank holds N/ep whole experts and sees every token's routing.
        touched_per_gpu = expected_experts_touched(n, k, tokens) / ep;
      } else {
        // Every rank holds 1/tp of each expert and serves its replica's tokens.
        touched_per_gpu = expected_experts_touched(n, k, tokens / dp) / tp;
      }
      cost.weight_bytes_per_gpu += g.num_layers * touched_per_gpu * g.expert_weight_bytes;
      cost.expected_experts_touched = std::max(cost.expected_experts_touched, expected_experts_touched(n, k, tokens));
    }

    // Communication per layer of this group.
    const double message_bytes = tokens / dp * m.hidden_size * 2.0;  // bf16 sub-layer outputs
    if (parallelism_.tensor_parallel > 1) {
      // Two ring all-reduces per layer (after attention, after the MLP/MoE).
      const double sent = 2.0 * (tp - 1) / tp * message_bytes;
      cost.comm_bytes_per_gpu += 2.0 * g.num_layers * sent;
      comm_ms += 2.0 * g.num_layers * hw.overhead.per_collective_ms;
    }
    if (parallelism_.expert_parallel > 1 && parallelism_.data_parallel() > 1 && g.num_routed_experts > 0) {
      // Attention replicas exchange tokens with expert owners: dispatch in fp8
      // (1 B/value), combine in bf16 (2 B/value), (ep-1)/ep of them remote.
      const double tokens_per_gpu = tokens / gpus;
      const double sent = tokens_per_gpu * g.num_experts_per_token * m.hidden_size * 3.0 * (ep - 1) / ep;
      cost.comm_bytes_per_gpu += g.num_layers * sent;
      comm_ms += 2.0 * g.num_layers * hw.overhead.per_collective_ms;
    }
  }

  // The head: one row per sequence (each is assumed to sample; a prefill chunk
  // that does not costs one row too many), vocab-parallel over TP.
  dense_flops += 2.0 * static_cast<double>(m.head_params) * num_sequences;
  const double table_params = static_cast<double>(m.embedding_params) +
                              (m.head_tied_to_embedding ? 0.0 : static_cast<double>(m.head_params));
  const double head_bytes = table_params > 0 ? m.embedding_head_bytes * m.head_params / table_params : 0;
  cost.weight_bytes_per_gpu += head_bytes / tp;
  if (any_group_ran) cost.weight_bytes_per_gpu += m.replicated_weight_bytes * (1.0 - 1.0 / tp);

  // New KV written (whole model, every token).
  kv_bytes += m.kv_bytes_per_token * static_cast<double>(shape.num_tokens());

  cost.gemm_flops_per_gpu = (dense_flops + expert_flops) / gpus;
  const double gemm_compute_s = dense_flops / gpus / (peak_gemm * eff.gemm_compute) +
                                expert_flops / gpus / (peak_gemm * eff.moe_compute);
  const double weight_s = cost.weight_bytes_per_gpu / (hw.hbm_bytes_per_s * eff.weight_bandwidth);
  cost.gemm_ms = 1e3 * std::max(gemm_compute_s, weight_s);
  cost.gemm_memory_bound = weight_s > gemm_compute_s;

  cost.attention_flops_per_gpu = (attn_flops + attn_flops_long_chunks + scan_flops_fp8) / gpus;
  cost.kv_bytes_per_gpu = kv_bytes / (dp * kv_split);
  const double attn_compute_s =
      attn_flops / gpus / (hw.peak_bf16_flops_per_s * eff.attention_compute) +
      (attn_flops_long_chunks > 0
           ? attn_flops_long_chunks / gpus / (hw.peak_bf16_flops_per_s * hw.attention_compute_long_chunks)
           : 0.0) +
      scan_flops_fp8 / gpus / (hw.peak_fp8_flops_per_s * eff.attention_compute);
  const double kv_s = cost.kv_bytes_per_gpu / (hw.hbm_bytes_per_s * eff.kv_bandwidth);
  cost.attention_ms = 1e3 * std::max(attn_compute_s, kv_s);
  cost.attention_memory_bound = kv_s > attn_compute_s;

  cost.comm_ms = comm_ms + 1e3 * cost.comm_bytes_per_gpu / (hw.nvlink_bytes_per_s * eff.nvlink);

  // Host-resident rows (Engram) for every new token, split over the ranks.
  cost.host_bytes_per_gpu = m.host_bytes_per_token * static_cast<double>(shape.num_tokens()) / gpus;
  cost.host_ms = 1e3 * cost.host_bytes_per_gpu / (hw.host_link_bytes_per_s * eff.host_link);

  cost.overhead_ms = hw.overhead.per_step_ms + hw.overhead.per_sequence_ms * num_sequences;
  return cost;
}

double RooflineCostModel::predict_step_ms(const StepShape& shape) const { return predict(shape).total_ms(); }

CostTerms RooflineCostModel::predict_terms(const StepShape& shape) const {
  const StepCost cost = predict(shape);
  // A step held at its layers' floor: the excess is a fixed cost too.
  CostTerms terms{.fixed_ms = cost.comm_ms + cost.host_ms + cost.overhead_ms + cost.floor_excess_ms()};
  (cost.gemm_memory_bound ? terms.gemm_memory_ms : terms.gemm_compute_ms) = cost.gemm_ms;
  (cost.attention_memory_bound ? terms.attention_memory_ms : terms.attention_compute_ms) = cost.attention_ms;
  return terms;
}

}  // namespace sluice::sim
