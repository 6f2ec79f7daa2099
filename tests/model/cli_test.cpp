// The CLI end to end: make-model then generate (greedy and seeded), and bad
// input that must exit non-zero with a message, never crash.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "sluice/common/io.h"
#include "../support/run_command.h"
#include "test_models.h"

namespace sluice {
namespace {

using testing::RunResult;

RunResult run(const std::string& args) { return testing::run_sluice(args); }

// Three DeepSeek-V4 layers (CSA, HCA, sliding), 16-wide heads: the CPU reference's size.
RunResult make_tiny_deepseek_v4(const std::string& dir) {
  return run("make-model --arch deepseek_v4 --layers 3 --layer-types chs --hidden 32 --heads 2 --head-dim 16 "
             "--vocab 300 --experts 4 --seed 6 --out " + dir);
}

class Cli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_dir_ = new std::string(testing::scratch_dir("cli-model"));
    auto made = run("make-model --arch llama --layers 1 --hidden 32 --heads 4 --kv-heads 2 --intermediate 64 "
                    "--vocab 300 --seed 3 --out " + *model_dir_);
    ASSERT_EQ(made.exit_code, 0) << made.output;
  }
  static std::string* model_dir_;
};
std::string* Cli::model_dir_ = nullptr;

TEST_F(Cli, GenerateGreedyIsDeterministicAndChunkingInvariant) {
  auto a = run("generate --model " + *model_dir_ + " --prompt-ids 1,2,3,4,5,6,7 --max-tokens 8 --ignore-eos");
  auto b = run("generate --model " + *model_dir_ +
               " --prompt-ids 1,2,3,4,5,6,7 --max-tokens 8 --ignore-eos --prefill-chunk 3 --block-size 2");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(a.output, b.output);
  EXPECT_EQ(std::count(a.output.begin(), a.output.end(), ','), 7);
}

// --tensor-parallel-size 2 on the CPU prints the unsharded run's tokens,
// seeded sampling included; a size that does not split the heads is refused
// by name.
TEST_F(Cli, GenerateTensorParallelMatchesOneRank) {
  for (const char* sampling : {"", " --temperature 0.8 --seed 5"}) {
    const std::string args = "generate --model " + *model_dir_ + " --prompt-ids 1,2,3,4,5,6,7 --max-tokens 8 "
                             "--ignore-eos" + sampling;
    auto one = run(args);
    auto two = run(args + " --tensor-parallel-size 2");
    ASSERT_EQ(one.exit_code, 0) << one.output;
    ASSERT_EQ(two.exit_code, 0) << two.output;
    EXPECT_EQ(one.output, two.output) << sampling;
  }
  auto three = run("generate --model " + *model_dir_ + " --prompt-ids 1,2,3 --max-tokens 2 --tensor-parallel-size 3");
  EXPECT_NE(three.exit_code, 0);
  EXPECT_NE(three.output.find("--tensor-parallel-size 3 must divide the model's num_attention_heads (4)"),
            std::string::npos)
      << three.output;
}

// A DeepSeek-V3 checkpoint (FP8, sharded, with an MTP layer) through the
// same commands: text in via its tokenizer and chat template, text out.
TEST_F(Cli, DeepseekV3CheckpointGenerates) {
  const std::string dir = testing::scratch_dir("cli-deepseek");
  auto made = run("make-model --arch deepseek_v3 --layers 2 --dense-layers 1 --hidden 32 --heads 2 "
                  "--intermediate 64 --vocab 300 --experts 4 --expert-groups 2 --topk-groups 1 --dtype fp8 "
                  "--shards 2 --mtp-layers 1 --max-position 1024 --seed 4 --out " + dir);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  auto a = run("generate --model " + dir + " --prompt-ids 1,2,3,4,5 --max-tokens 6 --ignore-eos");
  auto b = run("generate --model " + dir + " --prompt-ids 1,2,3,4,5 --max-tokens 6 --ignore-eos --prefill-chunk 2 "
               "--block-size 3");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  // The tokens are the last line; the MTP layer's skip is logged before it.
  EXPECT_NE(a.output.find("multi-token-prediction"), std::string::npos) << a.output;
  const auto last_line = [](const std::string& out) {
    const std::size_t end = out.find_last_not_of('\n');
    return out.substr(out.rfind('\n', end) + 1, end - out.rfind('\n', end));
  };
  EXPECT_EQ(last_line(a.output), last_line(b.output));
  // Split over 2 ranks, each expert's width (TP) or whole experts (EP): the same tokens.
  for (const char* split : {" --tensor-parallel-size 2", " --tensor-parallel-size 2 --enable-expert-parallel"}) {
    auto sharded = run("generate --model " + dir + " --prompt-ids 1,2,3,4,5 --max-tokens 6 --ignore-eos" + split);
    ASSERT_EQ(sharded.exit_code, 0) << split << "\n" << sharded.output;
    EXPECT_EQ(last_line(sharded.output), last_line(a.output)) << split;
  }
  const std::string tokens = last_line(a.output);
  EXPECT_EQ(std::count(tokens.begin(), tokens.end(), ','), 5) << a.output;
  const std::string chat_path = dir + "/chat.json";
  {
    FILE* f = std::fopen(chat_path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(R"({"messages": [{"role": "user", "content": "Hi!"}]})", f);
    std::fclose(f);
  }
  auto chat = run("generate --model " + dir + " --chat " + chat_path + " --max-tokens 4 --ignore-eos");
  ASSERT_EQ(chat.exit_code, 0) << chat.output;
  EXPECT_FALSE(chat.output.empty());
}

// A DeepSeek-V4 checkpoint on the CPU: the same tokens whole and in chunks
// of 3 over blocks of 32 (two HCA windows), and a block size that splits a
// compression window refused with the sizes that work.
TEST_F(Cli, DeepseekV4CheckpointGeneratesOnCpu) {
  const std::string dir = testing::scratch_dir("cli-deepseek-v4");
  const RunResult made = make_tiny_deepseek_v4(dir);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const std::string prompt = " --prompt-ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20 --max-tokens 6 --ignore-eos";
  auto a = run("generate --model " + dir + prompt);
  auto b = run("generate --model " + dir + prompt + " --prefill-chunk 3 --block-size 32");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_EQ(a.output, b.output);
  EXPECT_EQ(std::count(a.output.begin(), a.output.end(), ','), 5) << a.output;
  auto split = run("generate --model " + dir + prompt + " --block-size 8");
  EXPECT_NE(split.exit_code, 0);
  EXPECT_NE(split.output.find("--block-size 8: deepseek_v4 needs a multiple of 16"), std::string::npos)
      << split.output;
}

// serve gives DeepSeek-V4 blocks of 1024 tokens unless --block-size says
// otherwise (deepseek_v4_default_block_size; docs/kv-v4.md), and refuses one
// that splits a compression window.
TEST_F(Cli, ServeGivesDeepseekV4ItsDefaultBlockSize) {
  const std::string dir = testing::scratch_dir("cli-deepseek-v4-serve");
  const RunResult made = make_tiny_deepseek_v4(dir);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  auto by_default = run("serve --model " + dir + " --port 0 --kv-cache-memory 67108864 --check-only");
  ASSERT_EQ(by_default.exit_code, 0) << by_default.output;
  EXPECT_NE(by_default.output.find("KV blocks of 1024 tokens ("), std::string::npos) << by_default.output;
  EXPECT_NE(by_default.output.find(" B a token, --kv-cache-dtype auto)"), std::string::npos) << by_default.output;
  auto asked = run("serve --model " + dir + " --port 0 --kv-cache-memory 67108864 --check-only --block-size 32");
  ASSERT_EQ(asked.exit_code, 0) << asked.output;
  EXPECT_NE(asked.output.find("KV blocks of 32 tokens"), std::string::npos) << asked.output;
  auto split = run("serve --model " + dir + " --port 0 --kv-cache-memory 67108864 --check-only --block-size 8");
  EXPECT_NE(split.exit_code, 0);
  EXPECT_NE(split.output.find("--block-size 8: deepseek_v4 needs a multiple of 16"), std::string::npos) << split.output;
}

// --kv-cache-dtype fp8 (or vLLM's fp8_e4m3 / fp8_ds_mla) is refused at start
// where no FP8 layout exists: a V4 model on the CPU (the reference keeps f32),
// a llama model on CUDA (checked with the flags, before any device is asked
// for); the simulator takes it for a profile with one; auto starts. Values vLLM has and sluice does not are refused by name.
TEST_F(Cli, ServeRefusesAnFp8KvCacheWhereNoFp8LayoutExists) {
  const std::string dir = testing::scratch_dir("cli-deepseek-v4-fp8-kv");
  const RunResult made = make_tiny_deepseek_v4(dir);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const std::string start = "serve --port 0 --check-only ";
  auto on_cpu = run(start + "--model " + dir + " --kv-cache-memory 67108864 --kv-cache-dtype fp8_ds_mla");
  EXPECT_NE(on_cpu.exit_code, 0);
  EXPECT_NE(on_cpu.output.find("--kv-cache-dtype fp8_ds_mla: --device cpu keeps the KV cache in the model's dtype"),
            std::string::npos)
      << on_cpu.output;
  auto llama_on_cuda = run(start + "--model " + *model_dir_ + " --device cuda --kv-cache-dtype fp8");
  EXPECT_NE(llama_on_cuda.exit_code, 0);
  EXPECT_NE(llama_on_cuda.output.find("--kv-cache-dtype fp8: on --device cuda only deepseek_v4 stores its KV cache in "
                                      "FP8 (fp8_ds_mla records); model_type llama keeps bf16"),
            std::string::npos)
      << llama_on_cuda.output;
  // The simulator takes it where the profile has an FP8 layout: V4's records are FP8 already.
  auto on_sim = run(start + "--model " + dir + " --device sim --kv-cache-dtype fp8_e4m3");
  EXPECT_EQ(on_sim.exit_code, 0) << on_sim.output;
  // Llama-3-8B's profile stores FP8 keys and values: twice the blocks in the same memory.
  auto blocks_of = [](const std::string& output) {
    const std::size_t at = output.find("sim: ");
    return at == std::string::npos ? 0L : std::stol(output.substr(at + 5));
  };
  auto llama_auto = run(start + "--model " + *model_dir_ + " --device sim --sim-profile llama-3-8b");
  auto llama_fp8 = run(start + "--model " + *model_dir_ + " --device sim --sim-profile llama-3-8b --kv-cache-dtype fp8");
  ASSERT_EQ(llama_fp8.exit_code, 0) << llama_fp8.output;
  ASSERT_GT(blocks_of(llama_auto.output), 0) << llama_auto.output;
  EXPECT_NEAR(static_cast<double>(blocks_of(llama_fp8.output)) / static_cast<double>(blocks_of(llama_auto.output)), 2.0,
              0.01);
  auto e5m2 = run(start + "--model " + dir + " --kv-cache-memory 67108864 --kv-cache-dtype fp8_e5m2");
  EXPECT_NE(e5m2.exit_code, 0);
  EXPECT_NE(e5m2.output.find("--kv-cache-dtype"), std::string::npos) << e5m2.output;
  EXPECT_NE(e5m2.output.find("fp8_e5m2"), std::string::npos) << e5m2.output;
  auto by_default = run(start + "--model " + dir + " --kv-cache-memory 67108864 --kv-cache-dtype auto");
  EXPECT_EQ(by_default.exit_code, 0) << by_default.output;
  // generate asks the model, which refuses it on the CPU (the reference keeps f32).
  auto generated = run("generate --model " + dir + " --prompt-ids 1,2,3 --max-tokens 1 --kv-cache-dtype fp8");
  EXPECT_NE(generated.exit_code, 0);
  EXPECT_NE(generated.output.find("--kv-cache-dtype fp8: deepseek_v4 on the CPU backend runs the reference"),
            std::string::npos)
      << generated.output;
}

// A DeepSeek-V4 checkpoint ships its chat encoder as Python, no template:
// serve renders its chats with sluice's encoding (api/deepseek_v4_chat.h) and
// reads its output as deepseek_v4 (<think>, DSML tool calls).
TEST_F(Cli, ServeEncodesDeepseekV4ChatsWithoutATemplate) {
  const std::string dir = testing::scratch_dir("cli-deepseek-v4-no-template");
  const RunResult made = make_tiny_deepseek_v4(dir);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  auto text = read_file(dir + "/tokenizer_config.json");
  ASSERT_TRUE(text.ok()) << text.error_message();
  nlohmann::json tokenizer_config = nlohmann::json::parse(*text);
  ASSERT_TRUE(tokenizer_config.contains("chat_template"));  // make-model writes one: take it away
  tokenizer_config.erase("chat_template");
  std::ofstream(dir + "/tokenizer_config.json") << tokenizer_config.dump();
  auto served = run("serve --model " + dir + " --port 0 --kv-cache-memory 67108864 --check-only");
  ASSERT_EQ(served.exit_code, 0) << served.output;
  EXPECT_NE(served.output.find("chat template from sluice's DeepSeek-V4 encoding"), std::string::npos)
      << served.output;
  EXPECT_NE(served.output.find("output format deepseek_v4"), std::string::npos) << served.output;
  // generate --chat renders with it too.
  const std::string chat = dir + "/chat.json";
  std::ofstream(chat) << R"({"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"thinking": true}})";
  auto generated = run("generate --model " + dir + " --chat " + chat + " --max-tokens 2 --ignore-eos --block-size 32");
  EXPECT_EQ(generated.exit_code, 0) << generated.output;
}

TEST_F(Cli, SeededSamplingIsReproducible) {
  const std::string args = "generate --model " + *model_dir_ +
                           " --prompt-ids 9,8,7 --max-tokens 12 --ignore-eos --temperature 1.0 --top-p 0.9 --seed ";
  auto a = run(args + "11"), b = run(args + "11"), c = run(args + "12");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(a.output, b.output);
  EXPECT_NE(a.output, c.output);
}

TEST_F(Cli, TextAndChatPromptsUseTheTokenizerAndTemplate) {
  auto text = run("generate --model " + *model_dir_ + " --prompt 'The quick brown fox' --max-tokens 6 --ignore-eos");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_FALSE(text.output.empty());
  const std::string chat_path = *model_dir_ + "/chat.json";
  {
    FILE* f = std::fopen(chat_path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}]})", f);
    std::fclose(f);
  }
  auto chat = run("generate --model " + *model_dir_ + " --chat " + chat_path + " --max-tokens 6 --ignore-eos");
  ASSERT_EQ(chat.exit_code, 0) << chat.output;
  auto both = run("generate --model " + *model_dir_ + " --prompt hi --prompt-ids 1");
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.output.find("exactly one"), std::string::npos) << both.output;
  auto missing = run("generate --model " + *model_dir_ + " --chat /nonexistent/chat.json");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("/nonexistent/chat.json"), std::string::npos) << missing.output;
}

TEST_F(Cli, BadInputExitsWithAMessage) {
  struct Case {
    std::string args;
    std::string needle;
  };
  for (const Case& c : {Case{"generate --model /nonexistent --prompt-ids 1", "/nonexistent/config.json"},
                        Case{"generate --model " + *model_dir_ + " --prompt-ids 1,x", "'x'"},
                        Case{"generate --model " + *model_dir_ + " --prompt-ids 100000", "outside the vocabulary"},
                        Case{"generate --model " + *model_dir_ + " --prompt-ids 1 --top-p 2", "top_p"},
                        Case{"generate --model " + *model_dir_ + " --prompt-ids 1 --max-tokens 100000",
                             "maximum model length"},
                        Case{"make-model --arch gpt2 --out /tmp/x", "gpt2"},
                        Case{"generate --model " + *model_dir_ + " --prompt-ids 1 --no-such-flag", "no-such-flag"}}) {
    auto result = run(c.args);
    EXPECT_NE(result.exit_code, 0) << c.args;
    EXPECT_LT(result.exit_code, 128) << "crashed: " << c.args;
    EXPECT_NE(result.output.find(c.needle), std::string::npos) << c.args << "\n" << result.output;
  }
}

}  // namespace
}  // namespace sluice
