// NcclCommunicator: a Communicator over NCCL (nccl_library.h), for ranks that
// are GPUs of one process, one thread per GPU (docs/architecture.md, "Several
// devices": ncclCommInitAll). Buffers are device memory, f32.
//
// Completion is stream-ordered, the GPU meaning of Communicator's "returns
// once this rank's output is complete": a collective is enqueued on the
// rank's stream and returns; work enqueued on that stream after it sees the
// output. A host that reads the output synchronizes the stream first.
// A call that fails aborts the communicator (ncclCommAbort, which also
// unblocks this rank's kernels waiting for peers), and every later call fails
// with the first reason, as Communicator requires. Not wired to CUDA tensor
// parallelism yet (issue 19).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sluice/dist/communicator.h"
#include "sluice/dist/nccl_library.h"

namespace sluice {

class NcclCommunicator final : public Communicator {
 public:
  // One communicator per device of `devices` (CUDA ordinals), rank i on
  // devices[i] enqueuing on streams[i].
  static Result<std::vector<std::unique_ptr<NcclCommunicator>>> create_all(
      std::shared_ptr<const NcclLibrary> library, std::span<const int> devices, std::span<const nccl::Stream> streams);

  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  std::int32_t rank() const override { return rank_; }
  std::int32_t size() const override { return size_; }
  Status all_reduce_sum(std::span<float> data) override;
  Status all_gather(std::span<const float> send, std::span<float> recv) override;
  Status reduce_scatter_sum(std::span<const float> send, std::span<float> recv) override;
  void abort(const std::string& reason) override;

 private:
  NcclCommunicator(std::shared_ptr<const NcclLibrary> library, nccl::Comm comm, nccl::Stream stream,
                   std::int32_t rank, std::int32_t size);
  // enqueue(comm) under the lock, unless aborted; a failure aborts with its description.
  template <class Enqueue>
  Status call(const char* name, Enqueue&& enqueue);
  void abort_locked(const std::string& reason);

  std::shared_ptr<const NcclLibrary> library_;
  nccl::Comm comm_;
  const nccl::Stream stream_;
  const std::int32_t rank_, size_;
  std::mutex mutex_;  // abort_reason_, and comm_ against a concurrent abort
  std::optional<std::string> abort_reason_;
};

}  // namespace sluice
