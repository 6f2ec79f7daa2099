// check_request, the one check of a request (engine/request_validation.h):
// each rejection's code, field and whole message, the numbers written out
// here from the limits below, and the requests that pass, up to each bound.
#include "sluice/engine/request_validation.h"

#include <gtest/gtest.h>

#include "engine_test_support.h"
#include "kv_checking_backend.h"

namespace sluice {
namespace {

using namespace testing;  // engine_test_support.h, kv_checking_backend.h

// What an engine on 23 blocks of 4 tokens (no reserve), the KV-checking
// backend's vocabulary and a context of 100 tokens accepts.
constexpr EngineRequestLimits kLimits{.max_model_len_tokens = 100, .vocab_size = kVocab, .max_kv_tokens = 92};
const std::string kVocabulary = "[0, " + std::to_string(kVocab) + ")";

EngineRequest with_max_tokens(std::int32_t num_prompt_tokens, std::optional<std::int32_t> max_tokens) {
  EngineRequest r = request("r", tokens_from(num_prompt_tokens, 0), 1);
  for (TokenId& t : r.prompt_token_ids) t %= kLimits.vocab_size;
  r.max_tokens = max_tokens;
  return r;
}

TEST(RequestValidation, AcceptsRequestsUpToEachBound) {
  EXPECT_FALSE(check_request(with_max_tokens(10, 82), kLimits)) << "prompt + max_tokens == the KV cache's room";
  EXPECT_FALSE(check_request(with_max_tokens(91, 1), kLimits)) << "prompt + 1 == the KV cache's room";
  constexpr EngineRequestLimits kRoomyKv{.max_model_len_tokens = 100, .vocab_size = kVocab, .max_kv_tokens = 1000};
  EXPECT_FALSE(check_request(with_max_tokens(10, 90), kRoomyKv)) << "prompt + max_tokens == max_model_len";
  EngineRequest edge_ids = with_max_tokens(2, 1);
  edge_ids.prompt_token_ids = {0, kLimits.vocab_size - 1};
  EXPECT_FALSE(check_request(edge_ids, kLimits));
  EngineRequest min_equals_max = with_max_tokens(10, 5);
  min_equals_max.min_tokens = 5;
  EXPECT_FALSE(check_request(min_equals_max, kLimits));
}

// The rest of the context, or of the KV cache's room where that is smaller: a
// request that outgrew the cache would preempt itself and wait forever.
TEST(RequestValidation, AMissingMaxTokensIsTheRestOfTheContextOrTheKvCache) {
  const EngineRequest r = with_max_tokens(10, std::nullopt);
  EXPECT_FALSE(check_request(r, kLimits));
  EXPECT_EQ(resolved_max_tokens(r, kLimits), 82);
  constexpr EngineRequestLimits kRoomyKv{.max_model_len_tokens = 100, .vocab_size = kVocab, .max_kv_tokens = 1000};
  EXPECT_EQ(resolved_max_tokens(r, kRoomyKv), 90);
  EXPECT_EQ(resolved_max_tokens(with_max_tokens(10, 7), kLimits), 7);
}

struct RejectionCase {
  std::string name;
  EngineRequest request;
  ErrorCode code;
  RequestField field;
  std::string message;
};

std::vector<RejectionCase> rejection_cases() {
  std::vector<RejectionCase> cases;
  auto add = [&](std::string name, EngineRequest r, ErrorCode code, RequestField field, std::string message) {
    cases.push_back({std::move(name), std::move(r), code, field, std::move(message)});
  };
  EngineRequest no_id = with_max_tokens(3, 1);
  no_id.request_id.clear();
  add("empty request id", no_id, ErrorCode::kInvalidArgument, RequestField::kRequestId, "the request id is empty");
  add("empty prompt", with_max_tokens(0, 1), ErrorCode::kInvalidArgument, RequestField::kPrompt,
      "the prompt is empty");
  add("prompt fills the context", with_max_tokens(100, std::nullopt), ErrorCode::kOutOfRange, RequestField::kPrompt,
      "This model's maximum context length is 100 tokens. However, your request has 100 input tokens. Please "
      "reduce the length of the input messages.");
  add("prompt fills the context, explicit max_tokens", with_max_tokens(150, 1), ErrorCode::kOutOfRange,
      RequestField::kPrompt,
      "This model's maximum context length is 100 tokens. However, your request has 150 input tokens. Please "
      "reduce the length of the input messages.");
  add("prompt fills the KV cache", with_max_tokens(92, 1), ErrorCode::kOutOfRange, RequestField::kPrompt,
      "This server's KV cache holds at most 92 tokens of one request. However, your request has 92 input tokens, "
      "and needs room for one generated token more. Please reduce the length of the input messages.");
  EngineRequest above_vocab = with_max_tokens(4, 1);
  above_vocab.prompt_token_ids[2] = kVocab;
  add("token id = vocab size", above_vocab, ErrorCode::kInvalidArgument, RequestField::kPrompt,
      "token id " + std::to_string(kVocab) + " at position 2 is outside the vocabulary " + kVocabulary);
  EngineRequest negative_id = with_max_tokens(4, 1);
  negative_id.prompt_token_ids[0] = -1;
  add("negative token id", negative_id, ErrorCode::kInvalidArgument, RequestField::kPrompt,
      "token id -1 at position 0 is outside the vocabulary " + kVocabulary);
  add("zero max_tokens", with_max_tokens(4, 0), ErrorCode::kInvalidArgument, RequestField::kMaxTokens,
      "max_tokens must be at least 1, got 0");
  EngineRequest negative_min = with_max_tokens(4, 1);
  negative_min.min_tokens = -1;
  add("negative min_tokens", negative_min, ErrorCode::kInvalidArgument, RequestField::kMinTokens,
      "min_tokens must be at least 0, got -1");
  add("prompt + max_tokens over the context", with_max_tokens(10, 91), ErrorCode::kOutOfRange,
      RequestField::kMaxTokens,
      "This model's maximum context length is 100 tokens. However, you requested 101 tokens (10 in the messages, "
      "91 in the completion). Please reduce the length of the messages or completion.");
  add("prompt + max_tokens over the KV cache", with_max_tokens(10, 83), ErrorCode::kOutOfRange,
      RequestField::kMaxTokens,
      "This server's KV cache holds at most 92 tokens of one request. However, you requested 93 tokens (10 in the "
      "messages, 83 in the completion). Please reduce the length of the messages or completion.");
  EngineRequest min_over_max = with_max_tokens(10, 5);
  min_over_max.min_tokens = 6;
  add("min_tokens over max_tokens", min_over_max, ErrorCode::kInvalidArgument, RequestField::kMinTokens,
      "min_tokens (6) must not exceed max_tokens (5)");
  EngineRequest min_over_rest = with_max_tokens(10, std::nullopt);
  min_over_rest.min_tokens = 83;
  add("min_tokens over the rest of the KV cache", min_over_rest, ErrorCode::kInvalidArgument,
      RequestField::kMinTokens, "min_tokens (83) must not exceed max_tokens (82: the rest of the context or KV cache)");
  EngineRequest bias_past_vocab = with_max_tokens(4, 1);
  bias_past_vocab.sampling.logit_bias = {{3, 1.0f}, {kVocab, -5.0f}};
  add("logit_bias token id = vocab size", bias_past_vocab, ErrorCode::kInvalidArgument, RequestField::kLogitBias,
      "logit_bias names token id " + std::to_string(kVocab) + ", outside this model's vocabulary of " +
          std::to_string(kVocab));
  return cases;
}

TEST(RequestValidation, RejectsEachBadFieldWithItsCodeAndMessage) {
  for (const RejectionCase& c : rejection_cases()) {
    const std::optional<RequestRejection> rejection = check_request(c.request, kLimits);
    ASSERT_TRUE(rejection.has_value()) << c.name;
    EXPECT_EQ(rejection->error.code, c.code) << c.name;
    EXPECT_EQ(rejection->field, c.field) << c.name;
    EXPECT_EQ(rejection->error.message, c.message) << c.name;
  }
}

// Engine::submit gives check_request's answer, code and message, and its
// limits are the engine's.
TEST(RequestValidation, SubmitGivesTheSameAnswer) {
  EngineConfig config = small_config();
  config.max_model_len_tokens = kLimits.max_model_len_tokens;
  Engine engine(std::make_unique<KvCheckingBackend>(23, kBlock, 4096), nullptr, config);
  const EngineRequestLimits& limits = engine.request_limits();
  EXPECT_EQ(limits.max_model_len_tokens, kLimits.max_model_len_tokens);
  EXPECT_EQ(limits.vocab_size, kLimits.vocab_size);
  EXPECT_EQ(limits.max_kv_tokens, kLimits.max_kv_tokens);
  for (const RejectionCase& c : rejection_cases()) {
    auto submitted = engine.submit(c.request);
    ASSERT_FALSE(submitted.ok()) << c.name;
    EXPECT_EQ(submitted.error().code, c.code) << c.name;
    EXPECT_EQ(submitted.error().message, c.message) << c.name;
  }
  EXPECT_TRUE(engine.submit(with_max_tokens(10, 82)).ok());
}

}  // namespace
}  // namespace sluice
