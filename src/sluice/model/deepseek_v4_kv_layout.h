// DeepSeek-V4's paged KV layout (issue 18 stage 2; docs/kv-v4.md): what one
// engine block holds for every layer, and what that costs per token and per
// sequence.
//
// A block of block_size tokens holds, per layer, in this order:
//   window   [window_slots, head_dim]: the normed, roped latents (the sliding
//            window's keys = values; every layer kind has one) of the block's
//            last window_slots = min(block_size, sliding_window) positions,
//            position p at slot p % window_slots. A query needs the latents of
//            the sliding_window positions up to its own, which lie in its
//            block and the one before, so a block never needs more; a step
//            reads the positions before it from the blocks before writing its
//            own (which may reuse their slots) and its own from its rows.
//   CSA/HCA  entries [block_size / rate, head_dim]: the compressed entries
//            whose windows lie in the block
//            state [slots][3][dim]: the open entries' online-softmax pools
//            (per channel the running max, the sum of weights and the
//            weighted sum of values; deepseek_v4_pool_fold.h), slot entry %
//            slots, each as of the last of its tokens in this block. CSA keeps
//            two (a token of window w feeds entry w with its second half and
//            entry w + 1 with its first), HCA one
//   CSA only index keys [block_size / rate, index_head_dim] and the indexer
//            compressor's state, as above
// in the backend's formats (DeepseekV4KvFormats).
// block_size must be a multiple of every compress rate, so that each
// compression window lies in one block and every block boundary is a window
// boundary: a prefix-cache hit (whole blocks) then restores exactly the state
// a cold run has, CSA's entry that the previous window opened included.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "sluice/common/result.h"
#include "sluice/model/config.h"
#include "sluice/model/deepseek_v4_pool_fold.h"

namespace sluice {

// How a block stores one kind of value. Regions stay in f32 units.
enum class DeepseekV4ValueFormat {
  f32,
  bf16,         // two values a float
  e4m3_scaled,  // an item's values as e4m3 codes ([items][dim] bytes), then
                // one f32 scale an item ([items]): value = code x scale
  fp8_ds_mla,   // a latent's record (deepseek_v4_fp8_ds_mla.h): e4m3 nope
                // values with a ue8m0 scale a 64, bf16 rope values
};

// The formats a backend's blocks use. The pool states are f32 on every backend.
struct DeepseekV4KvFormats {
  DeepseekV4ValueFormat latents = DeepseekV4ValueFormat::f32;     // window latents, CSA/HCA entries: f32, bf16 or fp8_ds_mla
  DeepseekV4ValueFormat index_keys = DeepseekV4ValueFormat::f32;  // the indexer's keys: f32 or e4m3_scaled

  // The CPU reference's spans: f32 everywhere.
  static constexpr DeepseekV4KvFormats cpu() { return {}; }
  // CUDA's: its sparse attention reads latents and entries as bf16, and its
  // indexer scores e4m3 keys with one scale a key (launch_v4_quantize_e4m3_rows'
  // records), so storing them so changes no value either computes with.
  static constexpr DeepseekV4KvFormats cuda() {
    return {.latents = DeepseekV4ValueFormat::bf16, .index_keys = DeepseekV4ValueFormat::e4m3_scaled};
  }
  // CUDA's with --kv-cache-dtype fp8: latents and entries as fp8_ds_mla
  // records, which the sparse attention reads as the bf16 values they hold.
  static constexpr DeepseekV4KvFormats cuda_fp8() {
    return {.latents = DeepseekV4ValueFormat::fp8_ds_mla, .index_keys = DeepseekV4ValueFormat::e4m3_scaled};
  }
  bool operator==(const DeepseekV4KvFormats&) const = default;
};

// One compressor's geometry and where its regions sit in a layer's area.
struct DeepseekV4PoolRegion {
  std::int64_t dim = 0;    // one entry's values (head_dim, or index_head_dim for the indexer)
  std::int64_t width = 0;  // one token's projection: 2 * dim when windows overlap (CSA), else dim
  std::int64_t rate = 0;   // tokens per window
  std::int64_t slots = 0;  // open entries' states kept: 2 with overlap, else 1
  std::int64_t entries_offset = 0;  // floats from the block's start
  std::int64_t state_offset = 0;
  DeepseekV4ValueFormat entries_format = DeepseekV4ValueFormat::f32;
  std::int64_t scales_offset = 0;  // e4m3_scaled entries: their scales' first float

  bool overlapping() const { return width == 2 * dim; }
  std::int64_t state_floats() const { return slots * 3 * dim; }
  // The first and last position whose projections entry `e` pools.
  std::int64_t first_token(std::int64_t e) const { return deepseek_v4_entry_first_token(e, rate, overlapping()); }
  std::int64_t last_token(std::int64_t e) const { return (e + 1) * rate - 1; }
};

struct DeepseekV4LayerRegion {
  DeepseekV4Attention type = DeepseekV4Attention::sliding;
  std::int64_t window_offset = 0;              // floats from the block's start
  std::optional<DeepseekV4PoolRegion> compressor;  // CSA and HCA
  std::optional<DeepseekV4PoolRegion> indexer;     // CSA
};

// Bytes of each stored value kind, by backend.
struct DeepseekV4KvRecords {
  double latent_bytes = 0;     // one window latent or one compressed entry [head_dim]
  double index_key_bytes = 0;  // one index key [index_head_dim]
  double state_value_bytes = 0;  // one value of a compressor's open-entry state

  // What the CPU backend stores: f32 everywhere.
  static DeepseekV4KvRecords cpu_f32(const ModelConfig& config);
  // What the CUDA kernels (issue 18 stage 3) are to store, as FlashMLA's
  // fp8_ds_mla: the non-rope dims in e4m3 with one ue8m0 scale per 64 (padded
  // to 8 bytes), the rope dims in bf16 (584 B at head_dim 512, rope 64); index
  // keys e4m3 with one f32 scale (132 B at 128 dims); the compressors' state f32.
  static DeepseekV4KvRecords cuda_fp8(const ModelConfig& config);
};

// Bytes per token and per sequence of the layout, for a choice of records.
struct DeepseekV4KvFootprint {
  // Compressed entries and index keys of one position, all layers: what grows
  // with context once the window is a per-sequence ring (the spec's ~3.85 KB
  // for V4-Flash with cuda_fp8 records).
  double compressed_bytes_per_token = 0;
  // The window latents a block keeps (window_slots per layer), all layers,
  // over the block's tokens: what the engine's blocks spend on the window per
  // token of context (kv/ frees no out-of-window block, so each full block
  // keeps its last window).
  double window_bytes_per_token = 0;
  // Per sequence, whatever its length: the window ring (sliding_window
  // latents per layer) and the compressors' open entries.
  double window_ring_bytes_per_sequence = 0;
  double state_bytes_per_sequence = 0;
};

class DeepseekV4KvLayout {
 public:
  // Fails, naming the rates, when block_size_tokens is not a multiple of
  // every compress rate the model's layers use, or naming the format a kind
  // of value cannot take.
  static Result<DeepseekV4KvLayout> make(const ModelConfig& config, std::int32_t block_size_tokens,
                                         DeepseekV4KvFormats formats = DeepseekV4KvFormats::cpu());

  std::int32_t block_size_tokens() const { return block_size_tokens_; }
  std::int64_t head_dim() const { return head_dim_; }
  // Window latents a block keeps per layer: min(block_size, sliding_window).
  std::int32_t window_slots() const { return window_slots_; }
  const DeepseekV4KvFormats& formats() const { return formats_; }
  const DeepseekV4LayerRegion& layer(std::size_t l) const { return layers_[l]; }
  std::size_t num_layers() const { return layers_.size(); }
  // Every layer's regions together: one block's floats.
  std::int64_t floats_per_block() const { return floats_per_block_; }

  // The footprint with these records (window_bytes_per_token depends on the
  // block size: a block keeps window_slots latents per layer).
  DeepseekV4KvFootprint footprint(const DeepseekV4KvRecords& records) const;

 private:
  std::int32_t block_size_tokens_ = 0;
  std::int64_t head_dim_ = 0;
  std::int32_t sliding_window_ = 0;
  std::int32_t window_slots_ = 0;
  DeepseekV4KvFormats formats_;
  std::vector<DeepseekV4LayerRegion> layers_;
  std::int64_t floats_per_block_ = 0;
};

// The block size every compress rate of `config` divides: their least common multiple.
std::int32_t deepseek_v4_block_alignment(const ModelConfig& config);

// The block size serve, generate and plan give DeepSeek-V4 without
// --block-size: the first multiple of the alignment from 1024 tokens. A block
// keeps its last window and its compressors' state whatever its size, so
// larger blocks cost less a token (V4-Flash, f32 records: 105 KB at 128,
// 36.6 KB at 512, 25.2 KB at 1024); a prefix hit then recomputes up to 1023
// tokens past its last full block, little beside the long prompts V4 serves.
std::int32_t deepseek_v4_default_block_size(const ModelConfig& config);

}  // namespace sluice
