#include "sluice/backend/cpu/thread_pool.h"

#include <algorithm>

namespace sluice {
namespace {

std::pair<std::int64_t, std::int64_t> share(std::int64_t count, int index, int parts) {
  const std::int64_t begin = count * index / parts;
  const std::int64_t end = count * (index + 1) / parts;
  return {begin, end};
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  const int num_workers = std::max(1, num_threads) - 1;
  for (int i = 0; i < num_workers; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::parallel_for(std::int64_t count,
                              const std::function<void(std::int64_t, std::int64_t)>& body) {
  if (count <= 0) return;
  const int parts = num_threads();
  if (parts == 1 || count == 1) {
    body(0, count);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    body_ = &body;
    count_ = count;
    num_pending_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  work_ready_.notify_all();
  auto [begin, end] = share(count, parts - 1, parts);
  if (begin < end) body(begin, end);
  std::unique_lock lock(mutex_);
  work_done_.wait(lock, [this] { return num_pending_ == 0; });
  body_ = nullptr;
}

void ThreadPool::worker_loop(int worker_index) {
  std::uint64_t seen_generation = 0;
  for (;;) {
    const std::function<void(std::int64_t, std::int64_t)>* body;
    std::int64_t count;
    {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || generation_ != seen_generation; });
      if (stopping_) return;
      seen_generation = generation_;
      body = body_;
      count = count_;
    }
    auto [begin, end] = share(count, worker_index, num_threads());
    if (begin < end) (*body)(begin, end);
    {
      std::lock_guard lock(mutex_);
      if (--num_pending_ == 0) work_done_.notify_one();
    }
  }
}

}  // namespace sluice
