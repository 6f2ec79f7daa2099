// The shape classes of cuDNN SDPA calls (cudnn_sdpa.h): which plan a call
// asks for, and every plan the steps of a server can ask for, so that all of
// them are built before it serves.
//
// Why before: building a plan loads kernel modules, and a module load waits
// for the whole device. While a prefill chunk of a second or more runs on one
// stream, a plan built in the background held the decode lane's launches for
// that long (S13-lead-2: decode steps of 0.5-1.3 s, each ending when a plan
// was logged as built, docs/benchmarks.md).
#pragma once

#include <compare>
#include <cstdint>
#include <vector>

namespace sluice::cuda {

// One call's plan, apart from the model's dims: K/V from pages or packed
// rows, the mask, whether it writes log-sum-exp, and the batch, query rows
// and keys each rounded up to a power of two (the actual lengths travel in
// seq_len tensors).
// n rounded up to a power of two, at least `floor`: a class's rows or keys.
std::int64_t pow2_at_least(std::int64_t n, std::int64_t floor);

struct SdpaCallClass {
  bool paged = false, causal = true, stats = false;
  std::int64_t b = 0, sq = 0, skv = 0;
  auto operator<=>(const SdpaCallClass&) const = default;
};

// The class of a call over `num_entries` entries whose longest has
// `max_rows` rows and the longest key range `max_keys`.
SdpaCallClass sdpa_call_class(bool paged, bool causal, bool stats, std::int64_t num_entries, std::int64_t max_rows,
                              std::int64_t max_keys, std::int32_t block_size);

// What a server's prefill steps can hold: rows of all sequences together
// (--max-num-batched-tokens), keys of one sequence (--max-model-len), and
// sequences of more than one row in one step. A step past these asks for a
// plan outside the set; it is built then, in the background (cudnn_sdpa.h).
struct SdpaServingBounds {
  std::int32_t num_q_heads = 0;
  std::int32_t max_step_rows = 0;
  std::int32_t max_keys = 0;  // 0 in cuda_options.h: the KV cache's capacity
  std::int32_t max_sequences = 0;
};

// Every class a step within `bounds` asks for, routed by route_sdpa_step on
// `num_sms` SMs (cudnn_split_plan.h): whole calls (packed or paged), and the
// split's pieces and tails. Sorted, without repeats.
std::vector<SdpaCallClass> sdpa_serving_classes(const SdpaServingBounds& bounds, std::int32_t block_size,
                                                std::int32_t num_sms);

}  // namespace sluice::cuda
