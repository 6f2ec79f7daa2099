// Offline calibration (sim/cost_calibration.h) against a truth we choose: a
// trace written by the engine's StepTraceWriter from a SkewedCostModel whose
// per-term factors are known must fit back to those factors, and the fitted
// model must predict the steps it was fitted on.
#include <gtest/gtest.h>

#include <cstdio>
#include <cmath>
#include <filesystem>
#include <functional>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "sluice/common/rng.h"
#include "sluice/engine/step_trace.h"
#include "sluice/sim/cost_calibration.h"
#include "sluice/sim/roofline_cost_model.h"
#include "sluice/sim/skewed_cost_model.h"

namespace sluice::sim {
namespace {

std::string scratch_file(const std::string& name) {
  const std::string dir = std::string(SLUICE_BINARY_DIR) + "/test-scratch/cost-calibration";
  std::filesystem::create_directories(dir);
  return dir + "/" + name;
}

std::shared_ptr<const RooflineCostModel> llama_8b() {
  return std::make_shared<const RooflineCostModel>(*find_profile("llama-3-8b"), h200_sluice_cuda(), Parallelism{});
}

// The burst's step mix: decode batches at short and long contexts, prefill
// chunks from zero and over long prefixes, and mixed steps of both.
std::vector<StepShape> burst_like_shapes(std::uint64_t seed, int count) {
  SplitMix64 rng(seed);
  std::vector<StepShape> shapes;
  for (int i = 0; i < count; ++i) {
    StepShape shape;
    const int decodes = static_cast<int>(rng.next() % 17);
    for (int d = 0; d < decodes; ++d)
      shape.sequences.push_back({.num_new_tokens = 1,
                                 .num_computed_tokens = static_cast<std::int32_t>(256 + rng.next() % 130000)});
    if (i % 3 != 0 || decodes == 0)
      shape.sequences.push_back({.num_new_tokens = static_cast<std::int32_t>(16 + rng.next() % 4096),
                                 .num_computed_tokens = static_cast<std::int32_t>(rng.next() % 120000)});
    shapes.push_back(std::move(shape));
  }
  return shapes;
}

// Writes `shapes` timed by `truth` (times `noise(i)`) through the engine's
// writer, and reads them back.
std::vector<TracedStep> trace_of(const CostModel& truth, const std::vector<StepShape>& shapes,
                                 const std::function<double(std::size_t)>& noise, const std::string& name) {
  const std::string path = scratch_file(name);
  {
    auto writer = StepTraceWriter::open(path);
    EXPECT_TRUE(writer.ok()) << writer.error_message();
    double now_ms = 0;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      const double measured = truth.predict_step_ms(shapes[i]) * noise(i);
      (*writer)->write(now_ms, measured, 0.0, shapes[i]);
      now_ms += measured;
    }
  }
  auto steps = read_step_trace(path);
  EXPECT_TRUE(steps.ok()) << steps.error_message();
  return std::move(steps).value();
}

TEST(CostCalibration, RecoversKnownTermFactorsThroughTheTraceFile) {
  const auto believed = llama_8b();
  const CostSkew skew{.term_factors = {1.3, 0.8, 2.5, 1.1, 3.0}};
  const SkewedCostModel truth(believed, skew);
  const auto shapes = burst_like_shapes(7, 600);
  // +-2% deterministic measurement noise.
  const auto steps = trace_of(truth, shapes, [](std::size_t i) { return 1.0 + 0.02 * std::sin(1.7 * i); },
                              "known.jsonl");
  ASSERT_EQ(steps.size(), shapes.size());
  EXPECT_EQ(steps[5].shape.sequences.size(), shapes[5].sequences.size());
  EXPECT_EQ(steps[5].shape.sequences.back().num_computed_tokens, shapes[5].sequences.back().num_computed_tokens);

  const TermFactorFit fit = fit_term_factors(*believed, steps);
  for (std::size_t i = 0; i < skew.term_factors.size(); ++i) {
    ASSERT_TRUE(fit.identified[i]) << "term " << i;
    // The fixed term (0.5 ms a step, x3) is ~1% of these steps' time, under 2%
    // noise: the trace pins it down less tightly than the four big terms.
    const double tolerance = i == 4 ? 0.2 : 0.05;
    EXPECT_NEAR(fit.factors[i], skew.term_factors[i], tolerance * skew.term_factors[i]) << "term " << i;
  }
  EXPECT_GT(fit.prior.median, 0.2);   // the skew is visible before the fit
  EXPECT_LT(fit.fitted.median, 0.02);  // and gone after it, down to the noise
  EXPECT_EQ(fit.num_outliers, 0);

  // The implied hardware, used as the model, predicts the truth.
  const RooflineCostModel refit(*find_profile("llama-3-8b"), apply_term_factors(h200_sluice_cuda(), fit.factors),
                                Parallelism{});
  const RelativeErrorStats after = relative_errors(refit, steps, {1, 1, 1, 1, 1});
  EXPECT_LT(after.median, 0.05);
}

TEST(CostCalibration, LeavesOutliersAndUnseenTerms) {
  const auto believed = llama_8b();
  const SkewedCostModel truth(believed, CostSkew::uniform(1.5));
  // Decode-only steps at short context: the attention terms barely show; the
  // first steps are 10x slow (graph capture).
  std::vector<StepShape> shapes;
  for (int i = 0; i < 200; ++i) {
    StepShape shape;
    shape.sequences.assign(static_cast<std::size_t>(1 + i % 32), {.num_new_tokens = 1, .num_computed_tokens = 100});
    shapes.push_back(shape);
  }
  const auto steps = trace_of(truth, shapes, [](std::size_t i) { return i < 5 ? 10.0 : 1.0; }, "outliers.jsonl");
  const TermFactorFit fit = fit_term_factors(*believed, steps);
  EXPECT_EQ(fit.num_outliers, 5);
  EXPECT_FALSE(fit.identified[0]);  // no prefill: GEMMs never compute-bound
  EXPECT_FALSE(fit.identified[2]);
  EXPECT_EQ(fit.factors[0], 1.0);
  EXPECT_EQ(fit.factors[2], 1.0);
  EXPECT_LT(fit.fitted.median, 0.01);
  EXPECT_GT(fit.prior.median, 0.3);
}

TEST(CostCalibration, EachStepKeepsTheLaneItRanOn) {
  const std::string path = scratch_file("lanes.jsonl");
  const StepShape decode{.sequences = {{.num_new_tokens = 1, .num_computed_tokens = 700}}};
  const StepShape chunk{.sequences = {{.num_new_tokens = 2048, .num_computed_tokens = 4096}}};
  {
    auto writer = StepTraceWriter::open(path);
    ASSERT_TRUE(writer.ok()) << writer.error_message();
    (*writer)->write(0.0, 5.0, 4.0, decode);
    (*writer)->write(5.0, 300.0, 250.0, chunk, "main");
    (*writer)->write(6.0, 12.0, 4.0, decode, "decode");
  }
  auto steps = read_step_trace(path);
  ASSERT_TRUE(steps.ok()) << steps.error_message();
  ASSERT_EQ(steps->size(), 3u);
  EXPECT_EQ((*steps)[0].lane, "");
  EXPECT_EQ((*steps)[1].lane, "main");
  EXPECT_EQ((*steps)[1].shape.sequences[0].num_new_tokens, 2048);
  EXPECT_EQ((*steps)[2].lane, "decode");
  EXPECT_EQ((*steps)[2].measured_ms, 12.0);
}

TEST(CostCalibration, AStepsSetupTimeIsKept) {
  const std::string path = scratch_file("setup.jsonl");
  const StepShape chunk{.sequences = {{.num_new_tokens = 1024, .num_computed_tokens = 0}}};
  {
    auto writer = StepTraceWriter::open(path);
    ASSERT_TRUE(writer.ok()) << writer.error_message();
    (*writer)->write(0.0, 1040.0, 30.0, chunk, nullptr, 1010.0);  // built a cuDNN plan
    (*writer)->write(1040.0, 31.0, 30.0, chunk);
  }
  auto steps = read_step_trace(path);
  ASSERT_TRUE(steps.ok()) << steps.error_message();
  ASSERT_EQ(steps->size(), 2u);
  EXPECT_EQ((*steps)[0].setup_ms, 1010.0);
  EXPECT_EQ((*steps)[1].setup_ms, 0.0);
}

TEST(CostCalibration, ABadTraceLineIsNamed) {
  const std::string path = scratch_file("bad.jsonl");
  std::ofstream(path) << R"({"measured_ms":1,"seqs":[[1,2]]})" << "\n" << R"({"measured_ms":1,"seqs":[[1]]})" << "\n";
  const auto steps = read_step_trace(path);
  ASSERT_FALSE(steps.ok());
  EXPECT_NE(steps.error_message().find("bad.jsonl:2"), std::string::npos) << steps.error_message();
  EXPECT_FALSE(read_step_trace(scratch_file("missing.jsonl")).ok());
  const std::string bad_setup = scratch_file("bad-setup.jsonl");
  std::ofstream(bad_setup) << R"({"measured_ms":1,"setup_ms":"slow","seqs":[[1,2]]})" << "\n";
  const auto setup = read_step_trace(bad_setup);
  ASSERT_FALSE(setup.ok());
  EXPECT_NE(setup.error_message().find("bad-setup.jsonl:1: setup_ms"), std::string::npos) << setup.error_message();
}

}  // namespace
}  // namespace sluice::sim
