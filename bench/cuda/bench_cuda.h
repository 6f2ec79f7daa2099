// What the CUDA benchmarks share: a failed CUDA call said and ended (a
// benchmark has no one to hand the error to), and event timing.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

namespace sluice {

inline void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

// The median seconds of 7 runs of `enqueue` on `stream`, after 2 warm-up runs.
inline double median_seconds(cudaStream_t stream, const std::function<void()>& enqueue) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> ms;
  for (int rep = 0; rep < 9; ++rep) {
    check(cudaEventRecord(start, stream), "record");
    enqueue();
    check(cudaEventRecord(stop, stream), "record");
    check(cudaEventSynchronize(stop), "sync");
    float t = 0.0f;
    cudaEventElapsedTime(&t, start, stop);
    if (rep >= 2) ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2] * 1e-3;
}

}  // namespace sluice
