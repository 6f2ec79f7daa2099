// What the device sampler (kernels/sampling_topk.cu) reads for a step's rows,
// packed on the host: their parameters, each row's adjusted tokens (distinct
// history tokens with generated counts when it has penalties, its logit_bias
// tokens) and its allowed-token mask words. Rebuilt by every sample() call; the vectors keep their capacity.
#pragma once

#include <cstdint>
#include <vector>

#include "sluice/backend/cuda/kernels/kernels.h"
#include "sluice/backend/ops.h"

namespace sluice::cuda {

class DeviceSamplePack {
 public:
  void clear();
  // Appends `request`'s row, which reads row `logits_row` of the logits.
  void add(const SampleRequest& request, std::int32_t logits_row, std::int64_t vocab);

  std::vector<DeviceSampleRow> rows;
  std::vector<DevicePenaltyEntry> penalties;
  std::vector<std::uint64_t> mask_words;

 private:
  // Starts a row's entries: a new stamp epoch.
  void begin_row(std::int64_t vocab);
  // One entry per distinct token in range: every history token when the
  // repetition penalty is on, else the generated ones (the only ones the
  // presence and frequency penalties touch). A stamp per vocabulary id finds
  // a token's entry without a hash map (O(history) a row).
  void add_history(const SampleRequest& request, std::int64_t vocab);
  // The logit_bias tokens: on their history entry, or an entry of their own.
  void add_logit_bias(const SamplingParams& params, std::int64_t vocab);

  std::vector<std::uint32_t> stamp_;    // [vocab] epoch_ when the token has an entry in this row
  std::vector<std::int32_t> entry_of_;  // [vocab] its index in penalties
  std::uint32_t epoch_ = 0;
};

}  // namespace sluice::cuda
