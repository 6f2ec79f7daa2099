// Batch: one step of work, the contract between the engine and every backend.
// For each sequence: the tokens to run, where they start, the KV blocks that
// hold (and will hold) its cache, and whether to sample a token after them.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "sluice/common/ids.h"
#include "sluice/common/kv_copy.h"
#include "sluice/common/result.h"
#include "sluice/common/sampling_params.h"
#include "sluice/common/token_mask.h"

namespace sluice {

struct SequenceStep {
  SequenceId seq_id = 0;
  // Every token the sequence has: prompt then generated. Owned by the engine,
  // valid for the duration of execute().
  std::span<const TokenId> tokens;
  std::int32_t num_prompt_tokens = 0;
  // This step runs tokens[num_computed_tokens, num_computed_tokens + num_new_tokens).
  // Their KV is written at those positions; attention sees [0, end).
  std::int32_t num_computed_tokens = 0;
  std::int32_t num_new_tokens = 0;
  // Physical blocks covering positions [0, num_computed_tokens + num_new_tokens).
  std::span<const BlockId> block_table;
  bool sample = false;  // sample after the last new token
  SamplingParams sampling;
  // Structured output: bit t (word t / 64) set = token t may be sampled.
  // Empty: every token may. Owned by the engine, valid during execute().
  std::span<const std::uint64_t> allowed_tokens;
  bool return_logits = false;  // copy the sampled row's logits into the output

  std::int32_t end_position() const { return num_computed_tokens + num_new_tokens; }
  std::int32_t num_generated_tokens() const {
    return static_cast<std::int32_t>(tokens.size()) - num_prompt_tokens;
  }
};

struct Batch {
  std::vector<SequenceStep> sequences;
  // KV block copies to start with this step (demotions to the host tier,
  // promotions from it). A backend starts them before the forward and may
  // let them run past the step (their own stream): no sequence of this or a
  // later step touches a copy's blocks until its completion has been
  // reported (StepOutput::completed_copies). A batch with no sequences
  // waits: execute() returns once at least one copy in flight has completed
  // (at once if none is), and its step_time_ms is the wait. A copy whose id
  // is already in flight (the engine retries a failed batch's copies) is not
  // started again.
  std::vector<KvBlockCopy> copies;
  // (optional) Structured-output masks filled late, so that computing them
  // overlaps the step's forward pass. When set, the allowed_tokens of the
  // constrained sampled sequences are zeroed until it has been called: a
  // backend calls fill_late_masks() after launching the forward and before it
  // reads any mask. Calling it again does nothing.
  std::function<void()> late_masks;
  // A start-up run (the decode lane's warm-up): nobody waits on its tokens,
  // so its time is no stall to report.
  bool warm_up = false;

  void fill_late_masks() const {
    if (late_masks) late_masks();
  }

  std::int64_t num_tokens() const {
    std::int64_t n = 0;
    for (const auto& s : sequences) n += s.num_new_tokens;
    return n;
  }
};

struct SequenceOutput {
  SequenceId seq_id = 0;
  std::optional<TokenId> token;  // present iff the step asked to sample
  float logprob = 0.0f;          // of `token`, after temperature/penalties
  std::vector<TokenLogprob> top_logprobs;
  std::vector<float> logits;     // raw logits, if return_logits
};

struct StepOutput {
  std::vector<SequenceOutput> sequences;  // same order as Batch::sequences
  double step_time_ms = 0.0;              // measured (real backends) or predicted (sim)
  // Of step_time_ms, one-time setup on the step's path (common/setup_time.h):
  // a step with any is not timed as its shape costs.
  double setup_ms = 0.0;
  // Copies of this or earlier batches that completed by the time execute()
  // returned, each reported once.
  std::vector<KvCopyCompletion> completed_copies;
};

}  // namespace sluice
