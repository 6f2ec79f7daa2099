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
//
// An op's own temporaries (the MoE's slot buffers, an FP8 matmul's quantized
// rows) are released when it returns (ScratchScope), so a step's scratch is
// the model's buffers plus the largest op's temporaries, not their sum over
// the layers (an 8k-token prefill of DeepSeek-V3 ran out of memory on that
// sum). Reuse is safe in stream order: every kernel waits for the ones before
// it (pdl_wait()) before it writes, as the model's buffers, reused every
// layer, already require.
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

  // Where the next allocation would go; release() hands back everything
  // allocated since, in the same order (the same addresses on a replay).
  struct Mark {
    std::size_t chunk = 0;
    std::int64_t used = 0;
  };
  Mark mark() const { return chunks_.empty() ? Mark{} : Mark{current_, chunks_[current_].used}; }
  void release(const Mark& mark);

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

// Releases what an op allocated from `arena` while it lives.
class ScratchScope {
 public:
  explicit ScratchScope(ScratchArena& arena) : arena_(arena), mark_(arena.mark()) {}
  ~ScratchScope() { arena_.release(mark_); }
  ScratchScope(const ScratchScope&) = delete;
  ScratchScope& operator=(const ScratchScope&) = delete;

 private:
  ScratchArena& arena_;
  ScratchArena::Mark mark_;
};

}  // namespace sluice::cuda
