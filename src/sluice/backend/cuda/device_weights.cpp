#include "sluice/backend/cuda/device_weights.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "sluice/backend/block_scales.h"
#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/lt_gemm.h"
#include "sluice/backend/float_convert.h"

namespace sluice::cuda {
namespace {

float host_to_f32(const Tensor& t, std::int64_t i) {
  switch (t.dtype) {
    case DType::f32: return t.as<const float>()[i];
    case DType::bf16: return bf16_to_f32(t.as<const std::uint16_t>()[i]);
    case DType::f16: return f16_to_f32(t.as<const std::uint16_t>()[i]);
    case DType::i32: break;
    case DType::f8_e4m3: break;  // uploaded as it is (upload_fp8) or dequantized on load (model/weight_binder)
    case DType::f8_e8m0:
    case DType::i8:
    case DType::u8: break;  // DeepSeek-V4 scales and FP4 codes: the CPU reference decodes them on load
  }
  SLUICE_CHECK_MSG(false, "float tensor expected");
  return 0.0f;
}

}  // namespace

DeviceWeights::~DeviceWeights() {
  for (void* p : allocations_) cudaFree(p);
}

Result<Tensor> DeviceWeights::upload(std::span<const Tensor> parts) {
  SLUICE_CHECK(!parts.empty());
  const Tensor& first = parts[0];
  if (first.dtype == DType::i32 || first.dtype == DType::i8 || first.dtype == DType::u8 ||
      first.dtype == DType::f8_e8m0)
    return Error{fmt::format("CUDA backend: {} weights are not supported", dtype_name(first.dtype))};
  if (first.dtype == DType::f8_e4m3) return upload_fp8(parts);
  // Matrices become bf16 (the GEMM and embedding dtype); vectors keep theirs.
  const DType target = first.shape.rank >= 2 ? DType::bf16 : first.dtype;
  std::int64_t rows = 0;
  for (const Tensor& part : parts) {
    SLUICE_CHECK(part.dtype == first.dtype && part.cols() == first.cols());
    rows += part.shape.rank >= 2 ? part.rows() : part.numel();
  }
  const Shape shape = first.shape.rank >= 2 ? Shape{rows, first.cols()} : Shape{rows};
  const std::int64_t bytes = shape.numel() * static_cast<std::int64_t>(dtype_size_bytes(target));
  SLUICE_TRY_ASSIGN(device, allocate(bytes, "weight"));
  std::int64_t offset_bytes = 0;
  for (const Tensor& part : parts) {
    copy_converted(part, target, static_cast<std::byte*>(device) + offset_bytes);
    offset_bytes += part.numel() * static_cast<std::int64_t>(dtype_size_bytes(target));
  }
  SLUICE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return Tensor{device, target, shape};
}

Result<Tensor> DeviceWeights::upload_fp8(std::span<const Tensor> parts) {
  const Tensor& first = parts[0];
  if (first.shape.rank != 2 || first.scales.empty())
    return Error{"CUDA backend: an FP8 weight needs its block scales (Ops::keeps_fp8_block_weights)"};
  std::int64_t rows = 0;
  for (const Tensor& part : parts) {
    SLUICE_CHECK(part.dtype == DType::f8_e4m3 && part.cols() == first.cols());
    rows += part.rows();
  }
  const ScaleGrid grid = stacked_scale_grid(parts, kLtWeightScaleRowAlignment);
  const std::vector<float> scales = stack_block_scales(parts, grid);
  SLUICE_TRY_ASSIGN(values, allocate(rows * first.cols(), "FP8 weight"));
  SLUICE_TRY_ASSIGN(device_scales, allocate(grid.num_floats() * 4, "FP8 weight scales"));
  std::int64_t offset_bytes = 0;
  for (const Tensor& part : parts) {
    copy_converted(part, DType::f8_e4m3, static_cast<std::byte*>(values) + offset_bytes);
    offset_bytes += part.numel();
  }
  const Tensor host_scales{const_cast<float*>(scales.data()), DType::f32, Shape{grid.num_floats()}};
  copy_converted(host_scales, DType::f32, device_scales);
  SLUICE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return Tensor{values, DType::f8_e4m3, Shape{rows, first.cols()},
                BlockScales{.data = static_cast<const float*>(device_scales),
                            .block_rows = first.scales.block_rows,
                            .block_cols = first.scales.block_cols,
                            .row_stride = grid.row_stride}};
}

Result<void*> DeviceWeights::allocate(std::int64_t bytes, const char* what) {
  void* p = nullptr;
  if (cudaMalloc(&p, static_cast<std::size_t>(std::max<std::int64_t>(bytes, 1))) != cudaSuccess) {
    cudaGetLastError();
    std::size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    return Error{fmt::format("CUDA backend: cannot allocate {} of {:.2f} GiB: {:.2f} GiB of "
                             "{:.2f} GiB free (the model does not fit on this GPU)",
                             what, bytes / 1073741824.0, free_bytes / 1073741824.0, total_bytes / 1073741824.0)};
  }
  allocations_.push_back(p);
  return p;
}

void DeviceWeights::copy_converted(const Tensor& host, DType target, void* device) {
  constexpr std::int64_t kChunkElems = 16LL << 20;
  const std::int64_t n = host.numel();
  const std::size_t out_size = dtype_size_bytes(target);
  for (std::int64_t begin = 0; begin < n; begin += kChunkElems) {
    const std::int64_t count = std::min(kChunkElems, n - begin);
    auto* staging = static_cast<std::byte*>(staging_.ensure(kChunkElems * 4));
    SLUICE_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the staging buffer is free again
    if (host.dtype == target) {
      std::memcpy(staging, static_cast<const std::byte*>(host.data) + begin * out_size,
                  static_cast<std::size_t>(count) * out_size);
    } else {
      for (std::int64_t i = 0; i < count; ++i) {
        const float value = host_to_f32(host, begin + i);
        if (target == DType::bf16) {
          const std::uint16_t bits = f32_to_bf16(value);
          std::memcpy(staging + i * 2, &bits, 2);
        } else {
          SLUICE_CHECK(target == DType::f32);
          std::memcpy(staging + i * 4, &value, 4);
        }
      }
    }
    SLUICE_CUDA_CHECK(cudaMemcpyAsync(static_cast<std::byte*>(device) + begin * out_size, staging,
                                      static_cast<std::size_t>(count) * out_size, cudaMemcpyHostToDevice, stream_));
  }
}

}  // namespace sluice::cuda
