#include "sluice/backend/cuda/step_metadata.h"

#include <algorithm>
#include <array>
#include <vector>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/prefill_split_plan.h"

namespace sluice::cuda {

StepMetadata::StepMetadata(cudaStream_t stream) : stream_(stream) {
  SLUICE_CUDA_CHECK(cudaEventCreateWithFlags(&upload_done_, cudaEventDisableTiming));
}

StepMetadata::~StepMetadata() { cudaEventDestroy(upload_done_); }

const StepDeviceView& StepMetadata::upload(const StepLayout& layout, const StepAttentionShape& shape,
                                           const std::optional<GraphKey>& graph) {
  const auto num_rows = layout.num_rows();
  const auto num_seqs = static_cast<std::int32_t>(layout.sequences.size());
  std::int64_t table_len = 0;
  for (const auto& s : layout.sequences) table_len += static_cast<std::int64_t>(s.block_table.size());
  const bool tensor_core_prefill = shape.head_dim > 0 && prefill_kernel_supports(shape.head_dim);

  std::vector<PrefillTile> tiles;
  std::vector<std::int32_t> split_rows;
  std::int32_t max_split_kv = 0;
  std::int64_t total_split_kv = 0;
  for (std::int32_t s = 0; s < num_seqs; ++s) {
    const SequenceLayout& seq = layout.sequences[s];
    if (tensor_core_prefill && seq.num_rows > 1) {
      for (std::int32_t r = 0; r < seq.num_rows; r += kPrefillTileRows)
        tiles.push_back({s, r, seq.num_computed_tokens + r,
                         seq.num_computed_tokens + std::min(seq.num_rows, r + kPrefillTileRows)});
    } else {
      for (std::int32_t r = 0; r < seq.num_rows; ++r) {
        split_rows.push_back(seq.row_begin + r);
        total_split_kv += seq.num_computed_tokens + r + 1;
      }
      if (seq.num_rows > 0) max_split_kv = std::max(max_split_kv, seq.num_computed_tokens + seq.num_rows);
    }
  }
  // Longest key ranges first: the causal tail of a long prompt finishes last otherwise.
  std::stable_sort(tiles.begin(), tiles.end(),
                   [](const PrefillTile& a, const PrefillTile& b) { return a.kv_end > b.kv_end; });
  // Too few tiles to fill the GPU (a short chunk over a long cached prefix):
  // tiles with a long prefix become pieces over parts of their keys. Without
  // the split, 256 rows over 100k keys took 2.5x as long (session 3).
  const PrefillSplitPlan split_plan = plan_prefill_split(tiles, shape.num_q_heads, shape.num_sms);
  const std::vector<std::array<std::int32_t, 4>>& pieces = split_plan.pieces;
  const auto num_tiles = static_cast<std::int64_t>(tiles.size());
  const auto num_sample = static_cast<std::int64_t>(layout.sample_rows.size());
  const auto num_split = static_cast<std::int64_t>(split_rows.size());
  const auto num_pieces = static_cast<std::int64_t>(pieces.size());
  // Section capacities, each rounded to 4 ints (16 bytes); under a graph they
  // depend on the key only, so every replay finds its sections at the captured
  // addresses.
  const std::int64_t table_capacity =
      graph ? static_cast<std::int64_t>(num_seqs) * graph->table_blocks_bucket : table_len;
  SLUICE_CHECK_LE(table_len, table_capacity);
  const std::array<std::int64_t, 12> sizes = {num_rows, num_rows, num_rows, num_seqs, num_seqs,
                                              num_seqs, num_seqs, table_capacity, num_sample,
                                              2 * num_tiles, num_split, 4 * num_pieces};
  std::array<std::int64_t, 12> offsets{};
  std::int64_t total = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    offsets[i] = total;
    total += align_up(sizes[i], 4);
  }
  total = std::max<std::int64_t>(total, 4);
  const std::int64_t bytes = total * 4;

  // The previous step's copy must be done before the pinned buffer is rewritten.
  SLUICE_CUDA_CHECK(cudaEventSynchronize(upload_done_));
  // Room for most steps from the first: each growth moves the buffer, which
  // drops every decode graph (they hold its address) for a new capture.
  const std::int64_t reserved = std::max(bytes, kReservedBytes);
  auto* host = static_cast<std::int32_t*>(host_.ensure(reserved));
  if (device_.ensure(reserved, stream_)) ++generation_;
  std::int32_t* h[12];
  for (std::size_t i = 0; i < sizes.size(); ++i) h[i] = host + offsets[i];
  std::copy(layout.token_ids.begin(), layout.token_ids.end(), h[0]);
  std::copy(layout.positions.begin(), layout.positions.end(), h[1]);
  std::int64_t table_at = 0;
  for (std::int32_t s = 0; s < num_seqs; ++s) {
    const SequenceLayout& seq = layout.sequences[s];
    for (std::int32_t r = 0; r < seq.num_rows; ++r) h[2][seq.row_begin + r] = s;
    h[3][s] = seq.row_begin;
    h[4][s] = seq.num_rows;
    h[5][s] = seq.num_computed_tokens;
    h[6][s] = static_cast<std::int32_t>(table_at);
    std::copy(seq.block_table.begin(), seq.block_table.end(), h[7] + table_at);
    table_at += static_cast<std::int64_t>(seq.block_table.size());
  }
  std::copy(layout.sample_rows.begin(), layout.sample_rows.end(), h[8]);
  for (std::int64_t t = 0; t < num_tiles; ++t) {
    h[9][2 * t] = tiles[t].seq;
    h[9][2 * t + 1] = tiles[t].row;
  }
  std::copy(split_rows.begin(), split_rows.end(), h[10]);
  for (std::int64_t i = 0; i < num_pieces; ++i) std::copy(pieces[i].begin(), pieces[i].end(), h[11] + 4 * i);
  SLUICE_CUDA_CHECK(
      cudaMemcpyAsync(device_.data(), host, static_cast<std::size_t>(bytes), cudaMemcpyHostToDevice, stream_));
  SLUICE_CUDA_CHECK(cudaEventRecord(upload_done_, stream_));

  const auto* d = static_cast<const std::int32_t*>(device_.data());
  view_ = StepDeviceView{};
  view_.token_ids = d + offsets[0];
  view_.positions = d + offsets[1];
  view_.row_sequence = d + offsets[2];
  view_.seq_row_begin = d + offsets[3];
  view_.seq_num_rows = d + offsets[4];
  view_.seq_num_computed = d + offsets[5];
  view_.seq_block_offset = d + offsets[6];
  view_.block_tables = d + offsets[7];
  view_.sample_rows = d + offsets[8];
  view_.prefill_tiles = d + offsets[9];
  view_.split_rows = d + offsets[10];
  view_.prefill_split_pieces = d + offsets[11];
  view_.num_prefill_split_pieces = static_cast<std::int32_t>(num_pieces);
  view_.prefill_split_pieces_per_tile = split_plan.pieces_per_tile;
  view_.num_rows = num_rows;
  view_.num_sequences = num_seqs;
  view_.num_sample_rows = static_cast<std::int32_t>(num_sample);
  view_.num_prefill_tiles = static_cast<std::int32_t>(num_tiles);
  view_.num_split_rows = static_cast<std::int32_t>(num_split);
  view_.max_split_kv_tokens = graph ? graph->context_bucket : max_split_kv;
  view_.total_split_kv_tokens = graph ? 0 : total_split_kv;
  view_.uneven_split_rows = graph ? graph->uneven_split_rows : split_rows_uneven(total_split_kv, max_split_kv, num_split);
  return view_;
}

}  // namespace sluice::cuda
