#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "sluice/engine/engine.h"

namespace sluice {
namespace {

TEST(RequestStream, CoalescesAndEndsWithTheFinalEvent) {
  RequestStream s("r");
  EXPECT_FALSE(s.poll().has_value());
  s.push({.tokens = {{.token = 1}}, .num_generated_tokens = 1});
  s.push({.tokens = {{.token = 2}}, .num_generated_tokens = 2});
  s.push({.finish_reason = FinishReason::kLength, .num_generated_tokens = 2});
  s.push({.tokens = {{.token = 3}}});  // ignored: nothing follows the end
  const auto out = s.poll();
  ASSERT_TRUE(out.has_value());
  ASSERT_EQ(out->tokens.size(), 2u);
  EXPECT_EQ(out->tokens[1].token, 2);
  EXPECT_EQ(out->finish_reason, FinishReason::kLength);
  EXPECT_TRUE(s.finished());
  EXPECT_FALSE(s.poll().has_value());
}

TEST(RequestStream, CallbackFiresOnPushAndImmediatelyIfPending) {
  RequestStream s("r");
  std::atomic<int> calls = 0;
  s.push({.tokens = {{.token = 1}}});
  s.set_on_ready([&] { ++calls; });
  EXPECT_EQ(calls.load(), 1);
  s.push({.tokens = {{.token = 2}}});
  EXPECT_EQ(calls.load(), 2);
}

TEST(RequestStream, WaitWakesOnPushFromAnotherThread) {
  RequestStream s("r");
  std::thread producer([&] { s.push({.finish_reason = FinishReason::kStop}); });
  std::optional<RequestOutput> out;
  while (!out) out = s.wait(std::chrono::milliseconds(1000));
  producer.join();
  EXPECT_EQ(out->finish_reason, FinishReason::kStop);
  EXPECT_FALSE(s.wait(std::chrono::milliseconds(1)).has_value());
}

}  // namespace
}  // namespace sluice
