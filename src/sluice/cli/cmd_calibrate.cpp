// `sluice calibrate`: fits the cost model to a step trace measured on real
// hardware (`sluice serve --device cuda --step-trace FILE`). It prints, per
// term of the roofline model (sim/roofline_cost_model.h) on the hardware the
// trace ran against, the share of measured time the term predicts, the factor
// the fit gives it and the efficiency that factor implies, with the model's
// errors before and after; docs/cost-model.md says how the numbers are used.
#include <array>
#include <cstdio>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "sluice/cli/commands.h"
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
  if (steps.empty()) return Error{o.trace_path + ": no steps"};
  // The prior `serve --device cuda` plans with: one GPU, our kernels' efficiencies.
  const sim::HardwareSpec hardware = sim::h200_sluice_cuda();
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
