// Stand-alone batch-1 decode chain for the GEMV experiments of session 11
// (issue 14 item 5), outside the project's build so that variants compile in a
// minute: nvcc -O3 -std=c++20 -gencode arch=compute_90a,code=sm_90a -o gemv_chain_bench gemv_chain_bench.cu
//
// One "layer" is the kernel sequence of a Llama-3-8B decode step at batch 1:
// norm -> q|k|v GEMV -> rope -> attention proxy (streams 4k tokens of K and V)
// -> combine -> o_proj -> norm -> gate|up SwiGLU GEMV -> down; 32 layers with
// their own weights, captured in one CUDA graph with programmatic dependent
// launch (PDL), timed by replay. The GEMV kernels are the project's loops
// (kernels/gemv.cu) with switches (`Mode` bits, per GEMV in a `Variant`):
//   (none)    the loop before session 11: L2 prefetch of each warp's first
//             2 KB before griddepcontrol.wait
//   kReg      the first iteration's weights in registers before the wait
//             (rotated loop); with kNoAlloc this is what gemv.cu does now
//   kNoAlloc  weights loaded with ld.global.nc.L1::no_allocate
//   kXSmem    x staged in shared memory by each block
// plus `Prefetch` (bulk L2 prefetch of each warp's share before the wait),
// split-K parts per GEMV, PDL on/off, and modes 8-32: a separate kernel that
// keeps 2-3 iterations in flight (it spilled; gemv1-9). The variant list is
// the last run's (gemv1-9); docs/benchmarks.md ("Session 11 - gemv1") has
// the earlier runs' results.
// Built with -DCHAIN_TIMELINE, each kernel's blocks record %globaltimer at
// entry, after the wait and at exit, so the table shows where a layer's time
// goes and whether a kernel's blocks were resident (and loading) before its
// predecessor ended; every block of layer 10 is kept for the spread.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

namespace {

constexpr int kHidden = 4096, kQ = 4096, kKv = 1024, kInter = 14336, kLayers = 32, kContext = 4096;
constexpr int kKvHeads = 8, kDim = 128, kWarps = 8;
constexpr int kKernelsPerLayer = 9;

struct Timeline {
  unsigned long long start[kLayers * kKernelsPerLayer];
  unsigned long long waited[kLayers * kKernelsPerLayer];
  unsigned long long end[kLayers * kKernelsPerLayer];
  // Every block's marks in layer kBlockLayer.
  unsigned long long blk_wait[kKernelsPerLayer][4096];
  unsigned long long blk_end[kKernelsPerLayer][4096];
};
constexpr int kBlockLayer = 10;

__device__ __forceinline__ unsigned long long now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// Timeline marks by thread 0 of each block: compiled in only with
// -DCHAIN_TIMELINE (a second binary), so the timed build's kernels carry no
// extra parameters or registers.
#ifdef CHAIN_TIMELINE
struct Marks {
  Timeline* tl;
  int id;
  __device__ void start() const {
    if (tl && threadIdx.x == 0) atomicMin(&tl->start[id], now());
  }
  __device__ void waited() const {
    if (tl && threadIdx.x == 0) {
      const unsigned long long t = now();
      atomicMin(&tl->waited[id], t);
      if (id / kKernelsPerLayer == kBlockLayer && blockIdx.x < 4096) tl->blk_wait[id % kKernelsPerLayer][blockIdx.x] = t;
    }
  }
  __device__ void end() const {
    __syncthreads();
    if (tl && threadIdx.x == 0) {
      const unsigned long long t = now();
      atomicMax(&tl->end[id], t);
      if (id / kKernelsPerLayer == kBlockLayer && blockIdx.x < 4096) tl->blk_end[id % kKernelsPerLayer][blockIdx.x] = t;
    }
  }
};
constexpr bool kTimeline = true;
#else
struct Marks {
  __host__ __device__ Marks(Timeline*, int) {}
  __device__ void start() const {}
  __device__ void waited() const {}
  __device__ void end() const {}
};
constexpr bool kTimeline = false;
#endif

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float dot8(uint4 a, uint4 b) {
  const __nv_bfloat162* ha = reinterpret_cast<const __nv_bfloat162*>(&a);
  const __nv_bfloat162* hb = reinterpret_cast<const __nv_bfloat162*>(&b);
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 fa = __bfloat1622float2(ha[i]), fb = __bfloat1622float2(hb[i]);
    s += fa.x * fb.x + fa.y * fb.y;
  }
  return s;
}

// What a GEMV does with its weights and x (bit flags):
//   kReg      the first iteration's weights in registers before the wait (else
//             the project's L2 prefetch of 2 KB a warp)
//   kNoAlloc  weights loaded with ld.global.nc.L1::no_allocate, so the
//             streamed weights do not evict x from L1
//   kXSmem    x staged in shared memory by each block after the wait
enum Mode { kL2 = 0, kReg = 1, kNoAlloc = 2, kXSmem = 4 };

// Bulk L2 prefetch before the wait (cp.async.bulk.prefetch.L2, one
// instruction a row part): each warp's own share up to `cap` bytes of each row
// it reads, and, in blocks of the first `stride`, the shares of blocks
// b + stride, b + 2 stride, ... (at most `ahead` of them): the later waves'
// weights, which no resident block would otherwise touch before the wait.
struct Prefetch {
  int cap;     // bytes a row part; 0: no bulk prefetch
  int stride;  // blocks resident at once (132 x blocks a multiprocessor)
  int ahead;   // later-wave blocks prefetched by each first-wave block
};

__device__ __forceinline__ void bulk_prefetch_l2(const void* p, int bytes) {
  if (bytes > 0) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

template <int kMode>
__device__ __forceinline__ uint4 load_w(const uint4* p) {
  if constexpr ((kMode & kNoAlloc) != 0) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
  } else {
    return __ldg(p);
  }
}

// x into shared memory (kXSmem) or left in global memory.
template <int kMode>
__device__ __forceinline__ const uint4* stage_x(const uint4* x, int k_vecs, uint4* smem) {
  if constexpr ((kMode & kXSmem) != 0) {
    for (int i = threadIdx.x; i < k_vecs; i += blockDim.x) smem[i] = x[i];
    __syncthreads();
    return smem;
  } else {
    return x;
  }
}

// Split K (kParts warps a row; 1 = plain), batch 1.
template <int kParts, int kMode>
__global__ void __launch_bounds__(kWarps * 32, 8)
    gemv_kernel(const uint4* __restrict__ xg, const uint4* __restrict__ w, __nv_bfloat16* out, int n, int k_vecs,
                Prefetch, Marks marks) {
  constexpr int kItems = kWarps / kParts;
  __shared__ float s_part[kParts][kItems];
  extern __shared__ uint4 s_x[];
  marks.start();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int part = warp / kItems, slot = warp % kItems;
  const int item = blockIdx.x * kItems + slot;
  const bool active = item < n;
  const int part_vecs = kParts == 1 ? k_vecs : min(k_vecs, (k_vecs / kParts + 31) / 32 * 32);
  const int begin = min(k_vecs, part * part_vecs);
  const int end = !active ? begin : part == kParts - 1 ? k_vecs : min(k_vecs, begin + part_vecs);
  const uint4* wrow = w + static_cast<long long>(active ? item : 0) * k_vecs;
  pdl_launch_dependents();
  const bool full = end - begin >= 128;  // a whole first iteration for every lane
  uint4 wv[4];
  if constexpr ((kMode & kReg) == 0) {
    if (lane < 16 && begin * 16 + lane * 128 < end * 16) prefetch_l2(reinterpret_cast<const char*>(wrow + begin) + lane * 128);
  } else {
    if (full) {
#pragma unroll
      for (int u = 0; u < 4; ++u) wv[u] = load_w<kMode>(wrow + begin + lane + 32 * u);
    }
  }
  pdl_wait();
  marks.waited();
  const uint4* x = stage_x<kMode>(xg, k_vecs, s_x);
  float acc = 0.0f;
  int kv = begin + lane;
  if constexpr ((kMode & kReg) != 0) {
    // Rotated loop: the preloaded iteration is consumed first, each next
    // iteration's loads issue after the previous one's math.
    if (full) {
      for (;;) {
#pragma unroll
        for (int u = 0; u < 4; ++u) acc += dot8(wv[u], x[kv + 32 * u]);
        kv += 128;
        if (kv + 96 >= end) break;
#pragma unroll
        for (int u = 0; u < 4; ++u) wv[u] = load_w<kMode>(wrow + kv + 32 * u);
      }
    }
  } else {
    for (; kv + 96 < end; kv += 128) {
#pragma unroll
      for (int u = 0; u < 4; ++u) wv[u] = load_w<kMode>(wrow + kv + 32 * u);
#pragma unroll
      for (int u = 0; u < 4; ++u) acc += dot8(wv[u], x[kv + 32 * u]);
    }
  }
  for (; kv < end; kv += 32) acc += dot8(load_w<kMode>(wrow + kv), x[kv]);
  acc = warp_sum(acc);
  if (kParts > 1) {
    if (lane == 0) s_part[part][slot] = acc;
    __syncthreads();
    if (part == 0 && lane == 0 && active) {
      float t = 0.0f;
#pragma unroll
      for (int q = 0; q < kParts; ++q) t += s_part[q][slot];
      out[item] = __float2bfloat16(t);
    }
  } else if (lane == 0 && active) {
    out[item] = __float2bfloat16(acc);
  }
  marks.end();
}

// Deeper preload (modes 8, 16, 24): kDepth iterations of four loads a lane
// in flight, the first kDepth loaded before the wait, each slot refilled
// kDepth iterations ahead after its math; fewer blocks a multiprocessor to
// pay the registers. Weights past L1 as kNoAlloc.
template <int kParts, int kDepth, int kMinBlocks>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    gemv_deep_kernel(const uint4* __restrict__ x, const uint4* __restrict__ w, __nv_bfloat16* out, int n, int k_vecs,
                     Prefetch, Marks marks) {
  constexpr int kItems = kWarps / kParts;
  __shared__ float s_part[kParts][kItems];
  marks.start();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int part = warp / kItems, slot = warp % kItems;
  const int item = blockIdx.x * kItems + slot;
  const bool active = item < n;
  const int part_vecs = kParts == 1 ? k_vecs : min(k_vecs, (k_vecs / kParts + 31) / 32 * 32);
  const int begin = min(k_vecs, part * part_vecs);
  const int end = !active ? begin : part == kParts - 1 ? k_vecs : min(k_vecs, begin + part_vecs);
  const uint4* wrow = w + static_cast<long long>(active ? item : 0) * k_vecs + begin + lane;
  pdl_launch_dependents();
  const int nfull = (end - begin) / 128;
  uint4 wv[kDepth][4];
#pragma unroll
  for (int d = 0; d < kDepth; ++d)
    if (d < nfull)
#pragma unroll
      for (int u = 0; u < 4; ++u) wv[d][u] = load_w<kNoAlloc>(wrow + 128 * d + 32 * u);
  pdl_wait();
  marks.waited();
  const uint4* xr = x + begin + lane;
  float acc = 0.0f;
  for (int i = 0; i < nfull; i += kDepth) {
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      if (i + d < nfull) {
#pragma unroll
        for (int u = 0; u < 4; ++u) acc += dot8(wv[d][u], xr[128 * (i + d) + 32 * u]);
        if (i + d + kDepth < nfull)
#pragma unroll
          for (int u = 0; u < 4; ++u) wv[d][u] = load_w<kNoAlloc>(wrow + 128 * (i + d + kDepth) + 32 * u);
      }
    }
  }
  for (int kv = 128 * nfull; begin + lane + kv < end; kv += 32) acc += dot8(load_w<kNoAlloc>(wrow + kv), xr[kv]);
  acc = warp_sum(acc);
  if (kParts > 1) {
    if (lane == 0) s_part[part][slot] = acc;
    __syncthreads();
    if (part == 0 && lane == 0 && active) {
      float t = 0.0f;
#pragma unroll
      for (int q = 0; q < kParts; ++q) t += s_part[q][slot];
      out[item] = __float2bfloat16(t);
    }
  } else if (lane == 0 && active) {
    out[item] = __float2bfloat16(acc);
  }
  marks.end();
}

template <int kMode>
__global__ void __launch_bounds__(kWarps * 32, 4)
    swiglu_kernel(const uint4* __restrict__ xg, const uint4* __restrict__ w, __nv_bfloat16* out, int inter, int k_vecs,
                  Prefetch, Marks marks) {
  extern __shared__ uint4 s_x[];
  marks.start();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int item = blockIdx.x * kWarps + warp;
  const bool active = item < inter;
  const int end = active ? k_vecs : 0;
  const uint4* wrow[2] = {w + static_cast<long long>(active ? item : 0) * k_vecs,
                          w + static_cast<long long>(inter + (active ? item : 0)) * k_vecs};
  pdl_launch_dependents();
  const bool full = end >= 128;
  uint4 wv[2][4];
  if constexpr ((kMode & kReg) == 0) {
    if (lane < 16 && lane * 128 < end * 16)
#pragma unroll
      for (int r = 0; r < 2; ++r) prefetch_l2(reinterpret_cast<const char*>(wrow[r]) + lane * 128);
  } else {
    if (full)
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int r = 0; r < 2; ++r) wv[r][u] = load_w<kMode>(wrow[r] + lane + 32 * u);
  }
  pdl_wait();
  marks.waited();
  const uint4* x = stage_x<kMode>(xg, k_vecs, s_x);
  float acc[2] = {0.0f, 0.0f};
  int kv = lane;
  if constexpr ((kMode & kReg) != 0) {
    if (full) {
      for (;;) {
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const uint4 xv = x[kv + 32 * u];
#pragma unroll
          for (int r = 0; r < 2; ++r) acc[r] += dot8(wv[r][u], xv);
        }
        kv += 128;
        if (kv + 96 >= end) break;
#pragma unroll
        for (int u = 0; u < 4; ++u)
#pragma unroll
          for (int r = 0; r < 2; ++r) wv[r][u] = load_w<kMode>(wrow[r] + kv + 32 * u);
      }
    }
  } else {
    for (; kv + 96 < end; kv += 128) {
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int r = 0; r < 2; ++r) wv[r][u] = load_w<kMode>(wrow[r] + kv + 32 * u);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const uint4 xv = x[kv + 32 * u];
#pragma unroll
        for (int r = 0; r < 2; ++r) acc[r] += dot8(wv[r][u], xv);
      }
    }
  }
  for (; kv < end; kv += 32)
#pragma unroll
    for (int r = 0; r < 2; ++r) acc[r] += dot8(load_w<kMode>(wrow[r] + kv), x[kv]);
  const float g = warp_sum(acc[0]), u = warp_sum(acc[1]);
  if (lane == 0 && active) out[item] = __float2bfloat16(g / (1.0f + __expf(-g)) * u);
  marks.end();
}

// Residual add + RMSNorm of one row (one block; weights read before the wait).
__global__ void norm_kernel(__nv_bfloat16* residual, const __nv_bfloat16* delta, const __nv_bfloat16* weight,
                            __nv_bfloat16* out, Marks marks) {
  marks.start();
  pdl_launch_dependents();
  float wg[8];
  for (int i = 0; i < 8; ++i) wg[i] = __bfloat162float(weight[threadIdx.x * 8 + i]);
  pdl_wait();
  marks.waited();
  __shared__ float s[32];
  float v[8], ss = 0.0f;
  for (int i = 0; i < 8; ++i) {
    const int c = threadIdx.x * 8 + i;
    v[i] = __bfloat162float(residual[c]) + __bfloat162float(delta[c]);
    ss += v[i] * v[i];
  }
  ss = warp_sum(ss);
  if ((threadIdx.x & 31) == 0) s[threadIdx.x >> 5] = ss;
  __syncthreads();
  float tot = 0.0f;
  for (int i = 0; i < 16; ++i) tot += s[i];
  const float inv = rsqrtf(tot / kHidden + 1e-5f);
  for (int i = 0; i < 8; ++i) {
    const int c = threadIdx.x * 8 + i;
    residual[c] = __float2bfloat16(v[i]);
    out[c] = __float2bfloat16(v[i] * inv * wg[i]);
  }
  marks.end();
}

// RoPE-like elementwise pass over q and k (one block).
__global__ void rope_kernel(__nv_bfloat16* qk, Marks marks) {
  marks.start();
  pdl_launch_dependents();
  pdl_wait();
  marks.waited();
  for (int c = threadIdx.x; c < kQ + kKv; c += blockDim.x) qk[c] = __float2bfloat16(__bfloat162float(qk[c]) * 0.99f);
  marks.end();
}

// Attention stand-in: 8 kv heads x 16 splits, each block streams 256 keys of
// K and V (128 KB) with 16-byte loads and writes a partial.
__global__ void __launch_bounds__(256) attention_kernel(const uint4* kv, const uint4* q, float* partial, Marks marks) {
  marks.start();
  pdl_launch_dependents();
  pdl_wait();
  marks.waited();
  const uint4* base = kv + static_cast<long long>(blockIdx.x) * (128 * 1024 / 16);
  const uint4 qv = q[threadIdx.x & 15];
  float acc = 0.0f;
  for (int i = threadIdx.x; i < 128 * 1024 / 16; i += 4 * 256) {
    uint4 a[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) a[u] = base[i + u * 256];
#pragma unroll
    for (int u = 0; u < 4; ++u) acc += dot8(a[u], qv);
  }
  acc = warp_sum(acc);
  if ((threadIdx.x & 31) == 0) partial[blockIdx.x * 8 + (threadIdx.x >> 5)] = acc;
  marks.end();
}

__global__ void combine_kernel(const float* partial, __nv_bfloat16* o, Marks marks) {
  marks.start();
  pdl_launch_dependents();
  pdl_wait();
  marks.waited();
  __shared__ float s_sum[8];
  float t = 0.0f;
  for (int i = threadIdx.x; i < 128 * 8; i += blockDim.x) t += partial[i];
  t = warp_sum(t);
  if ((threadIdx.x & 31) == 0) s_sum[threadIdx.x >> 5] = t;
  __syncthreads();
  float s = 0.0f;
  for (int i = 0; i < 8; ++i) s += s_sum[i] * 1e-6f;
  for (int c = threadIdx.x; c < kQ; c += blockDim.x) o[c] = __float2bfloat16(__bfloat162float(o[c]) * 0.5f + s);
  marks.end();
}

__global__ void fill_kernel(__nv_bfloat16* p, long long n, unsigned seed, float scale) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed * 2246822519u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = __float2bfloat16((static_cast<float>(h & 0xffff) / 32768.0f - 1.0f) * scale);
  }
}

__nv_bfloat16* alloc_random(long long n, unsigned seed, float scale) {
  __nv_bfloat16* p = nullptr;
  CK(cudaMalloc(&p, n * 2));
  fill_kernel<<<1024, 256>>>(p, n, seed, scale);
  CK(cudaGetLastError());
  return p;
}

template <class... P, class... A>
void launch_smem(void (*k)(P...), int grid, int block, int smem, bool pdl, cudaStream_t s, A... args) {
  if (smem > 48 * 1024) CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cudaLaunchConfig_t c{};
  c.gridDim = grid;
  c.blockDim = block;
  c.dynamicSmemBytes = smem;
  c.stream = s;
  c.attrs = at;
  c.numAttrs = 1;
  CK(cudaLaunchKernelEx(&c, k, static_cast<P>(args)...));
}

template <class... P, class... A>
void launch(void (*k)(P...), int grid, int block, bool pdl, cudaStream_t s, A... args) {
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cudaLaunchConfig_t c{};
  c.gridDim = grid;
  c.blockDim = block;
  c.stream = s;
  c.attrs = at;
  c.numAttrs = 1;
  CK(cudaLaunchKernelEx(&c, k, static_cast<P>(args)...));
}

struct Layer {
  __nv_bfloat16 *qkv, *o, *gate_up, *down, *kv, *norm1, *norm2;
};

struct Variant {
  const char* name;
  int mode[4];    // Mode of q|k|v, o_proj, gate|up, down
  Prefetch pf[4];
  int qkv_parts;  // 2 or 4
  int o_parts;    // o_proj's: 2 or 4
  bool pdl;
  int down_parts = 2;
};

template <int kMode>
void launch_gemv_mode(int parts, const void* x, const void* w, void* out, int n, int k, bool pdl, cudaStream_t s,
                      Prefetch pf, Marks m) {
  const auto* xv = static_cast<const uint4*>(x);
  const auto* wv = static_cast<const uint4*>(w);
  auto* o = static_cast<__nv_bfloat16*>(out);
  const int items = kWarps / parts;
  const int grid = (n + items - 1) / items;
  const int smem = (kMode & kXSmem) ? k * 2 : 0;
  if (parts == 4)
    launch_smem(gemv_kernel<4, kMode>, grid, kWarps * 32, smem, pdl, s, xv, wv, o, n, k / 8, pf, m);
  else if (parts == 2)
    launch_smem(gemv_kernel<2, kMode>, grid, kWarps * 32, smem, pdl, s, xv, wv, o, n, k / 8, pf, m);
  else
    launch_smem(gemv_kernel<1, kMode>, grid, kWarps * 32, smem, pdl, s, xv, wv, o, n, k / 8, pf, m);
}

template <int kMode>
void launch_swiglu_mode(const void* x, const void* w, void* out, bool pdl, cudaStream_t s, Prefetch pf, Marks m) {
  const int grid = (kInter + kWarps - 1) / kWarps;
  const int smem = (kMode & kXSmem) ? kHidden * 2 : 0;
  launch_smem(swiglu_kernel<kMode>, grid, kWarps * 32, smem, pdl, s, static_cast<const uint4*>(x),
              static_cast<const uint4*>(w), static_cast<__nv_bfloat16*>(out), kInter, kHidden / 8, pf, m);
}

#define CHAIN_MODES(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
template <int kDepth, int kMinBlocks>
void launch_deep(int parts, const void* x, const void* w, void* out, int n, int k, bool pdl, cudaStream_t s,
                 Prefetch pf, Marks m) {
  const auto* xv = static_cast<const uint4*>(x);
  const auto* wv = static_cast<const uint4*>(w);
  auto* o = static_cast<__nv_bfloat16*>(out);
  const int grid = (n + kWarps / parts - 1) / (kWarps / parts);
  if (parts == 4) launch(gemv_deep_kernel<4, kDepth, kMinBlocks>, grid, kWarps * 32, pdl, s, xv, wv, o, n, k / 8, pf, m);
  else if (parts == 2) launch(gemv_deep_kernel<2, kDepth, kMinBlocks>, grid, kWarps * 32, pdl, s, xv, wv, o, n, k / 8, pf, m);
  else launch(gemv_deep_kernel<1, kDepth, kMinBlocks>, grid, kWarps * 32, pdl, s, xv, wv, o, n, k / 8, pf, m);
}

void launch_gemv(int mode, int parts, const void* x, const void* w, void* out, int n, int k, bool pdl,
                 cudaStream_t s, Prefetch pf, Marks m) {
  if (mode == 8) return launch_deep<2, 6>(parts, x, w, out, n, k, pdl, s, pf, m);
  if (mode == 16) return launch_deep<2, 5>(parts, x, w, out, n, k, pdl, s, pf, m);
  if (mode == 24) return launch_deep<3, 4>(parts, x, w, out, n, k, pdl, s, pf, m);
  if (mode == 32) return launch_deep<1, 8>(parts, x, w, out, n, k, pdl, s, pf, m);
  switch (mode) {
#define CASE(M)                                                     \
  case M:                                                           \
    launch_gemv_mode<M>(parts, x, w, out, n, k, pdl, s, pf, m);     \
    break;
    CHAIN_MODES(CASE)
#undef CASE
  }
}

void launch_swiglu(int mode, const void* x, const void* w, void* out, bool pdl, cudaStream_t s, Prefetch pf, Marks m) {
  if (mode >= 8) mode = kReg | kNoAlloc;
  switch (mode) {
#define CASE(M)                                            \
  case M:                                                  \
    launch_swiglu_mode<M>(x, w, out, pdl, s, pf, m);       \
    break;
    CHAIN_MODES(CASE)
#undef CASE
  }
}

struct Buffers {
  __nv_bfloat16 *h, *x, *qkv_out, *attn_out, *o_out, *act, *down_out;
  float* partial;
};

void enqueue(const std::vector<Layer>& layers, const Buffers& b, const Variant& v, cudaStream_t s, Timeline* tl) {
  for (int l = 0; l < kLayers; ++l) {
    const Layer& L = layers[l];
    auto m = [&](int k) { return Marks{tl, l * kKernelsPerLayer + k}; };
    launch(norm_kernel, 1, 512, v.pdl, s, b.h, b.down_out, L.norm1, b.x, m(0));
    launch_gemv(v.mode[0], v.qkv_parts, b.x, L.qkv, b.qkv_out, kQ + 2 * kKv, kHidden, v.pdl, s, v.pf[0], m(1));
    launch(rope_kernel, 1, 256, v.pdl, s, b.qkv_out, m(2));
    launch(attention_kernel, kKvHeads * 16, 256, v.pdl, s, reinterpret_cast<const uint4*>(L.kv),
           reinterpret_cast<const uint4*>(b.qkv_out), b.partial, m(3));
    launch(combine_kernel, 1, 256, v.pdl, s, b.partial, b.attn_out, m(4));
    launch_gemv(v.mode[1], v.o_parts, b.attn_out, L.o, b.o_out, kHidden, kQ, v.pdl, s, v.pf[1], m(5));
    launch(norm_kernel, 1, 512, v.pdl, s, b.h, b.o_out, L.norm2, b.x, m(6));
    launch_swiglu(v.mode[2], b.x, L.gate_up, b.act, v.pdl, s, v.pf[2], m(7));
    launch_gemv(v.mode[3], v.down_parts, b.act, L.down, b.down_out, kHidden, kInter, v.pdl, s, v.pf[3], m(8));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool timeline = kTimeline;
  (void)argc;
  (void)argv;
  CK(cudaSetDevice(0));
  std::vector<Layer> layers(kLayers);
  unsigned seed = 1;
  for (Layer& L : layers) {
    L.qkv = alloc_random(static_cast<long long>(kQ + 2 * kKv) * kHidden, ++seed, 0.05f);
    L.o = alloc_random(static_cast<long long>(kHidden) * kQ, ++seed, 0.05f);
    L.gate_up = alloc_random(2LL * kInter * kHidden, ++seed, 0.05f);
    L.down = alloc_random(static_cast<long long>(kHidden) * kInter, ++seed, 0.05f);
    L.kv = alloc_random(2LL * kContext * kKvHeads * kDim, ++seed, 1.0f);
    L.norm1 = alloc_random(kHidden, ++seed, 1.0f);
    L.norm2 = alloc_random(kHidden, ++seed, 1.0f);
  }
  Buffers b{};
  b.h = alloc_random(kHidden, ++seed, 1.0f);
  b.x = alloc_random(kInter, ++seed, 1.0f);
  b.qkv_out = alloc_random(kQ + 2 * kKv, ++seed, 1.0f);
  b.attn_out = alloc_random(kQ, ++seed, 1.0f);
  b.o_out = alloc_random(kHidden, ++seed, 1.0f);
  b.act = alloc_random(kInter, ++seed, 1.0f);
  b.down_out = alloc_random(kHidden, ++seed, 1.0f);
  CK(cudaMalloc(&b.partial, 128 * 8 * sizeof(float)));
  CK(cudaMemset(b.partial, 0, 128 * 8 * sizeof(float)));
  Timeline* tl = nullptr;
  if (timeline) CK(cudaMalloc(&tl, sizeof(Timeline)));
  CK(cudaDeviceSynchronize());

  const double weight_bytes =
      2.0 * kLayers * (static_cast<double>(kQ + 2 * kKv) * kHidden + 1.0 * kHidden * kQ + 2.0 * kInter * kHidden +
                       1.0 * kHidden * kInter);
  const double kv_bytes = 2.0 * kLayers * 2.0 * kContext * kKvHeads * kDim;
  const double per_kernel_bytes[kKernelsPerLayer] = {0,
                                                     2.0 * (kQ + 2 * kKv) * kHidden,
                                                     0,
                                                     2.0 * 2 * kContext * kKvHeads * kDim,
                                                     0,
                                                     2.0 * kHidden * kQ,
                                                     0,
                                                     2.0 * 2 * kInter * kHidden,
                                                     2.0 * kHidden * kInter};
  const char* kernel_names[kKernelsPerLayer] = {"norm", "q|k|v", "rope", "attn", "combine", "o_proj", "norm", "gate|up", "down"};
  constexpr double kHbm = 4.31e12;

  constexpr int L = kL2, R = kReg;
  // Blocks resident at once: 8 a multiprocessor for the GEMV, 4 for SwiGLU.
  constexpr Prefetch no{0, 0, 0};
  constexpr Prefetch share{1 << 20, 0, 0};               // each warp's whole share
  constexpr int N = kNoAlloc;
  constexpr int RN = kReg | kNoAlloc;
  const Variant variants[] = {
      {"project (l2 16 lanes), qkv 4 parts", {L, L, L, L}, {no, no, no, no}, 4, 2, true},
      {"reg + no_alloc (branch), qkv 4", {RN, RN, RN, RN}, {no, no, no, no}, 4, 2, true},
      {"deep kernel depth 1, 8 blocks (branch's, other loop)", {32, 32, RN, 32}, {no, no, no, no}, 4, 2, true},
      {"depth 2, 6 blocks/SM, qkv 4", {8, 8, RN, 8}, {no, no, no, no}, 4, 2, true},
      {"depth 2, 5 blocks/SM, qkv 4", {16, 16, RN, 16}, {no, no, no, no}, 4, 2, true},
      {"depth 3, 4 blocks/SM, qkv 4", {24, 24, RN, 24}, {no, no, no, no}, 4, 2, true},
      {"depth 2 (6) o_proj and down only, qkv 4", {RN, 8, RN, 8}, {no, no, no, no}, 4, 2, true},
      {"depth 2 (6) o_proj only, qkv 4", {RN, 8, RN, RN}, {no, no, no, no}, 4, 2, true},
      {"depth 2 (6), qkv 2", {8, 8, RN, 8}, {no, no, no, no}, 2, 2, true},
      {"reg + no_alloc (branch), qkv 4, again", {RN, RN, RN, RN}, {no, no, no, no}, 4, 2, true},
      {"project (again)", {L, L, L, L}, {no, no, no, no}, 4, 2, true},
  };
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::printf("| variant | step us | %% of HBM (4.31 TB/s) |\n|---|---|---|\n");
  std::string timeline_tables;
  for (const Variant& v : variants) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    enqueue(layers, b, v, s, nullptr);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    std::vector<float> times;
    for (int r = 0; r < 25; ++r) {
      CK(cudaEventRecord(e0, s));
      CK(cudaGraphLaunch(ge, s));
      CK(cudaEventRecord(e1, s));
      CK(cudaEventSynchronize(e1));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (r >= 3) times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    const double t = times[times.size() / 2] * 1e-3;
    std::printf("| %s | %.1f | %.1f%% |\n", v.name, t * 1e6, 100.0 * (weight_bytes + kv_bytes) / t / kHbm);
    std::fflush(stdout);
    if (timeline) {
      cudaGraph_t g2;
      cudaGraphExec_t ge2;
      CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
      enqueue(layers, b, v, s, tl);
      CK(cudaStreamEndCapture(s, &g2));
      CK(cudaGraphInstantiate(&ge2, g2, 0));
      std::vector<Timeline> host(1);
      double sum_start[kKernelsPerLayer] = {}, sum_wait[kKernelsPerLayer] = {}, sum_end[kKernelsPerLayer] = {};
      int samples = 0;
      for (int r = 0; r < 6; ++r) {
        std::vector<unsigned long long> init(kLayers * kKernelsPerLayer, ~0ull);
        CK(cudaMemcpy(tl->start, init.data(), sizeof(tl->start), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(tl->waited, init.data(), sizeof(tl->waited), cudaMemcpyHostToDevice));
        CK(cudaMemset(tl->end, 0, sizeof(tl->end)));
        CK(cudaGraphLaunch(ge2, s));
        CK(cudaStreamSynchronize(s));
        CK(cudaMemcpy(host.data(), tl, sizeof(Timeline), cudaMemcpyDeviceToHost));
        if (r < 2) continue;
        // Relative to the previous layer's down (kernel 8) end, layers 4..27.
        for (int l = 4; l < 28; ++l) {
          const double ref = static_cast<double>(host[0].end[(l - 1) * kKernelsPerLayer + 8]);
          for (int k = 0; k < kKernelsPerLayer; ++k) {
            const int id = l * kKernelsPerLayer + k;
            sum_start[k] += host[0].start[id] - ref;
            sum_wait[k] += host[0].waited[id] - ref;
            sum_end[k] += host[0].end[id] - ref;
          }
          ++samples;
        }
      }
      char line[256];
      timeline_tables += std::string("\ntimeline, ") + v.name +
                         " (ns from the previous down's end; mean of layers 4-27 over 4 replays)\n"
                         "| kernel | first block in | wait released | last block out | adds | at HBM rate |\n|---|---|---|---|---|---|\n";
      double prev_end = 0.0;
      for (int k = 0; k < kKernelsPerLayer; ++k) {
        const double st = sum_start[k] / samples, wa = sum_wait[k] / samples, en = sum_end[k] / samples;
        std::snprintf(line, sizeof line, "| %s | %.0f | %.0f | %.0f | %.0f | %.0f |\n", kernel_names[k], st, wa, en,
                      en - prev_end, per_kernel_bytes[k] / kHbm * 1e9);
        timeline_tables += line;
        prev_end = en;
      }
      // Block spread in layer kBlockLayer of the last replay (ns from the kernel's first release).
      timeline_tables += "| layer 10 | blocks | release p50 / p100 | out p10 / p50 / p90 / p100 |\n|---|---|---|---|\n";
      const int grids[kKernelsPerLayer] = {1, (kQ + 2 * kKv) / (8 / v.qkv_parts), 1, 128, 1, kHidden / (8 / v.o_parts), 1,
                                           kInter / 8, kHidden / (8 / v.down_parts)};
      for (int k : {1, 3, 5, 7, 8}) {
        const int nb = std::min(grids[k], 4096);
        std::vector<double> wt(nb), et(nb);
        double t0 = 1e300;
        for (int i = 0; i < nb; ++i) t0 = std::min(t0, static_cast<double>(host[0].blk_wait[k][i]));
        for (int i = 0; i < nb; ++i) {
          wt[i] = host[0].blk_wait[k][i] - t0;
          et[i] = host[0].blk_end[k][i] - t0;
        }
        std::sort(wt.begin(), wt.end());
        std::sort(et.begin(), et.end());
        auto q = [&](const std::vector<double>& a, double f) { return a[std::min(nb - 1, static_cast<int>(f * nb))]; };
        std::snprintf(line, sizeof line, "| %s | %d | %.0f / %.0f | %.0f / %.0f / %.0f / %.0f |\n", kernel_names[k], nb,
                      q(wt, 0.5), wt[nb - 1], q(et, 0.1), q(et, 0.5), q(et, 0.9), et[nb - 1]);
        timeline_tables += line;
      }
      CK(cudaGraphExecDestroy(ge2));
      CK(cudaGraphDestroy(g2));
    }
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
  }
  std::printf("%s", timeline_tables.c_str());
  CK(cudaDeviceSynchronize());
  return 0;
}
