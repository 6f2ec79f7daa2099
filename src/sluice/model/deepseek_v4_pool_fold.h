// DeepSeek-V4's compressed entry as an online softmax pool (docs/kv-v4.md):
// an entry is, per channel c, sum_t softmax_t(gate_t[c]) * value_t[c] over
// its window's tokens (CSA: the previous window's first halves too). Folding
// the tokens one at a time into a state [3][dim] (running max m, sum of
// weights s, weighted sum of values a) gives it as a / s at the end, within
// float rounding of the two-pass pool, and the same bits however a sequence's
// tokens are split into steps, so the state is what the paged blocks keep
// between steps. The CPU reference, the device plan's host test and the CUDA
// kernel (launch_v4_compress) fold with these operations, in this order.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>

namespace sluice {

// The first position whose projections entry `e` pools: its window's first,
// or with overlapping windows (CSA) the previous window's. Its last is its
// window's last, (e + 1) * rate - 1.
inline std::int64_t deepseek_v4_entry_first_token(std::int64_t e, std::int64_t rate, bool overlap) {
  return overlap && e > 0 ? (e - 1) * rate : e * rate;
}

// An open entry before its first token.
inline void deepseek_v4_pool_init(std::span<float> state) {
  const std::size_t dim = state.size() / 3;
  for (std::size_t c = 0; c < dim; ++c) {
    state[c] = -std::numeric_limits<float>::infinity();
    state[dim + c] = 0.0f;
    state[2 * dim + c] = 0.0f;
  }
}

// One channel's fold of (value, gate). A gate of -inf adds nothing.
inline void deepseek_v4_pool_fold_channel(float& m, float& s, float& a, float value, float gate) {
  if (gate == -std::numeric_limits<float>::infinity()) return;
  const float m_new = std::fmax(m, gate);
  const float scale = std::exp(m - m_new);  // 0 from an empty state (m = -inf)
  const float weight = std::exp(gate - m_new);
  s = s * scale + weight;
  a = a * scale + value * weight;
  m = m_new;
}

// Folds one token: values [dim] and gates [dim] (the gate with its position bias).
inline void deepseek_v4_pool_fold(std::span<float> state, std::span<const float> values, std::span<const float> gates) {
  const std::size_t dim = state.size() / 3;
  for (std::size_t c = 0; c < dim; ++c)
    deepseek_v4_pool_fold_channel(state[c], state[dim + c], state[2 * dim + c], values[c], gates[c]);
}

// The entry, a / s per channel (0 where nothing was folded).
inline void deepseek_v4_pool_finish(std::span<const float> state, std::span<float> out) {
  const std::size_t dim = state.size() / 3;
  for (std::size_t c = 0; c < dim; ++c) out[c] = state[dim + c] > 0.0f ? state[2 * dim + c] / state[dim + c] : 0.0f;
}

}  // namespace sluice
