// CUDA graphs for decode steps. At small batch a decode step is ~400 short
// kernels whose launch cost dominates; a step whose sequences all run one row
// is captured once per GraphKey and replayed after. While replaying, the ops
// only check shapes and hand out the same scratch addresses, and the graph
// runs at sample() (or at the next begin_step). Everything a graph reads that
// changes per step lives in device buffers at fixed addresses (the step
// metadata, the scratch arena, the KV cache); launch shapes depend on the key
// only (the split-KV grid is sized for the context bucket).
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <compare>
#include <cstdint>
#include <map>
#include <optional>

#include "sluice/backend/cuda/cuda_options.h"
#include "sluice/backend/ops.h"

namespace sluice::cuda {

struct GraphKey {
  std::int32_t num_rows, context_bucket, table_blocks_bucket, num_sample_rows;
  // The split-KV plan differs for uneven steps (DecodeSplitPlan::adaptive).
  bool uneven_split_rows;
  // The scratch arena's and the step metadata's generations: a graph holds
  // their addresses, so a key made under older buffers never matches again.
  std::uint64_t scratch_generation, metadata_generation;
  auto operator<=>(const GraphKey&) const = default;
};

// The smallest bucket >= n (at least `least`).
std::int32_t graph_bucket(std::int32_t n, std::int32_t least, GraphBuckets buckets);

// The key of a step graphs cover (every sequence runs one row), generations
// left 0 for the caller; nullopt for any other step.
std::optional<GraphKey> decode_graph_key(const StepLayout& layout, GraphBuckets buckets);

class DecodeGraphs {
 public:
  enum class Mode { eager, capturing, replaying };

  explicit DecodeGraphs(cudaStream_t stream) : stream_(stream) {}
  ~DecodeGraphs();
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;

  Mode mode() const { return mode_; }
  // Replays the graph of `key` if there is one, else captures the step's
  // launches on the stream until finish().
  void begin(const GraphKey& key);
  // Ends a capture (instantiating and keeping the graph, dropping those of
  // older generations) or a replay, by launching the step's graph; a no-op
  // for eager steps.
  void finish();
  // Drops every graph (they hold addresses that are about to change).
  void clear();
  // Abandons a capture in progress (teardown).
  void abort_capture();

 private:
  static constexpr double kSlowCaptureMs = 20.0;  // logged above this
  cudaStream_t stream_;
  Mode mode_ = Mode::eager;
  GraphKey capture_key_{};
  std::chrono::steady_clock::time_point capture_start_;
  cudaGraphExec_t replay_ = nullptr;
  std::map<GraphKey, cudaGraphExec_t> graphs_;
};

}  // namespace sluice::cuda
