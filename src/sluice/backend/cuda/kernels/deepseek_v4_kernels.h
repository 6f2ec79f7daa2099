// Host-side launchers of the DeepSeek-V4 kernels (issue 18 stage 3), pure C++
// types as kernels.h. Each works on a batch of rows (a decode step's
// sequences, or a prefill chunk's rows) in device memory, enqueues on `stream`
// (plain launches, no host synchronisation, so a step that runs them can be
// captured as a graph) and checks its arguments on the host.
//
// Each mirrors a host op of backend/deepseek_v4_kernels.h (the CPU reference,
// backend/cpu/deepseek_v4_ops.cpp) and tests/cuda/deepseek_v4_{attention,layer}_test.cpp
// checks it against that op. One concern per file:
//   deepseek_v4_attention.cu  sparse attention with sinks over gathered latents
//   deepseek_v4_indexer.cu    the lightning indexer's FP8 scores and top-k
//   deepseek_v4_compress.cu   the compressors' softmax pooling (+ norm, rope)
//   deepseek_v4_mhc.cu        hyper-connections: hc_pre / hc_post / hc_head
//   deepseek_v4_moe.cu        sqrtsoftplus / hash routing, clamped SwiGLU,
//                             the FP4 (e2m1, group 32, ue8m0) expert GEMM
// These are simple CUDA-core kernels: correctness first (stage 3), speed is
// stage 4 (docs/deepseek-v4-cuda.md).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace sluice::cuda {

enum class Dt : std::int32_t;

// The widths the kernels are built for (V4-Flash's; the tiny test configs of
// the CPU reference use others, which the CUDA forward will not serve).
inline constexpr std::int32_t kV4LatentDim = 512;      // head_dim: K = V = the latent
inline constexpr std::int32_t kV4IndexHeadDim = 128;   // index_head_dim
inline constexpr std::int32_t kV4RopeDim = 64;         // qk_rope_head_dim: the latent's last 64 values are roped
inline constexpr std::int32_t kV4NopeDim = kV4LatentDim - kV4RopeDim;
// A latent's fp8_ds_mla record (model/deepseek_v4_fp8_ds_mla.h): 448 e4m3
// codes, the 64 rope values in bf16, one ue8m0 scale a 64 codes (7) and a pad.
inline constexpr std::int32_t kV4Fp8DsMlaGroup = 64;
inline constexpr std::int32_t kV4Fp8DsMlaRopeOffset = kV4NopeDim;
inline constexpr std::int32_t kV4Fp8DsMlaScalesOffset = kV4NopeDim + 2 * kV4RopeDim;
inline constexpr std::int32_t kV4Fp8DsMlaBytes = kV4Fp8DsMlaScalesOffset + 8;
inline constexpr std::int32_t kV4MaxIndexHeads = 64;   // index_n_heads
inline constexpr std::int32_t kV4MaxHcMult = 4;        // hc_mult
inline constexpr std::int32_t kV4MaxExperts = 1024;

// The rope of a latent's trailing rope_dim (RotaryTable on the device).
struct V4Rope {
  const float* inv_freq = nullptr;  // [rope_dim / 2]
  std::int32_t rope_dim = 0;
  float cos_sin_scale = 1.0f;
};

// Sparse attention with sinks (DeepseekV4Kernels::sink_attention, then the
// inverse rope of the output as the reference's run_attention does): row r's
// query q[r] [num_heads, 512] attends over the latents kv[key_rows[r, j]]
// (j < num_keys[r]), which are both keys and values; each head's sink logit
// joins the softmax's denominator only. The key set is whatever the caller
// gathered: the sliding window plus the indexer's top-k (CSA), every visible
// entry (HCA) or the window alone (sliding layers). With rope.inv_freq set,
// the output's rope tail is rotated back by positions[r]. Decode and prefill
// rows alike (a row is a query row). num_keys[r] = 0 gives zeros.
struct V4SparseAttentionArgs {
  const void* q = nullptr;                 // bf16 [rows, num_heads, 512]
  const void* kv = nullptr;                // bf16 [pool_rows, 512]
  const std::int32_t* key_rows = nullptr;  // [rows, max_keys]
  const std::int32_t* num_keys = nullptr;  // [rows], each <= max_keys
  const float* sinks = nullptr;            // [num_heads]
  const std::int32_t* positions = nullptr; // [rows]; with rope.inv_freq
  V4Rope rope;
  void* out = nullptr;  // out_dt [rows, num_heads, 512]
  Dt out_dt{};
  std::int32_t rows = 0, num_heads = 0, max_keys = 0;
  float softmax_scale = 1.0f;
};
void launch_v4_sparse_attention(const V4SparseAttentionArgs& args, cudaStream_t stream);
// The same op on tensor cores (deepseek_v4_attention_mma.cu: a block a row and
// 64 heads, mma.sync bf16 with the softmax weights split in two bf16 terms);
// the CUDA-core kernel above stays as its reference. q and kv 16 B aligned.
void launch_v4_sparse_attention_mma(const V4SparseAttentionArgs& args, cudaStream_t stream);
// The same op on warpgroup MMA (deepseek_v4_attention_wgmma.cu: a block a row
// and 64 heads, 64-key tiles, sm_90a): the forward's, prefill and decode
// rows alike, since session 22 (2.4-3.5x mma.sync's rate). The softmax weights enter
// P V as two bf16 terms (to 2^-17 of each: the f32 reference's bound) or as
// one (FlashMLA's precision, 2^-9 of each, half the P V work). q and kv 16 B aligned.
enum class V4SoftmaxWeights { two_bf16_terms, one_bf16 };
void launch_v4_sparse_attention_wgmma(const V4SparseAttentionArgs& args, V4SoftmaxWeights weights,
                                      cudaStream_t stream);
// The argument checks every sparse attention launcher makes.
void check_v4_sparse_attention_args(const V4SparseAttentionArgs& args);

// The lightning indexer (DeepseekV4Kernels::indexer_top_k) on FP8 records:
// index keys are e4m3 [128] with one f32 scale each (the 132 B record of
// docs/kv-v4.md), queries e4m3 [heads, 128] with one f32 scale per head.
//   score[r, t] = sum_h relu(q_h . k_t) * q_scale_h * k_scale_t * 128^-0.5 * weights[r, h]
// over row r's visible keys keys[key_begin[r] + t], t < num_visible[r]; then
// the top min(top_k, num_visible) by score, ties to the lower t, written in
// ascending t (the reference's order), -1 past the count.
struct V4IndexerArgs {
  const std::uint8_t* q = nullptr;        // e4m3 [rows, num_heads, 128]
  const float* q_scale = nullptr;         // [rows, num_heads]
  const float* weights = nullptr;         // [rows, num_heads] (weights_proj(x) * num_heads^-0.5)
  const float* head_factors = nullptr;    // [rows, num_heads]: q_scale * weights (what the wgmma kernel reads)
  const std::uint8_t* keys = nullptr;     // e4m3 [pool_rows, 128]
  const float* key_scale = nullptr;       // [pool_rows]
  const std::int32_t* key_begin = nullptr;    // [rows]: the row's sequence's first key
  const std::int32_t* num_visible = nullptr;  // [rows], each <= max_visible
  float* scores = nullptr;                // workspace [rows, max_visible]
  std::int32_t* selected = nullptr;       // [rows, top_k]
  std::int32_t* num_selected = nullptr;   // [rows]
  std::int32_t rows = 0, num_heads = 0, max_visible = 0, top_k = 0;
};
void launch_v4_indexer_scores(const V4IndexerArgs& args, cudaStream_t stream);
// The same scores on tensor cores (mma.sync m16n8k16, f16 operands, f32
// accumulation): every e4m3 code is exact in f16 and every product exact in
// f32, so only the sums' order and rounding differ from the CUDA-core kernel
// above (which stays as its reference). Same arguments, same scores layout.
void launch_v4_indexer_scores_mma(const V4IndexerArgs& args, cudaStream_t stream);
// The same scores on warpgroup MMA over e4m3 (deepseek_v4_indexer_wgmma.cu),
// for prefill: a block runs many consecutive rows over one tile of 256 keys,
// loaded once while its rows share a sequence (key_begin), again where the
// sequence changes, so it pays where many rows share their keys. It reads
// head_factors, not q_scale and weights. Hopper's FP8 MMA sums with a
// narrower accumulator than f32: scores may differ from the kernels above by
// ~2^-13 of the sum of |q . k| products a head. q and keys 16 B aligned.
void launch_v4_indexer_scores_wgmma(const V4IndexerArgs& args, cudaStream_t stream);
// Tests: at most `blocks` blocks (each then walks many work items); 0 (the
// default): one a multiprocessor.
void set_v4_indexer_scores_wgmma_grid_limit(int blocks);
// The same with the sum over heads on the tensor cores (a tf32 MMA over the
// relu'd scores) instead of an FMA a head and key, which bound the kernel's
// issue (session 23). tf32 keeps 10 mantissa bits of each term and factor, so
// scores may differ by ~2^-9 of the sum of |w relu(q . k)| more.
void launch_v4_indexer_scores_wgmma_tf32(const V4IndexerArgs& args, cudaStream_t stream);
// Its form (process-wide, for the tests' and the bench's A/B): where its
// consumer warpgroups read the keys from.
enum class V4IndexerTf32Keys {
  shared,              // shared memory, three warpgroups of 128 keys (S26-5; the default until session 37)
  registers,           // registers, four of 64: half the shared-memory bytes an MMA (S27: ~20% slower)
  registers_in_pairs,  // the default: registers, three of 128 (two tiles a warpgroup; S37-1: 3-7% faster)
};
void set_v4_indexer_scores_tf32_keys(V4IndexerTf32Keys keys);
// The exact top-k of the scores above (deepseek_v4_indexer_top_k.cu): rows
// of 4,096 to 40,960 scores are read about once (a sampled threshold, then
// one sweep keeping the candidates above it), others and rows whose sample
// misses by the full selection (a radix select over all of the row's scores).
void launch_v4_indexer_top_k(const V4IndexerArgs& args, cudaStream_t stream);
// Tests and the bench: false sends every row through the full selection.
void set_v4_indexer_top_k_sampled(bool sampled);
// Tests and the bench: true takes session 27's form (rows that start on 16
// bytes read a float4 a load; the candidate lists sized by the sample's hits),
// slower than session 23's on i.i.d. rows (S29); false (the default) session 23's.
void set_v4_indexer_top_k_session27(bool session27);
// Tests and the bench: true sweeps rows that start on 16 bytes through a
// per-warp ring of TMA bulk copies (session 32; 15-18% slower in S33-1);
// false (the default) session 23's scalar loads. Session 27's form wins if set.
void set_v4_indexer_top_k_bulk_sweep(bool bulk);
// Session 23's form runs in blocks of 512 threads (wide: 4 rows a
// multiprocessor) or of 256 (narrow: 8 rows, session 35). by_rows, the
// default, takes the narrow blocks from kV4TopKNarrowFromRows rows: on the
// H200 they are 4-10% faster on prefill chunks of 2,048-8,192 rows, equal at
// 1,024, and slower at decode's 64 (26% on an H100) and on crowded rows
// (12%; S36-1). Tests and the bench force either; the forms above win if set.
enum class V4TopKBlocks { by_rows, wide, narrow };
inline constexpr int kV4TopKNarrowFromRows = 2048;
void set_v4_indexer_top_k_blocks(V4TopKBlocks blocks);

// mHC (DeepseekV4Kernels::hc_pre / hc_post / hc_head), a row per block.
struct V4HcWeights {
  const float* fn = nullptr;     // [mixes, hc * hidden]
  const float* base = nullptr;   // [mixes]
  const float* scale = nullptr;  // [3] (hc_head: [1])
};
struct V4HcPreArgs {
  const float* streams = nullptr;  // [rows, hc, hidden]
  V4HcWeights w;
  float* post = nullptr;       // [rows, hc]
  float* comb = nullptr;       // [rows, hc, hc]
  void* collapsed = nullptr;   // out_dt [rows, hidden]
  Dt out_dt{};
  std::int32_t rows = 0, hc = 0, hidden = 0, sinkhorn_iters = 0;
  float hc_eps = 1e-6f, norm_eps = 1e-6f;
  bool head = false;  // hc_head: hc mixes, collapse only (post and comb unused)
  // v4_hc_pre_workspace_floats(rows, hc, hidden) floats, or null: with it the
  // mixes' dot products are split over the width across the SMs (two
  // launches), else a block a row does the whole row (its latency is the call's).
  float* workspace = nullptr;
};
void launch_v4_hc_pre(const V4HcPreArgs& args, cudaStream_t stream);
// 0 where the split form does not apply (hc * hidden not a multiple of 512).
std::int64_t v4_hc_pre_workspace_floats(std::int32_t rows, std::int32_t hc, std::int32_t hidden);
struct V4HcPostArgs {
  float* streams = nullptr;  // [rows, hc, hidden], updated in place
  const void* y = nullptr;   // y_dt [rows, hidden]
  Dt y_dt{};
  const float* post = nullptr;  // [rows, hc]
  const float* comb = nullptr;  // [rows, hc, hc]
  std::int32_t rows = 0, hc = 0, hidden = 0;
};
void launch_v4_hc_post(const V4HcPostArgs& args, cudaStream_t stream);

// DeepseekV4Kernels::route_sqrtsoftplus for every row: the experts are
// hash_table[token_ids[r]] when hash_table is set, else the top k of
// sqrt(softplus(logit)) + bias (ties to the lower expert).
struct V4RouteArgs {
  const float* logits = nullptr;           // [rows, num_experts]
  const float* bias = nullptr;             // [num_experts] or null
  const std::int32_t* hash_table = nullptr;  // [vocab, k] or null
  const std::int32_t* token_ids = nullptr;   // [rows] with hash_table
  std::int32_t* expert_ids = nullptr;      // [rows, k]
  float* expert_weights = nullptr;         // [rows, k]
  std::int32_t rows = 0, num_experts = 0, k = 0;
  float scale = 1.0f;
};
void launch_v4_route(const V4RouteArgs& args, cudaStream_t stream);

// act[r, i] = silu(min(gate, limit)) * clamp(up, -limit, limit), [gate | up] = in[r]
// ([rows, 2 * inter]), as DeepseekV4Kernels::clamped_swiglu forms it.
struct V4SwigluArgs {
  const void* in = nullptr;  // in_dt [rows, 2 * inter]
  Dt in_dt{};
  void* out = nullptr;  // out_dt [rows, inter]
  Dt out_dt{};
  std::int32_t rows = 0, inter = 0;
  float limit = 0.0f;
};
void launch_v4_clamped_swiglu(const V4SwigluArgs& args, cudaStream_t stream);

// The FP4 expert GEMM, dequantized in the GEMM (model/fp4_weights.h's
// layout): for every slot s of expert e (slots [expert_offsets[e],
// expert_offsets[e + 1]), sorted by expert as launch_moe_plan sorts them),
//   out[s, n] = sum_k x[row_of_slot[s], k] * e2m1(w[e, n, k]) * 2^(scale[e, n, k / 32] - 127)
// in f32. n_out a multiple of 8, k_in of 256.
struct V4Fp4GemmArgs {
  const void* x = nullptr;                      // bf16 [*, k_in]
  const std::int32_t* row_of_slot = nullptr;    // [slots]
  const std::int32_t* expert_offsets = nullptr; // [num_experts + 1]
  const std::uint8_t* w = nullptr;              // [num_experts, n_out, k_in / 2], two codes a byte, low nibble first
  const std::uint8_t* w_scale = nullptr;        // e8m0 [num_experts, n_out, k_in / 32]
  void* out = nullptr;                          // out_dt [slots, n_out]
  Dt out_dt{};
  std::int32_t num_experts = 0, n_out = 0, k_in = 0;
};
void launch_v4_fp4_gemm(const V4Fp4GemmArgs& args, cudaStream_t stream);

// The paged KV layout on the device (docs/kv-v4.md, model/deepseek_v4_kv_layout.h):
// the engine's blocks of a KvCacheLayout::model_defined cache, each one f32
// area of floats_per_block, byte-equal to the CPU's, so a prefix-cache hit or
// a block back from the host tier is the same state on both backends. The
// kernels below address it exactly as DeepseekV4PagedState does on the host
// (tests/cuda/deepseek_v4_paged_test.cpp checks that, item for item).
struct V4PagedBlocks {
  float* data = nullptr;  // [num_blocks, floats_per_block]
  std::int64_t floats_per_block = 0;
  std::int32_t num_blocks = 0;
  std::int32_t block_size = 0;  // tokens a block
};
// Each item's (or query row's) sequence: its block table is
// block_ids[table_begin[i], table_begin[i] + table_len[i]). A position past
// the table traps (the caller's contract, as SLUICE_CHECK on the host).
struct V4BlockTables {
  const std::int32_t* block_ids = nullptr;
  const std::int32_t* table_begin = nullptr;  // [items]
  const std::int32_t* table_len = nullptr;    // [items]
};

// What one item names in a layer's area (DeepseekV4PagedState's accessors):
//   window        the latent of token `index` (a position), count = head_dim,
//                 at slot index % slots of its block (a block keeps its last
//                 `slots` = min(block size, sliding window) latents);
//   entry         compressed entry `index` (window index * rate is its first
//                 position), count = dim: a CSA/HCA entry or an index key.
// Values are `dt`, `count` of them an item, items packed from `offset` (in
// floats) on: f32 or bf16 values, or e4m3 codes (an e4m3_scaled region's, its
// scales a second region of one f32 an item; DeepseekV4PoolRegion::scales_offset).
enum class V4PagedSite : std::int32_t { window, entry };
struct V4PagedRegion {
  V4PagedSite site = V4PagedSite::window;
  std::int64_t offset = 0;  // window_offset or entries_offset (floats from the block's start)
  std::int32_t count = 0;   // values an item
  std::int32_t rate = 0;    // entry sites
  std::int32_t slots = 0;   // window site: DeepseekV4KvLayout::window_slots()
  Dt dt{};                  // f32 (value-initialised), bf16 or e4m3 (DeepseekV4ValueFormat)
  bool fp8_ds_mla = false;  // items are kV4Fp8DsMlaBytes records of count = kV4LatentDim values (dt unused)
};

// Copies items between a dense buffer [items, count] and their places in the
// blocks: to_blocks writes (a step's window latents, the entries
// launch_v4_compress emitted), else reads. With dense_row, items scatter into
// (or gather from) rows of a larger buffer: the window latents a
// DeepseekV4WindowPlan stores. An e4m3 region's codes and an fp8_ds_mla
// region's records move as they are, to or from dense rows of them (dense_dt
// e4m3: bytes).
struct V4PagedCopyArgs {
  V4PagedBlocks blocks;
  V4BlockTables tables;
  V4PagedRegion region;
  const std::int32_t* index = nullptr;  // [items]: positions (window) or entry indices
  void* dense = nullptr;                // dense_dt [items, count], or [*, count] with dense_row
  const std::int32_t* dense_row = nullptr;  // [items] or null: item i's row of dense (else row i)
  Dt dense_dt{};
  std::int32_t items = 0;
  bool to_blocks = false;
};
void launch_v4_paged_copy(const V4PagedCopyArgs& args, cudaStream_t stream);

// Latents (or emitted entries) f32 [rows, kV4LatentDim] into their
// fp8_ds_mla records [rows, kV4Fp8DsMlaBytes] (model/deepseek_v4_fp8_ds_mla.h's
// encoding, byte for byte), and each row replaced by the values its record
// holds, so that the step's own keys read as they will from the blocks. A
// block a row: a warp a group of 64 nope values, the eighth the rope values.
void launch_v4_quantize_fp8_ds_mla_rows(float* rows, std::int64_t num_rows, std::uint8_t* records,
                                        cudaStream_t stream);

// The compressors' share of a step (DeepseekV4CompressPlan, model/
// deepseek_v4_step_plan.h; the fold of model/deepseek_v4_pool_fold.h): per
// item, one open entry's pool state [3][dim] (running max, sum of weights,
// weighted sum, per channel), read from the block of first_token - 1 (flag
// kV4CompressRead) or empty, folded with `count` of the step's rows from
// first_row (token t gives entry e its second half of the projections in
// window e of overlapping windows, its first half in window e - 1, all of
// them for disjoint windows; gate + ape row t % rate), then stored into the
// block of its last token, slot entry % slots (kV4CompressStore), and/or
// emitted (kV4CompressEmit): the pool, its weighted RMSNorm, the rope at position entry * rate,
// into out row emit_row. Items are independent: the starting states are
// copied to start_states before any item stores (an item may store into the
// slot another starts from), and no two items store one slot of one block.
struct V4CompressArgs {
  const float* kv = nullptr;    // [rows, width]: the step's projections
  const float* gate = nullptr;  // [rows, width]
  const float* ape = nullptr;   // [rate, width]
  const float* norm = nullptr;  // [dim]
  V4PagedBlocks blocks;         // the pool states' blocks
  V4BlockTables tables;         // per item
  std::int64_t state_offset = 0;  // floats from a block's start (DeepseekV4PoolRegion::state_offset)
  std::int32_t slots = 0;         // states a block keeps (2 overlapping, 1 disjoint)
  const std::int32_t* entry = nullptr;        // [items]
  const std::int32_t* first_row = nullptr;    // [items]
  const std::int32_t* first_token = nullptr;  // [items]
  const std::int32_t* count = nullptr;        // [items], >= 1
  const std::int32_t* flags = nullptr;        // [items]: kV4CompressRead | kV4CompressStore | kV4CompressEmit
  const std::int32_t* emit_row = nullptr;     // [items]: out's row of an emitted entry
  float* start_states = nullptr;              // scratch [items, 3 * dim]
  V4Rope rope;
  void* out = nullptr;  // out_dt [emitted entries, dim]
  Dt out_dt{};
  std::int32_t items = 0, dim = 0, width = 0, rate = 0;
  float eps = 1e-6f;
};
// DeepseekV4CompressPlan's flags (kReadState, kStoreState, kEmit).
constexpr std::int32_t kV4CompressRead = 1, kV4CompressStore = 2, kV4CompressEmit = 4;
void launch_v4_compress(const V4CompressArgs& args, cudaStream_t stream);

// The indexer's key pool (DeepseekV4IndexPlan) read from the blocks: pool row
// i is entry i - sequence_key_begin[s] of the sequence s whose range holds it
// (tables indexed by sequence). The pool is described per sequence, so the
// host lists no key.
//   launch_v4_gather_index_keys       f32 keys [num_keys, region.count] (then
//                                     launch_v4_quantize_e4m3_rows; session 17);
//   launch_v4_gather_index_keys_e4m3  the indexer's 132 B records directly: e4m3
//                                     codes [num_keys, 128] and one f32 scale a
//                                     key. From f32 keys (region f32) bit-equal
//                                     to the two steps above, in one pass (the
//                                     f32 keys are read once and never written
//                                     back); from stored records (region e4m3,
//                                     scales in scales_region: the blocks of
//                                     DeepseekV4KvFormats::cuda()), copied.
struct V4IndexKeysArgs {
  V4PagedBlocks blocks;
  V4BlockTables tables;  // [sequences]
  V4PagedRegion region;  // site entry
  V4PagedRegion scales_region;  // site entry, count 1, f32: stored records' scales (region e4m3)
  const std::int32_t* sequence_key_begin = nullptr;  // [sequences + 1], ascending
  std::int32_t num_sequences = 0, num_keys = 0;
  float* keys = nullptr;            // f32 [num_keys, region.count] (launch_v4_gather_index_keys)
  std::uint8_t* codes = nullptr;    // e4m3 [num_keys, 128] (launch_v4_gather_index_keys_e4m3)
  float* scales = nullptr;          // [num_keys]: amax / 448, 1 for a zero key (with codes)
};
void launch_v4_gather_index_keys(const V4IndexKeysArgs& args, cudaStream_t stream);
void launch_v4_gather_index_keys_e4m3(const V4IndexKeysArgs& args, cudaStream_t stream);

// The key set of each query row for launch_v4_sparse_attention, in the
// reference's order (DeepseekV4Reference::run_attention): the window (the
// last sliding_window positions up to the row's own, ascending), then the
// compressed entries: the indexer's picks (selected[r, j], j < num_selected[r],
// CSA), or every visible one, (position + 1) / rate of them (HCA, selected
// null), or none (sliding layers, entries.count 0). Gathered as bf16 into
// keys [rows, max_keys, head_dim]; key_rows[r, j] = r * max_keys + j and
// num_keys[r] are the attention's arguments. A row with more keys than
// max_keys traps. The window keys of the step's own positions come from
// `fresh`, the step's latents: a block keeps only its last window, so the
// step stores its latents after this gather (they may take the slots of
// earlier positions its rows still see).
struct V4GatherKeysArgs {
  V4PagedBlocks blocks;
  V4BlockTables tables;                    // per query row
  const std::int32_t* positions = nullptr; // [rows]
  V4PagedRegion window;                    // site window
  V4PagedRegion entries;                   // site entry; count 0 = none
  const std::int32_t* selected = nullptr;      // [rows, top_k] or null (every visible entry)
  const std::int32_t* num_selected = nullptr;  // [rows] with selected
  std::int32_t top_k = 0;
  std::int32_t sliding_window = 0;
  // The step's latents, f32 [rows, head_dim] (row r at positions[r]), and the
  // row of each row's sequence's first position this step; positions from
  // there on are read here. Null: every window key from the blocks. Over
  // fp8_ds_mla blocks they hold what the records hold
  // (launch_v4_quantize_fp8_ds_mla_rows), so a key reads the same wherever it is.
  const float* fresh = nullptr;
  const std::int32_t* fresh_first_row = nullptr;  // [rows]
  void* keys = nullptr;  // bf16 [rows, max_keys, head_dim]
  std::int32_t* key_rows = nullptr;  // [rows, max_keys]
  std::int32_t* num_keys = nullptr;  // [rows]
  std::int32_t rows = 0, max_keys = 0;
};
void launch_v4_gather_keys(const V4GatherKeysArgs& args, cudaStream_t stream);

// The same key sets for rows that share their sequence's keys (a prefill
// chunk), each key gathered once: a pool of every sequence's window span (the
// window of its first row through its last row's position) and, past it, its
// entries [0, (last position + 1) / rate) (none for sliding layers), as bf16
// into args.keys [pool rows, head_dim]; key_rows[r, j] then points into the
// pool (0 past num_keys[r]). args.tables are unused: the pool reads through
// the sequences' tables. At 128k a chunk of 8,192 rows copied 5-9 GB a layer
// row by row, and a pool of ~41k rows does (S21-4).
struct V4KeyPool {
  V4BlockTables tables;                        // per sequence
  const std::int32_t* row_sequence = nullptr;  // [rows]
  const std::int32_t* pool_begin = nullptr;    // [sequences + 1], ascending
  const std::int32_t* window_first = nullptr;  // [sequences]: the first position in its window span
  const std::int32_t* window_count = nullptr;  // [sequences]: the span's positions; its entries follow them
  const std::int32_t* first_row = nullptr;     // [sequences]: its first row this step (with args.fresh)
  std::int32_t num_sequences = 0, pool_rows = 0;
};
void launch_v4_gather_keys_pooled(const V4GatherKeysArgs& args, const V4KeyPool& pool, cudaStream_t stream);

}  // namespace sluice::cuda
