// The lightning indexer's FP8 scores on warpgroup MMA (launch_v4_indexer_scores_wgmma,
// deepseek_v4_kernels.h), for prefill: many query rows of one sequence score
// the same keys, so a block holds a tile of 256 keys in shared memory and runs
// every query row of its row group over it.
//
// The keys are wgmma's A (M: 64 keys a tile, two tiles a warpgroup, two
// warpgroups), a row's index heads its B (N: 64 heads), the 128 index dims
// its K (four k32 steps); both e4m3, K-major, in the 128-byte swizzle (a
// record's 128 codes are one line). So the accumulator holds, for each of a
// thread's keys, 16 of the row's heads: relu and the head weights are summed
// in registers, then over the 4 lanes that share the key (two shuffles). The
// rows' queries come in groups of 4 through a two-group ring, the next
// group's copies in flight while this one multiplies, and each warpgroup
// keeps two rows in flight (two accumulator sets): row j + 1's MMAs run
// while row j's epilogue does (session 22; one row at a time, the tensor
// cores idled through every epilogue and the block barrier a row).
//
// Precision: the products of two e4m3 codes are exact, but Hopper's FP8 MMA
// sums them with a narrower accumulator than f32 (DeepSeek-V3's report puts
// it near 14 bits), so scores differ from the f32 kernels by up to about
// 2^-13 of the sum of the absolute products; the test bounds it that way.
// DeepSeek's own indexer kernels score on FP8 tensor cores too.
#include <cuda_runtime.h>

#include <cstdint>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/deepseek_v4_kernels.h"
#include "sluice/backend/cuda/kernels/wgmma.cuh"

namespace sluice::cuda {
namespace {

constexpr int kDim = kV4IndexHeadDim;  // 128 codes: one swizzled line a record
constexpr int kHeads = kV4MaxIndexHeads;
constexpr int kWarpgroups = 2;
constexpr int kThreads = kWarpgroups * 128;
constexpr int kTileKeys = 64;                                    // wgmma's M
constexpr int kKeysPerWarpgroup = 2 * kTileKeys;                 // two M tiles
constexpr int kBlockKeys = kWarpgroups * kKeysPerWarpgroup;      // 256
constexpr int kKeyTileBytes = kBlockKeys * kDim;                 // 32 KB
constexpr int kQStageBytes = kHeads * kDim;                      // 8 KB: a row's queries
constexpr int kGroupRows = 4;                                    // rows a group: MMAs back to back
constexpr int kQStages = 2 * kGroupRows;                         // the group multiplied and the next loading
constexpr int kRowsPerBlock = 64;                                // query rows a block runs over its keys
constexpr int kSmemBytes =
    1024 + kKeyTileBytes + kQStages * kQStageBytes + 2 * kQStages * kHeads * 4 + 2 * kRowsPerBlock * 4;
static_assert(kDim == 128 && kHeads == 64, "one 128-byte line a record, N = 64 heads");

// Copies `lines` 128-byte records from src (line i at src + i * 128; lines from
// `valid` on are zeros) into a swizzled tile: thread t moves chunk t % 8 of
// lines t / 8 + 32 i.
__device__ __forceinline__ void copy_lines(unsigned char* tile, const std::uint8_t* src, int lines, int valid) {
  const int chunk = threadIdx.x & 7, line0 = threadIdx.x >> 3;
  const std::uint32_t swizzled = static_cast<std::uint32_t>((chunk ^ (line0 & 7)) << 4);
  for (int line = line0; line < lines; line += kThreads / 8) {
    const bool ok = line < valid;
    cp_async_16(tile + line * kDim + swizzled, ok ? src + static_cast<std::int64_t>(line) * kDim + chunk * 16 : src,
                ok);
  }
}

__global__ void __launch_bounds__(kThreads) v4_indexer_scores_wgmma_kernel(V4IndexerArgs args) {
  extern __shared__ unsigned char smem_window[];
  const AlignedSmem smem = align_smem_1024(smem_window);
  unsigned char* key_tile = smem.ptr;
  // The query ring: two halves of kGroupRows slots, a group's rows in one.
  auto q_slot = [&](int slot) { return key_tile + kKeyTileBytes + slot * kQStageBytes; };
  // Per slot: its row's q_scale and head weights (heads past num_heads: 0).
  float* q_scales = reinterpret_cast<float*>(key_tile + kKeyTileBytes + kQStages * kQStageBytes);  // [slot][kHeads]
  float* head_weights = q_scales + kQStages * kHeads;                                               // [slot][kHeads]
  // The block's rows' sequences and visible counts, read once (a scan of them
  // in global memory waits out a load's latency a row).
  int* s_begin = reinterpret_cast<int*>(head_weights + kQStages * kHeads);  // [kRowsPerBlock]
  int* s_visible = s_begin + kRowsPerBlock;                                 // [kRowsPerBlock]

  const int t0 = blockIdx.x * kBlockKeys;
  const int row0 = blockIdx.y * kRowsPerBlock;
  const int row_end = min(row0 + kRowsPerBlock, args.rows);
  const int heads = args.num_heads;
  const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int g = lane >> 2, tig = lane & 3;

  if (threadIdx.x < kRowsPerBlock) {
    const int row = row0 + threadIdx.x;
    s_begin[threadIdx.x] = row < row_end ? args.key_begin[row] : -1;
    s_visible[threadIdx.x] = row < row_end ? args.num_visible[row] : 0;
  }
  __syncthreads();
  // The queries of rows [first, min(first + kGroupRows, end)) into a ring
  // half and their q_scale and head weights, all by cp.async (one commit
  // group; a warp that waited on a plain load here would hold its
  // warpgroup's MMAs), read after a barrier.
  auto load_group = [&](int first, int end, int half) {
    for (int j = 0; j < kGroupRows && first + j < end; ++j) {
      const int row = first + j, slot = half * kGroupRows + j;
      copy_lines(q_slot(slot), args.q + static_cast<std::int64_t>(row) * heads * kDim, kHeads, heads);
      if (threadIdx.x < kHeads) {
        const bool valid = static_cast<int>(threadIdx.x) < heads;
        const std::int64_t at = valid ? static_cast<std::int64_t>(row) * heads + threadIdx.x : 0;
        cp_async_4(q_scales + slot * kHeads + threadIdx.x, args.q_scale + at, valid);
        cp_async_4(head_weights + slot * kHeads + threadIdx.x, args.weights + at, valid);
      }
    }
    cp_async_commit();
  };
  // The warpgroup's keys as A fragments in registers, loaded once a run: from
  // shared memory every MMA would read its keys again, and A and B together
  // need all of shared memory's bandwidth at the FP8 MMA's rate (4 KB a
  // m64n64k32 step). ldmatrix x4's matrices are a fragment's rows g and
  // g + 8 of k [0, 16) and [16, 32).
  std::uint32_t key_frag[2][kDim / 32][4];
  auto load_key_fragments = [&]() {
    const int m = lane >> 3;  // this lane's address goes to matrix m
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int ks = 0; ks < kDim / 32; ++ks) {
        const int line = wg * kKeysPerWarpgroup + mt * kTileKeys + warp * 16 + (m & 1) * 8 + (lane & 7);
        const int chunk = ks * 2 + (m >> 1);
        ldmatrix_x4(key_frag[mt][ks], key_tile + line * kDim + ((chunk ^ (line & 7)) << 4));
      }
  };
  auto issue_mma = [&](int slot, float (&acc)[2][32]) {
    const std::uint32_t b_base = smem_addr(q_slot(slot));
    wgmma_fence();
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int ks = 0; ks < kDim / 32; ++ks)
        wgmma_m64n64k32_e4m3_rs(acc[mt], key_frag[mt][ks], smem_desc(b_base + ks * 32, 16, 1024), ks > 0);
    wgmma_commit();
  };
  float key_scale[2][2] = {};
  // acc[mt][4 j + e] is key g, head 8 j + 2 tig + e; acc[mt][4 j + 2 + e] key g + 8:
  // relu and the head factors summed in registers, then over the 4 lanes of a key.
  auto epilogue = [&](int row, int slot, const float (&acc)[2][32]) {
    float score[2][2] = {};
    const float* qs = q_scales + slot * kHeads + 2 * tig;
    const float* w = head_weights + slot * kHeads + 2 * tig;
#pragma unroll
    for (int j = 0; j < kHeads / 8; ++j) {
      const float2 qj = *reinterpret_cast<const float2*>(qs + 8 * j), wj = *reinterpret_cast<const float2*>(w + 8 * j);
      const float2 fj = make_float2(qj.x * wj.x, qj.y * wj.y);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        score[mt][0] = fmaf(fmaxf(acc[mt][4 * j], 0.0f), fj.x, score[mt][0]);
        score[mt][0] = fmaf(fmaxf(acc[mt][4 * j + 1], 0.0f), fj.y, score[mt][0]);
        score[mt][1] = fmaf(fmaxf(acc[mt][4 * j + 2], 0.0f), fj.x, score[mt][1]);
        score[mt][1] = fmaf(fmaxf(acc[mt][4 * j + 3], 0.0f), fj.y, score[mt][1]);
      }
    }
    const float dim_scale = rsqrtf(static_cast<float>(kDim));
    const int visible = s_visible[row - row0];
    float* out = args.scores + static_cast<std::int64_t>(row) * args.max_visible;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float v = score[mt][half];
        v += __shfl_xor_sync(0xffffffffu, v, 1);
        v += __shfl_xor_sync(0xffffffffu, v, 2);
        const int t = t0 + wg * kKeysPerWarpgroup + mt * kTileKeys + warp * 16 + g + 8 * half;
        if (tig == half && t < visible) out[t] = v * dim_scale * key_scale[mt][half];
      }
  };

  float acc[2][2][32];  // two rows in flight a warpgroup
  // Runs of consecutive rows of one sequence (key_begin): the keys loaded once a run.
  for (int run = row0; run < row_end;) {
    const int begin = s_begin[run - row0];
    int run_end = run + 1, count = s_visible[run - row0];
    while (run_end < row_end && s_begin[run_end - row0] == begin) count = max(count, s_visible[run_end++ - row0]);
    if (count > t0) {
      __syncthreads();  // every warp is done with the last run's keys and queries
      copy_lines(key_tile, args.keys + (static_cast<std::int64_t>(begin) + t0) * kDim, kBlockKeys, count - t0);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int t = t0 + wg * kKeysPerWarpgroup + mt * kTileKeys + warp * 16 + g + 8 * half;
          key_scale[mt][half] = t < count ? args.key_scale[begin + t] : 0.0f;
        }
      load_group(run, run_end, 0);  // with the keys' copies, one commit group
      for (int first = run, half = 0; first < run_end; first += kGroupRows, half ^= 1) {
        // This group's queries have landed, and every warp is done with the
        // last group's MMAs and epilogues: the other half takes the next group.
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads();
        if (first == run) load_key_fragments();
        load_group(first + kGroupRows, run_end, half ^ 1);
        // Row j + 1's MMAs run while row j's epilogue does. Every row of the
        // group is multiplied (a slot past the run's end holds a stale query:
        // its scores are dropped), so each wait is unconditional and ptxas
        // sees no accumulator read while its MMAs are in flight (else it
        // serializes them all); no MMA is in flight past the group.
        issue_mma(half * kGroupRows, acc[0]);
#pragma unroll
        for (int j = 0; j < kGroupRows; ++j) {
          if (j + 1 < kGroupRows) {
            issue_mma(half * kGroupRows + j + 1, acc[(j + 1) % 2]);
            wgmma_wait<1>();
          } else {
            wgmma_wait<0>();
          }
          fence_registers(acc[j % 2][0]);
          fence_registers(acc[j % 2][1]);
          const int row = first + j;
          if (row < run_end && s_visible[row - row0] > t0) epilogue(row, half * kGroupRows + j, acc[j % 2]);
        }
      }
    }
    run = run_end;
  }
}

}  // namespace

void launch_v4_indexer_scores_wgmma(const V4IndexerArgs& args, cudaStream_t stream) {
  SLUICE_CHECK(args.num_heads > 0 && args.num_heads <= kHeads);
  SLUICE_CHECK(args.max_visible >= 0);
  SLUICE_CHECK(args.q != nullptr && args.q_scale != nullptr && args.weights != nullptr && args.keys != nullptr &&
               args.key_scale != nullptr && args.key_begin != nullptr && args.num_visible != nullptr &&
               args.scores != nullptr);
  SLUICE_CHECK(reinterpret_cast<std::uintptr_t>(args.keys) % 16 == 0 &&
               reinterpret_cast<std::uintptr_t>(args.q) % 16 == 0);
  if (args.rows == 0 || args.max_visible == 0) return;
  static const bool smem_raised = [] {
    SLUICE_CUDA_CHECK(cudaFuncSetAttribute(v4_indexer_scores_wgmma_kernel,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    return true;
  }();
  (void)smem_raised;
  const int key_blocks = (args.max_visible + kBlockKeys - 1) / kBlockKeys;
  const int row_blocks = (args.rows + kRowsPerBlock - 1) / kRowsPerBlock;
  SLUICE_CHECK(row_blocks <= 65535);
  const dim3 grid(static_cast<unsigned>(key_blocks), static_cast<unsigned>(row_blocks));
  v4_indexer_scores_wgmma_kernel<<<grid, kThreads, kSmemBytes, stream>>>(args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
