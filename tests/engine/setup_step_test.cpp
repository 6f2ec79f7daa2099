// A step that did one-time setup on its path (a cuDNN plan built, a CUDA graph
// captured: StepOutput::setup_ms) is not timed as its shape costs. The online
// cost model must not learn from it: replayed over a DeepSeek-V3 trace with 15
// plan builds, it ended the run with a GEMM factor of 9.5 (S31-2).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <memory>
#include <vector>

#include "engine_test_support.h"
#include "kv_checking_backend.h"
#include "sluice/engine/engine.h"

namespace sluice {
namespace {

using namespace testing;  // engine_test_support.h, kv_checking_backend.h

// The GEMMs cost 0.01 ms a token on their FLOPs or 2 ms of weight reads,
// whichever is more (as the roofline prices them), plus 0.5 ms fixed a step:
// the truth, and the engine's prior. A chunk of fewer than 200 tokens is
// priced on weight reads alone, so it says nothing about the FLOP term.
class TermCost final : public CostModel {
 public:
  CostTerms predict_terms(const StepShape& shape) const override {
    const double flops_ms = 0.01 * static_cast<double>(shape.num_tokens());
    CostTerms t{.fixed_ms = 0.5};
    (flops_ms > 2.0 ? t.gemm_compute_ms : t.gemm_memory_ms) = std::max(flops_ms, 2.0);
    return t;
  }
  double predict_step_ms(const StepShape& shape) const override { return predict_terms(shape).total_ms(); }
};

// Times each step by TermCost; its first prefill step also builds a plan
// that takes 1 s, reported as setup or not.
class PlanBuildingBackend final : public Backend {
 public:
  explicit PlanBuildingBackend(bool reports_setup)
      : inner_(4096, kBlock, 4096), reports_setup_(reports_setup) {}
  const BackendInfo& info() const override { return inner_.info(); }
  Result<StepOutput> execute(const Batch& batch) override {
    Result<StepOutput> out = inner_.execute(batch);
    if (!out.ok()) return out;
    StepShape shape;
    bool prefill = false;
    for (const SequenceStep& s : batch.sequences) {
      shape.sequences.push_back({.num_new_tokens = s.num_new_tokens, .num_computed_tokens = s.num_computed_tokens});
      prefill = prefill || s.num_new_tokens > 1;
    }
    out->step_time_ms = TermCost{}.predict_step_ms(shape);
    if (prefill && !built_) {
      built_ = true;
      out->step_time_ms += kPlanBuildMs;
      if (reports_setup_) out->setup_ms = kPlanBuildMs;
    }
    return out;
  }

 private:
  static constexpr double kPlanBuildMs = 1000.0;
  KvCheckingBackend inner_;
  bool reports_setup_;
  bool built_ = false;
};

struct AfterTheBuild {
  std::array<double, CostTerms::kNumTerms> factors{};  // right after the step with the build
  double next_step_ms = 0.0;                            // the next chunk's step, as sized by them
};

// Four 1,000-token prompts under a 20 ms step target: chunks of 512 tokens
// (the token budget, 5.6 ms) when the GEMMs are priced right. The first
// chunk's step also builds the plan.
AfterTheBuild run_past_the_build(bool reports_setup) {
  EngineConfig config = small_config();
  config.max_num_batched_tokens = 512;
  config.max_step_ms = 20.0;
  config.online_cost_correction = true;
  Engine engine(std::make_unique<PlanBuildingBackend>(reports_setup), std::make_shared<TermCost>(), config);
  for (int i = 0; i < 4; ++i) {
    std::vector<TokenId> prompt(1000);
    for (std::size_t k = 0; k < prompt.size(); ++k) prompt[k] = static_cast<TokenId>((31 * k + 101 * i) % kVocab);
    auto s = engine.submit(request("r" + std::to_string(i), std::move(prompt), 8));
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
  AfterTheBuild out;
  engine.step();
  EXPECT_GT(engine.stats().last_step_ms, 1000.0);
  out.factors = engine.stats().cost_correction_factors;
  engine.step();
  out.next_step_ms = engine.stats().last_step_ms;
  return out;
}

TEST(SetupSteps, TheOnlineCostModelDoesNotLearnFromThem) {
  // The prior is the truth: with the build reported, nothing moves, and the
  // next chunk is the whole token budget again.
  const AfterTheBuild reported = run_past_the_build(/*reports_setup=*/true);
  for (double f : reported.factors) EXPECT_NEAR(f, 1.0, 1e-9);
  EXPECT_NEAR(reported.next_step_ms, 5.62, 1e-9);
  // The control: unreported, the build is learnt as the first chunk's time
  // (6.7x on its GEMMs), and the next chunk is cut to fit the target by it.
  const AfterTheBuild misled = run_past_the_build(/*reports_setup=*/false);
  EXPECT_GT(misled.factors[0], 3.0);
  EXPECT_LT(misled.next_step_ms, 4.0);
}

}  // namespace
}  // namespace sluice
