// The FP8 block-scaled GEMV (kernels/fp8_gemv.h) against a float64 product of
// the same e4m3 bytes, scales and bf16 activations. Every input is exact in
// the kernel's arithmetic (e4m3 and bf16 values are bf16, the scale an f32
// applied in f32), so the only errors are f32 summation and the output's
// rounding: f32 outputs within 1e-5 relative, bf16 within 4e-3 (half a bf16
// ulp is 2^-9 ~ 2e-3 of each value).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "sluice/backend/cuda/cuda_dtype.h"
#include "sluice/backend/cuda/kernels/fp8_gemv.h"
#include "test_util.h"

namespace sluice::testing {
namespace {

constexpr double kF32OutTolerance = 1e-5;
constexpr double kBf16OutTolerance = 4e-3;

// Random e4m3 bytes (every finite value, subnormals and both zeros included)
// and positive scales, on a scale grid whose rows are padded past ceil(k / 128).
struct Fp8Matrix {
  std::int64_t n, k, scale_row_stride;
  std::vector<std::uint8_t> bytes;
  std::vector<float> scales;

  Fp8Matrix(std::int64_t rows, std::int64_t cols, std::uint64_t seed)
      : n(rows), k(cols), scale_row_stride((cols + 127) / 128 + 3) {
    SplitMix64 rng(seed);
    bytes.resize(static_cast<std::size_t>(n * k));
    for (auto& b : bytes) {
      b = static_cast<std::uint8_t>(rng.next() & 0xff);
      if ((b & 0x7f) == 0x7f) b ^= 0x01;  // no NaN
    }
    scales.resize(static_cast<std::size_t>((n + 127) / 128 * scale_row_stride));
    for (float& s : scales) s = static_cast<float>(1e-2 * (0.25 + rng.uniform()));
  }
  double at(std::int64_t r, std::int64_t c) const {
    return double(fp8_e4m3_to_f32(bytes[static_cast<std::size_t>(r * k + c)])) *
           scales[static_cast<std::size_t>(r / 128 * scale_row_stride + c / 128)];
  }
};

std::vector<double> reference(const std::vector<float>& x, const Fp8Matrix& w, std::int64_t m) {
  std::vector<double> out(static_cast<std::size_t>(m * w.n));
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < w.n; ++j) {
      double acc = 0.0;
      for (std::int64_t c = 0; c < w.k; ++c) acc += double(x[static_cast<std::size_t>(i * w.k + c)]) * w.at(j, c);
      out[static_cast<std::size_t>(i * w.n + j)] = acc;
    }
  return out;
}

template <class T>
T* upload(const std::vector<T>& host) {
  void* p = nullptr;
  SLUICE_CHECK(cudaMalloc(&p, std::max<std::size_t>(host.size() * sizeof(T), 16)) == cudaSuccess);
  SLUICE_CHECK(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  return static_cast<T*>(p);
}

struct Case {
  std::int64_t n, k;
  std::int32_t k_parts = 0, stripes = 0;  // 0: the heuristic's
};

// N not a multiple of the 16-row stripe or the 128-row scale block, K not a
// multiple of the 128-wide chunk (K % 16 == 0 is the format's requirement for
// 16-byte loads), rows 1..16 across both instances (<= 8 and > 8), K split 1,
// 3 and 16 ways (a part with no chunk included: 16 parts of K = 400's 4
// chunks), and 2 or 4 stripes a block (the last block partly past N).
TEST(CudaFp8Gemv, MatchesTheFloat64ProductOfTheFp8Bytes) {
  std::uint64_t seed = 31000;
  for (Case c : {Case{.n = 1, .k = 16}, Case{.n = 300, .k = 400, .k_parts = 1, .stripes = 1},
                 Case{.n = 300, .k = 400, .k_parts = 3, .stripes = 2}, Case{.n = 300, .k = 400, .k_parts = 16, .stripes = 1},
                 Case{.n = 129, .k = 1040}, Case{.n = 576, .k = 7168}, Case{.n = 2048, .k = 512},
                 Case{.n = 200, .k = 1024, .k_parts = 4, .stripes = 4}, Case{.n = 520, .k = 272, .k_parts = 1, .stripes = 4}}) {
    const Fp8Matrix w(c.n, c.k, ++seed);
    std::uint8_t* dw = upload(w.bytes);
    float* dscales = upload(w.scales);
    for (std::int64_t m : {1, 2, 5, 8, 9, 16}) {
      for (DType out_dtype : {DType::bf16, DType::f32}) {
        SCOPED_TRACE(::testing::Message() << "m " << m << ", " << c.n << " x " << c.k << ", k_parts " << c.k_parts
                                          << ", stripes " << c.stripes
                                          << (out_dtype == DType::bf16 ? ", bf16 out" : ", f32 out"));
        const std::vector<float> x = random_bf16(static_cast<std::size_t>(m * c.k), ++seed, 4.0f);
        DeviceArray dx(x, DType::bf16, {m, c.k});
        DeviceArray dout(std::vector<float>(static_cast<std::size_t>(m * c.n)), out_dtype, {m, c.n});
        const Tensor out = dout.tensor();
        poison(out);
        cuda::launch_fp8_gemv({.x = dx.tensor().data,
                               .w = dw,
                               .w_scales = dscales,
                               .w_scale_row_stride = w.scale_row_stride,
                               .m = m,
                               .n = c.n,
                               .k = c.k,
                               .out = out.data,
                               .out_dt = cuda::dt_of(out_dtype),
                               .k_parts = c.k_parts,
                               .stripes = c.stripes},
                              {.stream = nullptr, .programmatic = false});
        ASSERT_EQ(cudaGetLastError(), cudaSuccess);
        const std::vector<float> got = download(out);
        const std::vector<double> ref = reference(x, w, m);
        EXPECT_LE(relative_error(got, ref), out_dtype == DType::bf16 ? kBf16OutTolerance : kF32OutTolerance)
            << worst_difference(got, ref).where(c.n);
      }
    }
    cudaFree(dw);
    cudaFree(dscales);
  }
}

// The split the heuristic picks, on an H200-like occupancy (132
// multiprocessors, 25 warps of 80 registers, at most 32 blocks): within the
// block's 16 warps and the chunks, no split where K is one chunk, a deep one
// for weights of few rows, a shallow one for many rows.
TEST(CudaFp8Gemv, SplitsKWhereRowsDoNotFillTheDevice) {
  cuda::Fp8GemvOccupancy h200{.num_sms = 132};
  for (int warps = 1; warps <= cuda::kFp8GemvMaxBlockWarps; ++warps) h200.blocks_per_sm[warps] = std::min(32, 25 / warps);
  struct Shape {
    std::int64_t m, n, k;
  };
  for (Shape s : {Shape{1, 4096, 128}, Shape{1, 1 << 20, 7168}, Shape{16, 4096, 4096}, Shape{4, 512, 7168},
                  Shape{1, 32768, 512}, Shape{9, 7168, 16384}, Shape{1, 2048, 400}}) {
    SCOPED_TRACE(::testing::Message() << s.m << " x " << s.n << " x " << s.k);
    const cuda::Fp8GemvSplit split = cuda::fp8_gemv_split(s.m, s.n, s.k, h200);
    EXPECT_GE(split.k_parts, 1);
    EXPECT_GE(split.stripes, 1);
    EXPECT_LE(split.k_parts, (s.k + 127) / 128);
    EXPECT_LE(split.k_parts * split.stripes, cuda::kFp8GemvMaxBlockWarps);
  }
  EXPECT_EQ(cuda::fp8_gemv_split(1, 4096, 128, h200).k_parts, 1);
  EXPECT_LE(cuda::fp8_gemv_split(1, 1 << 20, 7168, h200).k_parts, 2);
  EXPECT_GE(cuda::fp8_gemv_split(4, 512, 7168, h200).k_parts, 8);
}

}  // namespace
}  // namespace sluice::testing
