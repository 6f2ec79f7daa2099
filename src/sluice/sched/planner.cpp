#include "sluice/sched/planner.h"

#include <algorithm>
#include <numeric>

#include "sluice/common/check.h"

namespace sluice {
namespace {

std::int32_t ceil_div(std::int32_t a, std::int32_t b) { return (a + b - 1) / b; }

bool decodes_first(SchedulingPolicy p) { return p != SchedulingPolicy::kPrefillFirst; }
bool time_capped(SchedulingPolicy p) {
  return p == SchedulingPolicy::kSluice || p == SchedulingPolicy::kFcfs || p == SchedulingPolicy::kRoundRobin;
}

// A prefill candidate: a running prefill (index into running) or a waiting request.
struct Candidate {
  const SchedRequest* request = nullptr;
  bool is_waiting = false;
  double key = 0.0;  // order within the policy
};

// Mutable bookkeeping while one plan is built.
class PlanBuilder {
 public:
  PlanBuilder(const SchedState& state, const SchedConfig& config, const CostModel& cost_model)
      : state_(state),
        config_(config),
        cost_model_(cost_model),
        preempted_(state.running.size(), false),
        num_available_blocks_(state.num_available_blocks),
        num_freeing_blocks_(state.num_freeing_blocks),
        token_budget_(config.max_num_batched_tokens),
        num_running_(static_cast<std::int32_t>(state.running.size()) + state.num_finishing_seqs +
                     state.num_loading_seqs + state.num_other_lane_seqs) {
    shape_.sequences.reserve(state.running.size() + state.waiting.size());
  }

  void schedule_decodes();
  void schedule_prefills();
  // Liveness: when nothing could be planned although requests run, every one
  // of them is a prefill short of blocks (decode growth took the blocks their
  // admission counted on), and no blocks are on their way back, nothing would
  // ever change: the newest gives its blocks back so older ones can run. A
  // request alone always fits (request validation), so this ends.
  void preempt_newest_if_stuck();
  // The step's time cap: the target, or more when the decodes alone
  // (decodes_ms, shape_ once they are in it) nearly fill it
  // (SchedConfig::min_prefill_share).
  double step_cap_ms(double decodes_ms) const;
  StepPlan finish();

 private:
  std::int32_t block_size() const { return state_.block_size_tokens; }
  void preempt(std::size_t index);
  std::vector<Candidate> prefill_candidates() const;
  // The predicted time of a prompt's remaining `tokens` from `start` on, as
  // one chunk alone: what shortest-remaining-first orders by. Tokens alone
  // would misorder prompts whose rest sits deep in a long context (20k
  // tokens at 100k cost more than 30k fresh ones: S12-lead-1).
  double remaining_prefill_ms(std::int32_t tokens, std::int32_t start) const {
    return cost_model_.predict_step_ms({.sequences = {{.num_new_tokens = tokens, .num_computed_tokens = start}}});
  }
  std::int32_t chunk_under_time_cap(std::int32_t max_chunk, std::int32_t start_position, bool first_prefill);
  // The step's predicted time with the chunk being sized (shape_'s last sequence) at k tokens.
  double cost_with_chunk(std::int32_t k) {
    shape_.sequences.back().num_new_tokens = k;
    return cost_model_.predict_step_ms(shape_);
  }
  double amortizing_step_ms(std::int32_t best, std::int32_t max_chunk);
  // Host-tier tokens worth loading for this waiting request (0: recompute them).
  std::int32_t tokens_to_load(const SchedRequest& r);
  // Whether loading `tokens` tokens at positions [position, position + tokens)
  // is predicted cheaper than recomputing them (num_copies copies per block:
  // 1 for a load, 2 for a store and its load).
  bool copy_beats_recompute(std::int32_t tokens, std::int32_t position, double num_copies) const;

  const SchedState& state_;
  const SchedConfig& config_;
  const CostModel& cost_model_;
  StepPlan plan_;
  StepShape shape_;
  std::vector<bool> preempted_;  // [running]
  std::int32_t num_available_blocks_;
  std::int32_t num_freeing_blocks_;
  std::int32_t token_budget_;
  std::int32_t num_running_;
  // Blocks the running prefills may still take (up to their whole prompt):
  // admission must leave them room.
  std::int32_t outstanding_prefill_blocks_ = 0;
  double step_cap_ms_ = 0.0;
  // Decodes run and cost at most (1 - min_prefill_share) of max_step_ms: the
  // regime in which decodes keep max_step_ms on average (long steps and their
  // payback, SchedConfig::max_token_gap_ms).
  bool inter_token_regime_ = false;
  bool paying_back_ = false;  // the decodes are behind their pace: this step stays under it
  bool long_step_ = false;    // a chunk beside decodes was grown past the cap to amortize its fixed cost
  double load_budget_ms_ = 0.0;  // copy time this step's loads may still take
  bool any_load_ = false;
  bool any_chunk_ = false;  // a prefill chunk that runs tokens is planned
};

void PlanBuilder::preempt(std::size_t index) {
  preempted_[index] = true;
  const SchedRequest& r = state_.running[index];
  plan_.preempted.push_back(r.seq_id);
  // Shared (prefix-hit) blocks stay referenced by others; counting them all is
  // optimistic, and the engine's commit re-checks. A swap's full blocks come
  // back when their stores land, the rest now.
  const std::int32_t full_blocks = std::min(r.num_allocated_blocks, r.num_computed_tokens / block_size());
  if (full_blocks > 0 && copy_beats_recompute(full_blocks * block_size(), 0, 2.0)) {
    plan_.swapped.push_back(r.seq_id);
    num_freeing_blocks_ += full_blocks;
    num_available_blocks_ += r.num_allocated_blocks - full_blocks;
  } else {
    num_available_blocks_ += r.num_allocated_blocks;
  }
  --num_running_;
}

void PlanBuilder::schedule_decodes() {
  const std::size_t n = state_.running.size();
  for (std::size_t i = 0; i < n; ++i) {
    if (preempted_[i]) continue;
    const SchedRequest& r = state_.running[i];
    if (!r.is_decoding()) continue;
    if (token_budget_ <= 0) break;
    const std::int32_t need = std::max(0, ceil_div(r.num_tokens, block_size()) - r.num_allocated_blocks);
    // Make room by preempting the newest admissions, never an older one;
    // room that stores in flight are freeing is waited for (a step).
    const auto room_is_coming = [&] { return need <= num_available_blocks_ + num_freeing_blocks_; };
    while (need > num_available_blocks_ && !room_is_coming()) {
      std::size_t victim = n;
      for (std::size_t j = n; j-- > i + 1;) {
        if (!preempted_[j]) {
          victim = j;
          break;
        }
      }
      if (victim == n) break;
      preempt(victim);
    }
    if (need > num_available_blocks_) {
      if (room_is_coming()) {  // the freeing blocks are promised to this decode
        num_freeing_blocks_ -= need - num_available_blocks_;
      } else {
        preempt(i);
      }
      continue;
    }
    num_available_blocks_ -= need;
    --token_budget_;
    plan_.decodes.push_back({.seq_id = r.seq_id, .num_new_tokens = 1});
    shape_.sequences.push_back({.num_new_tokens = 1, .num_computed_tokens = r.num_computed_tokens});
  }
}

void PlanBuilder::preempt_newest_if_stuck() {
  if (!plan_.empty() || !plan_.preempted.empty()) return;
  if (num_freeing_blocks_ > 0 || state_.num_finishing_seqs > 0 || state_.num_loading_seqs > 0 ||
      state_.num_other_lane_seqs > 0)
    return;
  for (std::size_t j = state_.running.size(); j-- > 1;) {
    if (!preempted_[j]) {
      preempt(j);
      return;
    }
  }
}

std::vector<Candidate> PlanBuilder::prefill_candidates() const {
  std::vector<Candidate> candidates;
  candidates.reserve(state_.running.size() + state_.waiting.size());
  for (std::size_t i = 0; i < state_.running.size(); ++i) {
    const SchedRequest& r = state_.running[i];
    if (preempted_[i] || r.is_decoding()) continue;
    candidates.push_back({.request = &r, .is_waiting = false});
  }
  for (const SchedRequest& r : state_.waiting) candidates.push_back({.request = &r, .is_waiting = true});

  switch (config_.policy) {
    case SchedulingPolicy::kSluice:
      for (Candidate& c : candidates) {
        const SchedRequest& r = *c.request;
        const std::int32_t start = c.is_waiting ? r.num_cached_tokens : r.num_computed_tokens;
        const double waited_ms = state_.now_ms - r.arrival_ms;
        // Starved requests sort before every key >= 0, among themselves by arrival.
        c.key = waited_ms >= config_.max_prefill_wait_ms
                    ? -1e12 + r.arrival_ms
                    : aged_remaining_ms(remaining_prefill_ms(r.num_tokens - start, start), waited_ms,
                                        config_.aging_ms);
      }
      break;
    case SchedulingPolicy::kRoundRobin:
    case SchedulingPolicy::kFcfs:
    case SchedulingPolicy::kPrefillFirst:
    case SchedulingPolicy::kDecodeFirstTokenBudget:
      for (Candidate& c : candidates) c.key = c.request->arrival_ms;
      break;
  }
  // Stable: equal keys keep running-before-waiting and arrival order.
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.key < b.key; });
  if (config_.policy == SchedulingPolicy::kRoundRobin && !candidates.empty()) {
    const auto shift = static_cast<std::ptrdiff_t>(state_.step_index % candidates.size());
    std::rotate(candidates.begin(), candidates.begin() + shift, candidates.end());
  }
  return candidates;
}

// A chunk whose fixed cost takes more than kMaxFixedShare of its time near
// `best` rows: the intercept of its cost line (MLA's K/V decompression over
// the whole prefix, 408 rows' worth of its attention at any depth). Returns
// the step time at which that cost is kMaxFixedShare of the chunk's, or 0 for
// a chunk with no such cost (the dense family) or too few rows left to
// measure it. The last chunk in shape_.
double PlanBuilder::amortizing_step_ms(std::int32_t best, std::int32_t max_chunk) {
  constexpr double kMaxFixedShare = 0.25;
  // The cost line through two chunks of whole query tiles (a partial tile is
  // a cost of its own, trimmed below), at least two blocks.
  const std::int32_t unit = std::max({1, cost_model_.query_tile_rows(), block_size()});
  const std::int32_t half = std::max(unit, best / 2 / unit * unit), upper = 2 * half;
  if (upper > max_chunk) return 0.0;
  const double without_ms = cost_with_chunk(0), upper_ms = cost_with_chunk(upper), half_ms = cost_with_chunk(half);
  const double per_row_ms = std::max(0.0, (upper_ms - half_ms) / (upper - half));
  const double fixed_ms = upper_ms - without_ms - upper * per_row_ms;
  if (fixed_ms <= kMaxFixedShare * (upper_ms - without_ms)) return 0.0;
  return without_ms + fixed_ms / kMaxFixedShare;
}

// Largest k in [0, max_chunk] whose step (current shape + k tokens at
// start_position) is predicted to take <= the step cap. Predicted time does
// not decrease with k, so binary search. The first prefill of a step always
// gets at least one block's worth, and as many more tokens as cost nothing
// extra, so a prompt progresses even when decodes alone fill the time budget
// (liveness over the bound).
std::int32_t PlanBuilder::chunk_under_time_cap(std::int32_t max_chunk, std::int32_t start_position,
                                               bool first_prefill) {
  shape_.sequences.push_back({.num_new_tokens = max_chunk, .num_computed_tokens = start_position});
  // Largest k in (lo, max_chunk] with predicted time <= cap_ms, given fits_cap(lo).
  auto largest_within = [&](std::int32_t lo, double cap_ms) {
    auto within = [&](std::int32_t k) { return cost_with_chunk(k) <= cap_ms; };
    if (within(max_chunk)) return max_chunk;
    std::int32_t hi = max_chunk;  // within(lo) assumed, !within(hi) known
    while (hi - lo > 1) {
      const std::int32_t mid = lo + (hi - lo) / 2;
      (within(mid) ? lo : hi) = mid;
    }
    return lo;
  };
  // Keep chunk ends on block boundaries so every chunk's blocks can be cached.
  auto block_aligned = [&](std::int32_t k) {
    if (k >= max_chunk) return max_chunk;
    const std::int32_t end = (start_position + k) / block_size() * block_size();
    return end > start_position ? end - start_position : k;
  };
  std::int32_t best = block_aligned(largest_within(0, step_cap_ms_));
  const std::int32_t liveness = std::min(max_chunk, block_size());
  if (first_prefill && best < liveness && !paying_back_) {
    // Over the cap anyway: take every token that adds next to nothing to the
    // minimum chunk's own cost (a prefill kernel's query tile costs about as
    // much for 16 rows as for 128 over a long prefix, so a short chunk would
    // waste most of its time; the tile's own rows add a fraction of a percent).
    constexpr double kNearlyFreeShare = 0.01;
    const double without_ms = cost_with_chunk(0), liveness_ms = cost_with_chunk(liveness);
    const double nearly_free_ms = liveness_ms + kNearlyFreeShare * std::max(0.0, liveness_ms - without_ms);
    best = std::max(liveness, block_aligned(largest_within(liveness, nearly_free_ms)));
  }
  if (first_prefill && state_.num_other_lane_seqs == 0 && best < max_chunk) {
    // A chunk that is mostly its fixed cost grows until that cost is a
    // quarter of it, up to a bound: alone in its step (nobody's inter-token
    // latency at stake), what a prompt arriving meanwhile may wait for the
    // step to end; beside decodes, the longest gap between two tokens, paid
    // back by the steps after. While they pay back, it waits for the next
    // long step rather than spend the time left on its fixed cost.
    constexpr double kLoneStepCapFactor = 4.0;
    const bool alone = shape_.sequences.size() == 1;
    const bool may_run_long = inter_token_regime_ && config_.max_token_gap_ms > config_.max_step_ms;
    if (alone || may_run_long) {
      const double amortized_ms = amortizing_step_ms(best, max_chunk);
      const double bound_ms = alone ? kLoneStepCapFactor * config_.max_step_ms : config_.max_token_gap_ms;
      if (amortized_ms > step_cap_ms_ && paying_back_) {
        best = 0;
      } else if (amortized_ms > step_cap_ms_) {
        const std::int32_t grown = block_aligned(largest_within(best, std::min(bound_ms, amortized_ms)));
        long_step_ = !alone && grown > best;
        best = std::max(best, grown);
      }
    }
  }
  // A chunk whose last query tile is mostly empty pays for that whole tile
  // over its prefix (at 95k keys, 272 rows in 3 tiles took 51 ms where 256
  // rows took ~40: S11-lead-c). Cut it back to its last full tile when the
  // partial tile's rows cost more than kPartialTileCostRatio times as much
  // each as the full tiles' rows: the time left goes to later candidates, or
  // the step ends early. The rest of a prompt is never cut.
  constexpr double kPartialTileCostRatio = 2.0;
  const std::int32_t tile = cost_model_.query_tile_rows();
  if (tile > 1 && best > tile && best < max_chunk && best % tile != 0) {
    const std::int32_t full = block_aligned(best / tile * tile);
    const double without_ms = cost_with_chunk(0), full_ms = cost_with_chunk(full), best_ms = cost_with_chunk(best);
    if ((best_ms - full_ms) / (best - full) > kPartialTileCostRatio * (full_ms - without_ms) / full) best = full;
  }
  shape_.sequences.pop_back();
  return best;
}

std::int32_t PlanBuilder::tokens_to_load(const SchedRequest& r) {
  const std::int32_t num_blocks = r.num_host_hit_tokens / block_size();
  if (num_blocks == 0 || config_.host_load_ms_per_block <= 0.0) return 0;
  const double load_ms = num_blocks * config_.host_load_ms_per_block;
  if (any_load_ && load_ms > load_budget_ms_) return 0;
  const std::int32_t tokens = num_blocks * block_size();
  if (!copy_beats_recompute(tokens, r.num_cached_tokens, 1.0)) return 0;
  load_budget_ms_ -= load_ms;
  any_load_ = true;
  return tokens;
}

bool PlanBuilder::copy_beats_recompute(std::int32_t tokens, std::int32_t position, double num_copies) const {
  if (config_.host_load_ms_per_block <= 0.0 || tokens <= 0) return false;
  const double copy_ms = num_copies * (tokens / block_size()) * config_.host_load_ms_per_block;
  // Recomputing: those tokens alone in a step, less the step's fixed cost (a
  // one-token step at the same position).
  const StepShape recompute{.sequences = {{.num_new_tokens = tokens, .num_computed_tokens = position}}};
  const StepShape fixed{.sequences = {{.num_new_tokens = 1, .num_computed_tokens = position}}};
  return copy_ms < cost_model_.predict_step_ms(recompute) - cost_model_.predict_step_ms(fixed);
}

StepPlan PlanBuilder::finish() {
  plan_.predicted_step_ms = plan_.empty() ? 0.0 : cost_model_.predict_step_ms(shape_);
  if (long_step_) {
    plan_.decode_overrun_ms = state_.decode_overrun_ms + plan_.predicted_step_ms - config_.max_step_ms;
  } else if (paying_back_) {
    plan_.decode_overrun_ms =
        std::max(0.0, state_.decode_overrun_ms - (config_.max_step_ms - plan_.predicted_step_ms));
  }
  return std::move(plan_);
}

double PlanBuilder::step_cap_ms(double decodes_ms) const {
  return std::max(config_.max_step_ms, decodes_ms / (1.0 - config_.min_prefill_share));
}

void PlanBuilder::schedule_prefills() {
  std::vector<Candidate> candidates = prefill_candidates();
  const double decodes_ms = shape_.sequences.empty() ? 0.0 : cost_model_.predict_step_ms(shape_);
  step_cap_ms_ = step_cap_ms(decodes_ms);
  load_budget_ms_ = step_cap_ms_;
  const bool cap_by_time = time_capped(config_.policy);
  inter_token_regime_ = cap_by_time && !plan_.decodes.empty() && step_cap_ms_ <= config_.max_step_ms;
  // After a long step the decodes are behind their pace: this step pays it
  // back, running only the chunks that fit the time left under max_step_ms.
  paying_back_ = inter_token_regime_ && state_.decode_overrun_ms > 0.0;
  if (paying_back_)
    step_cap_ms_ = std::max(decodes_ms, config_.max_step_ms - state_.decode_overrun_ms);
  // Admitted prompts still to be allocated: admission must leave them room.
  for (const Candidate& c : candidates) {
    if (c.is_waiting) continue;
    const SchedRequest& r = *c.request;
    outstanding_prefill_blocks_ += std::max(0, ceil_div(r.num_tokens, block_size()) - r.num_allocated_blocks);
  }
  const bool cap_per_request = config_.long_prefill_token_threshold > 0 &&
                               config_.policy != SchedulingPolicy::kDecodeFirstTokenBudget;
  const std::int32_t round_robin_share =
      config_.policy == SchedulingPolicy::kRoundRobin && !candidates.empty()
          ? std::max(block_size(), token_budget_ / static_cast<std::int32_t>(candidates.size()))
          : token_budget_;

  for (const Candidate& c : candidates) {
    if (token_budget_ <= 0) break;
    const SchedRequest& r = *c.request;
    if (c.is_waiting && num_running_ >= config_.max_num_seqs) continue;
    const std::int32_t start = c.is_waiting ? r.num_cached_tokens : r.num_computed_tokens;
    const std::int32_t held_blocks = c.is_waiting ? r.num_cached_tokens / block_size() : r.num_allocated_blocks;
    const std::int32_t prompt_blocks_left = std::max(0, ceil_div(r.num_tokens, block_size()) - held_blocks);
    if (c.is_waiting) {
      // Admission: the whole remaining prompt must fit beside what admitted
      // prefills still need, leaving the reserve for decode growth.
      // Protected cached blocks count only when nothing else runs (liveness).
      const std::int32_t need = prompt_blocks_left + r.num_hit_free_blocks;
      // (Its own hits are taken, not evicted: they do not count against it.)
      const std::int32_t protected_blocks =
          num_running_ > 0 ? std::max(0, state_.num_protected_blocks - r.num_hit_free_blocks) : 0;
      if (num_available_blocks_ - protected_blocks - outstanding_prefill_blocks_ - need < config_.reserve_blocks) {
        continue;
      }
      if (const std::int32_t load_tokens = tokens_to_load(r); load_tokens > 0) {
        // Blocks for the loads now; the rest of the prompt stays outstanding.
        const std::int32_t load_blocks = load_tokens / block_size();
        num_available_blocks_ -= load_blocks + r.num_hit_free_blocks;
        outstanding_prefill_blocks_ += prompt_blocks_left - load_blocks;
        ++num_running_;
        plan_.prefills.push_back(
            {.seq_id = r.seq_id, .num_new_tokens = 0, .admits = true, .num_load_tokens = load_tokens});
        continue;
      }
    }

    std::int32_t chunk = std::min(r.num_tokens - start, token_budget_);
    if (cap_per_request) chunk = std::min(chunk, config_.long_prefill_token_threshold);
    chunk = std::min(chunk, round_robin_share);
    // Memory for this chunk (running prefills admitted before the blocks ran short).
    const std::int32_t available_for_request =
        c.is_waiting ? num_available_blocks_ - r.num_hit_free_blocks : num_available_blocks_;
    chunk = std::min(chunk, (held_blocks + available_for_request) * block_size() - start);
    if (chunk <= 0) continue;  // no memory for this one; a smaller one may fit
    if (cap_by_time) {
      chunk = chunk_under_time_cap(chunk, start, !any_chunk_);
      if (chunk <= 0) break;  // time is spent: later candidates would not fit either
    }

    const std::int32_t chunk_blocks = std::max(0, ceil_div(start + chunk, block_size()) - held_blocks);
    num_available_blocks_ -= chunk_blocks + (c.is_waiting ? r.num_hit_free_blocks : 0);
    if (c.is_waiting) {
      outstanding_prefill_blocks_ += prompt_blocks_left - chunk_blocks;
      ++num_running_;
    } else {
      outstanding_prefill_blocks_ -= std::min(chunk_blocks, prompt_blocks_left);
    }
    token_budget_ -= chunk;
    any_chunk_ = true;
    plan_.prefills.push_back({.seq_id = r.seq_id, .num_new_tokens = chunk, .admits = c.is_waiting});
    shape_.sequences.push_back({.num_new_tokens = chunk, .num_computed_tokens = start});
  }
}

}  // namespace

std::int64_t StepPlan::num_tokens() const {
  std::int64_t n = static_cast<std::int64_t>(decodes.size());
  for (const ScheduledChunk& c : prefills) n += c.num_new_tokens;
  return n;
}

double aged_remaining_ms(double remaining_ms, double waited_ms, double aging_ms) {
  return remaining_ms / (1.0 + std::max(0.0, waited_ms) / aging_ms);
}

StepPlan plan_step(const SchedState& state, const SchedConfig& config, const CostModel& cost_model) {
  SLUICE_CHECK(state.block_size_tokens > 0);
  PlanBuilder builder(state, config, cost_model);
  if (decodes_first(config.policy)) {
    builder.schedule_decodes();
    builder.schedule_prefills();
    builder.preempt_newest_if_stuck();
    return builder.finish();
  }
  // prefill-first: a step with prefill work is a prefill-only step.
  builder.schedule_prefills();
  StepPlan plan = builder.finish();
  if (!plan.prefills.empty()) return plan;
  PlanBuilder decode_only(state, config, cost_model);
  decode_only.schedule_decodes();
  decode_only.preempt_newest_if_stuck();
  return decode_only.finish();
}

}  // namespace sluice
