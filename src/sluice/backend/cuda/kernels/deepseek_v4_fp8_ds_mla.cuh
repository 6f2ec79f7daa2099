// A fp8_ds_mla latent record read on the device (deepseek_v4_kernels.h,
// kV4Fp8DsMla*; the host's codec is model/deepseek_v4_fp8_ds_mla.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "sluice/backend/cuda/kernels/deepseek_v4_kernels.h"

namespace sluice::cuda {

// 2^(code - 127) for a ue8m0 code of 1..254: the code is the f32 exponent field.
__device__ __forceinline__ float fp8_ds_mla_scale(std::uint8_t code) {
  return __uint_as_float(static_cast<std::uint32_t>(code) << 23);
}

// Value c of the latent a record holds: code x its group's scale, or the bf16 rope value.
__device__ __forceinline__ float fp8_ds_mla_value(const void* record, int c) {
  const auto* bytes = static_cast<const std::uint8_t*>(record);
  if (c < kV4NopeDim) {
    __nv_fp8_e4m3 code;
    code.__x = bytes[c];
    return static_cast<float>(code) * fp8_ds_mla_scale(bytes[kV4Fp8DsMlaScalesOffset + c / kV4Fp8DsMlaGroup]);
  }
  return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(bytes + kV4Fp8DsMlaRopeOffset)[c - kV4NopeDim]);
}

}  // namespace sluice::cuda
