// Parsing a request body with a 300k-token prompt (~1.2 MB of text): the part
// of time-to-first-token the server adds before tokenization. nlohmann's own
// parser against parse_request_json, on the same body.
#include <benchmark/benchmark.h>

#include <string>

#include "sluice/server/request_json.h"

namespace sluice::server {
namespace {

const std::string& long_prompt_body() {
  static const std::string body = [] {
    std::string prompt;
    for (int i = 0; prompt.size() < 1200000; ++i) prompt += i % 11 == 0 ? "naïve café, \\\"quoted\\\" " : "the quick brown fox ";
    return "{\"model\":\"m\",\"prompt\":\"" + prompt + "\",\"max_tokens\":16,\"stream\":true}";
  }();
  return body;
}

void BM_NlohmannParse(benchmark::State& state) {
  const std::string& body = long_prompt_body();
  for (auto _ : state)
    benchmark::DoNotOptimize(nlohmann::ordered_json::parse(body.data(), body.data() + body.size(), nullptr, false));
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(body.size()));
}

void BM_RequestJsonParse(benchmark::State& state) {
  const std::string& body = long_prompt_body();
  for (auto _ : state) benchmark::DoNotOptimize(parse_request_json(body));
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(body.size()));
}

BENCHMARK(BM_NlohmannParse)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RequestJsonParse)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace sluice::server
