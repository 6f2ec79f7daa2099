#include "sluice/kv/evictor.h"

#include <algorithm>
#include <cmath>

#include "sluice/common/check.h"

namespace sluice {

Evictor::Evictor(EvictionPolicy policy, std::int32_t num_blocks, std::int32_t protected_capacity_blocks,
                 PrefixAwareParams prefix_aware, ReuseHistoryParams reuse_history)
    : policy_(policy),
      protected_capacity_blocks_(protected_capacity_blocks),
      prev_(static_cast<std::size_t>(num_blocks), -1),
      next_(static_cast<std::size_t>(num_blocks), -1),
      segment_(static_cast<std::size_t>(num_blocks), Segment::kNone),
      prefix_aware_(prefix_aware),
      reuse_history_(reuse_history) {
  SLUICE_CHECK(num_blocks >= 0);
  SLUICE_CHECK(protected_capacity_blocks >= 0);
  SLUICE_CHECK(prefix_aware.admit_window_blocks >= 0);
  SLUICE_CHECK(prefix_aware.hit_weight_blocks >= 0.0);
  SLUICE_CHECK(reuse_history.seen_weight_blocks >= 0.0 && reuse_history.depth_weight_blocks >= 0.0);
  if (ranked()) {
    score_.assign(static_cast<std::size_t>(num_blocks), 0.0);
    released_at_.assign(static_cast<std::size_t>(num_blocks), 0);
    bonus_.assign(static_cast<std::size_t>(num_blocks), 0.0);
    warm_.assign(static_cast<std::size_t>(num_blocks), false);
  }
}

void Evictor::push_back(Segment segment, BlockId block) {
  List& list = list_of(segment);
  const auto i = static_cast<std::size_t>(block);
  segment_[i] = segment;
  prev_[i] = list.tail;
  next_[i] = -1;
  if (list.tail >= 0) {
    next_[static_cast<std::size_t>(list.tail)] = block;
  } else {
    list.head = block;
  }
  list.tail = block;
  ++list.size;
}

void Evictor::unlink(BlockId block) {
  const auto i = static_cast<std::size_t>(block);
  SLUICE_CHECK(segment_[i] != Segment::kNone);
  if (segment_[i] == Segment::kRanked) {
    const std::size_t num_erased = ranked_.erase(rank_key(block));
    SLUICE_CHECK_EQ(num_erased, std::size_t{1});
    segment_[i] = Segment::kNone;
    return;
  }
  List& list = list_of(segment_[i]);
  if (prev_[i] >= 0) {
    next_[static_cast<std::size_t>(prev_[i])] = next_[i];
  } else {
    list.head = next_[i];
  }
  if (next_[i] >= 0) {
    prev_[static_cast<std::size_t>(next_[i])] = prev_[i];
  } else {
    list.tail = prev_[i];
  }
  prev_[i] = next_[i] = -1;
  segment_[i] = Segment::kNone;
  --list.size;
}

void Evictor::insert(BlockId block, const EvictionSignals& signals) {
  SLUICE_CHECK(!contains(block));
  SLUICE_CHECK(signals.num_hits >= 0 && signals.novel_depth_blocks >= 0);
  SLUICE_CHECK(signals.times_seen >= 0 && signals.depth_blocks >= 0);
  if (policy_ == EvictionPolicy::kReuseHistory || policy_ == EvictionPolicy::kAdaptiveReuse) {
    const auto i = static_cast<std::size_t>(block);
    ++num_releases_;
    released_at_[i] = num_releases_;
    warm_[i] = true;
    bonus_[i] = reuse_history_.seen_weight_blocks * std::log2(std::max(1.0, static_cast<double>(signals.times_seen))) -
                reuse_history_.depth_weight_blocks * static_cast<double>(signals.depth_blocks);
    score_[i] = static_cast<double>(num_releases_) + reuse_scale_ * bonus_[i];
    segment_[i] = Segment::kRanked;
    ranked_.insert(rank_key(block));
    return;
  }
  if (policy_ == EvictionPolicy::kPrefixAware) {
    const auto i = static_cast<std::size_t>(block);
    ++num_releases_;
    warm_[i] = signals.num_hits > 0 || signals.novel_depth_blocks < prefix_aware_.admit_window_blocks;
    // Depth counts twice the clock, so a chain freed in any order still
    // leaves deepest first: one block deeper outweighs one release later.
    score_[i] = static_cast<double>(num_releases_) +
                prefix_aware_.hit_weight_blocks * std::log2(1.0 + static_cast<double>(signals.num_hits)) -
                2.0 * static_cast<double>(signals.novel_depth_blocks);
    segment_[i] = Segment::kRanked;
    ranked_.insert(rank_key(block));
    return;
  }
  const bool was_hit = signals.num_hits > 0;
  if (policy_ == EvictionPolicy::kLru || !was_hit) {
    push_back(Segment::kProbation, block);
    return;
  }
  push_back(Segment::kProtected, block);
  // Demote the oldest protected block so the segment stays bounded: a block
  // must keep earning hits to stay protected.
  while (protected_.size > protected_capacity_blocks_) {
    const BlockId oldest = protected_.head;
    unlink(oldest);
    push_back(Segment::kProbation, oldest);
  }
}

void Evictor::remove(BlockId block) { unlink(block); }

void Evictor::set_reuse_scale(double scale) {
  SLUICE_CHECK(scale >= 0.0 && scale <= 1.0);
  SLUICE_CHECK(policy_ == EvictionPolicy::kReuseHistory || policy_ == EvictionPolicy::kAdaptiveReuse);
  if (scale == reuse_scale_) return;
  reuse_scale_ = scale;
  std::set<RankKey> reranked;
  for (const RankKey& key : ranked_) {
    const auto i = static_cast<std::size_t>(key.second);
    score_[i] = static_cast<double>(released_at_[i]) + reuse_scale_ * bonus_[i];
    reranked.insert(rank_key(key.second));
  }
  ranked_ = std::move(reranked);
}

void Evictor::set_admit_window_blocks(std::int32_t blocks) {
  SLUICE_CHECK(blocks >= 0);
  prefix_aware_.admit_window_blocks = blocks;
}

std::optional<BlockId> Evictor::pop_victim() {
  if (!ranked_.empty()) {
    const BlockId victim = ranked_.begin()->second;
    last_victim_was_cold_ = !ranked_.begin()->first.first;
    unlink(victim);
    return victim;
  }
  const BlockId victim = probation_.head >= 0 ? probation_.head : protected_.head;
  if (victim < 0) return std::nullopt;
  unlink(victim);
  return victim;
}

void Evictor::check_invariants() const {
  std::int32_t counted = 0;
  for (const List* list : {&probation_, &protected_}) {
    std::int32_t n = 0;
    BlockId previous = -1;
    for (BlockId b = list->head; b >= 0; b = next_[static_cast<std::size_t>(b)]) {
      SLUICE_CHECK_EQ(prev_[static_cast<std::size_t>(b)], previous);
      SLUICE_CHECK(segment_[static_cast<std::size_t>(b)] != Segment::kNone);
      previous = b;
      ++n;
      SLUICE_CHECK_LE(n, static_cast<std::int32_t>(segment_.size()));
    }
    SLUICE_CHECK_EQ(list->tail, previous);
    SLUICE_CHECK_EQ(list->size, n);
    counted += n;
  }
  for (const RankKey& key : ranked_) {
    SLUICE_CHECK(segment_[static_cast<std::size_t>(key.second)] == Segment::kRanked);
    SLUICE_CHECK(key == rank_key(key.second));
  }
  counted += static_cast<std::int32_t>(ranked_.size());
  std::int32_t tagged = 0;
  for (Segment s : segment_) tagged += s != Segment::kNone ? 1 : 0;
  SLUICE_CHECK_EQ(tagged, counted);
  if (!ranked()) SLUICE_CHECK(ranked_.empty());
  if (ranked()) SLUICE_CHECK_EQ(probation_.size + protected_.size, 0);
  if (policy_ == EvictionPolicy::kLru) SLUICE_CHECK_EQ(protected_.size, 0);
  SLUICE_CHECK_LE(protected_.size, protected_capacity_blocks_);
}

}  // namespace sluice
