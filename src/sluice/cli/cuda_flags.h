// The CUDA backend's settings as typed flags, shared by `sluice serve` and
// `sluice generate`: added to a command, refused unless --device cuda, and
// turned into the CudaOptions the backend is constructed with (the flags'
// values are logged with the others; the whole struct is logged when the
// backend starts). Benchmark-only settings (graph buckets, GEMV split K, MLA kernels, FP8
// and MoE GEMM paths) have no flag: cuda_bench sets them.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "sluice/backend/cuda/cuda_options.h"
#include "sluice/common/result.h"

namespace sluice::cli {

struct CudaFlags {
  std::string prefill_attention = "auto";  // a name of cuda::kPrefillAttentionNames
  bool programmatic_launch = true;
  // Given: on or off; not given: serve decides (on beside an 8-SM decode lane).
  std::optional<bool> gemm_sm_count_target;
  std::string decode_split_plan = "adaptive";  // a name of cuda::kDecodeSplitPlanNames
};

void add_cuda_flags(CLI::App& cmd, CudaFlags& flags);
// An error naming the first CUDA flag given on the command line when `device` is not cuda.
[[nodiscard]] Status check_cuda_flags(const CLI::App& cmd, std::string_view device);
CudaOptions cuda_options(const CudaFlags& flags);

}  // namespace sluice::cli
