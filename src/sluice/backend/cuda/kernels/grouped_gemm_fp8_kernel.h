// Which kernel launch_grouped_gemm_fp8 runs for 128-slot tiles (prefill):
// a warp-specialised persistent one (grouped_gemm_fp8_ws.cu; `tma` the
// default since session 12) or the cp.async ring with a block-wide barrier a
// K block (grouped_gemm_fp8.cu; sessions 9-11). 64-slot tiles (decode) always
// run the ring kernel. Process-wide; set before the launches (and graph
// captures) it should apply to. A small header of its own so that the
// benchmark and tests can flip it without rebuilding every kernel.
#pragma once

#include <string_view>

#include "sluice/backend/cuda/kernels/moe_kernels.h"

namespace sluice::cuda {

// The warp-specialised kernels (grouped_gemm_fp8_ws.cu) differ in how the
// producer moves A and W: cp.async; TMA; TMA with the weight tile multicast
// to a cluster of two blocks holding two tiles of one expert. (A multicast to
// neighbouring column blocks and the consumers' two-accumulator forms measured
// slower and were removed in session 44.)
enum class GroupedGemmFp8Kernel {
  warp_specialized,
  tma,
  // The plan pairs an expert's tiles (grouped_gemm_fp8_tile_order): each pair
  // runs on a cluster of two, each block multicasting half the weight tile.
  tma_weight_multicast,
  // tma_weight_multicast with wide tiles (session 43, the default): each block
  // reads 192 weight rows (96 gate + 96 up under swiglu), one m64n192 MMA a
  // consumer a step, for fewer shared-memory and L2 bytes a flop. (160 rows
  // measured no faster than 128 and was removed, S43-1.)
  tma_weight_multicast_n192,
  // The operands swapped (grouped_gemm_fp8_swap.cu, session 50; opt-in, not
  // yet run): weight rows as wgmma's M, an expert's tokens (up to 192 by 16, the
  // plan's balanced tiles) as its N, so tiles follow the tokens. Where A is
  // gathered, its 128-slot tiles run the ring kernel.
  swap_ab,
  ring
};

inline std::string_view name_of(GroupedGemmFp8Kernel kernel) {
  switch (kernel) {
    case GroupedGemmFp8Kernel::warp_specialized: return "warp-specialized";
    case GroupedGemmFp8Kernel::tma: return "tma";
    case GroupedGemmFp8Kernel::tma_weight_multicast: return "tma-weight-multicast";
    case GroupedGemmFp8Kernel::tma_weight_multicast_n192: return "tma-weight-multicast-n192";
    case GroupedGemmFp8Kernel::swap_ab: return "swap-ab";
    case GroupedGemmFp8Kernel::ring: return "ring";
  }
  return "?";
}

void set_grouped_gemm_fp8_kernel(GroupedGemmFp8Kernel kernel);
GroupedGemmFp8Kernel grouped_gemm_fp8_kernel();
// Opt-in until a device measures it: the paired kernels' plan in
// MoeTileOrder::paired_odd_couples instead of paired (grouped_gemm_fp8_tile_order).
void set_grouped_gemm_fp8_odd_couples(bool on);

// The warp-specialised kernels for 128-slot tiles (grouped_gemm_fp8_ws.cu);
// launch_grouped_gemm_fp8 dispatches to them when they take the shape.
void prepare_grouped_gemm_fp8_ws();
// The most blocks the persistent kernels launch (0: one an SM, the default),
// the swapped one's too. Tests set a few so that every block walks many work items.
void set_grouped_gemm_fp8_ws_grid_limit(int blocks);
int grouped_gemm_fp8_ws_grid_limit();
// Benchmarks only (cuda_bench --deepseek-moe-fp8 KERNEL PROBE): the TMA
// loaders' tensor map of the weights cut to the first expert's rows, or of A
// to the first tile's, so that every other box lands out of bounds (zeros,
// no memory read) and ncu's DRAM bytes say which operand reads the rest. The
// products are wrong under a probe; never set it outside a benchmark.
enum class GroupedGemmFp8BytesProbe { none, one_expert_weights, one_tile_a, both };
void set_grouped_gemm_fp8_ws_bytes_probe(GroupedGemmFp8BytesProbe probe);
// Benchmarks only (cuda_bench --deepseek-moe-fp8 KERNEL loads-only|mmas-only):
// the ws kernels with one side of the ring removed, to time the other alone.
// loads_only: the consumers release each stage as it lands (no MMAs, no
// epilogue); mmas_only: the producer copies no A or W tiles (the MMAs read
// whatever the stages hold; only the scales are copied). Wrong products.
enum class GroupedGemmFp8PathProbe { none, loads_only, mmas_only };
void set_grouped_gemm_fp8_ws_path_probe(GroupedGemmFp8PathProbe probe);
// The swapped kernel (grouped_gemm_fp8_swap.cu): its shared-memory limit, and
// whether it takes these args (tile_rows kSwapTileRows, A consecutive).
void prepare_grouped_gemm_fp8_swap();
bool grouped_gemm_fp8_swap_supports(const GroupedGemmFp8Args& args);
void launch_grouped_gemm_fp8_swap(const GroupedGemmFp8Args& args, const Launch& launch);
// Whether a warp-specialised kernel takes this shape (never for the ring or swapped kernel).
bool grouped_gemm_fp8_ws_supports(GroupedGemmFp8Kernel kernel, const GroupedGemmFp8Args& args);
void launch_grouped_gemm_fp8_ws(const GroupedGemmFp8Args& args, GroupedGemmFp8Kernel kernel, const Launch& launch);

}  // namespace sluice::cuda
