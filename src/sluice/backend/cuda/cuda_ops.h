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
#pragma once

#include <cstdint>
#include <memory>

#include "sluice/backend/ops.h"
#include "sluice/common/result.h"

namespace sluice {

struct CudaOpsOptions {
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
};

[[nodiscard]] Result<std::unique_ptr<Ops>> make_cuda_ops(const CudaOpsOptions& options);

// A weight made on the device from (seed), uniform in [-scale, scale): lets
// benchmarks build 8B-parameter shapes without a host copy. Owned by `ops`.
[[nodiscard]] Result<Tensor> cuda_random_weight(Ops& ops, Shape shape, DType dtype,
                                                std::uint64_t seed, float scale);

// Fills the whole KV cache with random bf16 values in [-1, 1), so benchmarks
// can time long-context decode without prefilling every sequence first.
[[nodiscard]] Status cuda_fill_kv_cache_random(Ops& ops, std::uint64_t seed);

}  // namespace sluice
