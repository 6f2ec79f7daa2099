// The host side of one engine step of a batched DeepSeek-V4 forward on a
// device (issue 18): what the device kernels (backend/cuda/kernels/
// deepseek_v4_kernels.h: V4Paged*, launch_v4_compress) need besides the
// tensors, as flat int32 arrays ready to upload. Pure C++, so the CPU tests
// check it (tests/model/deepseek_v4_step_plan_test.cpp runs a plan on the
// host and lands on the bytes DeepseekV4Reference's per-row compression
// leaves in the blocks).
//
// Why a plan: the reference folds each row's compressor projections into the
// pool states of the entries it feeds (deepseek_v4_pool_fold.h), one row
// after another, each state kept in the block of its latest token. A batched
// step instead folds, for each entry the step touches, the step's rows in
// order from the state before the step, as independent items, and stores
// only the states the reference's row-by-row writes leave in the blocks.
#pragma once

#include <cstdint>
#include <vector>

#include "sluice/backend/ops.h"

namespace sluice {

// The step's block tables and rows (positions, sequences) flattened.
struct DeepseekV4StepTables {
  std::vector<std::int32_t> block_ids;             // every sequence's table, back to back
  std::vector<std::int32_t> sequence_table_begin;  // [sequences]
  std::vector<std::int32_t> sequence_table_len;    // [sequences]
  std::vector<std::int32_t> sequence_first_position;  // [sequences]: num_computed_tokens
  std::vector<std::int32_t> sequence_row_begin;    // [sequences + 1]: sequence s has rows [begin[s], begin[s + 1])
  std::vector<std::int32_t> row_sequence;          // [rows]
  std::vector<std::int32_t> positions;             // [rows]

  static DeepseekV4StepTables make(const StepLayout& layout);
};

// One compressor kind's plan (every layer with this rate and overlap shares
// it): the batched form of DeepseekV4Reference::compress. An item folds one
// sequence's step rows [first_row, first_row + count), positions
// first_token on, into one entry's pool state: from the state the block of
// first_token - 1 holds (kReadState: the entry opened before the step) or
// from empty. Token t gives entry e its second half when t is in window e
// of overlapping windows, its first half when in window e - 1, all of it for
// disjoint windows; the position bias is ape's row t % rate. Then it stores
// the state into the block of its last token, slot entry % slots
// (kStoreState), and/or emits the entry there (kEmit: its window's last
// token). No item reads what the step stores, so a device runs them at once;
// an entry gets an item for each block it has tokens in this step (the state
// the reference leaves there), and of two items that would store one slot of
// one block only the later token's stores.
struct DeepseekV4CompressPlan {
  static constexpr std::int32_t kReadState = 1, kStoreState = 2, kEmit = 4;
  std::vector<std::int32_t> item_sequence, item_entry, item_first_row, item_first_token, item_count, item_flags;
  std::vector<std::int32_t> item_emit_row;  // [items]: the emitted entry's row (kEmit), else -1
  // The emitted entries by row: their sequence, index and first position (index * rate).
  std::vector<std::int32_t> entry_sequence, entry_index, entry_position;

  std::int32_t num_items() const { return static_cast<std::int32_t>(item_entry.size()); }
  std::int32_t num_entries() const { return static_cast<std::int32_t>(entry_index.size()); }

  // rate: tokens a window; overlap: CSA's (two states open, the previous
  // window's first half pooled too); block_size: the KV blocks' tokens.
  static DeepseekV4CompressPlan make(const DeepseekV4StepTables& tables, std::int32_t rate, bool overlap,
                                     std::int32_t block_size);
};

// The window latents of a step (docs/kv-v4.md): a block keeps only its last
// window_slots latents (slot position % window_slots), so a row's slot may be
// taken later in the same step by the row window_slots on, which the rows
// between still see. The device therefore reads the latents of positions
// before the step from the blocks and the step's own from its rows (the
// gather's `fresh` buffer), then stores, of the rows that map to one slot of
// one block, only the last: the latent the reference's row-by-row stores leave.
// (A sequence's first row is DeepseekV4StepTables::sequence_row_begin.)
struct DeepseekV4WindowPlan {
  std::vector<std::int32_t> row_first_row;  // [rows]: the row of its sequence's first position this step
  std::vector<std::int32_t> store_row;      // the rows whose latents are stored, ascending

  static DeepseekV4WindowPlan make(const DeepseekV4StepTables& tables, std::int32_t window_slots,
                                   std::int32_t block_size);
};

// The CSA indexer's inputs for a step (launch_v4_indexer_scores / _top_k):
// every sequence's visible index keys gathered into one pool, after the
// step's compression wrote the entries its rows complete (a row sees the
// entries of windows that ended at or before it, its own included:
// (position + 1) / rate of them), and each row's slice of that pool. The
// pool is described per sequence, not per key: at batch 64 x 32k a list of
// its 524,288 keys took ~21 ms of host time a step (S13-v4fp8); the device
// expands it (launch_v4_gather_index_keys).
struct DeepseekV4IndexPlan {
  // Sequence s's keys are pool rows [sequence_key_begin[s], sequence_key_begin[s + 1]),
  // its entries 0, 1, ... in order; [sequences + 1].
  std::vector<std::int32_t> sequence_key_begin;
  std::vector<std::int32_t> row_key_begin, row_num_visible;  // [rows]
  std::int32_t max_visible = 0;                              // the scores workspace's width

  std::int32_t num_keys() const { return sequence_key_begin.empty() ? 0 : sequence_key_begin.back(); }

  static DeepseekV4IndexPlan make(const DeepseekV4StepTables& tables, std::int32_t rate);
};

}  // namespace sluice
