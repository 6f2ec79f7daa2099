// A rank that fails on cue: CPU ops whose matmul throws once armed, so a
// tensor-parallel rank fails mid-forward while the other ranks go on to wait
// for it in a collective. The test hook for rank failure: the test hands it
// to make_tensor_parallel_model_runner as one rank's Ops. It also counts the
// steps it was told to finish (end_step).
#pragma once

#include <atomic>
#include <memory>
#include <stdexcept>

#include "sluice/backend/cpu/cpu_ops.h"

namespace sluice::testing {

class ThrowingOps final : public Ops {
 public:
  explicit ThrowingOps(std::atomic<bool>& armed) : inner_(make_cpu_ops({.num_threads = 1})), armed_(armed) {}

  DType activation_dtype() const override { return inner_->activation_dtype(); }
  Result<Tensor> upload_weight(const Tensor& host) override { return inner_->upload_weight(host); }
  Result<Tensor> upload_concatenated(std::span<const Tensor> parts) override {
    return inner_->upload_concatenated(parts);
  }
  Status allocate_kv_cache(const KvCacheSpec& spec) override { return inner_->allocate_kv_cache(spec); }
  Tensor scratch(Shape shape, DType dtype) override { return inner_->scratch(shape, dtype); }
  void begin_step(const StepLayout& layout) override { inner_->begin_step(layout); }
  void embedding(const Tensor& table, Tensor out) override { inner_->embedding(table, out); }
  Status embedding_shard(const Tensor& table, TokenId first_token_id, Tensor out) override {
    return inner_->embedding_shard(table, first_token_id, out);
  }
  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor out) override {
    inner_->rms_norm(x, weight, eps, out);
  }
  void add_rms_norm(Tensor residual, const Tensor& x, const Tensor& weight, float eps, Tensor out) override {
    inner_->add_rms_norm(residual, x, weight, eps, out);
  }
  void matmul(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor out) override {
    if (armed_) throw std::runtime_error("injected matmul failure");
    inner_->matmul(x, w, bias, out);
  }
  void rope(Tensor q, Tensor k, const RopeParams& params) override { inner_->rope(q, k, params); }
  void attention(std::int32_t layer, const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                 Tensor out) override {
    inner_->attention(layer, q, k, v, scale, out);
  }
  void silu_mul(const Tensor& gate_up, Tensor out) override { inner_->silu_mul(gate_up, out); }
  Status rope_partial(Tensor x, std::int32_t head_stride, std::int32_t rotary_offset,
                      const RopeParams& params) override {
    return inner_->rope_partial(x, head_stride, rotary_offset, params);
  }
  Status mla_attention(std::int32_t layer, const MlaInputs& in, const MlaShape& shape, Tensor out) override {
    return inner_->mla_attention(layer, in, shape, out);
  }
  Status moe_route(const Tensor& router_logits, const Tensor& correction_bias, const MoeRouting& routing,
                   MoeAssignment out) override {
    return inner_->moe_route(router_logits, correction_bias, routing, out);
  }
  Status moe_experts(const Tensor& x, const MoeExpertWeights& experts, const MoeAssignment& assignment,
                     Tensor out) override {
    return inner_->moe_experts(x, experts, assignment, out);
  }
  void gather_sample_rows(const Tensor& x, Tensor out) override { inner_->gather_sample_rows(x, out); }
  std::vector<SampleResult> sample(const Tensor& logits, std::span<const SampleRequest> requests) override {
    return inner_->sample(logits, requests);
  }
  void end_step() override { ++num_end_steps_; }
  int num_end_steps() const { return num_end_steps_; }

 private:
  int num_end_steps_ = 0;
  std::unique_ptr<Ops> inner_;
  std::atomic<bool>& armed_;
};

}  // namespace sluice::testing
