#include "sluice/sim/sim_backend.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>

#include "sluice/common/rng.h"
#include "sluice/sim/roofline_cost_model.h"
#include "sluice/sim/skewed_cost_model.h"
#include "sluice/sim/sm_partition_cost.h"

namespace sluice::sim {

SimBackend::SimBackend(std::shared_ptr<const CostModel> cost_model, BackendInfo info, SimTokenOptions tokens)
    : cost_model_(std::move(cost_model)), info_(std::move(info)), tokens_(tokens) {
  SLUICE_CHECK(cost_model_ != nullptr);
  SLUICE_CHECK(tokens_.vocab_size >= 2);
  info_.name = "sim";
  info_.vocab_size = tokens_.vocab_size;
}

namespace {

// Structured output on the sim: the fake token if allowed, else the next
// allowed id after it (wrapping), so constrained runs stay deterministic.
TokenId first_allowed_from(std::span<const std::uint64_t> allowed, TokenId start, std::int32_t vocab_size) {
  for (std::int32_t i = 0; i < vocab_size; ++i) {
    const TokenId t = (start + i) % vocab_size;
    if (token_mask_allows(allowed, t)) return t;
  }
  return start;
}

}  // namespace

TokenId SimBackend::fake_token(SequenceId seq_id, std::int32_t position, std::int32_t generated_index) const {
  if (tokens_.eos_token_id && tokens_.emit_eos_every > 0 && (generated_index + 1) % tokens_.emit_eos_every == 0) {
    return *tokens_.eos_token_id;
  }
  const std::uint64_t key = splitmix64(seq_id) ^ static_cast<std::uint64_t>(position);
  auto token = static_cast<TokenId>(splitmix64(tokens_.seed ^ key) % static_cast<std::uint64_t>(tokens_.vocab_size));
  if (tokens_.eos_token_id && token == *tokens_.eos_token_id) token = (token + 1) % tokens_.vocab_size;
  return token;
}

Status SimBackend::allocate_host_kv_cache(std::int32_t num_blocks) {
  if (info_.kv_bytes_per_block <= 0 || info_.host_link_bytes_per_s <= 0) {
    return Error{"the sim backend was made without KV block bytes or a host link rate"};
  }
  if (num_blocks < 1) return Error{"a host KV tier needs at least one block"};
  num_host_blocks_ = num_blocks;
  return Ok{};
}

void SimBackend::start_copies(std::span<const KvBlockCopy> copies) {
  const double copy_ms = static_cast<double>(info_.kv_bytes_per_block) / info_.host_link_bytes_per_s * 1000.0;
  const std::int64_t batch = ++num_copy_batches_;
  for (const KvBlockCopy& c : copies) {
    SLUICE_CHECK_MSG(c.host_block >= 0 && c.host_block < num_host_blocks_, "a copy outside the host tier");
    SLUICE_CHECK(c.device_block >= 0 && c.device_block < info_.num_kv_blocks);
    if (std::any_of(copies_.begin(), copies_.end(), [&](const InFlightCopy& q) { return q.id == c.id; })) continue;
    double& free_ms =
        c.direction == KvCopyDirection::kDeviceToHost ? device_to_host_free_ms_ : host_to_device_free_ms_;
    free_ms = std::max(free_ms, now_ms_) + copy_ms;
    copies_.push_back({.id = c.id, .batch = batch, .end_ms = free_ms});
  }
}

double SimBackend::first_batch_end_ms() const {
  // copies_ keeps start order, so a batch's copies are contiguous.
  double first_ms = copies_.empty() ? now_ms_ : std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < copies_.size();) {
    double batch_end_ms = 0;
    std::size_t j = i;
    for (; j < copies_.size() && copies_[j].batch == copies_[i].batch; ++j)
      batch_end_ms = std::max(batch_end_ms, copies_[j].end_ms);
    first_ms = std::min(first_ms, batch_end_ms);
    i = j;
  }
  return first_ms;
}

std::vector<KvCopyCompletion> SimBackend::take_completed() {
  std::vector<KvCopyCompletion> done;
  std::erase_if(copies_, [&](const InFlightCopy& c) {
    if (c.end_ms > now_ms_) return false;
    done.push_back({.id = c.id});
    return true;
  });
  return done;
}

Result<StepOutput> SimBackend::execute(const Batch& batch) {
  batch.fill_late_masks();  // nothing to overlap them with
  start_copies(batch.copies);
  if (batch.sequences.empty()) {  // a wait for a batch of copies to land
    StepOutput out;
    out.step_time_ms = std::max(0.0, first_batch_end_ms() - now_ms_);
    now_ms_ += out.step_time_ms;
    out.completed_copies = take_completed();
    return out;
  }
  StepShape shape;
  shape.sequences.reserve(batch.sequences.size());
  for (const SequenceStep& seq : batch.sequences) {
    const std::string id = "sequence " + std::to_string(seq.seq_id);
    if (seq.num_new_tokens < 0 || seq.num_computed_tokens < 0) return Error{id + ": negative token count"};
    if (seq.end_position() > static_cast<std::int32_t>(seq.tokens.size())) {
      return Error{id + ": runs to position " + std::to_string(seq.end_position()) + " but has " +
                   std::to_string(seq.tokens.size()) + " tokens"};
    }
    if (info_.max_model_len_tokens > 0 && seq.end_position() > info_.max_model_len_tokens) {
      return Error{id + ": position " + std::to_string(seq.end_position()) + " exceeds max model length " +
                   std::to_string(info_.max_model_len_tokens)};
    }
    const std::int64_t covered = static_cast<std::int64_t>(seq.block_table.size()) * info_.block_size_tokens;
    if (covered < seq.end_position()) {
      return Error{id + ": block table covers " + std::to_string(covered) + " positions, needs " +
                   std::to_string(seq.end_position())};
    }
    shape.sequences.push_back({.num_new_tokens = seq.num_new_tokens, .num_computed_tokens = seq.num_computed_tokens});
  }

  StepOutput out;
  out.step_time_ms = cost_model_->predict_step_ms(shape);
  now_ms_ += out.step_time_ms;
  ++num_steps_;
  out.completed_copies = take_completed();
  out.sequences.reserve(batch.sequences.size());
  for (const SequenceStep& seq : batch.sequences) {
    SequenceOutput so;
    so.seq_id = seq.seq_id;
    if (seq.sample) {
      TokenId token = fake_token(seq.seq_id, seq.end_position(), seq.end_position() - seq.num_prompt_tokens);
      if (!seq.allowed_tokens.empty()) token = first_allowed_from(seq.allowed_tokens, token, tokens_.vocab_size);
      so.token = token;
      so.logprob = 0.0f;  // the sim is certain of its fake token
      if (seq.return_logits) {
        so.logits.assign(static_cast<std::size_t>(tokens_.vocab_size), 0.0f);
        so.logits[static_cast<std::size_t>(token)] = 1.0f;
      }
    }
    out.sequences.push_back(std::move(so));
  }
  return out;
}

Result<std::unique_ptr<SimBackend>> make_sim_backend(const ModelProfile& requested_profile,
                                                     const HardwareSpec& hardware, const Parallelism& parallelism,
                                                     const SimBackendOptions& options) {
  SLUICE_TRY(validate(parallelism, requested_profile));
  ModelProfile profile = requested_profile;
  if (options.memory.kv_cache_dtype == KvCacheDtype::kFp8) {
    SLUICE_TRY_ASSIGN(fp8_profile, with_fp8_kv_cache(requested_profile));
    profile = std::move(fp8_profile);
  }
  const std::int32_t max_model_len =
      options.max_model_len_tokens > 0 ? options.max_model_len_tokens : profile.max_position_embeddings;
  if (max_model_len > profile.max_position_embeddings) {
    return Error{"max model length " + std::to_string(max_model_len) + " exceeds " + profile.name + "'s " +
                 std::to_string(profile.max_position_embeddings) + " positions"};
  }
  MemoryOptions memory = options.memory;
  memory.max_model_len_tokens = max_model_len;
  std::int32_t num_kv_blocks = 0;
  if (options.num_kv_blocks_override) {
    if (*options.num_kv_blocks_override <= 0) return Error{"num_kv_blocks override must be positive"};
    num_kv_blocks = *options.num_kv_blocks_override;
  } else {
    const MemoryPlan plan = plan_memory(profile, hardware, parallelism, memory);
    if (!plan.fits()) {
      return Error{profile.name + " does not fit: " + describe_shortfall(plan)};
    }
    num_kv_blocks = plan.num_kv_blocks;
  }
  BackendInfo info;
  info.block_size_tokens = memory.block_size_tokens;
  info.num_kv_blocks = num_kv_blocks;
  info.max_model_len_tokens = max_model_len;
  // Each GPU copies its own shard of a block over its own link, so the
  // block's bytes and the link rate are both summed over the GPUs (their
  // ratio is one GPU's copy time).
  const MemoryPlan shard = plan_memory(profile, hardware, parallelism, memory);
  info.kv_bytes_per_block = static_cast<std::int64_t>(shard.kv_bytes_per_token * memory.block_size_tokens) *
                            parallelism.num_gpus;
  info.host_link_bytes_per_s =
      hardware.host_link_bytes_per_s * hardware.efficiency.host_link * parallelism.num_gpus;
  SimTokenOptions tokens = options.tokens;
  tokens.vocab_size = profile.vocab_size;
  std::shared_ptr<const CostModel> cost = std::make_shared<const RooflineCostModel>(profile, hardware, parallelism);
  if (options.truth_skew) cost = std::make_shared<const SkewedCostModel>(std::move(cost), *options.truth_skew);
  auto backend = std::make_unique<SimBackend>(std::move(cost), std::move(info), tokens);
  if (parallelism.num_gpus == 1) backend->set_sm_partition(hardware);
  return backend;
}

Result<std::unique_ptr<SimBackend>> SimBackend::make_sm_lane(const LaneOptions& options) {
  if (options.num_sms <= 0)
    return Error{"the sim backend prices each step alone; a decode lane sharing every SM with prefill chunks "
                 "slowed 6-12x beside them on the H200, which it cannot know (use sms:N)"};
  const std::int32_t num_sms = partition_.num_sms;
  if (num_sms <= 0) return Error{"the simulated device has no SM count to split (one GPU only)"};
  const std::int32_t granularity = std::max(1, partition_.sm_group_granularity);
  const std::int32_t sms = (options.num_sms + granularity - 1) / granularity * granularity;
  if (sms >= num_sms)
    return Error{"an SM partition of " + std::to_string(sms) + " on a device of " + std::to_string(num_sms) + " SMs"};
  if (sms != options.num_sms)
    spdlog::warn("an SM group of {} was asked for; the simulated driver makes one of {} (the other group has {})",
                 options.num_sms, sms, num_sms - sms);
  const std::shared_ptr<const CostModel> whole = cost_model_;
  auto lane_cost = std::make_shared<const SkewedCostModel>(whole, confined_to(sms, num_sms, partition_.hbm_share_per_sm));
  // The lane's HBM traffic as the chats make it: a decode step reads the
  // weights once (priced here on the whole device), a step every lane step
  // time or every pace, whichever is longer.
  const StepShape chat_step{.sequences = {{.num_new_tokens = 1, .num_computed_tokens = 1024}}};
  const double weight_bytes = whole->predict_terms(chat_step).gemm_memory_ms * 1e-3 * partition_.hbm_bytes_per_s;
  const double step_s = std::max(lane_cost->predict_step_ms(chat_step), options.step_interval_ms) * 1e-3;
  const double traffic_tb_per_s = step_s > 0 ? weight_bytes / step_s / 1e12 : 0.0;
  const double contention = 1.0 + partition_.prefill_slowdown_per_decode_tb_per_s * traffic_tb_per_s;
  auto lane = std::make_unique<SimBackend>(lane_cost, lane_info_of(info_), tokens_);
  cost_model_ = std::make_shared<const SkewedCostModel>(
      whole, confined_to(num_sms - sms, num_sms, partition_.hbm_share_per_sm, contention));
  partition_.num_sms = 0;  // split once
  return lane;
}

Result<std::unique_ptr<Backend>> SimBackend::make_lane(const LaneOptions& options) {
  SLUICE_TRY_ASSIGN(lane, make_sm_lane(options));
  return std::unique_ptr<Backend>(std::move(lane));
}

}  // namespace sluice::sim
