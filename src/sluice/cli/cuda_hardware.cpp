#include "sluice/cli/cuda_hardware.h"

#include <fmt/format.h>

#if SLUICE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace sluice::cli {

Result<sim::HardwareSpec> cuda_hardware([[maybe_unused]] const sim::ModelProfile& profile,
                                        [[maybe_unused]] int device) {
#if SLUICE_HAVE_CUDA
  cudaDeviceProp prop{};
  int memory_khz = 0, bus_bits = 0, sm_khz = 0;
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&memory_khz, cudaDevAttrMemoryClockRate, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, device) != cudaSuccess)
    return Error{fmt::format("cannot read the properties of CUDA device {}", device)};
  const sim::DeviceFacts facts{.name = prop.name,
                               .hbm_spec_bytes_per_s = 2.0 * memory_khz * 1e3 * bus_bits / 8.0,
                               .memory_bytes = static_cast<double>(prop.totalGlobalMem),
                               .num_sms = prop.multiProcessorCount,
                               .sm_clock_hz = sm_khz * 1e3};
  return sim::on_device(sim::sluice_cuda_hardware(profile), facts);
#else
  return Error{"this build has no CUDA backend"};
#endif
}

sim::HardwareSpec cuda_hardware_or_h200(const sim::ModelProfile& profile) {
#if SLUICE_HAVE_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) {
    int device = 0;
    if (cudaGetDevice(&device) == cudaSuccess)
      if (Result<sim::HardwareSpec> spec = cuda_hardware(profile, device); spec.ok()) return std::move(spec).value();
  }
#endif
  return sim::sluice_cuda_hardware(profile);
}

}  // namespace sluice::cli
