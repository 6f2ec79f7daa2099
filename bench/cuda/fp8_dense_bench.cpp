// cuda_bench --fp8-dense: issue 15's dense FP8 block-scaled GEMM target
// (>= 1.6x our bf16 GEMM at M >= 4096) on DeepSeek-V3's dense MLP shapes and
// V4-Flash's largest dense ones, side by side in one run:
// - bf16 cuBLASLt (the ratio's denominator);
// - cuBLASLt's block-scaled FP8 GEMM (the rows quantized per 1x128 block
//   first, timed with it, as Fp8Matmul runs both), as Fp8Matmul asks it and
//   with the operands' roles swapped (LtGemm::Fp8Operands::activations_as_a:
//   out^T, which cuBLASLt may tile differently);
// - the MoE's warp-specialised FP8 kernels (grouped_gemm_fp8_ws.cu) as one
//   group: a plan of M / 128 tiles of group 0, the same quantized rows;
//   and the swapped one (grouped_gemm_fp8_swap.cu) over the balanced tiles
//   of up to 192 rows its plan would cut the group into;
// - the best of the heuristic's first 8 algorithms for bf16 and for FP8
//   (LtGemm::set_algo_rank; the engine takes the first), and their ratio:
//   whether choosing among them would reach the 1.6x.
//   Whether our own kernel's main loop gets nearer DeepGEMM's rates on a
//   dense shape than it does on the MoE's ~128-row experts (26% of the FP8
//   peak there) says whether it can replace cuBLASLt here.
// Every FP8 row's product is checked against the plain cuBLASLt one (max |d|
// in the cell). Timing: the median of 7 launches after 2 (events);
// compute-bound shapes, so L2 reuse between launches does not matter.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sluice/backend/cuda/cuda_dtype.h"
#include "sluice/backend/cuda/cuda_ops.h"
#include "sluice/backend/cuda/kernels/grouped_gemm_fp8_kernel.h"
#include "sluice/backend/cuda/kernels/moe_kernels.h"
#include "sluice/backend/cuda/lt_gemm.h"
#include "sluice/backend/float_convert.h"
#include "bench_cuda.h"
#include "bench_must.h"

namespace sluice {
namespace {

constexpr double kFp8Peak = 1979e12, kBf16Peak = 790e12;  // FP8 spec; bf16 as measured (DEVICE.md)

template <typename T>
T* device_copy(const std::vector<T>& host) {
  T* p = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&p), host.size() * sizeof(T)), "cudaMalloc");
  check(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  return p;
}

std::vector<float> download_bf16(const void* device, std::int64_t count) {
  std::vector<std::uint16_t> bits(static_cast<std::size_t>(count));
  check(cudaMemcpy(bits.data(), device, bits.size() * 2, cudaMemcpyDeviceToHost), "download");
  std::vector<float> values(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) values[i] = bf16_to_f32(bits[i]);
  return values;
}

struct DenseShape {
  const char* name;
  std::int64_t n, k;
};

}  // namespace

void bench_fp8_dense() {
  const DenseShape shapes[] = {{"V3 dense gate|up", 18432, 7168}, {"V3 dense down", 7168, 18432},
                               {"V4 wq_b", 32768, 1024},          {"V4 wo_b", 4096, 8192}};
  const cuda::GroupedGemmFp8Kernel kernels[] = {cuda::GroupedGemmFp8Kernel::tma,
                                                cuda::GroupedGemmFp8Kernel::tma_weight_multicast,
                                                cuda::GroupedGemmFp8Kernel::tma_weight_multicast_n192};
  const std::unique_ptr<Ops> ops = must(make_cuda_ops(CudaOptions{}));  // prepares the kernels' shared memory
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  cuda::LtGemm lt(stream, 32LL << 20);
  const cuda::Launch launch{.stream = stream, .programmatic = false};
  std::printf("| shape (m x n x k) | bf16 cuBLASLt | FP8 cuBLASLt (quantize + GEMM) | FP8 cuBLASLt, roles swapped "
              "(out^T) |");
  for (auto kernel : kernels) std::printf(" ws %s |", std::string(cuda::name_of(kernel)).c_str());
  std::printf(" swap-ab | bf16 cuBLASLt, best of its algorithms | FP8 cuBLASLt, best of its algorithms |"
              "\n|---|---|---|---|---|---|---|");
  for (std::size_t i = 0; i < std::size(kernels); ++i) std::printf("---|");
  std::printf("\n");
  // The quantized rows and the one-group plan, sized for the largest shape.
  constexpr std::int64_t kMaxRows = 8192, kMaxK = 18432;
  void* q = nullptr;
  float* q_scales = nullptr;
  check(cudaMalloc(&q, kMaxRows * kMaxK), "q");
  check(cudaMalloc(reinterpret_cast<void**>(&q_scales), static_cast<std::size_t>(kMaxRows * (kMaxK / 128) * 4)),
        "q scales");
  // One group: tiles of 128 rows in order (consecutive pairs share the group,
  // as the paired order of tma_weight_multicast wants).
  std::vector<std::int32_t> firsts(kMaxRows / 128);
  for (std::size_t t = 0; t < firsts.size(); ++t) firsts[t] = static_cast<std::int32_t>(t) * 128;
  std::int32_t* tile_expert = device_copy(std::vector<std::int32_t>(firsts.size(), 0));
  std::int32_t* tile_first_slot = device_copy(firsts);
  std::uint64_t seed = 900;
  for (std::int64_t m : {4096, 8192}) {
    std::int32_t* offsets = device_copy(std::vector<std::int32_t>{0, static_cast<std::int32_t>(m)});
    // The swapped kernel's plan of the group (MoeTileOrder::by_expert_balanced).
    const std::int32_t swap_rows = cuda::balanced_tile_rows(static_cast<std::int32_t>(m), cuda::kSwapTileRows);
    const std::int32_t swap_tiles = cuda::balanced_tiles(static_cast<std::int32_t>(m), cuda::kSwapTileRows);
    std::vector<std::int32_t> swap_firsts(static_cast<std::size_t>(swap_tiles));
    for (std::int32_t t = 0; t < swap_tiles; ++t) swap_firsts[static_cast<std::size_t>(t)] = t * swap_rows;
    std::int32_t* swap_expert = device_copy(std::vector<std::int32_t>(swap_firsts.size(), 0));
    std::int32_t* swap_first_slot = device_copy(swap_firsts);
    for (const DenseShape& s : shapes) {
      const double flops = 2.0 * m * s.n * s.k;
      const Tensor w16 = must(cuda_random_weight(*ops, {s.n, s.k}, DType::bf16, ++seed, 0.02f));
      const Tensor w8 = must(cuda_random_fp8_weight(*ops, {s.n, s.k}, ++seed, 1e-3f));
      const Tensor x = must(cuda_random_weight(*ops, {m, s.k}, DType::bf16, ++seed, 1.0f));
      const Tensor out = must(cuda_random_weight(*ops, {m, s.n}, DType::bf16, ++seed, 1.0f));
      check(cudaDeviceSynchronize(), "operands made on the Ops' stream");
      auto quantize = [&] {
        cuda::launch_quantize_fp8_rows({.x = x.data, .rows = m, .padded_rows = m, .k = s.k, .q = q,
                                        .scales = q_scales},
                                       launch);
      };
      const auto tiles = static_cast<std::int32_t>(m / 128);
      const cuda::GroupedGemmFp8Args args{.a = q, .a_scales = q_scales, .a_scale_stride = m,
                                          .w = w8.data, .w_rows = s.n, .w_scales = w8.scales.data,
                                          .w_scale_row_stride = w8.scales.row_stride, .tile_expert = tile_expert,
                                          .tile_first_slot = tile_first_slot, .expert_offsets = offsets,
                                          .max_tiles = tiles, .tile_rows = 128, .n = s.n, .k = s.k,
                                          .epilogue = cuda::GroupedEpilogue::store, .out = out.data};
      auto cell = [&](double t, double peak, const char* of) {
        char buf[96];
        std::snprintf(buf, sizeof buf, "%.0f TFLOP/s (%.0f%% of %s), %.3f ms", flops / t / 1e12,
                      100.0 * flops / t / peak, of, t * 1e3);
        return std::string(buf);
      };
      const double t_bf16 = median_seconds(stream, [&] {
        lt.run(x.data, w16.data, out.data, DType::bf16, m, s.n, s.k);
      });
      // Each FP8 product against cuBLASLt's plain one, entry by entry (the
      // swapped one holds out^T), so a fast row that is wrong shows it.
      std::vector<float> plain;
      const auto matches_plain = [&](bool transposed) {
        if (plain.empty()) return std::string("; unchecked (no plain product)");
        check(cudaStreamSynchronize(stream), "the FP8 GEMM");
        const std::vector<float> got = download_bf16(out.data, m * s.n);
        double worst = 0.0;
        for (std::int64_t r = 0; r < m; ++r)
          for (std::int64_t c = 0; c < s.n; ++c)
            worst = std::max(worst, static_cast<double>(std::fabs(plain[r * s.n + c] -
                                                                  got[transposed ? c * m + r : r * s.n + c])));
        char buf[64];
        std::snprintf(buf, sizeof buf, "; vs plain: max |d| %.3g", worst);
        return std::string(buf);
      };
      std::printf("| %s %lldx%lldx%lld | %s |", s.name, static_cast<long long>(m), static_cast<long long>(s.n),
                  static_cast<long long>(s.k), cell(t_bf16, kBf16Peak, "790").c_str());
      for (const bool swapped : {false, true}) {
        bool lt_ran = true;
        const double t_lt = median_seconds(stream, [&] {
          quantize();
          lt_ran = lt_ran && lt.run_fp8_block_scaled({.q = q, .q_scales = q_scales, .w = w8.data,
                                                      .w_scales = w8.scales.data, .out = out.data,
                                                      .out_dtype = DType::bf16, .m = m, .n = s.n, .k = s.k,
                                                      .activations_as_a = swapped});
        });
        if (!lt_ran) {
          std::printf(" refused |");
          continue;
        }
        if (!swapped) {  // the plain product, the reference of the other FP8 rows
          check(cudaStreamSynchronize(stream), "the FP8 GEMM");
          plain = download_bf16(out.data, m * s.n);
        }
        std::printf(" %s, %.2fx bf16%s |", cell(t_lt, kFp8Peak, "1979").c_str(), t_bf16 / t_lt,
                    swapped ? matches_plain(true).c_str() : "");
      }
      for (auto kernel : kernels) {
        if (!cuda::grouped_gemm_fp8_ws_supports(kernel, args)) {
          std::printf(" not taken |");
          continue;
        }
        const double t = median_seconds(stream, [&] {
          quantize();
          cuda::launch_grouped_gemm_fp8_ws(args, kernel, launch);
        });
        std::printf(" %s, %.2fx bf16%s |", cell(t, kFp8Peak, "1979").c_str(), t_bf16 / t,
                    matches_plain(false).c_str());
      }
      cuda::GroupedGemmFp8Args swap_args = args;
      swap_args.tile_expert = swap_expert;
      swap_args.tile_first_slot = swap_first_slot;
      swap_args.max_tiles = swap_tiles;
      swap_args.tile_rows = cuda::kSwapTileRows;
      if (cuda::grouped_gemm_fp8_swap_supports(swap_args)) {
        const double t = median_seconds(stream, [&] {
          quantize();
          cuda::launch_grouped_gemm_fp8_swap(swap_args, launch);
        });
        std::printf(" %s, %.2fx bf16%s |", cell(t, kFp8Peak, "1979").c_str(), t_bf16 / t,
                    matches_plain(false).c_str());
      } else {
        std::printf(" not taken |");
      }
      // The heuristic's other algorithms: rank 1 asks for all of them (found),
      // each rank timed alone; the best against rank 0's time (t_rank0). ran,
      // where given, is cleared by a run its algorithm refused (FP8: nothing
      // enqueued, so its time says nothing).
      struct Best {
        double seconds;
        int rank, found;
      };
      const auto best_of_ranks = [&](const std::function<void()>& run, double t_rank0, bool* ran) {
        Best best{t_rank0, 0, 1};
        for (int rank = 1; rank < cuda::LtGemm::kHeuristicAlgos; ++rank) {
          lt.set_algo_rank(rank);
          if (ran != nullptr) *ran = true;
          const double t = median_seconds(stream, run);
          if (rank == 1) best.found = lt.heuristic_found();
          if (rank >= best.found) break;  // the plan repeated the last algorithm
          if ((ran == nullptr || *ran) && t < best.seconds) best = {t, rank, best.found};
        }
        lt.set_algo_rank(0);
        return best;
      };
      const Best bf16_best = best_of_ranks([&] { lt.run(x.data, w16.data, out.data, DType::bf16, m, s.n, s.k); },
                                           t_bf16, nullptr);
      std::printf(" %s (rank %d of %d) |", cell(bf16_best.seconds, kBf16Peak, "790").c_str(), bf16_best.rank,
                  bf16_best.found);
      bool fp8_ran = true;
      const auto fp8_plain = [&] {
        quantize();
        fp8_ran = fp8_ran && lt.run_fp8_block_scaled({.q = q, .q_scales = q_scales, .w = w8.data,
                                                      .w_scales = w8.scales.data, .out = out.data,
                                                      .out_dtype = DType::bf16, .m = m, .n = s.n, .k = s.k});
      };
      const double t_fp8_rank0 = median_seconds(stream, fp8_plain);
      const bool rank0_ran = fp8_ran;
      const Best fp8_best = rank0_ran ? best_of_ranks(fp8_plain, t_fp8_rank0, &fp8_ran) : Best{0.0, 0, 0};
      if (!rank0_ran) {
        std::printf(" refused |");
      } else {
        // The best rank's product against the plain one (rank 0's).
        lt.set_algo_rank(fp8_best.rank);
        fp8_ran = true;
        fp8_plain();
        lt.set_algo_rank(0);
        std::printf(" %s (rank %d of %d), %.2fx the best bf16%s |", cell(fp8_best.seconds, kFp8Peak, "1979").c_str(),
                    fp8_best.rank, fp8_best.found, bf16_best.seconds / fp8_best.seconds, matches_plain(false).c_str());
      }
      std::printf("\n");
      std::fflush(stdout);
    }
    check(cudaStreamSynchronize(stream), "the launches at this m");
    for (void* p : {static_cast<void*>(offsets), static_cast<void*>(swap_expert), static_cast<void*>(swap_first_slot)})
      cudaFree(p);
  }
  for (void* p : {q, static_cast<void*>(q_scales), static_cast<void*>(tile_expert), static_cast<void*>(tile_first_slot)})
    cudaFree(p);
  const std::string& refusal = lt.fp8_counts().last_refusal;
  if (!refusal.empty()) std::fprintf(stderr, "cuBLASLt's last refusal: %s\n", refusal.c_str());
  cudaStreamDestroy(stream);
}

}  // namespace sluice
