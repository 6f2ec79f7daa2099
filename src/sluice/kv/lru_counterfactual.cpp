#include "sluice/kv/lru_counterfactual.h"

#include <algorithm>

#include "sluice/common/check.h"

namespace sluice {

ReuseShadow::ReuseShadow(std::int32_t capacity_blocks, ReuseHistoryParams params)
    : capacity_(static_cast<std::size_t>(capacity_blocks)), params_(params) {
  SLUICE_CHECK(capacity_blocks > 0);
  SLUICE_CHECK(params.seen_weight_blocks >= 0.0 && params.depth_weight_blocks >= 0.0);
  score_.reserve(capacity_);
}

std::size_t ReuseShadow::prefix_hit(std::span<const BlockHash> keys, std::size_t max_hit) const {
  std::size_t hit = 0;
  while (hit < std::min(max_hit, keys.size()) && score_.contains(keys[hit])) ++hit;
  return hit;
}

void ReuseShadow::use(std::span<const BlockHash> keys, std::size_t first_depth_blocks, const ReuseHistory* history) {
  for (std::size_t j = 0; j < keys.size(); ++j) {
    const BlockHash key = keys[j];
    const double times_seen = history ? std::max(1.0, static_cast<double>(history->count(key))) : 1.0;
    const double score = static_cast<double>(++clock_) + params_.seen_weight_blocks * std::log2(times_seen) -
                         params_.depth_weight_blocks * static_cast<double>(first_depth_blocks + j);
    if (const auto it = score_.find(key); it != score_.end()) {
      // Re-rank in place: the set's node is reused, not freed and allocated again.
      auto node = order_.extract({it->second, key});
      node.value().first = score;
      order_.insert(std::move(node));
      it->second = score;
    } else {
      score_.emplace(key, score);
      order_.insert({score, key});
    }
  }
  while (score_.size() > capacity_) {
    score_.erase(order_.begin()->second);
    order_.erase(order_.begin());
  }
}

void ReuseShadow::check_invariants() const {
  SLUICE_CHECK_EQ(score_.size(), order_.size());
  SLUICE_CHECK_LE(score_.size(), capacity_);
  for (const auto& [score, key] : order_) {
    const auto it = score_.find(key);
    SLUICE_CHECK(it != score_.end() && it->second == score);
  }
}

LruCounterfactual::LruCounterfactual(double initial_scale, double rate, std::int32_t capacity_blocks,
                                     std::optional<ReuseHistoryParams> reuse)
    : scale_(initial_scale), rate_(rate), capacity_(static_cast<std::size_t>(capacity_blocks)) {
  SLUICE_CHECK(initial_scale >= 0.0 && initial_scale <= 1.0);
  SLUICE_CHECK(rate >= 0.0 && capacity_blocks > 0);
  where_.reserve(capacity_);
  if (reuse) reuse_shadow_.emplace(capacity_blocks, *reuse);
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

void LruCounterfactual::on_request(std::span<const BlockHash> keys, std::int32_t num_hit_blocks,
                                   const ReuseHistory* history) {
  // As the real cache, the shadows never serve a prompt's last block (one
  // token is always computed).
  const std::size_t max_hit = keys.empty() ? 0 : keys.size() - 1;
  std::size_t lru_hit = 0;
  while (lru_hit < max_hit && where_.contains(keys[lru_hit])) ++lru_hit;
  const std::int64_t ours = std::min<std::int64_t>(num_hit_blocks, static_cast<std::int64_t>(max_hit));
  num_hit_blocks_ += ours;
  num_lru_hit_blocks_ += static_cast<std::int64_t>(lru_hit);
  std::int64_t counts_hit = ours;
  if (reuse_shadow_) {
    counts_hit = static_cast<std::int64_t>(reuse_shadow_->prefix_hit(keys, max_hit));
    num_reuse_shadow_hit_blocks_ += counts_hit;
  }
  scale_ = std::clamp(scale_ + rate_ * static_cast<double>(counts_hit - static_cast<std::int64_t>(lru_hit)), 0.0, 1.0);
  on_more_keys(keys, 0, history);
}

void LruCounterfactual::on_more_keys(std::span<const BlockHash> keys, std::size_t first_depth_blocks,
                                     const ReuseHistory* history) {
  for (BlockHash key : keys) use(key);
  if (reuse_shadow_) reuse_shadow_->use(keys, first_depth_blocks, history);
}

void LruCounterfactual::check_invariants() const {
  SLUICE_CHECK(scale_ >= 0.0 && scale_ <= 1.0);
  SLUICE_CHECK_EQ(recency_.size(), where_.size());
  SLUICE_CHECK_LE(recency_.size(), capacity_);
  if (reuse_shadow_) reuse_shadow_->check_invariants();
}

}  // namespace sluice
