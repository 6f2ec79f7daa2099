#include "sluice/backend/cuda/moe.h"

#include <fmt/format.h>

#include "sluice/backend/block_scales.h"
#include "sluice/backend/cuda/cuda_check.h"
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
                 const MoeAssignment& out, const MoeContext& context) {
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
  if (!context.launch_kernels) return Ok{};
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
                   context.launch);
  return Ok{};
}

namespace {

bool g_fp8_x_by_slot = true;  // set_moe_fp8_x_by_slot()

// The device buffers of one moe_experts call.
struct ExpertsPlan {
  std::int64_t rows = 0, hidden = 0, inter = 0, k = 0, num_experts = 0;
  bool fp8 = false;
  std::int32_t num_pairs = 0, tile_rows = 0, max_tiles = 0;
  std::int32_t* expert_offsets = nullptr;   // [num_experts + 1]
  std::int32_t* slot_of_pair = nullptr;     // [num_pairs]
  std::int32_t* row_of_slot = nullptr;      // [num_pairs]
  std::int32_t* tile_expert = nullptr;      // [max_tiles]
  std::int32_t* tile_first_slot = nullptr;  // [max_tiles]
  void* act = nullptr;                      // bf16 [num_pairs, inter], by slot
  void* y = nullptr;                        // bf16 [num_pairs, hidden], by slot
  // MoeExpertGemm::fp8_wgmma only: activations in e4m3 with their 1x128 scales.
  bool x_by_slot = false;        // x_q in slot order (g_fp8_x_by_slot), else a row a token gate_up gathers
  void* x_q = nullptr;           // e4m3 [x_q_rows(), hidden]
  float* x_scales = nullptr;     // [hidden / 128, x_q_rows()]
  void* act_q = nullptr;         // e4m3 [num_pairs, inter], by slot
  float* act_scales = nullptr;   // [inter / 128, num_pairs]
  std::int64_t x_q_rows() const { return x_by_slot ? num_pairs : rows; }
};

// One expert GEMM over the plan's tiles (all experts at once).
void grouped_expert_gemm(const ExpertsPlan& p, const Tensor& w, const void* in, const std::int32_t* in_row_of_slot,
                         std::int64_t n, std::int64_t k_dim, GroupedEpilogue epilogue, void* result,
                         const Launch& launch) {
  launch_grouped_gemm({.x = in,
                       .row_of_slot = in_row_of_slot,
                       .w = w.data,
                       .w_fp8 = p.fp8,
                       .w_scales = w.scales.data,
                       .w_scale_row_stride = w.scales.row_stride,
                       .tile_expert = p.tile_expert,
                       .tile_first_slot = p.tile_first_slot,
                       .expert_offsets = p.expert_offsets,
                       .max_tiles = p.max_tiles,
                       .tile_rows = p.tile_rows,
                       .n = n,
                       .k = k_dim,
                       .epilogue = epilogue,
                       .out = result,
                       .out_dt = dt_of(DType::bf16)},
                      launch);
}

// MoeExpertGemm::fp8_wgmma: x quantized once per token and written to each of
// its slots (set_moe_fp8_x_by_slot; else once, and the gate_up GEMM gathers its
// rows through row_of_slot), gate_up with the SwiGLU epilogue into p.act
// (bf16), act quantized per slot, down into p.y; no host sync, so graphs
// capture it. The e4m3 buffers are the plan's (taken before any early return).
void fp8_wgmma_experts(const ExpertsPlan& p, const Tensor& x, const MoeExpertWeights& experts,
                       const MoeContext& context) {
  const Launch& launch = context.launch;
  const std::int64_t pairs = p.num_pairs, rows = p.rows, h = p.hidden, inter = p.inter;
  const auto gemm = [&](const Tensor& w, const void* a, const float* a_scales, std::int64_t a_rows,
                        const std::int32_t* row_of_slot, std::int64_t n, std::int64_t k, GroupedEpilogue epilogue,
                        void* out) {
    launch_grouped_gemm_fp8({.a = a,
                             .a_scales = a_scales,
                             .a_scale_stride = a_rows,
                             .row_of_slot = row_of_slot,
                             .w = w.data,
                             .w_rows = w.rows(),
                             .w_scales = w.scales.data,
                             .w_scale_row_stride = w.scales.row_stride,
                             .tile_expert = p.tile_expert,
                             .tile_first_slot = p.tile_first_slot,
                             .expert_offsets = p.expert_offsets,
                             .max_tiles = p.max_tiles,
                             .tile_rows = p.tile_rows,
                             .n = n,
                             .k = k,
                             .epilogue = epilogue,
                             .out = out},
                            launch);
  };
  launch_quantize_fp8_rows({.x = x.data, .rows = rows, .k = h, .q = p.x_q, .scales = p.x_scales,
                            .slot_of_pair = p.x_by_slot ? p.slot_of_pair : nullptr,
                            .copies = static_cast<std::int32_t>(p.k)},
                           launch);
  gemm(experts.gate_up, p.x_q, p.x_scales, p.x_q_rows(), p.x_by_slot ? nullptr : p.row_of_slot, inter, h,
       GroupedEpilogue::swiglu, p.act);
  launch_quantize_fp8_rows({.x = p.act, .rows = pairs, .k = inter, .q = p.act_q, .scales = p.act_scales}, launch);
  gemm(experts.down, p.act_q, p.act_scales, pairs, nullptr, h, inter, GroupedEpilogue::store, p.y);
}

}  // namespace

void set_moe_fp8_x_by_slot(bool by_slot) { g_fp8_x_by_slot = by_slot; }
bool moe_fp8_x_by_slot() { return g_fp8_x_by_slot; }

Status moe_experts(const Tensor& x, const MoeExpertWeights& experts, const MoeAssignment& assignment,
                   const Tensor& out, const MoeContext& context) {
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
  if (experts.first_expert != 0)
    return Error{"CUDA moe_experts: holds every expert; expert parallelism runs on the CPU only (issue 19)"};
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

  // FP8 tensor cores take both widths as multiples of 128 (checked above for FP8).
  const bool fp8_wgmma = fp8 && context.expert_gemm == MoeExpertGemm::fp8_wgmma;
  SLUICE_CHECK(!fp8_wgmma || (grouped_gemm_fp8_supports(inter, hidden) && grouped_gemm_fp8_supports(hidden, inter)));

  ExpertsPlan p{.rows = rows, .hidden = hidden, .inter = inter, .k = k, .num_experts = num_experts, .fp8 = fp8};
  ScratchArena& scratch = context.scratch;
  p.num_pairs = static_cast<std::int32_t>(rows * k);
  p.tile_rows = fp8_wgmma ? grouped_gemm_fp8_tile_rows(p.num_pairs, num_experts, !g_fp8_x_by_slot)
                          : grouped_gemm_tile_rows(p.num_pairs, num_experts);
  p.max_tiles = moe_max_tiles(p.num_pairs, static_cast<std::int32_t>(num_experts), p.tile_rows);
  p.expert_offsets = allocate<std::int32_t>(scratch, num_experts + 1);
  p.slot_of_pair = allocate<std::int32_t>(scratch, p.num_pairs);
  p.row_of_slot = allocate<std::int32_t>(scratch, p.num_pairs);
  p.tile_expert = allocate<std::int32_t>(scratch, p.max_tiles);
  p.tile_first_slot = allocate<std::int32_t>(scratch, p.max_tiles);
  p.act = scratch.allocate(std::int64_t{p.num_pairs} * inter * 2);
  p.y = scratch.allocate(std::int64_t{p.num_pairs} * hidden * 2);
  if (fp8_wgmma) {
    p.x_by_slot = g_fp8_x_by_slot;
    p.x_q = scratch.allocate(p.x_q_rows() * hidden);
    p.x_scales = allocate<float>(scratch, p.x_q_rows() * num_scale_blocks(hidden, kScaleBlock));
    p.act_q = scratch.allocate(std::int64_t{p.num_pairs} * inter);
    p.act_scales = allocate<float>(scratch, std::int64_t{p.num_pairs} * num_scale_blocks(inter, kScaleBlock));
  }
  if (!context.launch_kernels || rows == 0) return Ok{};

  const Launch& launch = context.launch;
  launch_moe_plan({.expert_ids = assignment.expert_ids.as<const std::int32_t>(),
                   .num_pairs = p.num_pairs,
                   .k = static_cast<std::int32_t>(k),
                   .num_experts = static_cast<std::int32_t>(num_experts),
                   .tile_rows = p.tile_rows,
                   .max_tiles = p.max_tiles,
                   .tile_order = fp8_wgmma ? grouped_gemm_fp8_tile_order(p.tile_rows) : MoeTileOrder::by_expert,
                   .expert_offsets = p.expert_offsets,
                   .slot_of_pair = p.slot_of_pair,
                   .row_of_slot = p.row_of_slot,
                   .tile_expert = p.tile_expert,
                   .tile_first_slot = p.tile_first_slot},
                  launch);
  if (fp8_wgmma) {
    fp8_wgmma_experts(p, x, experts, context);
  } else {
    grouped_expert_gemm(p, gate_up, x.data, p.row_of_slot, inter, hidden, GroupedEpilogue::swiglu, p.act, launch);
    grouped_expert_gemm(p, down, p.act, nullptr, hidden, inter, GroupedEpilogue::store, p.y, launch);  // by slot
  }
  launch_moe_combine({.y = p.y,
                      .slot_of_pair = p.slot_of_pair,
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
