// Host-side launchers of the DeepSeekMoE and FP8 kernels (moe_route.cu,
// moe_permute.cu, grouped_gemm.cu, fp8_quantize.cu). Pure C++ types, as
// kernels.h. None of them synchronises the host or needs a count on the host,
// so a decode step that runs them can be captured as a CUDA graph.
#pragma once

#include <cstdint>

#include "sluice/backend/cuda/kernels/kernels.h"

namespace sluice::cuda {

// The most experts the routing and permutation kernels hold in shared memory.
inline constexpr std::int32_t kMoeMaxExperts = 1024;

// DeepSeekMoE routing, as Ops::moe_route states it; one warp a row.
struct MoeRouteArgs {
  const float* logits = nullptr;  // [rows, num_experts]
  const void* bias = nullptr;     // [num_experts] e_score_correction_bias, bias_dt
  Dt bias_dt{};
  std::int32_t* expert_ids = nullptr;  // [rows, k]
  float* expert_weights = nullptr;     // [rows, k]
  std::int32_t rows = 0, num_experts = 0, k = 0, num_groups = 1, num_groups_selected = 1;
  bool normalize = true;
  float scale = 1.0f;
};
void launch_moe_route(const MoeRouteArgs& args, const Launch& launch);

// Where each (row, choice) pair of a MoE step goes: pairs are sorted by expert
// into slots (expert e owns slots [expert_offsets[e], expert_offsets[e + 1])),
// and the slots are cut into tiles of tile_rows for the grouped GEMM. The
// order of pairs within an expert is unspecified (atomics), which no result
// depends on: every slot's GEMM row is computed alone.
//
// The order of the tiles: by expert (an expert's tiles consecutive, experts
// in order), or in pairs for a kernel that runs tiles 2p and 2p + 1 on one
// cluster (GroupedGemmFp8Kernel::tma_weight_multicast): an expert's tiles two
// by two, and the odd tile of an expert with an odd count beside the odd tile
// of the next such expert (a pair of two experts). Either way positions
// [0, tiles) hold every tile once and the rest -1; in pairs, a lone last odd
// tile leaves position `tiles` (-1) as its pair's second.
// paired_odd_couples (opt-in, set_grouped_gemm_fp8_odd_couples): pairs as
// paired, the experts with an even count first, then those with an odd count
// in couples, each couple's two odd (last) tiles a pair between the first
// one's pairs and the second one's, so that no odd tile waits for the even
// experts between the two (built in session 49; not yet measured).
// by_expert_balanced (the swapped kernel, grouped_gemm_fp8_swap.cu): by
// expert, each expert's slots cut into tiles of equal rows (balanced_tile_rows),
// not into full tiles and a remainder: an expert of 200 slots takes two tiles
// of 112 and 88 rows at tile_rows = 192, not 192 and 8.
enum class MoeTileOrder { by_expert, paired, paired_odd_couples, by_expert_balanced };
// The tile rows of the swapped kernel's plan (by_expert_balanced): its widest
// token tile, wgmma's N.
inline constexpr std::int32_t kSwapTileRows = 192;
// The rows of each of an expert's tiles under by_expert_balanced (its last
// one holds the rest): `count` slots over ceil(count / max_rows) tiles,
// rounded up to 16 (the kernel's copies go by 16 rows), so at most max_rows
// (a multiple of 16) and never more tiles than ceil(count / max_rows).
constexpr std::int32_t balanced_tile_rows(std::int32_t count, std::int32_t max_rows) {
  const std::int32_t tiles = (count + max_rows - 1) / max_rows;
  return tiles <= 1 ? max_rows : ((count + tiles - 1) / tiles + 15) / 16 * 16;
}
// An expert's tiles under by_expert_balanced.
constexpr std::int32_t balanced_tiles(std::int32_t count, std::int32_t max_rows) {
  const std::int32_t rows = balanced_tile_rows(count, max_rows);
  return (count + rows - 1) / rows;
}
struct MoePlanArgs {
  const std::int32_t* expert_ids = nullptr;  // [num_pairs], pair = row * k + choice
  std::int32_t num_pairs = 0, k = 0, num_experts = 0;
  std::int32_t tile_rows = 0;  // the grouped GEMM's tile rows (grouped_gemm_tile_rows)
  std::int32_t max_tiles = 0;  // moe_max_tiles(num_pairs, num_experts, tile_rows)
  MoeTileOrder tile_order = MoeTileOrder::by_expert;
  std::int32_t* expert_offsets = nullptr;   // [num_experts + 1]
  std::int32_t* slot_of_pair = nullptr;     // [num_pairs]
  std::int32_t* row_of_slot = nullptr;      // [num_pairs]: the x row (pair / k)
  std::int32_t* tile_expert = nullptr;      // [max_tiles]; -1 past the last tile
  std::int32_t* tile_first_slot = nullptr;  // [max_tiles]
};
// An upper bound on the tiles of any routing: every expert adds at most one
// partial tile. It exceeds the tiles of any routing by at least one (tiles =
// sum of floor(slots_e / tile_rows) + the partial ones; if all num_experts
// have a partial one, the floors sum to (num_pairs - remainders) / tile_rows
// with remainders > 0, under ceil(num_pairs / tile_rows)), so a paired plan's
// lone last tile always has a position for its (empty) partner.
constexpr std::int32_t moe_max_tiles(std::int32_t num_pairs, std::int32_t num_experts, std::int32_t tile_rows) {
  return (num_pairs + tile_rows - 1) / tile_rows + num_experts;
}
void launch_moe_plan(const MoePlanArgs& args, const Launch& launch);

// out[r] += sum_j weights[r, j] * y[slot_of_pair[r * k + j]] (j in order), out bf16 or f32.
struct MoeCombineArgs {
  const void* y = nullptr;  // bf16 [num_pairs, hidden], by slot
  const std::int32_t* slot_of_pair = nullptr;
  const float* weights = nullptr;  // [rows, k]
  std::int32_t rows = 0, k = 0;
  std::int64_t hidden = 0;
  void* out = nullptr;  // [rows, hidden]
  Dt out_dt{};
};
void launch_moe_combine(const MoeCombineArgs& args, const Launch& launch);

// Grouped GEMM on tensor cores (mma.sync, f32 accumulation): for each slot s
// of group g, out[s, :] = x[row(s)] . W_g^T, W_g the group's rows of w. FP8
// weights are dequantized in registers with their 128x128 block scales (the
// bf16 they round to is what an upload of the dequantized weight holds).
enum class GroupedEpilogue {
  store,   // out[s, c] = acc[c]; W_g = w rows [g * n, (g + 1) * n)
  swiglu,  // out[s, c] = silu(gate[c]) * up[c]; W_g = gate rows then up rows, [g * 2n, (g + 1) * 2n)
};
struct GroupedGemmArgs {
  const void* x = nullptr;                    // bf16 [*, k]
  const std::int32_t* row_of_slot = nullptr;  // x row of each slot; null: the slot's own row
  const void* w = nullptr;                    // bf16 or f8_e4m3 (w_fp8)
  bool w_fp8 = false;
  const float* w_scales = nullptr;  // w_fp8: 128x128 block scales, w_scale_row_stride floats a block row
  std::int64_t w_scale_row_stride = 0;
  // Tiles from launch_moe_plan; null tile_expert: one group of num_slots
  // slots, tile t = slots [t * tile_rows, (t + 1) * tile_rows).
  const std::int32_t* tile_expert = nullptr;
  const std::int32_t* tile_first_slot = nullptr;
  const std::int32_t* expert_offsets = nullptr;
  std::int32_t num_slots = 0;  // without tile_expert
  std::int32_t max_tiles = 0;  // with tile_expert
  std::int32_t tile_rows = 16;  // grouped_gemm_tile_rows()
  std::int64_t n = 0, k = 0;
  GroupedEpilogue epilogue = GroupedEpilogue::store;
  void* out = nullptr;  // [slots, n], bf16 or f32
  Dt out_dt{};
};
// Raises the kernels' shared-memory limits (over 48 KB): once, before any
// launch and outside graph capture (CudaOps' constructor).
void prepare_grouped_gemm();
// Tile rows for this many slots over this many groups: 16 while groups hold
// a few slots (decode: weight traffic is all), 64 when they hold many.
std::int32_t grouped_gemm_tile_rows(std::int64_t num_slots, std::int64_t num_groups);
// Whether the kernel covers k (16-byte rows of weights and activations).
bool grouped_gemm_supports(std::int64_t k, bool w_fp8);
void launch_grouped_gemm(const GroupedGemmArgs& args, const Launch& launch);

// Grouped GEMM on FP8 tensor cores (grouped_gemm_fp8.cu, wgmma e4m3, sm_90a):
// for each slot s of group g, out[s, :] = epilogue(A[s] . W_g^T) in bf16,
// where A[s] = a[row(s)] * a_scales (e4m3 per 1x128 block, launch_quantize_fp8_rows'
// layout) and W the FP8 weight with its 128x128 block scales; every 128-wide K
// block's product is promoted into an f32 sum with its two scales. Tiles come
// from launch_moe_plan with tile_rows = grouped_gemm_fp8_tile_rows(). Nothing
// is read back to the host, so decode steps stay capturable.
struct GroupedGemmFp8Args {
  const void* a = nullptr;                    // e4m3 [*, k]
  const float* a_scales = nullptr;            // [k / 128, a_scale_stride]: scale of a's row r at k block b is [b * stride + r]
  std::int64_t a_scale_stride = 0;            // a's rows (the quantize kernel's padded_rows)
  const std::int32_t* row_of_slot = nullptr;  // a's row of each slot; null: the slot's own row
  const void* w = nullptr;                    // e4m3 [w_rows = groups * (swiglu ? 2n : n), k]
  std::int64_t w_rows = 0;                    // the TMA kernels' bounds for w
  const float* w_scales = nullptr;            // 128x128 block scales, w_scale_row_stride floats a block row
  std::int64_t w_scale_row_stride = 0;
  const std::int32_t* tile_expert = nullptr;  // the plan's tiles
  const std::int32_t* tile_first_slot = nullptr;
  const std::int32_t* expert_offsets = nullptr;
  std::int32_t max_tiles = 0;
  std::int32_t tile_rows = 128;  // the plan's: grouped_gemm_fp8_tile_rows()
  std::int64_t n = 0, k = 0;     // multiples of 128
  GroupedEpilogue epilogue = GroupedEpilogue::store;
  void* out = nullptr;  // bf16 [slots, n]
};
// Raises the kernels' shared-memory limits (97 / 193 KB): once, before any
// launch and outside graph capture (CudaOps' constructor).
void prepare_grouped_gemm_fp8();
// Slots a tile for this many slots over this many groups: 64 (one warpgroup,
// two blocks an SM) while groups hold a few slots (decode: a weight stream),
// 128 (two warpgroups sharing each weight tile) when they hold many, or
// kSwapTileRows there under GroupedGemmFp8Kernel::swap_ab when A's rows are
// consecutive (a_gathered false: x in slot order).
std::int32_t grouped_gemm_fp8_tile_rows(std::int64_t num_slots, std::int64_t num_groups, bool a_gathered);
// The plan's tile order for launch_grouped_gemm_fp8 at these tile rows: paired
// when the 128-slot kernel chosen (grouped_gemm_fp8_kernel.h) runs tile pairs,
// by_expert_balanced at kSwapTileRows, by expert otherwise. Every kernel is
// correct on either order; this one is what each is fast on.
MoeTileOrder grouped_gemm_fp8_tile_order(std::int32_t tile_rows);
// Whether the kernel covers an n x k weight (per group, per half under swiglu).
bool grouped_gemm_fp8_supports(std::int64_t n, std::int64_t k);
void launch_grouped_gemm_fp8(const GroupedGemmFp8Args& args, const Launch& launch);

// Per 1x128 block of each row of x (bf16 [rows, k]): scale = amax / 448 and
// q = e4m3(x / scale), saturating. q is [padded_rows, k] and scales are
// [ceil(k / 128), padded_rows] (row index fastest), the layout cuBLASLt's
// VEC128_32F scales take for the activations; rows past `rows` are zeros
// with scale 1 (cuBLASLt's N must be a multiple of 4). With group_offsets
// (device, [num_groups + 1]; padded_rows == rows) each group of rows gets
// that layout on its own, at ceil(k / 128) * group_offsets[g]: one GEMM a group.
inline constexpr float kFp8E4m3Max = 448.0f;
struct QuantizeFp8Args {
  const void* x = nullptr;  // bf16 [rows, k]
  std::int64_t rows = 0;
  std::int64_t padded_rows = 0;  // >= rows; 0: rows
  std::int64_t k = 0;
  void* q = nullptr;         // e4m3 [padded_rows, k]
  float* scales = nullptr;   // [ceil(k / 128), padded_rows]
  const std::int32_t* group_offsets = nullptr;
  std::int32_t num_groups = 0;
  // Scatter (k a multiple of 128; no padding, no groups): row r's quantized
  // row is written to rows slot_of_pair[r * copies + j], j < copies, of q
  // ([rows * copies, k]) and its scales to [k / 128, rows * copies]. The MoE
  // experts' x in slot order, so gate_up reads consecutive rows (a TMA box)
  // instead of gathering them; each copy is the same bits as the row's.
  const std::int32_t* slot_of_pair = nullptr;
  std::int32_t copies = 1;
};
void launch_quantize_fp8_rows(const QuantizeFp8Args& args, const Launch& launch);

}  // namespace sluice::cuda
