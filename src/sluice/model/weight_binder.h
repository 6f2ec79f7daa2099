// WeightBinder: takes checkpoint tensors by name and shape for an
// architecture's loader, uploads them through Ops, remembers which were used
// and rejects the checkpoint's leftovers by name. FP8 block-scaled weights
// stay FP8 (their scales on Tensor::scales) where the backend keeps them
// (Ops::keeps_fp8_block_weights) and the architecture's use allows it
// (WeightUse); otherwise they are dequantized to f32 on the host here (the CPU
// reference has no FP8 GEMM), in buffers the model owns.
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "sluice/backend/ops.h"
#include "sluice/model/config.h"
#include "sluice/model/safetensors.h"

namespace sluice {

// Called after each tensor is made ready on the backend.
using LoadProgress = std::function<void(std::size_t num_tensors_done, std::size_t num_tensors,
                                        std::size_t bytes_done, std::size_t bytes_total)>;

// Dequantized FP8 weights: host memory that CPU weight views point into.
using HostWeightBuffers = std::vector<std::vector<float>>;

// How an architecture uses a weight: whether an FP8 weight may stay FP8.
struct WeightUse {
  // Only as the weight of matmul, gate_up_silu or moe_experts, the ops that
  // read block scales; a weight another op reads (mla_attention's kv_b_proj)
  // is dequantized.
  bool matmul_only = true;
  // A row where the architecture row_slices the weight (0: none); the weight
  // stays FP8 only if that row starts a scale block.
  std::int64_t row_slice_at = 0;
};

// One rank's part of a weight split evenly over `size` ranks (tensor parallelism).
struct WeightShard {
  std::int32_t rank = 0;
  std::int32_t size = 1;
};

class WeightBinder {
 public:
  WeightBinder(const Checkpoint& checkpoint, Ops& ops, const LoadProgress& progress,
               std::optional<Fp8BlockQuantization> fp8, HostWeightBuffers& host_buffers);

  Result<Tensor> weight(const std::string& name, const Shape& shape, const WeightUse& use = {});
  // Host tensors stacked along their first dimension into one backend tensor
  // (each used as `use` says).
  Result<Tensor> concatenated(const std::vector<std::pair<std::string, Shape>>& parts, const WeightUse& use = {});
  // Tensor parallelism (shards are f32 or the checkpoint's dtype; FP8 is
  // dequantized). Column-parallel: this rank's rows (output features) of each
  // part, stacked; every part's rows must divide by shard.size. A 1-D part (a
  // bias) splits the same way.
  Result<Tensor> row_shards(const std::vector<std::pair<std::string, Shape>>& parts, WeightShard shard);
  // Row-parallel: this rank's columns (input features) of a 2-D weight, copied.
  Result<Tensor> column_shard(const std::string& name, const Shape& shape, WeightShard shard);
  // column_shard of each part (same columns, same dtype), stacked by rows:
  // every routed expert's down_proj when the experts' width is split.
  Result<Tensor> column_shards(const std::vector<std::pair<std::string, Shape>>& parts, WeightShard shard);
  // Whether parts of these shapes, stacked, would stay FP8 under `use`: an
  // op whose weights must share a dtype (moe_experts' gate_up and down) asks
  // for both before binding either.
  bool keeps_fp8(const std::vector<Shape>& part_shapes, const WeightUse& use = {}) const;
  // Tensors under `prefix` are left out on purpose; reject_unused() names how many.
  void skip(const std::string& prefix, const std::string& why);
  // A tensor the architecture did not read is an error: the checkpoint is not
  // what the config says.
  Status reject_unused() const;

 private:
  void mark_used(const std::string& name, std::size_t bytes);
  // The tensor on the host: the checkpoint's view (an FP8 weight with its
  // `_scale_inv` on Tensor::scales when keep_fp8), or the f32 dequantization
  // of an FP8 weight.
  Result<Tensor> host(const std::string& name, const Shape& shape, bool keep_fp8);
  // Whether FP8 weights of these shapes, stacked, stay FP8 on the backend.

  const Checkpoint& checkpoint_;
  Ops& ops_;
  const LoadProgress& progress_;
  std::optional<Fp8BlockQuantization> fp8_;
  HostWeightBuffers& host_buffers_;
  std::set<std::string> used_;
  std::vector<std::pair<std::string, std::string>> skipped_;  // prefix, why
  std::size_t bytes_done_ = 0;
  std::size_t bytes_total_ = 0;
  std::size_t num_total_ = 0;
};

}  // namespace sluice
