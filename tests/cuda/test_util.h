// Helpers for the CUDA kernel tests: random bf16-representable inputs, device
// arrays, poisoned outputs and relative errors against float64 references.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "sluice/backend/cuda/cuda_ops.h"
#include "sluice/backend/cuda/kernels/kernels.h"
#include "sluice/backend/float_convert.h"
#include "sluice/common/rng.h"

namespace sluice::testing {

inline std::unique_ptr<Ops> make_test_ops() {
  auto ops = make_cuda_ops({.scratch_bytes = 256LL << 20, .use_cuda_graphs = false});
  SLUICE_CHECK_MSG(ops.ok(), ops.error_message());
  return std::move(ops).value();
}

inline float round_bf16(float v) { return bf16_to_f32(f32_to_bf16(v)); }

// The one-row GEMVs' blocks a multiprocessor (cuda::set_gemv_one_row_blocks)
// for a scope, back to the default when it ends, a failed ASSERT included.
class ScopedGemvOneRowBlocks {
 public:
  explicit ScopedGemvOneRowBlocks(int blocks) { cuda::set_gemv_one_row_blocks(blocks); }
  ~ScopedGemvOneRowBlocks() { cuda::set_gemv_one_row_blocks(cuda::kGemvOneRowBlocksDefault); }
  ScopedGemvOneRowBlocks(const ScopedGemvOneRowBlocks&) = delete;
  ScopedGemvOneRowBlocks& operator=(const ScopedGemvOneRowBlocks&) = delete;
};

// Uniform in [-scale, scale), rounded to bf16 so the device sees the same values.
inline std::vector<float> random_bf16(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  SplitMix64 rng(seed);
  std::vector<float> out(n);
  for (float& v : out) v = round_bf16(static_cast<float>((2.0 * rng.uniform() - 1.0) * scale));
  return out;
}

// Waits for the legacy default stream. cudaMemset and pageable cudaMemcpy
// return before their work lands there, and the backend's streams are
// non-blocking: without this, a kernel they run next may read the bytes
// before the fill or copy (a rare failure under load, 2026-12-05). Unlike
// sync(), it is legal while a backend stream captures a graph.
inline void settle_default_stream() { SLUICE_CHECK(cudaStreamSynchronize(cudaStreamLegacy) == cudaSuccess); }

// Device memory owned by a test, in bf16 or f32.
class DeviceArray {
 public:
  DeviceArray(const std::vector<float>& values, DType dtype, Shape shape) : dtype_(dtype), shape_(shape) {
    SLUICE_CHECK_EQ(static_cast<std::int64_t>(values.size()), shape.numel());
    const std::size_t bytes = values.size() * dtype_size_bytes(dtype);
    SLUICE_CHECK(cudaMalloc(&data_, std::max<std::size_t>(bytes, 1)) == cudaSuccess);
    std::vector<std::byte> host(bytes);
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (dtype == DType::bf16) {
        const std::uint16_t b = f32_to_bf16(values[i]);
        std::memcpy(host.data() + 2 * i, &b, 2);
      } else {
        std::memcpy(host.data() + 4 * i, &values[i], 4);
      }
    }
    SLUICE_CHECK(cudaMemcpy(data_, host.data(), bytes, cudaMemcpyHostToDevice) == cudaSuccess);
    settle_default_stream();
  }
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  Tensor tensor() const { return Tensor{data_, dtype_, shape_}; }

 private:
  void* data_ = nullptr;
  DType dtype_;
  Shape shape_;
};

// Waits for the backend's stream (non-blocking, so plain cudaMemcpy would not).
inline void sync() { SLUICE_CHECK(cudaDeviceSynchronize() == cudaSuccess); }

// Fills a device tensor with NaN bit patterns, so unwritten elements show.
inline void poison(const Tensor& t) {
  sync();
  SLUICE_CHECK(cudaMemset(t.data, 0xff, t.size_bytes()) == cudaSuccess);
  settle_default_stream();
}

inline std::vector<float> download(const Tensor& t) {
  sync();
  std::vector<std::byte> host(t.size_bytes());
  SLUICE_CHECK(cudaMemcpy(host.data(), t.data, host.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
  std::vector<float> out(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (t.dtype == DType::bf16) {
      std::uint16_t b;
      std::memcpy(&b, host.data() + 2 * i, 2);
      out[i] = bf16_to_f32(b);
    } else {
      std::memcpy(&out[i], host.data() + 4 * i, 4);
    }
  }
  return out;
}

inline bool all_finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

// ||out - ref|| / ||ref||; infinite if anything is NaN.
inline double relative_error(const std::vector<float>& out, const std::vector<double>& ref) {
  SLUICE_CHECK_EQ(out.size(), ref.size());
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// The largest |out - ref| and where (flat index; row and column for a
// [rows, cols] matrix), for failure messages that say where to look.
struct WorstDifference {
  double max_abs = 0.0;
  std::size_t index = 0;
  std::string where(std::int64_t cols) const {
    const auto c = static_cast<std::size_t>(cols);
    return "max |delta| " + std::to_string(max_abs) + " at row " + std::to_string(index / c) + ", column " +
           std::to_string(index % c);
  }
};
inline WorstDifference worst_difference(const std::vector<float>& out, const std::vector<double>& ref) {
  SLUICE_CHECK_EQ(out.size(), ref.size());
  WorstDifference worst;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double d = std::isfinite(out[i]) ? std::fabs(out[i] - ref[i]) : INFINITY;
    if (d > worst.max_abs) worst = {d, i};
  }
  return worst;
}

}  // namespace sluice::testing
