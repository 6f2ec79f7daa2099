// The kernels' dtype tag (kernels/common.cuh's Dt mirrors DType's values) for
// a float tensor's dtype.
#pragma once

#include <cstdint>

#include "sluice/backend/cuda/kernels/kernels.h"
#include "sluice/backend/tensor.h"
#include "sluice/common/check.h"

namespace sluice::cuda {

inline Dt dt_of(DType dtype) {
  SLUICE_CHECK_MSG(dtype != DType::i32, "float tensor expected");
  return static_cast<Dt>(static_cast<std::int32_t>(dtype));
}

}  // namespace sluice::cuda
