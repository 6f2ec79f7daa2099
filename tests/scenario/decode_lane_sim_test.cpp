// Two step loops on the sim (--device sim --decode-lane sms:N): the engine's
// decode lane on a sim lane of 16 of the H200's SMs, the prefill lane on the
// rest (sim_backend.h), on the wall clock without pacing. While a 32k-token
// prompt prefills in chunks, the chats decode on their lane; every request
// ends with its tokens and every block comes back.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sluice/engine/engine.h"
#include "sluice/sim/hardware.h"
#include "sluice/sim/model_profile.h"
#include "sluice/sim/roofline_cost_model.h"
#include "sluice/sim/sim_backend.h"

namespace sluice {
namespace {

TEST(DecodeLaneOnTheSim, ChatsDecodeOnTheirLaneWhileALongPromptPrefills) {
  const sim::ModelProfile llama = *sim::find_profile("llama-3-8b");
  auto backend = sim::make_sim_backend(llama, sim::h200_sluice_cuda(), {}, {});
  ASSERT_TRUE(backend.ok()) << backend.error_message();
  EngineConfig config;
  config.max_num_seqs = 16;
  config.max_num_batched_tokens = 2048;
  config.decode_lane = DecodeLane::kSms;
  config.decode_lane_sms = 16;
  config.clock = ClockMode::kWall;
  std::unique_ptr<Backend> main = std::move(backend).value();
  auto lane = make_decode_lane(*main, config);
  ASSERT_TRUE(lane.ok()) << lane.error_message();
  Engine engine(std::move(main), nullptr, config, std::move(lane).value());

  std::map<std::string, std::shared_ptr<RequestStream>> streams;
  auto submit = [&](const std::string& id, std::int32_t prompt_len, std::int32_t max_tokens) {
    std::vector<TokenId> prompt(static_cast<std::size_t>(prompt_len));
    for (std::int32_t i = 0; i < prompt_len; ++i) prompt[i] = (i * 7 + static_cast<std::int32_t>(id.size())) % 30000;
    auto s = engine.submit({.request_id = id, .prompt_token_ids = prompt, .max_tokens = max_tokens});
    ASSERT_TRUE(s.ok()) << s.error_message();
    streams[id] = *s;
  };
  for (int c = 0; c < 4; ++c) submit("chat" + std::to_string(c), 512, 64);
  // The chats prefill and start decoding before the long prompt arrives.
  for (int step = 0; step < 8 && engine.has_work(); ++step) engine.step();
  submit("long", 32768, 4);
  for (int step = 0; step < 100000 && engine.has_work(); ++step) {
    engine.step();
    engine.check_invariants();
  }
  ASSERT_FALSE(engine.has_work());
  for (auto& [id, s] : streams) {
    std::size_t tokens = 0;
    bool finished = false;
    while (auto o = s->poll()) {
      tokens += o->tokens.size();
      finished = finished || o->finished();
      EXPECT_TRUE(!o->finished() || o->finish_reason == FinishReason::kLength) << id << ": " << o->error_message;
    }
    EXPECT_TRUE(finished) << id;
    EXPECT_EQ(tokens, id == "long" ? 4u : 64u) << id;
  }
  const EngineStats stats = engine.stats();
  EXPECT_GT(stats.num_decode_lane_steps, 0) << "the chats decoded on their lane during the long prompt's chunks";
  EXPECT_GT(stats.num_main_lane_decode_steps, 0) << "with nothing to prefill, the main lane decoded";
  EXPECT_EQ(stats.num_free_kv_blocks, stats.num_kv_blocks);
}

}  // namespace
}  // namespace sluice
