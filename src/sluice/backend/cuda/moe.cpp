#include "sluice/backend/cuda/moe.h"

#include <fmt/format.h>

#include "sluice/backend/cuda/cuda_dtype.h"
#include "sluice/backend/cuda/kernels/moe_kernels.h"

namespace sluice::cuda {
namespace {

constexpr std::int32_t kScaleBlock = 128;

template <class T>
T* allocate(ScratchArena& scratch, std::int64_t count) {
  return static_cast<T*>(scratch.allocate(count * static_cast<std::int64_t>(sizeof(T))));
}

Status check_expert_weight(const Tensor& w, const char* name) {
  if (w.dtype == DType::bf16) return Ok{};
  if (w.dtype != DType::f8_e4m3 || w.scales.empty())
    return Error{fmt::format("CUDA moe_experts: {} must be bf16, or FP8 with block scales; is {}", name,
                             dtype_name(w.dtype))};
  if (w.scales.block_rows != kScaleBlock || w.scales.block_cols != kScaleBlock)
    return Error{fmt::format("CUDA moe_experts: {} has {}x{} scale blocks; the kernels take 128x128", name,
                             w.scales.block_rows, w.scales.block_cols)};
  return Ok{};
}

}  // namespace

Status moe_route(const Tensor& router_logits, const Tensor& correction_bias, const MoeRouting& routing,
                 const MoeAssignment& out, bool launch_kernels, const Launch& launch) {
  const std::int64_t rows = router_logits.rows(), k = routing.num_experts_per_token;
  SLUICE_CHECK_MSG(router_logits.dtype == DType::f32, "moe_route takes f32 router logits");
  SLUICE_CHECK_EQ(router_logits.cols(), std::int64_t{routing.num_experts});
  SLUICE_CHECK_EQ(correction_bias.numel(), std::int64_t{routing.num_experts});
  SLUICE_CHECK(out.expert_ids.dtype == DType::i32 && out.expert_weights.dtype == DType::f32);
  SLUICE_CHECK(out.expert_ids.rows() == rows && out.expert_ids.cols() == k && out.expert_weights.rows() == rows &&
               out.expert_weights.cols() == k);
  if (routing.num_experts > kMoeMaxExperts)
    return Error{fmt::format("CUDA moe_route: {} experts; the kernel holds at most {}", routing.num_experts,
                             kMoeMaxExperts)};
  if (!launch_kernels) return Ok{};
  launch_moe_route({.logits = router_logits.as<const float>(),
                    .bias = correction_bias.data,
                    .bias_dt = dt_of(correction_bias.dtype),
                    .expert_ids = out.expert_ids.as<std::int32_t>(),
                    .expert_weights = out.expert_weights.as<float>(),
                    .rows = static_cast<std::int32_t>(rows),
                    .num_experts = routing.num_experts,
                    .k = routing.num_experts_per_token,
                    .num_groups = routing.num_groups,
                    .num_groups_selected = routing.num_groups_selected,
                    .normalize = routing.normalize,
                    .scale = routing.scale},
                   launch);
  return Ok{};
}

Status moe_experts(const Tensor& x, const MoeExpertWeights& experts, const MoeAssignment& assignment,
                   const Tensor& out, ScratchArena& scratch, bool launch_kernels, const Launch& launch) {
  const Tensor& gate_up = experts.gate_up;
  const Tensor& down = experts.down;
  const std::int64_t rows = x.rows(), hidden = x.cols(), inter = down.cols();
  const std::int64_t k = assignment.expert_ids.cols();
  SLUICE_CHECK_MSG(x.dtype == DType::bf16, "CUDA moe_experts takes bf16 activations");
  SLUICE_CHECK(out.dtype == DType::bf16 || out.dtype == DType::f32);
  SLUICE_CHECK(out.rows() == rows && out.cols() == hidden);
  SLUICE_CHECK(assignment.expert_ids.dtype == DType::i32 && assignment.expert_weights.dtype == DType::f32);
  SLUICE_CHECK(assignment.expert_ids.rows() == rows && assignment.expert_weights.rows() == rows &&
               assignment.expert_weights.cols() == k);
  SLUICE_CHECK_EQ(gate_up.cols(), hidden);
  SLUICE_CHECK_EQ(down.rows() % hidden, std::int64_t{0});
  const std::int64_t num_experts = down.rows() / hidden;
  SLUICE_CHECK_EQ(gate_up.rows(), num_experts * 2 * inter);
  SLUICE_TRY(check_expert_weight(gate_up, "gate_up"));
  SLUICE_TRY(check_expert_weight(down, "down"));
  if (gate_up.dtype != down.dtype) return Error{"CUDA moe_experts: gate_up and down must share one dtype"};
  const bool fp8 = gate_up.dtype == DType::f8_e4m3;
  if (num_experts > kMoeMaxExperts)
    return Error{fmt::format("CUDA moe_experts: {} experts; the kernels hold at most {}", num_experts,
                             kMoeMaxExperts)};
  if (!grouped_gemm_supports(hidden, fp8) || !grouped_gemm_supports(inter, fp8))
    return Error{fmt::format("CUDA moe_experts: hidden {} and moe_intermediate {} must be multiples of {}", hidden,
                             inter, fp8 ? 16 : 8)};
  if (fp8 && (hidden % kScaleBlock != 0 || inter % kScaleBlock != 0))
    return Error{fmt::format("CUDA moe_experts: FP8 experts need hidden {} and moe_intermediate {} to be multiples "
                             "of the 128-row scale blocks",
                             hidden, inter)};

  const auto num_pairs = static_cast<std::int32_t>(rows * k);
  const auto e = static_cast<std::int32_t>(num_experts);
  const std::int32_t tile_rows = grouped_gemm_tile_rows(num_pairs, e);
  const std::int32_t max_tiles = moe_max_tiles(num_pairs, e, tile_rows);
  auto* expert_offsets = allocate<std::int32_t>(scratch, num_experts + 1);
  auto* slot_of_pair = allocate<std::int32_t>(scratch, num_pairs);
  auto* row_of_slot = allocate<std::int32_t>(scratch, num_pairs);
  auto* tile_expert = allocate<std::int32_t>(scratch, max_tiles);
  auto* tile_first_slot = allocate<std::int32_t>(scratch, max_tiles);
  void* act = scratch.allocate(std::int64_t{num_pairs} * inter * 2);     // bf16 [pairs, I]
  void* y = scratch.allocate(std::int64_t{num_pairs} * hidden * 2);      // bf16 [pairs, H]
  if (!launch_kernels || rows == 0) return Ok{};

  launch_moe_plan({.expert_ids = assignment.expert_ids.as<const std::int32_t>(),
                   .num_pairs = num_pairs,
                   .k = static_cast<std::int32_t>(k),
                   .num_experts = e,
                   .tile_rows = tile_rows,
                   .max_tiles = max_tiles,
                   .expert_offsets = expert_offsets,
                   .slot_of_pair = slot_of_pair,
                   .row_of_slot = row_of_slot,
                   .tile_expert = tile_expert,
                   .tile_first_slot = tile_first_slot},
                  launch);
  // The two expert GEMMs: the plan's tiles over one weight each.
  auto expert_gemm = [&](const Tensor& w, const void* in, const std::int32_t* in_row_of_slot, std::int64_t n,
                         std::int64_t k_dim, GroupedEpilogue epilogue, void* result) {
    launch_grouped_gemm({.x = in,
                         .row_of_slot = in_row_of_slot,
                         .w = w.data,
                         .w_fp8 = fp8,
                         .w_scales = w.scales.data,
                         .w_scale_row_stride = w.scales.row_stride,
                         .tile_expert = tile_expert,
                         .tile_first_slot = tile_first_slot,
                         .expert_offsets = expert_offsets,
                         .max_tiles = max_tiles,
                         .tile_rows = tile_rows,
                         .n = n,
                         .k = k_dim,
                         .epilogue = epilogue,
                         .out = result,
                         .out_dt = dt_of(DType::bf16)},
                        launch);
  };
  expert_gemm(gate_up, x.data, row_of_slot, inter, hidden, GroupedEpilogue::swiglu, act);
  expert_gemm(down, act, nullptr, hidden, inter, GroupedEpilogue::store, y);  // act is by slot already
  launch_moe_combine({.y = y,
                      .slot_of_pair = slot_of_pair,
                      .weights = assignment.expert_weights.as<const float>(),
                      .rows = static_cast<std::int32_t>(rows),
                      .k = static_cast<std::int32_t>(k),
                      .hidden = hidden,
                      .out = out.data,
                      .out_dt = dt_of(out.dtype)},
                     launch);
  return Ok{};
}

}  // namespace sluice::cuda
