// Encoding throughput of the tokenizer (bytes of input per second), on
// English prose (bench/tokenizer/english_paragraphs.txt repeated to 1 MiB) and
// on the two inputs that would expose quadratic behaviour: 1 MiB without any
// space (one huge pre-tokenizer piece) and 1 MiB of one character.
#include <benchmark/benchmark.h>

#include <string>

#include "../../tests/tokenizer/test_support.h"
#include "sluice/common/check.h"
#include "sluice/common/io.h"
#include "sluice/tokenizer/tokenizer.h"

namespace sluice {
namespace {

constexpr std::size_t kInputBytes = 1 << 20;

// The real tokenizer files shipped in node_modules, loaded once.
const Tokenizer& tokenizer(const std::string& name) { return test::cached_tokenizer(name); }

const std::string& english() {
  static const std::string text = [] {
    auto paragraphs = read_file(std::string(SLUICE_SOURCE_DIR) + "/bench/tokenizer/english_paragraphs.txt");
    SLUICE_CHECK_MSG(paragraphs.ok(), paragraphs.error_message());
    std::string out;
    while (out.size() < kInputBytes) out += *paragraphs;
    out.resize(kInputBytes);
    while (!out.empty() && (static_cast<unsigned char>(out.back()) & 0x80)) out.pop_back();  // whole characters
    return out;
  }();
  return text;
}

const std::string& no_spaces() {
  static const std::string text = [] {
    std::string out;
    std::uint64_t state = 0x5EED;
    for (std::size_t i = 0; i < kInputBytes; ++i) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      out.push_back(static_cast<char>('a' + (state >> 59) % 26));
    }
    return out;
  }();
  return text;
}

const std::string& one_char() {
  static const std::string text(kInputBytes, 'a');
  return text;
}

void run(benchmark::State& state, const std::string& name, const std::string& text) {
  const Tokenizer& t = tokenizer(name);
  std::size_t num_tokens = 0;
  for (auto _ : state) {
    auto ids = t.encode(text, false);
    num_tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(num_tokens);
}

void BM_EncodeEnglish(benchmark::State& state, const char* name) { run(state, name, english()); }
void BM_EncodeNoSpaces1MiB(benchmark::State& state, const char* name) { run(state, name, no_spaces()); }
void BM_EncodeOneChar1MiB(benchmark::State& state, const char* name) { run(state, name, one_char()); }

BENCHMARK_CAPTURE(BM_EncodeEnglish, llama3, "llama3")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeEnglish, deepseek_v3, "deepseek_v3")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeEnglish, qwen3, "qwen3")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeNoSpaces1MiB, llama3, "llama3")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeNoSpaces1MiB, deepseek_v3, "deepseek_v3")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeOneChar1MiB, llama3, "llama3")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeOneChar1MiB, deepseek_v3, "deepseek_v3")->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace sluice
