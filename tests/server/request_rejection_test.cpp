// Requests the engine would refuse, through the real server: each is a 400
// before anything runs, with OpenAI's envelope, the field at fault as `param`,
// and the engine's own sentence (check_request, engine/request_validation.h),
// written out here with the numbers this server's limits give. And the
// other side of the same rule: without max_tokens a request generates until
// the context is full.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../support/scripted_backend.h"
#include "loopback_server.h"

namespace sluice::server {
namespace {

using nlohmann::json;

constexpr std::int32_t kMaxModelLen = 256;

class RequestRejectionTest : public ::testing::Test {
 protected:
  void SetUp() override { serve(32); }  // 512 tokens of KV: room for a whole context

  // Blocks of 16 tokens; below 50 blocks the admission reserve is 0.
  void serve(std::int32_t num_kv_blocks) {
    server_.reset();
    model_ = loopback::make_tiny_chat_model("qwen3", "hermes").context;
    vocab_size_ = model_->tokenizer.vocab_size();
    EngineConfig config;
    config.max_model_len_tokens = kMaxModelLen;
    // A token that is neither EOS nor special: generation runs to its limit.
    model_->engine = std::make_unique<Engine>(
        std::make_unique<testing::ScriptedBackend>(std::vector<TokenId>{'a'}, vocab_size_, num_kv_blocks), nullptr,
        config);
    server_ = std::make_unique<loopback::LoopbackServer>(model_);
  }

  // A completion over `num_tokens` prompt ids, with `extra` fields.
  std::pair<int, json> complete(std::int32_t num_tokens, json extra = json::object()) {
    json body = {{"model", "m"}, {"prompt", json(std::vector<TokenId>(static_cast<std::size_t>(num_tokens), 'b'))}};
    body.update(extra);
    auto [status, text] = server_->post("/v1/completions", body);
    return {status, json::parse(text)};
  }

  static void expect_rejection(const std::pair<int, json>& response, const json& code, const std::string& param,
                               const std::string& message) {
    const auto& [status, body] = response;
    EXPECT_EQ(status, 400) << body.dump();
    ASSERT_TRUE(body.contains("error")) << body.dump();
    EXPECT_EQ(body["error"]["type"], "invalid_request_error");
    EXPECT_EQ(body["error"]["code"], code);
    EXPECT_EQ(body["error"]["param"], param);
    EXPECT_EQ(body["error"]["message"], message);
  }

  std::shared_ptr<ModelContext> model_;
  std::int32_t vocab_size_ = 0;
  std::unique_ptr<loopback::LoopbackServer> server_;
};

TEST_F(RequestRejectionTest, APromptThatFillsTheContext) {
  const auto response = complete(kMaxModelLen);
  expect_rejection(response, "context_length_exceeded", "prompt",
                   "This model's maximum context length is 256 tokens. However, your request has 256 input tokens. "
                   "Please reduce the length of the input messages.");
  EXPECT_EQ(response.second["error"]["n_prompt_tokens"], kMaxModelLen);
  EXPECT_EQ(response.second["error"]["n_ctx"], kMaxModelLen);
}

TEST_F(RequestRejectionTest, MaxTokensPastTheContextIsRefusedNotCut) {
  const auto response = complete(10, {{"max_tokens", kMaxModelLen - 9}});
  expect_rejection(response, "context_length_exceeded", "max_tokens",
                   "This model's maximum context length is 256 tokens. However, you requested 257 tokens (10 in the "
                   "messages, 247 in the completion). Please reduce the length of the messages or completion.");
  EXPECT_EQ(response.second["error"]["n_prompt_tokens"], 10);
  EXPECT_EQ(response.second["error"]["n_ctx"], kMaxModelLen);
  // One token less fits exactly.
  const auto fits = complete(10, {{"max_tokens", kMaxModelLen - 10}, {"ignore_eos", true}});
  ASSERT_EQ(fits.first, 200) << fits.second.dump();
  EXPECT_EQ(fits.second["usage"]["completion_tokens"], kMaxModelLen - 10);
}

TEST_F(RequestRejectionTest, APromptTheKvCacheCannotHold) {
  serve(12);  // 192 tokens of KV, less than the context
  expect_rejection(complete(192), "context_length_exceeded", "prompt",
                   "This server's KV cache holds at most 192 tokens of one request. However, your request has 192 "
                   "input tokens, and needs room for one generated token more. Please reduce the length of the "
                   "input messages.");
}

TEST_F(RequestRejectionTest, ATokenIdOutsideTheVocabulary) {
  json body = {{"model", "m"}, {"prompt", json::array({5, vocab_size_})}};
  auto [status, text] = server_->post("/v1/completions", body);
  expect_rejection({status, json::parse(text)}, nullptr, "prompt",
                   "token id " + std::to_string(vocab_size_) + " at position 1 is outside the vocabulary [0, " +
                       std::to_string(vocab_size_) + ")");
}

TEST_F(RequestRejectionTest, MinTokensPastTheRestOfTheContext) {
  expect_rejection(complete(10, {{"min_tokens", 247}}), nullptr, "min_tokens",
                   "min_tokens (247) must not exceed max_tokens (246: the rest of the context or KV cache)");
}

TEST_F(RequestRejectionTest, AChatPromptPastTheContextNamesTheMessages) {
  std::string content;
  for (int i = 0; i < 2 * kMaxModelLen; ++i) content += "word ";
  json body = {{"model", "m"}, {"messages", json::array({{{"role", "user"}, {"content", content}}})}};
  auto [status, text] = server_->post("/v1/chat/completions", body);
  const json error = json::parse(text);
  EXPECT_EQ(status, 400) << text;
  EXPECT_EQ(error["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(error["error"]["param"], "messages");
  EXPECT_GE(error["error"]["n_prompt_tokens"].get<std::int32_t>(), kMaxModelLen);
}

TEST_F(RequestRejectionTest, WithoutMaxTokensARequestRunsToTheEndOfTheContext) {
  const auto response = complete(10, {{"ignore_eos", true}});
  ASSERT_EQ(response.first, 200) << response.second.dump();
  EXPECT_EQ(response.second["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(response.second["usage"]["completion_tokens"], kMaxModelLen - 10);
}

}  // namespace
}  // namespace sluice::server
