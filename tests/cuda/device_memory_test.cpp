// Device memory running out (backend/cuda/device_buffer.h): the stream-order
// pool keeps freed blocks reserved, and a block serves only allocations that
// fit inside it. An allocation larger than any kept block, with too little
// left outside the pool, succeeds once the pool hands its unused blocks back.
// It takes the whole device for a moment: run it alone, not beside other
// processes on the same GPU (tools/device/waiting_checks.sh part 0 does).
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdint>

#include "sluice/backend/cuda/device_buffer.h"

namespace sluice {
namespace {

std::int64_t free_device_bytes() {
  std::size_t free_bytes = 0, total_bytes = 0;
  EXPECT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  return static_cast<std::int64_t>(free_bytes);
}

TEST(CudaDeviceMemory, AllocationPastThePoolsKeptBlocksSucceedsAfterTrimming) {
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  constexpr std::int64_t kMiB = 1 << 20;
  const std::int64_t free_at_start = free_device_bytes();
  // A block the pool keeps after its free: 40% of what was free.
  const std::int64_t kept = free_at_start / 5 * 2 / kMiB * kMiB;
  void* block = nullptr;
  ASSERT_EQ(cuda::malloc_in_stream_order(&block, kept, stream), cudaSuccess);
  cuda::free_in_stream_order(block, stream);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_LT(free_device_bytes(), free_at_start - kept / 2) << "the pool handed its block back at once";
  // Everything else but 20% of the start taken outside the pool.
  const std::int64_t outside = (free_device_bytes() - free_at_start / 5) / kMiB * kMiB;
  void* elsewhere = nullptr;
  ASSERT_EQ(cudaMalloc(&elsewhere, static_cast<std::size_t>(outside)), cudaSuccess);
  // 50%: neither the kept block (40%) nor what is left outside it (20%) holds
  // it; both together do.
  const std::int64_t wanted = free_at_start / 2 / kMiB * kMiB;
  void* large = nullptr;
  EXPECT_EQ(cuda::malloc_in_stream_order(&large, wanted, stream), cudaSuccess);
  if (large != nullptr) cuda::free_in_stream_order(large, stream);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  ASSERT_EQ(cudaFree(elsewhere), cudaSuccess);
  // A DeviceBuffer that cannot double takes the size asked for: with 45% of
  // the device taken, 30% then 35% (twice 30% does not fit; 35% does once
  // the 30% is back).
  const std::int64_t now_free = free_device_bytes();
  ASSERT_EQ(cudaMalloc(&elsewhere, static_cast<std::size_t>(now_free / 20 * 9 / kMiB * kMiB)), cudaSuccess);
  {
    cuda::DeviceBuffer buffer;
    EXPECT_TRUE(buffer.ensure(now_free / 10 * 3 / kMiB * kMiB, stream));
    EXPECT_TRUE(buffer.ensure(now_free / 20 * 7 / kMiB * kMiB, stream));
    EXPECT_NE(buffer.data(), nullptr);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  }
  ASSERT_EQ(cudaFree(elsewhere), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

}  // namespace
}  // namespace sluice
