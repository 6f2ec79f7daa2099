// Grouped GEMM on FP8 tensor cores (wgmma e4m3 x e4m3, sm_90a) for the routed
// experts with 128x128 block-scaled weights: out[s] = epilogue(A[s] . W_g^T)
// for every slot s of group g, A the activations quantized per 1x128 block.
//
// Why this shape: the bf16 grouped kernel (grouped_gemm.cu) dequantizes the
// weight in registers and runs mma.sync at bf16 rate; here both operands stay
// e4m3 in shared memory and go straight into wgmma m64n128k32, the FP8 rate.
// The DeepSeek-V3 recipe's scales cannot ride inside the MMA (per row of A
// and per 128x128 block of W, both varying along K), so each 128-wide K block
// accumulates alone in f32 and is then promoted into the running sum times
// scale_a[row] * scale_w[block]: f32 accumulation of every product, which
// e4m3 MMAs over a whole K would not give (the published DeepGEMM method).
//
// A block: one tile of the MoE plan (so a tile never straddles two experts
// and an expert's last tile is partial): 128 slots on two warpgroups of 64
// rows sharing each weight tile (prefill), or 64 slots on one warpgroup with
// two blocks an SM (decode, where a block is a weight stream and a second one
// hides the first one's ramp-up) x 128 weight rows (output columns; under
// swiglu the same 64 columns of gate and of up), K in 128-wide blocks through
// a cp.async ring (Config); each stage carries its K block's scales too (the
// tile rows' A scales and the weight block's), so no thread waits on a
// scattered global load between the MMAs. A warpgroup whose 64 rows hold no slot skips its
// MMAs (an expert's spill tile of a few rows costs one warpgroup).
// A rows are gathered through row_of_slot by the copies themselves, so the
// activations are quantized once per token, not once per (token, expert).
//
// Grid: x = column blocks (fastest), y = tiles of the plan's upper bound
// (tiles past the routing's last exit at once): the blocks running together
// are the column blocks of a few neighbouring tiles, i.e. the same experts,
// so an expert's weights come from HBM once and from L2 for its other tiles.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/grouped_gemm_fp8_epilogue.cuh"
#include "sluice/backend/cuda/kernels/grouped_gemm_fp8_kernel.h"
#include "sluice/backend/cuda/kernels/launch.cuh"
#include "sluice/backend/cuda/kernels/moe_kernels.h"
#include "sluice/backend/cuda/kernels/wgmma.cuh"

namespace sluice::cuda {
namespace {

constexpr int kBlockN = 128;  // weight rows a block reads (output columns; swiglu: 64 + 64)
constexpr int kBlockK = 128;  // one e4m3 line of 128 bytes = one scale block
constexpr int kBTileBytes = kBlockN * kBlockK;  // 16 KB
static_assert(kBlockK == 128, "a K block is one 128-byte swizzled line");

// kWarpgroups warpgroups of 64 slot rows each: 2 for prefill (128-slot tiles,
// 6 stages of 32 KB, one block an SM), 1 for decode (64-slot tiles, 4 stages
// of 24 KB, two blocks an SM, so one block's ramp-up hides under the other's stream).
template <int kWarpgroups>
struct Config {
  static constexpr int kBlockM = 64 * kWarpgroups;
  static constexpr int kThreads = 128 * kWarpgroups;
  static constexpr int kStages = kWarpgroups == 2 ? 6 : 4;
  static constexpr int kBlocksPerSm = kWarpgroups == 2 ? 1 : 2;
  static constexpr int kATileBytes = kBlockM * kBlockK;
  static constexpr int kStageBytes = kATileBytes + kBTileBytes;
  // A stage's scales, after the stages: the A scale of each tile row, then
  // the weight block's (gate, up under swiglu), padded to 16 bytes.
  static constexpr int kScaleFloats = kBlockM + 4;
  static constexpr int kSmemBytes =
      kStages * (kStageBytes + kScaleFloats * 4) + 1024;  // + slack for the 1024-byte alignment
  static constexpr int kRowsPerPass = kThreads / 8;  // a copy pass: 8 threads a 128-byte row
  static constexpr int kAPasses = kBlockM / kRowsPerPass;
  static constexpr int kBPasses = kBlockN / kRowsPerPass;
  static_assert(kRowsPerPass % 8 == 0, "every pass keeps a thread's swizzle row (row % 8)");
};

__device__ __forceinline__ void cp_async_4(float* dst, const float* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(dst)), "l"(src));
}

// The accumulator layout: grouped_gemm_fp8_epilogue.cuh.
template <int kWarpgroups, bool kSwiglu>
__global__ void __launch_bounds__(Config<kWarpgroups>::kThreads, Config<kWarpgroups>::kBlocksPerSm)
    grouped_gemm_fp8_kernel(GroupedGemmFp8Args a) {
  using C = Config<kWarpgroups>;
  extern __shared__ unsigned char smem_window[];
  __shared__ int src_rows[C::kBlockM];  // the A row of each of the tile's slots; -1 past the group's end
  pdl_launch_dependents();
  pdl_wait();
  const int tile = blockIdx.y;
  const int group = a.tile_expert[tile];
  if (group < 0) return;
  const int first_slot = a.tile_first_slot[tile];
  const int num_rows = min(C::kBlockM, a.expert_offsets[group + 1] - first_slot);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wg = warp >> 2, warp_in_wg = warp & 3;
  for (int r = tid; r < C::kBlockM; r += C::kThreads)
    src_rows[r] = r < num_rows ? (a.row_of_slot != nullptr ? a.row_of_slot[first_slot + r] : first_slot + r) : -1;
  __syncthreads();

  const AlignedSmem smem = align_smem_1024(smem_window);
  const std::int64_t n = a.n, k = a.k;
  // Output columns [n0, n0 + 64) of each half under swiglu, [n0, n0 + 128) otherwise.
  const std::int64_t n0 = static_cast<std::int64_t>(blockIdx.x) * (kSwiglu ? kBlockN / 2 : kBlockN);
  const std::int64_t group_rows = kSwiglu ? 2 * n : n;
  const std::int64_t w_row0 = group * group_rows + n0;  // first weight row (of the gate half)
  const std::int64_t w_row1 = w_row0 + n;               // first weight row of the up half

  // Copies: thread t moves 16-byte chunk t % 8 of rows t / 8 + kRowsPerPass i
  // of both tiles; the swizzle's row term (row % 8) is the same in every pass.
  const int chunk = tid & 7, row_base = tid >> 3;
  const std::uint32_t swizzled_chunk = static_cast<std::uint32_t>(((chunk ^ (row_base & 7)) << 4));
  const unsigned char* a_src[C::kAPasses];
  const unsigned char* w_src[C::kBPasses];
  const auto* a_q = static_cast<const unsigned char*>(a.a);
  const auto* w_q = static_cast<const unsigned char*>(a.w);
#pragma unroll
  for (int i = 0; i < C::kAPasses; ++i) {
    const int r = row_base + C::kRowsPerPass * i;
    a_src[i] = src_rows[r] >= 0 ? a_q + static_cast<std::int64_t>(src_rows[r]) * k + chunk * 16 : nullptr;
  }
#pragma unroll
  for (int i = 0; i < C::kBPasses; ++i) {
    const int r = row_base + C::kRowsPerPass * i;
    const std::int64_t w_row = kSwiglu ? (r < kBlockN / 2 ? w_row0 + r : w_row1 + r - kBlockN / 2) : w_row0 + r;
    w_src[i] = w_q + w_row * k + chunk * 16;
  }
  const float* w_scale0 = a.w_scales + (w_row0 / kBlockK) * a.w_scale_row_stride;
  const float* w_scale1 = a.w_scales + (w_row1 / kBlockK) * a.w_scale_row_stride;
  // Thread t < kBlockM copies tile row t's A scale of each K block (rows past
  // the group's end copy row 0's: read, never stored); the next two the weight's.
  const float* scale_src = tid < C::kBlockM ? a.a_scales + max(src_rows[tid], 0)
                           : tid == C::kBlockM ? w_scale0
                           : kSwiglu && tid == C::kBlockM + 1 ? w_scale1
                                                              : nullptr;
  const std::int64_t scale_step = tid < C::kBlockM ? a.a_scale_stride : 1;
  float* const scales_s = reinterpret_cast<float*>(smem.ptr + C::kStages * C::kStageBytes);
  const int num_k_blocks = static_cast<int>(k / kBlockK);
  auto load_stage = [&](int kb) {
    if (scale_src != nullptr)
      cp_async_4(scales_s + (kb % C::kStages) * C::kScaleFloats + min(tid, C::kBlockM + 1),
                 scale_src + static_cast<std::int64_t>(kb) * scale_step);
    unsigned char* a_s = smem.ptr + (kb % C::kStages) * C::kStageBytes;
    unsigned char* b_s = a_s + C::kATileBytes;
    const std::int64_t k0 = static_cast<std::int64_t>(kb) * kBlockK;
#pragma unroll
    for (int i = 0; i < C::kAPasses; ++i) {
      // A rows past the group's end are left as they are: an MMA row reads
      // only its own A row, and those rows are never stored.
      const std::uint32_t dst = static_cast<std::uint32_t>((row_base + C::kRowsPerPass * i) * kBlockK) + swizzled_chunk;
      if (a_src[i] != nullptr) cp_async_16(a_s + dst, a_src[i] + k0, true);
    }
#pragma unroll
    for (int i = 0; i < C::kBPasses; ++i) {
      const std::uint32_t dst = static_cast<std::uint32_t>((row_base + C::kRowsPerPass * i) * kBlockK) + swizzled_chunk;
      cp_async_16(b_s + dst, w_src[i] + k0, true);
    }
  };

  // This thread's two accumulator rows.
  const int row_lo = wg * 64 + warp_in_wg * 16 + lane / 4, row_hi = row_lo + 8;
  const bool active = num_rows > wg * 64;  // this warpgroup holds at least one slot

  float total[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) total[i] = 0.0f;
  float acc[64];

#pragma unroll
  for (int s = 0; s < C::kStages - 1; ++s) {
    if (s < num_k_blocks) load_stage(s);
    cp_async_commit();
  }
  for (int kb = 0; kb < num_k_blocks; ++kb) {
    // K block kb has landed once at most kStages - 2 later groups are pending.
    cp_async_wait<C::kStages - 2>();
    fence_proxy_async();
    __syncthreads();
    // The stage written now was last read by MMAs every warpgroup waited for
    // before the barrier above.
    if (kb + C::kStages - 1 < num_k_blocks) load_stage(kb + C::kStages - 1);
    cp_async_commit();
    if (!active) continue;
    const std::uint32_t a_s = smem.addr + (kb % C::kStages) * C::kStageBytes + wg * 64 * kBlockK;
    const std::uint32_t b_s = smem.addr + (kb % C::kStages) * C::kStageBytes + C::kATileBytes;
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kBlockK / 32; ++ks)
      wgmma_m64n128k32_e4m3(acc, smem_desc(a_s + ks * 32, 16, 1024), smem_desc(b_s + ks * 32, 16, 1024), ks > 0);
    wgmma_commit();
    // Read before the next barrier, after which load_stage may refill them.
    const float* stage_scales = scales_s + (kb % C::kStages) * C::kScaleFloats;
    const float a_lo = stage_scales[row_lo], a_hi = stage_scales[row_hi];
    const float w0 = stage_scales[C::kBlockM], w1 = kSwiglu ? stage_scales[C::kBlockM + 1] : w0;
    wgmma_wait<0>();
    fence_registers(acc);
    const float w[2] = {w0, w1};
    promote_fp8_k_block<128>(total, acc, a_lo, a_hi, w);
  }
  cp_async_wait<0>();
  if (!active) return;

  auto* out = static_cast<__nv_bfloat16*>(a.out);
  const int col_in_chunk = (lane % 4) * 2;
  store_fp8_tile_rows<kSwiglu>(total, row_lo, row_hi, num_rows, first_slot, n0, col_in_chunk, n, out);
}

template <int kWarpgroups, bool kSwiglu>
void launch_variant(const GroupedGemmFp8Args& a, const Launch& launch) {
  const std::int64_t col_blocks = a.n / (kSwiglu ? kBlockN / 2 : kBlockN);
  launch_kernel(grouped_gemm_fp8_kernel<kWarpgroups, kSwiglu>,
                dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(a.max_tiles)),
                dim3(Config<kWarpgroups>::kThreads), Config<kWarpgroups>::kSmemBytes, launch, a);
  SLUICE_CUDA_CHECK_LAUNCH();
}

template <int kWarpgroups, bool kSwiglu>
void raise_smem_limit() {
  SLUICE_CUDA_CHECK(cudaFuncSetAttribute(grouped_gemm_fp8_kernel<kWarpgroups, kSwiglu>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         Config<kWarpgroups>::kSmemBytes));
}

// The default for 128-slot tiles: the warp-specialised kernel with the weights
// by TMA, each weight tile multicast to the two blocks of an expert's tile
// pair, in tiles of 192 weight rows (session 43, H100: CudaMoe, CudaMoeFp8Ws
// and the golden pass, logits bit-equal to the ring kernel's; the MoE layer
// at 4,096 tokens 4.546 ms against 4.688 at 128 rows, medians of five, and
// 1,030-1,070 TFLOP/s as a dense GEMM against 984-1,007; docs/benchmarks.md
// S43-1). Session 29's 128-row tiles before it (5.28 ms against tma's 5.62),
// session 12's tma before that.
std::atomic<GroupedGemmFp8Kernel> g_kernel{GroupedGemmFp8Kernel::tma_weight_multicast_n192};
std::atomic<bool> g_odd_couples{false};

}  // namespace

void set_grouped_gemm_fp8_kernel(GroupedGemmFp8Kernel kernel) { g_kernel.store(kernel); }
GroupedGemmFp8Kernel grouped_gemm_fp8_kernel() { return g_kernel.load(); }
void set_grouped_gemm_fp8_odd_couples(bool on) { g_odd_couples.store(on); }

void prepare_grouped_gemm_fp8() {
  prepare_grouped_gemm_fp8_ws();
  prepare_grouped_gemm_fp8_swap();
  raise_smem_limit<1, false>();
  raise_smem_limit<1, true>();
  raise_smem_limit<2, false>();
  raise_smem_limit<2, true>();
}

std::int32_t grouped_gemm_fp8_tile_rows(std::int64_t num_slots, std::int64_t num_groups, bool a_gathered) {
  if (num_slots <= 64 * num_groups) return 64;
  return g_kernel.load() == GroupedGemmFp8Kernel::swap_ab && !a_gathered ? kSwapTileRows : 128;
}

MoeTileOrder grouped_gemm_fp8_tile_order(std::int32_t tile_rows) {
  if (tile_rows == kSwapTileRows) return MoeTileOrder::by_expert_balanced;
  const GroupedGemmFp8Kernel kernel = g_kernel.load();
  const bool paired =
      kernel == GroupedGemmFp8Kernel::tma_weight_multicast || kernel == GroupedGemmFp8Kernel::tma_weight_multicast_n192;
  if (tile_rows != 128 || !paired) return MoeTileOrder::by_expert;
  return g_odd_couples.load() ? MoeTileOrder::paired_odd_couples : MoeTileOrder::paired;
}

bool grouped_gemm_fp8_supports(std::int64_t n, std::int64_t k) {
  return n > 0 && k > 0 && n % kBlockN == 0 && k % kBlockK == 0;
}

void launch_grouped_gemm_fp8(const GroupedGemmFp8Args& a, const Launch& launch) {
  SLUICE_CHECK_MSG(grouped_gemm_fp8_supports(a.n, a.k), "grouped FP8 GEMM: n and k must be multiples of 128");
  SLUICE_CHECK(a.tile_rows == 64 || a.tile_rows == 128 || a.tile_rows == kSwapTileRows);
  SLUICE_CHECK(a.tile_expert != nullptr && a.tile_first_slot != nullptr && a.expert_offsets != nullptr);
  SLUICE_CHECK(a.a_scales != nullptr && a.w_scales != nullptr && a.a_scale_stride > 0);
  if (a.max_tiles == 0) return;
  const bool swiglu = a.epilogue == GroupedEpilogue::swiglu;
  if (a.tile_rows == kSwapTileRows)
    launch_grouped_gemm_fp8_swap(a, launch);
  else if (a.tile_rows == 64)
    swiglu ? launch_variant<1, true>(a, launch) : launch_variant<1, false>(a, launch);
  else if (const GroupedGemmFp8Kernel kernel = g_kernel.load(); grouped_gemm_fp8_ws_supports(kernel, a))
    launch_grouped_gemm_fp8_ws(a, kernel, launch);
  else
    swiglu ? launch_variant<2, true>(a, launch) : launch_variant<2, false>(a, launch);
}

}  // namespace sluice::cuda
