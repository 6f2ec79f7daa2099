// A fixed pool of worker threads for data-parallel loops in the CPU backend.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace sluice {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }
  // Calls body(begin, end) over disjoint ranges covering [0, count); the calling
  // thread takes a share. Returns when all ranges are done.
  void parallel_for(std::int64_t count, const std::function<void(std::int64_t, std::int64_t)>& body);

 private:
  void worker_loop(int worker_index);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  const std::function<void(std::int64_t, std::int64_t)>* body_ = nullptr;
  std::int64_t count_ = 0;
  std::uint64_t generation_ = 0;
  int num_pending_ = 0;
  bool stopping_ = false;
};

}  // namespace sluice
