#include "sluice/backend/cuda/decode_graphs.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/kernels.h"
#include "sluice/common/setup_time.h"

namespace sluice::cuda {

std::int32_t graph_bucket(std::int32_t n, std::int32_t least, GraphBuckets buckets) {
  if (n <= least) return least;
  if (buckets == GraphBuckets::power_of_two) {
    std::int32_t bucket = least;
    while (bucket < n) bucket *= 2;
    return bucket;
  }
  std::int32_t octave = least;
  while (octave * 2 <= n) octave *= 2;
  const std::int32_t step = std::min(octave, std::max<std::int32_t>(512, octave / 8));
  return (n + step - 1) / step * step;
}

std::optional<GraphKey> decode_graph_key(const StepLayout& layout, GraphBuckets buckets) {
  if (layout.sequences.empty()) return std::nullopt;
  std::int32_t longest = 0, longest_table = 0;
  std::int64_t total = 0;
  for (const SequenceLayout& seq : layout.sequences) {
    if (seq.num_rows != 1) return std::nullopt;
    total += seq.num_computed_tokens + 1;
    longest = std::max(longest, seq.num_computed_tokens + 1);
    longest_table = std::max(longest_table, static_cast<std::int32_t>(seq.block_table.size()));
  }
  return GraphKey{.num_rows = layout.num_rows(),
                  .context_bucket = graph_bucket(longest, 256, buckets),
                  .table_blocks_bucket = graph_bucket(longest_table, 16, buckets),
                  .num_sample_rows = static_cast<std::int32_t>(layout.sample_rows.size()),
                  .uneven_split_rows = split_rows_uneven(total, longest, layout.num_rows()),
                  .scratch_generation = 0,
                  .metadata_generation = 0};
}

DecodeGraphs::~DecodeGraphs() {
  abort_capture();
  clear();
}

void DecodeGraphs::begin(const GraphKey& key) {
  if (auto it = graphs_.find(key); it != graphs_.end()) {
    mode_ = Mode::replaying;
    replay_ = it->second;
  } else {
    SLUICE_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
    mode_ = Mode::capturing;
    capture_key_ = key;
    capture_start_ = std::chrono::steady_clock::now();
  }
}

void DecodeGraphs::finish() {
  if (mode_ == Mode::capturing) {
    cudaGraph_t graph = nullptr;
    SLUICE_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    cudaGraphExec_t exec = nullptr;
    SLUICE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    SLUICE_CUDA_CHECK(cudaGraphDestroy(graph));
    for (auto it = graphs_.begin(); it != graphs_.end();) {
      if (it->first.scratch_generation != capture_key_.scratch_generation ||
          it->first.metadata_generation != capture_key_.metadata_generation) {
        SLUICE_CUDA_CHECK(cudaGraphExecDestroy(it->second));
        it = graphs_.erase(it);
      } else {
        ++it;
      }
    }
    graphs_.emplace(capture_key_, exec);
    replay_ = exec;
    // A capture runs on the step's path: a slow one shows as a decode gap.
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - capture_start_).count();
    add_setup_ms(ms);
    if (ms > kSlowCaptureMs)
      spdlog::info("decode graph of {} rows, context <= {}, captured and instantiated in {:.1f} ms ({} kept)",
                   capture_key_.num_rows, capture_key_.context_bucket, ms, graphs_.size());
  }
  if (mode_ != Mode::eager) SLUICE_CUDA_CHECK(cudaGraphLaunch(replay_, stream_));
  mode_ = Mode::eager;
}

void DecodeGraphs::clear() {
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
}

void DecodeGraphs::abort_capture() {
  if (mode_ != Mode::capturing) return;
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(stream_, &graph);
  if (graph != nullptr) cudaGraphDestroy(graph);
  mode_ = Mode::eager;
}

}  // namespace sluice::cuda
