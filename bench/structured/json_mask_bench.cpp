// JSON mode's cost per sampled token: one allowed-token mask over a real
// vocabulary (llama3: 128k ids, deepseek_v3: 129k), computed on the engine
// thread before the step. Measured at the states that bound it: outside any
// string (most tokens fail on their first byte) and inside a string (most
// tokens pass, the whole trie is walked). Also the one-time trie build.
#include <benchmark/benchmark.h>

#include <string>

#include "../../tests/tokenizer/test_support.h"
#include "sluice/common/check.h"
#include "sluice/common/token_mask.h"
#include "sluice/structured/json_constraint.h"

namespace sluice::structured {
namespace {

// The real tokenizer files shipped in node_modules, loaded once.
const Tokenizer& tokenizer(const std::string& name) { return test::cached_tokenizer(name); }

void BM_VocabularyBuild(benchmark::State& state, const char* name) {
  const Tokenizer& t = tokenizer(name);
  for (auto _ : state) benchmark::DoNotOptimize(make_json_vocabulary(t, t.vocab_size()));
}

void BM_Mask(benchmark::State& state, const char* name, const char* prefix) {
  const Tokenizer& t = tokenizer(name);
  const TokenId eos = *t.eos_token_id();
  JsonConstraint constraint(make_json_vocabulary(t, t.vocab_size()), {eos});
  for (TokenId id : t.encode(prefix, false)) SLUICE_CHECK(constraint.accept(id).ok());
  std::vector<std::uint64_t> bits(num_token_mask_words(t.vocab_size()));
  for (auto _ : state) {
    std::fill(bits.begin(), bits.end(), 0);
    constraint.fill_allowed(bits);
    benchmark::DoNotOptimize(bits.data());
  }
}

// The same under a json_schema: keys and enum values are walked against the
// declared names; free string values use the plain-string bitmask; a key that
// may be an additional property walks like a string.
constexpr const char* kSchema = R"({"type":"object","properties":{"name":{"type":"string"},
  "age":{"type":"integer"},"color":{"enum":["red","green","blue"]},"tags":{"type":"array","items":{"type":"string"}},
  "extra":{"type":"object","additionalProperties":{"type":"boolean"}}},"required":["name","age"],
  "additionalProperties":false})";

void BM_SchemaMask(benchmark::State& state, const char* name, const char* prefix) {
  const Tokenizer& t = tokenizer(name);
  const TokenId eos = *t.eos_token_id();
  auto schema = compile_json_schema(nlohmann::json::parse(kSchema));
  SLUICE_CHECK(schema.ok());
  JsonConstraint constraint(make_json_vocabulary(t, t.vocab_size()), {eos}, *schema);
  for (TokenId id : t.encode(prefix, false)) SLUICE_CHECK(constraint.accept(id).ok());
  std::vector<std::uint64_t> bits(num_token_mask_words(t.vocab_size()));
  for (auto _ : state) {
    std::fill(bits.begin(), bits.end(), 0);
    constraint.fill_allowed(bits);
    benchmark::DoNotOptimize(bits.data());
  }
}

BENCHMARK_CAPTURE(BM_VocabularyBuild, llama3, "llama3")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Mask, llama3_structure, "llama3", "{\"a\": 1, ")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Mask, llama3_in_string, "llama3", "{\"a\": \"some text")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Mask, llama3_in_number, "llama3", "{\"a\": 12")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Mask, deepseek_v3_in_string, "deepseek_v3", "{\"a\": \"some text")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_SchemaMask, llama3_key_start, "llama3", "{\"name\": \"x\", ")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_SchemaMask, llama3_in_key, "llama3", "{\"na")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_SchemaMask, llama3_in_string, "llama3", "{\"name\": \"some text")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_SchemaMask, llama3_in_enum, "llama3", "{\"color\": \"gr")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_SchemaMask, llama3_in_integer, "llama3", "{\"age\": 12")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_SchemaMask, llama3_additional_key, "llama3", "{\"extra\": {\"some")->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace sluice::structured
