#include "sluice/backend/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace sluice {
namespace {

// YaRN, step by step as transformers' _compute_yarn_parameters: f32 tensors,
// the correction range in double (Python floats).
std::vector<float> yarn_inverse_frequencies(const RopeParams& params) {
  const int dim = params.head_dim;
  const int half = dim / 2;
  const double base = params.theta;
  auto correction_dim = [&](double num_rotations) {
    return dim * std::log(params.yarn_original_max_position / (num_rotations * 2 * std::numbers::pi)) /
           (2 * std::log(base));
  };
  double low = correction_dim(params.yarn_beta_fast);
  double high = correction_dim(params.yarn_beta_slow);
  if (params.yarn_truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // as transformers: no zero-width ramp
  const auto low_f = static_cast<float>(low);
  const auto width_f = static_cast<float>(high - low);
  std::vector<float> inv_freq(static_cast<std::size_t>(half));
  for (int i = 0; i < half; ++i) {
    const float pos_freq = std::pow(static_cast<float>(base), static_cast<float>(2 * i) / static_cast<float>(dim));
    const float extrapolation = 1.0f / pos_freq;
    const float interpolation = 1.0f / (params.yarn_factor * pos_freq);
    const float ramp = std::clamp((static_cast<float>(i) - low_f) / width_f, 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    inv_freq[i] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  return inv_freq;
}

}  // namespace

std::vector<float> rope_inverse_frequencies(const RopeParams& params) {
  const int half = params.head_dim / 2;
  std::vector<float> inv_freq(static_cast<std::size_t>(half));
  for (int i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(params.head_dim);
    inv_freq[i] = 1.0f / std::pow(params.theta, exponent);
  }
  if (params.yarn_factor > 0.0f) return yarn_inverse_frequencies(params);
  if (params.llama3_factor <= 0.0f) return inv_freq;
  // Llama 3: long wavelengths are slowed by `factor`, short ones kept, the band
  // between interpolated smoothly.
  const float old_context = static_cast<float>(params.llama3_original_max_position);
  const float low_freq_wavelen = old_context / params.llama3_low_freq_factor;
  const float high_freq_wavelen = old_context / params.llama3_high_freq_factor;
  for (float& f : inv_freq) {
    const float wavelen = 2.0f * std::numbers::pi_v<float> / f;
    const float scaled = wavelen > low_freq_wavelen ? f / params.llama3_factor : f;
    if (wavelen < high_freq_wavelen || wavelen > low_freq_wavelen) {
      f = scaled;
      continue;
    }
    const float smooth = (old_context / wavelen - params.llama3_low_freq_factor) /
                         (params.llama3_high_freq_factor - params.llama3_low_freq_factor);
    f = (1.0f - smooth) * scaled / params.llama3_factor + smooth * scaled;
  }
  return inv_freq;
}

}  // namespace sluice
