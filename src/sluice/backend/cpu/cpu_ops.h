// The CPU implementation of Ops: plain C++ with a thread pool, f32 activations
// and f32 accumulation. It is the correctness reference for every other backend,
// so clarity wins over speed wherever they conflict.
#pragma once

#include <memory>

#include "sluice/backend/ops.h"

namespace sluice {

struct CpuOpsOptions {
  int num_threads = 0;  // 0 = all hardware threads
};

std::unique_ptr<Ops> make_cpu_ops(const CpuOpsOptions& options);

}  // namespace sluice
