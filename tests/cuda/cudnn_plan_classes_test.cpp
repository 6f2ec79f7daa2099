// The plan classes a server builds before serving (cudnn_plan_classes.h):
// host logic only, so it runs in CI without a GPU. Every step within the
// bounds, routed as cudnn_sdpa.cpp routes it, must ask only for classes in
// the set; otherwise a plan is built while serving and the decode lane
// stalls behind the prefill chunk (S13-lead-2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

#include "sluice/backend/cuda/cudnn_plan_classes.h"
#include "sluice/backend/cuda/cudnn_split_plan.h"
#include "sluice/common/rng.h"

namespace sluice::cuda {
namespace {

struct Config {
  SdpaServingBounds bounds;
  std::int32_t block_size = 16, num_sms = 132;
};

// A step's calls as cudnn_sdpa.cpp's prepare() makes them, derived here from
// the routing: whole (packed when every sequence starts at position 0), or
// the split's pieces and tails.
std::vector<SdpaCallClass> classes_of(const std::vector<SdpaShape>& step, const Config& c) {
  const SdpaRouting r = route_sdpa_step(step, c.bounds.num_q_heads, c.block_size, c.num_sms);
  const auto n = static_cast<std::int64_t>(step.size());
  std::int64_t max_rows = 0, max_keys = 0;
  bool fresh = true;
  for (const SdpaShape& s : step) {
    max_rows = std::max<std::int64_t>(max_rows, s.num_rows);
    max_keys = std::max<std::int64_t>(max_keys, s.num_keys);
    fresh = fresh && s.num_keys == s.num_rows;
  }
  // A declined step runs whole where the kernel is cudnn (not automatic).
  if (r.route != SdpaRoute::split)
    return {sdpa_call_class(!fresh, true, false, n, max_rows, max_keys, c.block_size)};
  std::int64_t piece_rows = 0, piece_keys = 0, tail_keys = 0;
  for (const SdpaKeyPiece& p : r.pieces) {
    piece_rows = std::max<std::int64_t>(piece_rows, step[static_cast<std::size_t>(p.sequence)].num_rows);
    piece_keys = std::max<std::int64_t>(piece_keys, p.key_end - p.key_begin);
  }
  for (std::size_t i = 0; i < step.size(); ++i)
    tail_keys = std::max<std::int64_t>(tail_keys, step[i].num_keys - r.tail_begin[i]);
  return {sdpa_call_class(true, false, true, static_cast<std::int64_t>(r.pieces.size()), piece_rows, piece_keys,
                          c.block_size),
          sdpa_call_class(true, true, true, n, max_rows, tail_keys, c.block_size)};
}

// A random step within the bounds: 1..max_sequences prompts of two rows or
// more, rows together at most max_step_rows, each over a prefix or fresh.
std::vector<SdpaShape> random_step(const SdpaServingBounds& b, SplitMix64& rng) {
  const auto pick = [&](std::int64_t lo, std::int64_t hi) {
    // Log-uniform: short and long lengths alike.
    const double u = rng.uniform();
    return std::clamp<std::int64_t>(static_cast<std::int64_t>(static_cast<double>(lo) *
                                                              std::pow(static_cast<double>(hi) / lo, u)),
                                    lo, hi);
  };
  const auto n = static_cast<std::int32_t>(pick(1, b.max_sequences));
  const bool all_fresh = rng.uniform() < 0.2;
  std::vector<SdpaShape> step;
  std::int64_t rows_left = b.max_step_rows;
  for (std::int32_t i = 0; i < n && rows_left >= 2 * (n - i); ++i) {
    const auto rows = static_cast<std::int32_t>(pick(2, rows_left - 2 * (n - i - 1)));
    rows_left -= rows;
    const auto keys = all_fresh || rng.uniform() < 0.2 ? rows : static_cast<std::int32_t>(pick(rows, b.max_keys));
    step.push_back({.num_rows = rows, .num_keys = keys});
  }
  return step;
}

void expect_every_step_covered(const Config& c, std::uint64_t seed) {
  const std::vector<SdpaCallClass> all = sdpa_serving_classes(c.bounds, c.block_size, c.num_sms);
  const std::set<SdpaCallClass> set(all.begin(), all.end());
  ASSERT_EQ(set.size(), all.size()) << "sorted without repeats";
  SplitMix64 rng(seed);
  for (int i = 0; i < 20000; ++i) {
    const std::vector<SdpaShape> step = random_step(c.bounds, rng);
    for (const SdpaCallClass& k : classes_of(step, c))
      ASSERT_TRUE(set.contains(k)) << "step " << i << " (" << step.size() << " sequences, first " << step[0].num_rows
                                   << " rows over " << step[0].num_keys << " keys) asks for paged " << k.paged
                                   << " causal " << k.causal << " stats " << k.stats << " b " << k.b << " sq "
                                   << k.sq << " skv " << k.skv;
  }
}

TEST(CudnnPlanClasses, EveryStepOfTheBurstServerAsksForAPlanBuiltBeforeServing) {
  // tools/device/burst_bench.sh: Llama-3-8B (32 heads), 8192-token steps,
  // 135,168-token context; the prefill lane on 116 SMs (--decode-lane sms:16) and on all 132.
  for (const std::int32_t sms : {116, 132})
    expect_every_step_covered({.bounds = {.num_q_heads = 32, .max_step_rows = 8192, .max_keys = 135168,
                                          .max_sequences = 8},
                               .num_sms = sms},
                              7);
}

TEST(CudnnPlanClasses, OtherHeadCountsPagesAndBoundsAreCoveredToo) {
  expect_every_step_covered({.bounds = {.num_q_heads = 8, .max_step_rows = 2048, .max_keys = 32768,
                                        .max_sequences = 3},
                             .block_size = 64},
                            11);
  expect_every_step_covered({.bounds = {.num_q_heads = 64, .max_step_rows = 16384, .max_keys = 262144,
                                        .max_sequences = 8},
                             .num_sms = 78},
                            13);
}

TEST(CudnnPlanClasses, TheBurstServersSetStaysSmallEnoughToBuildAtStart) {
  // At 45-110 ms a plan on one thread (S10-lead-2), a thousand plans is about a
  // minute on one core and seconds on the GPU machine's 16.
  const std::vector<SdpaCallClass> all = sdpa_serving_classes(
      {.num_q_heads = 32, .max_step_rows = 8192, .max_keys = 135168, .max_sequences = 8}, 16, 116);
  EXPECT_GT(all.size(), 100u);
  EXPECT_LT(all.size(), 1000u);
  // Bounds that admit no prefill step make no plans.
  EXPECT_TRUE(sdpa_serving_classes({.num_q_heads = 32, .max_step_rows = 0, .max_keys = 1024, .max_sequences = 8},
                                   16, 132)
                  .empty());
}

TEST(CudnnPlanClasses, TheClassOfACallRoundsUpBatchRowsAndKeys) {
  const SdpaCallClass k = sdpa_call_class(true, true, false, 3, 300, 5000, 16);
  EXPECT_EQ(k.b, 4);
  EXPECT_EQ(k.sq, 512);
  EXPECT_EQ(k.skv, 8192);
  // At least 64 rows, and keys of at least a page.
  const SdpaCallClass small = sdpa_call_class(false, true, false, 1, 5, 5, 128);
  EXPECT_EQ(small.sq, 64);
  EXPECT_EQ(small.skv, 128);
}

}  // namespace
}  // namespace sluice::cuda
