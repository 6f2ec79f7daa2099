#include "sluice/sim/cost_calibration.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace sluice::sim {
namespace {

constexpr std::size_t kTerms = CostTerms::kNumTerms;

// Row of the least-squares system: each term over the measured time.
std::array<double, kTerms> relative_terms(const CostModel& model, const TracedStep& step) {
  std::array<double, kTerms> row = model.predict_terms(step.shape).values();
  for (double& v : row) v /= step.measured_ms;
  return row;
}

// A pull of every factor toward 1 (the prior), weighted as this share of the
// evidence the steps hold about that factor (Levenberg-Marquardt's scaling):
// it biases a well-measured factor by ~0.1%, and terms the steps cannot tell
// apart (weight reads and fixed costs are both constant per decode step) then
// share the correction, each taking the same share of the time, instead of
// one taking all of it and the other none.
constexpr double kPriorWeight = 1e-3;

// Solves the (prior-regularised) normal equations restricted to the terms in
// `free` (a bit mask); false if singular.
bool solve_subset(const std::vector<std::array<double, kTerms>>& rows, unsigned free,
                  std::array<double, kTerms>& solution) {
  std::vector<std::size_t> index;
  for (std::size_t i = 0; i < kTerms; ++i)
    if (free & (1u << i)) index.push_back(i);
  const std::size_t n = index.size();
  std::vector<std::vector<double>> a(n, std::vector<double>(n + 1, 0.0));
  for (const auto& row : rows)
    for (std::size_t r = 0; r < n; ++r) {
      for (std::size_t c = 0; c < n; ++c) a[r][c] += row[index[r]] * row[index[c]];
      a[r][n] += row[index[r]];  // target 1
    }
  for (std::size_t r = 0; r < n; ++r) {
    const double prior_weight = kPriorWeight * a[r][r];
    a[r][r] += prior_weight;
    a[r][n] += prior_weight;  // toward 1
  }
  for (std::size_t col = 0; col < n; ++col) {  // Gaussian elimination, partial pivoting
    std::size_t pivot = col;
    for (std::size_t r = col + 1; r < n; ++r)
      if (std::abs(a[r][col]) > std::abs(a[pivot][col])) pivot = r;
    if (std::abs(a[pivot][col]) < 1e-12 * std::max(1.0, std::abs(a[col][col]))) return false;
    std::swap(a[pivot], a[col]);
    for (std::size_t r = 0; r < n; ++r) {
      if (r == col) continue;
      const double f = a[r][col] / a[col][col];
      for (std::size_t c = col; c <= n; ++c) a[r][c] -= f * a[col][c];
    }
  }
  solution.fill(0.0);
  for (std::size_t r = 0; r < n; ++r) solution[index[r]] = a[r][n] / a[r][r];
  return true;
}

double residual(const std::vector<std::array<double, kTerms>>& rows, const std::array<double, kTerms>& f) {
  double sum = 0;
  for (const auto& row : rows) {
    double p = 0;
    for (std::size_t i = 0; i < kTerms; ++i) p += f[i] * row[i];
    sum += (p - 1) * (p - 1);
  }
  return sum;
}

// Five terms: every subset of the identified ones is tried, and the best
// solution with no negative factor wins (exact NNLS for so few unknowns).
TermFactorFit::Factors nnls(const std::vector<std::array<double, kTerms>>& rows, unsigned identified) {
  TermFactorFit::Factors best{1, 1, 1, 1, 1};
  double best_residual = INFINITY;
  for (unsigned subset = 1; subset < (1u << kTerms); ++subset) {
    if ((subset & ~identified) != 0) continue;
    std::array<double, kTerms> f{};
    if (!solve_subset(rows, subset, f)) continue;
    if (std::any_of(f.begin(), f.end(), [](double v) { return v < 0; })) continue;
    if (const double r = residual(rows, f); r < best_residual) {
      best_residual = r;
      best = f;
    }
  }
  for (std::size_t i = 0; i < kTerms; ++i)
    if (!(identified & (1u << i))) best[i] = 1.0;
  return best;
}

}  // namespace

double quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  const auto k = static_cast<std::size_t>(q * static_cast<double>(values.size() - 1));
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(k), values.end());
  return values[k];
}

Result<std::vector<TracedStep>> read_step_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Error{fmt::format("{}: cannot open the step trace", path)};
  std::vector<TracedStep> steps;
  std::string line;
  for (std::int64_t number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    auto bad = [&](const char* why) { return Error{fmt::format("{}:{}: {}", path, number, why)}; };
    if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
    if (!j.contains("measured_ms") || !j["measured_ms"].is_number() || !j.contains("seqs") || !j["seqs"].is_array())
      return bad("needs measured_ms (a number) and seqs (an array)");
    if (j.contains("setup_ms") && !j["setup_ms"].is_number()) return bad("setup_ms, where given, is a number");
    TracedStep step{.start_ms = j.value("start_ms", 0.0),
                    .measured_ms = j["measured_ms"].get<double>(),
                    .predicted_ms = j.value("predicted_ms", 0.0),
                    .shape = {},
                    .lane = j.value("lane", std::string()),
                    .setup_ms = j.value("setup_ms", 0.0)};
    for (const auto& seq : j["seqs"]) {
      if (!seq.is_array() || seq.size() != 2 || !seq[0].is_number_integer() || !seq[1].is_number_integer())
        return bad("each of seqs is [new_tokens, computed_tokens]");
      step.shape.sequences.push_back({.num_new_tokens = seq[0].get<std::int32_t>(),
                                      .num_computed_tokens = seq[1].get<std::int32_t>()});
    }
    steps.push_back(std::move(step));
  }
  return steps;
}

RelativeErrorStats relative_errors(const CostModel& model, std::span<const TracedStep> steps,
                                   const TermFactorFit::Factors& factors) {
  std::vector<double> abs_errors;
  double signed_sum = 0;
  for (const TracedStep& step : steps) {
    if (step.measured_ms <= 0) continue;
    const double error = model.predict_terms(step.shape).scaled(factors).total_ms() / step.measured_ms - 1.0;
    abs_errors.push_back(std::abs(error));
    signed_sum += error;
  }
  RelativeErrorStats stats;
  stats.num_steps = static_cast<std::int64_t>(abs_errors.size());
  if (abs_errors.empty()) return stats;
  stats.median = quantile(abs_errors, 0.5);
  stats.p90 = quantile(abs_errors, 0.9);
  stats.mean_signed = signed_sum / static_cast<double>(abs_errors.size());
  return stats;
}

TermFactorFit fit_term_factors(const CostModel& model, std::span<const TracedStep> steps) {
  std::vector<TracedStep> usable;
  for (const TracedStep& s : steps)
    if (s.measured_ms > 0 && !s.shape.sequences.empty()) usable.push_back(s);
  TermFactorFit fit;
  fit.prior = relative_errors(model, usable, fit.factors);
  std::vector<std::array<double, kTerms>> rows;
  for (const TracedStep& s : usable) rows.push_back(relative_terms(model, s));
  // A term is identified when it carries a visible share of some step's time.
  unsigned identified = 0;
  for (const auto& row : rows)
    for (std::size_t i = 0; i < kTerms; ++i)
      if (row[i] > 0.02) identified |= 1u << i;
  for (std::size_t i = 0; i < kTerms; ++i) fit.identified[i] = (identified & (1u << i)) != 0;
  if (rows.empty()) return fit;
  TermFactorFit::Factors first = nnls(rows, identified);

  std::vector<double> abs_errors;
  for (const auto& row : rows) {
    double p = 0;
    for (std::size_t i = 0; i < kTerms; ++i) p += first[i] * row[i];
    abs_errors.push_back(std::abs(p - 1));
  }
  const double cut = std::max(0.5, 4.0 * quantile(abs_errors, 0.5));
  std::vector<std::array<double, kTerms>> kept_rows;
  std::vector<TracedStep> kept;
  for (std::size_t s = 0; s < rows.size(); ++s) {
    if (abs_errors[s] > cut) {
      ++fit.num_outliers;
      continue;
    }
    kept_rows.push_back(rows[s]);
    kept.push_back(usable[s]);
  }
  fit.factors = kept_rows.empty() ? first : nnls(kept_rows, identified);
  fit.fitted = relative_errors(model, kept, fit.factors);
  return fit;
}

HardwareSpec apply_term_factors(HardwareSpec hardware, const TermFactorFit::Factors& f) {
  Efficiency& e = hardware.efficiency;
  auto divide = [](double efficiency, double factor) { return factor > 0 ? efficiency / factor : efficiency; };
  e.gemm_compute = divide(e.gemm_compute, f[0]);
  e.moe_compute = divide(e.moe_compute, f[0]);
  e.weight_bandwidth = divide(e.weight_bandwidth, f[1]);
  e.attention_compute = divide(e.attention_compute, f[2]);
  hardware.attention_compute_long_chunks = divide(hardware.attention_compute_long_chunks, f[2]);
  e.kv_bandwidth = divide(e.kv_bandwidth, f[3]);
  hardware.overhead.per_step_ms *= f[4];
  hardware.overhead.per_sequence_ms *= f[4];
  return hardware;
}

}  // namespace sluice::sim
