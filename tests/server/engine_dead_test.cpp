// A rank that fails under the real server: the request whose step it fails
// ends with a 500 naming the rank and its error; from then on the engine is
// dead: the next request is answered at once with a 503 (code engine_dead)
// naming the same failure, and /health turns from 200 to 503 with it, as
// vLLM's /health does on EngineDeadError. Nothing hangs (ctest's timeout
// would report it). The model is a tiny Llama split over 2 CPU ranks, rank
// 1's ops throwing on cue (tests/support/throwing_ops.h).
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "../support/throwing_ops.h"
#include "loopback_server.h"
#include "sluice/model/make_model.h"
#include "sluice/model/model_runner.h"

namespace sluice::server {
namespace {

using nlohmann::json;

std::string tiny_llama(std::int32_t vocab_size) {
  const std::string dir = std::string(SLUICE_BINARY_DIR) + "/test-scratch/engine-dead-model";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const Status made = make_model({.num_layers = 2, .hidden_size = 64, .num_heads = 4, .num_kv_heads = 2,
                                  .intermediate_size = 128, .vocab_size = vocab_size, .seed = 31,
                                  .max_position_embeddings = 256, .out_dir = dir});
  EXPECT_TRUE(made.ok()) << made.error_message();
  return dir;
}

TEST(EngineDead, ARankFailureFailsItsRequestThenTheServerRefusesWithTheReason) {
  auto model = loopback::make_tiny_chat_model("qwen3", "hermes").context;
  std::atomic<bool> armed{false};
  std::vector<std::unique_ptr<Ops>> ops;
  ops.push_back(make_cpu_ops({.num_threads = 1}));
  ops.push_back(std::make_unique<testing::ThrowingOps>(armed));
  auto backend = make_tensor_parallel_model_runner(tiny_llama(model->tokenizer.vocab_size()), std::move(ops),
                                                   {.block_size_tokens = 16, .num_kv_blocks = 16});
  ASSERT_TRUE(backend.ok()) << backend.error_message();
  model->engine = std::make_unique<Engine>(std::move(backend).value(), nullptr, EngineConfig{});
  loopback::LoopbackServer server(model);
  const json request = {{"model", "m"}, {"prompt", "hello"}, {"max_tokens", 4}, {"ignore_eos", true}};

  // Healthy: the sharded model answers.
  auto [ok_status, ok_body] = server.post("/v1/completions", request);
  ASSERT_EQ(ok_status, 200) << ok_body;
  EXPECT_EQ(json::parse(ok_body)["usage"]["completion_tokens"], 4);
  EXPECT_EQ(server.get("/health").first, 200);

  // Rank 1 throws in the next step: that request fails, naming the rank and its error.
  armed = true;
  auto [failed_status, failed_body] = server.post("/v1/completions", request);
  EXPECT_EQ(failed_status, 500) << failed_body;
  const std::string failure = "communicator group aborted by rank 1: injected matmul failure";
  EXPECT_NE(failed_body.find(failure), std::string::npos) << failed_body;

  // The engine is dead even with the rank healed: the next request is refused
  // before it runs, with the reason, and /health says so.
  armed = false;
  auto [refused_status, refused_text] = server.post("/v1/completions", request);
  EXPECT_EQ(refused_status, 503) << refused_text;
  const json refused = json::parse(refused_text);
  EXPECT_EQ(refused["error"]["code"], "engine_dead");
  EXPECT_NE(refused["error"]["message"].get<std::string>().find("the engine is dead: the tensor-parallel group is "
                                                                "down: " + failure),
            std::string::npos)
      << refused_text;
  auto [health_status, health_text] = server.get("/health");
  EXPECT_EQ(health_status, 503) << health_text;
  EXPECT_NE(health_text.find(failure), std::string::npos) << health_text;
  ASSERT_TRUE(model->engine->fatal_error().has_value());
  EXPECT_NE(model->engine->fatal_error()->find(failure), std::string::npos);
  EXPECT_EQ(model->engine->stats().num_running + model->engine->stats().num_waiting, 0);
}

}  // namespace
}  // namespace sluice::server
