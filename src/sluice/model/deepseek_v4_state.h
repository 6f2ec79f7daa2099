// Where one DeepSeek-V4 sequence's attention state lives, as the model's
// forward pass reads and writes it: the reference's growing per-sequence
// history (deepseek_v4.h) or the engine's paged blocks
// (deepseek_v4_paged_state.h). The forward pass is the same for both, so a
// paged run computes exactly what the reference computes.
//
// Positions are absolute. A compressed entry `index` of a layer pools the
// window [index * rate, (index + 1) * rate) (with the previous window's first
// half when windows overlap, CSA), token by token into a pool state that
// stays open until the window's last token. Every span is host f32.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

#include "sluice/model/deepseek_v4_pool_fold.h"

namespace sluice {

// The two compressors of a layer: its own (CSA and HCA) and the CSA indexer's.
enum class DeepseekV4Pool { compressor, indexer };

class DeepseekV4SequenceState {
 public:
  virtual ~DeepseekV4SequenceState() = default;

  // Makes room for positions [0, num_tokens): called once per step before
  // anything is written (the reference grows; a paged state checks its
  // block table covers them).
  virtual void reserve(std::int64_t num_tokens) = 0;
  // Layer `layer`'s window latent of `position` [head_dim]. A paged state
  // keeps only each block's last sliding_window latents, so a position's slot
  // is reused by the position sliding_window later in its block: a step reads
  // the latents of positions before it first, and writes its own after.
  virtual std::span<float> window_latent(std::int32_t layer, std::int64_t position) = 0;
  // The pool state [3][dim] (deepseek_v4_pool_fold.h) of a compressor's open
  // entry `index` as of the token at `position`, one of its tokens. A paged
  // state keeps it in the block of `position` (slot index % slots): a token
  // reads the state its predecessor left and writes its own, so a full block
  // keeps the state as of its last token; the reference keeps one per entry.
  virtual std::span<float> pool_state(std::int32_t layer, DeepseekV4Pool pool, std::int64_t index,
                                      std::int64_t position) = 0;
  // A compressed entry [dim]: normed, roped at its window's first position
  // (the indexer's: an index key).
  virtual std::span<float> entry(std::int32_t layer, DeepseekV4Pool pool, std::int64_t index) = 0;
};

// The pool state of entry `index` at `position`, ready to fold that token in:
// opened empty when `position` is the entry's first token (first_token), else
// continuing what the token before left (copied into `position`'s block when
// a paged state keeps it in another).
inline std::span<float> continue_pool_state(DeepseekV4SequenceState& state, std::int32_t layer, DeepseekV4Pool pool,
                                            std::int64_t index, std::int64_t position, std::int64_t first_token) {
  const std::span<float> at = state.pool_state(layer, pool, index, position);
  if (position == first_token) {
    deepseek_v4_pool_init(at);
  } else {
    const std::span<float> before = state.pool_state(layer, pool, index, position - 1);
    if (before.data() != at.data()) std::copy(before.begin(), before.end(), at.begin());
  }
  return at;
}

}  // namespace sluice
