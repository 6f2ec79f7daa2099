#include "sluice/model/generate.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "sluice/common/token_ids.h"

namespace sluice {

Result<GenerateResult> generate_sequence(Backend& backend, const std::vector<TokenId>& prompt,
                                         const GenerateOptions& options) {
  const BackendInfo& info = backend.info();
  if (prompt.empty()) return Error{"the prompt is empty"};
  SLUICE_TRY(check_token_ids(prompt, info.vocab_size));
  const std::int64_t total = static_cast<std::int64_t>(prompt.size()) + options.max_new_tokens;
  if (total > info.max_model_len_tokens)
    return Error{fmt::format("prompt of {} tokens plus {} new tokens exceeds the maximum model length of {}",
                             prompt.size(), options.max_new_tokens, info.max_model_len_tokens)};
  const std::int64_t num_blocks = (total + info.block_size_tokens - 1) / info.block_size_tokens;
  if (num_blocks > info.num_kv_blocks)
    return Error{fmt::format("{} tokens need {} KV blocks; the cache has {}", total, num_blocks, info.num_kv_blocks)};
  // One sequence owns the pool: blocks in order.
  std::vector<BlockId> block_table(static_cast<std::size_t>(num_blocks));
  std::iota(block_table.begin(), block_table.end(), 0);

  std::vector<TokenId> tokens = prompt;
  GenerateResult result;
  std::int32_t num_computed = 0;
  const auto num_prompt = static_cast<std::int32_t>(prompt.size());
  while (static_cast<std::int32_t>(result.tokens.size()) < options.max_new_tokens) {
    const std::int32_t pending = static_cast<std::int32_t>(tokens.size()) - num_computed;
    const std::int32_t chunk = options.prefill_chunk_tokens > 0 ? std::min(pending, options.prefill_chunk_tokens) : pending;
    const bool sample = num_computed + chunk == static_cast<std::int32_t>(tokens.size());
    Batch batch;
    batch.sequences.push_back(SequenceStep{.seq_id = 0,
                                           .tokens = tokens,
                                           .num_prompt_tokens = num_prompt,
                                           .num_computed_tokens = num_computed,
                                           .num_new_tokens = chunk,
                                           .block_table = block_table,
                                           .sample = sample,
                                           .sampling = options.sampling,
                                           .return_logits = options.return_logits});
    SLUICE_TRY_ASSIGN(output, backend.execute(batch));
    num_computed += chunk;
    if (!sample) continue;
    SequenceOutput& out = output.sequences.at(0);
    if (!out.token) return Error{"backend returned no token for a sampling step"};
    result.tokens.push_back(*out.token);
    result.logprobs.push_back(out.logprob);
    if (options.return_logits) result.logits.push_back(std::move(out.logits));
    tokens.push_back(*out.token);
    if (std::find(options.stop_token_ids.begin(), options.stop_token_ids.end(), *out.token) !=
        options.stop_token_ids.end())
      break;
  }
  return result;
}

}  // namespace sluice
