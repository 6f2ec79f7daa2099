#include "sluice/kv/admission_window.h"

#include <algorithm>

#include "sluice/common/check.h"

namespace sluice {

AdmissionWindow::AdmissionWindow(std::int32_t initial_blocks, std::int32_t step_blocks, std::int32_t max_blocks,
                                 std::int32_t capacity)
    : window_blocks_(std::clamp(initial_blocks, step_blocks, std::max(step_blocks, max_blocks))),
      step_blocks_(step_blocks),
      max_blocks_(std::max(step_blocks, max_blocks)),
      capacity_(static_cast<std::size_t>(std::max(1, capacity))) {
  SLUICE_CHECK(step_blocks > 0);
}

void AdmissionWindow::forget_oldest() {
  const auto [hash, stamp] = fifo_.front();
  fifo_.pop_front();
  const auto it = ghosts_.find(hash);
  if (it != ghosts_.end() && it->second.stamp == stamp) ghosts_.erase(it);
}

void AdmissionWindow::on_evicted(BlockHash hash, bool from_cold_tier) {
  const std::uint64_t stamp = next_stamp_++;
  ghosts_[hash] = Ghost{.from_cold_tier = from_cold_tier, .stamp = stamp};
  fifo_.emplace_back(hash, stamp);
  // A key evicted again leaves a stale fifo entry; bounding the fifo at twice
  // the ghosts keeps memory O(capacity) either way.
  while (ghosts_.size() > capacity_ || fifo_.size() > 2 * capacity_) forget_oldest();
}

bool AdmissionWindow::on_first_miss(BlockHash hash) {
  const auto it = ghosts_.find(hash);
  if (it == ghosts_.end()) return false;
  const std::int32_t before = window_blocks_;
  window_blocks_ = it->second.from_cold_tier ? std::min(max_blocks_, window_blocks_ + step_blocks_)
                                             : std::max(step_blocks_, window_blocks_ - step_blocks_);
  ghosts_.erase(it);  // one lesson per eviction
  return window_blocks_ != before;
}

void AdmissionWindow::check_invariants() const {
  SLUICE_CHECK_LE(ghosts_.size(), capacity_);
  SLUICE_CHECK_LE(fifo_.size(), 2 * capacity_);
  SLUICE_CHECK(window_blocks_ >= step_blocks_ && window_blocks_ <= max_blocks_);
}

}  // namespace sluice
