// The reference sampler: penalties, temperature, top-k, top-p, min-p, and a
// draw that is a pure function of (seed, generated_index). Other backends must
// choose the same token given the same logits.
#pragma once

#include <span>

#include "sluice/backend/ops.h"

namespace sluice {

SampleResult sample_logits(std::span<const float> logits, const SampleRequest& request);

}  // namespace sluice
