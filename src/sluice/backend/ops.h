// Ops: the operations a model architecture is written against, implemented once
// per backend (cpu/ is the reference, cuda/ is for speed). An architecture never
// touches memory directly: it asks for scratch tensors and calls ops.
//
// Conventions
//   - Activations are 2-D [rows, cols] where rows are the step's tokens in batch
//     order (sequence by sequence). Their dtype is the backend's choice
//     (activation_dtype()); weights keep the checkpoint's dtype unless upload()
//     converts them.
//   - Linear weights use the Hugging Face layout [out_features, in_features].
//   - All reductions accumulate in f32.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "sluice/backend/batch.h"
#include "sluice/backend/tensor.h"

namespace sluice {

// Where one sequence's rows sit in the step, and its KV pages.
struct SequenceLayout {
  std::int32_t row_begin = 0;          // first row of this sequence in activations
  std::int32_t num_rows = 0;           // = num_new_tokens
  std::int32_t num_computed_tokens = 0;  // position of the first row
  std::vector<BlockId> block_table;
};

// Everything about a step that ops need besides tensors; built once per step.
struct StepLayout {
  std::vector<TokenId> token_ids;     // [num_rows]
  std::vector<std::int32_t> positions;  // [num_rows]
  std::vector<SequenceLayout> sequences;
  std::vector<std::int32_t> sample_rows;  // rows whose logits are sampled, in sequence order

  std::int32_t num_rows() const { return static_cast<std::int32_t>(token_ids.size()); }
  static StepLayout from_batch(const Batch& batch);
};

// Paged KV cache geometry: per layer, K and V of shape
// [num_blocks, block_size_tokens, num_kv_heads, head_dim].
struct KvCacheSpec {
  std::int32_t num_layers = 0;
  std::int32_t num_blocks = 0;
  std::int32_t block_size_tokens = 16;
  std::int32_t num_kv_heads = 0;
  std::int32_t head_dim = 0;

  std::int64_t bytes_per_block(DType dtype) const {
    return 2LL * num_layers * block_size_tokens * num_kv_heads * head_dim *
           static_cast<std::int64_t>(dtype_size_bytes(dtype));
  }
};

struct RopeParams {
  std::int32_t head_dim = 0;       // rotary applies to the whole head (rotate-half layout)
  float theta = 10000.0f;
  // Llama 3 frequency scaling (rope_type "llama3"); factor 0 = off.
  float llama3_factor = 0.0f;
  float llama3_low_freq_factor = 1.0f;
  float llama3_high_freq_factor = 4.0f;
  std::int32_t llama3_original_max_position = 8192;
};

// Per-sequence sampling, in StepLayout::sample_rows order.
struct SampleRequest {
  SamplingParams params;
  std::span<const TokenId> tokens;  // prompt + generated, for penalties
  std::int32_t num_prompt_tokens = 0;
  std::int32_t generated_index = 0;  // index of the token being sampled, seeds the RNG
  std::span<const std::uint64_t> allowed_tokens;  // as SequenceStep::allowed_tokens; empty = all
  bool return_logits = false;
};

struct SampleResult {
  TokenId token = 0;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top_logprobs;
  std::vector<float> logits;
};

class Ops {
 public:
  virtual ~Ops() = default;

  // --- memory ---
  virtual DType activation_dtype() const = 0;
  // Makes a host weight (e.g. an mmapped safetensors view) usable by this backend.
  // The CPU backend returns the view itself; CUDA copies it to the device.
  virtual Result<Tensor> upload_weight(const Tensor& host) = 0;
  // Concatenates host weights along their first dimension into one backend tensor
  // (fused projections: q|k|v, gate|up). All parts share dtype and trailing dims.
  virtual Result<Tensor> upload_concatenated(std::span<const Tensor> parts) = 0;
  // Sizes the paged KV cache. Called once before the first step.
  virtual Status allocate_kv_cache(const KvCacheSpec& spec) = 0;
  // Scratch memory valid until the next begin_step().
  virtual Tensor scratch(Shape shape, DType dtype) = 0;
  // (optional) Free device memory now, for sizing the KV pool by
  // --gpu-memory-utilization; nullopt where the backend has no device memory.
  virtual std::optional<std::int64_t> device_memory_free_bytes() const { return std::nullopt; }
  Tensor scratch(Shape shape) { return scratch(shape, activation_dtype()); }

  // --- step ---
  virtual void begin_step(const StepLayout& layout) = 0;

  // out[r] = table[token_ids[r]]
  virtual void embedding(const Tensor& table, Tensor out) = 0;
  // out = x / rms(x) * weight, row-wise over cols. x and out may alias.
  virtual void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor out) = 0;
  // residual += x; out = rms_norm(residual). The fused pre-norm of each block.
  virtual void add_rms_norm(Tensor residual, const Tensor& x, const Tensor& weight, float eps,
                            Tensor out) = 0;
  // out[rows, N] = x[rows, K] · w[N, K]^T (+ bias[N] if bias.data)
  virtual void matmul(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor out) = 0;
  // Rotates q [rows, num_q_heads * head_dim] and k [rows, num_kv_heads * head_dim] in
  // place at the step's positions.
  virtual void rope(Tensor q, Tensor k, const RopeParams& params) = 0;
  // Writes k and v ([rows, num_kv_heads * head_dim]) into layer's KV pages at the
  // step's positions, then out[r] = causal softmax(q·K^T · scale)·V over positions
  // [0, position(r)] of r's sequence. GQA: query head h reads kv head h / (Hq / Hkv).
  virtual void attention(std::int32_t layer, const Tensor& q, const Tensor& k, const Tensor& v,
                         float scale, Tensor out) = 0;
  // out[r, i] = silu(gate_up[r, i]) * gate_up[r, I + i], gate_up = [rows, 2I].
  virtual void silu_mul(const Tensor& gate_up, Tensor out) = 0;
  // Fused projections (optional: the defaults call the ops above, backends may
  // do one pass over the stacked weight).
  // q | k | v = x · w_qkv^T (+ biases), w_qkv = q_proj, k_proj, v_proj stacked
  // by rows (upload_concatenated); a bias may be empty.
  virtual void qkv_projection(const Tensor& x, const Tensor& w_qkv, std::span<const Tensor, 3> biases,
                              Tensor q, Tensor k, Tensor v) {
    std::int64_t first_row = 0;
    const std::array<Tensor*, 3> outs = {&q, &k, &v};
    for (std::size_t i = 0; i < outs.size(); ++i) {
      matmul(x, w_qkv.row_slice(first_row, outs[i]->cols()), biases[i], *outs[i]);
      first_row += outs[i]->cols();
    }
  }
  // out = silu(x · w_gate^T) * (x · w_up^T), w_gate_up = gate_proj, up_proj
  // stacked by rows; out is [rows, intermediate]. gate_up [rows, 2 *
  // intermediate] is workspace the caller allocates once per forward (scratch
  // lives until the next step, so per-layer allocation would grow with depth).
  virtual void gate_up_silu(const Tensor& x, const Tensor& w_gate_up, Tensor gate_up, Tensor out) {
    matmul(x, w_gate_up, Tensor{}, gate_up);
    silu_mul(gate_up, out);
  }
  // out[i] = x[rows[i]] for the step's sample rows.
  virtual void gather_sample_rows(const Tensor& x, Tensor out) = 0;
  // Chooses one token per row of logits [num_sample_rows, vocab].
  virtual std::vector<SampleResult> sample(const Tensor& logits,
                                           std::span<const SampleRequest> requests) = 0;
};

}  // namespace sluice
