// The CUDA implementation of sluice::Ops for dense Llama-family models on one GPU
// (built for sm_90a: H100/H200).
//
// Dtypes: activations are bf16 (activation_dtype()); every reduction (norms,
// GEMM, attention, softmax) accumulates in f32. Kernels also accept f32
// activations where a model asks for them explicitly (e.g. f32 logits out of
// matmul, an f32 residual stream through add_rms_norm). Matrices (rank >= 2)
// are converted to bf16 on upload; vectors (norm weights, biases) keep their
// dtype, so an f32 norm weight stays f32.
//
// Streams: every op is enqueued on one stream and never synchronises the host,
// except sample(), which must read the chosen tokens back.
//
// The parts, each in its own file: device_weights (upload), scratch_arena
// (per-step activations), step_metadata (the step's layout on the device),
// decode_graphs (capture and replay of decode steps), step_sampler and
// sample_pack (sampling), rope_frequencies, lt_gemm (cuBLASLt), mla_attention
// and batched_gemm (DeepSeek-V3's MLA over the latent cache), kernels/.
// cuda_ops.cpp ties them into the Ops contract.
#pragma once

#include <cstdint>
#include <memory>

#include "sluice/backend/cuda/cuda_options.h"
#include "sluice/backend/cuda/fp8_gemm_counts.h"
#include "sluice/backend/cuda/kernels/deepseek_v4_kernels.h"
#include "sluice/backend/ops.h"
#include "sluice/common/result.h"

namespace sluice {

// Every setting, kernel choices included: cuda_options.h.
[[nodiscard]] Result<std::unique_ptr<Ops>> make_cuda_ops(const CudaOptions& options);

// A weight made on the device from (seed), uniform in [-scale, scale): lets
// benchmarks build 8B-parameter shapes without a host copy. Owned by `ops`.
[[nodiscard]] Result<Tensor> cuda_random_weight(Ops& ops, Shape shape, DType dtype,
                                                std::uint64_t seed, float scale);

// An FP8 e4m3 weight with random 128x128 block scales in [-scale, scale),
// made on the device (values: random numbers quantized per 1x128 block), laid
// out as an upload of a checkpoint's FP8 weight is. Owned by `ops`.
[[nodiscard]] Result<Tensor> cuda_random_fp8_weight(Ops& ops, Shape shape, std::uint64_t seed, float scale);

// Fills the whole KV cache with random bf16 values in [-1, 1), so benchmarks
// can time long-context decode without prefilling every sequence first.
[[nodiscard]] Status cuda_fill_kv_cache_random(Ops& ops, std::uint64_t seed);
// Fills the whole KV cache with bf16 NaN (every byte 0xff): a test's stale
// slots, which a kernel must keep out of every row's output.
[[nodiscard]] Status cuda_fill_kv_cache_nan(Ops& ops);

// The device blocks of a KvCacheLayout::model_defined cache (DeepSeek-V4's
// paged layout, f32 areas byte-equal to the CPU's), for the V4 kernels that
// address it (kernels/deepseek_v4_kernels.h, V4Paged*). An error where the
// cache is another layout or not allocated yet.
[[nodiscard]] Result<cuda::V4PagedBlocks> cuda_model_defined_kv(const Ops& ops);

// The FP8 block-scaled GEMMs this Ops asked cuBLASLt for so far (dense FP8
// matmuls above kFp8KernelMaxRows rows): how many ran
// there, how many fell back to the grouped kernel, and the last reason. Lets
// tests and benchmarks say which path ran instead of inferring it.
[[nodiscard]] Result<cuda::Fp8GemmCounts> cuda_fp8_gemm_counts(const Ops& ops);

// The options this Ops was made with (a model forward outside the Ops, such
// as DeepSeek-V4's, follows its kernel choices).
[[nodiscard]] Result<CudaOptions> cuda_ops_options(const Ops& ops);

// How many layer calls cuDNN's SDPA ran for this Ops (PrefillAttention::cudnn;
// 0 when it never loaded or took no step): tests and benchmarks say which
// path ran instead of inferring it.
[[nodiscard]] Result<std::int64_t> cuda_cudnn_sdpa_runs(const Ops& ops);
// Of them, the layer calls of steps split over keys (cudnn_split_plan.h).
[[nodiscard]] Result<std::int64_t> cuda_cudnn_sdpa_split_runs(const Ops& ops);
// How many q|k|v GEMVs this Ops launched with RoPE and the KV page write as
// their epilogue (DecodeRopeFusion::qkv_epilogue; launches, not graph
// replays): tests say the fused path ran instead of inferring it.
[[nodiscard]] Result<std::int64_t> cuda_qkv_rope_epilogue_launches(const Ops& ops);
// Blocks until the cuDNN plans asked for so far are built
// (CudaOptions::cudnn_plans_in_background); Ok at once where none are.
[[nodiscard]] Status cuda_cudnn_wait_for_plans(Ops& ops);

}  // namespace sluice
