// The hardware spec `serve --device cuda` plans with: sluice's kernels as
// measured on an H200 (sim::sluice_cuda_hardware), moved to the card the CUDA
// runtime reports (sim::on_device).
#pragma once

#include "sluice/common/result.h"
#include "sluice/sim/hardware.h"
#include "sluice/sim/model_profile.h"

namespace sluice::cli {

// An error where the build has no CUDA or the device cannot be read.
Result<sim::HardwareSpec> cuda_hardware(const sim::ModelProfile& profile, int device);

// cuda_hardware() on the current device where this machine has one, the H200
// spec where it has none (a trace calibrated away from its GPU).
sim::HardwareSpec cuda_hardware_or_h200(const sim::ModelProfile& profile);

}  // namespace sluice::cli
