#include "sluice/backend/cuda/scratch_arena.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include <fmt/format.h>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/device_buffer.h"

namespace sluice::cuda {

ScratchArena::~ScratchArena() {
  for (auto& c : chunks_) cudaFree(c.base);
}

void ScratchArena::reset() {
  if (chunks_.size() > 1) {
    ++generation_;
    std::int64_t total = 0;
    for (auto& c : chunks_) {
      total += c.capacity;
      free_in_stream_order(c.base, stream_);  // after the previous step's reads
    }
    chunks_.clear();
    add_chunk(total);
  }
  for (auto& c : chunks_) c.used = 0;
  current_ = 0;
}

void* ScratchArena::allocate(std::int64_t bytes) {
  bytes = align_up(std::max<std::int64_t>(bytes, 1), kDeviceAlignBytes);
  if (chunks_.empty()) add_chunk(std::max(bytes, initial_bytes_));
  Chunk* c = &chunks_[current_];
  // Past a release the later chunks are empty: take the next that fits
  // before adding one.
  while (c->used + bytes > c->capacity) {
    if (current_ + 1 == chunks_.size()) add_chunk(std::max(bytes, initial_bytes_));
    c = &chunks_[++current_];
  }
  void* out = static_cast<std::byte*>(c->base) + c->used;
  c->used += bytes;
  return out;
}

void ScratchArena::release(const Mark& mark) {
  if (chunks_.empty()) return;
  for (std::size_t i = mark.chunk + 1; i < chunks_.size(); ++i) chunks_[i].used = 0;
  chunks_[mark.chunk].used = mark.used;
  current_ = mark.chunk;
}

void ScratchArena::add_chunk(std::int64_t bytes) {
  Chunk c;
  const cudaError_t status = malloc_in_stream_order(&c.base, bytes, stream_);
  SLUICE_CHECK_MSG(status == cudaSuccess, fmt::format("scratch arena: allocating {} bytes failed ({})", bytes,
                                                      cudaGetErrorString(status)));
  c.capacity = bytes;
  chunks_.push_back(c);
}

}  // namespace sluice::cuda
