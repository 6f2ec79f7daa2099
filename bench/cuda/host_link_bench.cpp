// The host link on the GPU machine, and the host KV tier's copies over it:
//   - a plain pinned cudaMemcpyAsync of one large buffer, each direction (the
//     link's rate, what the tier's loads are measured against);
//   - cuda::HostKvTier storing and loading Llama-3-8B-shape KV blocks (32
//     layers x K/V x 16 tokens x 8 heads x 128 dims, bf16: 2 MiB a block, in
//     64 pieces of 32 KiB) in batches of the size the engine issues, under
//     each copy method (host_kv_tier.h), with the host thread's issue time per
//     block (the engine thread pays it inside a step).
// Prints a markdown table and one "host_link_gbps <H2D> <D2H>" line that
// tools/device/host_tier_bench.sh reads.
//
// Usage: host_link_bench [--blocks N] [--batch B]   (default 2048 blocks = 4 GiB, batches of 256)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "sluice/backend/cuda/host_kv_tier.h"
#include "bench_cuda.h"

namespace sluice {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Median of `reps` timings of fn (each ends synchronised), after one warm-up.
double median_seconds(int reps, const std::function<void()>& fn) {
  fn();
  std::vector<double> s;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    s.push_back(seconds_since(t0));
  }
  std::sort(s.begin(), s.end());
  return s[s.size() / 2];
}

struct LinkRate {
  double h2d_gbps = 0;
  double d2h_gbps = 0;
};

LinkRate plain_copy(std::size_t bytes) {
  void* host = nullptr;
  void* device = nullptr;
  cudaStream_t stream = nullptr;
  check(cudaHostAlloc(&host, bytes, cudaHostAllocDefault), "cudaHostAlloc");
  check(cudaMalloc(&device, bytes), "cudaMalloc");
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  std::memset(host, 1, bytes);
  auto once = [&](cudaMemcpyKind kind) {
    void* dst = kind == cudaMemcpyHostToDevice ? device : host;
    const void* src = kind == cudaMemcpyHostToDevice ? host : device;
    check(cudaMemcpyAsync(dst, src, bytes, kind, stream), "cudaMemcpyAsync");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  };
  LinkRate r;
  r.h2d_gbps = static_cast<double>(bytes) / median_seconds(5, [&] { once(cudaMemcpyHostToDevice); }) / 1e9;
  r.d2h_gbps = static_cast<double>(bytes) / median_seconds(5, [&] { once(cudaMemcpyDeviceToHost); }) / 1e9;
  cudaStreamDestroy(stream);
  cudaFree(device);
  cudaFreeHost(host);
  return r;
}

struct TierRate {
  double gbps = 0;
  double issue_us_per_block = 0;  // host time inside HostKvTier::copy, per block
};

// Every block once in `direction`, in batches of `batch` (as the engine
// starts them, a step's worth at a time), then waits for the last.
TierRate tier_copy(cuda::HostKvTier& tier, const KvCacheSpec& spec, KvCopyDirection direction,
                   std::int32_t num_blocks, std::int32_t batch, cudaStream_t compute, KvCopyId& next_id) {
  double issue_s = 0;
  auto once = [&] {
    std::int32_t done = 0;
    for (std::int32_t first = 0; first < num_blocks; first += batch) {
      std::vector<KvBlockCopy> copies;
      for (std::int32_t b = first; b < std::min(num_blocks, first + batch); ++b)
        copies.push_back({.id = next_id++, .direction = direction, .device_block = b, .host_block = b});
      const auto t0 = std::chrono::steady_clock::now();
      auto completed = tier.copy(copies, false, compute);
      issue_s += seconds_since(t0);
      if (!completed.ok()) {
        std::fprintf(stderr, "%s\n", completed.error_message().c_str());
        std::exit(1);
      }
      done += static_cast<std::int32_t>(completed.value().size());
    }
    for (int guard = 0; done < num_blocks && guard <= num_blocks; ++guard) {
      auto completed = tier.copy({}, true, compute);
      if (!completed.ok()) std::exit(1);
      done += static_cast<std::int32_t>(completed.value().size());
    }
  };
  const double s = median_seconds(3, once);
  const double bytes = static_cast<double>(spec.bytes_per_block(DType::bf16)) * num_blocks;
  return {.gbps = bytes / s / 1e9, .issue_us_per_block = issue_s / (4.0 * num_blocks) * 1e6};  // 4 runs
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) {
  using namespace sluice;
  std::int32_t num_blocks = 2048;
  std::int32_t batch = 256;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--blocks") == 0) num_blocks = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--batch") == 0) batch = std::atoi(argv[i + 1]);
  }
  if (num_blocks < 1 || batch < 1) {
    std::fprintf(stderr, "usage: host_link_bench [--blocks N] [--batch B]\n");
    return 2;
  }
  const KvCacheSpec spec{.num_layers = 32, .num_blocks = num_blocks, .block_size_tokens = 16, .num_kv_heads = 8, .head_dim = 128};
  const auto bytes = static_cast<std::size_t>(spec.bytes_per_block(DType::bf16)) * static_cast<std::size_t>(num_blocks);

  const LinkRate link = plain_copy(bytes);
  std::printf("| copy (%.2f GiB, pinned host) | host -> device GB/s | device -> host GB/s | issue us/block (H2D, D2H) |\n",
              static_cast<double>(bytes) / (1ull << 30));
  std::printf("| --- | --- | --- | --- |\n");
  std::printf("| plain cudaMemcpyAsync, one buffer | %.1f | %.1f | |\n", link.h2d_gbps, link.d2h_gbps);

  void* device_kv = nullptr;
  cudaStream_t compute = nullptr;
  check(cudaMalloc(&device_kv, bytes), "cudaMalloc KV");
  check(cudaMemset(device_kv, 0, bytes), "cudaMemset KV");
  check(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), "cudaStreamCreate");
  KvCopyId next_id = 1;
  for (const auto method : {cuda::HostCopyMethod::kPerBlock2d, cuda::HostCopyMethod::kBatched}) {
    cuda::HostKvTier tier(method);
    const Status allocated = tier.allocate(num_blocks, spec, device_kv);
    if (!allocated.ok()) {
      std::fprintf(stderr, "%s\n", allocated.error_message().c_str());
      return 1;
    }
    const TierRate store = tier_copy(tier, spec, KvCopyDirection::kDeviceToHost, num_blocks, batch, compute, next_id);
    const TierRate load = tier_copy(tier, spec, KvCopyDirection::kHostToDevice, num_blocks, batch, compute, next_id);
    std::printf("| HostKvTier %s, batches of %d blocks | %.1f (%.0f%% of the link) | %.1f (%.0f%%) | %.1f, %.1f |\n",
                method == cuda::HostCopyMethod::kBatched ? "cudaMemcpyBatchAsync" : "cudaMemcpy2DAsync per block", batch,
                load.gbps, 100.0 * load.gbps / link.h2d_gbps, store.gbps, 100.0 * store.gbps / link.d2h_gbps,
                load.issue_us_per_block, store.issue_us_per_block);
  }
  cudaStreamDestroy(compute);
  cudaFree(device_kv);
  std::printf("host_link_gbps %.2f %.2f\n", link.h2d_gbps, link.d2h_gbps);
  return 0;
}
