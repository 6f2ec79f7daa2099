#include "sluice/backend/cuda/fp8_matmul.h"

#include "sluice/backend/block_scales.h"
#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/cuda_dtype.h"
#include "sluice/backend/cuda/kernels/fp8_gemv.h"
#include "sluice/backend/cuda/kernels/moe_kernels.h"

namespace sluice::cuda {
namespace {

constexpr std::int32_t kScaleBlock = 128;

}  // namespace

Fp8MatmulPath fp8_matmul_path(Fp8DenseGemm asked, std::int64_t m, std::int64_t n, std::int64_t k) {
  if (asked == Fp8DenseGemm::kernel) return Fp8MatmulPath::grouped_kernel;
  static_assert(kFp8GemvMaxRows == kFp8KernelMaxRows);
  if (fp8_gemv_supports(m, n, k)) return Fp8MatmulPath::gemv;
  if (m <= kFp8KernelMaxRows) return Fp8MatmulPath::grouped_kernel;
  // cuBLASLt's FP8 operands need 16-byte rows; its block scales whole 128-wide K blocks.
  if (k % kScaleBlock != 0 || n % 16 != 0) return Fp8MatmulPath::grouped_kernel;
  return Fp8MatmulPath::cublaslt;
}

Fp8Matmul::Fp8Matmul(LtGemm& gemm, Fp8DenseGemm asked) : gemm_(gemm), asked_(asked) {
  prepare_fp8_gemv();  // its occupancy table, before any decode graph is captured
}

void Fp8Matmul::run(const Tensor& x, const Tensor& w, const Tensor& out, ScratchArena& scratch,
                    bool launch_kernels, const Launch& launch) {
  SLUICE_CHECK_MSG(x.dtype == DType::bf16, "CUDA FP8 matmul takes bf16 activations");
  SLUICE_CHECK_MSG(w.dtype == DType::f8_e4m3 && !w.scales.empty(), "CUDA FP8 matmul needs the weight's block scales");
  SLUICE_CHECK(w.scales.block_rows == kScaleBlock && w.scales.block_cols == kScaleBlock);
  SLUICE_CHECK(out.dtype == DType::bf16 || out.dtype == DType::f32);
  const std::int64_t m = x.rows(), n = w.rows(), k = x.cols();
  SLUICE_CHECK_EQ(w.cols(), k);
  SLUICE_CHECK_EQ(out.rows(), m);
  SLUICE_CHECK_EQ(out.cols(), n);
  // cuBLASLt infers the weight scales' row stride; a tensor uploaded otherwise takes the kernel.
  const std::int64_t lt_row_stride = (num_scale_blocks(k, kScaleBlock) + kLtWeightScaleRowAlignment - 1) /
                                     kLtWeightScaleRowAlignment * kLtWeightScaleRowAlignment;
  const bool lt_layout = w.scales.row_stride == lt_row_stride;
  const Fp8MatmulPath path = fp8_matmul_path(asked_, m, n, k);
  // The GEMV's 16-byte loads: a tensor sliced off a 16-byte boundary takes the grouped kernel.
  const bool gemv_aligned = reinterpret_cast<std::uintptr_t>(x.data) % 16 == 0 &&
                            reinterpret_cast<std::uintptr_t>(w.data) % 16 == 0;
  if (path == Fp8MatmulPath::gemv && gemv_aligned) {
    if (launch_kernels)
      launch_fp8_gemv({.x = x.data,
                       .w = static_cast<const std::uint8_t*>(w.data),
                       .w_scales = w.scales.data,
                       .w_scale_row_stride = w.scales.row_stride,
                       .m = m,
                       .n = n,
                       .k = k,
                       .out = out.data,
                       .out_dt = dt_of(out.dtype)},
                      launch);
    return;
  }
  if (path != Fp8MatmulPath::cublaslt || !lt_layout) {
    if (launch_kernels) run_grouped_kernel(x, w, out, launch);
    return;
  }
  // cuBLASLt's N (our m) must be a multiple of 4: the quantized rows are
  // padded with zero rows, and a padded result lands in scratch, its first m
  // rows then copied to out.
  const std::int64_t padded_m = (m + kLtBlockScaledDimMultiple - 1) / kLtBlockScaledDimMultiple *
                                kLtBlockScaledDimMultiple;
  const std::int64_t out_bytes_per_row = n * static_cast<std::int64_t>(dtype_size_bytes(out.dtype));
  void* q = scratch.allocate(padded_m * k);
  auto* q_scales = static_cast<float*>(scratch.allocate(num_scale_blocks(k, kScaleBlock) * padded_m * 4));
  void* padded_out = padded_m == m ? out.data : scratch.allocate(padded_m * out_bytes_per_row);
  if (!launch_kernels) return;
  launch_quantize_fp8_rows({.x = x.data, .rows = m, .padded_rows = padded_m, .k = k, .q = q, .scales = q_scales},
                           launch);
  const bool ran = gemm_.run_fp8_block_scaled({.q = q, .q_scales = q_scales, .w = w.data, .w_scales = w.scales.data,
                                               .out = padded_out, .out_dtype = out.dtype, .m = padded_m, .n = n,
                                               .k = k});
  if (!ran) {
    run_grouped_kernel(x, w, out, launch);
    return;
  }
  if (padded_out != out.data)
    SLUICE_CUDA_CHECK(cudaMemcpyAsync(out.data, padded_out, static_cast<std::size_t>(m * out_bytes_per_row),
                                      cudaMemcpyDeviceToDevice, launch.stream));
}

void Fp8Matmul::run_grouped_kernel(const Tensor& x, const Tensor& w, const Tensor& out, const Launch& launch) const {
  const std::int64_t m = x.rows();
  SLUICE_CHECK_MSG(grouped_gemm_supports(x.cols(), true), "CUDA FP8 matmul needs K a multiple of 16");
  launch_grouped_gemm({.x = x.data,
                       .w = w.data,
                       .w_fp8 = true,
                       .w_scales = w.scales.data,
                       .w_scale_row_stride = w.scales.row_stride,
                       .num_slots = static_cast<std::int32_t>(m),
                       .tile_rows = grouped_gemm_tile_rows(m, 1),
                       .n = w.rows(),
                       .k = x.cols(),
                       .epilogue = GroupedEpilogue::store,
                       .out = out.data,
                       .out_dt = dt_of(out.dtype)},
                      launch);
}

}  // namespace sluice::cuda
