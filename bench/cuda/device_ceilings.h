// The memory ceilings of the GPU a benchmark runs on, for its "% of HBM"
// columns. The device tool lends an H100 (3.35 TB/s) or an H200 (4.8 TB/s)
// for the same call, so the rates come from the driver and from a copy timed
// at start, not from constants: a share is then against the ceiling of the
// same run on the same card. The FLOP ceilings stay the spec / DEVICE.md
// figures: both cards have the same SXM compute.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench_cuda.h"
#include "sluice/backend/cuda/device_properties.h"

namespace sluice {

struct DeviceCeilings {
  std::string name;       // the driver's device name
  double hbm_spec = 0.0;  // bytes/s: 2 x peak memory clock x bus width (double data rate)
  double hbm_copy = 0.0;  // bytes/s of a 1 GiB device-to-device copy, read + write counted
};

// Measured on the first call: make it at the start of main, before the
// benchmark fills device memory (the copy needs 2 GiB free for a moment).
inline const DeviceCeilings& device_ceilings() {
  static const DeviceCeilings ceilings = [] {
    DeviceCeilings c;
    int device = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    const Result<CudaDeviceProperties> props = cuda_device_properties(device);
    if (!props.ok()) {
      std::fprintf(stderr, "%s\n", props.error_message().c_str());
      std::exit(1);
    }
    c.name = props->name;
    c.hbm_spec = props->hbm_spec_bytes_per_s;
    constexpr std::size_t kBytes = std::size_t{1} << 30;
    void *from = nullptr, *to = nullptr;
    check(cudaMalloc(&from, kBytes), "cudaMalloc (ceiling copy)");
    check(cudaMalloc(&to, kBytes), "cudaMalloc (ceiling copy)");
    check(cudaMemset(from, 1, kBytes), "cudaMemset");
    const double s = median_seconds(nullptr, [&] {
      check(cudaMemcpyAsync(to, from, kBytes, cudaMemcpyDeviceToDevice, nullptr), "cudaMemcpyAsync");
    });
    c.hbm_copy = 2.0 * static_cast<double>(kBytes) / s;
    check(cudaFree(from), "cudaFree");
    check(cudaFree(to), "cudaFree");
    return c;
  }();
  return ceilings;
}

// One line naming the card and its two rates, so every table says what its
// shares are of.
inline void print_device_ceilings() {
  const DeviceCeilings& c = device_ceilings();
  std::printf("device: %s; HBM %.2f TB/s by its clock and bus, %.2f TB/s device copy (the \"of HBM\" shares)\n\n",
              c.name.c_str(), c.hbm_spec / 1e12, c.hbm_copy / 1e12);
  std::fflush(stdout);
}

}  // namespace sluice
