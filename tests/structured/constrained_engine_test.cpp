// JSON mode through the engine: the mask reaches the backend, the sampled
// token is fed back to the constraint, and the request ends with an end token
// once the object closes. Also the CPU reference sampler under a mask.
#include <gtest/gtest.h>

#include <cmath>

#include "../support/json_prefix_oracle.h"
#include "../support/mask_following_backend.h"
#include "../support/scripted_backend.h"
#include "../tokenizer/test_support.h"
#include "sluice/backend/cpu/sampler.h"
#include "sluice/engine/engine.h"
#include "sluice/structured/json_constraint.h"

namespace sluice::structured {
namespace {

struct Finished {
  std::vector<TokenId> tokens;
  std::optional<FinishReason> reason;
  std::string error;
};

Finished run_json_request(Engine& engine, const Tokenizer& tokenizer, std::int32_t max_tokens) {
  const TokenId eos = *tokenizer.eos_token_id();
  EngineRequest request;
  request.request_id = "json";
  request.prompt_token_ids = tokenizer.encode("Reply in JSON.", false);
  request.max_tokens = max_tokens;
  request.eos_token_ids = {eos};
  request.constraint = std::make_shared<JsonConstraint>(make_json_vocabulary(tokenizer, tokenizer.vocab_size()),
                                                        std::vector<TokenId>{eos});
  auto stream = engine.submit(std::move(request));
  EXPECT_TRUE(stream.ok()) << stream.error_message();
  Finished out;
  for (int i = 0; i < 10 * max_tokens && engine.has_work(); ++i) {
    engine.step();
    while (auto event = (*stream)->poll()) {
      for (const GeneratedToken& t : event->tokens) out.tokens.push_back(t.token);
      if (event->finished()) {
        out.reason = event->finish_reason;
        out.error = event->error_message;
      }
    }
  }
  return out;
}

EngineConfig virtual_clock(bool async_scheduling = false) {
  EngineConfig config;
  config.clock = ClockMode::kVirtual;
  config.async_scheduling = async_scheduling;
  return config;
}

// Inline and with async scheduling, where the pipeline's worker fills each
// mask once it has fed the token before it to the constraint, and the step
// planned before the end token was seen is one more masked sample.
TEST(ConstrainedEngine, ClosesTheObjectThenEnds) {
  const Tokenizer& tokenizer = test::cached_tokenizer("llama3");
  std::vector<TokenId> preference;
  for (const char* piece : {"\"", ":", "}", "{"}) preference.push_back(*tokenizer.token_to_id(piece));
  for (const bool async_scheduling : {false, true}) {
    SCOPED_TRACE(async_scheduling ? "async" : "inline");
    auto backend = std::make_unique<testing::MaskFollowingBackend>(tokenizer.vocab_size(), preference);
    const testing::MaskFollowingBackend& seen = *backend;
    Engine engine(std::move(backend), nullptr, virtual_clock(async_scheduling));
    const Finished out = run_json_request(engine, tokenizer, 64);
    ASSERT_EQ(out.reason, FinishReason::kStop) << out.error;
    ASSERT_FALSE(out.tokens.empty());
    EXPECT_EQ(out.tokens.back(), *tokenizer.eos_token_id());
    std::vector<TokenId> text_ids(out.tokens.begin(), out.tokens.end() - 1);
    EXPECT_EQ(tokenizer.decode(text_ids, false), "{\"\":\"\"}");
    EXPECT_EQ(seen.num_masked_samples(), static_cast<std::int64_t>(out.tokens.size()) + (async_scheduling ? 1 : 0));
  }
}

// A random walk is the same inline and with async scheduling.
TEST(ConstrainedEngine, AsyncSchedulingGivesTheSameWalk) {
  const Tokenizer& tokenizer = test::cached_tokenizer("llama3");
  std::vector<Finished> runs;
  for (const bool async_scheduling : {false, true}) {
    Engine engine(std::make_unique<testing::MaskFollowingBackend>(tokenizer.vocab_size(), std::vector<TokenId>{}),
                  nullptr, virtual_clock(async_scheduling));
    runs.push_back(run_json_request(engine, tokenizer, 40));
    ASSERT_TRUE(runs.back().reason == FinishReason::kLength || runs.back().reason == FinishReason::kStop)
        << runs.back().error;
  }
  EXPECT_EQ(runs[0].tokens, runs[1].tokens);
  EXPECT_EQ(runs[0].reason, runs[1].reason);
}

// Masks are filled late, when the backend asks (Batch::fill_late_masks, after
// it has launched the forward). A backend that samples without asking (the
// scripted one) got zeroed masks: the request fails, in both modes, instead of
// going unconstrained.
TEST(ConstrainedEngine, ABackendThatSkipsTheLateMasksFailsTheRequest) {
  const Tokenizer& tokenizer = test::cached_tokenizer("llama3");
  for (const bool async_scheduling : {false, true}) {
    Engine engine(std::make_unique<testing::ScriptedBackend>(std::vector<TokenId>{0}, tokenizer.vocab_size()),
                  nullptr, virtual_clock(async_scheduling));
    const Finished out = run_json_request(engine, tokenizer, 8);
    EXPECT_EQ(out.reason, FinishReason::kError) << (async_scheduling ? "async" : "inline");
    EXPECT_NE(out.error.find("without filling the late masks"), std::string::npos) << out.error;
  }
}

// Random walks, most cut off at max_tokens: each text is a prefix of a JSON
// document, and a whole one when the walk stopped, by the JSON-prefix oracle
// (tests/support/json_prefix.py), not by the acceptor under test.
TEST(ConstrainedEngine, EveryRandomWalkStaysAValidJsonPrefix) {
  const Tokenizer& tokenizer = test::cached_tokenizer("llama3");
  Engine engine(std::make_unique<testing::MaskFollowingBackend>(tokenizer.vocab_size(), std::vector<TokenId>{}),
                nullptr, virtual_clock());
  std::vector<Finished> walks;
  std::vector<std::string> texts;
  for (int walk = 0; walk < 4; ++walk) {
    Finished out = run_json_request(engine, tokenizer, 48);
    ASSERT_TRUE(out.reason == FinishReason::kLength || out.reason == FinishReason::kStop) << out.error;
    std::vector<TokenId> text_ids = out.tokens;
    if (out.reason == FinishReason::kStop) text_ids.pop_back();
    std::string text;
    for (TokenId t : text_ids) text += *tokenizer.token_bytes(t);
    texts.push_back(std::move(text));
    walks.push_back(std::move(out));
  }
  const auto verdicts = testing::json_prefix_verdicts(texts);
  ASSERT_TRUE(verdicts.ok()) << verdicts.error_message();
  for (std::size_t i = 0; i < walks.size(); ++i) {
    EXPECT_TRUE(verdicts.value()[i].prefix) << texts[i];
    if (walks[i].reason == FinishReason::kStop) {
      EXPECT_TRUE(verdicts.value()[i].complete) << texts[i];
    }
  }
}

TEST(ConstrainedSampler, SamplesOnlyAllowedTokensAndRenormalizes) {
  std::vector<float> logits = {5.0f, 1.0f, 3.0f, 2.0f, 4.0f};
  std::vector<std::uint64_t> allowed = {(1u << 1) | (1u << 3)};
  SampleRequest greedy{.allowed_tokens = allowed};
  greedy.params.num_top_logprobs = 5;
  const SampleResult g = sample_logits(logits, greedy);
  EXPECT_EQ(g.token, 3);
  // The logprob is over the allowed set: log(e^2 / (e^1 + e^2)).
  EXPECT_NEAR(g.logprob, std::log(std::exp(2.0) / (std::exp(1.0) + std::exp(2.0))), 1e-5);
  ASSERT_EQ(g.top_logprobs.size(), 2u);  // disallowed tokens (-inf) are not listed
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    SampleRequest hot{.generated_index = static_cast<std::int32_t>(seed), .allowed_tokens = allowed};
    hot.params.temperature = 2.0f;
    hot.params.seed = seed;
    const TokenId t = sample_logits(logits, hot).token;
    EXPECT_TRUE(t == 1 || t == 3) << t;
  }
}

}  // namespace
}  // namespace sluice::structured
