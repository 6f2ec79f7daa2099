#include "sluice/backend/cuda/step_sampler.h"

#include <cstring>

#include "sluice/backend/cpu/sampler.h"
#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/cuda_dtype.h"

namespace sluice::cuda {

std::vector<SampleResult> StepSampler::sample(const Tensor& logits, std::span<const SampleRequest> requests) {
  const auto rows = static_cast<std::int32_t>(logits.rows());
  const std::int64_t vocab = logits.cols();
  SLUICE_CHECK_EQ(static_cast<std::size_t>(rows), requests.size());
  std::vector<SampleResult> results(requests.size());
  if (rows == 0) return results;
  std::vector<std::int32_t> device_rows, host_rows;
  pack_.clear();
  for (std::int32_t r = 0; r < rows; ++r) {
    const SampleRequest& req = requests[r];
    const bool plain_greedy = req.params.is_greedy() && !req.params.adjusts_logits() &&
                              req.params.num_top_logprobs == 0 && !req.return_logits && req.allowed_tokens.empty();
    if (plain_greedy) continue;
    if (!req.return_logits && req.params.num_top_logprobs <= kMaxDeviceTopLogprobs) {
      device_rows.push_back(r);
      pack_.add(req, r, vocab);
    } else {
      host_rows.push_back(r);
    }
  }
  const auto num_device = static_cast<std::int64_t>(device_rows.size());
  // One allocation: what comes back (greedy results, device results, f32 rows
  // for the host), then what the device sampler reads and its workspace.
  const std::int64_t greedy_bytes = align_up(rows * 3 * 4LL, kDeviceAlignBytes);
  const std::int64_t results_bytes =
      align_up(num_device * static_cast<std::int64_t>(sizeof(DeviceSampleResult)), kDeviceAlignBytes);
  const std::int64_t host_rows_bytes = static_cast<std::int64_t>(host_rows.size()) * vocab * 4;
  const std::int64_t readback_bytes = greedy_bytes + results_bytes + host_rows_bytes;
  const std::int64_t params_bytes =
      align_up(num_device * static_cast<std::int64_t>(sizeof(DeviceSampleRow)), kDeviceAlignBytes);
  const std::int64_t penalty_bytes =
      align_up(static_cast<std::int64_t>(pack_.penalties.size() * sizeof(DevicePenaltyEntry)), kDeviceAlignBytes);
  const std::int64_t mask_bytes =
      align_up(static_cast<std::int64_t>(pack_.mask_words.size() * sizeof(std::uint64_t)), kDeviceAlignBytes);
  const std::int64_t upload_bytes = params_bytes + penalty_bytes + mask_bytes;
  const std::int64_t bytes = align_up(readback_bytes, kDeviceAlignBytes) + upload_bytes +
                             num_device * sample_workspace_row_floats(vocab) * 4;
  device_.ensure(bytes, stream_);
  auto* device = static_cast<std::byte*>(device_.data());
  auto* d_token = reinterpret_cast<std::int32_t*>(device);
  auto* d_stats = reinterpret_cast<float*>(d_token + rows);
  auto* d_results = reinterpret_cast<DeviceSampleResult*>(device + greedy_bytes);
  auto* d_rows = reinterpret_cast<float*>(device + greedy_bytes + results_bytes);
  std::byte* d_upload = device + align_up(readback_bytes, kDeviceAlignBytes);
  launch_argmax_lse(logits.data, dt_of(logits.dtype), rows, vocab, d_token, d_stats, stream_);
  if (num_device > 0) {
    auto* upload = static_cast<std::byte*>(upload_host_.ensure(upload_bytes));
    std::memcpy(upload, pack_.rows.data(), pack_.rows.size() * sizeof(DeviceSampleRow));
    if (!pack_.penalties.empty())
      std::memcpy(upload + params_bytes, pack_.penalties.data(), pack_.penalties.size() * sizeof(DevicePenaltyEntry));
    if (!pack_.mask_words.empty())
      std::memcpy(upload + params_bytes + penalty_bytes, pack_.mask_words.data(),
                  pack_.mask_words.size() * sizeof(std::uint64_t));
    SLUICE_CUDA_CHECK(
        cudaMemcpyAsync(d_upload, upload, static_cast<std::size_t>(upload_bytes), cudaMemcpyHostToDevice, stream_));
    launch_sample_rows({.logits = logits.data,
                        .dt = dt_of(logits.dtype),
                        .vocab = vocab,
                        .rows = reinterpret_cast<const DeviceSampleRow*>(d_upload),
                        .num_rows = static_cast<std::int32_t>(num_device),
                        .penalties = reinterpret_cast<const DevicePenaltyEntry*>(d_upload + params_bytes),
                        .mask_words = reinterpret_cast<const std::uint64_t*>(d_upload + params_bytes + penalty_bytes),
                        .workspace = reinterpret_cast<float*>(d_upload + upload_bytes),
                        .out = d_results},
                       stream_);
  }
  const std::size_t elem = dtype_size_bytes(logits.dtype);
  for (std::size_t i = 0; i < host_rows.size(); ++i)
    launch_to_f32(static_cast<const std::byte*>(logits.data) + host_rows[i] * vocab * elem, dt_of(logits.dtype),
                  vocab, d_rows + static_cast<std::int64_t>(i) * vocab, stream_);
  auto* host = static_cast<std::byte*>(readback_host_.ensure(readback_bytes));
  SLUICE_CUDA_CHECK(cudaMemcpyAsync(host, device_.data(), static_cast<std::size_t>(readback_bytes),
                                    cudaMemcpyDeviceToHost, stream_));
  SLUICE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  const auto* h_token = reinterpret_cast<const std::int32_t*>(host);
  const auto* h_stats = reinterpret_cast<const float*>(h_token + rows);
  const auto* h_results = reinterpret_cast<const DeviceSampleResult*>(host + greedy_bytes);
  const auto* h_rows = reinterpret_cast<const float*>(host + greedy_bytes + results_bytes);
  for (std::int32_t r = 0; r < rows; ++r) {
    results[r].token = h_token[r];
    results[r].logprob = h_stats[2 * r] - h_stats[2 * r + 1];
  }
  for (std::size_t i = 0; i < device_rows.size(); ++i) {
    const DeviceSampleResult& d = h_results[i];
    SampleResult& result = results[device_rows[i]];
    result.token = d.token;
    result.logprob = d.logprob;
    for (std::int32_t j = 0; j < d.num_top_logprobs; ++j) result.top_logprobs.push_back({d.top_tokens[j], d.top_logprobs[j]});
  }
  for (std::size_t i = 0; i < host_rows.size(); ++i) {
    const std::int32_t r = host_rows[i];
    results[r] = sample_logits(
        std::span<const float>(h_rows + static_cast<std::int64_t>(i) * vocab, static_cast<std::size_t>(vocab)),
        requests[r]);
  }
  return results;
}

}  // namespace sluice::cuda
