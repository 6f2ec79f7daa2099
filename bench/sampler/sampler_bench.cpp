// The reference sampler's cost for one row of a 128k vocabulary (Llama 3):
// every non-greedy row on every backend goes through it, on the engine
// thread, so at batch 64 it is paid 64 times a step. Logits are a Gaussian
// spread like a real model's (a few tokens carry most of the mass).
#include <benchmark/benchmark.h>

#include <random>

#include "sluice/backend/cpu/sampler.h"

namespace sluice {
namespace {

const std::vector<float>& logits() {
  static const std::vector<float> values = [] {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> v(128256);
    for (float& x : v) x = normal(rng);
    return v;
  }();
  return values;
}

void BM_Sample(benchmark::State& state, SamplingParams params) {
  std::int32_t index = 0;
  for (auto _ : state) {
    params.seed = 1;
    benchmark::DoNotOptimize(sample_logits(logits(), SampleRequest{.params = params, .generated_index = index++}));
  }
}

BENCHMARK_CAPTURE(BM_Sample, greedy, SamplingParams{})->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sample, temperature, SamplingParams{.temperature = 1.0f})->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sample, top_p_0_9, SamplingParams{.temperature = 0.7f, .top_p = 0.9f})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sample, top_k_50, SamplingParams{.temperature = 0.7f, .top_k = 50})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sample, min_p_0_1, SamplingParams{.temperature = 1.0f, .min_p = 0.1f})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sample, top_logprobs_5, SamplingParams{.num_top_logprobs = 5})->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace sluice
