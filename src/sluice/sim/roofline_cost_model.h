// RooflineCostModel: predicted step time from the batch shape, the model's
// shape and the GPU's ceilings. Per phase (GEMMs, attention) time is
// max(compute, memory) on one GPU; phases add, then communication, host-table
// fetches and fixed overhead add. Every assumption is in docs/cost-model.md.
#pragma once

#include <algorithm>

#include "sluice/sched/cost_model.h"
#include "sluice/sim/hardware.h"
#include "sluice/sim/model_profile.h"
#include "sluice/sim/parallelism.h"

namespace sluice::sim {

// One step's predicted time, by phase, on the slowest GPU (all ranks are
// assumed balanced).
struct StepCost {
  double gemm_flops_per_gpu = 0;
  double weight_bytes_per_gpu = 0;
  double attention_flops_per_gpu = 0;
  double kv_bytes_per_gpu = 0;
  double comm_bytes_per_gpu = 0;
  double host_bytes_per_gpu = 0;
  double expected_experts_touched = 0;  // per MoE layer, whole model (0 if dense)

  double gemm_ms = 0;
  bool gemm_memory_bound = false;       // weight reads, not FLOPs, set gemm_ms
  double attention_ms = 0;
  bool attention_memory_bound = false;  // KV reads, not FLOPs, set attention_ms
  double comm_ms = 0;
  double host_ms = 0;
  double overhead_ms = 0;
  double layer_floor_ms = 0;  // the layers run x HardwareSpec::overhead.per_layer_floor_ms

  double device_ms() const { return gemm_ms + attention_ms + comm_ms + host_ms; }
  // The floor sets the step only where it is longer than the FLOPs and bytes.
  double floor_excess_ms() const { return std::max(0.0, layer_floor_ms - device_ms()); }
  double total_ms() const { return device_ms() + floor_excess_ms() + overhead_ms; }
};

// Expected number of distinct experts that `num_tokens` tokens touch when each
// picks `top_k` of `num_experts` uniformly (the router's load balancing):
// E = N * (1 - (1 - k/N)^T).
double expected_experts_touched(double num_experts, double top_k, double num_tokens);

class RooflineCostModel final : public CostModel {
 public:
  // `parallelism` must be valid for `profile` (validate() first).
  RooflineCostModel(ModelProfile profile, HardwareSpec hardware, Parallelism parallelism);

  double predict_step_ms(const StepShape& shape) const override;
  // Each phase goes to the term of its binding ceiling (compute or memory);
  // communication, host fetches and overhead are the fixed term.
  CostTerms predict_terms(const StepShape& shape) const override;
  std::int32_t query_tile_rows() const override { return std::max(1, hardware_.attention_query_tile_rows); }
  StepCost predict(const StepShape& shape) const;

  const ModelProfile& profile() const { return profile_; }
  const HardwareSpec& hardware() const { return hardware_; }
  const Parallelism& parallelism() const { return parallelism_; }

 private:
  ModelProfile profile_;
  HardwareSpec hardware_;
  Parallelism parallelism_;
};

}  // namespace sluice::sim
