// cuda_bench --fp8-gemv: the decode-size FP8 block-scaled GEMMs of the
// DeepSeek dense linears (V4-Flash's and V3's shapes) at m = 1, 4, 16 rows,
// three ways: the split-K FP8 GEMV (kernels/fp8_gemv.h; its heuristic's
// split, then each forced split of K parts x stripes for calibration, the
// sweep to stderr), the grouped kernel in its
// one-group form (Fp8DenseGemm::kernel's path), and cuBLASLt's block-scaled
// FP8 GEMM (the rows quantized per 1x128 block, padded to 4: the quantize
// kernel is timed with it, as Fp8Matmul runs both).
//
// Timing: a CUDA graph of `kLaunches` launches, each on the next of several
// copies of the weight (together >= 512 MB, so L2 holds none of them from
// one launch to its next use), replayed; the median replay over the launches.
// Launches are programmatic (PDL) as in a decode step, so the GEMV's first
// weights load while the previous launch drains: what a step sees. Shares are
// the weight and scale bytes over the device copy timed at start.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sluice/backend/cuda/cuda_dtype.h"
#include "sluice/backend/cuda/cuda_ops.h"
#include "sluice/backend/cuda/kernels/fp8_gemv.h"
#include "sluice/backend/cuda/kernels/moe_kernels.h"
#include "sluice/backend/cuda/lt_gemm.h"
#include "bench_cuda.h"
#include "bench_must.h"
#include "device_ceilings.h"

namespace sluice {
namespace {

constexpr int kLaunches = 64;

// Median seconds per launch of `enqueue(copy)` over a graph of kLaunches launches.
double time_per_launch(cudaStream_t stream, int copies, const std::function<void(int)>& enqueue) {
  enqueue(0);  // plans and module loads outside the capture
  check(cudaStreamSynchronize(stream), "warm-up");
  cudaGraph_t graph = nullptr;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
  for (int i = 0; i < kLaunches; ++i) enqueue(i % copies);
  check(cudaStreamEndCapture(stream, &graph), "end capture");
  cudaGraphExec_t exec = nullptr;
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  const double seconds = median_seconds(stream, [&] { check(cudaGraphLaunch(exec, stream), "replay"); });
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return seconds / kLaunches;
}

struct GemvShape {
  const char* name;
  std::int64_t n, k;
};

}  // namespace

void bench_fp8_gemv() {
  // V4-Flash (hidden 4096, q_lora 1024, latent 512, 64 x 512 heads, 8 x 1024
  // output groups, shared expert 2048) and V3 (hidden 7168, q_lora 1536,
  // kv_lora 512 + 64, 128 x 192 q heads, 128 x 256 kv_b, shared expert 2048,
  // dense MLP 18432).
  const GemvShape shapes[] = {
      {"V4 wq_a / wo_a group", 1024, 4096}, {"V4 wkv", 512, 4096},       {"V4 wq_b", 32768, 1024},
      {"V4 wo_b", 4096, 8192},              {"V4 shared w1|w3", 4096, 4096}, {"V4 shared w2", 4096, 2048},
      {"V3 q_a", 1536, 7168},               {"V3 kv_a", 576, 7168},      {"V3 q_b", 24576, 1536},
      {"V3 kv_b", 32768, 512},              {"V3 o_proj", 7168, 16384},  {"V3 shared gate|up", 4096, 7168},
      {"V3 shared down", 7168, 2048},       {"V3 dense down", 7168, 18432},
  };
  const std::unique_ptr<Ops> ops = must(make_cuda_ops(CudaOptions{}));
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  cuda::LtGemm lt(stream, 32LL << 20);
  const cuda::Launch launch{.stream = stream, .programmatic = true};
  constexpr std::int64_t kMaxRows = 16;
  std::printf("| shape (n x k) | m | FP8 GEMV (its split: parts x stripes) | best forced split | grouped kernel | cuBLASLt FP8 "
              "(quantize + GEMM) | GEMV vs grouped / cuBLASLt |\n|---|---|---|---|---|---|---|\n");
  std::uint64_t seed = 700;
  for (const GemvShape& s : shapes) {
    const double weight_bytes = static_cast<double>(s.n) * s.k;
    const double bytes = weight_bytes + 4.0 * ((s.n + 127) / 128) * ((s.k + 127) / 128);
    const int copies = static_cast<int>(std::clamp((512e6 + weight_bytes - 1) / weight_bytes, 2.0, 64.0));
    std::vector<Tensor> w;
    for (int i = 0; i < copies; ++i) w.push_back(must(cuda_random_fp8_weight(*ops, {s.n, s.k}, ++seed, 1e-2f)));
    const Tensor x = must(cuda_random_weight(*ops, {kMaxRows, s.k}, DType::bf16, ++seed, 1.0f));
    const Tensor out = must(cuda_random_weight(*ops, {kMaxRows, s.n}, DType::bf16, ++seed, 1.0f));
    void* q = nullptr;
    float* q_scales = nullptr;
    check(cudaDeviceSynchronize(), "weights made on the Ops' stream");
    check(cudaMalloc(&q, kMaxRows * s.k), "q");
    check(cudaMalloc(reinterpret_cast<void**>(&q_scales), static_cast<std::size_t>(kMaxRows * ((s.k + 127) / 128) * 4)), "q scales");
    for (std::int64_t m : {1, 4, 16}) {
      auto gemv = [&](cuda::Fp8GemvSplit split) {
        return [&, split](int i) {
          cuda::launch_fp8_gemv({.x = x.data,
                                 .w = static_cast<const std::uint8_t*>(w[i].data),
                                 .w_scales = w[i].scales.data,
                                 .w_scale_row_stride = w[i].scales.row_stride,
                                 .m = m,
                                 .n = s.n,
                                 .k = s.k,
                                 .out = out.data,
                                 .out_dt = cuda::dt_of(DType::bf16),
                                 .k_parts = split.k_parts,
                                 .stripes = split.stripes},
                                launch);
        };
      };
      const cuda::Fp8GemvSplit chosen = cuda::fp8_gemv_split_on_device(m, s.n, s.k);
      const double t_auto = time_per_launch(stream, copies, gemv({.k_parts = 0, .stripes = 0}));
      double t_best = 1e30;
      cuda::Fp8GemvSplit best{};
      std::string sweep;
      for (std::int32_t stripes : {1, 2, 4})
        for (std::int32_t parts : {1, 2, 4, 6, 8, 12, 16}) {
          if (parts > (s.k + 127) / 128 || parts * stripes > cuda::kFp8GemvMaxBlockWarps) continue;
          const double t = time_per_launch(stream, copies, gemv({.k_parts = parts, .stripes = stripes}));
          char buf[48];
          std::snprintf(buf, sizeof buf, " %dx%d:%.1f", parts, stripes, t * 1e6);
          sweep += buf;
          if (t < t_best) {
            t_best = t;
            best = {.k_parts = parts, .stripes = stripes};
          }
        }
      const double t_grouped = time_per_launch(stream, copies, [&](int i) {
        cuda::launch_grouped_gemm({.x = x.data,
                                   .w = w[i].data,
                                   .w_fp8 = true,
                                   .w_scales = w[i].scales.data,
                                   .w_scale_row_stride = w[i].scales.row_stride,
                                   .num_slots = static_cast<std::int32_t>(m),
                                   .tile_rows = cuda::grouped_gemm_tile_rows(m, 1),
                                   .n = s.n,
                                   .k = s.k,
                                   .epilogue = cuda::GroupedEpilogue::store,
                                   .out = out.data,
                                   .out_dt = cuda::dt_of(DType::bf16)},
                                  launch);
      });
      const std::int64_t padded_m = (m + 3) / 4 * 4;
      bool lt_ran = true;
      const double t_lt = time_per_launch(stream, copies, [&](int i) {
        cuda::launch_quantize_fp8_rows({.x = x.data, .rows = m, .padded_rows = padded_m, .k = s.k, .q = q,
                                        .scales = q_scales},
                                       launch);
        lt_ran = lt_ran && lt.run_fp8_block_scaled({.q = q,
                                                    .q_scales = q_scales,
                                                    .w = w[i].data,
                                                    .w_scales = w[i].scales.data,
                                                    .out = out.data,
                                                    .out_dtype = DType::bf16,
                                                    .m = padded_m,
                                                    .n = s.n,
                                                    .k = s.k});
      });
      auto cell = [&](double t) {
        char buf[96];
        std::snprintf(buf, sizeof buf, "%.2f us, %.2f TB/s (%.0f%%)", t * 1e6, bytes / t / 1e12,
                      100.0 * bytes / t / device_ceilings().hbm_copy);
        return std::string(buf);
      };
      std::printf("| %s %lldx%lld | %lld | %s, %dx%d | %dx%d: %s | %s | %s | %.2fx / %.2fx |\n", s.name,
                  static_cast<long long>(s.n), static_cast<long long>(s.k), static_cast<long long>(m),
                  cell(t_auto).c_str(), chosen.k_parts, chosen.stripes, best.k_parts, best.stripes,
                  cell(t_best).c_str(), cell(t_grouped).c_str(), lt_ran ? cell(t_lt).c_str() : "refused",
                  t_grouped / t_auto, t_lt / t_auto);
      std::fprintf(stderr, "sweep %s %lldx%lld m=%lld (parts x stripes: us):%s\n", s.name,
                   static_cast<long long>(s.n), static_cast<long long>(s.k), static_cast<long long>(m), sweep.c_str());
      std::fflush(stdout);
    }
    cudaFree(q);
    cudaFree(q_scales);
  }
  if (!lt.fp8_counts().last_refusal.empty())
    std::fprintf(stderr, "cuBLASLt's last refusal: %s\n", lt.fp8_counts().last_refusal.c_str());
  cudaStreamDestroy(stream);
}

}  // namespace sluice
