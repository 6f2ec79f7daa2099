// Hopper's tensor memory accelerator (TMA) and thread-block clusters, device
// side (sm_90a): 2D tile copies from a tensor map into shared memory that
// complete on an mbarrier's transaction count, optionally multicast to every
// block of the cluster named in a mask (the same shared offset in each), and
// the cluster's barrier and remote mbarrier arrivals that such a ring needs.
// The tensor maps are encoded on the host (encode_tensor_map) and reach the
// kernel as __grid_constant__ parameters. Users: grouped_gemm_fp8_ws.cu,
// the MLA decode kernels, attention_split.cu (3D boxes of the paged K/V cache).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>

namespace sluice::cuda {

// Host: the driver's cuTensorMapEncodeTiled, looked up once (the runtime
// does not export it). Defined in tensor_map_encode.cu.
PFN_cuTensorMapEncodeTiled_v12000 encode_tensor_map();
// Host: e4m3 rows as [rows, cols] bytes (cols a multiple of 16), boxes of
// 128 bytes x box_rows swizzled in 128-byte lines as the wgmma descriptors
// read them (the grouped FP8 GEMMs' A, x and weight tiles).
inline constexpr unsigned kE4m3RowBoxBytes = 128;
CUtensorMap e4m3_rows_tensor_map(const void* base, std::int64_t rows, std::int64_t cols, int box_rows,
                                 CUtensorMapL2promotion promotion);
// The same rows as four maps whose boxes hold 128, 64, 32 and 16 rows
// (box[i]: 128 >> i), so a tile copies only its rows rounded up to 16
// (tma_load_rows_by_16).
struct E4m3RowBoxes {
  static constexpr int kBoxes = 4;
  static constexpr int kMaxRows = 128;
  static constexpr int kMinRows = kMaxRows >> (kBoxes - 1);  // 16: the rows a copy goes by
  CUtensorMap box[kBoxes];
};
E4m3RowBoxes e4m3_row_boxes(const void* base, std::int64_t rows, std::int64_t cols, CUtensorMapL2promotion promotion);

__device__ __forceinline__ std::uint32_t cluster_ctarank() {
  std::uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}

// Every thread of every block of the cluster; release/acquire orders the
// shared-memory writes (barrier inits included) before it with the reads after.
// The barrier is .aligned: the warp reconverges first.
__device__ __forceinline__ void cluster_sync() {
  __syncwarp();
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// After mbarrier_init of barriers that other blocks of the cluster (or the
// TMA unit) will signal; before cluster_sync().
__device__ __forceinline__ void fence_mbarrier_init_cluster() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// Adds `bytes` to the transactions the barrier's current phase waits for
// (without arriving): the bytes the TMA copies of this phase will bring.
__device__ __forceinline__ void mbarrier_expect_tx(std::uint32_t bar, std::uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// Arrives on the barrier at shared offset `bar` of block `rank` of this
// cluster (this block's own included). Release at CTA scope, as CUTLASS's
// ClusterBarrier: it only has to order this block's completed reads of its
// own shared memory (wgmma's) before the TMA writes the arrival permits; a
// cluster-scope release costs a memory barrier each (session 12, run 1:
// 'memory barrier' 43% of the stalls, slower the larger the cluster).
__device__ __forceinline__ void mbarrier_arrive_cluster(std::uint32_t bar, std::uint32_t rank) {
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar),
      "r"(rank)
      : "memory");
}

// `bytes` (a multiple of 16; both addresses 16-byte aligned) from global
// memory into shared memory at `dst` as one bulk copy, completing them on
// `bar` (whose phase must expect them: mbarrier_arrive_expect_tx).
__device__ __forceinline__ void bulk_load(std::uint32_t dst, const void* src, std::uint32_t bytes, std::uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(reinterpret_cast<std::uint64_t>(src)), "r"(bytes), "r"(bar)
               : "memory");
}
// One arrival on `bar` that also adds `bytes` to the transactions its phase waits for.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(std::uint32_t bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// The box at (x, y) (x the inner coordinate, in elements) of a 2D tensor map
// into shared memory at `dst`, completing `bytes of the box` on `bar`.
__device__ __forceinline__ void tma_load_2d(std::uint32_t dst, const CUtensorMap* map, int x, int y,
                                            std::uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::
          "r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(x), "r"(y), "r"(bar)
      : "memory");
}

// The box at (x, y, z) of a 3D tensor map (x the inner coordinate, in
// elements) into shared memory at `dst`, completing its bytes on `bar`.
__device__ __forceinline__ void tma_load_3d(std::uint32_t dst, const CUtensorMap* map, int x, int y, int z,
                                            std::uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::
          "r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(x), "r"(y), "r"(z), "r"(bar)
      : "memory");
}

// Rows [first_row, first_row + rows) at column x into shared memory at dst
// (rows a multiple of 16): boxes of 128 while 128 rows are left, then one each
// of 64, 32 and 16 as the rest's bits say. Every box starts on a multiple of
// 16 rows (2 KB), so the 128-byte swizzle runs as in a whole tile. Completes
// its bytes (rows x 128) on bar.
__device__ __forceinline__ void tma_load_rows_by_16(std::uint32_t dst, const E4m3RowBoxes& boxes, int x,
                                                    int first_row, int rows, std::uint32_t bar) {
  constexpr int kLine = static_cast<int>(kE4m3RowBoxBytes);
  for (; rows >= E4m3RowBoxes::kMaxRows; rows -= E4m3RowBoxes::kMaxRows) {
    tma_load_2d(dst, &boxes.box[0], x, first_row, bar);
    dst += E4m3RowBoxes::kMaxRows * kLine;
    first_row += E4m3RowBoxes::kMaxRows;
  }
#pragma unroll
  for (int i = 1; i < E4m3RowBoxes::kBoxes; ++i) {
    const int box_rows = E4m3RowBoxes::kMaxRows >> i;
    if (rows & box_rows) {
      tma_load_2d(dst, &boxes.box[i], x, first_row, bar);
      dst += box_rows * kLine;
      first_row += box_rows;
    }
  }
}

// Brings a __grid_constant__ tensor map's descriptor into the cache ahead of
// the first copy that uses it.
__device__ __forceinline__ void prefetch_tensor_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<std::uint64_t>(map)) : "memory");
}

// The same box into every block of the cluster in `cta_mask`, at the same
// shared offsets `dst` and `bar` in each.
__device__ __forceinline__ void tma_load_2d_multicast(std::uint32_t dst, const CUtensorMap* map, int x, int y,
                                                      std::uint32_t bar, std::uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
      "[%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(x), "r"(y), "r"(bar), "h"(cta_mask)
      : "memory");
}

}  // namespace sluice::cuda
