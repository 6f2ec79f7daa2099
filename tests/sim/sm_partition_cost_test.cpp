// The decode lane's size for --decode-lane auto: the fewest SMs whose chats'
// step keeps the pace, by the roofline on a confined share of the H200.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

#include "sluice/sim/model_profile.h"
#include "sluice/sim/roofline_cost_model.h"
#include "sluice/sim/sm_partition_cost.h"

namespace sluice::sim {
namespace {

RooflineCostModel h200_model(const char* profile) {
  return RooflineCostModel(*find_profile(profile), h200_sluice_cuda(), Parallelism{});
}

// The 8 chats' step, each at `context` (the default: chats_decode_step's), on `sms` SMs.
double lane_step_ms(const CostModel& whole, std::int32_t sms, std::int32_t context = 0) {
  const HardwareSpec h = h200_sluice_cuda();
  const std::shared_ptr<const CostModel> believed(std::shared_ptr<const CostModel>(), &whole);
  StepShape chats = chats_decode_step();
  if (context > 0)
    for (auto& s : chats.sequences) s.num_computed_tokens = context;
  return SkewedCostModel(believed, confined_to(sms, h.num_sms, h.hbm_share_per_sm)).predict_step_ms(chats);
}

TEST(DecodeLaneSms, TheFewestGroupsWhoseChatStepFitsThePace) {
  const RooflineCostModel llama8b = h200_model("llama-3-8b");
  // S17-lead-1 measured 30.3 ms on 8 SMs, 16.1 on 16, for these chats.
  const double on8 = lane_step_ms(llama8b, 8), on16 = lane_step_ms(llama8b, 16);
  EXPECT_NEAR(on8, 30.3, 0.05 * 30.3);
  EXPECT_NEAR(on16, 16.1, 0.05 * 16.1);
  std::printf("chats' step on 8 SMs %.1f ms, on 16 %.1f ms\n", on8, on16);
  const HardwareSpec h = h200_sluice_cuda();
  // serve's default pace (40 ms) filled to 0.9: 8 SMs, which S17-lead-1 measured best.
  EXPECT_EQ(fewest_decode_lane_sms(llama8b, h, 40.0, 0.9), 8) << on8;
  EXPECT_EQ(fewest_decode_lane_sms(llama8b, h, on8 / 0.9, 0.9), 8);
  // A pace just under what 8 SMs give takes the next group.
  EXPECT_EQ(fewest_decode_lane_sms(llama8b, h, 0.99 * on8 / 0.9, 0.9), 16);
  EXPECT_EQ(fewest_decode_lane_sms(llama8b, h, 0.99 * on16 / 0.9, 0.9), 24);
}

TEST(DecodeLaneSms, NoneWhenHalfTheGpuCannotKeepThePace) {
  const RooflineCostModel llama70b = h200_model("llama-3-70b");
  EXPECT_EQ(fewest_decode_lane_sms(llama70b, h200_sluice_cuda(), 40.0, 0.9), 0);
  HardwareSpec unsplittable = h200_sluice_cuda();
  unsplittable.hbm_share_per_sm = 0.0;
  EXPECT_EQ(fewest_decode_lane_sms(h200_model("llama-3-8b"), unsplittable, 1000.0, 0.9), 0);
}

// What a lane sized for short chats holds: by the S17 estimate (8 SMs read
// KV at ~0.57 TB/s beside a 30.7 ms weight read) 8 chats keep 20 tok/s
// (50 ms steps) up to ~10k tokens of context each on 8 SMs; twice the SMs
// reach about 3.5x further.
TEST(DecodeLaneSms, TheChatContextALaneHoldsAtThePromisedRate) {
  const RooflineCostModel llama8b = h200_model("llama-3-8b");
  const HardwareSpec h = h200_sluice_cuda();
  const std::int32_t on8 = decode_lane_chat_context(llama8b, h, 8, 50.0, 131072);
  const std::int32_t on16 = decode_lane_chat_context(llama8b, h, 16, 50.0, 131072);
  std::printf("8 chats at 20 tok/s up to %d tokens of context on 8 SMs, %d on 16\n", on8, on16);
  EXPECT_GT(on8, 8000);
  EXPECT_LT(on8, 13000);
  EXPECT_GT(on16, 3 * on8);
  // The answer is the boundary: one token more does not fit.
  EXPECT_LE(lane_step_ms(llama8b, 8, on8), 50.0);
  EXPECT_GT(lane_step_ms(llama8b, 8, on8 + 1), 50.0);
  // Capped, and none when even short chats miss the step.
  EXPECT_EQ(decode_lane_chat_context(llama8b, h, 64, 50.0, 4096), 4096);
  EXPECT_EQ(decode_lane_chat_context(llama8b, h, 8, 5.0, 131072), 0);
}

}  // namespace
}  // namespace sluice::sim
