// Helpers of the DeepSeek-V4 CUDA kernel tests (deepseek_v4_attention_test.cpp,
// deepseek_v4_layer_test.cpp): device copies of host vectors, random inputs,
// relative errors, and the CPU reference ops the kernels are checked against.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "sluice/backend/cpu/deepseek_v4_ops.h"
#include "sluice/backend/cuda/cuda_dtype.h"
#include "sluice/backend/float_convert.h"
#include "sluice/backend/rope.h"
#include "sluice/common/rng.h"

namespace sluice::v4_testing {

using cuda::Dt;
inline const Dt kF32 = cuda::dt_of(DType::f32);
inline const Dt kBf16 = cuda::dt_of(DType::bf16);
inline const Dt kE4m3 = cuda::dt_of(DType::f8_e4m3);

// A device copy of a host vector.
template <class T>
class Dev {
 public:
  explicit Dev(const std::vector<T>& host) : n_(host.size()) {
    SLUICE_CHECK(cudaMalloc(reinterpret_cast<void**>(&p_), std::max<std::size_t>(n_ * sizeof(T), 16)) == cudaSuccess);
    if (n_ > 0) SLUICE_CHECK(cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  explicit Dev(std::size_t n) : Dev(std::vector<T>(n)) {
    SLUICE_CHECK(cudaMemset(p_, 0xff, std::max<std::size_t>(n_ * sizeof(T), 16)) == cudaSuccess);  // poison
  }
  ~Dev() { cudaFree(p_); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  T* get() const { return p_; }
  std::vector<T> host() const {
    SLUICE_CHECK(cudaDeviceSynchronize() == cudaSuccess);
    std::vector<T> out(n_);
    if (n_ > 0) SLUICE_CHECK(cudaMemcpy(out.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return out;
  }

 private:
  T* p_ = nullptr;
  std::size_t n_;
};

inline float round_bf16(float v) { return bf16_to_f32(f32_to_bf16(v)); }

inline std::vector<float> uniform(std::size_t n, std::uint64_t seed, float lo, float hi) {
  SplitMix64 rng(seed);
  std::vector<float> out(n);
  for (float& v : out) v = static_cast<float>(lo + (hi - lo) * rng.uniform());
  return out;
}

inline std::vector<float> bf16_values(std::size_t n, std::uint64_t seed, float scale) {
  std::vector<float> v = uniform(n, seed, -scale, scale);
  for (float& x : v) x = round_bf16(x);
  return v;
}

inline std::vector<std::uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<std::uint16_t> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
  return out;
}

// ||a - b|| / ||b||.
inline double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  SLUICE_CHECK_EQ(a.size(), b.size());
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

inline double max_abs_difference(const std::vector<float>& a, const std::vector<float>& b) {
  SLUICE_CHECK_EQ(a.size(), b.size());
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::isfinite(a[i]) ? std::fabs(static_cast<double>(a[i]) - b[i]) : INFINITY);
  return worst;
}

inline RotaryTable test_rope(float theta) {
  RopeParams params{.head_dim = 64, .theta = theta};
  return RotaryTable{.inv_freq = rope_inverse_frequencies(params), .cos_sin_scale = 1.0f};
}

inline const cpu::DeepseekV4CpuKernels& cpu_ops() {
  static const cpu::DeepseekV4CpuKernels ops;
  return ops;
}

}  // namespace sluice::v4_testing
