// Rotary embedding frequencies, computed on the host the way Hugging Face does
// (f32 arithmetic), so every backend rotates by the same angles.
#pragma once

#include <vector>

#include "sluice/backend/ops.h"

namespace sluice {

// inv_freq[i] for i in [0, head_dim / 2), with Llama 3 or YaRN scaling when enabled.
std::vector<float> rope_inverse_frequencies(const RopeParams& params);

}  // namespace sluice
