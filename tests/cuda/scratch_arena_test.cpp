// The scratch arena's release (backend/cuda/scratch_arena.h): what an op
// allocates under a ScratchScope is handed out again after it, at the same
// addresses in the same order (captured graphs rely on that), including past
// the chunk where the scope began; a release never adds a chunk that an
// earlier allocation of the step already made; reset() still merges a step's
// chunks into one.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "sluice/backend/cuda/scratch_arena.h"

namespace sluice {
namespace {

constexpr std::int64_t kChunk = 1 << 20;

TEST(CudaScratchArena, ScopesHandBackTheirAllocationsAtTheSameAddresses) {
  cuda::ScratchArena arena(kChunk, nullptr);
  arena.reset();
  auto* model_buffer = static_cast<std::byte*>(arena.allocate(kChunk / 4));
  std::vector<void*> first, second;
  {
    const cuda::ScratchScope op(arena);
    first = {arena.allocate(kChunk / 2), arena.allocate(kChunk / 2), arena.allocate(1000)};  // spills to a 2nd chunk
  }
  const std::uint64_t generation = arena.generation();
  {
    const cuda::ScratchScope op(arena);
    second = {arena.allocate(kChunk / 2), arena.allocate(kChunk / 2), arena.allocate(1000)};
  }
  EXPECT_EQ(first, second);
  EXPECT_EQ(arena.generation(), generation);
  EXPECT_EQ(static_cast<std::byte*>(first[0]), model_buffer + kChunk / 4);
  // After the scopes the next allocation lands where the first scope began.
  EXPECT_EQ(arena.allocate(256), first[0]);
  // The step's two chunks become one at the next reset (a new generation), and
  // the same sequence then fits in it without spilling.
  arena.reset();
  EXPECT_NE(arena.generation(), generation);
  auto* base = static_cast<std::byte*>(arena.allocate(kChunk / 4));
  const cuda::ScratchScope op(arena);
  auto* a = static_cast<std::byte*>(arena.allocate(kChunk / 2));
  auto* b = static_cast<std::byte*>(arena.allocate(kChunk / 2));
  EXPECT_EQ(a, base + kChunk / 4);
  EXPECT_EQ(b, a + kChunk / 2);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST(CudaScratchArena, AScopeOpenedBeforeAnyChunkReleasesEverything) {
  cuda::ScratchArena arena(kChunk, nullptr);
  void* first = nullptr;
  {
    const cuda::ScratchScope op(arena);
    first = arena.allocate(3 * kChunk);  // larger than a chunk: a chunk of its own
  }
  EXPECT_EQ(arena.allocate(kChunk), first);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace sluice
