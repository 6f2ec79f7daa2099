#include "sluice/backend/cuda/device_properties.h"

#include <cuda_runtime_api.h>

namespace sluice {

Result<CudaDeviceProperties> cuda_device_properties(int device) {
  cudaDeviceProp prop{};
  int memory_khz = 0, bus_bits = 0, sm_khz = 0;
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&memory_khz, cudaDevAttrMemoryClockRate, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, device) != cudaSuccess)
    return Error{"cannot read the properties of CUDA device " + std::to_string(device)};
  return CudaDeviceProperties{.name = prop.name,
                              .hbm_spec_bytes_per_s = 2.0 * memory_khz * 1e3 * bus_bits / 8.0,
                              .memory_bytes = static_cast<double>(prop.totalGlobalMem),
                              .num_sms = prop.multiProcessorCount,
                              .sm_clock_hz = sm_khz * 1e3};
}

}  // namespace sluice
