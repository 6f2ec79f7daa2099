#include "sluice/cli/serve_sim_backend.h"

#include <algorithm>
#include <chrono>
#include <span>
#include <string>
#include <string_view>
#include <thread>

namespace sluice::cli {
namespace {
constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD in UTF-8
}  // namespace

Result<std::unique_ptr<PacedSimBackend>> PacedSimBackend::make(std::unique_ptr<sim::SimBackend> sim,
                                                               const Tokenizer& tokenizer,
                                                               std::vector<TokenId> eos_token_ids,
                                                               PacedSimOptions options) {
  if (options.speed < 0) return Error{"--sim-speed must be >= 0"};
  if (options.eos_every < 0) return Error{"--sim-eos-every must be >= 0"};
  if (options.eos_every > 0 && eos_token_ids.empty())
    return Error{"--sim-eos-every: the model names no EOS token"};
  std::vector<TokenId> emittable;
  for (TokenId id = 0; id < tokenizer.vocab_size(); ++id) {
    if (tokenizer.is_special(id) || !tokenizer.id_to_token(id)) continue;
    if (std::find(eos_token_ids.begin(), eos_token_ids.end(), id) != eos_token_ids.end()) continue;
    // Only ids that are whole characters on their own (not a lone UTF-8
    // fragment): every emitted token then streams as text, as a real model's
    // output mostly does.
    const std::string text = tokenizer.decode(std::span<const TokenId>(&id, 1), /*skip_special_tokens=*/false);
    if (text.empty() || text.find(kReplacementCharacter) != std::string::npos) continue;
    emittable.push_back(id);
  }
  if (emittable.empty()) return Error{"the tokenizer has no ordinary token for the sim to emit"};
  BackendInfo info = sim->info();
  info.name = "sim";
  info.vocab_size = tokenizer.vocab_size();  // prompts are validated against the real vocabulary
  return std::unique_ptr<PacedSimBackend>(new PacedSimBackend(std::move(sim), std::move(info), std::move(emittable),
                                                              std::move(eos_token_ids), options));
}

PacedSimBackend::PacedSimBackend(std::unique_ptr<sim::SimBackend> sim, BackendInfo info,
                                 std::vector<TokenId> emittable, std::vector<TokenId> eos_token_ids,
                                 PacedSimOptions options)
    : sim_(std::move(sim)),
      info_(std::move(info)),
      emittable_(std::move(emittable)),
      eos_token_ids_(std::move(eos_token_ids)),
      options_(options) {}

Result<std::unique_ptr<Backend>> PacedSimBackend::make_lane(const LaneOptions& options) {
  // The engine paces on the wall clock, which runs `speed` times faster than the sim's.
  LaneOptions in_sim_time = options;
  if (options_.speed > 0) in_sim_time.step_interval_ms *= options_.speed;
  SLUICE_TRY_ASSIGN(lane, sim_->make_sm_lane(in_sim_time));
  return std::unique_ptr<Backend>(
      new PacedSimBackend(std::move(lane), lane_info_of(info_), emittable_, eos_token_ids_, options_));
}

// Structured output: the first allowed ordinary id at or after the sim's pick
// (wrapping), else any allowed id (an end token once the output is complete).
TokenId PacedSimBackend::first_allowed(std::span<const std::uint64_t> allowed, std::size_t start) const {
  for (std::size_t i = 0; i < emittable_.size(); ++i) {
    const TokenId t = emittable_[(start + i) % emittable_.size()];
    if (token_mask_allows(allowed, t)) return t;
  }
  for (TokenId t = 0; t < info_.vocab_size; ++t)
    if (token_mask_allows(allowed, t)) return t;
  return emittable_.front();
}

Result<StepOutput> PacedSimBackend::execute(const Batch& batch) {
  const auto started = std::chrono::steady_clock::now();
  SLUICE_TRY_ASSIGN(output, sim_->execute(batch));
  for (std::size_t i = 0; i < output.sequences.size() && i < batch.sequences.size(); ++i) {
    SequenceOutput& out = output.sequences[i];  // same order as the batch
    if (!out.token) continue;
    const SequenceStep& seq = batch.sequences[i];
    const std::int32_t generated_index = seq.end_position() - seq.num_prompt_tokens;
    if (!seq.allowed_tokens.empty()) {
      out.token = first_allowed(seq.allowed_tokens, static_cast<std::size_t>(*out.token));
    } else if (options_.eos_every > 0 && (generated_index + 1) % options_.eos_every == 0) {
      out.token = eos_token_ids_.front();
    } else {
      // The sim's id is a hash, uniform over its own vocabulary; folding it
      // onto the ordinary ids keeps it deterministic.
      out.token = emittable_[static_cast<std::size_t>(*out.token) % emittable_.size()];
    }
    out.logits.clear();  // sized to the sim's vocabulary, not the tokenizer's
  }
  if (options_.speed > 0) {
    const auto predicted = std::chrono::duration<double, std::milli>(output.step_time_ms / options_.speed);
    std::this_thread::sleep_until(started + std::chrono::duration_cast<std::chrono::steady_clock::duration>(predicted));
  }
  return output;
}

}  // namespace sluice::cli
