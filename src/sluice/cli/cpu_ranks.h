// The CPU ops of each tensor-parallel rank, for serve and generate.
#pragma once

#include <memory>
#include <vector>

#include "sluice/backend/ops.h"

namespace sluice::cli {

// One CpuOps per rank; --threads (0 = every hardware thread) is the whole
// budget, split evenly, at least one thread a rank. One rank keeps
// num_threads as given.
std::vector<std::unique_ptr<Ops>> cpu_ops_per_rank(int num_threads, std::int32_t num_ranks);

}  // namespace sluice::cli
