// vLLM launch lines through `sluice serve`: the two commands of the user report
// in shared/context (model path replaced, `vllm serve` -> `sluice serve`,
// docker and environment parts dropped), copied verbatim below. Every flag must
// either be in effect (logged at start with its value) or refused with a reason
// that names it; an unknown flag names the nearest known one.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../support/run_command.h"
#include "test_models.h"

namespace sluice {
namespace {

using testing::RunResult;

// Shell words of a launch line, as the shell will split them (single quotes only).
std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out;
  std::string word;
  bool quoted = false, any = false;
  for (char c : line) {
    if (c == '\'') {
      quoted = !quoted;
      any = true;
    } else if (c == ' ' && !quoted) {
      if (any) out.push_back(word);
      word.clear();
      any = false;
    } else {
      word += c;
      any = true;
    }
  }
  if (any) out.push_back(word);
  return out;
}

std::string shell_line(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& w : argv) line += (line.empty() ? "'" : " '") + w + "'";
  return line;
}

std::vector<std::string> lines_with(const std::string& output, const std::string& level) {
  std::vector<std::string> out;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);)
    if (line.find("[" + level + "]") != std::string::npos) out.push_back(line);
  return out;
}

// The first "--flag" an error line names.
std::string flag_named(const std::string& line) {
  const std::size_t at = line.find("--");
  if (at == std::string::npos) return {};
  const std::size_t end = line.find_first_of(" =:;,'", at);
  return line.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

bool is_flag(const std::string& w) { return w.size() > 2 && w.starts_with("--"); }

// The launch line with `flag` and its values (the words up to the next flag) removed.
std::vector<std::string> without(const std::vector<std::string>& argv, const std::string& flag) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == flag || argv[i].starts_with(flag + "=")) {
      while (i + 1 < argv.size() && !is_flag(argv[i + 1]) && argv[i] == flag) ++i;
      continue;
    }
    out.push_back(argv[i]);
  }
  return out;
}

struct Verdicts {
  std::vector<std::string> refused;  // one error line each, naming the flag
  std::string started_output;        // the --check-only start of what was left
  int started_exit_code = -1;
};

// Starts the line; while it is refused, drops the flags the errors name, as an
// operator would, and starts again. Each round must name a flag of the line.
Verdicts start_dropping_refused(std::vector<std::string> argv) {
  Verdicts v;
  for (int round = 0; round < 32; ++round) {
    RunResult r = testing::run_sluice("serve --check-only --kv-cache-memory 1048576 " + shell_line(argv));
    if (r.exit_code == 0) {
      v.started_output = r.output;
      v.started_exit_code = 0;
      return v;
    }
    const auto errors = lines_with(r.output, "error");
    EXPECT_FALSE(errors.empty()) << r.output;
    std::size_t before = argv.size();
    for (const std::string& line : errors) {
      const std::string flag = flag_named(line);
      const bool on_line = std::any_of(argv.begin(), argv.end(),
                                       [&](const std::string& w) { return w == flag || w.starts_with(flag + "="); });
      EXPECT_TRUE(on_line) << "error names no flag of the line: " << line;
      v.refused.push_back(line);
      argv = without(argv, flag);
    }
    if (argv.size() == before) {
      ADD_FAILURE() << "a refusal removed nothing:\n" << r.output;
      return v;
    }
  }
  ADD_FAILURE() << "no start after 32 rounds";
  return v;
}

bool refused(const Verdicts& v, const std::string& flag) {
  return std::any_of(v.refused.begin(), v.refused.end(),
                     [&](const std::string& line) { return flag_named(line) == flag && line.size() > flag.size() + 40; });
}

bool logged(const Verdicts& v, const std::string& flag, const std::string& value) {
  const std::string own = "flag " + flag + " = " + value;
  const std::string noop = "vllm flag " + flag + (value.empty() ? "" : " " + value) + " accepted, no effect: ";
  return v.started_output.find(own) != std::string::npos || v.started_output.find(noop) != std::string::npos;
}

// Each flag of the original line (with its values joined by spaces) is either
// refused with a reason or logged with its value by the start that succeeded.
void expect_every_flag_accounted_for(const std::vector<std::string>& argv, const Verdicts& v) {
  ASSERT_EQ(v.started_exit_code, 0) << "the line never started";
  for (std::size_t i = 0; i < argv.size(); ++i) {
    if (!is_flag(argv[i])) continue;
    std::string flag = argv[i], value;
    if (const std::size_t eq = flag.find('='); eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag.resize(eq);
    }
    for (std::size_t j = i + 1; j < argv.size() && !is_flag(argv[j]); ++j) value += (value.empty() ? "" : " ") + argv[j];
    EXPECT_TRUE(refused(v, flag) || logged(v, flag, value))
        << flag << " " << value << " is neither refused nor logged with its value\n" << v.started_output;
  }
}

class VllmFlags : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_dir_ = new std::string(testing::scratch_dir("vllm-flags-model"));
    auto made = testing::run_sluice("make-model --arch llama --layers 1 --hidden 32 --heads 4 --kv-heads 2 "
                                    "--intermediate 64 --vocab 300 --seed 3 --out " + *model_dir_);
    ASSERT_EQ(made.exit_code, 0) << made.output;
  }
  static std::string* model_dir_;
};
std::string* VllmFlags::model_dir_ = nullptr;

// Reply 3 of the report: the vllm-openai:deepseekv41-flash-0909 launch line.
TEST_F(VllmFlags, ReportCommandOne) {
  const auto argv = words(
      *model_dir_ +
      " --tokenizer-mode deepseek_v41 --tensor-parallel-size 8 --tool-call-parser deepseek_v41"
      " --enable-auto-tool-choice --reasoning-parser deepseek_v41 --mm-encoder-tp-mode data --trust-remote-code"
      " --kv-cache-dtype fp8_ds_mla --enable-prefix-caching --enable-prompt-tokens-details --enable-expert-parallel"
      " --speculative-config '{\"method\":\"dspark\",\"num_speculative_tokens\":5,\"draft_sample_method\":"
      "\"probabilistic\",\"rejection_sample_method\":\"block\",\"enable_adaptive_verification\":true}'"
      " --gpu-memory-utilization 0.9518 --max-num-seqs 32 --seed=0"
      " --default-chat-template-kwargs '{\"thinking\": true, \"reasoning_effort\": \"high\"}'"
      " --compilation-config '{\"mode\":1,\"cudagraph_mode\":\"FULL_DECODE_ONLY\"}'");
  const Verdicts v = start_dropping_refused(argv);
  expect_every_flag_accounted_for(argv, v);
  for (const char* flag : {"--speculative-config", "--kv-cache-dtype", "--tensor-parallel-size",
                           "--enable-expert-parallel", "--compilation-config", "--mm-encoder-tp-mode",
                           "--tokenizer-mode"})
    EXPECT_TRUE(refused(v, flag)) << flag;
  // V4.1's DSML tool calls and <think> block are read (deepseek_v41); this tiny llama writes neither.
  EXPECT_TRUE(logged(v, "--tool-call-parser", "deepseek_v41")) << v.started_output;
  EXPECT_TRUE(logged(v, "--reasoning-parser", "deepseek_v41")) << v.started_output;
  EXPECT_TRUE(logged(v, "--seed", "0")) << v.started_output;
  EXPECT_TRUE(logged(v, "--trust-remote-code", "")) << v.started_output;
  EXPECT_TRUE(logged(v, "--enable-prompt-tokens-details", "")) << v.started_output;
  EXPECT_TRUE(logged(v, "--max-num-seqs", "32")) << v.started_output;
  EXPECT_TRUE(logged(v, "--enable-prefix-caching", "1") || logged(v, "--enable-prefix-caching", "true"))
      << v.started_output;
}

// The second launch line of the report (the docker run -itd one).
TEST_F(VllmFlags, ReportCommandTwo) {
  const auto argv = words(
      *model_dir_ +
      " --served-model-name deepseek-v4-flash DeepSeek-V4-Flash-0731 DeepSeek-V4-Flash DeepSeek-V4.1-Flash"
      " deepseek_v41 --port 8992 --trust-remote-code --tokenizer-mode deepseek_v41 --enable-expert-parallel"
      " --tensor-parallel-size 8 --gpu-memory-utilization 0.78 --max-model-len auto --tool-call-parser deepseek_v41"
      " --enable-auto-tool-choice --reasoning-parser deepseek_v41 --mm-encoder-tp-mode data --speculative-config"
      " '{\"method\":\"dspark\",\"num_speculative_tokens\":5,\"draft_sample_method\":\"probabilistic\","
      "\"rejection_sample_method\":\"block\",\"enable_adaptive_verification\":true}'");
  const Verdicts v = start_dropping_refused(argv);
  expect_every_flag_accounted_for(argv, v);
  EXPECT_TRUE(logged(v, "--served-model-name",
                     "deepseek-v4-flash DeepSeek-V4-Flash-0731 DeepSeek-V4-Flash DeepSeek-V4.1-Flash deepseek_v41"))
      << v.started_output;
  EXPECT_NE(v.started_output.find("serving deepseek-v4-flash not started"), std::string::npos) << v.started_output;
  EXPECT_TRUE(logged(v, "--port", "8992"));
  EXPECT_TRUE(logged(v, "--max-model-len", "auto"));
  EXPECT_TRUE(refused(v, "--speculative-config"));
  EXPECT_TRUE(refused(v, "--gpu-memory-utilization"));  // --device cpu sizes KV by --kv-cache-memory
}

// Common launch lines that must start as they are, each value in effect.
TEST_F(VllmFlags, CommonLinesStart) {
  for (const std::string& line :
       {std::string("--max-model-len 4k --disable-log-requests --disable-log-stats --enable-chunked-prefill"),
        std::string("--max-model-len 2K --served-model-name a b --kv-cache-dtype auto --dtype auto"),
        std::string("--load-format safetensors --tokenizer-mode auto --tool-call-parser hermes "
                    "--enable-auto-tool-choice --max-model-len=100"),
        // vLLM's DeepSeek-V4-Flash recipe.
        std::string("--tokenizer-mode deepseek_v4 --tool-call-parser deepseek_v4 --enable-auto-tool-choice "
                    "--reasoning-parser deepseek_v4")}) {
    const auto argv = words(*model_dir_ + " " + line);
    const RunResult r = testing::run_sluice("serve --check-only --kv-cache-memory 1048576 " + shell_line(argv));
    ASSERT_EQ(r.exit_code, 0) << line << "\n" << r.output;
    const Verdicts v{.refused = {}, .started_output = r.output, .started_exit_code = 0};
    expect_every_flag_accounted_for(argv, v);
  }
  // The values took effect: 4k = 4000 tokens, 2K = 2048, the stats line is off, hermes drives the format.
  auto four_k = testing::run_sluice("serve --check-only --kv-cache-memory 1048576 " + *model_dir_ + " --max-model-len 4k");
  EXPECT_NE(four_k.output.find("max_model_len 4000,"), std::string::npos) << four_k.output;
  auto two_k = testing::run_sluice("serve --check-only --kv-cache-memory 1048576 " + *model_dir_ + " --max-model-len 2K");
  EXPECT_NE(two_k.output.find("max_model_len 2048,"), std::string::npos) << two_k.output;
  auto dsml = testing::run_sluice("serve --check-only --kv-cache-memory 1048576 " + *model_dir_ +
                                  " --tool-call-parser deepseek_v4 --reasoning-parser deepseek_v4");
  EXPECT_NE(dsml.output.find("output format deepseek_v4"), std::string::npos) << dsml.output;
  auto hermes = testing::run_sluice("serve --check-only --kv-cache-memory 1048576 " + *model_dir_ + " --tool-call-parser hermes");
  EXPECT_NE(hermes.output.find("output format hermes"), std::string::npos) << hermes.output;
  auto quiet = testing::run_sluice("serve --check-only --kv-cache-memory 1048576 " + *model_dir_ + " --disable-log-stats");
  EXPECT_NE(quiet.output.find("stats log line off (--stats-log-interval 0)"), std::string::npos) << quiet.output;
}

// Typical vLLM launch lines (as vLLM's docs and operators write them), each with the flags that
// cannot take effect on --device cpu with this model: those are refused, each named with a
// reason, and everything else starts with its value logged.
TEST_F(VllmFlags, CommonLaunchLines) {
  const std::string dir = testing::scratch_dir("vllm-flags-common");
  const std::string template_file = dir + "/tool_chat_template.jinja";
  std::ofstream(template_file) << "{% for m in messages %}{{ m.content }}{% endfor %}";
  struct Line {
    std::string flags;
    std::vector<std::string> refused;
  };
  const Line lines[] = {
      {.flags = "--max-model-len 32k --dtype bfloat16 --served-model-name a b --disable-log-requests",
       .refused = {"--dtype"}},  // --device cpu computes in float32
      {.flags = "--enable-chunked-prefill --max-num-batched-tokens 8192 --max-num-seqs 64", .refused = {}},
      {.flags = "--gpu-memory-utilization 0.9 --enable-prefix-caching --seed 0",
       .refused = {"--gpu-memory-utilization"}},  // cpu sizes KV by --kv-cache-memory
      {.flags = "--tokenizer " + *model_dir_ + " --chat-template " + template_file + " --generation-config vllm",
       .refused = {}},
      // vLLM's tool-calling quickstart (Llama 3.1), and Qwen3.5's usual parsers.
      {.flags = "--enable-auto-tool-choice --tool-call-parser llama3_json --chat-template " + template_file,
       .refused = {}},
      {.flags = "--reasoning-parser qwen3 --tool-call-parser qwen3_coder --enable-auto-tool-choice --max-model-len auto",
       .refused = {}},
      {.flags = "--host 127.0.0.1 --port 8000 --api-key sk-local --disable-log-stats --trust-remote-code",
       .refused = {}},
      {.flags = "--no-enable-chunked-prefill --swap-space 4 --quantization fp8 --load-format safetensors "
                "--cpu-offload-gb 8",
       .refused = {"--no-enable-chunked-prefill", "--swap-space", "--quantization", "--cpu-offload-gb"}},
  };
  for (const Line& line : lines) {
    SCOPED_TRACE(line.flags);
    const auto argv = words(*model_dir_ + " " + line.flags);
    const Verdicts v = start_dropping_refused(argv);
    expect_every_flag_accounted_for(argv, v);
    std::vector<std::string> refused;
    for (const std::string& error : v.refused) refused.push_back(flag_named(error));
    std::sort(refused.begin(), refused.end());
    std::vector<std::string> expected = line.refused;
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(refused, expected) << v.started_output;
  }
}

// --tokenizer, --chat-template and --default-chat-template-kwargs: in effect when
// good, refused with the flag named when not.
TEST_F(VllmFlags, TokenizerAndChatTemplateFlags) {
  const std::string dir = testing::scratch_dir("vllm-flags-template");
  const std::string good = dir + "/good.jinja", bad = dir + "/bad.jinja";
  std::ofstream(good) << "{% for m in messages %}{{ m.content }}{% endfor %}";
  std::ofstream(bad) << "{% for m in messages %}";
  const std::string serve = "serve --check-only --kv-cache-memory 1048576 " + *model_dir_;
  auto r = testing::run_sluice(serve + " --tokenizer " + *model_dir_ + " --chat-template " + good +
                               " --default-chat-template-kwargs '{\"thinking\": true}'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tokenizer from " + *model_dir_ + ", chat template from " + good), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("flag --default-chat-template-kwargs = {\"thinking\": true}"), std::string::npos)
      << r.output;
  for (const std::string& refused :
       {" --chat-template " + bad, " --chat-template " + dir + "/missing.jinja", " --tokenizer " + dir,
        std::string(" --default-chat-template-kwargs '[1]'"),
        std::string(" --default-chat-template-kwargs '{\"messages\": []}'")}) {
    auto no = testing::run_sluice(serve + refused);
    EXPECT_NE(no.exit_code, 0) << refused << "\n" << no.output;
    const auto errors = lines_with(no.output, "error");
    ASSERT_FALSE(errors.empty()) << no.output;
    const std::string named = refused.substr(1, refused.find(' ', 1) - 1);
    const std::string value = refused.substr(refused.find(' ', 1) + 1);
    // The line names the flag, or the file it could not use.
    EXPECT_TRUE(errors.back().find(named) != std::string::npos || errors.back().find(value) != std::string::npos)
        << refused << ": " << errors.back();
  }
}

TEST_F(VllmFlags, UnknownFlagNamesTheNearest) {
  auto r = testing::run_sluice("serve --check-only --kv-cache-memory 1048576 " + *model_dir_ + " --max-num-seq 8");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("unknown flag --max-num-seq; nearest known flag: --max-num-seqs"), std::string::npos)
      << r.output;
  auto typo = testing::run_sluice("serve --check-only --kv-cache-memory 1048576 " + *model_dir_ + " --servd-model-name x");
  EXPECT_NE(typo.output.find("nearest known flag: --served-model-name"), std::string::npos) << typo.output;
  // A pasted en dash (U+2013) instead of "--", as the report's first post has it.
  auto dash = testing::run_sluice("serve --check-only --kv-cache-memory 1048576 " + *model_dir_ + " \xE2\x80\x93max-model-len 1024");
  EXPECT_NE(dash.exit_code, 0);
  EXPECT_NE(dash.output.find("typographic dash"), std::string::npos) << dash.output;
  EXPECT_NE(dash.output.find("write --max-model-len"), std::string::npos) << dash.output;
}

TEST_F(VllmFlags, BadMaxModelLenIsRefused) {
  for (const char* value : {"12q", "1.5", "-3", "k"}) {
    auto r = testing::run_sluice("serve --check-only --kv-cache-memory 1048576 " + *model_dir_ + " --max-model-len " + value);
    EXPECT_NE(r.exit_code, 0) << value;
    EXPECT_NE(r.output.find("--max-model-len"), std::string::npos) << r.output;
  }
}

// The error lines of a start, and whether the first names `flag` at its start.
bool refused_naming(const RunResult& r, const std::string& flag) {
  const auto errors = lines_with(r.output, "error");
  return r.exit_code != 0 && !errors.empty() && flag_named(errors.front()) == flag;
}

TEST_F(VllmFlags, SeedIsLogged) {
  auto r = testing::run_sluice("serve --check-only --kv-cache-memory 1048576 " + *model_dir_ + " --seed=7");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("flag --seed = 7"), std::string::npos) << r.output;
}

// --dtype: what the device computes in is accepted, the rest refused with the device's reason.
TEST_F(VllmFlags, DtypePerDevice) {
  const std::string serve = "serve --check-only --kv-cache-memory 1048576 " + *model_dir_;
  for (const char* ok : {"auto", "float32", "float"}) {
    auto r = testing::run_sluice(serve + " --dtype " + ok);
    EXPECT_EQ(r.exit_code, 0) << ok << "\n" << r.output;
    EXPECT_NE(r.output.find(std::string("flag --dtype = ") + ok), std::string::npos) << r.output;
  }
  for (const char* no : {"bfloat16", "float16", "half"}) {
    auto r = testing::run_sluice(serve + " --dtype " + no);
    EXPECT_TRUE(refused_naming(r, "--dtype")) << no << "\n" << r.output;
    EXPECT_NE(r.output.find("the CPU reference computes in float32"), std::string::npos) << r.output;
  }
  auto unknown = testing::run_sluice(serve + " --dtype fp8");
  EXPECT_TRUE(refused_naming(unknown, "--dtype")) << unknown.output;
  EXPECT_NE(unknown.output.find("auto, bfloat16, float16 (half), float32 (float)"), std::string::npos);
  auto sim = testing::run_sluice("serve --check-only --device sim --kv-cache-memory 1048576 " + *model_dir_ +
                                 " --dtype bfloat16");
  EXPECT_TRUE(refused_naming(sim, "--dtype")) << sim.output;
}

// -tp is vLLM's --tensor-parallel-size: on the CPU 1 and 2 hold (2 ranks as
// threads; the model has 4 heads, 2 KV heads), 8 is refused naming the flag
// and the KV heads it cannot split; the host KV tier is refused with TP.
TEST_F(VllmFlags, TpAlias) {
  const std::string serve = "serve --check-only --kv-cache-memory 1048576 " + *model_dir_;
  auto one = testing::run_sluice(serve + " -tp 1");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_NE(one.output.find("vllm flag -tp is --tensor-parallel-size"), std::string::npos) << one.output;
  EXPECT_NE(one.output.find("flag --tensor-parallel-size = 1"), std::string::npos) << one.output;
  auto two = testing::run_sluice(serve + " -tp 2");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_NE(two.output.find("flag --tensor-parallel-size = 2"), std::string::npos) << two.output;
  for (const char* eight : {" -tp 8", " -tp=8"}) {
    auto r = testing::run_sluice(serve + eight);
    EXPECT_TRUE(refused_naming(r, "--tensor-parallel-size")) << r.output;
    EXPECT_NE(r.output.find("--tensor-parallel-size 8 must divide the model's num_attention_heads (4)"),
              std::string::npos)
        << r.output;
  }
  auto tiered = testing::run_sluice(serve + " -tp 2 --kv-offloading-size 1");
  EXPECT_TRUE(refused_naming(tiered, "--kv-offloading-size")) << tiered.output;
}

// The report's --enable-expert-parallel with -tp on a DeepSeek-V3 checkpoint:
// held on the CPU (ranks as threads) and in the sim; refused without -tp > 1,
// with --device cuda, and on a dense model; --data-parallel-size stays refused.
TEST_F(VllmFlags, ExpertParallel) {
  const std::string dir = testing::make_deepseek_v3_model("qlora_yarn", "vllm-flags-deepseek-v3");
  const std::string serve = "serve --check-only --kv-cache-memory 1048576 " + dir;
  for (const char* device : {"cpu", "sim"}) {
    auto r = testing::run_sluice(serve + " --device " + device + " -tp 2 --enable-expert-parallel");
    ASSERT_EQ(r.exit_code, 0) << device << "\n" << r.output;
    EXPECT_NE(r.output.find("flag --enable-expert-parallel = true"), std::string::npos) << r.output;
  }
  auto alone = testing::run_sluice(serve + " --enable-expert-parallel");
  EXPECT_TRUE(refused_naming(alone, "--enable-expert-parallel")) << alone.output;
  EXPECT_NE(alone.output.find("needs --tensor-parallel-size > 1"), std::string::npos) << alone.output;
  auto four = testing::run_sluice(serve + " -tp 3 --enable-expert-parallel");
  EXPECT_TRUE(refused_naming(four, "--tensor-parallel-size")) << four.output;
  EXPECT_NE(four.output.find("must divide the model's num_attention_heads (4)"), std::string::npos) << four.output;
  auto cuda = testing::run_sluice(serve + " --device cuda --enable-expert-parallel");
  EXPECT_NE(cuda.exit_code, 0);
  EXPECT_NE(cuda.output.find("--enable-expert-parallel has no effect with --device cuda"), std::string::npos)
      << cuda.output;
  auto dense = testing::run_sluice("serve --check-only --kv-cache-memory 1048576 " + *model_dir_ +
                                   " -tp 2 --enable-expert-parallel");
  EXPECT_TRUE(refused_naming(dense, "--enable-expert-parallel")) << dense.output;
  EXPECT_NE(dense.output.find("is a dense model, it has no experts"), std::string::npos) << dense.output;
  auto dp = testing::run_sluice(serve + " -tp 2 --enable-expert-parallel --data-parallel-size 2");
  EXPECT_TRUE(refused_naming(dp, "--data-parallel-size")) << dp.output;
}

// vLLM's parser names: the two combine; names sluice lacks, or that vLLM has only as tool-call
// parsers, are refused with the ones to use.
TEST_F(VllmFlags, ParserNames) {
  const std::string serve = "serve --check-only --kv-cache-memory 1048576 " + *model_dir_;
  auto qwen = testing::run_sluice(serve + " --reasoning-parser qwen3 --tool-call-parser hermes --enable-auto-tool-choice");
  ASSERT_EQ(qwen.exit_code, 0) << qwen.output;
  EXPECT_NE(qwen.output.find("output format reasoning qwen3, tool calls hermes"), std::string::npos) << qwen.output;
  auto v31 = testing::run_sluice(serve + " --reasoning-parser deepseek_v3 --tool-call-parser deepseek_v31");
  ASSERT_EQ(v31.exit_code, 0) << v31.output;
  EXPECT_NE(v31.output.find("output format reasoning deepseek_v3, tool calls deepseek_v31"), std::string::npos);
  // Every name the issue lists is a tool-call parser; alone it brings its family's reasoning markers.
  for (const auto& [name, format] : {std::pair<std::string, std::string>{"hermes", "hermes"},
                                     {"llama3_json", "llama3_json"},
                                     {"qwen3", "qwen3"},
                                     {"qwen3_coder", "qwen3_coder"},
                                     {"deepseek_v3", "deepseek_v3"},
                                     {"deepseek_v31", "deepseek_v31"},
                                     {"deepseek_v4", "deepseek_v4"},
                                     {"deepseek_v41", "deepseek_v41"}}) {
    auto r = testing::run_sluice(serve + " --tool-call-parser " + name + " --enable-auto-tool-choice");
    ASSERT_EQ(r.exit_code, 0) << name << "\n" << r.output;
    EXPECT_NE(r.output.find("output format " + format + "\n"), std::string::npos) << r.output;
  }
  auto coder = testing::run_sluice(serve + " --reasoning-parser qwen3 --tool-call-parser qwen3_coder");
  EXPECT_NE(coder.output.find("output format reasoning qwen3, tool calls qwen3_coder"), std::string::npos)
      << coder.output;
  // As reasoning parsers: vLLM has qwen3, deepseek_r1 and deepseek_v3; the tool-call-only names are
  // refused with the reasoning parser to use.
  for (const char* name : {"qwen3", "deepseek_r1", "deepseek_v3", "deepseek_v4", "deepseek_v41"}) {
    auto r = testing::run_sluice(serve + " --reasoning-parser " + name);
    EXPECT_EQ(r.exit_code, 0) << name << "\n" << r.output;
  }
  for (const auto& [name, instead] : {std::pair<std::string, std::string>{"hermes", "--reasoning-parser qwen3"},
                                      {"qwen3_coder", "--reasoning-parser qwen3"},
                                      {"llama3_json", "pass none"},
                                      {"deepseek_v31", "--reasoning-parser deepseek_v3"}}) {
    auto r = testing::run_sluice(serve + " --reasoning-parser " + name);
    EXPECT_TRUE(refused_naming(r, "--reasoning-parser")) << r.output;
    EXPECT_NE(r.output.find("--reasoning-parser " + name + ": vLLM has no reasoning parser of that name"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find(instead), std::string::npos) << r.output;
  }
  auto unknown = testing::run_sluice(serve + " --reasoning-parser deepseek_v5");
  EXPECT_TRUE(refused_naming(unknown, "--reasoning-parser")) << unknown.output;
  EXPECT_NE(unknown.output.find("it has auto (by the model's model_type), none, qwen3"), std::string::npos);
  // Auto tool choice needs a format that parses tool calls: the tiny llama has none of its own.
  auto bare = testing::run_sluice(serve + " --enable-auto-tool-choice");
  EXPECT_TRUE(refused_naming(bare, "--enable-auto-tool-choice")) << bare.output;
}

// --generation-config: auto reads the model's file, DIR another one, vllm none.
TEST_F(VllmFlags, GenerationConfig) {
  const std::string serve = "serve --check-only --kv-cache-memory 1048576 " + *model_dir_;
  const std::string dir = testing::scratch_dir("vllm-flags-generation-config");
  std::ofstream(dir + "/generation_config.json")
      << R"({"temperature": 0.6, "top_p": 0.95, "top_k": 20, "max_new_tokens": 64, "do_sample": true})";
  auto from_dir = testing::run_sluice(serve + " --generation-config " + dir);
  ASSERT_EQ(from_dir.exit_code, 0) << from_dir.output;
  EXPECT_NE(from_dir.output.find("request defaults from --generation-config " + dir +
                                 ": temperature 0.6, top_p 0.95, top_k 20, max_tokens 64"),
            std::string::npos)
      << from_dir.output;
  // make-model's generation_config.json holds token ids only.
  auto automatic = testing::run_sluice(serve);
  EXPECT_NE(automatic.output.find("request defaults from --generation-config auto: none"), std::string::npos)
      << automatic.output;
  auto neutral = testing::run_sluice(serve + " --generation-config vllm");
  EXPECT_NE(neutral.output.find("request defaults from --generation-config vllm: none"), std::string::npos);
  const std::string bad = testing::scratch_dir("vllm-flags-generation-config-bad");
  std::ofstream(bad + "/generation_config.json") << R"({"temperature": 5})";
  auto out_of_range = testing::run_sluice(serve + " --generation-config " + bad);
  EXPECT_TRUE(refused_naming(out_of_range, "--generation-config")) << out_of_range.output;
  EXPECT_NE(out_of_range.output.find("'temperature' = 5 is out of range"), std::string::npos) << out_of_range.output;
  auto missing = testing::run_sluice(serve + " --generation-config " + dir + "/nowhere");
  EXPECT_TRUE(refused_naming(missing, "--generation-config")) << missing.output;
}

// The README's "Coming from vLLM" table is the table the refusals come from.
TEST_F(VllmFlags, ReadmeTableIsTheCliTable) {
  const RunResult r = testing::run_sluice("serve --vllm-flags");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(std::string(SLUICE_SOURCE_DIR) + "/README.md");
  std::stringstream readme;
  readme << in.rdbuf();
  EXPECT_NE(readme.str().find(r.output), std::string::npos)
      << "README.md's vLLM table is out of date; paste `sluice serve --vllm-flags`:\n" << r.output;
}

}  // namespace
}  // namespace sluice
