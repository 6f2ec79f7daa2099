// Shared-memory mbarriers for producer/consumer rings (the warp-specialised
// kernels: attention_prefill_wgmma_ws.cu, grouped_gemm_fp8_ws.cu; the TMA
// rings of the decode kernels). `bar` is a shared-memory address
// (smem_addr / cvta).
#pragma once

#include <cstdint>

namespace sluice::cuda {

__device__ __forceinline__ void mbarrier_init(std::uint32_t bar, std::uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(std::uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// An arrival on `bar` once every cp.async this thread issued so far has
// landed, without waiting for them here. noinc: the arrival counts against
// the barrier's expected count; otherwise the pending count is raised first,
// so the copies hold the phase open and another arrival must complete it.
__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc(std::uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void cp_async_mbarrier_arrive(std::uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// A producer thread's arrival on a stage's barrier once the cp.async copies
// it issued have landed (counted in the barrier's expected arrivals). The
// publisher, which also stored into the stage directly, holds the phase open
// with its copies (no noinc) and arrives itself, so its stores are released
// with its arrival.
__device__ __forceinline__ void arrive_when_copies_land(std::uint32_t bar, bool publisher) {
  if (!publisher) {
    cp_async_mbarrier_arrive_noinc(bar);
    return;
  }
  cp_async_mbarrier_arrive(bar);
  mbarrier_arrive(bar);
}
// Waits until the barrier's phase of this parity has completed.
__device__ __forceinline__ void mbarrier_wait(std::uint32_t bar, std::uint32_t parity) {
  std::uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (done == 0);
}

// The `full` and `empty` barriers of each stage of a producer/consumer ring,
// 2 * kStages * 8 bytes of shared memory from `base`.
template <int kStages>
struct RingBarriers {
  std::uint32_t base;
  __device__ __forceinline__ std::uint32_t full(int stage) const { return base + 8 * stage; }
  __device__ __forceinline__ std::uint32_t empty(int stage) const { return base + 8 * (kStages + stage); }
  // By one thread, before the block's first barrier: each stage's pair, expecting these arrivals.
  __device__ __forceinline__ void init(std::uint32_t full_arrivals, std::uint32_t empty_arrivals) const {
    for (int stage = 0; stage < kStages; ++stage) {
      mbarrier_init(full(stage), full_arrivals);
      mbarrier_init(empty(stage), empty_arrivals);
    }
  }
};

// A consumer's place in a ring of kStages stages: the stage of its next K
// block and the parity of that stage's phase, advanced one K block at a time
// (no division by kStages between one K block's MMAs and the next's).
template <int kStages>
struct RingCursor {
  int stage = 0;
  std::uint32_t phase = 0;
  __device__ __forceinline__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

}  // namespace sluice::cuda
