// Ops::mla_attention on the GPU (DeepSeek-V3's multi-head latent attention
// over the paged latent cache; the contract and the CPU reference:
// backend/ops.h, backend/cpu/deepseek_ops.cpp).
//
// Per step: every row's [latent | k_rope] into its slot; then
//   prefill sequences (more than one new row), one at a time: the context's
//     latents gathered from the pages, decompressed by a cuBLASLt GEMM against
//     kv_b_proj into per-head [k_nope | v] (a group of heads at a time, so the
//     buffer stays under kPrefillKvBudgetBytes), then causal attention over
//     them (kernels/mla_prefill.cu, or cuDNN's SDPA under
//     PrefillAttention::cudnn: cudnn_sdpa.h);
//   decode sequences (one new row), all at once: q_nope folded into the
//     latent space by one batched GEMM over the heads (W_UK_h), an MQA over
//     the latent pages with split K and a combine (kernels/mla_decode*.cu),
//     then W_UV_h by a second batched GEMM.
// Workspaces are owned here and reused by every layer (scratch would keep
// each layer's until the step ends). The decode workspace is sized before a
// step is captured (prepare_decode), so a captured graph never sees it move;
// its generation goes into the graph key.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "sluice/backend/cuda/batched_gemm.h"
#include "sluice/backend/cuda/cudnn_sdpa.h"
#include "sluice/backend/cuda/device_buffer.h"
#include "sluice/backend/cuda/kernels/mla_kernels.h"
#include "sluice/backend/cuda/lt_gemm.h"
#include "sluice/backend/ops.h"
#include "sluice/common/result.h"

namespace sluice::cuda {

// What one call runs in: the step and how its kernels launch.
struct MlaStep {
  const StepDeviceView& view;
  const StepLayout& layout;
  LatentCache cache;        // the layer's pages
  const Launch& launch;
  MlaKernels kernels = MlaKernels::simple;
  std::int32_t num_sms = 0;
  bool replaying = false;  // a replayed graph has the kernels: check and size only
  // PrefillAttention::cudnn on an eager step: prefill attention through
  // cuDNN's SDPA (QK 192 / V 128 needs cuDNN 9.19), our kernels where it refuses.
  CudnnSdpa* cudnn = nullptr;
};

class MlaAttention {
 public:
  MlaAttention(cudaStream_t stream, LtGemm& gemm);

  // Sizes the decode workspace for a decode step of `num_rows` rows at
  // contexts up to max_context_tokens, before it is captured. False when no
  // call has told the shape yet (the step then runs eagerly).
  bool prepare_decode(std::int32_t num_rows, std::int32_t max_context_tokens, std::int32_t num_sms,
                      MlaKernels kernels);
  // Bumped whenever the decode workspace moves: captured graphs hold its address.
  std::uint64_t decode_generation() const { return decode_generation_; }

  // The op (Ops::mla_attention); an Error for dims the kernels do not cover.
  [[nodiscard]] Status run(const MlaStep& step, const MlaInputs& in, const MlaShape& shape, Tensor out);

 private:
  struct DecodeLayout;  // the decode workspace's sections
  DecodeLayout decode_layout(std::int32_t num_decode, std::int32_t num_splits) const;
  // One group of heads of a prefill sequence, decompressed: kv[p, h, :] =
  // [k_nope | v] of head h0 + h at position p, k_rope[p, :] shared, and
  // `keys` (group x key_head_bytes a position, for the attention's own use).
  struct PrefillGroup {
    std::int64_t h0, g;
    void* kv;
    const void* k_rope;
    void* keys;
  };
  // Gathers the sequence's latent and rope once, then per group of `group`
  // heads runs the decompression GEMM and `attend`, stopping at (and
  // returning) the first false.
  bool for_each_prefill_group(const MlaStep& step, std::int32_t seq_index, std::int64_t context, std::int64_t group,
                              std::int64_t key_head_bytes, const MlaInputs& in,
                              const std::function<bool(const PrefillGroup&)>& attend);
  void run_prefill(const MlaStep& step, const SequenceLayout& seq, std::int32_t seq_index, const MlaInputs& in,
                   Tensor out);
  // The same through cuDNN (keys concatenated to whole QK heads first); false
  // where cuDNN refused, before or after writing part of `out`.
  bool run_prefill_cudnn(const MlaStep& step, const SequenceLayout& seq, std::int32_t seq_index,
                         const MlaInputs& in, Tensor out);
  void run_decode(const MlaStep& step, std::int32_t num_decode, const MlaInputs& in, Tensor out);

  cudaStream_t stream_;
  LtGemm& gemm_;
  LtBatchedGemm batched_gemm_;
  std::optional<MlaShape> shape_;  // the last call's: sizes prepare_decode
  DeviceBuffer decode_workspace_;
  std::uint64_t decode_generation_ = 0;
  DeviceBuffer prefill_workspace_;
  bool cudnn_refused_ = false;  // cuDNN refused an MLA prefill: our kernels from then on
};

// Ceiling on a prefill group's decompressed [k_nope | v] buffer.
inline constexpr std::int64_t kPrefillKvBudgetBytes = 512LL << 20;

// Whether cuDNN (of this cudnnGetVersion()) takes MLA prefill of these dims.
bool mla_cudnn_prefill_supported(const MlaShape& shape, std::int64_t cudnn_version);
// cuDNN prefill's heads a group for a sequence of `context` keys: sized for
// the context's power-of-two bucket, a power of two, so every chunk of a
// prompt asks for the same few graph shapes (cuDNN plans).
std::int64_t mla_cudnn_prefill_group(const MlaShape& shape, std::int64_t context);
// The dims of one group's cuDNN call (SdpaPacked without its pointers).
SdpaPacked mla_cudnn_prefill_call(const MlaShape& shape, std::int32_t group_heads, std::int32_t num_rows,
                                  std::int32_t num_keys);
// One call of each shape class that prefill chunks of up to max_rows rows
// over up to max_keys keys ask cuDNN for (build_packed_plans_before_serving).
std::vector<SdpaPacked> mla_cudnn_prefill_classes(const MlaShape& shape, std::int32_t max_rows,
                                                  std::int32_t max_keys);

}  // namespace sluice::cuda
