// Host-side launchers for the CUDA kernels. Pure C++ types only, so that the
// Ops implementation (compiled by the host compiler) can call them. Every
// launcher enqueues on its stream and checks the launch. A kernel with
// variants takes the caller's choice as a parameter (an enum from
// cuda_options.h) and a pure function of the problem picks what runs.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "sluice/backend/cuda/cuda_options.h"

namespace sluice::cuda {

enum class Dt : std::int32_t;

// Where a step kernel is enqueued and whether it may overlap the previous
// kernel of the stream (programmatic dependent launch, launch.cuh). Launchers
// that take a bare cudaStream_t launch plainly (they follow a copy or a graph).
struct Launch {
  cudaStream_t stream = nullptr;
  bool programmatic = true;  // CudaOptions::programmatic_launch
};

// The step's layout in device memory, uploaded once per step by begin_step().
struct StepDeviceView {
  const std::int32_t* token_ids = nullptr;         // [num_rows]
  const std::int32_t* positions = nullptr;         // [num_rows]
  const std::int32_t* row_sequence = nullptr;      // [num_rows] sequence index of each row
  const std::int32_t* seq_row_begin = nullptr;     // [num_sequences]
  const std::int32_t* seq_num_rows = nullptr;      // [num_sequences]
  const std::int32_t* seq_num_computed = nullptr;  // [num_sequences]
  const std::int32_t* seq_block_offset = nullptr;  // [num_sequences] into block_tables
  const std::int32_t* block_tables = nullptr;      // all sequences' tables, concatenated
  const std::int32_t* sample_rows = nullptr;       // [num_sample_rows]
  // Query tiles of sequences that run more than one row (prefill chunks), each
  // (sequence, first row within the sequence), longest key range first.
  const std::int32_t* prefill_tiles = nullptr;     // [num_prefill_tiles, 2]
  // Rows attended by the split-KV kernel (decodes, and every row of a prefill
  // whose head_dim the tensor-core kernel does not cover).
  const std::int32_t* split_rows = nullptr;        // [num_split_rows]
  // Prefill tiles whose key range is split over several blocks (a short chunk
  // over a long cached prefix would otherwise leave most SMs idle), merged by
  // a second kernel: per piece (sequence, first row within the sequence, first
  // key, end key); the pieces of one tile are adjacent, pieces_per_tile each.
  const std::int32_t* prefill_split_pieces = nullptr;  // [num_prefill_split_pieces, 4]
  std::int32_t num_prefill_split_pieces = 0;
  std::int32_t prefill_split_pieces_per_tile = 0;
  std::int32_t num_rows = 0;
  std::int32_t num_sequences = 0;
  std::int32_t num_sample_rows = 0;
  std::int32_t num_prefill_tiles = 0;
  std::int32_t num_split_rows = 0;
  std::int32_t max_split_kv_tokens = 0;  // longest key range among split_rows
  // The split rows' keys in all: exact for an eager step, 0 under a graph
  // (its launches must fit every step of the key, whatever their keys).
  std::int64_t total_split_kv_tokens = 0;
  bool uneven_split_rows = false;  // split_rows_uneven() of this step's split rows
};

// Whether rows with these keys are not within 25% of even (the longest more
// than 1.25x the mean): the split-KV kernel's uniform plan leaves most of the
// GPU idle behind the longest rows there. The device's step_split() applies
// the same rule.
inline bool split_rows_uneven(std::int64_t total_keys, std::int32_t longest_keys, std::int64_t num_rows) {
  return 4 * static_cast<std::int64_t>(longest_keys) * num_rows > 5 * total_keys;
}

// Rows of prefill tiles: the tensor-core attention kernel's BLOCK_M.
inline constexpr std::int32_t kPrefillTileRows = 128;
// Whether the tensor-core prefill kernel is built for this head_dim.
bool prefill_kernel_supports(std::int32_t head_dim);
// Whether the split-KV kernel is built for this head_dim (every head_dim the
// backend accepts).
bool split_kernel_supports(std::int32_t head_dim);

struct AttentionArgs {
  const void* q = nullptr;     // bf16 [num_rows, num_q_heads * head_dim]
  void* out = nullptr;         // bf16 [num_rows, num_q_heads * head_dim]
  const void* k_cache = nullptr;  // bf16 [num_blocks, block_size, num_kv_heads, head_dim]
  const void* v_cache = nullptr;
  std::int32_t num_q_heads = 0;
  std::int32_t num_kv_heads = 0;
  std::int32_t head_dim = 0;
  std::int32_t block_size_tokens = 0;
  float scale = 1.0f;
  // Split-KV partials: workspace of at least split_workspace_bytes().
  void* workspace = nullptr;
  // Zeroed counters the split-KV kernels leave zeroed (one a split row and
  // kv head): with them, the last block of a row's splits merges them and no
  // combine kernel runs. Null: the combine kernel (CudaOptions::split_merge).
  int* split_arrivals = nullptr;
  std::int64_t split_arrivals_capacity = 0;
  // Split prefill partials: at least prefill_split_workspace_bytes().
  void* prefill_split_workspace = nullptr;
  // The kernel asked for whole prefill tiles; prefill_kernel_for() decides.
  PrefillAttention prefill_attention = PrefillAttention::mma;
  DecodeSplitPlan decode_split_plan = DecodeSplitPlan::adaptive;
  DecodeSplitTiles decode_split_tiles = DecodeSplitTiles::heads_as_rows;
  // Splits of the uniform plan instead of splits_by_waves()'s (0: the plan's).
  std::int32_t decode_split_count = 0;
  // Tiles in the keys-as-rows kernel's K/V ring: 2, or 3 (two blocks a
  // multiprocessor instead of three).
  std::int32_t decode_split_stages = 2;
  // How the keys-as-rows kernel fills that ring (DecodeSplitLoads::tma where
  // its shape rules hold: split_tma_loads_apply()).
  DecodeSplitLoads decode_split_loads = DecodeSplitLoads::cp_async;
  // Slots (num_blocks * block_size_tokens) of each of k_cache and v_cache:
  // the TMA loads' tensor maps span them. 0: unknown (cp.async loads).
  std::int64_t kv_cache_slots = 0;
};

// The step's split prefill pieces and their merge (after launch_attention_prefill).
void launch_attention_prefill_split(const StepDeviceView& step, const AttentionArgs& args, const Launch& launch);
// Workspace bytes the split prefill pieces of this step need (0 without any).
std::int64_t prefill_split_workspace_bytes(const StepDeviceView& step, const AttentionArgs& args);
// (Which tiles are split, and where: backend/prefill_split_plan.h.)

// Whether the split-KV decode runs the keys-as-rows kernel with TMA loads
// for these arguments: asked for (decode_split_loads), the keys-as-rows
// kernel chosen, pages of a power of two >= 16 keys, the cache's slots known
// and its rows 16-byte aligned. Otherwise the cp.async ring runs.
bool split_tma_loads_apply(const AttentionArgs& args);

// Workspace bytes the split-KV kernel needs for this step.
std::int64_t split_workspace_bytes(const StepDeviceView& step, const AttentionArgs& args);

// Benchmarks: where the keys-as-rows split kernel's time goes. Thread 0 of
// block b stamps %globaltimer (ns) at stamps[b * kDecodeSplitMoments + m]
// for each moment m it reaches, blocks b < `blocks` (b = blockIdx.x +
// gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z)); blocks with no keys stamp
// only their entry. Process-wide; null or 0 blocks turns it off.
enum class DecodeSplitMoment {
  entry,          // after the launch
  loads_started,  // placed, the previous kernel waited for, Q and the first tiles' loads started
  first_tile,     // warp 0's first tile landed
  keys_done,      // the block's last tile done
  exit,           // its partial stored (and, the last of a row's splits, the row merged)
};
constexpr int kDecodeSplitMoments = 5;
void set_decode_split_timeline(std::uint64_t* stamps, std::int64_t blocks);

void launch_kv_write(const StepDeviceView& step, const void* k, const void* v, void* k_cache,
                     void* v_cache, std::int32_t num_kv_heads, std::int32_t head_dim,
                     std::int32_t block_size_tokens, const Launch& launch);
// Whole prefill tiles, on the kernel prefill_kernel_for() picks.
void launch_attention_prefill(const StepDeviceView& step, const AttentionArgs& args, const Launch& launch);
void launch_attention_split(const StepDeviceView& step, const AttentionArgs& args, const Launch& launch);
// Prefill attention on warpgroup MMA (sm_90a), warp specialised
// (attention_prefill_wgmma_ws.cu), head_dim 128 bf16 only;
// launch_attention_prefill() dispatches to it.
bool prefill_wgmma_supports(std::int32_t head_dim);
void launch_attention_prefill_wgmma_ws(const StepDeviceView& step, const AttentionArgs& args,
                                       const Launch& launch);
void launch_attention_prefill_wgmma_ws_split(const StepDeviceView& step, const AttentionArgs& args,
                                             const Launch& launch);
// The kernel that runs whole prefill tiles: the one asked for where it is
// built for head_dim, else mma.
PrefillAttention prefill_kernel_for(PrefillAttention asked, std::int32_t head_dim);

void launch_embedding(const StepDeviceView& step, const void* table, Dt table_dt,
                      std::int64_t hidden, void* out, Dt out_dt, const Launch& launch);
void launch_rms_norm(const void* x, Dt x_dt, const void* weight, Dt w_dt, float eps,
                     std::int64_t rows, std::int64_t cols, void* out, Dt out_dt,
                     const Launch& launch);
void launch_add_rms_norm(void* residual, Dt r_dt, const void* x, Dt x_dt, const void* weight,
                         Dt w_dt, float eps, std::int64_t rows, std::int64_t cols, void* out,
                         Dt out_dt, const Launch& launch);
void launch_silu_mul(const void* gate_up, Dt in_dt, std::int64_t rows, std::int64_t inter,
                     void* out, Dt out_dt, const Launch& launch);
void launch_gather_rows(const void* x, Dt dt, std::int64_t cols, const std::int32_t* rows,
                        std::int32_t num_rows, void* out, const Launch& launch);
void launch_add_bias(void* out, Dt out_dt, const void* bias, Dt bias_dt, std::int64_t rows,
                     std::int64_t cols, const Launch& launch);
// inv_freq: [head_dim / 2] f32.
void launch_rope(const StepDeviceView& step, void* q, Dt q_dt, std::int32_t num_q_heads,
                 void* k, Dt k_dt, std::int32_t num_kv_heads, std::int32_t head_dim,
                 const float* inv_freq, const Launch& launch);

// RoPE on q and k (in place) and k, v into their pages, in one kernel: what
// launch_rope() then launch_kv_write() do. k, v and the cache are bf16.
struct RopeKvWriteArgs {
  void* q = nullptr;  // [num_rows, num_q_heads * head_dim], q_dt
  Dt q_dt{};
  void* k = nullptr;        // [num_rows, num_kv_heads * head_dim]
  const void* v = nullptr;  // [num_rows, num_kv_heads * head_dim]
  void* k_cache = nullptr;  // [num_blocks, block_size, num_kv_heads, head_dim]
  void* v_cache = nullptr;
  const float* inv_freq = nullptr;  // [head_dim / 2]
  std::int32_t num_q_heads = 0, num_kv_heads = 0, head_dim = 0, block_size = 0;
};
void launch_rope_kv_write(const StepDeviceView& step, const RopeKvWriteArgs& args, const Launch& launch);

// out[m, n] = x[m, :] · w[n, :] (bf16 x and w, out bf16 or f32) for decode
// batches of at most kGemvMaxRows rows, the output columns split over up to
// three row-major tensors in order (the fused q|k|v projection writes q, k
// and v in one pass); false if the shape is not covered (then the caller uses
// cuBLASLt). `split_k` bounds the warps a row (split_k_parts() in gemv.cu).
inline constexpr std::int64_t kGemvMaxRows = 4;
struct GemvOutputs {
  void* data[3] = {nullptr, nullptr, nullptr};
  std::int64_t cols[3] = {0, 0, 0};  // part j is [m, cols[j]]
  int num_parts = 0;
  Dt dt{};
};
bool launch_gemv(const void* x, const void* w, const GemvOutputs& out, std::int64_t m, std::int64_t k,
                 GemvSplitK split_k, const Launch& launch);
// The q|k|v GEMV of a decode step (rows = the step's rows, at most
// kGemvMaxRows) with RoPE and the KV page write as its epilogue: q and k
// rotated, k and v also in their pages, the bits launch_gemv() then
// launch_rope_kv_write() produce. All bf16. False if not covered (then the
// caller runs those two).
struct GemvQkvRopeArgs {
  const void* x = nullptr;      // [rows, k]
  const void* w_qkv = nullptr;  // [(num_q_heads + 2 * num_kv_heads) * head_dim, k]
  void* q = nullptr;            // [rows, num_q_heads * head_dim]
  void* k = nullptr;            // [rows, num_kv_heads * head_dim]
  void* v = nullptr;
  void* k_cache = nullptr;  // [num_blocks, block_size, num_kv_heads, head_dim]
  void* v_cache = nullptr;
  const float* inv_freq = nullptr;  // [head_dim / 2]
  std::int32_t num_q_heads = 0, num_kv_heads = 0, head_dim = 0, block_size = 0;
};
bool launch_gemv_qkv_rope(const StepDeviceView& step, const GemvQkvRopeArgs& args, std::int64_t m, std::int64_t k,
                          GemvSplitK split_k, const Launch& launch);
// Benchmarks: the blocks a multiprocessor the one-row plain, split-K and
// q|k|v GEMVs are compiled for (__launch_bounds__): 6 (the default since
// session 43: 40 registers, no spill) or 8 (32 registers, where ptxas spills
// 12-20 bytes; the default before). Both give the same bits. Launches after
// the call take it; captured graphs keep theirs.
inline constexpr int kGemvOneRowBlocksDefault = 6;
void set_gemv_one_row_blocks(int blocks);
// out[m, i] = silu(x·w[i]) * (x·w[inter + i]) for the stacked gate|up weight
// [2 * inter, k], with gate and up rounded to bf16 first, as the unfused
// matmul + silu_mul computes it.
bool launch_gemv_swiglu(const void* x, const void* w_gate_up, void* out, Dt out_dt, std::int64_t m,
                        std::int64_t inter, std::int64_t k, const Launch& launch);

// Per row of logits [rows, vocab]: the argmax token, its logit and the row's
// log-sum-exp (so logprob = logit - lse). out_token [rows], out_stats [rows, 2].
void launch_argmax_lse(const void* logits, Dt dt, std::int32_t rows, std::int64_t vocab,
                       std::int32_t* out_token, float* out_stats, cudaStream_t stream);
// Sampling on the device for rows the greedy kernel does not decide
// (sampling_topk.cu): penalties, the allowed-token mask, temperature, top-k,
// top-p, min-p, the seeded draw and top logprobs, choosing the token the
// reference sampler (backend/cpu/sampler.cpp) does. One block a row.
inline constexpr std::int32_t kMaxDeviceTopLogprobs = 20;
struct DeviceSampleRow {
  double uniform = 0.0;              // uniform_from(seed, generated_index), computed on the host
  std::int32_t logits_row = 0;       // row of the logits tensor
  std::int32_t greedy = 0;           // 1: argmax (after penalties and mask), no draw
  float inverse_temperature = 1.0f;  // 1.0f / temperature, as the reference computes it
  std::int32_t top_k = 0;            // 0 or >= vocab: off
  float top_p = 1.0f;                // 1: off
  float min_p = 0.0f;                // 0: off
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::int32_t num_top_logprobs = 0;     // <= kMaxDeviceTopLogprobs
  std::int32_t penalty_begin = 0;        // into the penalty entries
  std::int32_t num_penalties = 0;
  std::int64_t mask_word_begin = -1;     // into the mask words; -1: every token allowed
  std::int32_t num_mask_words = 0;       // a token past them is not allowed
};
// A token whose logit the row adjusts: a distinct token of its history
// (every prompt or output token under the repetition penalty, else the output
// ones), with how often it was generated, and/or a token of its logit_bias.
// The bias is added first, then the penalties (the reference's order).
struct DevicePenaltyEntry {
  std::int32_t token = 0;
  std::int32_t num_generated = 0;
  float bias = 0.0f;
  std::int32_t in_history = 0;  // 0: a logit_bias token the history does not hold (no repetition penalty)
};
struct DeviceSampleResult {
  std::int32_t token;
  float logprob;
  std::int32_t num_top_logprobs;  // finite entries only, as the reference
  std::int32_t top_tokens[kMaxDeviceTopLogprobs];
  float top_logprobs[kMaxDeviceTopLogprobs];
};
struct SampleRowsArgs {
  const void* logits = nullptr;  // [rows, vocab]
  Dt dt{};
  std::int64_t vocab = 0;
  const DeviceSampleRow* rows = nullptr;  // [num_rows]
  std::int32_t num_rows = 0;
  const DevicePenaltyEntry* penalties = nullptr;
  const std::uint64_t* mask_words = nullptr;
  float* workspace = nullptr;  // [num_rows, sample_workspace_row_floats(vocab)]: rows after penalties and mask
  DeviceSampleResult* out = nullptr;     // [num_rows]
};
// Row stride of the workspace, padded so every row starts 128-byte aligned.
inline constexpr std::int64_t sample_workspace_row_floats(std::int64_t vocab) { return (vocab + 31) / 32 * 32; }
void launch_sample_rows(const SampleRowsArgs& args, cudaStream_t stream);
// Converts rows of logits to f32 (for host-side sampling and return_logits).
void launch_to_f32(const void* x, Dt dt, std::int64_t n, float* out, cudaStream_t stream);

// The combine of a key-split cuDNN SDPA step (cudnn_split_plan.h): per row of a
// split sequence, the causal tail's output (in `out`) and each prefix piece's
// partial, weighted by their natural-log sums of exp (kernels/sdpa_split_combine.cu).
struct SdpaCombineArgs {
  void* out = nullptr;                            // bf16 [rows, out_row_elems]: tails' outputs, combined in place
  const void* partial = nullptr;                  // bf16 [piece rows, out_row_elems]
  const float* tail_lse = nullptr;                // [tail entries, num_heads, tail_rows]
  const float* piece_lse = nullptr;               // [pieces, num_heads, piece_rows]
  const std::int32_t* rows = nullptr;             // [num_rows, 5]: out row, tail entry, row in sequence,
                                                  // first piece, pieces
  const std::int32_t* piece_row_begin = nullptr;  // [pieces]: each piece's first row in `partial`
  std::int32_t num_rows = 0, num_heads = 0, head_dim = 0, tail_rows = 0, piece_rows = 0;
  std::int64_t out_row_elems = 0;
};
void launch_sdpa_split_combine(const SdpaCombineArgs& args, const Launch& launch);

void launch_random_fill(void* out, Dt dt, std::int64_t n, std::uint64_t seed, float scale,
                        cudaStream_t stream);

}  // namespace sluice::cuda
