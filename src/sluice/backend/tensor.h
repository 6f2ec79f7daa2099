// Tensor: a non-owning view of a dense, row-major array in one backend's memory.
// Weights are views into mmapped safetensors (CPU) or device buffers (CUDA);
// activations are views into a backend's per-step scratch arena.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "sluice/common/check.h"

namespace sluice {

// f8_e4m3: float8 with 4 exponent and 3 mantissa bits (OCP "E4M3FN": no
// infinities, max 448), the storage of DeepSeek's block-scaled weights.
// f8_e8m0: an unsigned power of two 2^(code - 127), 0xff NaN (OCP "E8M0",
// torch float8_e8m0fnu): DeepSeek-V4's `.scale` tensors.
// i8 / u8: bytes; DeepSeek-V4 stores its FP4 routed experts as I8, two e2m1
// codes a byte (model/fp4_weights.h), never plain integers.
enum class DType : std::uint8_t { f32, f16, bf16, i32, f8_e4m3, f8_e8m0, i8, u8 };

constexpr std::size_t dtype_size_bytes(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::f8_e4m3: return 1;
    case DType::f8_e8m0: return 1;
    case DType::i8: return 1;
    case DType::u8: return 1;
  }
  return 0;
}

const char* dtype_name(DType dtype);

constexpr int kMaxTensorRank = 4;

struct Shape {
  std::array<std::int64_t, kMaxTensorRank> dims{};
  int rank = 0;

  Shape() = default;
  Shape(std::initializer_list<std::int64_t> list) {
    SLUICE_CHECK(list.size() <= kMaxTensorRank);
    for (std::int64_t d : list) dims[rank++] = d;
  }
  std::int64_t operator[](int i) const { return dims[i]; }
  std::int64_t numel() const {
    std::int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= dims[i];
    return n;
  }
  // The last dimension, and the product of the others: how 2-D ops see a tensor.
  std::int64_t cols() const { return rank == 0 ? 1 : dims[rank - 1]; }
  std::int64_t rows() const { return rank == 0 ? 1 : numel() / cols(); }
  bool operator==(const Shape& other) const {
    if (rank != other.rank) return false;
    for (int i = 0; i < rank; ++i)
      if (dims[i] != other.dims[i]) return false;
    return true;
  }
  std::string str() const;
};

// The block scales of an FP8 weight that a backend keeps quantized
// (Ops::keeps_fp8_block_weights): the weight means
//     w[r][c] = fp8(values[r][c]) * data[(r / block_rows) * row_stride + c / block_cols]
// (the checkpoint's `_scale_inv`; a backend may pad row_stride for its GEMM
// library). In the same memory as the values; empty on every other tensor.
struct BlockScales {
  const float* data = nullptr;
  std::int32_t block_rows = 0;
  std::int32_t block_cols = 0;
  std::int64_t row_stride = 0;  // floats from one block row's scales to the next

  bool empty() const { return data == nullptr; }
};

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  Shape shape;
  BlockScales scales;  // FP8 block-scaled weights only

  std::int64_t numel() const { return shape.numel(); }
  std::int64_t rows() const { return shape.rows(); }
  std::int64_t cols() const { return shape.cols(); }
  std::size_t size_bytes() const { return static_cast<std::size_t>(numel()) * dtype_size_bytes(dtype); }
  template <class T>
  T* as() const { return static_cast<T*>(data); }
  // Same memory seen with another shape of the same element count.
  // Block scales stay valid only while the columns do.
  Tensor reshaped(Shape new_shape) const {
    SLUICE_CHECK_EQ(new_shape.numel(), numel());
    SLUICE_CHECK(scales.empty() || new_shape.cols() == cols());
    return Tensor{data, dtype, new_shape, scales};
  }
  // Rows [begin, begin + count) of the 2-D view. A block-scaled weight slices
  // at block boundaries only (its scales slice with it).
  Tensor row_slice(std::int64_t begin, std::int64_t count) const {
    SLUICE_CHECK_LE(begin + count, rows());
    auto* base = static_cast<std::byte*>(data) + begin * cols() * static_cast<std::int64_t>(dtype_size_bytes(dtype));
    BlockScales sliced = scales;
    if (!scales.empty()) {
      SLUICE_CHECK_EQ(begin % scales.block_rows, std::int64_t{0});
      sliced.data += begin / scales.block_rows * scales.row_stride;
    }
    return Tensor{base, dtype, Shape{count, cols()}, sliced};
  }
};

}  // namespace sluice
