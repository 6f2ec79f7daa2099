// Parsing request bodies: a 300k-token prompt (~1.2 MB of text), the part of
// time-to-first-token the server adds before tokenization, and an ordinary
// ~2 KB chat request. nlohmann's own parser against parse_request_json, on the
// same bodies.
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

// A chat turn as agents send them: a system prompt, a few messages, one tool, sampling fields.
const std::string& chat_body() {
  static const std::string body = R"({"model":"m","stream":true,"max_tokens":1024,"temperature":0.7,"top_p":0.95,
"stream_options":{"include_usage":true},"messages":[
{"role":"system","content":"You are a careful coding assistant. Answer with code when asked, explain briefly otherwise. Do not invent APIs; say when you are unsure."},
{"role":"user","content":"Write a function that returns the n-th Fibonacci number in O(log n) time."},
{"role":"assistant","content":"Use fast doubling: F(2k) = F(k) * (2F(k+1) - F(k)), F(2k+1) = F(k)^2 + F(k+1)^2.\n\n```python\ndef fib(n):\n    def go(k):\n        if k == 0:\n            return (0, 1)\n        a, b = go(k >> 1)\n        c = a * (2 * b - a)\n        d = a * a + b * b\n        return (d, c + d) if k & 1 else (c, d)\n    return go(n)[0]\n```"},
{"role":"user","content":"Now in C++ with 64-bit overflow checks, and tell me the largest n that fits."}],
"tools":[{"type":"function","function":{"name":"run_tests","description":"Runs the project's unit tests and returns failures.",
"parameters":{"type":"object","properties":{"filter":{"type":"string","description":"a test name pattern"},"timeout_s":{"type":"integer"}},"required":["filter"]}}}],
"tool_choice":"auto","seed":42})";
  return body;
}

void parse_with_nlohmann(benchmark::State& state, const std::string& body) {
  for (auto _ : state)
    benchmark::DoNotOptimize(nlohmann::ordered_json::parse(body.data(), body.data() + body.size(), nullptr, false));
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(body.size()));
}

void parse_with_request_json(benchmark::State& state, const std::string& body) {
  for (auto _ : state) benchmark::DoNotOptimize(parse_request_json(body));
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(body.size()));
}

void BM_NlohmannParse(benchmark::State& state) { parse_with_nlohmann(state, long_prompt_body()); }
void BM_RequestJsonParse(benchmark::State& state) { parse_with_request_json(state, long_prompt_body()); }
void BM_NlohmannParseChat(benchmark::State& state) { parse_with_nlohmann(state, chat_body()); }
void BM_RequestJsonParseChat(benchmark::State& state) { parse_with_request_json(state, chat_body()); }

BENCHMARK(BM_NlohmannParse)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RequestJsonParse)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_NlohmannParseChat)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_RequestJsonParseChat)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace sluice::server
