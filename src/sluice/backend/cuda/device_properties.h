// What the CUDA runtime reports about a device: the rates the planner's prior
// is moved to (cli/cuda_hardware.h) and the benchmarks' "% of HBM" shares are
// taken against (bench/cuda/device_ceilings.h).
#pragma once

#include <cstdint>
#include <string>

#include "sluice/common/result.h"

namespace sluice {

struct CudaDeviceProperties {
  std::string name;
  double hbm_spec_bytes_per_s = 0;  // 2 x peak memory clock x bus width (double data rate)
  double memory_bytes = 0;
  std::int32_t num_sms = 0;
  double sm_clock_hz = 0;  // peak
};

// An error naming the device where the runtime cannot read it.
Result<CudaDeviceProperties> cuda_device_properties(int device);

}  // namespace sluice
