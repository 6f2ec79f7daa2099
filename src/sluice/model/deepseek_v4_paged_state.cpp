#include "sluice/model/deepseek_v4_paged_state.h"

#include "sluice/common/check.h"

namespace sluice {

DeepseekV4PagedState::DeepseekV4PagedState(const DeepseekV4KvLayout& layout, Ops& ops,
                                           std::span<const BlockId> block_table)
    : layout_(&layout), ops_(&ops), block_table_(block_table) {
  SLUICE_CHECK(layout.formats() == DeepseekV4KvFormats::cpu());
}

void DeepseekV4PagedState::reserve(std::int64_t num_tokens) {
  const std::int64_t bs = layout_->block_size_tokens();
  SLUICE_CHECK_LE((num_tokens + bs - 1) / bs, static_cast<std::int64_t>(block_table_.size()));
}

std::span<float> DeepseekV4PagedState::window_latent(std::int32_t layer, std::int64_t position) {
  const std::int64_t hd = layout_->head_dim();
  return at(position, layout_->layer(layer).window_offset + position % layout_->window_slots() * hd, hd);
}

const DeepseekV4PoolRegion& DeepseekV4PagedState::region(std::int32_t layer, DeepseekV4Pool pool) const {
  const DeepseekV4LayerRegion& l = layout_->layer(layer);
  const std::optional<DeepseekV4PoolRegion>& r = pool == DeepseekV4Pool::compressor ? l.compressor : l.indexer;
  SLUICE_CHECK(r.has_value());
  return *r;
}

std::span<float> DeepseekV4PagedState::pool_state(std::int32_t layer, DeepseekV4Pool pool, std::int64_t index,
                                                  std::int64_t position) {
  const DeepseekV4PoolRegion& r = region(layer, pool);
  SLUICE_CHECK(position >= r.first_token(index) && position <= r.last_token(index));
  return at(position, r.state_offset + index % r.slots * 3 * r.dim, 3 * r.dim);
}

std::span<float> DeepseekV4PagedState::entry(std::int32_t layer, DeepseekV4Pool pool, std::int64_t index) {
  const DeepseekV4PoolRegion& r = region(layer, pool);
  const std::int64_t first_position = index * r.rate;
  const std::int64_t slot = first_position % layout_->block_size_tokens() / r.rate;
  return at(first_position, r.entries_offset + slot * r.dim, r.dim);
}

std::span<float> DeepseekV4PagedState::at(std::int64_t position, std::int64_t offset, std::int64_t count) {
  const std::int64_t block_index = position / layout_->block_size_tokens();
  SLUICE_CHECK(position >= 0 && block_index < static_cast<std::int64_t>(block_table_.size()));
  const std::span<float> block = ops_->model_defined_kv_block(block_table_[block_index]);
  SLUICE_CHECK_LE(offset + count, static_cast<std::int64_t>(block.size()));
  return block.subspan(static_cast<std::size_t>(offset), static_cast<std::size_t>(count));
}

}  // namespace sluice
