#include "sluice/backend/sim/workload_simulation.h"

#include <algorithm>

#include "sluice/common/check.h"

namespace sluice::sim {
namespace {

struct Live {
  std::size_t index = 0;              // into the workload
  std::int32_t num_computed_tokens = 0;
  std::int32_t num_generated_tokens = 0;
  double last_token_ms = 0;
  std::int32_t num_prompt_tokens = 0;
  std::int32_t num_output_tokens = 0;

  bool prefilling() const { return num_computed_tokens < num_prompt_tokens; }
  std::int32_t remaining_prefill() const { return num_prompt_tokens - num_computed_tokens; }
  std::int64_t reserved_tokens() const { return std::int64_t{num_prompt_tokens} + num_output_tokens; }
};

// Largest chunk in [1, limit] whose step stays under the budget; 0 if none.
std::int32_t largest_chunk(const CostModel& model, StepShape& shape, std::int32_t limit, double budget_ms) {
  auto& chunk = shape.sequences.back();
  chunk.num_new_tokens = 1;
  if (model.predict_step_ms(shape) > budget_ms) return 0;
  std::int32_t lo = 1, hi = limit;  // lo fits
  while (lo < hi) {
    const std::int32_t mid = lo + (hi - lo + 1) / 2;
    chunk.num_new_tokens = mid;
    if (model.predict_step_ms(shape) <= budget_ms) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

}  // namespace

WorkloadOutcome simulate_workload(const CostModel& model, const std::vector<WorkloadRequest>& workload,
                                  const PlanPolicy& policy) {
  SLUICE_CHECK(policy.max_num_seqs > 0 && policy.max_num_batched_tokens > 0 && policy.min_chunk_tokens > 0);
  WorkloadOutcome out;
  out.requests.resize(workload.size());
  std::vector<std::size_t> order(workload.size());
  for (std::size_t i = 0; i < workload.size(); ++i) {
    order[i] = i;
    auto& r = out.requests[i];
    r.arrival_ms = workload[i].arrival_ms;
    r.num_prompt_tokens = workload[i].num_prompt_tokens;
    r.num_output_tokens = workload[i].num_output_tokens;
    const std::int64_t need = std::int64_t{r.num_prompt_tokens} + r.num_output_tokens;
    r.rejected = (policy.max_model_len_tokens > 0 && need > policy.max_model_len_tokens) ||
                 need > policy.kv_capacity_tokens;
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return workload[a].arrival_ms < workload[b].arrival_ms; });

  std::size_t next_arrival = 0;
  std::vector<std::size_t> waiting;  // arrived, not admitted
  std::vector<Live> live;            // admitted: prefilling or decoding
  std::int64_t reserved_tokens = 0;
  double now_ms = 0;
  StepShape shape;

  while (true) {
    while (next_arrival < order.size() && workload[order[next_arrival]].arrival_ms <= now_ms) {
      if (!out.requests[order[next_arrival]].rejected) waiting.push_back(order[next_arrival]);
      ++next_arrival;
    }
    // Admit, shortest prompt first, while slots and KV allow.
    std::stable_sort(waiting.begin(), waiting.end(), [&](std::size_t a, std::size_t b) {
      return workload[a].num_prompt_tokens < workload[b].num_prompt_tokens;
    });
    for (auto it = waiting.begin(); it != waiting.end();) {
      const auto& w = workload[*it];
      const std::int64_t need = std::int64_t{w.num_prompt_tokens} + w.num_output_tokens;
      if (static_cast<std::int32_t>(live.size()) >= policy.max_num_seqs ||
          reserved_tokens + need > policy.kv_capacity_tokens) {
        ++it;
        continue;
      }
      live.push_back({.index = *it, .num_prompt_tokens = w.num_prompt_tokens, .num_output_tokens = w.num_output_tokens});
      reserved_tokens += need;
      it = waiting.erase(it);
    }
    if (live.empty()) {
      if (next_arrival >= order.size()) break;  // nothing left (waiting ones can never fit: rejected)
      now_ms = std::max(now_ms, workload[order[next_arrival]].arrival_ms);
      continue;
    }

    // Decodes first, one token each.
    shape.sequences.clear();
    std::vector<std::size_t> in_step;  // indices into `live`, parallel to shape.sequences
    std::int32_t budget_tokens = policy.max_num_batched_tokens;
    for (std::size_t i = 0; i < live.size(); ++i) {
      if (live[i].prefilling()) continue;
      shape.sequences.push_back({.num_new_tokens = 1, .num_computed_tokens = live[i].num_computed_tokens});
      in_step.push_back(i);
      --budget_tokens;
    }
    // Then prefill chunks, shortest remaining first, sized by predicted time.
    std::vector<std::size_t> prefills;
    for (std::size_t i = 0; i < live.size(); ++i) {
      if (live[i].prefilling()) prefills.push_back(i);
    }
    std::stable_sort(prefills.begin(), prefills.end(),
                     [&](std::size_t a, std::size_t b) { return live[a].remaining_prefill() < live[b].remaining_prefill(); });
    bool any_prefill = false;
    for (const std::size_t i : prefills) {
      if (budget_tokens <= 0) break;
      const std::int32_t limit = std::min(live[i].remaining_prefill(), budget_tokens);
      shape.sequences.push_back({.num_new_tokens = 1, .num_computed_tokens = live[i].num_computed_tokens});
      std::int32_t chunk = largest_chunk(model, shape, limit, policy.max_step_ms);
      if (chunk == 0 && !any_prefill) chunk = std::min(limit, policy.min_chunk_tokens);  // always advance
      if (chunk == 0) {
        shape.sequences.pop_back();
        break;
      }
      shape.sequences.back().num_new_tokens = chunk;
      in_step.push_back(i);
      budget_tokens -= chunk;
      any_prefill = true;
    }

    const double step_ms = model.predict_step_ms(shape);
    now_ms += step_ms;
    ++out.num_steps;
    out.max_step_ms = std::max(out.max_step_ms, step_ms);

    for (std::size_t k = 0; k < in_step.size(); ++k) {
      Live& s = live[in_step[k]];
      RequestOutcome& r = out.requests[s.index];
      s.num_computed_tokens += shape.sequences[k].num_new_tokens;
      if (s.prefilling()) continue;  // chunk did not finish the prompt
      // A token is sampled after the prompt's last chunk and after every decode.
      if (s.num_generated_tokens == 0) {
        r.first_token_ms = now_ms;
      } else {
        r.max_gap_ms = std::max(r.max_gap_ms, now_ms - s.last_token_ms);
      }
      s.last_token_ms = now_ms;
      ++s.num_generated_tokens;
      ++out.num_output_tokens;
      if (s.num_generated_tokens == s.num_output_tokens) r.finish_ms = now_ms;
    }
    // Finished sequences release their reservation.
    for (auto it = live.begin(); it != live.end();) {
      if (!it->prefilling() && it->num_generated_tokens >= it->num_output_tokens) {
        reserved_tokens -= it->reserved_tokens();
        it = live.erase(it);
      } else {
        ++it;
      }
    }
  }
  out.makespan_ms = now_ms;
  return out;
}

}  // namespace sluice::sim
