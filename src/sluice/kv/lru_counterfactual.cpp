#include "sluice/kv/lru_counterfactual.h"

#include <algorithm>

#include "sluice/common/check.h"

namespace sluice {

LruCounterfactual::LruCounterfactual(double initial_scale, double rate, std::int32_t capacity_blocks)
    : scale_(initial_scale), rate_(rate), capacity_(static_cast<std::size_t>(capacity_blocks)) {
  SLUICE_CHECK(initial_scale >= 0.0 && initial_scale <= 1.0);
  SLUICE_CHECK(rate >= 0.0 && capacity_blocks > 0);
  where_.reserve(capacity_);
}

void LruCounterfactual::use(BlockHash key) {
  if (const auto it = where_.find(key); it != where_.end()) {
    recency_.splice(recency_.begin(), recency_, it->second);
    return;
  }
  recency_.push_front(key);
  where_.emplace(key, recency_.begin());
  if (recency_.size() > capacity_) {
    where_.erase(recency_.back());
    recency_.pop_back();
  }
}

void LruCounterfactual::on_request(std::span<const BlockHash> keys, std::int32_t num_hit_blocks) {
  // As the real cache, the shadow never serves a prompt's last block (one
  // token is always computed).
  const std::size_t max_hit = keys.empty() ? 0 : keys.size() - 1;
  std::size_t lru_hit = 0;
  while (lru_hit < max_hit && where_.contains(keys[lru_hit])) ++lru_hit;
  const std::int64_t ours = std::min<std::int64_t>(num_hit_blocks, static_cast<std::int64_t>(max_hit));
  num_hit_blocks_ += ours;
  num_lru_hit_blocks_ += static_cast<std::int64_t>(lru_hit);
  scale_ = std::clamp(scale_ + rate_ * static_cast<double>(ours - static_cast<std::int64_t>(lru_hit)), 0.0, 1.0);
  on_more_keys(keys);
}

void LruCounterfactual::on_more_keys(std::span<const BlockHash> keys) {
  for (BlockHash key : keys) use(key);
}

void LruCounterfactual::check_invariants() const {
  SLUICE_CHECK(scale_ >= 0.0 && scale_ <= 1.0);
  SLUICE_CHECK_EQ(recency_.size(), where_.size());
  SLUICE_CHECK_LE(recency_.size(), capacity_);
}

}  // namespace sluice
