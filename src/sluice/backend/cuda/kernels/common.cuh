// Device helpers shared by the kernels: dtype-tagged loads and stores, warp
// reductions. Activations are bf16 or f32; the tag travels as a runtime enum
// (uniform across the grid, so the branch costs nothing measurable in these
// memory-bound kernels) to keep the template-instance matrix small.
#pragma once

#include <cuda_bf16.h>
#include <cstdint>

namespace sluice::cuda {

// Mirrors sluice::DType's values (f32 = 0, f16 = 1, bf16 = 2, i32 = 3,
// f8_e4m3 = 4). load_f and store_f take the float types; e4m3 tags codes that
// only move as bytes (a scaled record's, DeepSeek-V4's paged index keys).
enum class Dt : std::int32_t { f32 = 0, f16 = 1, bf16 = 2, e4m3 = 4 };

__device__ __forceinline__ float load_f(const void* p, Dt dt, std::int64_t i) {
  switch (dt) {
    case Dt::f32: return static_cast<const float*>(p)[i];
    case Dt::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default: return __half2float(static_cast<const __half*>(p)[i]);
  }
}

__device__ __forceinline__ void store_f(void* p, Dt dt, std::int64_t i, float v) {
  switch (dt) {
    case Dt::f32: static_cast<float*>(p)[i] = v; break;
    case Dt::bf16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(v); break;
    default: static_cast<__half*>(p)[i] = __float2half(v); break;
  }
}

// Elements i and i + 1 (i even) in one store.
__device__ __forceinline__ void store_f2(void* p, Dt dt, std::int64_t i, float a, float b) {
  switch (dt) {
    case Dt::f32: *reinterpret_cast<float2*>(static_cast<float*>(p) + i) = make_float2(a, b); break;
    case Dt::bf16: *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(p) + i) = __floats2bfloat162_rn(a, b); break;
    default: *reinterpret_cast<__half2*>(static_cast<__half*>(p) + i) = __floats2half2_rn(a, b); break;
  }
}

// A weight vector, read once: past L1 (no_allocate), so the streamed weights
// do not evict the activations, which every warp of the multiprocessor reads again.
__device__ __forceinline__ uint4 load_weight(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// The scale of a block of values quantized to e4m3: its amax over e4m3's
// largest, 448 (1 for an all-zero block).
__device__ __forceinline__ float e4m3_scale(float amax) { return amax > 0.0f ? amax / 448.0f : 1.0f; }

// A float's bits reordered so that unsigned order is float order, -0 and +0
// equal (the top-k selections compare floats, so they tie).
__device__ __forceinline__ std::uint32_t float_order_key(float v) {
  std::uint32_t u = __float_as_uint(v);
  if ((u << 1) == 0) u = 0;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Programmatic dependent launch (sm_90; kernels launched through
// launch_kernel() in launch.cuh). A kernel calls pdl_launch_dependents() first,
// so the next kernel in the stream may be scheduled onto SMs this one frees
// during its last wave, and pdl_wait() before it touches any memory an
// earlier kernel of the step writes or reads (every global store and every
// activation load). Only immutable data (weights) may be read before the
// wait. Every block reaches pdl_wait(), so a kernel completes only after its
// predecessor did, and the ordering is transitive along the stream. Both are
// no-ops in a kernel launched without the attribute.
__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

// Sum over the whole block; `scratch` holds 32 floats. Every thread gets the result.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int num_warps = (blockDim.x + 31) >> 5;
  v = lane < num_warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

}  // namespace sluice::cuda
