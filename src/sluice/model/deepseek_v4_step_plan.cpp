#include "sluice/model/deepseek_v4_step_plan.h"

#include <algorithm>

#include "sluice/common/check.h"
#include "sluice/model/deepseek_v4_pool_fold.h"

namespace sluice {

DeepseekV4StepTables DeepseekV4StepTables::make(const StepLayout& layout) {
  DeepseekV4StepTables t;
  std::int32_t next_row = 0;
  for (std::size_t s = 0; s < layout.sequences.size(); ++s) {
    const SequenceLayout& seq = layout.sequences[s];
    SLUICE_CHECK_EQ(seq.row_begin, next_row);  // rows in sequence order, as the forward numbers them
    t.sequence_row_begin.push_back(next_row);
    next_row += seq.num_rows;
    t.sequence_table_begin.push_back(static_cast<std::int32_t>(t.block_ids.size()));
    t.sequence_table_len.push_back(static_cast<std::int32_t>(seq.block_table.size()));
    t.sequence_first_position.push_back(seq.num_computed_tokens);
    t.block_ids.insert(t.block_ids.end(), seq.block_table.begin(), seq.block_table.end());
    for (std::int32_t i = 0; i < seq.num_rows; ++i) {
      t.row_sequence.push_back(static_cast<std::int32_t>(s));
      t.positions.push_back(seq.num_computed_tokens + i);
    }
  }
  SLUICE_CHECK_EQ(next_row, layout.num_rows());
  t.sequence_row_begin.push_back(next_row);
  return t;
}

DeepseekV4CompressPlan DeepseekV4CompressPlan::make(const DeepseekV4StepTables& tables, std::int32_t rate,
                                                    bool overlap, std::int32_t block_size) {
  SLUICE_CHECK(rate > 0 && block_size > 0 && block_size % rate == 0);
  DeepseekV4CompressPlan plan;
  for (std::size_t s = 0; s < tables.sequence_first_position.size(); ++s) {
    const std::int64_t first = tables.sequence_first_position[s];
    const std::int32_t row = tables.sequence_row_begin[s];  // the step row of the sequence's first new token
    const std::int64_t count = tables.sequence_row_begin[s + 1] - row;
    const std::int64_t end = first + count;  // the next step's first position
    // The entries the step's tokens feed: their own windows' and, overlapping, the next.
    const std::int64_t last_entry = count == 0 ? first / rate - 1 : (end - 1) / rate + (overlap ? 1 : 0);
    for (std::int64_t e = first / rate; e <= last_entry; ++e) {
      const std::int64_t opens = deepseek_v4_entry_first_token(e, rate, overlap), closes = (e + 1) * rate - 1;
      const std::int64_t t0 = std::max(opens, first), t_end = std::min(closes, end - 1);
      if (t0 > t_end) continue;
      for (std::int64_t b = t0 / block_size; b <= t_end / block_size; ++b) {
        const std::int64_t last = std::min(t_end, (b + 1) * block_size - 1);
        const bool emit = last == closes;
        // The entry that takes this slot next opens at closes + 1; in this step and block, it stores.
        const bool store = !(emit && closes + 1 < end && (closes + 1) / block_size == closes / block_size);
        plan.item_sequence.push_back(static_cast<std::int32_t>(s));
        plan.item_entry.push_back(static_cast<std::int32_t>(e));
        plan.item_first_row.push_back(static_cast<std::int32_t>(row + t0 - first));
        plan.item_first_token.push_back(static_cast<std::int32_t>(t0));
        plan.item_count.push_back(static_cast<std::int32_t>(last - t0 + 1));
        plan.item_flags.push_back((opens < first ? kReadState : 0) | (store ? kStoreState : 0) | (emit ? kEmit : 0));
        plan.item_emit_row.push_back(emit ? plan.num_entries() : -1);
        if (emit) {
          plan.entry_sequence.push_back(static_cast<std::int32_t>(s));
          plan.entry_index.push_back(static_cast<std::int32_t>(e));
          plan.entry_position.push_back(static_cast<std::int32_t>(e * rate));
        }
      }
    }
  }
  return plan;
}

DeepseekV4WindowPlan DeepseekV4WindowPlan::make(const DeepseekV4StepTables& tables, std::int32_t window_slots,
                                                std::int32_t block_size) {
  SLUICE_CHECK(window_slots > 0 && block_size > 0);
  DeepseekV4WindowPlan plan;
  for (std::size_t r = 0; r < tables.positions.size(); ++r) {
    const auto q = static_cast<std::size_t>(tables.row_sequence[r]);
    const std::int32_t first_row = tables.sequence_row_begin[q];
    const std::int32_t last_position = tables.sequence_first_position[q] + tables.sequence_row_begin[q + 1] - first_row - 1;
    plan.row_first_row.push_back(first_row);
    const std::int32_t p = tables.positions[r];
    const std::int32_t next = p + window_slots;  // the next position in p's slot of p's block
    if (next <= last_position && next / block_size == p / block_size) continue;
    plan.store_row.push_back(static_cast<std::int32_t>(r));
  }
  return plan;
}

DeepseekV4IndexPlan DeepseekV4IndexPlan::make(const DeepseekV4StepTables& tables, std::int32_t rate) {
  SLUICE_CHECK(rate > 0);
  DeepseekV4IndexPlan plan;
  const std::size_t sequences = tables.sequence_first_position.size();
  std::vector<std::int32_t> last_position(sequences, -1);
  for (std::size_t row = 0; row < tables.positions.size(); ++row)
    last_position[static_cast<std::size_t>(tables.row_sequence[row])] = tables.positions[row];
  plan.sequence_key_begin.assign(sequences + 1, 0);
  for (std::size_t s = 0; s < sequences; ++s)  // its last row sees the most
    plan.sequence_key_begin[s + 1] = plan.sequence_key_begin[s] + (last_position[s] + 1) / rate;
  for (std::size_t row = 0; row < tables.positions.size(); ++row) {
    const std::int32_t visible = (tables.positions[row] + 1) / rate;
    plan.row_key_begin.push_back(plan.sequence_key_begin[static_cast<std::size_t>(tables.row_sequence[row])]);
    plan.row_num_visible.push_back(visible);
    plan.max_visible = std::max(plan.max_visible, visible);
  }
  return plan;
}

}  // namespace sluice
