// Launchers of the MLA (DeepSeek-V3 attention) kernels: partial RoPE, the
// latent cache's page writes and gathers (mla_cache.cu), the decompressed
// prefill attention (mla_prefill.cu) and the absorbed decode attention over
// the paged latent cache (mla_decode.cu). Pure C++ types, as kernels.h;
// mla_attention.h orchestrates them.
#pragma once

#include <cstdint>

#include "sluice/backend/cuda/cuda_options.h"
#include "sluice/backend/cuda/kernels/kernels.h"

namespace sluice::cuda {

// Rotates, in each head of x, dims [rotary_offset, rotary_offset + rotary_dim)
// at the step's positions (Ops::rope_partial). Interleaved: pairs (2i, 2i + 1)
// rotate together and leave as [rotated evens | rotated odds].
struct RopePartialArgs {
  void* x = nullptr;  // [num_rows, num_heads * head_stride], dt
  Dt dt{};
  std::int32_t num_heads = 0, head_stride = 0, rotary_offset = 0, rotary_dim = 0;
  const float* inv_freq = nullptr;  // [rotary_dim / 2]
  float cos_sin_scale = 1.0f;
  bool interleaved = false;
};
inline constexpr std::int32_t kRopePartialMaxDim = 256;
void launch_rope_partial(const StepDeviceView& step, const RopePartialArgs& args, const Launch& launch);

// One layer of the latent cache: per slot [latent (kv_lora_rank) | k_rope].
struct LatentCache {
  void* data = nullptr;     // bf16 [num_blocks, block_size, width]
  std::int32_t width = 0;   // kv_lora_rank + qk_rope_head_dim
  std::int32_t kv_lora_rank = 0;
  std::int32_t block_size = 0;
  std::int32_t num_blocks = 0;  // pages in the layer: the rows of the TMA decode's tensor map
};
// Every row's latent (bf16 [num_rows, rank]) and k_rope (bf16 [num_rows,
// width - rank]) into its slot at position num_computed + (row - row_begin).
void launch_latent_write(const StepDeviceView& step, const void* latent, const void* k_rope, const LatentCache& cache,
                         const Launch& launch);
// Positions [0, num_positions) of sequence `seq` (an index into the step's
// sequences): latents to c [num_positions, rank], rope keys to k_rope
// [num_positions, width - rank], both bf16 and contiguous.
void launch_latent_gather(const StepDeviceView& step, std::int32_t seq, std::int32_t num_positions,
                          const LatentCache& cache, void* c, void* k_rope, const Launch& launch);

// k [num_positions, heads, nope + rope] from kv [num_positions, heads,
// kv_width] (k_nope first in each head) and the shared k_rope
// [num_positions, rope]: the keys cuDNN's SDPA reads (cudnn_sdpa.h). All
// dims multiples of 8.
void launch_mla_concat_k(const void* kv, const void* k_rope, void* k, std::int32_t num_positions, std::int32_t heads,
                         std::int32_t nope, std::int32_t rope, std::int32_t kv_width, const Launch& launch);

// --- prefill: the decompressed form, one sequence and a group of heads a launch ---
struct MlaPrefillArgs {
  const void* q = nullptr;       // bf16 [step rows, num_heads * (nope + rope)]: per head nope, then rope
  const void* kv = nullptr;      // bf16 [num_computed + num_rows, group_heads * (nope + v)]: per head k_nope, v
  const void* k_rope = nullptr;  // bf16 [num_computed + num_rows, rope]
  void* out = nullptr;           // bf16 [step rows, num_heads * v]
  std::int32_t num_heads = 0;    // of q and out
  std::int32_t head_begin = 0;   // the group's first head
  std::int32_t group_heads = 0;  // heads in kv
  std::int32_t nope_dim = 0, rope_dim = 0, v_dim = 0;
  std::int32_t row_begin = 0;     // the sequence's first row in the step
  std::int32_t num_rows = 0;      // its new rows, at positions [num_computed, num_computed + num_rows)
  std::int32_t num_computed = 0;  // keys [0, num_computed) are its cached prefix
  float scale = 1.0f;
};
// The simple kernel's limits (a warp holds a row's q and o in registers).
inline constexpr std::int32_t kMlaSimpleMaxQkDim = 256;
inline constexpr std::int32_t kMlaSimpleMaxVDim = 256;
// The tensor-core prefill kernel's dims (DeepSeek-V3's): QK 128 + 64, V 128.
bool mla_prefill_mma_supports(std::int32_t nope_dim, std::int32_t rope_dim, std::int32_t v_dim);
void launch_mla_prefill(const MlaPrefillArgs& args, MlaKernels kernels, const Launch& launch);

// --- decode: the absorbed form over the paged latent cache ---
// The decode sequences (one new row) of the step, in order: decode_seqs
// [num_decode] sequence indices. One thread; a step has at most a few hundred sequences.
void launch_mla_decode_list(const StepDeviceView& step, std::int32_t* decode_seqs, const Launch& launch);

struct MlaDecodeArgs {
  const std::int32_t* decode_seqs = nullptr;  // [num_decode]
  std::int32_t num_decode = 0;
  std::int32_t num_heads = 0, nope_dim = 0, rope_dim = 0, v_dim = 0, kv_lora_rank = 0;
  const void* q = nullptr;  // bf16 [step rows, num_heads * (nope + rope)]
  // bf16 [num_decode, num_heads, nope]: the decode rows' q_nope, for the W_UK GEMM.
  void* q_nope = nullptr;
  // bf16 [num_decode, num_heads, rank + rope]: W_UK_h^T q_nope (the GEMM's) | q_rope (the gather's).
  void* q_latent = nullptr;
  LatentCache cache;
  std::int32_t num_splits = 1;  // key ranges a (row, head) is cut into (mla_decode_splits)
  // f32 [num_decode, num_heads, num_splits, rank]: unnormalised partial outputs;
  // f32 [num_decode, num_heads, num_splits, 2]: their running max and sum of exp.
  float* partial_out = nullptr;
  float* partial_stats = nullptr;
  void* o_latent = nullptr;  // bf16 [num_decode, num_heads, rank]: softmax(.) . c
  const void* o_decode = nullptr;  // bf16 [num_decode, num_heads * v]: o_latent . W_UV_h^T (the GEMM's)
  void* out = nullptr;             // bf16 [step rows, num_heads * v]
  float scale = 1.0f;
};
// The simple kernel's limits: q_latent in shared memory, o in registers.
inline constexpr std::int32_t kMlaDecodeMaxWidth = 1024;
inline constexpr std::int32_t kMlaDecodeMaxRank = 512;
// The tensor-core and wgmma decode kernels' dims: rank 512 + rope 64 (DeepSeek-V3's).
bool mla_decode_mma_supports(std::int32_t kv_lora_rank, std::int32_t rope_dim);
// The wgmma-era decode sets (wgmma and the 16-head sets): one block a (row, split, head group) over latent
// tiles, splits by wgmma_decode_splits' cost, and o_latent written by the
// block itself when one split covers the context (no combine).
bool mla_decode_wgmma_era(MlaKernels kernels);
// Splits of each (row, head)'s keys for a longest context of max_context_tokens
// (the graph bucket's under graphs): a pure function of the launch shape.
std::int32_t mla_decode_splits(std::int32_t num_decode, std::int32_t num_heads, std::int32_t max_context_tokens,
                               std::int32_t num_sms, MlaKernels kernels);
// Copies the decode rows' q_nope and q_rope into q_nope and q_latent's tail.
void launch_mla_decode_gather_q(const StepDeviceView& step, const MlaDecodeArgs& args, const Launch& launch);
// Attention over the latents (partials), then their combine into o_latent.
void launch_mla_decode_attention(const StepDeviceView& step, const MlaDecodeArgs& args, MlaKernels kernels,
                                 const Launch& launch);
// The tensor-core kernel's partials (mla_decode_mma.cu), where mla_decode_mma_supports().
void launch_mla_decode_attention_mma(const StepDeviceView& step, const MlaDecodeArgs& args, const Launch& launch);
// The wgmma kernel's partials (mla_decode_wgmma.cu), where mla_decode_mma_supports();
// with num_splits 1, o_latent itself (no combine needed).
void launch_mla_decode_attention_wgmma(const StepDeviceView& step, const MlaDecodeArgs& args, const Launch& launch);
// The 16-head kernels (mla_decode_16_heads.cu, MlaKernels::mma_16_heads: one
// block of 8 warps an SM; mma_16_heads_pairs and _one_barrier: two blocks of
// 4 warps):
// mma.sync with a row's heads (at most 16, zero-padded) as the MMA's M of 16,
// 32-key tiles, TMA loads, so pages of a multiple of 8 rows. The same
// partials and one-split o_latent as the wgmma kernel's; their own splits
// (mla_decode_splits). Other shapes take the wgmma kernel.
inline constexpr std::int32_t kMla16HeadsMaxHeads = 16;
inline constexpr bool mla_decode_16_heads_kernels(MlaKernels kernels) {
  return kernels == MlaKernels::mma_16_heads || kernels == MlaKernels::mma_16_heads_pairs ||
         kernels == MlaKernels::mma_16_heads_one_barrier;
}
bool mla_decode_16_heads_supports(std::int32_t num_heads, std::int32_t block_size);
// Blocks of the set's kernel resident on an SM (its launch bounds): 1 or 2.
std::int32_t mla_decode_16_heads_blocks_per_sm(MlaKernels kernels);
void launch_mla_decode_attention_16_heads(const StepDeviceView& step, const MlaDecodeArgs& args, MlaKernels kernels,
                                          const Launch& launch);
// Copies o_decode's rows to the decode rows of out.
void launch_mla_decode_scatter_out(const StepDeviceView& step, const MlaDecodeArgs& args, const Launch& launch);

}  // namespace sluice::cuda
