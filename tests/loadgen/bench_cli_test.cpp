// `sluice bench serve` end to end: a real `sluice serve` on a free loopback
// port with a tiny random model, a small random and a small burst workload,
// and the JSON report checked against what was asked for.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../support/run_command.h"
#include "sluice/common/io.h"

namespace sluice {
namespace {

using testing::run_sluice;

std::string scratch(const std::string& name) {
  const std::string dir = std::string(SLUICE_BINARY_DIR) + "/test-scratch/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// `sluice serve` as a child process; stopped with SIGTERM.
class ServerProcess {
 public:
  // Starts the server and waits (bounded) for its "listening on" line.
  void start(const std::string& args) {
    int out[2];
    ASSERT_EQ(pipe(out), 0);
    pid_ = fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      dup2(out[1], 1);
      close(out[0]);
      close(out[1]);
      const std::string command = std::string(SLUICE_BINARY_DIR) + "/sluice serve " + args;
      execl("/bin/sh", "sh", "-c", ("exec " + command).c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(out[1]);
    stdout_ = out[0];
    std::string seen;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    const std::regex listening("listening on http://127\\.0\\.0\\.1:(\\d+)");
    std::smatch match;
    while (!std::regex_search(seen, match, listening)) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "no 'listening on' line: " << seen;
      pollfd fd{.fd = stdout_, .events = POLLIN, .revents = 0};
      if (poll(&fd, 1, 1000) <= 0) continue;
      char buffer[4096];
      const ssize_t n = read(stdout_, buffer, sizeof buffer);
      ASSERT_GT(n, 0) << "the server exited: " << seen;
      seen.append(buffer, static_cast<std::size_t>(n));
    }
    port_ = std::stoi(match[1].str());
  }

  // SIGTERM, then its exit code (bounded wait).
  int stop() {
    if (pid_ <= 0) return -1;
    kill(pid_, SIGTERM);
    int status = 0;
    for (int i = 0; i < 300; ++i) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = 0;
        close(stdout_);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      usleep(20'000);
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
    pid_ = 0;
    return -1;
  }

  ~ServerProcess() { stop(); }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  pid_t pid_ = 0;
  int stdout_ = -1;
  int port_ = 0;
};

nlohmann::json read_report(const std::string& path) {
  auto text = read_file(path);
  EXPECT_TRUE(text.ok()) << text.error_message();
  return text.ok() ? nlohmann::json::parse(text.value()) : nlohmann::json();
}

class BenchCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(scratch("loadgen-cli"));
    auto made = run_sluice("make-model --arch llama --layers 2 --hidden 64 --heads 4 --kv-heads 2 "
                           "--intermediate 128 --vocab 512 --seed 4 --out " + *dir_ + "/model");
    ASSERT_EQ(made.exit_code, 0) << made.output;
  }
  static void TearDownTestSuite() { delete dir_; }

  void start_server(const std::string& extra = "") {
    server_.start("--model " + *dir_ + "/model --port 0 --served-model-name tiny --threads 1 --max-model-len 4096 "
                  "--kv-cache-memory 67108864 --stats-log-interval 0 --log-level warn --shutdown-timeout 1 " + extra);
  }

  // Runs `bench serve` against the server; bench flags common to every test first.
  testing::RunResult bench(const std::string& args) {
    return run_sluice("bench serve --base-url " + server_.base_url() + " --wait-for-server-s 60 --token-id-max 400 --seed 5 " + args);
  }

  static std::string* dir_;
  ServerProcess server_;
};
std::string* BenchCli::dir_ = nullptr;

TEST_F(BenchCli, RandomWorkloadCompletesEveryRequestWithItsLengths) {
  ASSERT_NO_FATAL_FAILURE(start_server());
  const std::string json = *dir_ + "/random.json";
  auto run = bench("--workload random --num-prompts 6 --input-len 24 --output-len 5 --max-concurrency 3 "
                   "--slo-ttft-ms 60000 --output-json " + json);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("TTFT (ms)"), std::string::npos) << run.output;
  const auto report = read_report(json);
  const auto& s = report["summary"];
  EXPECT_EQ(s["num_foreground"], 6);
  EXPECT_EQ(s["num_completed"], 6);
  EXPECT_EQ(s["num_failed"], 0);
  EXPECT_EQ(s["ttft_ms"]["count"], 6);
  EXPECT_EQ(s["num_good"], 6);
  EXPECT_EQ(s["num_prompt_tokens"], 6 * 24);
  EXPECT_EQ(s["num_output_tokens"], 6 * 5);
  EXPECT_EQ(report["config"]["model"], "tiny");  // from /v1/models
  for (const auto& r : report["requests"]) {
    EXPECT_EQ(r["status"], "completed") << r.dump();
    EXPECT_EQ(r["num_prompt_tokens"], 24);
    EXPECT_EQ(r["num_output_tokens"], 5);  // ignore_eos: exactly max_tokens
    EXPECT_LE(r["send_ms"].get<double>(), r["first_token_ms"].get<double>());
    EXPECT_LE(r["first_token_ms"].get<double>(), r["end_ms"].get<double>());
    EXPECT_GE(r["num_chunks"].get<int>(), 1);
  }
  EXPECT_EQ(server_.stop(), 0);
}

TEST_F(BenchCli, BurstWorkloadKeepsChatsGoingUntilTheLongPromptsFinish) {
  ASSERT_NO_FATAL_FAILURE(start_server());
  const std::string json = *dir_ + "/burst.json", svg = *dir_ + "/burst.svg";
  auto run = bench("--workload burst --num-prompts 3 --min-input-len 300 --max-input-len 900 --output-len 4 "
                   "--burst-start-s 0.1 --burst-window-s 0.2 --chats 2 --chat-input-len 16 --chat-output-len 400 "
                   "--output-json " + json + " --plot " + svg);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto report = read_report(json);
  const auto& s = report["summary"];
  EXPECT_EQ(s["num_completed"], 3);
  EXPECT_EQ(s["num_failed"], 0);
  EXPECT_GE(s["num_background_started"].get<int>(), 2);
  int num_sent = 0;
  for (const auto& r : report["requests"]) {
    if (r["role"] == "foreground") {
      EXPECT_EQ(r["status"], "completed") << r.dump();
      EXPECT_EQ(r["num_prompt_tokens"], r["num_planned_prompt_tokens"]);
      EXPECT_GE(r["num_prompt_tokens"].get<int>(), 300);
      EXPECT_LE(r["num_prompt_tokens"].get<int>(), 900);
      EXPECT_EQ(r["num_output_tokens"], 4);
    } else {
      // A chat finished its 400 tokens or was cancelled when the burst was done.
      EXPECT_TRUE(r["status"] == "completed" || r["status"] == "cancelled") << r.dump();
    }
    num_sent += r["status"] != "not_sent";
  }
  // Chats decoded while the long prompts ran.
  EXPECT_GT(s["decode_tokens_per_s_during_foreground"].get<double>(), 0);
  auto plot = read_file(svg);
  ASSERT_TRUE(plot.ok());
  const std::string& text = plot.value();
  std::size_t num_lines = 0;
  for (std::size_t at = text.find("<polyline"); at != std::string::npos; at = text.find("<polyline", at + 1)) ++num_lines;
  EXPECT_EQ(num_lines, static_cast<std::size_t>(num_sent));
  EXPECT_EQ(server_.stop(), 0);
}

TEST_F(BenchCli, SessionsReuseTheSharedPrefix) {
  ASSERT_NO_FATAL_FAILURE(start_server());
  const std::string json = *dir_ + "/sessions.json";
  auto run = bench("--workload sessions --sessions 2 --turns 2 --system-len 64 --input-len 16 --output-len 4 "
                   "--think-ms 10 --session-interval-ms 50 --output-json " + json);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto report = read_report(json);
  EXPECT_EQ(report["summary"]["num_completed"], 4);
  for (const auto& r : report["requests"]) {
    EXPECT_EQ(r["num_prompt_tokens"], r["num_planned_prompt_tokens"]);
    // A second turn sends its first turn's prompt again: at least that much is cached (16-token blocks).
    if (r["label"].get<std::string>().ends_with("turn 1")) {
      EXPECT_GE(r["num_cached_tokens"].get<int>(), 64) << r.dump();
      EXPECT_GE(r["send_ms"].get<double>(), 10.0);
    }
  }
  EXPECT_EQ(server_.stop(), 0);
}

TEST_F(BenchCli, BadFlagsAreRefusedBeforeAnythingIsSent) {
  // No server: each must fail on its flags, not on the connection.
  auto wrong_workload_flag = run_sluice("bench serve --workload random --chats 3");
  EXPECT_EQ(wrong_workload_flag.exit_code, 1);
  EXPECT_NE(wrong_workload_flag.output.find("--chats has no effect with --workload random"), std::string::npos)
      << wrong_workload_flag.output;
  auto https = run_sluice("bench serve --base-url https://example.com");
  EXPECT_EQ(https.exit_code, 1);
  EXPECT_NE(https.output.find("https is not supported"), std::string::npos) << https.output;
  auto ids_for_chat = run_sluice("bench serve --endpoint chat --prompt-format ids");
  EXPECT_EQ(ids_for_chat.exit_code, 1);
  auto missing_trace = run_sluice("bench serve --workload /nonexistent.jsonl");
  EXPECT_EQ(missing_trace.exit_code, 1);
  EXPECT_NE(missing_trace.output.find("/nonexistent.jsonl"), std::string::npos);
  auto no_server = run_sluice("bench serve --base-url http://127.0.0.1:1 --model m --num-prompts 1 --input-len 4");
  EXPECT_EQ(no_server.exit_code, 0) << no_server.output;  // the run happens; the request fails
  EXPECT_NE(no_server.output.find("1 requests failed"), std::string::npos) << no_server.output;
}

// The user report's shape on the simulated device (Llama-3-8B's cost on an
// H200, paced to 4x wall clock): under prefill-first the chats wait for whole
// long prefills; sluice's time-bounded steps keep them decoding.
TEST_F(BenchCli, SimBurstShowsPrefillFirstStallingTheChats) {
  const std::string model = *dir_ + "/sim-model";
  auto made = run_sluice("make-model --arch llama --layers 1 --hidden 64 --heads 4 --kv-heads 2 --intermediate 128 "
                         "--vocab 512 --max-position 65536 --seed 4 --out " + model);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  double stall_ms[2] = {0, 0};
  const char* policies[2] = {"prefill-first", "sluice"};
  for (int i = 0; i < 2; ++i) {
    ServerProcess server;
    ASSERT_NO_FATAL_FAILURE(server.start("--model " + model + " --port 0 --device sim --sim-profile llama-3-8b "
                                         "--sim-speed 4 --max-model-len 65536 --kv-cache-memory 20000000000 "
                                         "--stats-log-interval 0 --log-level warn --shutdown-timeout 1 "
                                         "--scheduling-policy " + std::string(policies[i])));
    const std::string json = *dir_ + "/sim-" + policies[i] + ".json";
    auto run = run_sluice("bench serve --base-url " + server.base_url() + " --wait-for-server-s 60 --token-id-max 400 --seed 5 "
                          "--workload burst --num-prompts 3 --min-input-len 20000 --max-input-len 40000 "
                          "--output-len 4 --burst-start-s 0.5 --burst-window-s 0.5 --chats 2 --chat-input-len 64 "
                          "--chat-output-len 4000 --server-speedup 4 --max-duration-s 120 --output-json " + json);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    const auto report = read_report(json);
    EXPECT_EQ(report["summary"]["num_completed"], 3) << policies[i] << "\n" << run.output;
    EXPECT_EQ(report["summary"]["num_failed"], 0);
    stall_ms[i] = report["summary"]["longest_decode_stall_ms"].get<double>();
    EXPECT_EQ(server.stop(), 0);
  }
  // ~90k prompt tokens of an 8B model take seconds of (simulated) H200 time;
  // prefill-first holds the chats for at least one whole prompt's prefill.
  EXPECT_GT(stall_ms[0], 1000.0) << "prefill-first " << stall_ms[0] << " ms, sluice " << stall_ms[1] << " ms";
  EXPECT_GT(stall_ms[0], 3 * stall_ms[1]) << "prefill-first " << stall_ms[0] << " ms, sluice " << stall_ms[1] << " ms";
}

// The host tier through `serve --device sim`: two sessions whose own 8k-token
// prefixes cannot both stay in a ~9.9k-token GPU KV; the first session's
// returning turn finds its prefix in the host tier (a load, not a recompute).
TEST_F(BenchCli, SimSessionsReturnToTheirPrefixThroughTheHostTier) {
  const std::string model = *dir_ + "/sim-tier-model";
  auto made = run_sluice("make-model --arch llama --layers 1 --hidden 64 --heads 4 --kv-heads 2 --intermediate 128 "
                         "--vocab 512 --max-position 16384 --seed 4 --out " + model);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  // Llama-3-8B: 128 KiB of KV per token, so 1.3 GB holds 620 blocks of 16 (9,920 tokens).
  ServerProcess server;
  ASSERT_NO_FATAL_FAILURE(server.start("--model " + model + " --port 0 --device sim --sim-profile llama-3-8b "
                                       "--sim-speed 4 --max-model-len 16384 --kv-cache-memory 1300000000 "
                                       "--kv-offloading-size 4 --stats-log-interval 0 --log-level warn "
                                       "--shutdown-timeout 1"));
  const std::string json = *dir_ + "/sim-sessions-tier.json";
  auto run = run_sluice("bench serve --base-url " + server.base_url() + " --wait-for-server-s 60 --token-id-max 400 "
                        "--seed 5 --workload sessions --sessions 2 --turns 2 --system-len 16 --session-prefix-len 8000 "
                        "--input-len 16 --output-len 4 --think-ms 3000 --session-interval-ms 100 --server-speedup 4 "
                        "--max-duration-s 120 --output-json " + json);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto report = read_report(json);
  EXPECT_EQ(report["summary"]["num_completed"], 4) << run.output;
  std::int64_t returning_cached = -1;
  for (const auto& r : report["requests"])
    if (r["label"] == "session 0 turn 1") returning_cached = r["num_cached_tokens"].get<std::int64_t>();
  // 8,016 prefix tokens (501 full blocks); without the tier the device keeps
  // at most the 119 blocks session 1 left it (1,904 tokens).
  EXPECT_GE(returning_cached, 8000) << run.output;
  EXPECT_EQ(server.stop(), 0);
}

TEST(BenchCompare, TwoReportsGiveErrorsPerMetric) {
  const std::string dir = scratch("loadgen-compare");
  auto write = [&](const std::string& name, double ttft_p50) {
    nlohmann::json summary;
    for (const char* key : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"})
      summary[key] = {{"p50", 10.0}, {"p90", 10.0}, {"p99", 10.0}, {"max", 10.0}};
    summary["ttft_ms"]["p50"] = ttft_p50;
    for (const char* key : {"longest_decode_stall_ms", "longest_global_stall_ms",
                            "decode_tokens_per_s_during_foreground", "output_tokens_per_s", "duration_ms"})
      summary[key] = 10.0;
    ASSERT_TRUE(write_file(dir + "/" + name, nlohmann::json{{"summary", summary}}.dump()).ok());
  };
  write("real.json", 400);
  write("sim.json", 300);
  auto compared = run_sluice("bench compare " + dir + "/real.json " + dir + "/sim.json --output-json " + dir + "/c.json");
  ASSERT_EQ(compared.exit_code, 0) << compared.output;
  EXPECT_NE(compared.output.find("-25.0%"), std::string::npos) << compared.output;
  EXPECT_DOUBLE_EQ(read_report(dir + "/c.json")["ttft_ms.p50"]["relative_error"].get<double>(), -0.25);
}

}  // namespace
}  // namespace sluice
