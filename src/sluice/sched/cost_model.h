// CostModel: predicted wall time of one step, from the shape of its batch.
// The scheduler sizes prefill chunks with it (time, not token counts, bounds a
// step); the sim backend advances its clock by it; `sluice plan` reports it.
#pragma once

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

class CostModel {
 public:
  virtual ~CostModel() = default;
  virtual double predict_step_ms(const StepShape& shape) const = 0;
};

}  // namespace sluice
