#include "sluice/cli/cuda_flags.h"

#include <vector>

#include <fmt/format.h>

#include "sluice/common/check.h"

namespace sluice::cli {

void add_cuda_flags(CLI::App& cmd, CudaFlags& flags) {
  std::vector<std::string> kernels;
  for (const auto& [name, kernel] : cuda::kPrefillAttentionNames) kernels.emplace_back(name);
  cmd.add_option("--cuda-prefill-attention", flags.prefill_attention,
                 "cuda: kernel for prefill attention: auto (the default: cuDNN's SDPA through libcudnn.so.9 where the "
                 "step fills the GPU or splits over keys, wgmma-ws elsewhere and wherever cuDNN does not load), "
                 "cudnn (cuDNN for every step it can take; a short chunk over a long prefix split over keys), "
                 "wgmma-ws (warp-specialised warpgroup MMA, FlashAttention-3 style; head_dim 128, others run on mma) "
                 "or mma (mma.sync)")
      ->check(CLI::IsMember(kernels));
  cmd.add_flag("--cuda-pdl,!--no-cuda-pdl", flags.programmatic_launch,
               "cuda: programmatic dependent launch (a kernel starts while the previous one drains)");
  cmd.add_flag_function(
      "--cuda-gemm-sm-count-target,!--no-cuda-gemm-sm-count-target",
      [&flags](std::int64_t count) { flags.gemm_sm_count_target = count > 0; },
      "cuda, with --decode-lane sms:N: cuBLASLt plans the prefill lane's GEMMs for its SMs instead of the "
      "device's. On by default beside an 8-SM lane (a chunk of GEMMs ran 3.4% faster, attention chunks 1%; the "
      "burst's mean first token 26.4 -> 25.9 s), off beside larger ones (16 SMs: 1-3% slower): docs/benchmarks.md, "
      "S17-lead-3 and S18-lead-1");
  std::vector<std::string> plans;
  for (const auto& [name, plan] : cuda::kDecodeSplitPlanNames) plans.emplace_back(name);
  cmd.add_option("--cuda-decode-split-plan", flags.decode_split_plan,
                 "cuda: how decode attention cuts keys over blocks: adaptive (the default: by-step-work on uneven "
                 "steps, uniform-waves on the rest), uniform-waves (even batches at 72-90% of HBM) or by-step-work "
                 "(uneven steps, e.g. long contexts beside short ones, 2.5x faster; even batches 13-20 points "
                 "slower in graphs)")
      ->check(CLI::IsMember(plans));
}

Status check_cuda_flags(const CLI::App& cmd, std::string_view device) {
  if (device == "cuda") return Ok{};
  for (const char* flag :
       {"--cuda-prefill-attention", "--cuda-pdl", "--cuda-decode-split-plan", "--cuda-gemm-sm-count-target"})
    if (cmd.count(flag) > 0)
      return Error{fmt::format("{} has no effect with --device {} (CUDA backend only)", flag, device)};
  return Ok{};
}

CudaOptions cuda_options(const CudaFlags& flags) {
  CudaOptions options;
  // The flag's check admits only the table's names.
  const auto kernel = cuda::parse_name(flags.prefill_attention, cuda::kPrefillAttentionNames);
  SLUICE_CHECK_MSG(kernel.has_value(), "--cuda-prefill-attention " + flags.prefill_attention);
  options.prefill_attention = *kernel;
  options.programmatic_launch = flags.programmatic_launch;
  options.gemm_sm_count_target = flags.gemm_sm_count_target.value_or(false);  // serve resolves the default
  // A server never waits for a cuDNN plan inside a step (cuda_options.h).
  options.cudnn_plans_in_background = true;
  const auto plan = cuda::parse_name(flags.decode_split_plan, cuda::kDecodeSplitPlanNames);
  SLUICE_CHECK_MSG(plan.has_value(), "--cuda-decode-split-plan " + flags.decode_split_plan);
  options.decode_split_plan = *plan;
  return options;
}

}  // namespace sluice::cli
