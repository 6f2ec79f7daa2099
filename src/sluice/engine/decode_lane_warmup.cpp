#include "sluice/engine/decode_lane_warmup.h"

#include <algorithm>
#include <chrono>
#include <span>

#include <fmt/format.h>

namespace sluice {
namespace {

// The shortest context warmed, and the step between two: the CUDA lane's
// graphs and kernel choices go by the context in powers of two from 256
// (backend/cuda/decode_graphs.h), and a context class first seen while
// serving stalled the chats (S16-lead-1: the first step at <= 2048 tokens,
// 287 ms, where the warm-up had covered 512, 8192 and 131072 only).
constexpr std::int32_t kShortestContext = 256;

// One greedy decode step: sequence i at contexts[i] (the first contexts[i] of
// `zeros`), its block table cycling over the cache's blocks (reads of free
// blocks, one write per sequence).
Status run_step(Backend& lane, const BackendInfo& info, std::span<const TokenId> zeros,
                const std::vector<std::int32_t>& contexts) {
  const std::int32_t bs = info.block_size_tokens;
  std::vector<std::vector<BlockId>> tables(contexts.size());
  Batch batch{.warm_up = true};
  BlockId next_block = 0;
  for (std::size_t i = 0; i < contexts.size(); ++i) {
    const std::int32_t context = contexts[i];
    for (std::int32_t b = 0; b < (context + bs - 1) / bs; ++b) {
      tables[i].push_back(next_block);
      next_block = (next_block + 1) % info.num_kv_blocks;
    }
    batch.sequences.push_back(SequenceStep{.seq_id = static_cast<SequenceId>(i + 1),
                                           .tokens = zeros.first(static_cast<std::size_t>(context)),
                                           .num_prompt_tokens = context - 1,
                                           .num_computed_tokens = context - 1,
                                           .num_new_tokens = 1,
                                           .block_table = tables[i],
                                           .sample = true});
  }
  SLUICE_TRY_ASSIGN(output, lane.execute(batch));
  for (const SequenceOutput& out : output.sequences)
    if (!out.token) return Error{"a warm-up decode step sampled no token"};
  return Ok{};
}

}  // namespace

std::vector<std::int32_t> warmup_batch_sizes(std::int32_t max_num_seqs) {
  std::vector<std::int32_t> sizes;
  for (std::int32_t n = 1; n <= std::min(max_num_seqs, 16); ++n) sizes.push_back(n);
  for (std::int32_t octave = 16; octave < max_num_seqs; octave *= 2)
    for (std::int32_t n : {octave + octave / 2, 2 * octave})
      if (n <= max_num_seqs) sizes.push_back(n);
  if (sizes.back() != max_num_seqs) sizes.push_back(max_num_seqs);
  return sizes;
}

Result<DecodeLaneWarmup> warm_decode_lane(Backend& lane, const BackendInfo& info, std::int32_t max_num_seqs,
                                          std::int32_t max_context) {
  if (max_num_seqs <= 0 || max_context <= 1 || info.num_kv_blocks <= 0 || info.block_size_tokens <= 0)
    return Error{"decode lane warm-up: no batch or no context to warm"};
  const auto start = std::chrono::steady_clock::now();
  DecodeLaneWarmup done{.batch_sizes = warmup_batch_sizes(max_num_seqs), .contexts = {}};
  // Every doubling to the longest, from a short context below it (so a long
  // sequence has short ones beside it).
  for (std::int32_t c = std::min(kShortestContext, std::max(1, max_context / 4)); c < max_context; c *= 2)
    done.contexts.push_back(c);
  done.contexts.push_back(max_context);
  const std::int32_t shortest = done.contexts.front();
  const std::vector<TokenId> zeros(static_cast<std::size_t>(done.contexts.back()), 0);
  // A step no server could run (more KV than the cache holds) is not warmed:
  // reading its cycled blocks would take seconds.
  const std::int64_t capacity = static_cast<std::int64_t>(info.num_kv_blocks) * info.block_size_tokens;
  auto warm = [&](const std::vector<std::int32_t>& contexts) -> Status {
    std::int64_t total = 0;
    for (std::int32_t c : contexts) total += c;
    if (total > capacity) return Ok{};
    if (Status ran = run_step(lane, info, zeros, contexts); !ran.ok())
      return Error{fmt::format("decode lane warm-up, {} sequences, the longest at {} tokens: {}", contexts.size(),
                               contexts.front(), ran.error_message())};
    ++done.num_steps;
    return Ok{};
  };
  // Largest first, batch and context: a buffer that grows moves, which drops
  // every graph captured before (S15-lead-4, smallest first: the first
  // 64-row step dropped the 84 graphs captured before it).
  for (auto rows_it = done.batch_sizes.rbegin(); rows_it != done.batch_sizes.rend(); ++rows_it) {
    const std::int32_t rows = *rows_it;
    for (auto context_it = done.contexts.rbegin(); context_it != done.contexts.rend(); ++context_it) {
      const std::int32_t context = *context_it;
      SLUICE_TRY(warm(std::vector<std::int32_t>(static_cast<std::size_t>(rows), context)));
      if (rows == 1 || context == shortest) continue;
      std::vector<std::int32_t> uneven(static_cast<std::size_t>(rows), shortest);
      uneven.front() = context;
      SLUICE_TRY(warm(uneven));
    }
  }
  done.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return done;
}

}  // namespace sluice
