// The step planner: who runs how many tokens in the next step. Pure: the same
// state, config and cost model always give the same plan.
//
//   1. Decodes: every running decode gets its token, oldest admission first.
//      When a decode needs a block and none is available, the most recently
//      admitted running request is preempted, possibly itself. With a host
//      tier a victim is swapped (its blocks stored to the host, loaded back
//      on resume) when store + load (2 x blocks x host_load_ms_per_block) is
//      predicted cheaper than recomputing its tokens, and recomputed
//      otherwise. A swapped victim's blocks come free only when its stores
//      land, so a decode short of blocks that stores in flight will give
//      back (num_freeing_blocks) waits a step for them instead of preempting.
//   2. Prefills: the candidates (running prefills, then admissible waiting
//      requests) in the policy's order; each gets the longest chunk such that
//      the step's *predicted time* stays <= the step cap (binary search on the
//      cost model), capped by the token budget and the per-request threshold.
//      The cap is max_step_ms, or decodes / (1 - min_prefill_share) when the
//      decodes alone nearly fill it: two regimes, an inter-token target while
//      decodes are cheap and a guaranteed prefill share of GPU time when not.
//      A first chunk whose fixed cost (MLA's K/V decompression over its
//      prefix) would take most of the step grows past the cap until that
//      cost is a quarter of it: alone in its step (no decode waits on it) up
//      to 4x max_step_ms; beside decodes up to max_token_gap_ms, a long step
//      whose time past max_step_ms the next steps pay back (decodes, and only
//      chunks that fit the time left and are not mostly fixed cost), so
//      decodes keep max_step_ms on average (StepPlan::decode_overrun_ms).
//   sluice's order is shortest remaining prefill first, by the cost model's
//   time for the rest of each prompt, aged (see aged_remaining_ms), with a
//   hard bound: past max_prefill_wait_ms a request goes ahead of all that
//   have not waited that long.
//   Admission reserves the whole prompt's blocks (and keeps reserve_blocks
//   free for decode growth), so admitted prefills cannot deadlock each other.
//   3. Host-tier hits: a waiting request whose prefix continues in the host
//      tier loads it when the copy (blocks x host_load_ms_per_block) is
//      predicted cheaper than recomputing those tokens at that position, and
//      recomputes it otherwise. A load runs on the copy engine, not in the
//      step, so it costs decodes nothing; the request joins the steps once it
//      has landed. Loads a step starts are capped at the step's time cap of
//      copy time (the first always goes), so the copy queue stays about one
//      step long and a later load is not stuck behind it.
#pragma once

#include "sluice/sched/cost_model.h"
#include "sluice/sched/sched_state.h"

namespace sluice {

StepPlan plan_step(const SchedState& state, const SchedConfig& config, const CostModel& cost_model);

// The shortest-remaining-first key with aging: the predicted time of the
// remaining prefill, divided by (1 + waited / aging_ms). Smaller goes first.
double aged_remaining_ms(double remaining_ms, double waited_ms, double aging_ms);

}  // namespace sluice
