#include "sluice/engine/prefill_warmup.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include <fmt/format.h>

namespace sluice {

PrefillWarmupShape largest_prefill_chunk(const BackendInfo& info, std::int32_t max_num_batched_tokens) {
  const std::int64_t capacity = static_cast<std::int64_t>(info.num_kv_blocks) * info.block_size_tokens;
  const auto end = static_cast<std::int32_t>(std::min<std::int64_t>(info.max_model_len_tokens, capacity));
  const std::int32_t chunk = std::clamp(max_num_batched_tokens, 0, end);
  return {.num_computed_tokens = end - chunk, .num_new_tokens = chunk};
}

Result<PrefillWarmup> warm_largest_prefill(Backend& backend, std::int32_t max_num_batched_tokens) {
  const BackendInfo& info = backend.info();
  const PrefillWarmupShape shape = largest_prefill_chunk(info, max_num_batched_tokens);
  if (shape.num_new_tokens <= 0) return Error{"prefill warm-up: no chunk to run (an empty cache or batch)"};
  const auto start = std::chrono::steady_clock::now();
  const std::int32_t end = shape.num_computed_tokens + shape.num_new_tokens;
  const std::vector<TokenId> zeros(static_cast<std::size_t>(end), 0);
  std::vector<BlockId> table((end + info.block_size_tokens - 1) / info.block_size_tokens);
  for (std::size_t b = 0; b < table.size(); ++b) table[b] = static_cast<BlockId>(b);
  Batch batch{.warm_up = true};
  batch.sequences.push_back(SequenceStep{.seq_id = 1,
                                         .tokens = zeros,
                                         .num_prompt_tokens = end,
                                         .num_computed_tokens = shape.num_computed_tokens,
                                         .num_new_tokens = shape.num_new_tokens,
                                         .block_table = table,
                                         .sample = true});
  auto output = backend.execute(batch);
  if (!output.ok())
    return Error{fmt::format("prefill warm-up, a chunk of {} tokens after {} (--max-num-batched-tokens at the "
                             "deepest position): {}",
                             shape.num_new_tokens, shape.num_computed_tokens, output.error_message())};
  if (output->sequences.size() != 1 || !output->sequences.front().token)
    return Error{"a prefill warm-up step sampled no token"};
  return PrefillWarmup{.shape = shape,
                       .seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                       .free_bytes_after = backend.device_memory_free_bytes()};
}

}  // namespace sluice
