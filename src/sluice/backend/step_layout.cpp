#include "sluice/backend/ops.h"

namespace sluice {

StepLayout StepLayout::from_batch(const Batch& batch) {
  StepLayout layout;
  const auto num_rows = batch.num_tokens();
  layout.token_ids.reserve(num_rows);
  layout.positions.reserve(num_rows);
  layout.sequences.reserve(batch.sequences.size());
  for (const SequenceStep& seq : batch.sequences) {
    SLUICE_CHECK_LE(static_cast<std::size_t>(seq.end_position()), seq.tokens.size());
    SequenceLayout entry{
        .row_begin = layout.num_rows(),
        .num_rows = seq.num_new_tokens,
        .num_computed_tokens = seq.num_computed_tokens,
        .block_table = {seq.block_table.begin(), seq.block_table.end()},
    };
    for (std::int32_t i = 0; i < seq.num_new_tokens; ++i) {
      const std::int32_t position = seq.num_computed_tokens + i;
      layout.token_ids.push_back(seq.tokens[position]);
      layout.positions.push_back(position);
    }
    if (seq.sample) {
      SLUICE_CHECK(seq.num_new_tokens > 0);
      layout.sample_rows.push_back(entry.row_begin + entry.num_rows - 1);
    }
    layout.sequences.push_back(std::move(entry));
  }
  return layout;
}

}  // namespace sluice
