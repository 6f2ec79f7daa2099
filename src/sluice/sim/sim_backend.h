// SimBackend: executes a Batch by advancing a virtual clock by the cost
// model's predicted step time. Nothing is computed: sampled tokens are a
// deterministic hash of (seq_id, position), so identical runs give identical
// tokens and times whatever else shares the batch.
//
// KV copies (the host tier) are modelled, not made: each direction is one
// copy engine that moves BackendInfo::kv_bytes_per_block per copy at
// host_link_bytes_per_s, copies queue behind each other in their direction
// and overlap compute completely (their own stream; PCIe is full duplex). A
// copy completes when the virtual clock passes its end. A batch with no
// sequences advances the clock until a whole batch of copies has landed (the
// first to land in full), as the CUDA backend's wait does (one event a batch,
// backend/cuda/host_kv_tier.h): a load of a 40k-token prefix is one wait, not
// 640. Waiting per copy gave the engine a round per block, whose host time the
// paced sim adds to the load (S20-5: 28% of the link under the decode lane).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "sluice/backend/backend.h"
#include "sluice/sched/cost_model.h"
#include "sluice/sim/hardware.h"
#include "sluice/sim/memory_plan.h"
#include "sluice/sim/model_profile.h"
#include "sluice/sim/parallelism.h"
#include "sluice/sim/skewed_cost_model.h"

namespace sluice::sim {

struct SimTokenOptions {
  std::int32_t vocab_size = 32000;
  // Fake tokens avoid this id; the sim never stops a sequence by EOS unless
  // `emit_eos_every` is set.
  std::optional<TokenId> eos_token_id;
  // If set, the token at generated index k with (k + 1) % emit_eos_every == 0 is EOS.
  std::int32_t emit_eos_every = 0;
  std::uint64_t seed = 0;
};

class SimBackend final : public Backend {
 public:
  // `info.name` is forced to "sim".
  SimBackend(std::shared_ptr<const CostModel> cost_model, BackendInfo info, SimTokenOptions tokens);

  const BackendInfo& info() const override { return info_; }
  // Rejects a malformed batch (positions past max_model_len, missing blocks)
  // with an error; otherwise advances the clock and samples.
  Result<StepOutput> execute(const Batch& batch) override;

  // A decode lane on `options.num_sms` of the device's SMs, priced by this
  // backend's truth scaled to them (hardware.h: compute by the SM share,
  // memory by the HBM share they reach); this backend's own steps are then
  // priced on the rest. Each lane keeps its own clock: on the wall clock
  // (serve's pacing) the two run at once. Refused for lanes that share every
  // SM (`stream`, `high-priority`): beside deep chunks their decode steps
  // slowed 6-12x on the H200 (S13-lead-1), which a price per step cannot know.
  Result<std::unique_ptr<SimBackend>> make_sm_lane(const LaneOptions& options);
  Result<std::unique_ptr<Backend>> make_lane(const LaneOptions& options) override;
  // Set by make_sim_backend from the hardware (num_sms, hbm_share_per_sm,
  // sm_group_granularity, prefill_lane_compute_factor); 0 SMs: no lanes.
  void set_sm_partition(const HardwareSpec& hardware) { partition_ = hardware; }

  double now_ms() const { return now_ms_; }
  Status allocate_host_kv_cache(std::int32_t num_blocks) override;
  std::int32_t num_copies_in_flight() const { return static_cast<std::int32_t>(copies_.size()); }
  std::int64_t num_steps() const { return num_steps_; }
  const CostModel& cost_model() const { return *cost_model_; }

  // The token the sim samples after `position` tokens of `seq_id` (exposed for tests).
  TokenId fake_token(SequenceId seq_id, std::int32_t position, std::int32_t generated_index) const;

 private:
  std::shared_ptr<const CostModel> cost_model_;
  BackendInfo info_;
  SimTokenOptions tokens_;
  // Queues the batch's new copies on their direction's engine.
  void start_copies(std::span<const KvBlockCopy> copies);
  // Copies whose end the clock has passed, taken out.
  std::vector<KvCopyCompletion> take_completed();

  // The end of the first batch of copies in flight to land in full (now if none).
  double first_batch_end_ms() const;

  struct InFlightCopy {
    KvCopyId id = 0;
    std::int64_t batch = 0;  // the start_copies() call that started it
    double end_ms = 0;
  };
  HardwareSpec partition_;  // its SM fields; num_sms 0 once split (or never splittable)
  double now_ms_ = 0;
  std::int64_t num_steps_ = 0;
  std::int64_t num_copy_batches_ = 0;  // start_copies() calls so far: numbers each one's copies
  std::int32_t num_host_blocks_ = 0;
  std::vector<InFlightCopy> copies_;
  double device_to_host_free_ms_ = 0;  // when each direction's engine is next idle
  double host_to_device_free_ms_ = 0;
};

struct SimBackendOptions {
  MemoryOptions memory;
  std::int32_t max_model_len_tokens = 0;    // 0: the profile's max_position_embeddings
  std::optional<std::int32_t> num_kv_blocks_override;
  SimTokenOptions tokens;                   // vocab_size is taken from the profile
  // The backend's clock runs by the roofline model skewed this way, while the
  // planner believes the roofline model itself: a simulated GPU that is not
  // what the planner thinks (tests/scenario/cost_skew_scenario_test.cpp).
  std::optional<CostSkew> truth_skew;
};

// A sim backend with the roofline cost model of `profile` on `hardware`, and
// KV capacity from plan_memory() (or the override). Fails if the parallelism
// is invalid or the model does not fit.
Result<std::unique_ptr<SimBackend>> make_sim_backend(const ModelProfile& profile,
                                                     const HardwareSpec& hardware,
                                                     const Parallelism& parallelism,
                                                     const SimBackendOptions& options);

}  // namespace sluice::sim
