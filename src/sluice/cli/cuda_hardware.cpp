#include "sluice/cli/cuda_hardware.h"

#if SLUICE_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "sluice/backend/cuda/device_properties.h"
#endif

namespace sluice::cli {

Result<sim::HardwareSpec> cuda_hardware([[maybe_unused]] const sim::ModelProfile& profile,
                                        [[maybe_unused]] int device) {
#if SLUICE_HAVE_CUDA
  SLUICE_TRY_ASSIGN(props, cuda_device_properties(device));
  return sim::on_device(sim::sluice_cuda_hardware(profile), {.name = props.name,
                                                             .hbm_spec_bytes_per_s = props.hbm_spec_bytes_per_s,
                                                             .memory_bytes = props.memory_bytes,
                                                             .num_sms = props.num_sms,
                                                             .sm_clock_hz = props.sm_clock_hz});
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
