// `sluice calibrate`: fits the cost model to a step trace measured on real
// hardware (`sluice serve --device cuda --step-trace FILE`). It prints, per
// term of the roofline model (sim/roofline_cost_model.h) on the hardware the
// trace ran against, the share of measured time the term predicts, the factor
// the fit gives it and the efficiency that factor implies, with the model's
// errors before and after; docs/cost-model.md says how the numbers are used.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "sluice/cli/commands.h"
#include "sluice/cli/cuda_hardware.h"
#include "sluice/sched/online_cost_model.h"
#include "sluice/sim/cost_calibration.h"
#include "sluice/sim/hardware.h"
#include "sluice/sim/model_profile.h"
#include "sluice/sim/roofline_cost_model.h"

namespace sluice::cli {
namespace {

struct CalibrateOptions {
  std::string trace_path;
  std::string model_dir;
  std::string profile_name;
};

void print_errors(const char* label, const sim::RelativeErrorStats& e) {
  std::printf("  %-26s median %5.1f%%, p90 %5.1f%%, mean signed %+6.1f%% over %lld steps\n", label, 100 * e.median,
              100 * e.p90, 100 * e.mean_signed, static_cast<long long>(e.num_steps));
}

// Steps with a prefill chunk, by the deepest cached prefix one of their
// chunks runs over: the median of measured / the prior's whole-step time. A
// shape-dependent error the per-term factors cannot absorb shows here (V3's
// MLA chunks over long prefixes: docs/cost-model.md).
void print_prefix_depth_ratios(const sim::RooflineCostModel& model, const std::vector<sim::TracedStep>& steps) {
  struct Bucket {
    const char* name;
    std::int64_t below;  // deepest prefix < this (the first bucket: no prefix at all)
    std::vector<double> ratios;
  };
  std::array<Bucket, 5> buckets = {Bucket{"none", 1, {}}, Bucket{"<8k", 8192, {}}, Bucket{"8-16k", 16384, {}},
                                   Bucket{"16-32k", 32768, {}}, Bucket{">=32k", INT64_MAX, {}}};
  for (const sim::TracedStep& s : steps) {
    std::int64_t deepest = -1;
    for (const auto& q : s.shape.sequences)
      if (q.num_new_tokens > 1) deepest = std::max<std::int64_t>(deepest, q.num_computed_tokens);
    const double prior = model.predict_step_ms(s.shape);
    if (deepest < 0 || !(prior > 0.0)) continue;
    for (Bucket& b : buckets)
      if (deepest < b.below) {
        b.ratios.push_back(s.measured_ms / prior);
        break;
      }
  }
  std::printf("  prefill steps by their deepest cached prefix, measured / prior (median, steps):");
  for (const Bucket& b : buckets)
    if (!b.ratios.empty()) std::printf(" %s %.2f (%zu)", b.name, sim::quantile(b.ratios, 0.5), b.ratios.size());
  std::printf("\n");
}

Status run_calibrate(const CalibrateOptions& o) {
  if (o.model_dir.empty() == o.profile_name.empty()) return Error{"give exactly one of --model DIR or --profile NAME"};
  sim::ModelProfile profile;
  if (!o.model_dir.empty()) {
    SLUICE_TRY_ASSIGN(from_dir, sim::profile_from_hf_dir(o.model_dir));
    profile = std::move(from_dir);
  } else {
    const auto builtin = sim::find_profile(o.profile_name);
    if (!builtin) return Error{"--profile " + o.profile_name + ": unknown (see sluice plan --list-profiles)"};
    profile = *builtin;
  }
  SLUICE_TRY_ASSIGN(steps, sim::read_step_trace(o.trace_path));
  // A decode lane's steps ran beside prefill chunks: their times are shared.
  const auto num_decode_lane = std::erase_if(steps, [](const sim::TracedStep& s) { return s.lane == "decode"; });
  if (num_decode_lane > 0)
    std::printf("sluice calibrate: %zu decode-lane steps left out (they shared the GPU with prefill chunks)\n",
                static_cast<std::size_t>(num_decode_lane));
  // As the engine's online correction does: their time is not their shape's.
  const auto num_setup = std::erase_if(steps, [](const sim::TracedStep& s) { return s.setup_ms > 0; });
  if (num_setup > 0)
    std::printf("sluice calibrate: %zu steps left out whose time is not their shape's (a plan built or a graph "
                "captured on their path, a batch split by a failing sequence)\n",
                static_cast<std::size_t>(num_setup));
  if (steps.empty()) return Error{o.trace_path + ": no steps"};
  // The prior `serve --device cuda` plans with: one GPU, our kernels' efficiencies, on this
  // machine's card where it has one (run it where the trace was made), else the H200's.
  const sim::HardwareSpec hardware = cuda_hardware_or_h200(profile);
  const sim::RooflineCostModel model(profile, hardware, sim::Parallelism{});
  const sim::TermFactorFit fit = sim::fit_term_factors(model, steps);

  std::array<double, CostTerms::kNumTerms> predicted_ms{};
  double measured_ms = 0;
  for (const sim::TracedStep& s : steps) {
    const auto terms = model.predict_terms(s.shape).values();
    for (std::size_t i = 0; i < terms.size(); ++i) predicted_ms[i] += terms[i];
    measured_ms += s.measured_ms;
  }
  const sim::HardwareSpec implied = sim::apply_term_factors(hardware, fit.factors);
  const sim::Efficiency& before = hardware.efficiency;
  const sim::Efficiency& after = implied.efficiency;
  const std::array<const char*, CostTerms::kNumTerms> names = {"gemm_compute", "gemm_memory", "attention_compute",
                                                                "attention_memory", "fixed"};
  const std::array<std::string, CostTerms::kNumTerms> knobs = {
      fmt::format("gemm_compute {:.3f} -> {:.3f}", before.gemm_compute, after.gemm_compute),
      fmt::format("weight_bandwidth {:.3f} -> {:.3f}", before.weight_bandwidth, after.weight_bandwidth),
      fmt::format("attention_compute {:.3f} -> {:.3f}", before.attention_compute, after.attention_compute),
      fmt::format("kv_bandwidth {:.3f} -> {:.3f}", before.kv_bandwidth, after.kv_bandwidth),
      fmt::format("per_step_ms {:.3f} -> {:.3f}", hardware.overhead.per_step_ms, implied.overhead.per_step_ms)};

  std::printf("sluice calibrate: %s on %s, %zu steps from %s (%.1f s of measured step time)\n", profile.name.c_str(),
              hardware.name.c_str(), steps.size(), o.trace_path.c_str(), measured_ms / 1e3);
  std::printf("  %-18s %14s %8s  %s\n", "term", "prior / meas.", "factor", "implied efficiency");
  for (std::size_t i = 0; i < names.size(); ++i)
    std::printf("  %-18s %13.1f%% %8s  %s\n", names[i], 100 * predicted_ms[i] / measured_ms,
                fit.identified[i] ? fmt::format("{:.3f}", fit.factors[i]).c_str() : "(unseen)",
                !fit.identified[i]       ? ""
                : fit.factors[i] > 0 ? knobs[i].c_str()
                                     : "(none: the fit gave this term's time to others it moves with)");
  print_errors("prior, all steps:", fit.prior);
  print_errors("fitted, steps kept:", fit.fitted);
  std::printf("  %lld steps left out of the fit as outliers (warm-up, graph capture)\n",
              static_cast<long long>(fit.num_outliers));
  print_prefix_depth_ratios(model, steps);

  // The engine's online correction replayed over the trace, step by step: what
  // it predicts for each step's decodes alone (the planner's step cap is
  // max(max_step_ms, decodes / (1 - prefill share))), against the decode-only
  // steps measured.
  OnlineCostModel online(std::make_shared<sim::RooflineCostModel>(profile, hardware, sim::Parallelism{}));
  std::vector<double> decode_only_ms, decodes_predicted_ratio, mixed_decodes_ms, mixed_error;
  auto max_factors = online.factors();
  for (const sim::TracedStep& s : steps) {
    StepShape decodes;
    for (const auto& q : s.shape.sequences)
      if (q.num_new_tokens == 1) decodes.sequences.push_back(q);
    if (decodes.sequences.size() == s.shape.sequences.size()) {
      decode_only_ms.push_back(s.measured_ms);
      decodes_predicted_ratio.push_back(online.predict_step_ms(decodes) / s.measured_ms);
    } else if (!decodes.sequences.empty()) {
      mixed_decodes_ms.push_back(online.predict_step_ms(decodes));
    }
    if (decodes.sequences.size() != s.shape.sequences.size())
      mixed_error.push_back(std::abs(online.predict_step_ms(s.shape) / s.measured_ms - 1.0));
    online.observe(s.shape, s.measured_ms);
    for (std::size_t i = 0; i < max_factors.size(); ++i) max_factors[i] = std::max(max_factors[i], online.factors()[i]);
  }
  std::printf("  online correction replayed: factors at the end");
  for (double f : online.factors()) std::printf(" %.2f", f);
  std::printf(", largest on the way");
  for (double f : max_factors) std::printf(" %.2f", f);
  std::printf("\n  decode-only steps: %zu, measured median %.1f ms; online prediction / measured: median %.2f, "
              "p90 %.2f, max %.2f\n",
              decode_only_ms.size(), sim::quantile(decode_only_ms, 0.5),
              sim::quantile(decodes_predicted_ratio, 0.5), sim::quantile(decodes_predicted_ratio, 0.9),
              sim::quantile(decodes_predicted_ratio, 1.0));
  std::printf("  mixed steps: their decodes alone predicted at median %.1f ms, p90 %.1f ms, max %.1f ms; the whole "
              "step's online error median %.1f%%, p90 %.1f%%\n",
              sim::quantile(mixed_decodes_ms, 0.5), sim::quantile(mixed_decodes_ms, 0.9),
              sim::quantile(mixed_decodes_ms, 1.0), 100 * sim::quantile(mixed_error, 0.5),
              100 * sim::quantile(mixed_error, 0.9));
  return Ok{};
}

}  // namespace

void add_calibrate_command(CLI::App& app) {
  auto options = std::make_shared<CalibrateOptions>();
  CLI::App* cmd = app.add_subcommand("calibrate", "fit the cost model's per-term factors to a measured step trace");
  cmd->add_option("--trace", options->trace_path, "JSONL from sluice serve --step-trace")->required();
  cmd->add_option("--model", options->model_dir, "Hugging Face model directory the trace ran (config.json)");
  cmd->add_option("--profile", options->profile_name, "or a built-in profile (sluice plan --list-profiles)");
  cmd->callback([options] {
    if (auto status = run_calibrate(*options); !status) {
      std::fprintf(stderr, "error: %s\n", status.error_message().c_str());
      throw CLI::RuntimeError(1);
    }
  });
}

}  // namespace sluice::cli
