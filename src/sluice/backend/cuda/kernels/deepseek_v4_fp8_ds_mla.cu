// DeepSeek-V4's latents into their fp8_ds_mla records (deepseek_v4_kernels.h,
// launch_v4_quantize_fp8_ds_mla_rows): a block a row, warps 0-6 a group of 64
// nope values each (two a lane), warp 7 the 64 rope values. The arithmetic is
// the host codec's (model/deepseek_v4_fp8_ds_mla.h), operation for operation:
// the scale's code off the bits of max(amax, 1e-4) / 448, the codes rounded to
// nearest even from value / scale (exact: the scale is a power of two).
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/deepseek_v4_fp8_ds_mla.cuh"
#include "sluice/backend/cuda/kernels/deepseek_v4_kernels.h"

namespace sluice::cuda {
namespace {

constexpr int kGroups = kV4NopeDim / kV4Fp8DsMlaGroup;  // 7
constexpr int kThreads = (kGroups + 1) * 32;
constexpr float kAmaxFloor = 1e-4f;  // kFp8DsMlaAmaxFloor
static_assert(kV4NopeDim % kV4Fp8DsMlaGroup == 0 && kV4Fp8DsMlaGroup == 64 && kV4RopeDim == 64,
              "a lane takes two values of a group, and warp 7 the 64 rope values");

__global__ void __launch_bounds__(kThreads) v4_quantize_fp8_ds_mla_kernel(float* rows, std::uint8_t* records) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* row = rows + static_cast<std::int64_t>(blockIdx.x) * kV4LatentDim;
  std::uint8_t* record = records + static_cast<std::int64_t>(blockIdx.x) * kV4Fp8DsMlaBytes;
  const int c = warp * kV4Fp8DsMlaGroup + 2 * lane;  // warp 7: the rope values from kV4NopeDim
  const float2 v = *reinterpret_cast<const float2*>(row + c);
  if (warp == kGroups) {
    const __nv_bfloat162 rounded = __floats2bfloat162_rn(v.x, v.y);
    reinterpret_cast<__nv_bfloat162*>(record + kV4Fp8DsMlaRopeOffset)[lane] = rounded;
    *reinterpret_cast<float2*>(row + c) = __bfloat1622float2(rounded);
    if (lane < kV4Fp8DsMlaBytes - kV4Fp8DsMlaScalesOffset - kGroups) record[kV4Fp8DsMlaScalesOffset + kGroups + lane] = 0;
    return;
  }
  const float amax = warp_max(fmaxf(fabsf(v.x), fabsf(v.y)));
  const std::uint32_t bits = __float_as_uint(fmaxf(amax, kAmaxFloor) / 448.0f);
  const auto code = static_cast<std::uint8_t>((bits >> 23) + ((bits & 0x7fffffu) != 0 ? 1 : 0));
  const float scale = fp8_ds_mla_scale(code);
  const __nv_fp8_e4m3 lo(v.x / scale), hi(v.y / scale);
  reinterpret_cast<std::uint16_t*>(record)[c / 2] =
      static_cast<std::uint16_t>(lo.__x) | static_cast<std::uint16_t>(static_cast<std::uint16_t>(hi.__x) << 8);
  *reinterpret_cast<float2*>(row + c) = make_float2(static_cast<float>(lo) * scale, static_cast<float>(hi) * scale);
  if (lane == 0) record[kV4Fp8DsMlaScalesOffset + warp] = code;
}

}  // namespace

void launch_v4_quantize_fp8_ds_mla_rows(float* rows, std::int64_t num_rows, std::uint8_t* records,
                                        cudaStream_t stream) {
  SLUICE_CHECK(num_rows >= 0 && (num_rows == 0 || (rows != nullptr && records != nullptr)));
  SLUICE_CHECK(reinterpret_cast<std::uintptr_t>(rows) % 8 == 0 && reinterpret_cast<std::uintptr_t>(records) % 4 == 0);
  if (num_rows == 0) return;
  v4_quantize_fp8_ds_mla_kernel<<<static_cast<unsigned>(num_rows), kThreads, 0, stream>>>(rows, records);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
