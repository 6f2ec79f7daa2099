// Per-step scratch on the device (activations, attention partials): a bump
// allocator, reset at every step, so an op's scratch costs no allocation.
// Captured decode graphs hold scratch addresses, so the arena hands out the
// same addresses for the same sequence of requests, and says (generation())
// when they have moved.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice::cuda {

// A step that overflows the current chunk gets a new one (earlier pointers
// stay valid); at the next reset the chunks are merged into one of the
// combined size, so the arena keeps the high-water mark in one chunk.
// Chunks come and go in the order of `stream` (device_buffer.h), so growing
// never waits for another stream's work.
class ScratchArena {
 public:
  ScratchArena(std::int64_t initial_bytes, cudaStream_t stream) : initial_bytes_(initial_bytes), stream_(stream) {}
  ~ScratchArena();
  ScratchArena(const ScratchArena&) = delete;
  ScratchArena& operator=(const ScratchArena&) = delete;

  // Changes whenever chunk addresses change: captured graphs hold them.
  std::uint64_t generation() const { return generation_; }
  // Starts a step: everything handed out before is free again.
  void reset();
  // `bytes` rounded up to kDeviceAlignBytes.
  void* allocate(std::int64_t bytes);

 private:
  struct Chunk {
    void* base = nullptr;
    std::int64_t capacity = 0;
    std::int64_t used = 0;
  };
  void add_chunk(std::int64_t bytes);

  std::int64_t initial_bytes_;
  cudaStream_t stream_;
  std::vector<Chunk> chunks_;
  std::size_t current_ = 0;
  std::uint64_t generation_ = 0;
};

}  // namespace sluice::cuda
