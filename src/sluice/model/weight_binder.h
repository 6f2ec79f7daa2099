// WeightBinder: takes checkpoint tensors by name and shape for an
// architecture's loader, uploads them through Ops, remembers which were used
// and rejects the checkpoint's leftovers by name. FP8 block-scaled weights are
// dequantized to f32 on the host here (the CPU reference has no FP8 GEMM);
// the binder owns those buffers, so it lives as long as the model.
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

class WeightBinder {
 public:
  WeightBinder(const Checkpoint& checkpoint, Ops& ops, const LoadProgress& progress,
               std::optional<Fp8BlockQuantization> fp8, HostWeightBuffers& host_buffers);

  // The tensor as floats on the host: the checkpoint's view, or its f32
  // dequantization when it is an FP8 weight with a `_scale_inv`.
  Result<Tensor> host(const std::string& name, const Shape& shape);
  Result<Tensor> weight(const std::string& name, const Shape& shape);
  // Host tensors stacked along their first dimension into one backend tensor.
  Result<Tensor> concatenated(const std::vector<std::pair<std::string, Shape>>& parts);
  // Tensors under `prefix` are left out on purpose; reject_unused() names how many.
  void skip(const std::string& prefix, const std::string& why);
  // A tensor the architecture did not read is an error: the checkpoint is not
  // what the config says.
  Status reject_unused() const;

 private:
  void mark_used(const std::string& name, std::size_t bytes);

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
