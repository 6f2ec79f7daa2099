#include "sluice/common/sampling_params.h"

#include <cmath>

#include <fmt/format.h>

namespace sluice {

Status SamplingParams::validate() const {
  auto out_of_range = [](const char* field, double value, const char* range) {
    return Error{fmt::format("{} = {} is out of range: {}", field, value, range)};
  };
  if (!std::isfinite(temperature) || temperature < 0.0f) return out_of_range("temperature", temperature, "must be >= 0");
  if (top_k < 0) return out_of_range("top_k", top_k, "must be >= 0 (0 disables it)");
  if (!(top_p > 0.0f && top_p <= 1.0f)) return out_of_range("top_p", top_p, "must be in (0, 1]");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return out_of_range("min_p", min_p, "must be in [0, 1]");
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f))
    return out_of_range("presence_penalty", presence_penalty, "must be in [-2, 2]");
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f))
    return out_of_range("frequency_penalty", frequency_penalty, "must be in [-2, 2]");
  if (!(repetition_penalty > 0.0f && std::isfinite(repetition_penalty)))
    return out_of_range("repetition_penalty", repetition_penalty, "must be > 0");
  if (num_top_logprobs < 0 || num_top_logprobs > 20)
    return out_of_range("top_logprobs", num_top_logprobs, "must be in [0, 20]");
  for (std::size_t i = 0; i < logit_bias.size(); ++i) {
    const auto [token, bias] = logit_bias[i];
    if (token < 0) return Error{fmt::format("logit_bias: token id {} is negative", token)};
    if (i > 0 && token <= logit_bias[i - 1].first)
      return Error{"logit_bias: token ids must be ascending and distinct"};
    if (!(bias >= -kMaxLogitBias && bias <= kMaxLogitBias))
      return out_of_range("logit_bias", bias, "each bias must be in [-100, 100]");
  }
  return Ok{};
}

}  // namespace sluice
