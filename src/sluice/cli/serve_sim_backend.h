// PacedSimBackend: `sluice serve --device sim`. The model directory supplies
// the tokenizer, chat template and config as usual; steps run on
// the sim module's SimBackend (nothing is computed, the roofline cost model says
// how long a step would take). Two things a server needs that the sim alone
// does not give:
//   - wall-clock pacing: each step returns no earlier than its predicted time
//     divided by `speed` (0 = no pacing: as fast as the host goes, which is
//     what a server-overhead benchmark wants);
//   - tokens a real client can read: the sim's fake ids are mapped onto the
//     tokenizer's ordinary ids (not special, not EOS, decoding to whole
//     characters), so output decodes to text and never ends early unless EOS
//     is asked for (`eos_every`).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "sluice/backend/backend.h"
#include "sluice/sim/sim_backend.h"
#include "sluice/tokenizer/tokenizer.h"

namespace sluice::cli {

struct PacedSimOptions {
  double speed = 1.0;            // predicted time / wall time; 0 = no pacing
  std::int32_t eos_every = 0;    // every Nth generated token is EOS (0 = never)
};

class PacedSimBackend final : public Backend {
 public:
  // Fails if the tokenizer has no ordinary token to emit.
  static Result<std::unique_ptr<PacedSimBackend>> make(std::unique_ptr<sim::SimBackend> sim,
                                                       const Tokenizer& tokenizer,
                                                       std::vector<TokenId> eos_token_ids,
                                                       PacedSimOptions options);

  const BackendInfo& info() const override { return info_; }
  Result<StepOutput> execute(const Batch& batch) override;
  // The sim's host tier (its copy engines: sim_backend.h), for --kv-offloading-size.
  Status allocate_host_kv_cache(std::int32_t num_blocks) override { return sim_->allocate_host_kv_cache(num_blocks); }
  // --decode-lane sms:N: the sim's lane (sim_backend.h), paced and tokenised as this one.
  Result<std::unique_ptr<Backend>> make_lane(const LaneOptions& options) override;

 private:
  TokenId first_allowed(std::span<const std::uint64_t> allowed, std::size_t start) const;
  PacedSimBackend(std::unique_ptr<sim::SimBackend> sim, BackendInfo info, std::vector<TokenId> emittable,
                  std::vector<TokenId> eos_token_ids, PacedSimOptions options);

  std::unique_ptr<sim::SimBackend> sim_;
  BackendInfo info_;                  // the sim's geometry, the tokenizer's vocabulary
  std::vector<TokenId> emittable_;    // ordinary token ids, ascending
  std::vector<TokenId> eos_token_ids_;
  PacedSimOptions options_;
};

}  // namespace sluice::cli
