// Benchmarks of the CUDA backend on Llama-3-8B shapes with random bf16
// weights made on the GPU: the kernels alone (GEMM, prefill and decode
// attention) and whole steps through Ops (decode at batch 1 x 4k and 64 x 8k,
// prefill of 4k and 32k prompts). Prints one markdown row per number, with its
// share of the ceilings measured on the H200 (../shared/DEVICE.md).
//
// Usage: cuda_bench [--quick | --profile | --sampling | --attention | --prefill-attention | --decode |
//                   --decode1 | --chunk | --decode-sweep[-plans] [CASE] | --mla | --mla-decode [KERNELS] | --deepseek |
//                   --deepseek-moe-fp8 | --burst-step |
//                   --profile-burst | --gemm-rows | --overlap | --lane-decode | --chunk-pages |
//                   --deepseek-v4-kernels | --fp8-gemv | --fp8-dense]
// (--quick: smaller sizes, for a smoke run; --profile: a few eager steps for
// ncu; --sampling: the sampling rows only; --attention: the attention and model
// rows only; --prefill-attention [NAMES]: prefill attention alone under each
// kernel (or the comma-separated choices named), whole prompts and chunks over
// long prefixes; --decode: decode attention, GEMVs and decode steps; --decode1: the
// GEMV rows and batch-1 decode; --chunk: a prefill chunk over a long prefix;
// --decode-sweep: GQA decode attention at batch 8-64, contexts 8k-128k, mixed (one case if
// named: "8 x 8k"), merged in the split kernel and in the combine kernel; --decode-sweep-plans:
// the same under every split plan;
// --mla: DeepSeek-V3's MLA decode and prefill under each kernel choice;
// --mla-prefill: its prefill rows on tensor_core and through cuDNN (prompts of 8k
// and 32k; through cuDNN also chunks of 512-2,560 rows over 8k / 24k cached);
// --mla-decode [KERNELS]: its decode rows only (every tensor-core set, or the one named);
// --prefill-model [NAMES]: Llama-3-8B prefill of 4k/32k under wgmma-ws and cudnn (or those named);
// --deepseek: the FP8 GEMM and MoE layer rows of DeepSeek-V3's shapes; --deepseek-gemm: the FP8 GEMM rows only;
// --deepseek-moe-fp8 [KERNEL [PROBE [ORDER]]]: its MoE layer rows under fp8_wgmma only, under
// every 128-slot kernel or the one named (grouped_gemm_fp8_kernel.h's name_of; PROBE: none,
// weights, a or both, set_grouped_gemm_fp8_ws_bytes_probe, for ncu's DRAM bytes; loads-only or
// mmas-only, set_grouped_gemm_fp8_ws_path_probe, to time one side of the ring alone;
// ORDER: pairs, or couples for set_grouped_gemm_fp8_odd_couples;
// x gathered, then in slot order; each: decode (20 grouped_gemm_fp8 ring launches), then
// prefill of 4,096 and of 16,384 tokens (20 ws launches each), for ncu);
// --deepseek-v4-kernels: DeepSeek-V4's stage-3 kernels alone (deepseek_v4_bench.cpp);
// --fp8-gemv: decode-size FP8 block-scaled GEMMs of V4-Flash and V3 (fp8_gemv_bench.cpp);
// --fp8-dense: prefill-size ones, cuBLASLt against the MoE's ws kernels as one group (fp8_dense_bench.cpp);
// --burst-step: the burst's mixed steps and their parts; --profile-burst [N]: the
// same steps eagerly, twice each (or only shape N's mixed step), for ncu; --gemm-rows: Llama-3-8B's layer GEMMs
// at decode and mixed-step row counts; --overlap: the chats' decodes beside a
// 2,048-row chunk on two streams, by priority or SM partition; --lane-decode: the
// chats' decode step on a lane's SMs at 1-8 rows, GEMV against cuBLASLt;
// --chunk-pages: the burst's 8k-row chunks' attention by KV page size;
// --decode-sweep-pages [CASE]: the decode sweep's default plan at 16 and 64 tokens a page, beside the other tile layout;
// --decode-split-counts [CASE]: one case ("8 x 8k") with the uniform plan's splits fixed at 4-24, both layouts;
// --decode-sweep-loads [CASE [LOADS]]: the sweep's default beside its keys-as-rows kernel under each
// loader (CudaOptions::decode_split_loads), pages of 16 and 64, two rounds in alternation; with LOADS
// ("cp-async", "tma" or "tma-steal") that one only, one round, for ncu);
// --decode-timeline [CASE]: one case ("8 x 8k") under the default, pages of 16, each loader:
// the op timed, then one launch with the split kernel's blocks stamping %globaltimer (when each block
// started, its loads began, its first tile landed, its keys were done, it left).
//
// Every setting is a CudaOptions field set here, per row: the A/B rows name
// the option they change (cuda_options.h), each in a fresh Ops so no graph
// captured under another setting is replayed.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "sluice/backend/cuda/cuda_ops.h"
#include "sluice/backend/cuda/kernels/grouped_gemm_fp8_kernel.h"
#include "sluice/backend/cuda/kernels/kernels.h"
#include "sluice/backend/cuda/kernels/mla_kernels.h"
#include "sluice/backend/cuda/moe.h"
#include "bench_must.h"
#include "device_ceilings.h"

namespace sluice {
namespace {

// This card's HBM (device_ceilings.h): the copy timed at start, the driver's spec.
double hbm_copy() { return device_ceilings().hbm_copy; }
double hbm_spec() { return device_ceilings().hbm_spec; }
constexpr double kBf16FlopsPerSecond = 790e12;  // cuBLASLt 8192^3, random data

void sync() {
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    std::fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(e));
    std::exit(1);
  }
}

// Median seconds of `fn` over `reps` runs after `warmup` runs; each run ends
// with a device synchronisation.
double time_median(int warmup, int reps, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  sync();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    sync();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void row(const std::string& what, double value, const char* unit, const std::string& share) {
  std::printf("| %s | %.4g %s | %s |\n", what.c_str(), value, unit, share.c_str());
  std::fflush(stdout);
}
std::string pct(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * x);
  return buf;
}

bool g_decode1 = false;    // --decode1: the GEMV rows and batch-1 decode only
bool g_decode = false;     // --decode: decode attention, decode steps and the split-KV variants only
bool g_decode_sweep_plans = false;  // --decode-sweep-plans: --decode-sweep under every split plan
bool g_use_graphs = true;  // --profile turns graphs off so a profiler sees each kernel
bool g_moe_fp8_wgmma_only = false;  // --deepseek-moe-fp8: the MoE layer's fp8_wgmma rows only (for ncu)
std::string g_moe_fp8_kernel;       // --deepseek-moe-fp8 NAME: only the rows of this 128-slot kernel (name_of)
// --prefill-attention / --chunk [NAME,NAME...]: the prefill attention choices
// whose rows run (kPrefillAttentionNames; empty: every one).
std::vector<std::string> g_prefill_kernels;
bool prefill_kernel_wanted(std::string_view name) {
  return g_prefill_kernels.empty() ||
         std::find(g_prefill_kernels.begin(), g_prefill_kernels.end(), name) != g_prefill_kernels.end();
}
// The defaults, but for graphs under --profile.
CudaOptions bench_options() {
  CudaOptions options;
  options.use_cuda_graphs = g_use_graphs;
  return options;
}
std::unique_ptr<Ops> new_ops(const CudaOptions& options = bench_options()) { return must(make_cuda_ops(options)); }

// The copy device_ceilings() timed at start: the "of HBM" shares' ceiling.
void bench_copy() {
  row("device copy 1 GiB (read+write), timed at start", hbm_copy() / 1e12, "TB/s",
      pct(hbm_copy() / hbm_spec()) + " of HBM spec");
}

void bench_gemm() {
  auto ops = new_ops();
  struct Shape3 {
    std::int64_t m, n, k;
  };
  std::uint64_t seed = 1;
  for (Shape3 s : {Shape3{8192, 8192, 8192}, Shape3{8192, 28672, 4096}, Shape3{8192, 4096, 14336},
                   Shape3{64, 28672, 4096}, Shape3{1, 28672, 4096}, Shape3{1, 4096, 14336}, Shape3{1, 6144, 4096},
                   Shape3{1, 4096, 4096},
                   Shape3{1, 128256, 4096}}) {
    if (g_decode1 && s.m > 4) continue;
    StepLayout layout;
    ops->begin_step(layout);
    const Tensor x = must(cuda_random_weight(*ops, {s.m, s.k}, DType::bf16, ++seed, 1.0f));
    // Rotate over weight copies so that small GEMMs do not run from L2.
    const int copies = s.m <= 64 ? 4 : 1;
    std::vector<Tensor> ws;
    for (int c = 0; c < copies; ++c) ws.push_back(must(cuda_random_weight(*ops, {s.n, s.k}, DType::bf16, ++seed, 0.05f)));
    const Tensor out = must(cuda_random_weight(*ops, {s.m, s.n}, DType::bf16, ++seed, 1.0f));
    // Rows of at most 4 run the own GEMV.
    int i = 0;
    const int inner = 20;
    const double t = time_median(3, 9, [&] {
                       for (int r = 0; r < inner; ++r) ops->matmul(x, ws[(i++) % copies], Tensor{}, out);
                     }) / inner;
    const double flops = 2.0 * s.m * s.n * s.k;
    const double bytes = 2.0 * (s.m * s.k + s.n * s.k + s.m * s.n);
    char name[96];
    std::snprintf(name, sizeof name, "GEMM %lldx%lldx%lld (M x N x K)%s", static_cast<long long>(s.m),
                  static_cast<long long>(s.n), static_cast<long long>(s.k), s.m <= 4 ? ", GEMV" : "");
    if (s.m >= 1024)
      row(name, flops / t / 1e12, "TFLOP/s", pct(flops / t / kBf16FlopsPerSecond) + " of 790");
    else
      row(name, bytes / t / 1e12, "TB/s", pct(bytes / t / hbm_copy()) + " of HBM");
  }
}

// bf16 GEMMs of Llama-3-8B's layer at the row counts of decode batches and of
// a burst's mixed steps (a chunk of 128-1024 rows plus the chats): what a
// step that reads every weight once at a few hundred rows pays. Bytes are the
// weight, x and out; the weights rotate over copies so no row runs from L2.
void bench_gemm_rows() {
  struct Shape2 {
    const char* what;
    std::int64_t n, k;
  };
  const Shape2 shapes[] = {{"q|k|v", 6144, 4096}, {"o_proj", 4096, 4096}, {"gate|up", 28672, 4096},
                           {"down", 4096, 14336}};
  auto ops = new_ops();
  std::uint64_t seed = 1;
  for (const Shape2& s : shapes) {
    constexpr int kCopies = 3;
    std::vector<Tensor> ws;
    StepLayout layout;
    ops->begin_step(layout);
    for (int c = 0; c < kCopies; ++c)
      ws.push_back(must(cuda_random_weight(*ops, {s.n, s.k}, DType::bf16, ++seed, 0.05f)));
    // 256 / 264, 512 / 520, 1024 / 1032: whether a step's rows past a tile
    // multiple (a chunk of whole tiles plus the chats) pay for a whole tile row.
    for (const std::int64_t m : {8, 64, 128, 136, 248, 256, 264, 384, 392, 504, 512, 520, 1016, 1024, 1032, 2056, 4096}) {
      const Tensor x = must(cuda_random_weight(*ops, {m, s.k}, DType::bf16, ++seed, 1.0f));
      const Tensor out = must(cuda_random_weight(*ops, {m, s.n}, DType::bf16, ++seed, 1.0f));
      int i = 0;
      const double t = time_median(3, 9, [&] {
        for (int r = 0; r < kCopies * 4; ++r) ops->matmul(x, ws[(i++) % kCopies], Tensor{}, out);
      }) / (kCopies * 4);
      const double bytes = 2.0 * (m * s.k + s.n * s.k + m * s.n);
      const double flops = 2.0 * m * s.n * s.k;
      char name[128];
      std::snprintf(name, sizeof name, "GEMM %s %lldx%lldx%lld (%.3f ms)", s.what, static_cast<long long>(m),
                    static_cast<long long>(s.n), static_cast<long long>(s.k), t * 1e3);
      row(name, bytes / t / 1e12, "TB/s",
          pct(bytes / t / hbm_spec()) + " of HBM spec; " + pct(flops / t / kBf16FlopsPerSecond) +
              " of 790 TFLOP/s");
    }
  }
}

// DeepSeek-V3 shapes (issue 15). FP8 block-scaled dense GEMMs (cuBLASLt and
// our grouped kernel) against our bf16 GEMM at M = 4096 on the dense MLP's
// shapes; one MoE layer (256 experts top 8, hidden 7168, moe_intermediate
// 2048, routing included) at decode batch 64, counted in bytes of the experts
// the routing touched, and at a 4096-token prefill in FLOPs.
constexpr double kFp8FlopsPerSecond = 1979e12;  // H200 FP8 dense peak (spec)

// Which GEMMs cuBLASLt's block-scaled path took in this Ops (none asked: empty),
// so a row never reports the fallback's speed under cuBLASLt's name; the
// first refusal's reason goes to stderr once.
std::string lt_path_note(const Ops& ops) {
  const cuda::Fp8GemmCounts counts = must(cuda_fp8_gemm_counts(ops));
  if (counts.num_cublaslt + counts.num_refused == 0) return "";
  static bool reason_printed = false;
  if (counts.num_refused > 0 && !reason_printed) {
    std::fprintf(stderr, "cuBLASLt refused a block-scaled GEMM: %s\n", counts.last_refusal.c_str());
    reason_printed = true;
  }
  return "; cuBLASLt ran " + std::to_string(counts.num_cublaslt) + " of " +
         std::to_string(counts.num_cublaslt + counts.num_refused) + " GEMMs";
}

void bench_deepseek_gemm(bool quick) {
  const std::int64_t m = quick ? 1024 : 4096;
  struct Nk {
    std::int64_t n, k;
  };
  for (Nk s : {Nk{18432, 7168}, Nk{7168, 18432}}) {
    double t_bf16 = 0.0;
    const double flops = 2.0 * m * s.n * s.k;
    for (int variant = 0; variant < 3; ++variant) {  // bf16, FP8 cuBLASLt, FP8 kernel
      CudaOptions options = bench_options();
      options.fp8_dense_gemm = variant == 2 ? cuda::Fp8DenseGemm::kernel : cuda::Fp8DenseGemm::cublaslt;
      auto ops = new_ops(options);
      StepLayout layout;
      ops->begin_step(layout);
      const Tensor x = must(cuda_random_weight(*ops, {m, s.k}, DType::bf16, 31, 1.0f));
      const Tensor w = variant == 0 ? must(cuda_random_weight(*ops, {s.n, s.k}, DType::bf16, 32, 0.05f))
                                    : must(cuda_random_fp8_weight(*ops, {s.n, s.k}, 32, 1e-3f));
      const Tensor out = must(cuda_random_weight(*ops, {m, s.n}, DType::bf16, 33, 1.0f));
      // The FP8 path takes scratch (quantized activations) each call: a step per call.
      const double t = time_median(2, 7, [&] {
        ops->begin_step(layout);
        ops->matmul(x, w, Tensor{}, out);
      });
      char name[128];
      static const char* kVariant[] = {"bf16", "FP8 block-scaled, cuBLASLt", "FP8 block-scaled, grouped kernel"};
      std::snprintf(name, sizeof name, "DeepSeek GEMM %lldx%lldx%lld %s", static_cast<long long>(m),
                    static_cast<long long>(s.n), static_cast<long long>(s.k), kVariant[variant]);
      if (variant == 0) {
        t_bf16 = t;
        row(name, flops / t / 1e12, "TFLOP/s", pct(flops / t / kBf16FlopsPerSecond) + " of 790");
      } else {
        char ratio[64];
        std::snprintf(ratio, sizeof ratio, "%.2fx bf16, ", t_bf16 / t);
        row(name, flops / t / 1e12, "TFLOP/s",
            ratio + pct(flops / t / kFp8FlopsPerSecond) + " of 1979" + lt_path_note(*ops));
      }
    }
  }
}

void bench_deepseek_moe(bool quick) {
  constexpr std::int32_t kExperts = 256, kTopK = 8, kGroups = 8, kGroupsSelected = 4;
  constexpr std::int64_t kHidden = 7168, kInter = 2048;
  const MoeRouting routing{.num_experts = kExperts, .num_experts_per_token = kTopK, .num_groups = kGroups,
                           .num_groups_selected = kGroupsSelected, .normalize = true, .scale = 2.5f};
  // FP8 under both expert GEMMs (the grouped kernel on bf16-dequantized
  // weights, and fp8_wgmma), then bf16.
  // fp8_wgmma under each kernel of its 128-slot tiles (prefill): the
  // warp-specialised ones (cp.async or TMA loads, the weight tile multicast to
  // a cluster of two on the paired plan, at 128 or 192 weight rows), the swapped one
  // (its balanced tiles of up to 192 slots; with x gathered it runs the ring kernel) and the ring kernel
  // (grouped_gemm_fp8_kernel.h); decode's 64-slot tiles run the ring kernel under all.
  struct Variant {
    bool fp8;
    cuda::MoeExpertGemm gemm;
    cuda::GroupedGemmFp8Kernel kernel = cuda::GroupedGemmFp8Kernel::warp_specialized;
  };
  const cuda::GroupedGemmFp8Kernel default_kernel = cuda::grouped_gemm_fp8_kernel();
  const bool default_by_slot = cuda::moe_fp8_x_by_slot();
  for (Variant v : {Variant{true, cuda::MoeExpertGemm::fp8_wgmma, cuda::GroupedGemmFp8Kernel::warp_specialized},
                    Variant{true, cuda::MoeExpertGemm::fp8_wgmma, cuda::GroupedGemmFp8Kernel::tma},
                    Variant{true, cuda::MoeExpertGemm::fp8_wgmma, cuda::GroupedGemmFp8Kernel::tma_weight_multicast},
                    Variant{true, cuda::MoeExpertGemm::fp8_wgmma, cuda::GroupedGemmFp8Kernel::tma_weight_multicast_n192},
                    Variant{true, cuda::MoeExpertGemm::fp8_wgmma, cuda::GroupedGemmFp8Kernel::swap_ab},
                    Variant{true, cuda::MoeExpertGemm::fp8_wgmma, cuda::GroupedGemmFp8Kernel::ring},
                    Variant{true, cuda::MoeExpertGemm::grouped}, Variant{false, cuda::MoeExpertGemm::grouped}}) {
    if (g_moe_fp8_wgmma_only && !(v.fp8 && v.gemm == cuda::MoeExpertGemm::fp8_wgmma)) continue;
    if (!g_moe_fp8_kernel.empty() && cuda::name_of(v.kernel) != g_moe_fp8_kernel) continue;
    const bool fp8 = v.fp8;
    cuda::set_grouped_gemm_fp8_kernel(v.kernel);
    CudaOptions options = bench_options();
    options.moe_expert_gemm = v.gemm;
    auto ops = new_ops(options);
    StepLayout empty;
    ops->begin_step(empty);
    auto weight = [&](Shape shape, std::uint64_t seed) {
      return fp8 ? must(cuda_random_fp8_weight(*ops, shape, seed, 1e-3f))
                 : must(cuda_random_weight(*ops, shape, DType::bf16, seed, 0.02f));
    };
    const MoeExpertWeights experts{.gate_up = weight({kExperts * 2 * kInter, kHidden}, 41),
                                   .down = weight({kExperts * kHidden, kInter}, 42)};
    const Tensor bias = must(cuda_random_weight(*ops, {kExperts}, DType::f32, 43, 0.1f));
    const double weight_bytes_per_expert = 3.0 * kInter * kHidden * (fp8 ? 1.0 : 2.0);
    // fp8_wgmma: x gathered by gate_up, then x quantized into slot order (session 35).
    const bool wgmma = fp8 && v.gemm == cuda::MoeExpertGemm::fp8_wgmma;
    for (const bool by_slot : {false, true})
    // 16,384 tokens (wgmma only): ~4x the rows an expert, where the tiles fill and each weight
    // tile serves more of them; the issue's row is 4,096.
    for (std::int32_t rows : quick ? std::vector<std::int32_t>{64, 1024} : std::vector<std::int32_t>{64, 4096, 16384}) {
      if (rows == 16384 && !wgmma) continue;
      if ((!fp8 && rows > 64 && quick) || (by_slot && !wgmma)) continue;
      cuda::set_moe_fp8_x_by_slot(by_slot);
      StepLayout layout;
      layout.token_ids.assign(static_cast<std::size_t>(rows), 0);
      layout.positions.assign(static_cast<std::size_t>(rows), 0);
      layout.sequences.push_back({.row_begin = 0, .num_rows = rows, .num_computed_tokens = 0, .block_table = {}});
      const Tensor x = must(cuda_random_weight(*ops, {rows, kHidden}, DType::bf16, 44, 1.0f));
      const Tensor logits = must(cuda_random_weight(*ops, {rows, kExperts}, DType::f32, 45, 2.0f));
      const Tensor out = must(cuda_random_weight(*ops, {rows, kHidden}, DType::bf16, 46, 1.0f));
      std::vector<std::int32_t> ids(static_cast<std::size_t>(rows) * kTopK);
      auto layer = [&](bool read_ids) {
        ops->begin_step(layout);
        const MoeAssignment assignment{.expert_ids = ops->scratch({rows, kTopK}, DType::i32),
                                       .expert_weights = ops->scratch({rows, kTopK}, DType::f32)};
        if (!ops->moe_route(logits, bias, routing, assignment).ok() ||
            !ops->moe_experts(x, experts, assignment, out).ok())
          std::exit(1);
        if (!read_ids) return;
        sync();
        cudaMemcpy(ids.data(), assignment.expert_ids.data, ids.size() * 4, cudaMemcpyDeviceToHost);
      };
      layer(true);
      std::vector<std::int32_t> slots(kExperts, 0);
      for (std::int32_t id : ids) ++slots[static_cast<std::size_t>(id)];
      const auto num_touched = std::count_if(slots.begin(), slots.end(), [](std::int32_t c) { return c > 0; });
      const std::int32_t max_slots = *std::max_element(slots.begin(), slots.end());
      const double t = time_median(2, 7, [&] { layer(false); });
      char name[192];
      const std::string wgmma_name = "FP8 wgmma grouped kernel (" + std::string(cuda::name_of(v.kernel)) +
                                     (by_slot ? ", x in slot order)" : ")");
      const char* dtype = !fp8                                       ? "bf16"
                          : v.gemm == cuda::MoeExpertGemm::fp8_wgmma ? wgmma_name.c_str()
                                                                     : "FP8 grouped kernel";
      if (rows == 64) {
        const double bytes = static_cast<double>(num_touched) * weight_bytes_per_expert;
        std::snprintf(name, sizeof name, "MoE layer %s decode batch 64 (%lld experts touched, routing included)",
                      dtype, static_cast<long long>(num_touched));
        row(name, bytes / t / 1e12, "TB/s", pct(bytes / t / hbm_copy()) + " of HBM");
      } else {
        // Prefill reads every touched expert's weights once at best: their
        // rate is the HBM side of this row (at 4096 x top 8, ~128 slots an
        // expert, FP8 weights give 256 flop a byte, under the 412 of 1979 / 4.8 TB/s).
        const double flops = 2.0 * rows * kTopK * 3.0 * kInter * kHidden;
        const double bytes = static_cast<double>(num_touched) * weight_bytes_per_expert;
        std::snprintf(name, sizeof name, "MoE layer %s prefill %d tokens (%lld experts, at most %d slots; routing included)",
                      dtype, rows, static_cast<long long>(num_touched), max_slots);
        // The 128-slot tiles the experts' rows fill: the tensor work the
        // grouped kernels run is the tiles', not the rows'. A consumer whose
        // 64 rows of a tile hold no slot skips its MMAs, so the rows issued
        // go by 64. The swapped kernel's columns go by 16 tokens of each
        // balanced tile of up to 192.
        std::int64_t tiles = 0, halves = 0, swap_columns = 0;
        for (std::int32_t c : slots) {
          tiles += (c + 127) / 128;
          halves += (c + 63) / 64;
          const std::int32_t tile_rows = cuda::balanced_tile_rows(c, cuda::kSwapTileRows);
          for (std::int32_t first = 0; first < c; first += tile_rows)
            swap_columns += (std::min(tile_rows, c - first) + 15) / 16 * 16;
        }
        const double routed = static_cast<double>(rows) * kTopK;
        char weights_rate[240];
        std::snprintf(weights_rate, sizeof weights_rate,
                      "; weights %.2f TB/s, %s of HBM; %.3f ms; %lld tiles, %s filled (%s of the 64-row halves issued; "
                      "%s of the swapped kernel's token columns)",
                      bytes / t / 1e12, pct(bytes / t / hbm_copy()).c_str(), t * 1e3, static_cast<long long>(tiles),
                      pct(routed / (128.0 * static_cast<double>(tiles))).c_str(),
                      pct(routed / (64.0 * static_cast<double>(halves))).c_str(),
                      pct(routed / static_cast<double>(swap_columns)).c_str());
        row(name, flops / t / 1e12, "TFLOP/s",
            fp8 ? pct(flops / t / kFp8FlopsPerSecond) + " of 1979" + weights_rate + lt_path_note(*ops)
                : pct(flops / t / kBf16FlopsPerSecond) + " of 790" + weights_rate);
      }
    }
  }
  cuda::set_grouped_gemm_fp8_kernel(default_kernel);
  cuda::set_moe_fp8_x_by_slot(default_by_slot);
}

// The decode GEMVs at batch 1 on Llama-3-8B shapes, through the ops a layer
// calls: o_proj and down_proj (matmul, split K in 2 parts) and q|k|v (one pass
// writing three tensors, split K in 4 parts) with the default split K, q|k|v
// again under GemvSplitK::two_parts, and gate|up with the SwiGLU epilogue.
void bench_fused_gemv() {
  constexpr std::int64_t kHidden = 4096, kQ = 4096, kKv = 1024, kInter = 14336;
  constexpr int kCopies = 4;  // rotated, so the weights do not come from L2
  for (const cuda::GemvSplitK split_k : {cuda::GemvSplitK::by_waves, cuda::GemvSplitK::two_parts}) {
    CudaOptions options = bench_options();
    options.gemv_split_k = split_k;
    auto ops = new_ops(options);
    const bool by_waves = split_k == cuda::GemvSplitK::by_waves;
    StepLayout layout;
    ops->begin_step(layout);
    const Tensor x = must(cuda_random_weight(*ops, {1, kHidden}, DType::bf16, 71, 1.0f));
    std::vector<Tensor> w_qkv, w_gate_up, w_o, w_down;
    for (int c = 0; c < kCopies; ++c) {
      w_qkv.push_back(must(cuda_random_weight(*ops, {kQ + 2 * kKv, kHidden}, DType::bf16, 72 + c, 0.05f)));
      if (!by_waves) continue;
      w_gate_up.push_back(must(cuda_random_weight(*ops, {2 * kInter, kHidden}, DType::bf16, 80 + c, 0.05f)));
      w_o.push_back(must(cuda_random_weight(*ops, {kHidden, kQ}, DType::bf16, 100 + c, 0.05f)));
      w_down.push_back(must(cuda_random_weight(*ops, {kHidden, kInter}, DType::bf16, 110 + c, 0.05f)));
    }
    const Tensor q = must(cuda_random_weight(*ops, {1, kQ}, DType::bf16, 90, 1.0f));
    const Tensor k = must(cuda_random_weight(*ops, {1, kKv}, DType::bf16, 91, 1.0f));
    const Tensor v = must(cuda_random_weight(*ops, {1, kKv}, DType::bf16, 92, 1.0f));
    const Tensor act = must(cuda_random_weight(*ops, {1, kInter}, DType::bf16, 93, 1.0f));
    const Tensor x_inter = must(cuda_random_weight(*ops, {1, kInter}, DType::bf16, 94, 1.0f));
    const Tensor proj_out = must(cuda_random_weight(*ops, {1, kHidden}, DType::bf16, 95, 1.0f));
    const std::array<Tensor, 3> no_bias{};
    // Each GEMV `inner` times back to back, rotating over the weight copies.
    auto time_gemv = [](const std::function<void(int copy)>& gemv) {
      int i = 0;
      const int inner = 20;
      return time_median(3, 9, [&] {
               for (int n = 0; n < inner; ++n) gemv((i++) % kCopies);
             }) / inner;
    };
    auto row_hbm = [](const std::string& name, double bytes, double t) {
      row(name, bytes / t / 1e12, "TB/s", pct(bytes / t / hbm_copy()) + " of HBM");
    };
    if (by_waves) {
      for (bool down : {false, true}) {
        const double t = time_gemv([&](int c) {
          ops->matmul(down ? x_inter : x, down ? w_down[c] : w_o[c], Tensor{}, proj_out);
        });
        row_hbm(down ? "down_proj GEMV 1x4096x14336, split K" : "o_proj GEMV 1x4096x4096, split K",
                2.0 * kHidden * (down ? kInter : kQ), t);
      }
    }
    const double t_qkv = time_gemv([&](int c) { ops->qkv_projection(x, w_qkv[c], no_bias, q, k, v); });
    row_hbm(by_waves ? "q|k|v GEMV 1x6144x4096 (split K in 4 parts)" : "q|k|v GEMV 1x6144x4096, split K in 2 parts",
            2.0 * kHidden * (kQ + 2 * kKv), t_qkv);
    if (by_waves) {
      const double t = time_gemv([&](int c) { ops->gate_up_silu(x, w_gate_up[c], Tensor{}, act); });
      row_hbm("gate|up SwiGLU GEMV 1x28672x4096", 2.0 * kHidden * 2 * kInter, t);
    }
  }
}

enum class AttentionRows { all, prefill_only, decode_only };

// Attention alone: one prefill sequence of `tokens`, or `batch` decodes at `context`.
void bench_attention(bool quick, AttentionRows rows = AttentionRows::all) {
  constexpr std::int32_t kBlock = 16, kHeads = 32, kDim = 128;
  const bool decode_only = rows == AttentionRows::decode_only;
  for (const auto& [kernel_name, kernel] : cuda::kPrefillAttentionNames) {
  for (std::int32_t kv_heads : {32, 8}) {
    if (decode_only || !prefill_kernel_wanted(kernel_name)) break;
    for (std::int32_t tokens : quick ? std::vector<std::int32_t>{4096} : std::vector<std::int32_t>{8192, 32768}) {
      CudaOptions options = bench_options();
      options.prefill_attention = kernel;
      auto ops = new_ops(options);
      const std::int32_t blocks = tokens / kBlock;
      if (!ops->allocate_kv_cache({.num_layers = 1, .num_blocks = blocks, .block_size_tokens = kBlock,
                                   .num_kv_heads = kv_heads, .head_dim = kDim}).ok())
        std::exit(1);
      StepLayout layout;
      SequenceLayout seq{.row_begin = 0, .num_rows = tokens, .num_computed_tokens = 0, .block_table = {}};
      for (std::int32_t b = 0; b < blocks; ++b) seq.block_table.push_back(b);
      layout.sequences.push_back(seq);
      for (std::int32_t t = 0; t < tokens; ++t) {
        layout.token_ids.push_back(0);
        layout.positions.push_back(t);
      }
      const Tensor q = must(cuda_random_weight(*ops, {tokens, kHeads * kDim}, DType::bf16, 11, 1.0f));
      const Tensor k = must(cuda_random_weight(*ops, {tokens, kv_heads * kDim}, DType::bf16, 12, 1.0f));
      const Tensor v = must(cuda_random_weight(*ops, {tokens, kv_heads * kDim}, DType::bf16, 13, 1.0f));
      const Tensor out = must(cuda_random_weight(*ops, {tokens, kHeads * kDim}, DType::bf16, 14, 1.0f));
      ops->begin_step(layout);
      const double t = time_median(2, 7, [&] { ops->attention(0, q, k, v, 0.0884f, out); });
      if (kernel == cuda::PrefillAttention::cudnn && must(cuda_cudnn_sdpa_runs(*ops)) == 0)
        std::printf("| (cudnn row below: cuDNN did not run, wgmma-ws did) | | |\n");
      // Causal: half the score matrix, 2 GEMMs of 2 flops per multiply-add.
      const double flops = 4.0 * kHeads * kDim * (static_cast<double>(tokens) * (tokens + 1) / 2);
      char name[96];
      std::snprintf(name, sizeof name, "attention prefill %s %dk, %d/%d heads x 128 (incl. KV write)",
                    std::string(kernel_name).c_str(), tokens / 1024, kHeads, kv_heads);
      row(name, flops / t / 1e12, "TFLOP/s", pct(flops / t / kBf16FlopsPerSecond) + " of 790");
    }
  }
  }
  for (std::int32_t kv_heads : {32, 8}) {
    if (rows == AttentionRows::prefill_only) break;
    if (decode_only && kv_heads != 8) continue;
    const std::int32_t batch = 64, context = quick ? 2048 : 8192;
    // Eager: this times the kernels alone (the model benchmark below replays graphs).
    CudaOptions options = bench_options();
    options.use_cuda_graphs = false;
    auto ops = new_ops(options);
    const std::int32_t blocks_per_seq = context / kBlock + 1;
    if (!ops->allocate_kv_cache({.num_layers = 1, .num_blocks = batch * blocks_per_seq, .block_size_tokens = kBlock,
                                 .num_kv_heads = kv_heads, .head_dim = kDim}).ok())
      std::exit(1);
    if (!cuda_fill_kv_cache_random(*ops, 5).ok()) std::exit(1);
    StepLayout layout;
    for (std::int32_t s = 0; s < batch; ++s) {
      SequenceLayout seq{.row_begin = s, .num_rows = 1, .num_computed_tokens = context - 1, .block_table = {}};
      for (std::int32_t b = 0; b < blocks_per_seq; ++b) seq.block_table.push_back(s * blocks_per_seq + b);
      layout.sequences.push_back(seq);
      layout.token_ids.push_back(0);
      layout.positions.push_back(context - 1);
    }
    const Tensor q = must(cuda_random_weight(*ops, {batch, kHeads * kDim}, DType::bf16, 21, 1.0f));
    const Tensor k = must(cuda_random_weight(*ops, {batch, kv_heads * kDim}, DType::bf16, 22, 1.0f));
    const Tensor v = must(cuda_random_weight(*ops, {batch, kv_heads * kDim}, DType::bf16, 23, 1.0f));
    const Tensor out = must(cuda_random_weight(*ops, {batch, kHeads * kDim}, DType::bf16, 24, 1.0f));
    const double t = time_median(3, 15, [&] {
      ops->begin_step(layout);
      ops->attention(0, q, k, v, 0.0884f, out);
    });
    const double bytes = 2.0 * 2.0 * batch * static_cast<double>(context) * kv_heads * kDim;
    char name[96];
    std::snprintf(name, sizeof name, "attention decode %d x %dk, %d/%d heads x 128 (K+V bytes)", batch,
                  context / 1024, kHeads, kv_heads);
    row(name, bytes / t / 1e12, "TB/s", pct(bytes / t / hbm_copy()) + " of HBM");
  }
}

// Mean seconds per run of `fn` over `reps` runs enqueued back to back, one
// synchronisation at the end: a kernel's own time, without a host round trip
// per run (time_median's sync per run adds ~10-20 us to a 100 us kernel).
double time_back_to_back(int reps, const std::function<void()>& fn) {
  fn();
  sync();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) fn();
  sync();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / reps;
}

// GQA decode attention (Llama-3-8B: 32 query heads over 8 KV heads x 128) at
// the batches and contexts issue 14 asks for, and at the burst's mixed steps,
// under each split plan (CudaOptions::decode_split_plan): K+V bytes read over
// time, with the step's metadata upload (begin_step) inside and outside the
// timed loop. `case_filter` (a case's name, e.g. "8 x 8k"; empty: all) runs
// one case, e.g. under ncu.
// Which rows bench_decode_sweep() runs: every variant (--decode-sweep), the
// default beside the other tile layout (--decode-sweep-pages), or the
// uniform plan's splits fixed at several counts, twice over, under both tile
// layouts (--decode-split-counts), or the default beside TMA loads, twice
// in alternation (--decode-sweep-loads).
enum class SweepRows { all, default_and_tiles, split_counts, loads, timeline };

// One launch of the op with the keys-as-rows kernel's blocks stamping the
// moments of cuda::DecodeSplitMoment: per moment, the spread over the blocks
// that had keys (min / median / max, us after the first block's entry), then
// the steps between moments (medians and maxima over those blocks) and how
// long the kernel ran, first entry to last exit.
void print_decode_timeline(const std::string& what, const std::function<void()>& launch_op) {
  constexpr std::int64_t kBlocks = 1 << 16;
  constexpr int kMoments = cuda::kDecodeSplitMoments;
  std::uint64_t* stamps = nullptr;
  if (cudaMalloc(reinterpret_cast<void**>(&stamps), kBlocks * kMoments * sizeof(std::uint64_t)) != cudaSuccess) {
    std::fprintf(stderr, "decode timeline: cannot allocate the %lld blocks' stamps\n", static_cast<long long>(kBlocks));
    std::exit(1);
  }
  cudaMemset(stamps, 0, kBlocks * kMoments * sizeof(std::uint64_t));
  cudaDeviceSynchronize();
  cuda::set_decode_split_timeline(stamps, kBlocks);
  launch_op();
  cudaDeviceSynchronize();
  cuda::set_decode_split_timeline(nullptr, 0);
  std::vector<std::uint64_t> host(kBlocks * kMoments);
  cudaMemcpy(host.data(), stamps, host.size() * sizeof(std::uint64_t), cudaMemcpyDeviceToHost);
  cudaFree(stamps);
  std::vector<std::array<std::uint64_t, kMoments>> blocks;  // those that had keys: every moment stamped
  std::uint64_t first = UINT64_MAX, last = 0;
  for (std::int64_t b = 0; b < kBlocks; ++b) {
    std::array<std::uint64_t, kMoments> m{};
    for (int i = 0; i < kMoments; ++i) m[i] = host[b * kMoments + i];
    if (m[0] == 0) continue;
    first = std::min(first, m[0]);
    last = std::max(last, m[kMoments - 1]);
    if (std::all_of(m.begin(), m.end(), [](std::uint64_t t) { return t != 0; })) blocks.push_back(m);
  }
  if (blocks.empty()) {
    std::printf("| %s: no block stamped (not the keys-as-rows kernel?) | | |\n", what.c_str());
    return;
  }
  auto quantiles = [&](auto value) {  // min, median, max over the blocks, in us
    std::vector<double> v;
    for (const auto& m : blocks) v.push_back(value(m) * 1e-3);
    std::sort(v.begin(), v.end());
    return std::array<double, 3>{v.front(), v[v.size() / 2], v.back()};
  };
  static constexpr const char* kNames[kMoments] = {"entry", "loads started", "first tile", "keys done", "exit"};
  std::string at, steps;
  char buf[160];
  for (int i = 0; i < kMoments; ++i) {
    const auto q = quantiles([&](const auto& m) { return static_cast<double>(m[i] - first); });
    std::snprintf(buf, sizeof buf, "%s%s %.1f/%.1f/%.1f", i ? "; " : "", kNames[i], q[0], q[1], q[2]);
    at += buf;
  }
  for (int i = 1; i < kMoments; ++i) {
    const auto q = quantiles([&](const auto& m) { return static_cast<double>(m[i] - m[i - 1]); });
    std::snprintf(buf, sizeof buf, "%s%s %.1f (max %.1f)", i > 1 ? "; " : "", kNames[i], q[1], q[2]);
    steps += buf;
  }
  std::snprintf(buf, sizeof buf, "%zu blocks with keys, %.1f us first entry to last exit", blocks.size(),
                (last - first) * 1e-3);
  std::printf("| %s: timeline, us after the first entry (min/median/max) | %s | %s |\n", what.c_str(), buf,
              at.c_str());
  std::printf("| %s: steps between moments, us (median, max) | | %s |\n", what.c_str(), steps.c_str());
}

void bench_decode_sweep(std::string_view case_filter, std::int32_t block = 16, SweepRows rows = SweepRows::all,
                        std::string_view only_loads = {}) {
  constexpr std::int32_t kHeads = 32, kKvHeads = 8, kDim = 128;
  const std::int32_t kBlock = block;
  struct Case {
    std::string name;
    std::vector<std::int32_t> contexts;
  };
  std::vector<Case> cases;
  for (std::int32_t batch : {8, 16, 32, 64})
    for (std::int32_t context : {8192, 32768, 131072}) {
      if (static_cast<double>(batch) * context > 64.0 * 32768) continue;  // <= 2M keys: 8.6 GB of K+V
      cases.push_back({std::to_string(batch) + " x " + std::to_string(context / 1024) + "k",
                       std::vector<std::int32_t>(batch, context)});
    }
  // The burst's decode steps: 8 chats at ~1k tokens beside the long prompts
  // that have finished prefill (16k-128k, ~590k keys in all).
  cases.push_back({"burst: 8 x 1k + 8 x 16k-128k", {1024, 1100, 1200, 1300, 1400, 1500, 1600, 1700, 16384, 30000,
                                                    45000, 60000, 80000, 100000, 120000, 130944}});
  cases.push_back({"mixed 64: 1k-128k", {}});
  for (std::int32_t s = 0; s < 64; ++s) cases.back().contexts.push_back(1024 + (s * 2039) % 130000);
  // The default (adaptive plan, merged in the split kernel), then the
  // combine kernel's merge (session 12's A/B); the other plans' rows are in
  // docs/benchmarks.md (S10-2) and run with --decode-sweep-plans.
  struct Variant {
    std::string name;
    cuda::DecodeSplitPlan plan;
    cuda::DecodeSplitMerge merge;
    cuda::DecodeSplitTiles tiles = CudaOptions{}.decode_split_tiles;
    std::int32_t split_count = 0;
    std::int32_t stages = 2;
    cuda::DecodeSplitLoads loads = CudaOptions{}.decode_split_loads;
  };
  const cuda::DecodeSplitTiles other_tiles = CudaOptions{}.decode_split_tiles == cuda::DecodeSplitTiles::keys_as_rows
                                                 ? cuda::DecodeSplitTiles::heads_as_rows
                                                 : cuda::DecodeSplitTiles::keys_as_rows;
  std::vector<Variant> variants = {
      {"adaptive", cuda::DecodeSplitPlan::adaptive, cuda::DecodeSplitMerge::in_split_kernel},
      {"adaptive, " + std::string(cuda::name_of(other_tiles, cuda::kDecodeSplitTilesNames)),
       cuda::DecodeSplitPlan::adaptive, cuda::DecodeSplitMerge::in_split_kernel, other_tiles},
      {"adaptive, combine kernel", cuda::DecodeSplitPlan::adaptive, cuda::DecodeSplitMerge::combine_kernel},
      {"adaptive, keys-as-rows, 3 stages", cuda::DecodeSplitPlan::adaptive, cuda::DecodeSplitMerge::in_split_kernel,
       cuda::DecodeSplitTiles::keys_as_rows, 0, 3}};
  if (rows == SweepRows::default_and_tiles) variants.resize(2);
  if (rows == SweepRows::loads) {
    variants.clear();
    // TMA also with a ring of 3 tiles: on the H200 the 8 x 8k row read 83.5% under TMA's 2 (S31-6)
    // against 91% on the H100; more bytes in flight an SM may be what the faster HBM needs.
    for (int round = 0; round < (only_loads.empty() ? 2 : 1); ++round)
      for (const auto& [loads_name, loads] : cuda::kDecodeSplitLoadsNames)
        if (only_loads.empty() || only_loads == loads_name)
          for (const std::int32_t stages : {2, 3}) {
            if (stages == 3 && loads != cuda::DecodeSplitLoads::tma) continue;
            variants.push_back({"adaptive, keys-as-rows, loads " + std::string(loads_name) +
                                    (stages == 3 ? ", 3 stages" : "") + ", round " + std::to_string(round + 1),
                                cuda::DecodeSplitPlan::adaptive, cuda::DecodeSplitMerge::in_split_kernel,
                                cuda::DecodeSplitTiles::keys_as_rows, 0, stages, loads});
          }
  }
  if (rows == SweepRows::timeline) {
    variants.clear();
    for (const auto& [loads_name, loads] : cuda::kDecodeSplitLoadsNames)
      variants.push_back({"adaptive, keys-as-rows, loads " + std::string(loads_name), cuda::DecodeSplitPlan::adaptive,
                          cuda::DecodeSplitMerge::in_split_kernel, cuda::DecodeSplitTiles::keys_as_rows, 0, 2, loads});
  }
  if (rows == SweepRows::split_counts) {
    variants.clear();
    for (int round = 0; round < 2; ++round)
      for (const auto& [tiles_name, tiles] : cuda::kDecodeSplitTilesNames)
        for (const std::int32_t count : {0, 4, 6, 8, 12, 16, 24})
          variants.push_back({std::string(tiles_name) + ", " + (count == 0 ? "splits by waves" : std::to_string(count) + " splits"),
                              cuda::DecodeSplitPlan::adaptive, cuda::DecodeSplitMerge::in_split_kernel, tiles, count});
    for (int round = 0; round < 2; ++round)
      for (const std::int32_t count : {0, 4, 6})
        variants.push_back({std::string("keys-as-rows, 3 stages, ") +
                                (count == 0 ? "splits by waves" : std::to_string(count) + " splits"),
                            cuda::DecodeSplitPlan::adaptive, cuda::DecodeSplitMerge::in_split_kernel,
                            cuda::DecodeSplitTiles::keys_as_rows, count, 3});
  }
  if (g_decode_sweep_plans)
    for (const auto& [plan_name, plan] : cuda::kDecodeSplitPlanNames)
      if (plan != cuda::DecodeSplitPlan::adaptive)
        variants.push_back({std::string(plan_name), plan, cuda::DecodeSplitMerge::in_split_kernel});
  const auto named = [&](const Case& c) { return c.name == case_filter; };
  if (!case_filter.empty() && std::none_of(cases.begin(), cases.end(), named)) {
    std::fprintf(stderr, "decode sweep: no case \"%.*s\"; the cases:", static_cast<int>(case_filter.size()),
                 case_filter.data());
    for (const Case& c : cases) std::fprintf(stderr, " \"%s\"", c.name.c_str());
    std::fprintf(stderr, "\n");
    std::exit(2);
  }
  for (const Case& c : cases)
  for (const Variant& variant : variants) {
    if (!case_filter.empty() && c.name != case_filter) continue;
    CudaOptions options = bench_options();
    options.use_cuda_graphs = false;
    options.decode_split_plan = variant.plan;
    options.decode_split_merge = variant.merge;
    options.decode_split_tiles = variant.tiles;
    options.decode_split_count = variant.split_count;
    options.decode_split_stages = variant.stages;
    options.decode_split_loads = variant.loads;
    auto ops = new_ops(options);
    std::int32_t total_blocks = 0;
    double keys = 0;
    for (std::int32_t context : c.contexts) {
      total_blocks += context / kBlock + 1;
      keys += context;
    }
    if (!ops->allocate_kv_cache({.num_layers = 1, .num_blocks = total_blocks, .block_size_tokens = kBlock,
                                 .num_kv_heads = kKvHeads, .head_dim = kDim}).ok())
      std::exit(1);
    if (!cuda_fill_kv_cache_random(*ops, 5).ok()) std::exit(1);
    StepLayout layout;
    std::int32_t next_block = 0;
    const auto batch = static_cast<std::int32_t>(c.contexts.size());
    for (std::int32_t s = 0; s < batch; ++s) {
      const std::int32_t context = c.contexts[s];
      SequenceLayout seq{.row_begin = s, .num_rows = 1, .num_computed_tokens = context - 1, .block_table = {}};
      for (std::int32_t b = 0; b < context / kBlock + 1; ++b) seq.block_table.push_back(next_block++);
      layout.sequences.push_back(seq);
      layout.token_ids.push_back(0);
      layout.positions.push_back(context - 1);
      layout.sample_rows.push_back(s);
    }
    const Tensor q = must(cuda_random_weight(*ops, {batch, kHeads * kDim}, DType::bf16, 21, 1.0f));
    const Tensor k = must(cuda_random_weight(*ops, {batch, kKvHeads * kDim}, DType::bf16, 22, 1.0f));
    const Tensor v = must(cuda_random_weight(*ops, {batch, kKvHeads * kDim}, DType::bf16, 23, 1.0f));
    const Tensor out = must(cuda_random_weight(*ops, {batch, kHeads * kDim}, DType::bf16, 24, 1.0f));
    const double bytes = 2.0 * 2.0 * keys * kKvHeads * kDim;
    const double with_metadata = time_back_to_back(20, [&] {
      ops->begin_step(layout);
      ops->attention(0, q, k, v, 0.0884f, out);
    });
    ops->begin_step(layout);
    const double kernel_only = time_back_to_back(20, [&] { ops->attention(0, q, k, v, 0.0884f, out); });
    const std::string what = "decode attention " + c.name + ", 32/8 heads, pages of " + std::to_string(block) +
                             ", split plan " + variant.name;
    char us[32];
    std::snprintf(us, sizeof us, ", %.1f us", kernel_only * 1e6);
    row(what + ", kernels only (K+V bytes)", bytes / kernel_only / 1e12, "TB/s",
        pct(bytes / kernel_only / hbm_copy()) + " of HBM" + us);
    std::snprintf(us, sizeof us, ", %.1f us", with_metadata * 1e6);
    row(what + ", with begin_step", bytes / with_metadata / 1e12, "TB/s",
        pct(bytes / with_metadata / hbm_copy()) + " of HBM" + us);
    if (rows == SweepRows::timeline) print_decode_timeline(what, [&] { ops->attention(0, q, k, v, 0.0884f, out); });
  }
}

// Llama-3-8B, the same op sequence as model/llama.cpp's LlamaModel::forward.
struct Llama8B {
  static constexpr std::int64_t kLayers = 32, kHidden = 4096, kHeads = 32, kKvHeads = 8, kDim = 128,
                                kInter = 14336, kVocab = 128256;
  struct Layer {
    Tensor in_norm, qkv, o, post_norm, gate_up, down;
  };
  Tensor embed, final_norm, lm_head;
  std::vector<Layer> layers;
  RopeParams rope{.head_dim = kDim, .theta = 500000.0f, .llama3_factor = 8.0f};

  explicit Llama8B(Ops& ops) {
    std::uint64_t seed = 1000;
    auto w = [&](Shape s, float scale) { return must(cuda_random_weight(ops, s, DType::bf16, ++seed, scale)); };
    embed = w({kVocab, kHidden}, 1.0f);
    for (int l = 0; l < kLayers; ++l)
      layers.push_back({w({kHidden}, 1.0f), w({(kHeads + 2 * kKvHeads) * kDim, kHidden}, 0.02f),
                        w({kHidden, kHeads * kDim}, 0.02f), w({kHidden}, 1.0f), w({2 * kInter, kHidden}, 0.02f),
                        w({kHidden, kInter}, 0.02f)});
    final_norm = w({kHidden}, 1.0f);
    lm_head = w({kVocab, kHidden}, 0.02f);
  }
  static double weight_bytes() {
    const double per_layer = 2.0 * kHidden * (kHeads * kDim + 2 * kKvHeads * kDim) + 2.0 * kHidden * kHeads * kDim +
                             2.0 * 3 * kHidden * kInter + 4.0 * kHidden;
    return kLayers * per_layer + 2.0 * kVocab * kHidden;  // lm_head read; embedding rows negligible
  }
  static double matmul_flops_per_token() { return (weight_bytes() - 2.0 * kVocab * kHidden) + 0.0; }

  Tensor forward(Ops& ops, const StepLayout& layout) const {
    const std::int64_t n = layout.num_rows();
    const float eps = 1e-5f, scale = 1.0f / std::sqrt(static_cast<float>(kDim));
    Tensor residual = ops.scratch({n, kHidden}), normed = ops.scratch({n, kHidden});
    Tensor q = ops.scratch({n, kHeads * kDim}), k = ops.scratch({n, kKvHeads * kDim}), v = ops.scratch({n, kKvHeads * kDim});
    Tensor attn = ops.scratch({n, kHeads * kDim}), block_out = ops.scratch({n, kHidden});
    Tensor gate_up = ops.scratch({n, 2 * kInter}), act = ops.scratch({n, kInter});
    const std::array<Tensor, 3> no_bias{};
    ops.embedding(embed, residual);
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const Layer& layer = layers[l];
      if (l == 0)
        ops.rms_norm(residual, layer.in_norm, eps, normed);
      else
        ops.add_rms_norm(residual, block_out, layer.in_norm, eps, normed);
      ops.qkv_projection(normed, layer.qkv, no_bias, q, k, v);
      ops.rope(q, k, rope);
      ops.attention(static_cast<std::int32_t>(l), q, k, v, scale, attn);
      ops.matmul(attn, layer.o, Tensor{}, block_out);
      ops.add_rms_norm(residual, block_out, layer.post_norm, eps, normed);
      ops.gate_up_silu(normed, layer.gate_up, gate_up, act);
      ops.matmul(act, layer.down, Tensor{}, block_out);
    }
    ops.add_rms_norm(residual, block_out, final_norm, eps, normed);
    const auto num_samples = static_cast<std::int64_t>(layout.sample_rows.size());
    Tensor selected = ops.scratch({num_samples, kHidden});
    ops.gather_sample_rows(normed, selected);
    Tensor logits = ops.scratch({num_samples, kVocab});
    ops.matmul(selected, lm_head, Tensor{}, logits);
    return logits;
  }
};

// `batch` sequences at `context` tokens, each running `new_tokens` rows and
// sampling after them; sequence s owns blocks [s * blocks_per_seq, ...).
StepLayout make_step(std::int32_t batch, std::int32_t context, std::int32_t new_tokens, std::int32_t block) {
  const std::int32_t blocks_per_seq = (context + new_tokens + block - 1) / block;
  StepLayout layout;
  for (std::int32_t s = 0; s < batch; ++s) {
    SequenceLayout seq{.row_begin = layout.num_rows(), .num_rows = new_tokens,
                       .num_computed_tokens = context, .block_table = {}};
    for (std::int32_t b = 0; b < blocks_per_seq; ++b) seq.block_table.push_back(s * blocks_per_seq + b);
    for (std::int32_t t = 0; t < new_tokens; ++t) {
      layout.token_ids.push_back((s * 7919 + t * 31) % 128000);
      layout.positions.push_back(context + t);
    }
    layout.sample_rows.push_back(seq.row_begin + new_tokens - 1);
    layout.sequences.push_back(seq);
  }
  return layout;
}

// DeepSeek-V3's MLA on one layer (128 heads, latent 512 + rope 64, QK 192,
// V 128), random weights and cache, eager: the whole op (begin_step included
// in decode), under each CudaOptions::mla_kernels. Decode at batch 64 x 8k
// (and, for the tensor-core kernels, batch 1 x 32k and the op less its fixed
// costs) counts the latent rows read (batch x context x 576 x 2 bytes)
// against HBM: the card's spec rate and its device copy;
// prefill of one prompt from zero counts the causal attention (QK 192 + V 128
// multiply-adds per key a head) plus the K/V decompression GEMM against the
// bf16 GEMM rate.
// rows: all, the tensor_core and cudnn prefill rows alone (--mla-prefill), or
// the decode rows alone (--mla-decode), of the kernel named `only` where it is
// not empty.
enum class MlaRows { all, prefill_only, decode_only };
void bench_mla(bool quick, MlaRows rows = MlaRows::all, std::string_view only = {}) {
  const bool prefill_only = rows == MlaRows::prefill_only, decode_only = rows == MlaRows::decode_only;
  constexpr std::int32_t kBlock = 16, kHeads = 128, kNope = 128, kRope = 64, kV = 128, kRank = 512;
  constexpr std::int32_t kWidth = kRank + kRope, kQk = kNope + kRope;
  constexpr std::int32_t kGraphLayers = 8;  // the decode-graph rows' depth
  // 128 heads: one GPU holds the whole layer; 16: its share under tensor
  // parallel 8, the usual DeepSeek-V3 deployment (same latent bytes, 1/8 of the MMAs).
  auto shape_of = [&](std::int32_t heads) {
    return MlaShape{.num_heads = heads,
                    .qk_nope_head_dim = kNope,
                    .qk_rope_head_dim = kRope,
                    .v_head_dim = kV,
                    .kv_lora_rank = kRank,
                    .softmax_scale = 1.0f / std::sqrt(static_cast<float>(kQk))};
  };
  const MlaShape shape = shape_of(kHeads);
  auto must_ok = [](const Status& s) {
    if (!s.ok()) {
      std::fprintf(stderr, "error: %s\n", s.error_message().c_str());
      std::exit(1);
    }
  };
  // Random inputs for `rows` new rows (seeds seed, seed + 1, ...).
  auto random_inputs = [&](Ops& ops, std::int32_t rows, std::uint64_t seed, std::int32_t heads) {
    return MlaInputs{.q = must(cuda_random_weight(ops, {rows, heads * kQk}, DType::bf16, seed, 1.0f)),
                     .latent = must(cuda_random_weight(ops, {rows, kRank}, DType::bf16, seed + 1, 1.0f)),
                     .k_rope = must(cuda_random_weight(ops, {rows, kRope}, DType::bf16, seed + 2, 1.0f)),
                     .kv_b_proj = must(cuda_random_weight(ops, {heads * (kNope + kV), kRank}, DType::bf16, seed + 3,
                                                          0.05f))};
  };
  // The whole decode op at batch x context (context keys a row), seconds.
  // shared_pages: every row's block table names the first row's pages (one
  // sequence's latents, 9.4 MB at 8k, which stay in the 60 MB L2): the same
  // kernel work without HBM's latency and bandwidth, a probe of what bounds
  // the attention kernel. (The rows' new latents all go to one slot.)
  // graph_layers > 0: the op as the engine's decode step runs it, that many
  // layers (each its own cache, so nothing of one layer's latents is in L2 for
  // the next) captured in one CUDA graph and replayed, one begin_step a step;
  // seconds a layer. The eager calls pay begin_step's host work and every
  // launch each time; a 61-layer step pays begin_step once and launches one graph.
  auto time_decode = [&](const CudaOptions& eager_options, std::int32_t batch, std::int32_t context,
                         bool shared_pages, std::int32_t heads, std::int32_t graph_layers = 0) {
    CudaOptions options = eager_options;
    options.use_cuda_graphs = graph_layers > 0;
    const std::int32_t layers = std::max(graph_layers, 1);
    auto ops = new_ops(options);
    StepLayout layout = make_step(batch, context - 1, 1, kBlock);
    if (shared_pages)
      for (SequenceLayout& seq : layout.sequences) seq.block_table = layout.sequences.front().block_table;
    must_ok(ops->allocate_kv_cache({.num_layers = layers, .num_blocks = batch * ((context + kBlock - 1) / kBlock),
                                    .block_size_tokens = kBlock, .num_kv_heads = 1, .head_dim = kWidth,
                                    .layout = KvCacheLayout::latent}));
    must_ok(cuda_fill_kv_cache_random(*ops, 5));
    const MlaInputs in = random_inputs(*ops, batch, 31, heads);
    const Tensor out = must(cuda_random_weight(*ops, {batch, heads * kV}, DType::bf16, 35, 1.0f));
    const MlaShape heads_shape = shape_of(heads);
    return time_median(3, 15, [&] {
      ops->begin_step(layout);
      for (std::int32_t layer = 0; layer < layers; ++layer) must_ok(ops->mla_attention(layer, in, heads_shape, out));
      if (graph_layers > 0) (void)ops->sample(Tensor{nullptr, DType::bf16, Shape{0, 1}}, {});  // launches the graph
    }) / layers;
  };
  auto latent_bytes = [](std::int32_t batch, std::int32_t context) {
    return 2.0 * batch * static_cast<double>(context) * kWidth;
  };
  auto hbm_shares = [](double bytes_per_second) {
    return pct(bytes_per_second / hbm_spec()) + " of HBM spec, " +
           pct(bytes_per_second / hbm_copy()) + " of the copy";
  };
  // A prompt of `tokens` from zero, or a chunk of `tokens` rows after `prefix`
  // cached tokens (random latents): every row's keys (causal within the
  // chunk) and the decompression of the whole context's K/V, as the
  // simulator's chunk form prices them (docs/cost-model.md).
  auto prefill_row = [&](const CudaOptions& options, const std::string& label, std::int32_t tokens,
                         std::int32_t prefix = 0) {
    auto ops = new_ops(options);
    const StepLayout layout = make_step(1, prefix, tokens, kBlock);
    must_ok(ops->allocate_kv_cache({.num_layers = 1, .num_blocks = (prefix + tokens) / kBlock + 1,
                                    .block_size_tokens = kBlock, .num_kv_heads = 1, .head_dim = kWidth,
                                    .layout = KvCacheLayout::latent}));
    if (prefix > 0) must_ok(cuda_fill_kv_cache_random(*ops, 5));
    const MlaInputs in = random_inputs(*ops, tokens, 41, kHeads);
    const Tensor out = must(cuda_random_weight(*ops, {tokens, kHeads * kV}, DType::bf16, 45, 1.0f));
    ops->begin_step(layout);
    const double t = time_median(1, 5, [&] { must_ok(ops->mla_attention(0, in, shape, out)); });
    if (options.prefill_attention == cuda::PrefillAttention::cudnn && must(cuda_cudnn_sdpa_runs(*ops)) == 0)
      std::printf("| (cudnn row below: cuDNN did not run, tensor_core did) | | |\n");
    const double keys = static_cast<double>(tokens) * prefix + static_cast<double>(tokens) * (tokens + 1) / 2;
    const double flops = 2.0 * kHeads * keys * (kQk + kV) +
                         2.0 * (static_cast<double>(prefix) + tokens) * kHeads * (kNope + kV) * kRank;
    char name[160];
    if (prefix == 0)
      std::snprintf(name, sizeof name, "MLA prefill %s %dk, 128 heads (attention + K/V decompression, %.1f ms)",
                    label.c_str(), tokens / 1024, t * 1e3);
    else
      std::snprintf(name, sizeof name,
                    "MLA prefill %s chunk of %d rows after %dk cached, 128 heads (attention + K/V decompression, "
                    "%.1f ms)",
                    label.c_str(), tokens, prefix / 1024, t * 1e3);
    row(name, flops / t / 1e12, "TFLOP/s", pct(flops / t / kBf16FlopsPerSecond) + " of 790");
  };
  for (const auto& [kernel_name, kernel] : cuda::kMlaKernelsNames) {
    if (prefill_only && kernel != cuda::MlaKernels::tensor_core) continue;
    if (!only.empty() && kernel_name != only) continue;
    if (decode_only && kernel == cuda::MlaKernels::simple && only.empty()) continue;
    CudaOptions options = bench_options();
    options.use_cuda_graphs = false;
    options.mla_kernels = kernel;
    const std::string label(kernel_name);
    const bool wgmma_decode = cuda::mla_decode_wgmma_era(kernel);
    if (!prefill_only) {
      const std::int32_t batch = 64, context = quick ? 2048 : 8192;
      const double t = time_decode(options, batch, context, false, kHeads);
      const double bytes = latent_bytes(batch, context);
      char name[128];
      std::snprintf(name, sizeof name, "MLA decode %s %d x %dk, 128 heads (latent bytes; whole op)", label.c_str(),
                    batch, context / 1024);
      row(name, bytes / t / 1e12, "TB/s", hbm_shares(bytes / t));
      if (wgmma_decode) {
        const double t_graphed = time_decode(options, batch, context, false, kHeads, kGraphLayers);
        std::snprintf(name, sizeof name, "MLA decode %s %d x %dk, 128 heads, a layer of an %d-layer decode graph",
                      label.c_str(), batch, context / 1024, kGraphLayers);
        row(name, bytes / t_graphed / 1e12, "TB/s",
            hbm_shares(bytes / t_graphed) + "; " + std::to_string(static_cast<int>(t_graphed * 1e6)) + " us a layer");
      }
      if (kernel != cuda::MlaKernels::simple) {
        // The op's fixed costs (begin_step, the two batched GEMMs, gathers,
        // scatter, combine) measured at a 64-key context and taken off: what
        // the attention kernel itself streams.
        const double t_fixed = time_decode(options, batch, 64, false, kHeads);
        const double attention_bytes = bytes - latent_bytes(batch, 64);
        std::snprintf(name, sizeof name, "MLA decode %s %d x %dk, attention only (the op less the op at 64 keys)",
                      label.c_str(), batch, context / 1024);
        row(name, attention_bytes / (t - t_fixed) / 1e12, "TB/s",
            hbm_shares(attention_bytes / (t - t_fixed)) + "; fixed " + std::to_string(static_cast<int>(t_fixed * 1e6)) +
                " of " + std::to_string(static_cast<int>(t * 1e6)) + " us");
        if (wgmma_decode) {
          const double t_shared = time_decode(options, batch, context, /*shared_pages=*/true, kHeads);
          std::snprintf(name, sizeof name,
                        "MLA decode %s %d x %dk over one sequence's pages (L2-resident), attention only",
                        label.c_str(), batch, context / 1024);
          row(name, attention_bytes / (t_shared - t_fixed) / 1e12, "TB/s",
              "the same work read from L2: near the row above, the kernel is bound by its own chain");
        }
        if (kernel != cuda::MlaKernels::tensor_core) {
          // One GPU's 16 heads under tensor parallel 8: the regime FlashMLA's 3000 GB/s
          // (H800) anchor is measured in, where the latent stream, not the MMAs, bounds.
          constexpr std::int32_t kTp8Heads = kHeads / 8;
          const double t_tp8 = time_decode(options, batch, context, false, kTp8Heads);
          const double t_tp8_fixed = time_decode(options, batch, 64, false, kTp8Heads);
          std::snprintf(name, sizeof name, "MLA decode %s %d x %dk, 16 heads (TP8's share; latent bytes; whole op)",
                        label.c_str(), batch, context / 1024);
          row(name, bytes / t_tp8 / 1e12, "TB/s", hbm_shares(bytes / t_tp8));
          std::snprintf(name, sizeof name, "MLA decode %s %d x %dk, 16 heads, attention only", label.c_str(), batch,
                        context / 1024);
          row(name, attention_bytes / (t_tp8 - t_tp8_fixed) / 1e12, "TB/s",
              hbm_shares(attention_bytes / (t_tp8 - t_tp8_fixed)) + "; fixed " +
                  std::to_string(static_cast<int>(t_tp8_fixed * 1e6)) + " of " +
                  std::to_string(static_cast<int>(t_tp8 * 1e6)) + " us");
          // Per layer of a decode graph: the op less the eager call's overheads.
          const double t_tp8_graphed = time_decode(options, batch, context, false, kTp8Heads, kGraphLayers);
          std::snprintf(name, sizeof name,
                        "MLA decode %s %d x %dk, 16 heads, a layer of an %d-layer decode graph (latent bytes)",
                        label.c_str(), batch, context / 1024, kGraphLayers);
          row(name, bytes / t_tp8_graphed / 1e12, "TB/s",
              hbm_shares(bytes / t_tp8_graphed) + "; " + std::to_string(static_cast<int>(t_tp8_graphed * 1e6)) +
                  " us a layer (eager whole op " + std::to_string(static_cast<int>(t_tp8 * 1e6)) + ")");
          if (wgmma_decode) {
            const double t_tp8_shared = time_decode(options, batch, context, /*shared_pages=*/true, kTp8Heads);
            std::snprintf(name, sizeof name, "MLA decode %s %d x %dk, 16 heads, L2-resident, attention only",
                          label.c_str(), batch, context / 1024);
            row(name, attention_bytes / (t_tp8_shared - t_tp8_fixed) / 1e12, "TB/s",
                "the same work read from L2: near the 16-head row above, the kernel's own chain bounds it");
          }
        }
        const std::int32_t long_context = quick ? 8192 : 32768;
        const double t_long = time_decode(options, 1, long_context, false, kHeads);
        std::snprintf(name, sizeof name, "MLA decode %s 1 x %dk, 128 heads (latent bytes; whole op)", label.c_str(),
                      long_context / 1024);
        row(name, latent_bytes(1, long_context) / t_long / 1e12, "TB/s",
            hbm_shares(latent_bytes(1, long_context) / t_long));
      }
    }
    // The wgmma sets differ from tensor_core in decode only.
    if (decode_only || wgmma_decode) continue;
    for (std::int32_t tokens : quick ? std::vector<std::int32_t>{4096} : std::vector<std::int32_t>{8192, 32768}) {
      // The simple kernel at 32k takes seconds a call (~3 s predicted): 8k is its comparison row.
      if (kernel == cuda::MlaKernels::simple && tokens > 8192) continue;
      prefill_row(options, std::string(kernel_name), tokens);
    }
  }
  // Prefill attention through cuDNN's SDPA (PrefillAttention::cudnn, QK 192 / V 128: cuDNN 9.19+).
  if (decode_only) return;
  CudaOptions cudnn = bench_options();
  cudnn.use_cuda_graphs = false;
  cudnn.mla_kernels = cuda::MlaKernels::tensor_core;
  cudnn.prefill_attention = cuda::PrefillAttention::cudnn;
  for (std::int32_t tokens : quick ? std::vector<std::int32_t>{4096} : std::vector<std::int32_t>{8192, 32768})
    prefill_row(cudnn, "cudnn", tokens);
  // Chunks over cached prefixes, as a long prompt's later chunks run: the
  // cost model's chunk form is measured on whole prompts only, and V3's
  // traces put these at 1.3-1.5x its price (docs/cost-model.md).
  if (quick) return;
  for (std::int32_t prefix : {8192, 24576})
    for (std::int32_t chunk : {512, 1280, 2560}) prefill_row(cudnn, "cudnn", chunk, prefix);
}

// One step of the model: begin_step, forward, greedy sample (which reads the
// tokens back).
void run_model_step(Ops& ops, const Llama8B& model, const StepLayout& layout) {
  ops.begin_step(layout);
  const Tensor logits = model.forward(ops, layout);
  std::vector<SampleRequest> requests(layout.sample_rows.size());
  (void)ops.sample(logits, requests);
}

// A KV cache of `num_blocks` 16-token blocks for the model, filled with random values.
void allocate_model_kv(Ops& ops, std::int32_t num_blocks) {
  const Status kv = ops.allocate_kv_cache({.num_layers = Llama8B::kLayers, .num_blocks = num_blocks,
                                           .block_size_tokens = 16, .num_kv_heads = Llama8B::kKvHeads,
                                           .head_dim = Llama8B::kDim});
  if (!kv.ok()) {
    std::fprintf(stderr, "%s\n", kv.error_message().c_str());
    std::exit(1);
  }
  if (!cuda_fill_kv_cache_random(ops, 3).ok()) std::exit(1);
}

// One prefill of each prompt (median of 3 steps); `label` names the rows' setting.
void bench_prefill_rows(Ops& ops, const Llama8B& model, const std::vector<std::int32_t>& prompts,
                        const std::string& label) {
  for (const std::int32_t prompt : prompts) {
    const StepLayout layout = make_step(1, 0, prompt, 16);
    const double t = time_median(1, 3, [&] { run_model_step(ops, model, layout); });
    const double flops = Llama8B::matmul_flops_per_token() * prompt +
                         Llama8B::kLayers * 4.0 * Llama8B::kHeads * Llama8B::kDim * (double(prompt) * (prompt + 1) / 2);
    row("Llama-3-8B prefill of " + std::to_string(prompt) + " tokens" + label + " [tok/s]", prompt / t, "tok/s",
        pct(flops / t / kBf16FlopsPerSecond) + " of 790 TFLOP/s (" + std::to_string(static_cast<int>(t * 1e3)) + " ms)");
  }
}

void bench_model(bool quick) {
  constexpr std::int32_t kBlock = 16;
  const std::int32_t big_batch = quick ? 8 : 64, big_context = quick ? 2048 : 8192;
  const std::int32_t long_prompt = quick ? 8192 : 32768;
  {
    auto ops = new_ops();
    const Llama8B model(*ops);
    allocate_model_kv(*ops, std::max(big_batch * ((big_context + kBlock) / kBlock + 1), long_prompt / kBlock + 1));
    const double kv_bytes_per_token = 2.0 * 2.0 * Llama8B::kLayers * Llama8B::kKvHeads * Llama8B::kDim;
    for (auto [batch, context] :
         {std::pair{1, 0}, std::pair{1, 4096}, std::pair{8, 8192}, std::pair{big_batch, big_context}}) {
      const StepLayout layout = make_step(batch, context, 1, kBlock);
      const double t = time_median(3, 15, [&] { run_model_step(*ops, model, layout); });
      const double bytes = Llama8B::weight_bytes() + kv_bytes_per_token * batch * (context + 1);
      char name[96];
      std::snprintf(name, sizeof name, "Llama-3-8B decode step, batch %d at %d context", batch, context);
      row(std::string(name) + " [tok/s]", batch / t, "tok/s",
          pct(bytes / t / hbm_copy()) + " of HBM (" + std::to_string(static_cast<int>(t * 1e6)) + " us/step)");
    }
    if (g_decode) return;
    bench_prefill_rows(*ops, model, {4096, long_prompt}, "");  // the default prefill attention (wgmma)
  }
  // Both prompts with the other prefill attention kernels, each in an Ops of its own.
  for (const auto kernel : {cuda::PrefillAttention::mma, cuda::PrefillAttention::wgmma_ws}) {
    CudaOptions options = bench_options();
    options.prefill_attention = kernel;
    auto ops = new_ops(options);
    const Llama8B model(*ops);
    allocate_model_kv(*ops, long_prompt / kBlock + 1);
    bench_prefill_rows(*ops, model, {4096, long_prompt},
                       " (attention " + std::string(cuda::name_of(kernel, cuda::kPrefillAttentionNames)) + ")");
  }
}

// --prefill-model [NAMES]: Llama-3-8B prefill of 4k and 32k prompts (the
// whole model step) under each prefill attention choice named (default
// wgmma-ws and cudnn), each in an Ops of its own.
void bench_prefill_model() {
  for (const auto& [kernel_name, kernel] : cuda::kPrefillAttentionNames) {
    if (g_prefill_kernels.empty() ? kernel != cuda::PrefillAttention::wgmma_ws && kernel != cuda::PrefillAttention::cudnn
                                  : !prefill_kernel_wanted(kernel_name))
      continue;
    CudaOptions options = bench_options();
    options.prefill_attention = kernel;
    auto ops = new_ops(options);
    const Llama8B model(*ops);
    allocate_model_kv(*ops, 32768 / 16 + 1);
    bench_prefill_rows(*ops, model, {4096, 32768}, " (attention " + std::string(kernel_name) + ")");
    if (kernel == cuda::PrefillAttention::cudnn && must(cuda_cudnn_sdpa_runs(*ops)) == 0)
      std::printf("| (cudnn rows above: cuDNN did not run, wgmma-ws did) | | |\n");
  }
}

// Decode steps under other settings, each in a fresh Ops (no graph captured
// under another setting is replayed): programmatic dependent launch off,
// eighth-octave graph buckets, the GEMV split K in at most two parts. The
// default rows above minus these rows is what each choice buys.
void bench_decode_variants(bool quick) {
  constexpr std::int32_t kBlock = 16;
  struct Variant {
    const char* name;
    CudaOptions options;
    bool big;      // also batch 64 at 8k (--decode: and batch 8)
    bool decode;   // in the --decode run
    bool decode1;  // in the --decode1 run
    int gemv_one_row_blocks = cuda::kGemvOneRowBlocksDefault;  // cuda::set_gemv_one_row_blocks
  };
  auto with = [](auto change) {
    CudaOptions options = bench_options();
    change(options);
    return options;
  };
  const CudaOptions session11 = with([](CudaOptions& o) {
    o.decode_split_merge = cuda::DecodeSplitMerge::combine_kernel;
    o.decode_rope_fusion = cuda::DecodeRopeFusion::kv_write_kernel;
  });
  // The order matters: a row right after a variant that ran batch 64 at 8k
  // (a 69 GB KV cache, freed) reads ~8% slower than the same setting before
  // it (S12-gqadec-1: "default, again" 201.5 against 219.5 tok/s, and
  // gemv1's two-parts rows, which came right after PDL off's batch-64 row).
  // So every batch-1 A/B row runs first, the batch-8/64 rows last, and one
  // default row after them shows the effect.
  const Variant variants[] = {
      {"default", bench_options(), false, false, true},
      // Session 12 (gqadec): both fusions off (session 11's kernels), then each alone.
      {"session 11 kernels (combine kernel, RoPE/KV write kernel)", session11, false, true, true},
      {"split-KV merge in a combine kernel",
       with([](CudaOptions& o) { o.decode_split_merge = cuda::DecodeSplitMerge::combine_kernel; }), false, true, true},
      {"RoPE and KV write in their own kernel",
       with([](CudaOptions& o) { o.decode_rope_fusion = cuda::DecodeRopeFusion::kv_write_kernel; }), false, true,
       true},
      {"GEMV split K by waves (q|k|v in 4 parts)",
       with([](CudaOptions& o) { o.gemv_split_k = cuda::GemvSplitK::by_waves; }), false, true, true},
      {"split-KV with heads as the mma's rows (session 19's tiles)",
       with([](CudaOptions& o) { o.decode_split_tiles = cuda::DecodeSplitTiles::heads_as_rows; }), false, true, true},
      // Session 42: the one-row GEMVs under 40 registers (6 blocks an SM, the default since session 43),
      // where ptxas spills nothing; this row is the 32-register form, the default before.
      {"one-row GEMVs at 8 blocks an SM (32 registers)", bench_options(), false, true, true, 8},
      {"default, again", bench_options(), false, false, true},
      {"session 11 kernels, again", session11, false, false, true},
      {"eighth-octave graph buckets", with([](CudaOptions& o) { o.graph_buckets = cuda::GraphBuckets::eighth_octave; }),
       true, false, false},
      {"default, with batch 8 and 64", bench_options(), true, false, true},
      {"session 11 kernels, with batch 8 and 64", session11, true, true, true},
      {"PDL off", with([](CudaOptions& o) { o.programmatic_launch = false; }), true, false, true},
      {"default, after the batch-64 rows", bench_options(), false, false, true}};
  const std::int32_t big_batch = quick ? 8 : 64, big_context = quick ? 2048 : 8192;
  const double kv_bytes_per_token = 2.0 * 2.0 * Llama8B::kLayers * Llama8B::kKvHeads * Llama8B::kDim;
  for (const Variant& v : variants) {
    // The full run has the default above.
    if (g_decode1 ? !v.decode1 : g_decode ? !v.decode : std::strncmp(v.name, "default", 7) == 0) continue;
    cuda::set_gemv_one_row_blocks(v.gemv_one_row_blocks);
    auto ops = new_ops(v.options);
    const Llama8B model(*ops);
    allocate_model_kv(*ops, v.big ? big_batch * ((big_context + kBlock) / kBlock + 1) : 4096 / kBlock + 2);
    std::vector<std::pair<int, int>> shapes = {{1, 0}, {1, 4096}};
    if (v.big) shapes.push_back({big_batch, big_context});
    if (v.big && (g_decode || g_decode1)) shapes.push_back({8, big_context});
    for (auto [batch, context] : shapes) {
      const StepLayout layout = make_step(batch, context, 1, kBlock);
      const double t = time_median(3, 15, [&] { run_model_step(*ops, model, layout); });
      const double bytes = Llama8B::weight_bytes() + kv_bytes_per_token * batch * (context + 1);
      row("Llama-3-8B decode step, batch " + std::to_string(batch) + " at " + std::to_string(context) + " context, " +
              v.name + " [tok/s]",
          batch / t, "tok/s",
          pct(bytes / t / hbm_copy()) + " of HBM (" + std::to_string(static_cast<int>(t * 1e6)) + " us/step)");
    }
  }
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// Sampling 64 rows of a Llama-3 vocabulary (128256, bf16 logits uniform in
// [-8, 8]), non-greedy: one sample() call through the device sampler
// (kernels/sampling_topk.cu), ms per step. (The path it replaced, each row
// copied back as f32 and drawn by the reference sampler on the host, took
// 104-843 ms here: docs/benchmarks.md.)
void bench_sampling() {
  constexpr std::int64_t kRows = 64, kVocab = 128256;
  auto ops = new_ops();
  const Tensor logits = must(cuda_random_weight(*ops, {kRows, kVocab}, DType::bf16, 31, 8.0f));
  std::vector<TokenId> history;
  for (std::int32_t i = 0; i < 1024; ++i) history.push_back(static_cast<TokenId>((i * 7919) % kVocab));
  struct Config {
    const char* name;
    SamplingParams params;
    bool penalties;
  };
  // One request a row, seeded by the row, with the shared history when penalised.
  auto requests_for = [&](const Config& c) {
    std::vector<SampleRequest> requests;
    for (std::int64_t r = 0; r < kRows; ++r) {
      SamplingParams params = c.params;
      params.seed = static_cast<std::uint64_t>(r);
      requests.push_back({.params = params,
                          .tokens = c.penalties ? std::span<const TokenId>(history) : std::span<const TokenId>(),
                          .num_prompt_tokens = 512,
                          .generated_index = 3});
    }
    return requests;
  };
  for (const Config& c :
       {Config{"T 0.8, top-k 50, top-p 0.95", {.temperature = 0.8f, .top_k = 50, .top_p = 0.95f}, false},
        Config{"T 1, top-p 0.9, min-p 0.05, penalties over 1k tokens",
               {.temperature = 1.0f, .top_p = 0.9f, .min_p = 0.05f, .presence_penalty = 0.5f,
                .frequency_penalty = 0.5f, .repetition_penalty = 1.2f},
               true},
        Config{"T 1, whole vocabulary", {.temperature = 1.0f}, false},
        // Each parameter alone.
        Config{"T 1, top-p 0.9", {.temperature = 1.0f, .top_p = 0.9f}, false},
        Config{"T 1, min-p 0.05", {.temperature = 1.0f, .min_p = 0.05f}, false},
        Config{"T 1, top-k 50", {.temperature = 1.0f, .top_k = 50}, false},
        Config{"T 1, penalties over 1k tokens",
               {.temperature = 1.0f, .presence_penalty = 0.5f, .frequency_penalty = 0.5f,
                .repetition_penalty = 1.2f},
               true},
        Config{"greedy, top logprobs 20", {.num_top_logprobs = 20}, false}}) {
    const std::vector<SampleRequest> requests = requests_for(c);
    const double t = time_median(3, 20, [&] { (void)ops->sample(logits, requests); });
    row(std::string("sample 64 x 128256, ") + c.name + ", device", t * 1e3, "ms/step", "");
  }
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// A few steps for a kernel profiler (ncu): one Llama-3-8B decode step at
// batch 1 x 4k context, then decode attention at 64 x 8k with 8 kv heads.
void profile_run() {
  g_use_graphs = false;
  {
    auto ops = new_ops();
    const Llama8B model(*ops);
    if (!ops->allocate_kv_cache({.num_layers = Llama8B::kLayers, .num_blocks = 600, .block_size_tokens = 16,
                                 .num_kv_heads = Llama8B::kKvHeads, .head_dim = Llama8B::kDim}).ok())
      std::exit(1);
    const StepLayout layout = make_step(1, 4096, 1, 16);
    for (int i = 0; i < 2; ++i) {
      ops->begin_step(layout);
      const Tensor logits = model.forward(*ops, layout);
      std::vector<SampleRequest> requests(1);
      (void)ops->sample(logits, requests);
    }
  }
  sync();
  bench_attention(false, AttentionRows::decode_only);
}

// Attention of one prefill chunk of `chunk` rows over `prefix` cached tokens
// in pages of `block` tokens, under `kernel`: one row of TFLOP/s.
void chunk_attention_row(std::string_view kernel_name, cuda::PrefillAttention kernel, std::int32_t prefix,
                         std::int32_t chunk, std::int32_t block) {
  constexpr std::int32_t kHeads = 32, kKvHeads = 8, kDim = 128;
  CudaOptions options = bench_options();
  options.prefill_attention = kernel;
  auto ops = new_ops(options);
  const std::int32_t total = prefix + chunk;
  const std::int32_t blocks = (total + block - 1) / block;
  if (!ops->allocate_kv_cache({.num_layers = 1, .num_blocks = blocks, .block_size_tokens = block,
                               .num_kv_heads = kKvHeads, .head_dim = kDim}).ok())
    std::exit(1);
  if (!cuda_fill_kv_cache_random(*ops, 21).ok()) std::exit(1);
  StepLayout layout;
  SequenceLayout seq{.row_begin = 0, .num_rows = chunk, .num_computed_tokens = prefix, .block_table = {}};
  for (std::int32_t b = 0; b < blocks; ++b) seq.block_table.push_back(b);
  layout.sequences.push_back(seq);
  for (std::int32_t t = 0; t < chunk; ++t) {
    layout.token_ids.push_back(0);
    layout.positions.push_back(prefix + t);
  }
  const Tensor q = must(cuda_random_weight(*ops, {chunk, kHeads * kDim}, DType::bf16, 11, 1.0f));
  const Tensor k = must(cuda_random_weight(*ops, {chunk, kKvHeads * kDim}, DType::bf16, 12, 1.0f));
  const Tensor v = must(cuda_random_weight(*ops, {chunk, kKvHeads * kDim}, DType::bf16, 13, 1.0f));
  const Tensor out = must(cuda_random_weight(*ops, {chunk, kHeads * kDim}, DType::bf16, 14, 1.0f));
  ops->begin_step(layout);
  const double t = time_median(2, 7, [&] { ops->attention(0, q, k, v, 0.0884f, out); });
  // Which path ran under the cuDNN choices: split over keys, whole, or ours.
  const char* path = !cuda::uses_cudnn(kernel)                   ? ""
                     : must(cuda_cudnn_sdpa_split_runs(*ops)) > 0 ? " [cuDNN split]"
                     : must(cuda_cudnn_sdpa_runs(*ops)) > 0       ? " [cuDNN whole]"
                                                                  : " [wgmma-ws]";
  const double flops = 4.0 * kHeads * kDim * chunk * (prefix + (chunk + 1) / 2.0);
  char name[200];
  std::snprintf(name, sizeof name, "attention %s%s chunk %d over %dk prefix, pages of %d, 32/8 heads x 128 (%.3f ms)",
                std::string(kernel_name).c_str(), path, chunk, prefix / 1000, block, t * 1e3);
  row(name, flops / t / 1e12, "TFLOP/s", pct(flops / t / kBf16FlopsPerSecond) + " of 790");
}

// Attention of a short prefill chunk over a long cached prefix (the mixed steps
// of a long prompt: a few hundred rows a step at 100k keys), with the prefix
// split over several blocks where too few tiles would fill the GPU (without
// the split, 256 rows over 100k keys took 2.5x as long: docs/benchmarks.md).
void bench_chunk_over_prefix() {
  struct Shape {
    std::int32_t prefix, chunk;
  };
  for (const auto& [kernel_name, kernel] : cuda::kPrefillAttentionNames) {
    if (!prefill_kernel_wanted(kernel_name)) continue;
    // Issue 14's shapes (chunks of 256-2048 rows over 32k-128k prefixes), and
    // the 256-row chunk over 100k of the earlier runs.
    for (const Shape shape : {Shape{32768, 256}, Shape{32768, 1024}, Shape{32768, 2048}, Shape{65536, 256},
                              Shape{65536, 1024}, Shape{65536, 2048}, Shape{131072, 256}, Shape{131072, 1024},
                              Shape{131072, 2048}, Shape{100000, 256}, Shape{100000, 128}, Shape{100000, 512},
                              Shape{16384, 512}, Shape{32768, 640}, Shape{50000, 384}, Shape{16000, 1100},
                              Shape{50000, 768}})
      chunk_attention_row(kernel_name, kernel, shape.prefix, shape.chunk, 16);
  }
}

// --chunk-pages: the burst's prefill-lane chunks (8,192 rows over 0-100k)
// under the default attention, by KV page size: is 16 tokens a page what
// keeps cuDNN below its 593 TFLOP/s on whole causal prompts (DEVICE.md)?
void bench_chunk_pages() {
  const CudaOptions defaults;
  const auto kernel = defaults.prefill_attention;
  const std::string_view kernel_name = cuda::name_of(kernel, cuda::kPrefillAttentionNames);
  for (const std::int32_t prefix : {0, 16384, 65536, 100000})
    for (const std::int32_t block : {16, 32, 64, 128, 256}) chunk_attention_row(kernel_name, kernel, prefix, 8192, block);
}

// Mixed steps of the long-prompt burst (burst_bench.sh) as the engine runs
// them, eagerly: one prefill chunk over a long prefix plus the chats' decodes,
// and the same with long prompts decoding too. The engine's step trace puts
// such steps at ~50 ms where the chunk's attention alone (--chunk) is ~half
// that; each row also runs its parts alone (the chunk without decodes, the
// decodes without the chunk) so the difference shows what mixing costs. Under
// `--profile-burst` (graphs off, 2 steps a shape) ncu sees each kernel.
struct BurstStepShape {
  std::int32_t chunk, prefix;
  std::vector<std::int32_t> decode_contexts;
};
StepLayout make_burst_step(const BurstStepShape& shape, std::int32_t block, bool with_chunk, bool with_decodes) {
  StepLayout layout;
  std::int32_t next_block = 0;
  auto add = [&](std::int32_t context, std::int32_t rows) {
    SequenceLayout seq{.row_begin = layout.num_rows(), .num_rows = rows, .num_computed_tokens = context,
                       .block_table = {}};
    for (std::int32_t b = 0; b < (context + rows + block - 1) / block; ++b) seq.block_table.push_back(next_block++);
    for (std::int32_t t = 0; t < rows; ++t) {
      layout.token_ids.push_back((context * 31 + t * 7) % 128000);
      layout.positions.push_back(context + t);
    }
    layout.sample_rows.push_back(seq.row_begin + rows - 1);
    layout.sequences.push_back(seq);
  };
  if (with_decodes)
    for (const std::int32_t context : shape.decode_contexts) add(context, 1);
  if (with_chunk) add(shape.prefix, shape.chunk);
  return layout;
}

void bench_burst_steps(bool profile, int only_shape) {
  constexpr std::int32_t kBlock = 16;
  const std::vector<std::int32_t> chats(8, 700);
  std::vector<std::int32_t> chats_and_long = chats;
  for (const std::int32_t c : {60000, 100000, 120000}) chats_and_long.push_back(c);
  // The first four: session 8's steps; the rest: what the planner sizes under
  // `auto` at 50 ms (about 1k rows at 16k keys down to 256 at 100k-120k).
  const std::vector<BurstStepShape> shapes = {
      {128, 80000, chats},   {256, 40000, chats},  {512, 16000, chats},   {128, 80000, chats_and_long},
      {1024, 16000, chats},  {512, 50000, chats},  {256, 100000, chats},  {256, 120000, chats_and_long},
      // The chunk cut so that chunk + chats is a multiple of 128 rows.
      {504, 16000, chats},   {248, 100000, chats}, {1016, 16000, chats}};
  auto ops = new_ops();
  const Llama8B model(*ops);
  std::int32_t most_blocks = 0;
  for (const BurstStepShape& s : shapes)
    most_blocks = std::max(most_blocks, make_burst_step(s, kBlock, true, true).sequences.back().block_table.back() + 1);
  allocate_model_kv(*ops, most_blocks);
  for (std::size_t shape_index = 0; shape_index < shapes.size(); ++shape_index) {
    if (only_shape >= 0 && static_cast<std::size_t>(only_shape) != shape_index) continue;
    const BurstStepShape& s = shapes[shape_index];
    std::int64_t decode_keys = 0;
    for (const std::int32_t c : s.decode_contexts) decode_keys += c;
    char name[160];
    std::snprintf(name, sizeof name, "burst step: chunk %d over %dk + %zu decodes (%lldk keys)", s.chunk,
                  s.prefix / 1000, s.decode_contexts.size(), static_cast<long long>(decode_keys / 1000));
    for (const auto& [label, with_chunk, with_decodes] :
         {std::tuple{"mixed", true, true}, std::tuple{"chunk alone", true, false},
          std::tuple{"decodes alone", false, true}}) {
      if (only_shape >= 0 && !(with_chunk && with_decodes)) continue;
      const StepLayout layout = make_burst_step(s, kBlock, with_chunk, with_decodes);
      if (profile) {
        for (int i = 0; i < 2; ++i) run_model_step(*ops, model, layout);
        sync();
        continue;
      }
      const double t = time_median(2, 7, [&] { run_model_step(*ops, model, layout); });
      row(std::string(name) + ", " + label, t * 1e3, "ms", "eager");
    }
  }
}


// --overlap: can the chats decode beside a big prefill chunk instead of
// between ~50 ms steps? (Issue 14: the burst's mixed steps cost 1.3x
// prefill-first's per FLOP, S12-lead-1, and none of it is the chats.) Two Ops
// with a model and KV each: one runs a chunk of 2,048 rows over 64k, the
// other the 8 chats' decode steps, on two host threads, under five stream
// arrangements (`--overlap ROWS [PREFIX]` sets the chunk's rows and prefix;
// prefix 0 is a chunk of GEMMs, 64k one of attention). Per arrangement: the chunk's step alone and beside the
// decodes, the decode step alone and beside the chunk (back to back, then
// paced at one step per 50 ms, what 20 tok/s needs), the longest decode step.
void bench_overlap(std::int32_t chunk_rows, std::int32_t prefix_tokens) {
  struct Arrangement {
    const char* name;
    std::int32_t decode_sms;
    bool decode_high_priority;
    std::int32_t chunk_sms;
    bool gemm_sm_count_target = false;
  };
  const Arrangement arrangements[] = {
      {"two streams", 0, false, 0},
      {"decodes at high priority", 0, true, 0},
      {"decodes on 8 SMs, the chunk on the rest", 8, false, -8},
      {"decodes on 8 SMs, the chunk on the rest, cuBLASLt planned for its SMs", 8, false, -8, true},
      {"decodes on 16 SMs, the chunk on the rest", 16, false, -16},
      {"decodes on 16 SMs, the chunk on the rest, cuBLASLt planned for its SMs", 16, false, -16, true},
      {"decodes on 32 SMs, the chunk on the rest", 32, false, -32}};
  constexpr std::int32_t kBlock = 16;
  const BurstStepShape chunk_shape{chunk_rows, prefix_tokens, {}};
  const BurstStepShape chats_shape{0, 0, std::vector<std::int32_t>(8, 700)};
  const StepLayout chunk = make_burst_step(chunk_shape, kBlock, true, false);
  const StepLayout chats = make_burst_step(chats_shape, kBlock, false, true);
  using Clock = std::chrono::steady_clock;
  auto ms_since = [](Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); };
  for (const Arrangement& a : arrangements) {
    CudaOptions chunk_options = bench_options(), decode_options = bench_options();
    chunk_options.stream_sms = a.chunk_sms;
    chunk_options.gemm_sm_count_target = a.gemm_sm_count_target;
    decode_options.stream_sms = a.decode_sms;
    decode_options.stream_high_priority = a.decode_high_priority;
    auto chunk_ops_result = make_cuda_ops(chunk_options);
    auto decode_ops_result = make_cuda_ops(decode_options);
    if (!chunk_ops_result.ok() || !decode_ops_result.ok()) {
      std::printf("| overlap: %s | refused: %s | |\n", a.name,
                  (chunk_ops_result.ok() ? decode_ops_result : chunk_ops_result).error_message().c_str());
      continue;
    }
    auto chunk_ops = std::move(chunk_ops_result).value();
    auto decode_ops = std::move(decode_ops_result).value();
    const Llama8B chunk_model(*chunk_ops), decode_model(*decode_ops);
    allocate_model_kv(*chunk_ops, chunk.sequences.back().block_table.back() + 1);
    allocate_model_kv(*decode_ops, chats.sequences.back().block_table.back() + 1);
    const double chunk_alone = time_median(1, 3, [&] { run_model_step(*chunk_ops, chunk_model, chunk); }) * 1e3;
    const double decode_alone = time_median(3, 9, [&] { run_model_step(*decode_ops, decode_model, chats); }) * 1e3;
    for (const double pace_ms : {0.0, 50.0}) {
      std::atomic<bool> chunk_done{false};
      std::vector<double> decode_ms;
      double chunk_total = 0.0;
      constexpr int kChunks = 4;
      std::thread decodes([&] {
        cudaSetDevice(0);
        do {  // at least one step, so the percentiles below have one
          const auto start = Clock::now();
          run_model_step(*decode_ops, decode_model, chats);
          decode_ms.push_back(ms_since(start));
          while (ms_since(start) < pace_ms && !chunk_done.load()) std::this_thread::yield();
        } while (!chunk_done.load());
      });
      for (int i = 0; i < kChunks; ++i) {
        const auto start = Clock::now();
        run_model_step(*chunk_ops, chunk_model, chunk);
        chunk_total += ms_since(start);
      }
      chunk_done = true;
      decodes.join();
      std::sort(decode_ms.begin(), decode_ms.end());
      const double chunk_beside = chunk_total / kChunks;
      char name[200], value[160];
      std::snprintf(name, sizeof name, "overlap %d rows over %d: %s, decodes %s", chunk_rows, prefix_tokens, a.name,
                    pace_ms > 0 ? "every 50 ms" : "back to back");
      std::snprintf(value, sizeof value,
                    "chunk %.1f ms (alone %.1f: x%.3f); decode step p50 %.1f ms, max %.1f (alone %.2f), %zu steps",
                    chunk_beside, chunk_alone, chunk_beside / chunk_alone, decode_ms[decode_ms.size() / 2],
                    decode_ms.back(), decode_alone, decode_ms.size());
      std::printf("| %s | %s | |\n", name, value);
      std::fflush(stdout);
    }
  }
}

// --lane-decode: the chats' decode step alone on a decode lane's SMs (8, 16,
// or the whole GPU) at 1-8 rows, with the small batches on the GEMV kernels
// and on cuBLASLt (CudaOptions::gemv_max_rows). In S18-lead-1 a 2-row
// step on 8 SMs took 61-91 ms where 8 rows took 30.
void bench_lane_decode() {
  constexpr std::int32_t kBlock = 16;
  for (const std::int32_t sms : {8, 16, 0}) {
    for (const bool gemv : {true, false}) {
      CudaOptions options = bench_options();
      options.stream_sms = sms;
      options.gemv_max_rows = gemv ? static_cast<std::int32_t>(cuda::kGemvMaxRows) : 0;
      auto ops_result = make_cuda_ops(options);
      if (!ops_result.ok()) {
        std::printf("| lane decode on %d SMs | refused: %s | |\n", sms, ops_result.error_message().c_str());
        continue;
      }
      auto ops = std::move(ops_result).value();
      const Llama8B model(*ops);
      const BurstStepShape most{0, 0, std::vector<std::int32_t>(8, 700)};
      allocate_model_kv(*ops, make_burst_step(most, kBlock, false, true).sequences.back().block_table.back() + 1);
      for (const std::int32_t rows : {1, 2, 3, 4, 5, 8}) {
        const BurstStepShape shape{0, 0, std::vector<std::int32_t>(rows, 700)};
        const StepLayout chats = make_burst_step(shape, kBlock, false, true);
        const double t = time_median(3, 9, [&] { run_model_step(*ops, model, chats); });
        char name[160];
        std::snprintf(name, sizeof name, "lane decode step, %d rows at 700, on %s, small batches on %s", rows,
                      sms > 0 ? (std::to_string(sms) + " SMs").c_str() : "every SM", gemv ? "GEMV" : "cuBLASLt");
        const double weight_bytes = 2.0 * 7.5e9;  // Llama-3-8B's bf16 weights a step reads, roughly
        row(name, t * 1e3, "ms", pct(weight_bytes / t / hbm_spec()) + " of HBM");
      }
    }
  }
}
}  // namespace
}  // namespace sluice

namespace sluice {
void bench_deepseek_v4_kernels();  // deepseek_v4_bench.cpp
void bench_fp8_gemv();             // fp8_gemv_bench.cpp
void bench_fp8_dense();            // fp8_dense_bench.cpp
}  // namespace sluice

int main(int argc, char** argv) {
  sluice::print_device_ceilings();
  if (argc > 1 && std::strcmp(argv[1], "--deepseek-v4-kernels") == 0) {  // issue 18 stage 3's kernels alone
    sluice::bench_deepseek_v4_kernels();
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--fp8-gemv") == 0) {  // decode-size FP8 GEMMs: GEMV, grouped, cuBLASLt
    sluice::bench_fp8_gemv();
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--fp8-dense") == 0) {  // prefill-size FP8 GEMMs: cuBLASLt, our ws kernels
    sluice::bench_fp8_dense();
    return 0;
  }

  if (argc > 1 && std::strcmp(argv[1], "--lane-decode") == 0) {
    std::printf("| what (sluice CUDA backend) | value | share of the ceiling |\n| --- | --- | --- |\n");
    sluice::bench_lane_decode();
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--decode-sweep-pages") == 0) {  // the sweep's default at 16 and 64 a page
    std::printf("| what (sluice CUDA backend) | value | share of the ceiling |\n| --- | --- | --- |\n");
    for (const std::int32_t block : {16, 64})
      sluice::bench_decode_sweep(argc > 2 ? argv[2] : "", block, sluice::SweepRows::default_and_tiles);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--decode-sweep-loads") == 0) {  // [CASE [LOADS]]: cp.async against TMA loads
    const std::string_view only_loads = argc > 3 ? argv[3] : "";
    if (!only_loads.empty() && !sluice::cuda::parse_name(only_loads, sluice::cuda::kDecodeSplitLoadsNames)) {
      std::fprintf(stderr, "--decode-sweep-loads: LOADS is cp-async, tma or tma-steal\n");
      return 2;
    }
    std::printf("| what (sluice CUDA backend) | value | share of the ceiling |\n| --- | --- | --- |\n");
    for (const std::int32_t block : {16, 64})
      sluice::bench_decode_sweep(argc > 2 ? argv[2] : "", block, sluice::SweepRows::loads, only_loads);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--decode-timeline") == 0) {  // [CASE], "8 x 8k" if none
    std::printf("| what (sluice CUDA backend) | value | share of the ceiling |\n| --- | --- | --- |\n");
    sluice::bench_decode_sweep(argc > 2 ? argv[2] : "8 x 8k", 16, sluice::SweepRows::timeline);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--decode-split-counts") == 0) {  // [CASE], "8 x 8k" if none
    std::printf("| what (sluice CUDA backend) | value | share of the ceiling |\n| --- | --- | --- |\n");
    for (const std::int32_t block : {16, 64})
      sluice::bench_decode_sweep(argc > 2 ? argv[2] : "8 x 8k", block, sluice::SweepRows::split_counts);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--chunk-pages") == 0) {
    std::printf("| what (sluice CUDA backend) | value | share of the ceiling |\n| --- | --- | --- |\n");
    sluice::bench_chunk_pages();
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--overlap") == 0) {
    sluice::bench_overlap(argc > 2 ? std::atoi(argv[2]) : 2048, argc > 3 ? std::atoi(argv[3]) : 64000);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--sampling") == 0) {
    sluice::bench_sampling();
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--profile") == 0) {
    sluice::profile_run();
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--decode1") == 0) {
    sluice::g_decode1 = true;
    sluice::bench_gemm();
    sluice::bench_fused_gemv();
    sluice::bench_decode_variants(false);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--deepseek-moe-fp8") == 0) {  // the MoE layer under fp8_wgmma only
    sluice::g_moe_fp8_wgmma_only = true;
    if (argc > 2) sluice::g_moe_fp8_kernel = argv[2];
    if (argc > 3) {  // the bytes probe (grouped_gemm_fp8_kernel.h): its products are wrong, its bytes tell
      using Probe = sluice::cuda::GroupedGemmFp8BytesProbe;
      using PathProbe = sluice::cuda::GroupedGemmFp8PathProbe;
      const std::string_view probe = argv[3];
      const Probe chosen = probe == "weights" ? Probe::one_expert_weights
                           : probe == "a"     ? Probe::one_tile_a
                           : probe == "both"  ? Probe::both
                                              : Probe::none;
      const PathProbe path = probe == "loads-only"  ? PathProbe::loads_only
                             : probe == "mmas-only" ? PathProbe::mmas_only
                                                    : PathProbe::none;
      if (chosen == Probe::none && path == PathProbe::none && probe != "none") {
        std::fprintf(stderr, "--deepseek-moe-fp8: PROBE is none, weights, a, both, loads-only or mmas-only, not %s\n",
                     argv[3]);
        return 2;
      }
      sluice::cuda::set_grouped_gemm_fp8_ws_bytes_probe(chosen);
      sluice::cuda::set_grouped_gemm_fp8_ws_path_probe(path);
    }
    if (argc > 4) {  // the paired plan's order
      const std::string_view order = argv[4];
      if (order != "pairs" && order != "couples") {
        std::fprintf(stderr, "--deepseek-moe-fp8: ORDER is pairs or couples, not %s\n", argv[4]);
        return 2;
      }
      sluice::cuda::set_grouped_gemm_fp8_odd_couples(order == "couples");
    }
    std::printf("| what (sluice CUDA backend) | value | share of the ceiling |\n| --- | --- | --- |\n");
    sluice::bench_deepseek_moe(false);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--deepseek-gemm") == 0) {  // the dense FP8 GEMMs only
    std::printf("| what (sluice CUDA backend) | value | share of the ceiling |\n| --- | --- | --- |\n");
    sluice::bench_deepseek_gemm(false);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--deepseek") == 0) {  // FP8 GEMMs and the MoE layer only
    std::printf("| what (sluice CUDA backend) | value | share of the ceiling |\n| --- | --- | --- |\n");
    sluice::bench_deepseek_gemm(false);
    sluice::bench_deepseek_moe(false);
    return 0;
  }
  if (argc > 1 && (std::strcmp(argv[1], "--burst-step") == 0 || std::strcmp(argv[1], "--profile-burst") == 0)) {
    const bool profile = std::strcmp(argv[1], "--profile-burst") == 0;
    sluice::g_use_graphs = !profile;
    std::printf("| what (sluice CUDA backend) | value | share of the ceiling |\n| --- | --- | --- |\n");
    sluice::bench_burst_steps(profile, argc > 2 ? std::atoi(argv[2]) : -1);
    return 0;
  }
  if (argc > 2 && (std::strcmp(argv[1], "--chunk") == 0 || std::strcmp(argv[1], "--prefill-attention") == 0 ||
                   std::strcmp(argv[1], "--prefill-model") == 0)) {
    std::string_view names = argv[2];
    while (!names.empty()) {
      const std::size_t comma = names.find(',');
      const std::string_view name = names.substr(0, comma);
      if (!sluice::cuda::parse_name(name, sluice::cuda::kPrefillAttentionNames)) {
        std::fprintf(stderr, "unknown prefill attention '%.*s'\n", static_cast<int>(name.size()), name.data());
        return 2;
      }
      sluice::g_prefill_kernels.emplace_back(name);
      names = comma == std::string_view::npos ? std::string_view() : names.substr(comma + 1);
    }
  }
  if (argc > 1 && std::strcmp(argv[1], "--prefill-model") == 0) {  // Llama-3-8B prefill per attention choice
    std::printf("| what (sluice CUDA backend) | value | share of the ceiling |\n| --- | --- | --- |\n");
    sluice::bench_prefill_model();
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--gemm-rows") == 0) {
    std::printf("| what (sluice CUDA backend) | value | share of the ceiling |\n| --- | --- | --- |\n");
    sluice::bench_gemm_rows();
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--chunk") == 0) {  // chunk over a long prefix only
    std::printf("| what (sluice CUDA backend) | value | share of the ceiling |\n| --- | --- | --- |\n");
    sluice::bench_chunk_over_prefix();
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--prefill-attention") == 0) {  // prefill attention, every kernel
    std::printf("| what (sluice CUDA backend) | value | share of the ceiling |\n| --- | --- | --- |\n");
    sluice::bench_attention(false, sluice::AttentionRows::prefill_only);
    sluice::bench_chunk_over_prefix();
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--mla-prefill") == 0) {  // MLA prefill: tensor_core and cudnn
    std::printf("| what (sluice CUDA backend) | value | share of the ceiling |\n| --- | --- | --- |\n");
    sluice::bench_mla(false, sluice::MlaRows::prefill_only);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--mla-decode") == 0) {  // MLA decode rows, [one kernel by name]
    const std::string_view only = argc > 2 ? std::string_view(argv[2]) : std::string_view();
    if (!only.empty() && std::none_of(sluice::cuda::kMlaKernelsNames.begin(), sluice::cuda::kMlaKernelsNames.end(),
                                      [&](const auto& named) { return named.first == only; })) {
      std::fprintf(stderr, "cuda_bench --mla-decode: unknown MLA kernel set '%s'\n", argv[2]);
      return 2;
    }
    std::printf("| what (sluice CUDA backend) | value | share of the ceiling |\n| --- | --- | --- |\n");
    sluice::bench_mla(false, sluice::MlaRows::decode_only, only);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--mla") == 0) {  // DeepSeek-V3 MLA rows only
    std::printf("| what (sluice CUDA backend) | value | share of the ceiling |\n| --- | --- | --- |\n");
    sluice::bench_mla(false);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--attention") == 0) {  // attention and model rows only
    std::printf("| what (sluice CUDA backend) | value | share of the ceiling |\n| --- | --- | --- |\n");
    sluice::bench_attention(false);
    sluice::bench_chunk_over_prefix();
    sluice::bench_model(false);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--decode-sweep-plans") == 0) sluice::g_decode_sweep_plans = true;
  if (argc > 1 && (std::strcmp(argv[1], "--decode-sweep") == 0 || sluice::g_decode_sweep_plans)) {  // [one case]
    std::printf("| what (sluice CUDA backend) | value | share of the ceiling |\n| --- | --- | --- |\n");
    sluice::bench_decode_sweep(argc > 2 ? std::string_view(argv[2]) : std::string_view());
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--decode") == 0) {  // decode GEMVs and attention, decode steps
    sluice::g_decode = true;
    std::printf("| what (sluice CUDA backend) | value | share of the ceiling |\n| --- | --- | --- |\n");
    sluice::bench_fused_gemv();
    sluice::bench_attention(false, sluice::AttentionRows::decode_only);
    sluice::bench_model(false);
    sluice::bench_decode_variants(false);
    return 0;
  }
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  std::printf("| what (sluice CUDA backend) | value | share of the ceiling |\n| --- | --- | --- |\n");
  sluice::bench_copy();
  sluice::bench_gemm();
  sluice::bench_deepseek_gemm(quick);
  sluice::bench_deepseek_moe(quick);
  sluice::bench_attention(quick);
  if (!quick) sluice::bench_chunk_over_prefix();
  sluice::bench_mla(quick);
  sluice::bench_model(quick);
  sluice::bench_decode_variants(quick);
  sluice::bench_sampling();
  return 0;
}
