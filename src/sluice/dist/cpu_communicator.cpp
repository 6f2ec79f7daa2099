#include "sluice/dist/cpu_communicator.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <optional>

#include <fmt/format.h>

#include "sluice/common/check.h"

namespace sluice {

// What the ranks share: one slot per rank for the buffer it publishes, and a
// reusable barrier that an abort opens for good.
struct CpuCommunicatorGroup::Shared {
  explicit Shared(std::int32_t num_ranks)
      : size(num_ranks),
        inputs(static_cast<std::size_t>(num_ranks)),
        outputs(static_cast<std::size_t>(num_ranks)),
        counts(static_cast<std::size_t>(num_ranks)) {}

  const std::int32_t size;
  // Written by their rank before a barrier, read by every rank after it (the
  // barrier's mutex orders the two). outputs: the buffers other ranks write
  // into (all_reduce_sum's, in place); null where a collective only reads.
  std::vector<const float*> inputs;
  std::vector<float*> outputs;
  std::vector<std::size_t> counts;

  mutable std::mutex mutex;
  std::condition_variable wake;
  std::int32_t num_arrived = 0;
  std::uint64_t generation = 0;  // barriers completed
  std::optional<std::string> abort_reason;

  // Returns when every rank has arrived, or with the abort's error as soon as
  // the group is aborted.
  Status arrive_and_wait() {
    std::unique_lock lock(mutex);
    if (abort_reason) return Error{*abort_reason};
    const std::uint64_t my_generation = generation;
    if (++num_arrived == size) {
      num_arrived = 0;
      ++generation;
      wake.notify_all();
      return Ok{};
    }
    wake.wait(lock, [&] { return generation != my_generation || abort_reason.has_value(); });
    if (generation != my_generation) return Ok{};
    return Error{*abort_reason};
  }

  void abort(const std::string& reason) {
    {
      std::lock_guard lock(mutex);
      if (!abort_reason) abort_reason = reason;
    }
    wake.notify_all();
  }
};

namespace {

// [begin, end) of `count` elements that `rank` of `size` owns: near-equal chunks.
std::pair<std::size_t, std::size_t> chunk_of(std::size_t count, std::int32_t rank, std::int32_t size) {
  const auto r = static_cast<std::size_t>(rank), n = static_cast<std::size_t>(size);
  return {count * r / n, count * (r + 1) / n};
}

class CpuCommunicator final : public Communicator {
 public:
  CpuCommunicator(CpuCommunicatorGroup::Shared& shared, std::int32_t rank) : shared_(shared), rank_(rank) {}

  std::int32_t rank() const override { return rank_; }
  std::int32_t size() const override { return shared_.size; }

  Status all_reduce_sum(std::span<float> data) override {
    SLUICE_TRY(publish(data.data(), data.data(), data.size(), "all_reduce_sum"));
    // Each rank sums its chunk over every rank's buffer, in rank order, while
    // no buffer changes; then writes the chunk into every buffer.
    const auto [begin, end] = chunk_of(data.size(), rank_, shared_.size);
    std::vector<float> sum(end - begin, 0.0f);
    for (const float* buffer : shared_.inputs)
      for (std::size_t i = begin; i < end; ++i) sum[i - begin] += buffer[i];
    SLUICE_TRY(shared_.arrive_and_wait());
    for (float* buffer : shared_.outputs) std::copy(sum.begin(), sum.end(), buffer + begin);
    return shared_.arrive_and_wait();
  }

  Status all_gather(std::span<const float> send, std::span<float> recv) override {
    SLUICE_CHECK_EQ(recv.size(), send.size() * static_cast<std::size_t>(shared_.size));
    SLUICE_TRY(publish(send.data(), nullptr, send.size(), "all_gather"));
    for (std::size_t r = 0; r < shared_.inputs.size(); ++r)
      std::copy_n(shared_.inputs[r], send.size(), recv.begin() + static_cast<std::ptrdiff_t>(r * send.size()));
    return shared_.arrive_and_wait();
  }

  Status reduce_scatter_sum(std::span<const float> send, std::span<float> recv) override {
    SLUICE_CHECK_EQ(send.size(), recv.size() * static_cast<std::size_t>(shared_.size));
    SLUICE_TRY(publish(send.data(), nullptr, send.size(), "reduce_scatter_sum"));
    const std::size_t offset = static_cast<std::size_t>(rank_) * recv.size();
    std::fill(recv.begin(), recv.end(), 0.0f);
    for (const float* buffer : shared_.inputs)
      for (std::size_t i = 0; i < recv.size(); ++i) recv[i] += buffer[offset + i];
    return shared_.arrive_and_wait();
  }

  void abort(const std::string& reason) override {
    shared_.abort(fmt::format("communicator group aborted by rank {}: {}", rank_, reason));
  }

 private:
  // Puts this rank's buffers in its slot and waits for every rank's; a count
  // that differs between ranks is a programming error on some rank, reported
  // on all of them (each sees the same table) and the group ends.
  Status publish(const float* input, float* output, std::size_t count, const char* collective) {
    const auto slot = static_cast<std::size_t>(rank_);
    shared_.inputs[slot] = input;
    shared_.outputs[slot] = output;
    shared_.counts[slot] = count;
    SLUICE_TRY(shared_.arrive_and_wait());
    for (std::size_t r = 0; r < shared_.counts.size(); ++r)
      if (shared_.counts[r] != count) {
        const std::string reason = fmt::format("{}: rank {} passed {} elements, rank {} passed {}", collective, r,
                                               shared_.counts[r], rank_, count);
        abort(reason);
        return Error{reason};
      }
    return Ok{};
  }

  CpuCommunicatorGroup::Shared& shared_;
  const std::int32_t rank_;
};

}  // namespace

CpuCommunicatorGroup::CpuCommunicatorGroup(std::int32_t size) : shared_(std::make_unique<Shared>(size)) {
  SLUICE_CHECK_LT(0, size);
  for (std::int32_t r = 0; r < size; ++r) ranks_.push_back(std::make_unique<CpuCommunicator>(*shared_, r));
}

CpuCommunicatorGroup::~CpuCommunicatorGroup() = default;

std::int32_t CpuCommunicatorGroup::size() const { return shared_->size; }

Communicator& CpuCommunicatorGroup::rank(std::int32_t rank) {
  SLUICE_CHECK(rank >= 0 && rank < shared_->size);
  return *ranks_[static_cast<std::size_t>(rank)];
}

}  // namespace sluice

namespace sluice {

std::optional<std::string> CpuCommunicatorGroup::abort_reason() const {
  std::lock_guard lock(shared_->mutex);
  return shared_->abort_reason;
}

}  // namespace sluice
