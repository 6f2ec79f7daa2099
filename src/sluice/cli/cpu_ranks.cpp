#include "sluice/cli/cpu_ranks.h"

#include <algorithm>
#include <thread>

#include "sluice/backend/cpu/cpu_ops.h"

namespace sluice::cli {

std::vector<std::unique_ptr<Ops>> cpu_ops_per_rank(int num_threads, std::int32_t num_ranks) {
  std::vector<std::unique_ptr<Ops>> ops;
  if (num_ranks == 1) {
    ops.push_back(make_cpu_ops({.num_threads = num_threads}));
    return ops;
  }
  const int budget = num_threads > 0 ? num_threads : static_cast<int>(std::thread::hardware_concurrency());
  for (std::int32_t r = 0; r < num_ranks; ++r) ops.push_back(make_cpu_ops({.num_threads = std::max(1, budget / num_ranks)}));
  return ops;
}

}  // namespace sluice::cli
