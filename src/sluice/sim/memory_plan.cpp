#include "sluice/sim/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace sluice::sim {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// CUDA graphs, NCCL buffers, cuBLAS workspace, allocator slack: what vLLM-class
// engines reserve outside their activation profile.
constexpr double kRuntimeReserveBytes = 2.0 * kGiB;
constexpr double kActivationBytes = 2.0;  // bf16 activations
constexpr double kLogitBytes = 4.0;       // fp32 logits per sampled row

}  // namespace

double kv_bytes_per_token(const ModelProfile& profile, KvCacheDtype dtype) {
  if (dtype == KvCacheDtype::kFp8 && profile.kv_bytes_per_token_fp8 > 0) return profile.kv_bytes_per_token_fp8;
  return profile.kv_bytes_per_token;
}

MemoryPlan plan_memory(const ModelProfile& m, const HardwareSpec& hw, const Parallelism& par,
                       const MemoryOptions& options) {
  MemoryPlan plan;
  const double tp = par.tensor_parallel;
  const double dp = par.data_parallel();
  plan.budget_bytes = hw.hbm_capacity_bytes * options.gpu_memory_utilization;

  // Weights: routed experts split by EP (or sharded by TP without it); the rest
  // sharded by TP except what every rank holds whole.
  double expert_bytes = 0;
  for (const auto& g : m.layer_groups) {
    expert_bytes += static_cast<double>(g.num_layers) * g.num_routed_experts * g.expert_weight_bytes;
  }
  const double other_bytes = m.gpu_weight_bytes() - expert_bytes;
  const double expert_split = par.expert_parallel > 1 ? par.expert_parallel : tp;
  plan.weight_bytes = m.replicated_weight_bytes + (other_bytes - m.replicated_weight_bytes) / tp +
                      expert_bytes / expert_split;

  // Activations at the largest step: a few hidden-sized buffers per residual
  // stream, this rank's share of Q and of the MLP's gate/up/act.
  double mlp_width = m.intermediate_size;
  for (const auto& g : m.layer_groups) {
    if (g.num_routed_experts > 0) mlp_width = double(m.intermediate_size) * (g.num_experts_per_token + 1);
  }
  const double per_token = kActivationBytes * (6.0 * m.hidden_size * m.residual_streams +
                                               2.0 * m.num_attention_heads * m.head_dim / tp + 3.0 * mlp_width / tp);
  const double max_model_len =
      options.max_model_len_tokens > 0 ? options.max_model_len_tokens : m.max_position_embeddings;
  const double seqs_per_replica = std::ceil(options.max_num_seqs / dp);
  plan.activation_bytes = kRuntimeReserveBytes + per_token * options.max_num_batched_tokens / dp +
                          kLogitBytes * m.vocab_size * seqs_per_replica +
                          m.workspace_bytes_per_context_token * max_model_len;
  // Per-sequence state (window rings) is held whole on every TP rank.
  plan.sequence_state_bytes = m.kv_state_bytes_per_sequence * seqs_per_replica;

  plan.kv_bytes = plan.budget_bytes - plan.weight_bytes - plan.activation_bytes - plan.sequence_state_bytes;
  const double kv_split = std::max(1, std::min(par.tensor_parallel, m.num_kv_heads));
  plan.kv_bytes_per_token = kv_bytes_per_token(m, options.kv_cache_dtype) / kv_split;
  plan.host_table_bytes = m.host_table_bytes;
  if (plan.kv_bytes <= 0 || plan.kv_bytes_per_token <= 0) return plan;

  const auto tokens_per_replica = static_cast<std::int64_t>(plan.kv_bytes / plan.kv_bytes_per_token);
  const std::int64_t blocks =
      tokens_per_replica / options.block_size_tokens * static_cast<std::int64_t>(par.data_parallel());
  plan.num_kv_blocks = static_cast<std::int32_t>(
      std::min<std::int64_t>(blocks, std::numeric_limits<std::int32_t>::max()));
  plan.kv_capacity_tokens = static_cast<std::int64_t>(plan.num_kv_blocks) * options.block_size_tokens;
  return plan;
}

std::string describe_shortfall(const MemoryPlan& plan) {
  if (plan.kv_bytes > 0)
    return fmt::format("{:.3f} GB per GPU left for the KV cache, less than one block", plan.kv_bytes / 1e9);
  const double needed = plan.weight_bytes + plan.activation_bytes + plan.sequence_state_bytes;
  return fmt::format("weights {:.1f} GB + activations {:.1f} GB + sequence state {:.1f} GB = {:.1f} GB per GPU, "
                     "budget {:.1f} GB (short by {:.1f} GB)",
                     plan.weight_bytes / 1e9, plan.activation_bytes / 1e9, plan.sequence_state_bytes / 1e9,
                     needed / 1e9, plan.budget_bytes / 1e9, (needed - plan.budget_bytes) / 1e9);
}

}  // namespace sluice::sim
