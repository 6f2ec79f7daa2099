// The host side of one engine step of a batched DeepSeek-V4 forward on a
// device (issue 18): what the device kernels (backend/cuda/kernels/
// deepseek_v4_kernels.h: V4Paged*, launch_v4_compress) need besides the
// tensors, as flat int32 arrays ready to upload. Pure C++, so the CPU tests
// check it (tests/model/deepseek_v4_step_plan_test.cpp runs a plan on the
// host and lands on the bytes DeepseekV4Reference's per-row compression
// leaves in the blocks).
//
// Why a plan: the reference stores each row's compressor projections into its
// block's ring (DeepseekV4PagedState: one window, two with CSA's overlap) and
// pools a window the moment its last row arrives, one row after another. A
// batched step cannot: a prefill chunk of many windows would overwrite the
// ring before pooling it. So the projections of a step go to a dense buffer,
// per sequence [the ring rows its first completed window still needs][its new
// rows], the windows the step completes are pooled from that buffer, and only
// the rows the reference would leave in the ring are stored back.
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
  std::vector<std::int32_t> row_sequence;          // [rows]
  std::vector<std::int32_t> positions;             // [rows]

  static DeepseekV4StepTables make(const StepLayout& layout);
};

// One compressor kind's plan (every layer with this rate and overlap shares it).
struct DeepseekV4CompressPlan {
  std::int32_t buffer_rows = 0;  // the dense pending buffer: [buffer_rows, width] kv, the same for gates
  // Ring rows read back into the buffer (paged copies, sites pending_kv and pending_gate).
  std::vector<std::int32_t> read_buffer_row, read_sequence, read_position;
  // The buffer row of each step row's projections.
  std::vector<std::int32_t> new_buffer_row;  // [rows]
  // The entries the step completes, in (sequence, window) order: launch_v4_compress's
  // items (window_row, prev_window_row, position) and where they go (sequence, index).
  std::vector<std::int32_t> entry_sequence, entry_index, window_row, prev_window_row, entry_position;
  // The step rows whose projections are stored into the ring afterwards: for
  // each ring place the step touches, the last row that maps to it (the bytes
  // the reference's row-by-row stores leave).
  std::vector<std::int32_t> store_row;

  // rate: tokens a window; overlap: CSA's (ring of 2 windows, the previous
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
struct DeepseekV4WindowPlan {
  std::vector<std::int32_t> row_first_row;       // [rows]: the row of its sequence's first position this step
  std::vector<std::int32_t> sequence_first_row;  // [sequences]
  std::vector<std::int32_t> store_row;           // the rows whose latents are stored, ascending

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
