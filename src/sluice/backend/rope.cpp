#include "sluice/backend/rope.h"

#include <cmath>
#include <numbers>

namespace sluice {

std::vector<float> rope_inverse_frequencies(const RopeParams& params) {
  const int half = params.head_dim / 2;
  std::vector<float> inv_freq(static_cast<std::size_t>(half));
  for (int i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(params.head_dim);
    inv_freq[i] = 1.0f / std::pow(params.theta, exponent);
  }
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
