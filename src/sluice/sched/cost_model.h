// CostModel: predicted wall time of one step, from the shape of its batch.
// The scheduler sizes prefill chunks with it (time, not token counts, bounds a
// step); the sim backend advances its clock by it; `sluice plan` reports it.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace sluice {

// What the cost of a step depends on: per sequence, how many new tokens run and
// at what position they start (attention cost grows with position).
struct StepShape {
  struct Sequence {
    std::int32_t num_new_tokens = 0;
    std::int32_t num_computed_tokens = 0;  // context already in the KV cache
  };
  std::vector<Sequence> sequences;

  std::int64_t num_tokens() const {
    std::int64_t n = 0;
    for (const auto& s : sequences) n += s.num_new_tokens;
    return n;
  }
};

// A prediction split into terms that go wrong independently: each rests on its
// own efficiency assumption (GEMM FLOP rate, weight-read bandwidth, attention
// FLOP rate, KV-read bandwidth, fixed costs), so a measurement can correct
// each by its own factor (OnlineCostModel).
struct CostTerms {
  static constexpr std::size_t kNumTerms = 5;
  double gemm_compute_ms = 0;       // GEMMs bound by FLOPs (prefill chunks)
  double gemm_memory_ms = 0;        // GEMMs bound by weight reads (decode)
  double attention_compute_ms = 0;  // attention bound by FLOPs (long prefill rows)
  double attention_memory_ms = 0;   // attention bound by KV reads (decode over long contexts)
  double fixed_ms = 0;              // per-step and per-sequence overhead, communication, host fetches

  std::array<double, kNumTerms> values() const {
    return {gemm_compute_ms, gemm_memory_ms, attention_compute_ms, attention_memory_ms, fixed_ms};
  }
  // Each term times its factor (factors in values() order).
  CostTerms scaled(const std::array<double, kNumTerms>& factors) const {
    return {.gemm_compute_ms = gemm_compute_ms * factors[0],
            .gemm_memory_ms = gemm_memory_ms * factors[1],
            .attention_compute_ms = attention_compute_ms * factors[2],
            .attention_memory_ms = attention_memory_ms * factors[3],
            .fixed_ms = fixed_ms * factors[4]};
  }
  double total_ms() const {
    double t = 0;
    for (double v : values()) t += v;
    return t;
  }
};

class CostModel {
 public:
  virtual ~CostModel() = default;
  virtual double predict_step_ms(const StepShape& shape) const = 0;
  // (optional) The same prediction by term; terms sum to predict_step_ms. The
  // default puts everything in fixed_ms, which a correction can only scale whole.
  virtual CostTerms predict_terms(const StepShape& shape) const { return {.fixed_ms = predict_step_ms(shape)}; }
  // Query rows that prefill attention runs as one tile (a chunk of k rows pays
  // ceil(k / tile) tiles over its prefix); 1 where the model knows no tile.
  virtual std::int32_t query_tile_rows() const { return 1; }
};

}  // namespace sluice
