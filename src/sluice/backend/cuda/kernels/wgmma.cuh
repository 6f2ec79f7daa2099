// Hopper warpgroup-MMA building blocks (wgmma.mma_async, sm_90a) shared by
// the wgmma attention kernels, mla_decode_wgmma.cu and grouped_gemm_fp8.cu: the 128-byte-swizzled
// shared-memory layout they keep their tiles in, its matrix descriptor, the
// fences and waits around asynchronous MMAs, the MMA shapes they issue, and
// named barriers for warpgroups that hand data to each other.
#pragma once

#include <cstdint>

#include "sluice/backend/cuda/kernels/mma.cuh"

namespace sluice::cuda {

// Shared-memory tiles of [rows][cols] bf16 are stored as panels of [rows][64]
// (one 128-byte line a row), panel after panel: wgmma's 128-byte swizzle
// places 16-byte chunk c of line r at chunk c ^ (r % 8), which also makes the
// cp.async stores and wgmma's reads bank-conflict free. Panels start on
// 1024-byte boundaries (rows a multiple of 8 and a 1024-aligned base).
inline constexpr int kWgmmaLineBytes = 128;
inline constexpr int kWgmmaPanelCols = 64;

// Byte offset of 16-byte chunk `chunk` (8 bf16, counted across panels) of row
// `row` in a tile of `rows` rows.
static __device__ __forceinline__ std::uint32_t swizzled_offset(int row, int chunk, int rows) {
  return static_cast<std::uint32_t>((chunk >> 3) * rows * kWgmmaLineBytes + row * kWgmmaLineBytes +
                                    (((chunk & 7) ^ (row & 7)) << 4));
}

// The dynamic shared-memory window rounded up to the 1024-byte boundary the
// swizzled panels need (the window itself only promises 16): its shared
// address and a generic pointer to it. Kernels reserve 1024 bytes of slack.
struct AlignedSmem {
  std::uint32_t addr;
  unsigned char* ptr;
};
static __device__ __forceinline__ AlignedSmem align_smem_1024(unsigned char* window) {
  const std::uint32_t addr = (smem_addr(window) + 1023u) & ~1023u;
  return {addr, window + (addr - smem_addr(window))};
}

// wgmma shared-memory matrix descriptor: start address, leading and stride
// byte offsets (all >> 4), swizzle mode 1 = 128 bytes.
static __device__ __forceinline__ std::uint64_t smem_desc(std::uint32_t addr, std::uint32_t lbo_bytes,
                                                          std::uint32_t sbo_bytes) {
  return static_cast<std::uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<std::uint64_t>(lbo_bytes >> 4) << 16) |
         (static_cast<std::uint64_t>(sbo_bytes >> 4) << 32) | (1ull << 62);
}

// The descriptor of a tile without swizzle ("interleaved"): 8-row core
// matrices of 16 bytes a row, 128 contiguous bytes each; lbo and sbo are the
// byte distances between neighbouring core matrices along K and along M / N.
static __device__ __forceinline__ std::uint64_t smem_desc_interleaved(std::uint32_t addr, std::uint32_t lbo_bytes,
                                                                      std::uint32_t sbo_bytes) {
  return static_cast<std::uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<std::uint64_t>(lbo_bytes >> 4) << 16) |
         (static_cast<std::uint64_t>(sbo_bytes >> 4) << 32);
}

static __device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
static __device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
static __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving accesses of accumulator registers across the
// asynchronous MMAs that write them.
template <int N>
static __device__ __forceinline__ void fence_registers(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
// cp.async writes through the generic proxy; wgmma reads through the async proxy.
static __device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Named barriers (ids 1..15; __syncthreads is 0) for a producer warpgroup
// that hands shared memory to a consumer: the producer arrives without
// waiting, the consumer waits; `threads` counts both sides. The producer's
// earlier shared-memory writes are visible to the consumer after its sync.
static __device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
static __device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// The asm pieces of the wrappers below with 32, 64 or 96 f32 accumulators
// a thread: their register placeholders, and "+f" operands for d[i..i+7],
// d[i..i+15] and d[i..i+31].
#define SLUICE_WGMMA_REGS_0_31                                                                                   \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31"
#define SLUICE_WGMMA_REGS_32_63                                                                               \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, " \
  "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define SLUICE_WGMMA_REGS_64_95                                                                               \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, " \
  "%85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define SLUICE_WGMMA_D8(d, i)                                                                                   \
  "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3]), "+f"(d[(i) + 4]), "+f"(d[(i) + 5]), \
      "+f"(d[(i) + 6]), "+f"(d[(i) + 7])
#define SLUICE_WGMMA_D16(d, i) SLUICE_WGMMA_D8(d, i), SLUICE_WGMMA_D8(d, (i) + 8)
#define SLUICE_WGMMA_D32(d, i) \
  SLUICE_WGMMA_D8(d, i), SLUICE_WGMMA_D8(d, (i) + 8), SLUICE_WGMMA_D8(d, (i) + 16), SLUICE_WGMMA_D8(d, (i) + 24)

// d (+)= A B for one m64n128k16 step, A and B from shared memory (both
// K-major). accumulate = false overwrites d.
static __device__ __forceinline__ void wgmma_m64n128k16_ss(float (&d)[64], std::uint64_t desc_a, std::uint64_t desc_b,
                                                           bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{" SLUICE_WGMMA_REGS_0_31 ", " SLUICE_WGMMA_REGS_32_63 "}, "
      "%64, %65, p, 1, 1, 0, 0;\n}\n"
      : SLUICE_WGMMA_D32(d, 0), SLUICE_WGMMA_D32(d, 32)
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

// d (+)= A B^T for one m64n128k32 step, e4m3 operands from shared memory
// (both K-major, the only layout wgmma takes for 8-bit types).
static __device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[64], std::uint64_t desc_a, std::uint64_t desc_b,
                                                      bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
      "{" SLUICE_WGMMA_REGS_0_31 ", " SLUICE_WGMMA_REGS_32_63 "}, "
      "%64, %65, p, 1, 1;\n}\n"
      : SLUICE_WGMMA_D32(d, 0), SLUICE_WGMMA_D32(d, 32)
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

// d (+)= A B^T for one m64n192k32 step, e4m3 operands from shared memory (both
// K-major): the grouped FP8 GEMM's wide tiles (grouped_gemm_fp8_ws.cu).
static __device__ __forceinline__ void wgmma_m64n192k32_e4m3(float (&d)[96], std::uint64_t desc_a, std::uint64_t desc_b,
                                                      bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k32.f32.e4m3.e4m3 "
      "{" SLUICE_WGMMA_REGS_0_31 ", " SLUICE_WGMMA_REGS_32_63 ", " SLUICE_WGMMA_REGS_64_95 "}, "
      "%96, %97, p, 1, 1;\n}\n"
      : SLUICE_WGMMA_D32(d, 0), SLUICE_WGMMA_D32(d, 32), SLUICE_WGMMA_D32(d, 64)
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

// d (+)= A B^T for one m64n64k32 step, e4m3 operands from shared memory (both K-major).
static __device__ __forceinline__ void wgmma_m64n64k32_e4m3(float (&d)[32], std::uint64_t desc_a, std::uint64_t desc_b,
                                                     bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
      "{" SLUICE_WGMMA_REGS_0_31 "}, "
      "%32, %33, p, 1, 1;\n}\n"
      : SLUICE_WGMMA_D32(d, 0)
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

// The other e4m3 widths of the swapped grouped GEMM (grouped_gemm_fp8_swap.cu),
// whose columns are an expert's tokens: m64nNk32 for N = 16 to 176 by 16
// (64, 128 and 192 are above), d holding R = N / 2 f32 a thread. REGS lists
// the placeholders %0..%(R-1) (SLUICE_WGMMA_R_<R>), DESC_A, DESC_B and PRED
// are %R, %(R+1) and %(R+2), then d's "+f" operands (SLUICE_WGMMA_OPS_<R>).
#define SLUICE_WGMMA_R_8 "%0, %1, %2, %3, %4, %5, %6, %7"
#define SLUICE_WGMMA_OPS_8(d) SLUICE_WGMMA_D8(d, 0)
#define SLUICE_WGMMA_R_16 SLUICE_WGMMA_R_8 ", %8, %9, %10, %11, %12, %13, %14, %15"
#define SLUICE_WGMMA_OPS_16(d) SLUICE_WGMMA_OPS_8(d), SLUICE_WGMMA_D8(d, 8)
#define SLUICE_WGMMA_R_24 SLUICE_WGMMA_R_16 ", %16, %17, %18, %19, %20, %21, %22, %23"
#define SLUICE_WGMMA_OPS_24(d) SLUICE_WGMMA_OPS_16(d), SLUICE_WGMMA_D8(d, 16)
#define SLUICE_WGMMA_R_32 SLUICE_WGMMA_R_24 ", %24, %25, %26, %27, %28, %29, %30, %31"
#define SLUICE_WGMMA_OPS_32(d) SLUICE_WGMMA_OPS_24(d), SLUICE_WGMMA_D8(d, 24)
#define SLUICE_WGMMA_R_40 SLUICE_WGMMA_R_32 ", %32, %33, %34, %35, %36, %37, %38, %39"
#define SLUICE_WGMMA_OPS_40(d) SLUICE_WGMMA_OPS_32(d), SLUICE_WGMMA_D8(d, 32)
#define SLUICE_WGMMA_R_48 SLUICE_WGMMA_R_40 ", %40, %41, %42, %43, %44, %45, %46, %47"
#define SLUICE_WGMMA_OPS_48(d) SLUICE_WGMMA_OPS_40(d), SLUICE_WGMMA_D8(d, 40)
#define SLUICE_WGMMA_R_56 SLUICE_WGMMA_R_48 ", %48, %49, %50, %51, %52, %53, %54, %55"
#define SLUICE_WGMMA_OPS_56(d) SLUICE_WGMMA_OPS_48(d), SLUICE_WGMMA_D8(d, 48)
#define SLUICE_WGMMA_R_64 SLUICE_WGMMA_R_56 ", %56, %57, %58, %59, %60, %61, %62, %63"
#define SLUICE_WGMMA_OPS_64(d) SLUICE_WGMMA_OPS_56(d), SLUICE_WGMMA_D8(d, 56)
#define SLUICE_WGMMA_R_72 SLUICE_WGMMA_R_64 ", %64, %65, %66, %67, %68, %69, %70, %71"
#define SLUICE_WGMMA_OPS_72(d) SLUICE_WGMMA_OPS_64(d), SLUICE_WGMMA_D8(d, 64)
#define SLUICE_WGMMA_R_80 SLUICE_WGMMA_R_72 ", %72, %73, %74, %75, %76, %77, %78, %79"
#define SLUICE_WGMMA_OPS_80(d) SLUICE_WGMMA_OPS_72(d), SLUICE_WGMMA_D8(d, 72)
#define SLUICE_WGMMA_R_88 SLUICE_WGMMA_R_80 ", %80, %81, %82, %83, %84, %85, %86, %87"
#define SLUICE_WGMMA_OPS_88(d) SLUICE_WGMMA_OPS_80(d), SLUICE_WGMMA_D8(d, 80)
#define SLUICE_WGMMA_E4M3_SS(N, R, REGS, DESC_A, DESC_B, PRED, ...)                                        \
  static __device__ __forceinline__ void wgmma_m64n##N##k32_e4m3(float (&d)[R], std::uint64_t desc_a,         \
                                                                 std::uint64_t desc_b, bool accumulate) {     \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " PRED ", 0;\n"                                           \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3.e4m3 {" REGS "}, " DESC_A ", " DESC_B     \
                 ", p, 1, 1;\n}\n"                                                                           \
                 : __VA_ARGS__                                                                              \
                 : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)));                            \
  }
SLUICE_WGMMA_E4M3_SS(16, 8, SLUICE_WGMMA_R_8, "%8", "%9", "%10", SLUICE_WGMMA_OPS_8(d))
SLUICE_WGMMA_E4M3_SS(32, 16, SLUICE_WGMMA_R_16, "%16", "%17", "%18", SLUICE_WGMMA_OPS_16(d))
SLUICE_WGMMA_E4M3_SS(48, 24, SLUICE_WGMMA_R_24, "%24", "%25", "%26", SLUICE_WGMMA_OPS_24(d))
SLUICE_WGMMA_E4M3_SS(80, 40, SLUICE_WGMMA_R_40, "%40", "%41", "%42", SLUICE_WGMMA_OPS_40(d))
SLUICE_WGMMA_E4M3_SS(96, 48, SLUICE_WGMMA_R_48, "%48", "%49", "%50", SLUICE_WGMMA_OPS_48(d))
SLUICE_WGMMA_E4M3_SS(112, 56, SLUICE_WGMMA_R_56, "%56", "%57", "%58", SLUICE_WGMMA_OPS_56(d))
SLUICE_WGMMA_E4M3_SS(144, 72, SLUICE_WGMMA_R_72, "%72", "%73", "%74", SLUICE_WGMMA_OPS_72(d))
SLUICE_WGMMA_E4M3_SS(160, 80, SLUICE_WGMMA_R_80, "%80", "%81", "%82", SLUICE_WGMMA_OPS_80(d))
SLUICE_WGMMA_E4M3_SS(176, 88, SLUICE_WGMMA_R_88, "%88", "%89", "%90", SLUICE_WGMMA_OPS_88(d))

// The m64nNk32 e4m3 step of one of the widths above (N a multiple of 16, at most 192).
template <int N>
struct WgmmaE4m3Step;
#define SLUICE_WGMMA_E4M3_STEP(N)                                                                                \
  template <>                                                                                                 \
  struct WgmmaE4m3Step<N> {                                                                                   \
    static __device__ __forceinline__ void run(float (&d)[N / 2], std::uint64_t a, std::uint64_t b, bool acc) { \
      wgmma_m64n##N##k32_e4m3(d, a, b, acc);                                                                   \
    }                                                                                                         \
  };
SLUICE_WGMMA_E4M3_STEP(16)
SLUICE_WGMMA_E4M3_STEP(32)
SLUICE_WGMMA_E4M3_STEP(48)
SLUICE_WGMMA_E4M3_STEP(64)
SLUICE_WGMMA_E4M3_STEP(80)
SLUICE_WGMMA_E4M3_STEP(96)
SLUICE_WGMMA_E4M3_STEP(112)
SLUICE_WGMMA_E4M3_STEP(128)
SLUICE_WGMMA_E4M3_STEP(144)
SLUICE_WGMMA_E4M3_STEP(160)
SLUICE_WGMMA_E4M3_STEP(176)
SLUICE_WGMMA_E4M3_STEP(192)
template <int N>
static __device__ __forceinline__ void wgmma_m64nNk32_e4m3(float (&d)[N / 2], std::uint64_t desc_a,
                                                          std::uint64_t desc_b, bool accumulate) {
  WgmmaE4m3Step<N>::run(d, desc_a, desc_b, accumulate);
}

// A 128-byte K block (one e4m3 scale block) of m64nNk32 steps into d, which
// it overwrites: A and B K-major with the 128-byte swizzle, their descriptors
// at the block's first byte; fenced and committed as one group.
template <int N>
static __device__ __forceinline__ void wgmma_e4m3_k128(float (&d)[N / 2], std::uint64_t desc_a,
                                                       std::uint64_t desc_b) {
  constexpr std::uint64_t kStep = 32 >> 4;  // 32 bytes of K, in the descriptor's address units
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) wgmma_m64nNk32_e4m3<N>(d, desc_a + ks * kStep, desc_b + ks * kStep, ks > 0);
  wgmma_commit();
}

// d (+)= A B^T for one m64n64k32 step, e4m3: A from registers (the mma.sync
// m16n8k32 8-bit A-fragment layout, one 16-row slice per warp, as ldmatrix
// x4 loads it), B from shared memory (K-major).
static __device__ __forceinline__ void wgmma_m64n64k32_e4m3_rs(float (&d)[32], const std::uint32_t (&a)[4],
                                                        std::uint64_t desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
      "{" SLUICE_WGMMA_REGS_0_31 "}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
      : SLUICE_WGMMA_D32(d, 0)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

// d (+)= A B^T for one m64n8k8 step in tf32: A from registers as f32 bits
// (the MMA reads their top 19 bits: truncation to tf32), in cute's
// ALayout_64x8 (a warp's 16 rows: a0 (row g, k t), a1 (g + 8, t), a2 (g, t + 4),
// a3 (g + 8, t + 4), g = lane / 4, t = lane % 4); B from shared memory,
// K-major. d0..d3: (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1).
static __device__ __forceinline__ void wgmma_m64n8k8_tf32_rs(float (&d)[4], float a0, float a1, float a2, float a3,
                                                             std::uint64_t desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(__float_as_uint(a0)), "r"(__float_as_uint(a1)), "r"(__float_as_uint(a2)), "r"(__float_as_uint(a3)),
        "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

// d (+)= A B for one m64n64k16 step, A and B from shared memory (both
// K-major). accumulate = false overwrites d.
static __device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], std::uint64_t desc_a, std::uint64_t desc_b,
                                                          bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{" SLUICE_WGMMA_REGS_0_31 "}, "
      "%32, %33, p, 1, 1, 0, 0;\n}\n"
      : SLUICE_WGMMA_D32(d, 0)
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

// d (+)= A B for one m64n16k16 step, A and B from shared memory. B is
// K-major; A is K-major, or MN-major (kTransA: the descriptor's matrix read
// transposed, which wgmma allows for 16-bit types from shared memory only).
// The keys-as-M MLA decode's two products: S^T = K Q^T (A the latent tile,
// K-major) and O^T += V^T P^T (A = V^T, the same tile read MN-major).
template <bool kTransA>
static __device__ __forceinline__ void wgmma_m64n16k16_ss(float (&d)[8], std::uint64_t desc_a, std::uint64_t desc_b,
                                                          bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, %11, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)), "n"(kTransA ? 1 : 0));
}

// d += A B for one m64n64k16 step, A from registers (the mma.sync m16n8k16
// A-fragment layout, one 16-row slice per warp), B from shared memory,
// MN-major (transposed). The scale-d predicate (accumulate) is always set.
static __device__ __forceinline__ void wgmma_m64n64k16_rs_tb(float (&d)[32], const std::uint32_t (&a)[4],
                                                             std::uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{" SLUICE_WGMMA_REGS_0_31 "}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : SLUICE_WGMMA_D32(d, 0)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

}  // namespace sluice::cuda
