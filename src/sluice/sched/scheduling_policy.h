// Who gets the prefill part of each step. Decodes always come first except
// under kPrefillFirst, which exists (like kDecodeFirstTokenBudget) to reproduce
// the common engines' default policies so the difference is measured.
#pragma once

namespace sluice {

enum class SchedulingPolicy {
  kSluice,      // decodes, then shortest-remaining-prefill-first with aging; chunks sized by predicted time
  kFcfs,        // decodes, then prefills in arrival order; chunks sized by predicted time
  kRoundRobin,  // decodes, then the prefill budget shared among prefilling requests, rotating; time-sized
  kPrefillFirst,            // emulation: pending prefills take the whole step (token budget only); decodes wait
  kDecodeFirstTokenBudget,  // emulation: decodes, then FCFS prefill chunks under the token budget; no time cap, no per-request cap
};

}  // namespace sluice
