#include "sluice/dist/nccl_communicator.h"

#include <fmt/format.h>

#include "sluice/common/check.h"

namespace sluice {

Result<std::vector<std::unique_ptr<NcclCommunicator>>> NcclCommunicator::create_all(
    std::shared_ptr<const NcclLibrary> library, std::span<const int> devices, std::span<const nccl::Stream> streams) {
  SLUICE_CHECK(library != nullptr);
  SLUICE_CHECK_EQ(devices.size(), streams.size());
  if (devices.empty()) return Error{"an NCCL group needs at least one device"};
  const auto size = static_cast<std::int32_t>(devices.size());
  std::vector<nccl::Comm> comms(devices.size(), nullptr);
  if (const nccl::Result r = library->comm_init_all(comms.data(), size, devices.data()); r != nccl::kSuccess)
    return Error{library->describe("ncclCommInitAll", r)};
  std::vector<std::unique_ptr<NcclCommunicator>> out;
  for (std::int32_t r = 0; r < size; ++r) {
    const auto i = static_cast<std::size_t>(r);
    out.push_back(std::unique_ptr<NcclCommunicator>(new NcclCommunicator(library, comms[i], streams[i], r, size)));
  }
  return out;
}

NcclCommunicator::NcclCommunicator(std::shared_ptr<const NcclLibrary> library, nccl::Comm comm,
                                   nccl::Stream stream, std::int32_t rank, std::int32_t size)
    : library_(std::move(library)), comm_(comm), stream_(stream), rank_(rank), size_(size) {}

NcclCommunicator::~NcclCommunicator() {
  std::lock_guard lock(mutex_);
  if (comm_) library_->comm_destroy(comm_);
}

template <class Enqueue>
Status NcclCommunicator::call(const char* name, Enqueue&& enqueue) {
  // Held across the enqueue so that an abort from another thread never frees
  // the communicator under it (enqueueing returns without waiting for peers).
  std::lock_guard lock(mutex_);
  if (abort_reason_) return Error{*abort_reason_};
  const nccl::Result result = enqueue(comm_);
  if (result == nccl::kSuccess) return Ok{};
  abort_locked(library_->describe(name, result));
  return Error{*abort_reason_};
}

Status NcclCommunicator::all_reduce_sum(std::span<float> data) {
  return call("ncclAllReduce", [&](nccl::Comm comm) {
    return library_->all_reduce(data.data(), data.data(), data.size(), nccl::kFloat32, nccl::kSum, comm, stream_);
  });
}

Status NcclCommunicator::all_gather(std::span<const float> send, std::span<float> recv) {
  SLUICE_CHECK_EQ(recv.size(), send.size() * static_cast<std::size_t>(size_));
  return call("ncclAllGather", [&](nccl::Comm comm) {
    return library_->all_gather(send.data(), recv.data(), send.size(), nccl::kFloat32, comm, stream_);
  });
}

Status NcclCommunicator::reduce_scatter_sum(std::span<const float> send, std::span<float> recv) {
  SLUICE_CHECK_EQ(send.size(), recv.size() * static_cast<std::size_t>(size_));
  return call("ncclReduceScatter", [&](nccl::Comm comm) {
    return library_->reduce_scatter(send.data(), recv.data(), recv.size(), nccl::kFloat32, nccl::kSum, comm, stream_);
  });
}

void NcclCommunicator::abort(const std::string& reason) {
  std::lock_guard lock(mutex_);
  abort_locked(reason);
}

void NcclCommunicator::abort_locked(const std::string& reason) {
  if (abort_reason_) return;
  abort_reason_ = fmt::format("communicator group aborted by rank {}: {}", rank_, reason);
  // Frees the communicator and stops its kernels waiting for peers; the
  // destructor has nothing left to destroy.
  library_->comm_abort(comm_);
  comm_ = nullptr;
}

}  // namespace sluice
