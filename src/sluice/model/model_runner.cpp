#include "sluice/model/model_runner.h"

#include <array>
#include <chrono>
#include <algorithm>
#include <climits>
#include <cstdio>
#include <optional>
#include <system_error>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "sluice/common/setup_time.h"
#include "sluice/dist/cpu_communicator.h"
#include "sluice/model/decoder_model.h"

namespace sluice {
namespace {

// One rank of a tensor-parallel group (the only one without a group): its
// Ops (KV pages, scratch, threads) and its share of the weights (shared with
// the lanes made from it).
struct Rank {
  std::unique_ptr<Ops> ops;
  std::shared_ptr<const DecoderModel> model;
};

class ModelRunner final : public Backend {
 public:
  ModelRunner(std::vector<Rank> ranks, std::unique_ptr<CpuCommunicatorGroup> group,
              std::shared_ptr<const Checkpoint> checkpoint, BackendInfo info)
      : ranks_(std::move(ranks)), group_(std::move(group)), ops_(ranks_.front().ops.get()),
        checkpoint_(std::move(checkpoint)),
        info_(std::move(info)) {}

  const BackendInfo& info() const override { return info_; }

  // A group that lost a rank runs nothing again (communicator.h).
  std::optional<std::string> fatal_error() const override {
    if (!group_) return std::nullopt;
    const std::optional<std::string> reason = group_->abort_reason();
    if (!reason) return std::nullopt;
    return fmt::format("the tensor-parallel group is down: {}", *reason);
  }

  std::optional<std::int64_t> device_memory_free_bytes() const override { return ops_->device_memory_free_bytes(); }

  Status allocate_host_kv_cache(std::int32_t num_blocks) override {
    if (info_.kv_bytes_per_block == 0) return Error{"the " + info_.name + " ops have no host KV tier"};
    return ops_->allocate_host_kv_cache(num_blocks);
  }

  // One rank only: a lane of a tensor-parallel group would need its own
  // communicators. DeepSeek-V4's device runner keeps one step's state in the
  // model, so it runs one step loop.
  Result<std::unique_ptr<Backend>> make_lane(const LaneOptions& options) override {
    if (group_) return Error{"two step loops are not implemented with tensor parallelism"};
    const Rank& rank = ranks_.front();
    if (rank.model->kv_cache_spec(1, info_.block_size_tokens).layout == KvCacheLayout::model_defined)
      return Error{"two step loops are not implemented for DeepSeek-V4 (its device runner keeps one step's state)"};
    SLUICE_TRY_ASSIGN(lane_ops, rank.ops->make_lane(options));
    std::vector<Rank> lane_ranks;
    lane_ranks.push_back(Rank{.ops = std::move(lane_ops), .model = rank.model});
    return std::unique_ptr<Backend>(
        std::make_unique<ModelRunner>(std::move(lane_ranks), nullptr, checkpoint_, lane_info_of(info_)));
  }

  Result<StepOutput> execute(const Batch& batch) override {
    const auto start = std::chrono::steady_clock::now();
    const double setup_before_ms = total_setup_ms();
    // Copies first, on their own stream where the ops have one: they overlap the forward.
    std::vector<KvCopyCompletion> copied;
    if (!batch.copies.empty() || (batch.sequences.empty() && info_.kv_bytes_per_block > 0)) {
      SLUICE_TRY_ASSIGN(done, ops_->copy_kv_blocks(batch.copies, batch.sequences.empty()));
      copied = std::move(done);
    }
    if (batch.sequences.empty()) {
      return StepOutput{.step_time_ms = elapsed_ms(start), .completed_copies = std::move(copied)};
    }
    check_batch(batch);
    const StepLayout layout = StepLayout::from_batch(batch);
    SLUICE_TRY_ASSIGN(logits, forward(layout));
    const double launched_ms = elapsed_ms(start);
    // On the GPU the forward is in flight here: the masks are computed under it.
    batch.fill_late_masks();
    const double masked_ms = elapsed_ms(start);

    std::vector<SampleRequest> requests;
    for (const SequenceStep& seq : batch.sequences) {
      if (!seq.sample) continue;
      requests.push_back(SampleRequest{.params = seq.sampling,
                                       .tokens = seq.tokens.first(static_cast<std::size_t>(seq.end_position())),
                                       .num_prompt_tokens = seq.num_prompt_tokens,
                                       .generated_index = std::max(0, seq.end_position() - seq.num_prompt_tokens),
                                       .allowed_tokens = seq.allowed_tokens,
                                       .return_logits = seq.return_logits});
    }
    std::vector<SampleResult> samples;
    if (!requests.empty()) {
      samples = ops_->sample(logits, requests);
    } else {
      for (Rank& rank : ranks_) rank.ops->end_step();
    }
    const double sampled_ms = elapsed_ms(start);

    StepOutput output;
    std::size_t next_sample = 0;
    for (const SequenceStep& seq : batch.sequences) {
      SequenceOutput out{.seq_id = seq.seq_id};
      if (seq.sample) {
        SampleResult& s = samples[next_sample++];
        out.token = s.token;
        out.logprob = s.logprob;
        out.top_logprobs = std::move(s.top_logprobs);
        out.logits = std::move(s.logits);
      }
      output.sequences.push_back(std::move(out));
    }
    output.completed_copies = std::move(copied);
    if (info_.kv_bytes_per_block > 0) {  // copies that landed while the forward ran
      SLUICE_TRY_ASSIGN(more, ops_->copy_kv_blocks({}, false));
      output.completed_copies.insert(output.completed_copies.end(), more.begin(), more.end());
    }
    output.step_time_ms = elapsed_ms(start);
    output.setup_ms = total_setup_ms() - setup_before_ms;
    log_slow_decode_step(batch, output.step_time_ms, {launched_ms, masked_ms, sampled_ms});
    return output;
  }

 private:
  // Every rank's forward of the step: rank 0 on this thread, each other rank
  // on a thread of its own for the step. A rank's failure stops at its
  // thread's boundary and aborts the group, which wakes every rank waiting in
  // a collective: the step fails with the first failing rank's reason.
  Result<Tensor> forward(const StepLayout& layout) {
    if (!group_) return forward_rank(0, layout);
    if (std::optional<std::string> down = fatal_error()) return Error{*down, ErrorCode::kUnavailable};
    std::vector<std::optional<Result<Tensor>>> results(ranks_.size());
    {
      std::vector<std::jthread> others;
      try {
        for (std::size_t r = 1; r < ranks_.size(); ++r)
          others.emplace_back([this, r, &layout, &results] { results[r] = forward_rank(r, layout); });
      } catch (const std::system_error& e) {
        // Ranks already started wait for rank 0: the abort lets them return
        // before `others` joins them.
        group_->rank(0).abort(fmt::format("cannot start a rank's thread: {}", e.what()));
        return Error{fmt::format("tensor-parallel step failed: {}", *group_->abort_reason())};
      }
      results[0] = forward_rank(0, layout);
    }
    for (const auto& result : results)
      if (!result->ok())
        return Error{fmt::format("tensor-parallel step failed: {}",
                                 group_->abort_reason().value_or(result->error_message()))};
    return std::move(*results[0]);
  }

  Result<Tensor> forward_rank(std::size_t r, const StepLayout& layout) {
    Rank& rank = ranks_[r];
    if (!group_) {
      rank.ops->begin_step(layout);
      return rank.model->forward(*rank.ops, layout);
    }
    Communicator& comm = group_->rank(static_cast<std::int32_t>(r));
    try {
      rank.ops->begin_step(layout);
      Result<Tensor> logits = rank.model->forward(*rank.ops, layout);
      if (!logits.ok()) comm.abort(logits.error_message());
      return logits;
    } catch (const std::exception& e) {
      comm.abort(e.what());
      return Error{e.what()};
    }
  }

  // A decode-only step over kSlowDecodeStepMs breaks a chat's 150 ms promise:
  // say where its time went (S18-lead-1 saw a decode lane's 2-row step take
  // 465 ms, as long as the other lane's chunk beside it).
  static void log_slow_decode_step(const Batch& batch, double step_ms, std::array<double, 3> phases_ms) {
    constexpr double kSlowDecodeStepMs = 150.0;
    if (step_ms <= kSlowDecodeStepMs || batch.warm_up) return;
    for (const SequenceStep& s : batch.sequences)
      if (s.num_new_tokens != 1) return;
    spdlog::warn("a decode step of {} rows took {:.1f} ms: forward launched by {:.1f} ms, masks by {:.1f}, sampled by "
                 "{:.1f}",
                 batch.sequences.size(), step_ms, phases_ms[0], phases_ms[1], phases_ms[2]);
  }

  static double elapsed_ms(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }

  // Batches come from the engine, which validated every request
  // (engine/request_validation.h), or from generate_sequence, which checks its
  // prompt: a malformed one is a bug there, and would write other sequences' KV.
  void check_batch(const Batch& batch) const {
    const std::int32_t block_size = info_.block_size_tokens;
    for (const SequenceStep& seq : batch.sequences) {
      const std::int64_t end = seq.end_position();
      SLUICE_CHECK_LT(0, seq.num_new_tokens);
      SLUICE_CHECK_LE(0, seq.num_computed_tokens);
      SLUICE_CHECK_LE(end, static_cast<std::int64_t>(seq.tokens.size()));
      SLUICE_CHECK_LE(end, static_cast<std::int64_t>(info_.max_model_len_tokens));
      SLUICE_CHECK_LE((end + block_size - 1) / block_size, static_cast<std::int64_t>(seq.block_table.size()));
      for (BlockId block : seq.block_table)
        SLUICE_CHECK_MSG(block >= 0 && block < info_.num_kv_blocks,
                         fmt::format("sequence {}: block {} outside the pool of {}", seq.seq_id, block,
                                     info_.num_kv_blocks));
      for (std::int64_t p = seq.num_computed_tokens; p < end; ++p)
        SLUICE_CHECK_MSG(seq.tokens[p] >= 0 && seq.tokens[p] < info_.vocab_size,
                         fmt::format("sequence {}: token id {} outside the vocabulary of {}", seq.seq_id,
                                     seq.tokens[p], info_.vocab_size));
    }
  }

  std::vector<Rank> ranks_;
  std::unique_ptr<CpuCommunicatorGroup> group_;  // null with one rank
  Ops* ops_;  // rank 0's: copies and sampling
  std::shared_ptr<const Checkpoint> checkpoint_;  // keeps the mmapped weights alive
  BackendInfo info_;
};

void print_progress(std::size_t done, std::size_t total, std::size_t bytes_done, std::size_t bytes_total) {
  std::fprintf(stderr, "\rloading weights: %zu/%zu tensors, %.2f/%.2f GB", done, total, bytes_done / 1e9,
               bytes_total / 1e9);
  if (done == total) std::fputc('\n', stderr);
}

}  // namespace

Result<std::unique_ptr<Backend>> make_model_runner(const std::string& model_dir, std::unique_ptr<Ops> ops,
                                                   const ModelRunnerOptions& options) {
  std::vector<std::unique_ptr<Ops>> rank_ops;
  rank_ops.push_back(std::move(ops));
  return make_tensor_parallel_model_runner(model_dir, std::move(rank_ops), options);
}

Result<std::unique_ptr<Backend>> make_tensor_parallel_model_runner(const std::string& model_dir,
                                                                   std::vector<std::unique_ptr<Ops>> rank_ops,
                                                                   const ModelRunnerOptions& options) {
  SLUICE_CHECK(!rank_ops.empty());
  const auto num_ranks = static_cast<std::int32_t>(rank_ops.size());
  if (num_ranks > 1 && options.device_memory_budget_bytes > 0)
    return Error{"sizing the KV cache by device memory is not implemented with tensor parallelism"};
  SLUICE_TRY_ASSIGN(config, load_model_config(model_dir));
  SLUICE_TRY_ASSIGN(checkpoint, Checkpoint::open(model_dir));
  if (options.block_size_tokens <= 0) return Error{"block size must be positive"};
  auto group = num_ranks > 1 ? std::make_unique<CpuCommunicatorGroup>(num_ranks) : nullptr;
  std::vector<Rank> ranks;
  for (std::int32_t r = 0; r < num_ranks; ++r) {
    Rank& rank = ranks.emplace_back(Rank{.ops = std::move(rank_ops[static_cast<std::size_t>(r)])});
    const bool progress = options.show_progress && r == 0;
    SLUICE_TRY_ASSIGN(model, load_decoder_model(config, checkpoint, *rank.ops,
                                                progress ? LoadProgress(print_progress) : LoadProgress(),
                                                group ? &group->rank(r) : nullptr, options.enable_expert_parallel));
    SLUICE_TRY(model->set_kv_cache_dtype(options.kv_cache_dtype));
    SLUICE_TRY(model->set_kv_block_size(options.block_size_tokens));
    rank.model = std::move(model);
  }
  Ops& ops = *ranks.front().ops;
  const DecoderModel& model = *ranks.front().model;
  BackendInfo info{.name = "model",
                   .block_size_tokens = options.block_size_tokens,
                   .vocab_size = config.vocab_size,
                   .max_model_len_tokens = options.max_model_len_tokens > 0 ? options.max_model_len_tokens
                                                                            : config.max_position_embeddings};
  // A block's bytes over all ranks (each holds its share of the KV heads, or
  // MLA's whole latent): kv_cache_bytes is the whole cache's.
  const KvCacheSpec block_spec = model.kv_cache_spec(1, options.block_size_tokens);
  const std::int64_t bytes_per_block =
      block_spec.bytes_per_block(block_spec.value_dtype(ops.activation_dtype())) * num_ranks;
  std::int64_t kv_cache_bytes = options.kv_cache_bytes;
  if (options.device_memory_budget_bytes > 0) {
    const std::optional<std::int64_t> free_bytes = ops.device_memory_free_bytes();
    if (!free_bytes) return Error{"sizing the KV cache by device memory needs a backend with device memory"};
    const std::int64_t used_bytes = options.device_memory_total_bytes - *free_bytes;
    kv_cache_bytes = options.device_memory_budget_bytes - used_bytes;
    if (kv_cache_bytes < bytes_per_block)
      return Error{fmt::format("no device memory left for the KV cache: budget {:.2f} GiB, {:.2f} GiB already in use "
                               "after loading the weights",
                               options.device_memory_budget_bytes / 1073741824.0, used_bytes / 1073741824.0)};
  }
  const std::int64_t derived_blocks = std::min<std::int64_t>(kv_cache_bytes / bytes_per_block, INT32_MAX);
  info.num_kv_blocks = options.num_kv_blocks > 0 && options.device_memory_budget_bytes <= 0
                           ? options.num_kv_blocks
                           : static_cast<std::int32_t>(derived_blocks);
  if (info.num_kv_blocks < 1)
    return Error{fmt::format("KV cache of {} bytes holds no block of {} bytes", kv_cache_bytes, bytes_per_block)};
  for (Rank& rank : ranks)
    SLUICE_TRY(rank.ops->allocate_kv_cache(rank.model->kv_cache_spec(info.num_kv_blocks, options.block_size_tokens)));
  // The host tier copies rank 0's pages only: one rank, for now.
  if (num_ranks == 1 && ops.host_link_bytes_per_s() > 0) {
    info.kv_bytes_per_block = bytes_per_block;
    info.host_link_bytes_per_s = ops.host_link_bytes_per_s();
  }
  return std::unique_ptr<Backend>(
      std::make_unique<ModelRunner>(std::move(ranks), std::move(group),
                                    std::make_shared<const Checkpoint>(std::move(checkpoint)), std::move(info)));
}

}  // namespace sluice
