// DeepSeek-V4's MoE pieces on the device (deepseek_v4_kernels.h).
//
// Routing: one warp per row; sqrt(softplus) scores in shared memory, k
// rounds of a warp arg-max (larger first, ties to the lower expert, as the
// reference's partial_sort), or the hash table's experts; weights are the
// picked scores over their sum times the scale.
//
// Clamped SwiGLU: elementwise over [rows, inter].
//
// FP4 expert GEMM: one block per (expert, 64 output columns), 8 warps; the
// block walks its expert's slots 8 at a time with their x rows staged in
// shared memory as bf16. A warp owns 8 columns at a time; per 256 inputs a
// lane loads 4 code bytes (8 e2m1 values, a quarter of a 32-input group) and
// that group's ue8m0 scale, dequantizes in registers (exact in f32) and
// multiplies with the 8 staged x values of each slot (16 B, conflict-free).
// Memory-bound for decode (a few slots per expert): the weight bytes are
// read once per 8 slots.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/deepseek_v4_kernels.h"

namespace sluice::cuda {
namespace {

constexpr int kMaxK = 32;

__global__ void v4_route_kernel(V4RouteArgs a) {
  __shared__ float scores[kV4MaxExperts];
  __shared__ float choice[kV4MaxExperts];
  const int row = blockIdx.x, lane = threadIdx.x;
  const float* logits = a.logits + static_cast<std::int64_t>(row) * a.num_experts;
  for (int e = lane; e < a.num_experts; e += 32) {
    const float x = logits[e];
    const float softplus = x > 20.0f ? x : log1pf(expf(x));  // torch's threshold 20
    scores[e] = sqrtf(softplus);
    choice[e] = scores[e] + (a.bias != nullptr ? a.bias[e] : 0.0f);
  }
  __syncwarp();
  std::int32_t* ids = a.expert_ids + static_cast<std::int64_t>(row) * a.k;
  float* weights = a.expert_weights + static_cast<std::int64_t>(row) * a.k;
  int picked[kMaxK];
  if (a.hash_table != nullptr) {
    const std::int64_t token = a.token_ids[row];
    for (int i = 0; i < a.k; ++i) picked[i] = a.hash_table[token * a.k + i];
  } else {
    for (int i = 0; i < a.k; ++i) {
      float best = -INFINITY;
      int best_e = INT_MAX;
      for (int e = lane; e < a.num_experts; e += 32) {
        const float v = choice[e];
        if (v > best || (v == best && e < best_e)) {
          best = v;
          best_e = e;
        }
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, best, o);
        const int oe = __shfl_xor_sync(0xffffffffu, best_e, o);
        if (ov > best || (ov == best && oe < best_e)) {
          best = ov;
          best_e = oe;
        }
      }
      // NaN choices rank before nothing: if every one left is NaN, expert 0 (in bounds, not a fault).
      if (best_e >= a.num_experts) best_e = 0;
      picked[i] = best_e;
      __syncwarp();
      if (lane == 0) choice[best_e] = -INFINITY;
      __syncwarp();
    }
  }
  float sum = 0.0f;
  for (int i = 0; i < a.k; ++i) sum += scores[picked[i]];
  if (lane == 0)
    for (int i = 0; i < a.k; ++i) {
      ids[i] = picked[i];
      weights[i] = scores[picked[i]] / (sum + 1e-20f) * a.scale;
    }
}

__global__ void v4_clamped_swiglu_kernel(V4SwigluArgs a) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<std::int64_t>(a.rows) * a.inter) return;
  const std::int64_t row = i / a.inter, c = i % a.inter;
  const float gate = fminf(load_f(a.in, a.in_dt, row * 2 * a.inter + c), a.limit);
  const float up = fminf(fmaxf(load_f(a.in, a.in_dt, row * 2 * a.inter + a.inter + c), -a.limit), a.limit);
  store_f(a.out, a.out_dt, i, gate / (1.0f + expf(-gate)) * up);
}

constexpr int kGemmThreads = 256;
constexpr int kGemmWarps = kGemmThreads / 32;
constexpr int kColumnsPerBlock = 64;
constexpr int kColumnsPerWarpPass = 8;
constexpr int kSlotsPerPass = 8;

__device__ __forceinline__ float e2m1(std::uint32_t code) {
  // e2m1: exponent bits 2-1 (bias 1), mantissa bit 0; exponent 0 is 0 or 0.5.
  const std::uint32_t exp = (code >> 1) & 3u, man = code & 1u;
  const float v = exp == 0 ? 0.5f * static_cast<float>(man) : __uint_as_float(((exp + 126u) << 23) | (man << 22));
  return (code & 8u) ? -v : v;
}

__device__ __forceinline__ float e8m0(std::uint32_t code) {
  return code == 0 ? 5.877471754111438e-39f /* 2^-127 */ : __uint_as_float(code << 23);
}

__global__ void __launch_bounds__(kGemmThreads) v4_fp4_gemm_kernel(V4Fp4GemmArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* xs = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [kSlotsPerPass, k_in]
  const int expert = blockIdx.y;
  const int slot_begin = a.expert_offsets[expert], slot_end = a.expert_offsets[expert + 1];
  if (slot_begin >= slot_end) return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int k_in = a.k_in;
  const std::int64_t code_row_bytes = k_in / 2, scale_row = k_in / 32;
  const std::uint8_t* w = a.w + static_cast<std::int64_t>(expert) * a.n_out * code_row_bytes;
  const std::uint8_t* ws = a.w_scale + static_cast<std::int64_t>(expert) * a.n_out * scale_row;
  const auto* x = static_cast<const __nv_bfloat16*>(a.x);
  for (int pass = slot_begin; pass < slot_end; pass += kSlotsPerPass) {
    const int slots = min(kSlotsPerPass, slot_end - pass);
    __syncthreads();
    const int chunks = k_in / 8;  // 16 B each
    for (int i = threadIdx.x; i < kSlotsPerPass * chunks; i += kGemmThreads) {
      const int s = i / chunks, c = i % chunks;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (s < slots) v = reinterpret_cast<const uint4*>(x + static_cast<std::int64_t>(a.row_of_slot[pass + s]) * k_in)[c];
      reinterpret_cast<uint4*>(xs + static_cast<std::int64_t>(s) * k_in)[c] = v;
    }
    __syncthreads();
    for (int col0 = blockIdx.x * kColumnsPerBlock + warp * kColumnsPerWarpPass;
         col0 < min(a.n_out, (blockIdx.x + 1) * kColumnsPerBlock); col0 += kGemmWarps * kColumnsPerWarpPass) {
      float acc[kColumnsPerWarpPass][kSlotsPerPass];
#pragma unroll
      for (int c = 0; c < kColumnsPerWarpPass; ++c)
#pragma unroll
        for (int s = 0; s < kSlotsPerPass; ++s) acc[c][s] = 0.0f;
      for (int k0 = 0; k0 < k_in; k0 += 256) {
        const int k = k0 + lane * 8;  // this lane's 8 inputs
        float xv[kSlotsPerPass][8];
#pragma unroll
        for (int s = 0; s < kSlotsPerPass; ++s) {
          const uint4 raw = *reinterpret_cast<const uint4*>(xs + static_cast<std::int64_t>(s) * k_in + k);
          const auto* x2 = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float2 f = __bfloat1622float2(x2[i]);
            xv[s][2 * i] = f.x;
            xv[s][2 * i + 1] = f.y;
          }
        }
#pragma unroll
        for (int c = 0; c < kColumnsPerWarpPass; ++c) {
          const std::int64_t n = col0 + c;
          const std::uint32_t codes = *reinterpret_cast<const std::uint32_t*>(w + n * code_row_bytes + k / 2);
          const float scale = e8m0(ws[n * scale_row + k / 32]);
          float wv[8];
#pragma unroll
          for (int i = 0; i < 8; ++i) wv[i] = e2m1(codes >> (4 * i)) * scale;
#pragma unroll
          for (int s = 0; s < kSlotsPerPass; ++s) {
            float d = acc[c][s];
#pragma unroll
            for (int i = 0; i < 8; ++i) d = fmaf(wv[i], xv[s][i], d);
            acc[c][s] = d;
          }
        }
      }
#pragma unroll
      for (int c = 0; c < kColumnsPerWarpPass; ++c)
#pragma unroll
        for (int s = 0; s < kSlotsPerPass; ++s) {
          const float v = warp_sum(acc[c][s]);
          if (lane == 0 && s < slots)
            store_f(a.out, a.out_dt, static_cast<std::int64_t>(pass + s) * a.n_out + col0 + c, v);
        }
    }
  }
}

}  // namespace

void launch_v4_route(const V4RouteArgs& args, cudaStream_t stream) {
  SLUICE_CHECK(args.num_experts > 0 && args.num_experts <= kV4MaxExperts);
  SLUICE_CHECK(args.k > 0 && args.k <= kMaxK && args.k <= args.num_experts);
  SLUICE_CHECK(args.logits != nullptr && args.expert_ids != nullptr && args.expert_weights != nullptr);
  SLUICE_CHECK(args.hash_table == nullptr || args.token_ids != nullptr);
  if (args.rows == 0) return;
  v4_route_kernel<<<static_cast<unsigned>(args.rows), 32, 0, stream>>>(args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_v4_clamped_swiglu(const V4SwigluArgs& args, cudaStream_t stream) {
  SLUICE_CHECK(args.inter > 0 && args.in != nullptr && args.out != nullptr);
  SLUICE_CHECK(args.limit > 0.0f);
  if (args.rows == 0) return;
  const std::int64_t n = static_cast<std::int64_t>(args.rows) * args.inter;
  v4_clamped_swiglu_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_v4_fp4_gemm(const V4Fp4GemmArgs& args, cudaStream_t stream) {
  SLUICE_CHECK(args.num_experts > 0 && args.n_out > 0 && args.n_out % kColumnsPerWarpPass == 0);
  SLUICE_CHECK(args.k_in > 0 && args.k_in % 256 == 0);
  SLUICE_CHECK(args.x != nullptr && args.row_of_slot != nullptr && args.expert_offsets != nullptr &&
               args.w != nullptr && args.w_scale != nullptr && args.out != nullptr);
  const int smem = kSlotsPerPass * args.k_in * 2;
  SLUICE_CHECK_MSG(smem <= 200 * 1024, "fp4 gemm: k_in too large for the staged x rows");
  static int configured_smem = 0;
  if (smem > 48 * 1024 && smem > configured_smem) {
    SLUICE_CUDA_CHECK(cudaFuncSetAttribute(v4_fp4_gemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    configured_smem = smem;
  }
  const dim3 grid(static_cast<unsigned>((args.n_out + kColumnsPerBlock - 1) / kColumnsPerBlock),
                  static_cast<unsigned>(args.num_experts));
  v4_fp4_gemm_kernel<<<grid, kGemmThreads, smem, stream>>>(args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
