// Every setting of the CUDA backend, in one struct its owner fills explicitly:
// `sluice serve` and `sluice generate` from typed --cuda-* flags (logged at
// start, refused without --device cuda), cuda_bench per row, the tests per
// case. Nothing in backend/cuda reads the environment.
//
// Pure C++ (no CUDA headers), so the CLI can hold one in a build without CUDA.
// Each kernel choice says what it was measured at (one H200; the rows are in
// NOTES.md and docs/benchmarks.md); the defaults are the measured winners.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "sluice/backend/cuda/cudnn_plan_classes.h"

namespace sluice {
namespace cuda {

// The kernel that runs whole prefill query tiles (128 rows a block).
enum class PrefillAttention {
  // mma.sync, FlashAttention-2 style, 64-key tiles (attention_prefill.cu):
  // head_dim 64 and 128; 255 TFLOP/s at 32k (run 9).
  mma,
  // (wgmma, two warpgroups loading and multiplying in phase, 320 TFLOP/s at
  // 32k, was deleted in session 42: wgmma_ws runs 1.13-1.23x faster, S8-3.)
  // wgmma, warp specialised (attention_prefill_wgmma_ws.cu): a producer
  // warpgroup loads K/V into an mbarrier ring, two consumer warpgroups take
  // turns to issue S = Q K^T and the previous tile's P V, each one's softmax
  // under the other's MMAs (FlashAttention-3's structure); head_dim 128
  // (other head_dims keep mma).
  // The default from S8-5 to session 10, and auto's fallback: the whole attention suite passes under it on the H200 (S8-5);
  // 364-392 TFLOP/s at 8k/32k causal, 1.13-1.23x wgmma (S8-3); the burst ends
  // at 87.3 s against 105.6 s on wgmma (S8-4, S8-5).
  wgmma_ws,
  // cuDNN's SDPA through its graph API (cudnn_sdpa.h): libcudnn.so.9 opened
  // at the first prefill step, a plan per shape class, paged K/V and packed
  // rows read in place. Steps cuDNN cannot take (no library, a head_dim or
  // block size it refuses, a plan it fails to make) run wgmma_ws, with one
  // log line. Decode rows stay on the split-KV kernel. MLA prefill (QK 192 /
  // V 128) runs through it too (cuDNN 9.19+). The suite passes under it
  // (S9-C2/C3); 534-621 TFLOP/s at 8k/32k (1.39-1.55x wgmma_ws), chunks of
  // 1024-2048 rows over 32k-131k 483-534 (1.34-1.45x), but 256-row chunks
  // ~250 (0.72-0.95x) unsplit. Under this choice every step cuDNN can take
  // runs on it: a short chunk over a long prefix split over keys
  // (cudnn_split_plan.h), an underfilled step that cannot split whole.
  cudnn,
  // cuDNN where the step's query tiles fill the GPU or its prefixes split over
  // keys (cudnn_split_plan.h's route), wgmma_ws for the rest (short chunks
  // over short prefixes, where cuDNN's unsplit tiles leave SMs idle: S9-C2).
  // The default: the attention suite passes under it (S10-lead-1), it runs
  // every chunk shape measured 1.03-1.43x wgmma_ws, and the burst in 81.3 s
  // against 87.3 (S10-lead-2 against S8-5). Without libcudnn.so.9 it is wgmma_ws.
  automatic,
};

// Whether prefill attention goes to cuDNN's SDPA where it can.
constexpr bool uses_cudnn(PrefillAttention p) {
  return p == PrefillAttention::cudnn || p == PrefillAttention::automatic;
}

// Context buckets of captured decode graphs (a graph is captured per bucket,
// and the split-KV grid is sized for the bucket's longest context).
enum class GraphBuckets {
  power_of_two,  // 256, 512, ..., 8192, 16384
  // Eighth octaves above 4096 (4097 -> 4608, 8193 -> 9216): batch 8 @ 8k +22%,
  // batch 64 @ 8k -2.6% (run 8, before each row planned its own splits).
  eighth_octave,
};

// Split K of the decode GEMVs (weights of at most 132 x 64 rows: q|k|v, o_proj,
// down_proj), whose one-warp-a-row grids fill under one wave of warp slots.
enum class GemvSplitK {
  // 2 or 4 warps a row, whichever fills its last wave better (q|k|v: 4).
  by_waves,
  // 2 warps a row everywhere. The default since session 20: batch 1 at 4k
  // 4,404 us a step against 4,450-4,487 for by_waves, at 0 context 4,281
  // against 4,384-4,431, with the batch-1 rows run before any batch-64 row
  // (S20-1; session 11's "8% slower" came right after one).
  two_parts,
};

// How the split-KV decode kernel cuts each row's keys over blocks.
enum class DecodeSplitPlan {
  // by_step_work for uneven steps (rows not within 25% of even, found on the
  // host from the step's keys; a decode graph is keyed by it), uniform_waves
  // for the rest; eager steps size by_step_work's grid to the step (the host
  // knows its keys), so its empty blocks cost nothing there. The default.
  adaptive,
  // The grid's split count for rows all as long as the longest, chosen to fill
  // the last wave (batch 64 x 8k: 3 splits, 3.88 waves); each row then cuts
  // its keys into at most that many splits. The default: 72-90% of HBM on even
  // batches (8-64 x 8k-128k), but a step of a few long contexts beside short
  // ones reads 30.5% (the burst's 8 x 1k + 8 x 16k-128k: two 65k-key splits
  // hold the step; runs S6-1..S6-4).
  uniform_waves,
  // Uneven steps (rows not within 25% of even, found on the device from the
  // step's keys) cut every row by one split length from the whole step's
  // keys; even steps keep the uniform plan. The burst's step reads 77.0%
  // (2.5x), a mixed 64 x 1k-128k 84.8% (80.5%), but even batches lose 13-20
  // points: the grid is sized for the finest cut (up to ~200 splits a row),
  // and its empty blocks cost that much (S6-4). adaptive sizes the grid to
  // the step where it can (eager steps) and keeps even steps uniform.
  by_step_work,
};

// How the tensor-core split-KV decode kernel lays a GQA group on the mma
// tiles (attention_split.cu).
enum class DecodeSplitTiles {
  // Keys as the mma's rows, the group's heads (up to 8) as its columns:
  // half the mma and softmax work a key of heads_as_rows at groups of <= 8.
  keys_as_rows,
  // The group's heads (up to 16) as the mma's rows: groups of 9-16 always.
  heads_as_rows,
};

// How the keys-as-rows split-KV decode kernel fills its K/V ring
// (attention_split.cu).
enum class DecodeSplitLoads {
  // cp.async: every thread copies 16-byte pieces of the tile's rows (16 a
  // thread a 64-key tile), then the block waits and synchronises per tile.
  cp_async,
  // TMA boxes of a warp's 16 keys (one page's head slice, or a quarter of a
  // page of 64) completing on that warp's mbarrier: four instructions a warp
  // a tile at head_dim 128, no block-wide barrier in the loop. Pages of a
  // power of two >= 16 keys only; other shapes keep cp_async. The default
  // since session 29.
  tma,
  // TMA, and each warp claims its next 16-key slice of the row from a
  // counter the row's splits share (work stealing) once its first two are
  // taken, so the splits of a row end together instead of when their own
  // ranges do (attention_split.cu, WarpSlices). Where the split kernel merges
  // its own splits; elsewhere as `tma`. Opt-in (session 40).
  tma_steal,
};

// Where the split-KV decode kernel's partials are merged (attention_split.cu).
enum class DecodeSplitMerge {
  // In the split kernel: the last block of a row's splits to finish merges
  // them (rows of at most 32 splits; longer ones keep the combine kernel).
  // One kernel fewer a layer. The default since session 12 (gqadec): the
  // decode suites pass under it on the H200; decode attention +0.1-0.9
  // points of HBM on 10 of 12 sweep rows (8 x 8k 76.0 -> 76.8%), batch-1
  // decode unchanged within noise (S12-gqadec-1).
  in_split_kernel,
  // A second kernel, one block a (row, query head): the A/B row.
  combine_kernel,
};

// RoPE and the KV page write of a decode step captured as a graph.
enum class DecodeRopeFusion {
  // The q|k|v GEMV's epilogue rotates q and k and writes k and v to their
  // pages (gemv.cu): no kernel between the GEMV and attention. Only where
  // the layer calls qkv_projection, rope and attention in a row (no bias, no
  // q/k norm); elsewhere as kv_write_kernel. The default since session 12
  // (gqadec): bit-equal to kv_write_kernel by test, the goldens pass under
  // it; batch 1 at 4k 219.5 tok/s against 217.3, within the ~1% run-to-run
  // spread (S12-gqadec-1).
  qkv_epilogue,
  // One kernel after the GEMV does RoPE and the page write (elementwise.cu).
  kv_write_kernel,
};

// The MLA attention kernels (DeepSeek-V3, mla_attention.h). All three pass the
// MLA suite on the H200 (runs S6-2, S8-3, S9-2/3); wgmma is the default since
// S9-2: decode 64 x 8k 1.40 TB/s against tensor_core's 0.47 (whole op;
// docs/benchmarks.md, Session 9); prefill is the same kernel under both.
enum class MlaKernels {
  // CUDA cores, any dims: a warp a (query row, head) in prefill; in decode a
  // block a (row, head, key split), the latent rows read once per head.
  simple,
  // mma.sync where the dims are DeepSeek-V3's (QK 128 + 64, V 128, latent
  // 512 + 64; simple elsewhere): prefill FlashAttention-2 style over the
  // decompressed K/V; decode with 64 heads a block in the MMA's M, each latent
  // tile loaded once for them.
  tensor_core,
  // Hopper wgmma (sm_90a) decode where the latent is 512 + 64, FlashMLA's
  // layout: 64 heads a block in M, S = Q K^T and the softmax by one
  // warpgroup, O's 512 columns split between two, the latent tile read once
  // a block for K and V; prefill as tensor_core. The default.
  wgmma,
  // (Deleted in session 44: wgmma_tma, wgmma's decode with the latent tiles
  // loaded by TMA, equal to cp.async with a barrier a stage and 30% slower
  // with one a panel, S17-S18.)
  // (Deleted in session 42 after losing their rows: wgmma_seesaw, FlashMLA's
  // seesaw schedule on wgmma, no faster than wgmma (S26-2, S26-3); and
  // wgmma_keys_m, the keys as wgmma's M at 16 heads, slower than wgmma in a
  // decode graph on both cards (S36-1: 57.4% against 65.0% on the H200).)
  // mma.sync decode with a row's heads as the MMA's M of 16
  // (kernels/mla_decode_16_heads.cu) where a decode row has at most 16 heads
  // and the block size is a multiple of 8: no MMA rows on padding, eight
  // warps splitting each 32-key tile's S by keys and P V by latent dims, TMA
  // loads into a 5-tile ring. wgmma's kernel elsewhere; prefill as
  // tensor_core. The MLA suite passes under it (S38-1, S39-1, H100), but it
  // is bound by its own chain: the pipelined form streams 2.5 TB/s from L2
  // as from HBM, 76.9% of the copy in a decode graph against wgmma's 80.3%
  // in the same call (S39-1). Opt-in.
  mma_16_heads,
  // The same kernel in blocks of 4 warps, two an SM (each warp twice the
  // keys of S and two panels of O; a 2-tile ring a block): two independent
  // chains of barriers and softmax an SM, for a kernel bound by its chain
  // (S39-1: mma_16_heads streams 2.5 TB/s from L2 as from HBM). The default
  // since session 39.
  mma_16_heads_pairs,
  // The pairs shape with one block barrier a tile, not two: every warp runs
  // the tile's softmax itself in registers, P stays in registers as the
  // A operand of P V (the barrier after the softmax held 22% of the pairs
  // form's stall samples, S39-2). Its chain is faster (4.09 against 3.77
  // TB/s from L2) but from HBM it reads as the pairs form on an H100 (85.1%
  // against 85.4% in a decode graph, S40-1). Opt-in until an H200 compares them.
  mma_16_heads_one_barrier,
};

// Dense matmuls whose weight is FP8 with 128x128 block scales. Up to
// kFp8KernelMaxRows rows (decode) the default takes the split-K FP8 GEMV
// (kernels/fp8_gemv.h, bf16 activations), `kernel` the grouped kernel.
enum class Fp8DenseGemm {
  // cuBLASLt block scaling (activations quantized per 1x128 block, VEC128_32F
  // x BLK128x128_32F, cuBLASLt 12.9+); the grouped kernel where cuBLASLt has
  // no algorithm for the shape. Not yet measured (issue 15).
  cublaslt,
  // Our grouped kernel (grouped_gemm.cu) at every size, decode included: the
  // weight dequantized to bf16 in registers, bf16 activations: the
  // correct-first path and the A/B row (against cuBLASLt above 16 rows, the
  // FP8 GEMV up to 16).
  kernel,
};

// The routed experts' GEMMs of FP8 experts (bf16 experts always take grouped_gemm.cu).
enum class MoeExpertGemm {
  // grouped_gemm.cu at every size: the FP8 weight dequantized to bf16 in
  // registers, bf16 activations, mma.sync. S9-2 (docs/benchmarks.md): decode
  // batch 64 48.0% of HBM, prefill 4096 tokens 145 TFLOP/s.
  grouped,
  // (per_expert_cublaslt, a cuBLASLt call an expert after a host sync, was
  // deleted in session 42: 73 TFLOP/s at prefill (S9-1) against fp8_wgmma's
  // 480 (S10-2), and eager steps only.)
  // grouped_gemm_fp8.cu at every size, graphs included: activations quantized
  // per 1x128 block (e4m3, the checkpoints' "dynamic" activation scheme) and
  // wgmma e4m3 x e4m3 with the block scales promoted per 128-wide K block.
  // S10-2: decode batch 64 82.9% of HBM, prefill 480 TFLOP/s (3.4x grouped). The default.
  fp8_wgmma,
};

}  // namespace cuda

struct CudaOptions {
  int device_index = 0;
  // Initial size of the per-step scratch arena (activations, attention
  // partials). A step that needs more gets it; the arena then keeps the
  // high-water mark.
  std::int64_t scratch_bytes = 1LL << 30;
  // Capture decode steps (every sequence one row) as CUDA graphs, one per
  // batch size and context bucket, and replay them: removes per-kernel launch
  // cost, which dominates small-batch decode. Tests that read tensors between
  // ops turn it off.
  bool use_cuda_graphs = true;
  // cuBLASLt workspace.
  std::int64_t gemm_workspace_bytes = 32LL << 20;

  // Kernel choices. CLI flags: --cuda-prefill-attention, --[no-]cuda-pdl,
  // --cuda-decode-split-plan.
  // Benchmark-only (cuda_bench's A/B rows): graph_buckets, gemv_split_k,
  // decode_split_merge, decode_split_tiles, decode_split_count,
  // decode_split_stages, decode_split_loads, decode_rope_fusion, mla_kernels, fp8_dense_gemm,
  // moe_expert_gemm.
  // wgmma: the attention suite passed under both kernels on the H200 (S7-2);
  // wgmma runs chunks over long prefixes 1.18-1.27x faster, and the burst in
  // 124 s against mma's 169 (S7-1/S7-3, docs/benchmarks.md). head_dim != 128
  // stays on mma. automatic (cuDNN split or whole, else wgmma_ws): S10-lead-1/2.
  cuda::PrefillAttention prefill_attention = cuda::PrefillAttention::automatic;
  // cuDNN SDPA plans built on a thread of their own (cudnn_sdpa.h's open()):
  // a step whose plan is not ready runs on wgmma_ws instead of waiting
  // 45-110 ms for it, the first ~1.2 s (S10-lead-2: 78 plans in a burst, a
  // 1.3 s chat gap). The server sets it; tests and benchmarks build in line
  // so that every step they check or time runs on cuDNN.
  bool cudnn_plans_in_background = false;
  // Whether a server builds its cuDNN plans before serving: set by serve with
  // --decode-lane, where a plan built while a prefill chunk runs holds the
  // decode lane's launches (S13-lead-2's 0.5-1.3 s decode stalls); one loop
  // runs no kernel beside the chunk, so it keeps the quick start.
  bool cudnn_plans_before_serving = false;
  // The steps that server will run (cudnn_plan_classes.h): where set,
  // allocate_kv_cache builds every cuDNN plan they can ask for (GQA), or the
  // first MLA prefill does (MLA's classes, mla_attention.h; serve sets them
  // for every MLA model, whose prefill cannot decline a step).
  cuda::SdpaServingBounds cudnn_serving_bounds;
  // How long start-up waits for them; the builder thread makes the rest
  // while serving (the likeliest classes come first).
  double cudnn_serving_wait_s = 60.0;
  // Programmatic dependent launch on every step kernel (kernels/launch.cuh):
  // a kernel starts while the previous one drains. Measured within run-to-run
  // noise (batch 1: +5.0%, +4.7%, -3.7% at 0 context; ~0 at 4k; runs 8-10).
  bool programmatic_launch = true;
  cuda::GraphBuckets graph_buckets = cuda::GraphBuckets::power_of_two;
  cuda::GemvSplitK gemv_split_k = cuda::GemvSplitK::two_parts;
  // Decode batches of at most this many rows (<= kGemvMaxRows) run their
  // linears on the GEMV kernels (gemv.cu), larger ones on cuBLASLt. On every
  // SM a Llama-3-8B decode step took 4.68 / 4.87 / 5.38 / 7.01 ms at 1-4 rows
  // on the GEMV against 5.24 / 5.32 / 5.37 / 5.41 on cuBLASLt (S18-lead-2),
  // so 3. A decode lane on a few SMs of its own takes 0: the GEMV needs the
  // whole GPU's warps to reach HBM speed (8 SMs: 37-95 ms against 20-22).
  std::int32_t gemv_max_rows = 3;
  cuda::DecodeSplitPlan decode_split_plan = cuda::DecodeSplitPlan::adaptive;
  cuda::DecodeSplitMerge decode_split_merge = cuda::DecodeSplitMerge::in_split_kernel;
  cuda::DecodeSplitTiles decode_split_tiles = cuda::DecodeSplitTiles::keys_as_rows;
  // The uniform split plan's splits a row, fixed (0: by waves). Benchmark-only.
  std::int32_t decode_split_count = 0;
  // Tiles in the keys-as-rows split kernel's ring: 2, or 3. Benchmark-only.
  std::int32_t decode_split_stages = 2;
  // How that kernel's ring is filled: cp.async or TMA. Benchmark-only. TMA
  // (where split_tma_loads_apply(), else cp.async): the CudaDecodeAttention
  // suite passes under both, and TMA is 6-7% faster on every row of the
  // decode sweep (8 x 8k: 99.8 against 106.2 us; session 29, H100).
  cuda::DecodeSplitLoads decode_split_loads = cuda::DecodeSplitLoads::tma;
  cuda::DecodeRopeFusion decode_rope_fusion = cuda::DecodeRopeFusion::qkv_epilogue;
  // mma_16_heads_pairs since session 39: where a decode row has at most 16
  // heads (DeepSeek-V3 under tensor parallel 8) its kernel, 85.4% of the
  // copy in a decode graph against wgmma's 79.3% in the same call (S39-2,
  // H100), and everywhere else exactly wgmma's kernels and splits.
  cuda::MlaKernels mla_kernels = cuda::MlaKernels::mma_16_heads_pairs;
  cuda::Fp8DenseGemm fp8_dense_gemm = cuda::Fp8DenseGemm::cublaslt;
  // fp8_wgmma since session 10: the DeepSeek goldens pass under it (S10-2, 14/14), the FP8 one
  // against the CPU with and without e4m3 activations within bounds derived from the bf16
  // bound and the CPU's own e4m3 shift; decode batch 64 82.9% of HBM (grouped 47.7%),
  // prefill 4096 tokens 480 TFLOP/s (grouped 143, per-expert cuBLASLt 73).
  cuda::MoeExpertGemm moe_expert_gemm = cuda::MoeExpertGemm::fp8_wgmma;
  // Benchmark-only (cuda_bench --overlap): the Ops' stream on part of the SMs
  // (a green context; see stream_partition.h) or at high priority, so that two
  // Ops can run decodes and a prefill chunk side by side. 0 / false: a
  // whole-device stream of default priority, as everywhere else.
  std::int32_t stream_sms = 0;
  bool stream_high_priority = false;
  // With stream_sms < 0 (the prefill lane beside a decode lane): cuBLASLt
  // plans for the partition's SM count (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET)
  // instead of the device's. On 124 SMs a chunk of GEMMs took 1.098x its
  // time on 132 without it, 1.061x with it (share 1.065); on 116 SMs it was
  // 3% slower with it (S17-lead-3), so serve turns it on beside an 8-SM
  // lane only (--cuda-gemm-sm-count-target overrides).
  bool gemm_sm_count_target = false;
};

namespace cuda {

// Names for flags and logs; parse_* return nullopt for an unknown name.
inline constexpr std::array<std::pair<std::string_view, PrefillAttention>, 4> kPrefillAttentionNames = {
    {{"mma", PrefillAttention::mma},
     {"wgmma-ws", PrefillAttention::wgmma_ws},
     {"cudnn", PrefillAttention::cudnn},
     {"auto", PrefillAttention::automatic}}};
inline constexpr std::array<std::pair<std::string_view, GraphBuckets>, 2> kGraphBucketsNames = {
    {{"power-of-two", GraphBuckets::power_of_two}, {"eighth-octave", GraphBuckets::eighth_octave}}};
inline constexpr std::array<std::pair<std::string_view, GemvSplitK>, 2> kGemvSplitKNames = {
    {{"by-waves", GemvSplitK::by_waves}, {"two-parts", GemvSplitK::two_parts}}};
inline constexpr std::array<std::pair<std::string_view, DecodeSplitPlan>, 3> kDecodeSplitPlanNames = {
    {{"adaptive", DecodeSplitPlan::adaptive},
     {"uniform-waves", DecodeSplitPlan::uniform_waves},
     {"by-step-work", DecodeSplitPlan::by_step_work}}};
inline constexpr std::array<std::pair<std::string_view, DecodeSplitMerge>, 2> kDecodeSplitMergeNames = {
    {{"in-split-kernel", DecodeSplitMerge::in_split_kernel}, {"combine-kernel", DecodeSplitMerge::combine_kernel}}};
inline constexpr std::array<std::pair<std::string_view, DecodeSplitTiles>, 2> kDecodeSplitTilesNames = {
    {{"keys-as-rows", DecodeSplitTiles::keys_as_rows}, {"heads-as-rows", DecodeSplitTiles::heads_as_rows}}};
inline constexpr std::array<std::pair<std::string_view, DecodeSplitLoads>, 3> kDecodeSplitLoadsNames = {
    {{"cp-async", DecodeSplitLoads::cp_async},
     {"tma", DecodeSplitLoads::tma},
     {"tma-steal", DecodeSplitLoads::tma_steal}}};
inline constexpr std::array<std::pair<std::string_view, DecodeRopeFusion>, 2> kDecodeRopeFusionNames = {
    {{"qkv-epilogue", DecodeRopeFusion::qkv_epilogue}, {"kv-write-kernel", DecodeRopeFusion::kv_write_kernel}}};
inline constexpr std::array<std::pair<std::string_view, MlaKernels>, 6> kMlaKernelsNames = {
    {{"simple", MlaKernels::simple},
     {"tensor-core", MlaKernels::tensor_core},
     {"wgmma", MlaKernels::wgmma},
     {"mma-16-heads", MlaKernels::mma_16_heads},
     {"mma-16-heads-pairs", MlaKernels::mma_16_heads_pairs},
     {"mma-16-heads-one-barrier", MlaKernels::mma_16_heads_one_barrier}}};
inline constexpr std::array<std::pair<std::string_view, Fp8DenseGemm>, 2> kFp8DenseGemmNames = {
    {{"cublaslt", Fp8DenseGemm::cublaslt}, {"kernel", Fp8DenseGemm::kernel}}};
inline constexpr std::array<std::pair<std::string_view, MoeExpertGemm>, 2> kMoeExpertGemmNames = {
    {{"grouped", MoeExpertGemm::grouped},
     {"fp8-wgmma", MoeExpertGemm::fp8_wgmma}}};

template <class Enum, std::size_t N>
constexpr std::string_view name_of(Enum value, const std::array<std::pair<std::string_view, Enum>, N>& names) {
  for (const auto& [name, v] : names)
    if (v == value) return name;
  return "?";
}
template <class Enum, std::size_t N>
constexpr std::optional<Enum> parse_name(std::string_view name,
                                         const std::array<std::pair<std::string_view, Enum>, N>& names) {
  for (const auto& [n, v] : names)
    if (n == name) return v;
  return std::nullopt;
}

}  // namespace cuda

// One line for the start-up log: every setting, the benchmark-only ones too.
inline std::string describe(const CudaOptions& options) {
  std::string out = "device " + std::to_string(options.device_index);
  out += ", cuda graphs ";
  out += options.use_cuda_graphs ? "on" : "off";
  out += ", graph buckets ";
  out += cuda::name_of(options.graph_buckets, cuda::kGraphBucketsNames);
  out += ", prefill attention ";
  out += cuda::name_of(options.prefill_attention, cuda::kPrefillAttentionNames);
  out += ", programmatic launch ";
  out += options.programmatic_launch ? "on" : "off";
  out += ", GEMV up to " + std::to_string(options.gemv_max_rows) + " rows, split K ";
  out += cuda::name_of(options.gemv_split_k, cuda::kGemvSplitKNames);
  out += ", decode split plan ";
  out += cuda::name_of(options.decode_split_plan, cuda::kDecodeSplitPlanNames);
  out += ", decode split merge ";
  out += cuda::name_of(options.decode_split_merge, cuda::kDecodeSplitMergeNames);
  out += ", decode split tiles ";
  out += cuda::name_of(options.decode_split_tiles, cuda::kDecodeSplitTilesNames);
  if (options.decode_split_count > 0) out += ", " + std::to_string(options.decode_split_count) + " splits a row";
  out += ", decode split ring of " + std::to_string(options.decode_split_stages) + " tiles";
  out += ", decode split loads ";
  out += cuda::name_of(options.decode_split_loads, cuda::kDecodeSplitLoadsNames);
  out += ", decode RoPE fusion ";
  out += cuda::name_of(options.decode_rope_fusion, cuda::kDecodeRopeFusionNames);
  out += ", MLA kernels ";
  out += cuda::name_of(options.mla_kernels, cuda::kMlaKernelsNames);
  out += ", FP8 dense GEMM ";
  out += cuda::name_of(options.fp8_dense_gemm, cuda::kFp8DenseGemmNames);
  out += ", MoE expert GEMM ";
  out += cuda::name_of(options.moe_expert_gemm, cuda::kMoeExpertGemmNames);
  out += ", scratch " + std::to_string(options.scratch_bytes >> 20) + " MiB";
  out += ", GEMM workspace " + std::to_string(options.gemm_workspace_bytes >> 20) + " MiB";
  return out;
}

}  // namespace sluice
