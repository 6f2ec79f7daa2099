// One DeepSeek-V4 sequence's state in the engine's paged blocks: the
// addressing of DeepseekV4KvLayout (deepseek_v4_kv_layout.h) behind the
// interface the forward pass writes through. Position p is in block
// block_table[p / block_size], its window latent at slot p % window_slots
// (a block keeps its last sliding_window); a compressed entry is in the block
// of its window's first position; an open entry's pool state as of token p
// is in p's block, slot entry % slots.
#pragma once

#include <span>

#include "sluice/backend/ops.h"
#include "sluice/model/deepseek_v4_kv_layout.h"
#include "sluice/model/deepseek_v4_state.h"

namespace sluice {

class DeepseekV4PagedState final : public DeepseekV4SequenceState {
 public:
  // `layout` (f32 latents: this view hands out f32 spans), `ops` (whose
  // model-defined KV cache holds the blocks) and the table must outlive this
  // view; it holds no state of its own.
  DeepseekV4PagedState(const DeepseekV4KvLayout& layout, Ops& ops, std::span<const BlockId> block_table);

  void reserve(std::int64_t num_tokens) override;
  std::span<float> window_latent(std::int32_t layer, std::int64_t position) override;
  std::span<float> pool_state(std::int32_t layer, DeepseekV4Pool pool, std::int64_t index,
                              std::int64_t position) override;
  std::span<float> entry(std::int32_t layer, DeepseekV4Pool pool, std::int64_t index) override;

 private:
  const DeepseekV4PoolRegion& region(std::int32_t layer, DeepseekV4Pool pool) const;
  // `count` floats at `offset` in the block that holds `position`.
  std::span<float> at(std::int64_t position, std::int64_t offset, std::int64_t count);

  const DeepseekV4KvLayout* layout_;
  Ops* ops_;
  std::span<const BlockId> block_table_;
};

}  // namespace sluice
