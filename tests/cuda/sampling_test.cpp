// The device sampler (kernels/sampling_topk.cu, through CudaOps::sample)
// against the reference sampler (backend/cpu/sampler.cpp) on fresh random
// logits: every parameter alone and combined, flat, peaked and tied rows, four
// vocabularies, many seeds, greedy and non-greedy rows mixed in one call.
//
// The device sums weights in another order (and in fixed point), so a draw
// whose uniform lands within float rounding of a CDF boundary may pick the
// neighbour. The test re-derives the reference's decision points (the draw's
// cumulative sums, top-p's cut, min-p's threshold) and asserts equal tokens on
// every row whose decisions are all further than 1e-5 relative from one; it
// prints the agreement over all rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <string>
#include <unordered_map>
#include <vector>

#include "sluice/backend/cpu/sampler.h"
#include "test_util.h"

namespace sluice {
namespace {

using testing::DeviceArray;
using testing::make_test_ops;
using testing::round_bf16;

constexpr double kBoundaryMargin = 1e-5;
constexpr double kLogprobTolerance = 1e-4;

enum class Shape { flat, peaked, tied };
const char* shape_name(Shape s) { return s == Shape::flat ? "flat" : s == Shape::peaked ? "peaked" : "tied"; }

// bf16-representable logits, so the device sees the reference's values.
std::vector<float> make_logits(Shape shape, std::int64_t vocab, std::uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<float> out(static_cast<std::size_t>(vocab));
  for (float& v : out) {
    const double u = 2.0 * rng.uniform() - 1.0;
    switch (shape) {
      case Shape::flat: v = round_bf16(static_cast<float>(0.5 * u)); break;
      case Shape::peaked: v = round_bf16(static_cast<float>(3.0 * u)); break;
      case Shape::tied: v = static_cast<float>(std::round(4.0 * u)) * 0.5f; break;
    }
  }
  if (shape == Shape::peaked)  // a few clear favourites, as a language model has
    for (int i = 0; i < 6; ++i)
      out[rng.next() % out.size()] = round_bf16(static_cast<float>(9.0 + 4.0 * rng.uniform()));
  return out;
}

struct Case {
  std::string name;
  SamplingParams params;
  bool history = false;  // penalties need one
  bool mask = false;
  bool bias = false;  // a logit_bias over the row's favourite, history and other ids
};

std::vector<Case> cases() {
  const SamplingParams penalties{.temperature = 1.0f, .presence_penalty = 0.4f, .frequency_penalty = 0.3f,
                                 .repetition_penalty = 1.3f};
  SamplingParams combined = penalties;
  combined.temperature = 0.9f;
  combined.top_k = 50;
  combined.top_p = 0.9f;
  combined.min_p = 0.05f;
  combined.num_top_logprobs = 5;
  return {
      {.name = "temperature 1", .params = {.temperature = 1.0f}},
      {.name = "temperature 0.7", .params = {.temperature = 0.7f}},
      {.name = "temperature 1.5", .params = {.temperature = 1.5f}},
      {.name = "top_k 1", .params = {.temperature = 1.0f, .top_k = 1}},
      {.name = "top_k 40", .params = {.temperature = 0.8f, .top_k = 40}},
      {.name = "top_k 1000", .params = {.temperature = 1.0f, .top_k = 1000}},
      {.name = "top_p 0.5", .params = {.temperature = 1.0f, .top_p = 0.5f}},
      {.name = "top_p 0.9", .params = {.temperature = 0.8f, .top_p = 0.9f}},
      {.name = "top_p 0.99", .params = {.temperature = 1.2f, .top_p = 0.99f}},
      {.name = "min_p 0.05", .params = {.temperature = 1.0f, .min_p = 0.05f}},
      {.name = "min_p 0.3", .params = {.temperature = 0.7f, .min_p = 0.3f}},
      {.name = "penalties", .params = penalties, .history = true},
      {.name = "repetition 0.8", .params = {.temperature = 1.0f, .repetition_penalty = 0.8f}, .history = true},
      {.name = "mask", .params = {.temperature = 1.0f}, .mask = true},
      {.name = "top logprobs 20", .params = {.temperature = 1.0f, .num_top_logprobs = 20}},
      {.name = "greedy + penalties", .params = {.frequency_penalty = 2.0f, .repetition_penalty = 1.5f},
       .history = true},
      {.name = "greedy + mask", .params = {}, .mask = true},
      {.name = "greedy + top logprobs 5", .params = {.num_top_logprobs = 5}},
      {.name = "combined", .params = combined, .history = true, .mask = true},
      {.name = "logit bias", .params = {.temperature = 1.0f}, .bias = true},
      {.name = "greedy + logit bias", .params = {}, .bias = true},
      {.name = "logit bias + penalties", .params = penalties, .history = true, .bias = true},
      {.name = "combined + logit bias", .params = combined, .history = true, .mask = true, .bias = true},
      {.name = "combined wide", .params = {.temperature = 1.3f, .top_k = 5000, .top_p = 0.95f, .min_p = 0.01f}},
      {.name = "top_k + min_p + top_p ties",
       .params = {.temperature = 1.0f, .top_k = 300, .top_p = 0.7f, .min_p = 0.2f}},
      {.name = "plain greedy", .params = {}},
  };
}

// The reference's token and how far its decisions sit from a boundary:
// min over the draw's cumulative sums of |target - cumulative| / mass, top-p's
// |cumulative - target mass| / total at its cut, and min-p's |w - min_p| / min_p.
// A re-derivation of sample_logits' draw for the margin only; the token it
// returns is checked against sample_logits.
struct Decision {
  TokenId token = 0;
  double margin = std::numeric_limits<double>::infinity();
};

Decision reference_decision(std::span<const float> raw, const SampleRequest& request) {
  const SamplingParams& params = request.params;
  std::vector<float> logits(raw.begin(), raw.end());
  for (const auto& [t, bias] : params.logit_bias) logits[t] += bias;
  if (params.has_penalties()) {
    std::unordered_map<TokenId, int> counts;
    for (std::size_t i = static_cast<std::size_t>(request.num_prompt_tokens); i < request.tokens.size(); ++i)
      ++counts[request.tokens[i]];
    if (params.repetition_penalty != 1.0f) {
      std::vector<bool> seen(logits.size(), false);
      for (TokenId t : request.tokens)
        if (t >= 0 && static_cast<std::size_t>(t) < logits.size()) seen[t] = true;
      for (std::size_t t = 0; t < logits.size(); ++t)
        if (seen[t])
          logits[t] = logits[t] > 0 ? logits[t] / params.repetition_penalty : logits[t] * params.repetition_penalty;
    }
    for (const auto& [t, n] : counts)
      if (t >= 0 && static_cast<std::size_t>(t) < logits.size())
        logits[t] -= params.frequency_penalty * static_cast<float>(n) + params.presence_penalty;
  }
  for (std::size_t t = 0; t < logits.size(); ++t)
    if (!token_mask_allows(request.allowed_tokens, static_cast<TokenId>(t)))
      logits[t] = -std::numeric_limits<float>::infinity();
  Decision d;
  if (params.is_greedy()) {
    d.token = static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    return d;
  }
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  const float inverse = 1.0f / params.temperature;
  std::vector<float> w(logits.size());
  for (std::size_t t = 0; t < logits.size(); ++t) w[t] = std::exp((logits[t] - max_logit) * inverse);
  auto before = [&](TokenId a, TokenId b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::vector<TokenId> kept(logits.size());
  std::iota(kept.begin(), kept.end(), 0);
  if (params.top_k > 0 && static_cast<std::size_t>(params.top_k) < kept.size()) {
    std::nth_element(kept.begin(), kept.begin() + params.top_k, kept.end(), before);
    kept.resize(static_cast<std::size_t>(params.top_k));
    std::sort(kept.begin(), kept.end());
  }
  double total = 0.0;
  for (TokenId t : kept) total += w[t];
  if (params.min_p > 0.0f) {
    for (TokenId t : kept)
      d.margin = std::min(d.margin, std::abs(static_cast<double>(w[t]) - params.min_p) / params.min_p);
    std::erase_if(kept, [&](TokenId t) { return w[t] < params.min_p; });
  }
  if (params.top_p < 1.0f) {
    std::sort(kept.begin(), kept.end(), before);
    const double target_mass = static_cast<double>(params.top_p) * total;
    double cumulative = 0.0;
    std::size_t n = 0;
    while (n < kept.size() && cumulative < target_mass) {
      const double previous = cumulative;
      cumulative += w[kept[n++]];
      if (cumulative >= target_mass)
        d.margin = std::min({d.margin, (cumulative - target_mass) / total, (target_mass - previous) / total});
    }
    kept.resize(std::max<std::size_t>(n, 1));
  }
  double mass = 0.0;
  for (TokenId t : kept) mass += w[t];
  const double target = uniform_from(params.seed, static_cast<std::uint64_t>(request.generated_index)) * mass;
  double cumulative = 0.0;
  d.token = kept.back();
  bool chosen = false;
  for (TokenId t : kept) {
    cumulative += w[t];
    d.margin = std::min(d.margin, std::abs(target - cumulative) / mass);
    if (!chosen && target < cumulative) {
      d.token = t;
      chosen = true;
    }
  }
  return d;
}

struct Tally {
  int rows = 0, agree = 0, decisive = 0;
};

// One sample() call over every case for one vocabulary and shape; compares
// each row with the reference.
void check_call(Ops& ops, std::int64_t vocab, Shape shape, std::uint64_t seed, DType dtype, Tally& tally) {
  const std::vector<Case> all = cases();
  const auto rows = static_cast<std::int64_t>(all.size());
  std::vector<float> logits;
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto row = make_logits(shape, vocab, seed * 1000 + static_cast<std::uint64_t>(r));
    logits.insert(logits.end(), row.begin(), row.end());
  }
  // History: a prompt of random ids, then generated tokens that repeat a few
  // ids (the row's favourites among them) and one id out of range.
  SplitMix64 rng(seed ^ 0x5a5a);
  std::vector<std::vector<TokenId>> histories(static_cast<std::size_t>(rows));
  std::vector<std::vector<std::uint64_t>> masks(static_cast<std::size_t>(rows));
  const std::int32_t num_prompt = 64;
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = logits.data() + r * vocab;
    const auto top = static_cast<TokenId>(std::max_element(row, row + vocab) - row);
    auto& h = histories[static_cast<std::size_t>(r)];
    for (int i = 0; i < num_prompt; ++i) h.push_back(static_cast<TokenId>(rng.next() % vocab));
    for (int i = 0; i < 24; ++i)
      h.push_back(i % 3 == 0 ? top : static_cast<TokenId>((rng.next() % 8) * (vocab / 8)));
    h.push_back(static_cast<TokenId>(vocab + 5));
    // About a third of the vocabulary allowed; the favourite masked on odd rows.
    auto& m = masks[static_cast<std::size_t>(r)];
    m.assign(static_cast<std::size_t>((vocab + 63) / 64), 0);
    for (std::int64_t t = 0; t < vocab; ++t)
      if (rng.next() % 3 == 0) m[t / 64] |= 1ULL << (t % 64);
    if (r % 2 == 1) m[top / 64] &= ~(1ULL << (top % 64));
  }
  std::vector<SampleRequest> requests;
  for (std::int64_t r = 0; r < rows; ++r) {
    const Case& c = all[static_cast<std::size_t>(r)];
    SamplingParams params = c.params;
    params.seed = seed * 7919 + static_cast<std::uint64_t>(r);
    if (c.bias) {
      // The favourite pushed out (even rows) or up, a generated id, a prompt
      // id, the last id and one nothing else touches.
      const float* row = logits.data() + r * vocab;
      const auto top = static_cast<TokenId>(std::max_element(row, row + vocab) - row);
      const auto& h = histories[static_cast<std::size_t>(r)];
      std::map<TokenId, float> bias{{top, r % 2 == 0 ? -100.0f : 1.5f},
                                    {h[num_prompt + 1], 4.0f},
                                    {h[3], 2.0f},
                                    {static_cast<TokenId>(vocab - 1), 6.0f},
                                    {1, -3.0f}};
      params.logit_bias.assign(bias.begin(), bias.end());
    }
    requests.push_back({.params = params,
                        .tokens = c.history ? std::span<const TokenId>(histories[r]) : std::span<const TokenId>(),
                        .num_prompt_tokens = num_prompt,
                        .generated_index = static_cast<std::int32_t>(seed % 1000) + static_cast<std::int32_t>(r),
                        .allowed_tokens = c.mask ? std::span<const std::uint64_t>(masks[r])
                                                 : std::span<const std::uint64_t>()});
  }
  DeviceArray device_logits(logits, dtype, {rows, vocab});
  const auto results = ops.sample(device_logits.tensor(), requests);
  ASSERT_EQ(results.size(), requests.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    SCOPED_TRACE(::testing::Message() << "vocab " << vocab << " " << shape_name(shape) << " seed " << seed << " "
                                      << dtype_name(dtype) << " row " << r << " (" << all[r].name << ")");
    const std::span<const float> row(logits.data() + r * vocab, static_cast<std::size_t>(vocab));
    const SampleResult expect = sample_logits(row, requests[r]);
    const Decision decision = reference_decision(row, requests[r]);
    ASSERT_EQ(decision.token, expect.token) << "the test's re-derivation disagrees with the reference";
    const SampleResult& got = results[r];
    ++tally.rows;
    tally.agree += got.token == expect.token;
    if (decision.margin > kBoundaryMargin) {
      ++tally.decisive;
      EXPECT_EQ(got.token, expect.token) << "margin " << decision.margin;
    }
    if (got.token == expect.token) {
      EXPECT_NEAR(got.logprob, expect.logprob, kLogprobTolerance);
    }
    ASSERT_EQ(got.top_logprobs.size(), expect.top_logprobs.size());
    for (std::size_t j = 0; j < expect.top_logprobs.size(); ++j) {
      EXPECT_EQ(got.top_logprobs[j].token, expect.top_logprobs[j].token) << "top " << j;
      EXPECT_NEAR(got.top_logprobs[j].logprob, expect.top_logprobs[j].logprob, kLogprobTolerance) << "top " << j;
    }
  }
}

TEST(DeviceSampling, MatchesReferenceSampler) {
  auto ops = make_test_ops();
  Tally tally;
  for (std::int64_t vocab : {1000, 32000, 128256, 50257})
    for (Shape shape : {Shape::flat, Shape::peaked, Shape::tied})
      for (std::uint64_t seed : {1, 2, 3}) check_call(*ops, vocab, shape, seed, DType::bf16, tally);
  for (Shape shape : {Shape::peaked, Shape::tied}) check_call(*ops, 5003, shape, 9, DType::f32, tally);
  // Past 131072 ids a warp's range of the id-order walk spans two of the
  // block's 4096-id tiles (Qwen2's vocabulary, and 2^18).
  for (std::int64_t vocab : {151936, 262144})
    for (Shape shape : {Shape::flat, Shape::tied}) check_call(*ops, vocab, shape, 4, DType::bf16, tally);
  std::printf("device sampling: %d rows, %d agree (%.2f%%), %d decisive (margin > %g): all of those must agree\n",
              tally.rows, tally.agree, 100.0 * tally.agree / tally.rows, tally.decisive, kBoundaryMargin);
  // A flat row over a 128k vocabulary has every boundary within 1e-5 (one
  // token's share is 7.8e-6), so not every row is decisive; the device's sums
  // err by ~1e-7 relative (an expf ulp), so nearly all rows still agree.
  EXPECT_GE(tally.decisive, tally.rows / 2) << "too few rows away from a boundary to mean much";
  EXPECT_GE(tally.agree, tally.rows * 95 / 100);
}

// Many seeds on one row: the draw follows the uniform across the whole CDF,
// with and without top-p (logit-desc walk vs id walk).
TEST(DeviceSampling, FollowsTheUniformAcrossSeeds) {
  auto ops = make_test_ops();
  const std::int64_t vocab = 32000, rows = 64;
  const auto one = make_logits(Shape::peaked, vocab, 4242);
  std::vector<float> logits;
  for (std::int64_t r = 0; r < rows; ++r) logits.insert(logits.end(), one.begin(), one.end());
  DeviceArray device_logits(logits, DType::bf16, {rows, vocab});
  int disagree_decisive = 0, agree = 0;
  for (float top_p : {1.0f, 0.8f}) {
    std::vector<SampleRequest> requests;
    for (std::int64_t r = 0; r < rows; ++r)
      requests.push_back({.params = {.temperature = 2.0f, .top_p = top_p, .seed = static_cast<std::uint64_t>(r)},
                          .generated_index = 11});
    const auto results = ops->sample(device_logits.tensor(), requests);
    for (std::int64_t r = 0; r < rows; ++r) {
      const Decision decision = reference_decision(one, requests[r]);
      agree += results[r].token == decision.token;
      if (decision.margin > kBoundaryMargin && results[r].token != decision.token) ++disagree_decisive;
    }
  }
  std::printf("device sampling across seeds: %d of %d agree\n", agree, static_cast<int>(2 * rows));
  EXPECT_EQ(disagree_decisive, 0);
}

}  // namespace
}  // namespace sluice
