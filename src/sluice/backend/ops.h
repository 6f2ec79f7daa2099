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
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "sluice/backend/backend.h"
#include "sluice/backend/batch.h"
#include "sluice/backend/tensor.h"

namespace sluice {

class DeepseekV4Kernels;  // backend/deepseek_v4_kernels.h

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

// What one cached position of one layer holds.
enum class KvCacheLayout {
  key_value,  // K and V, each [num_kv_heads, head_dim] (the dense family)
  latent,     // one [head_dim] entry shared by every head: MLA's compressed latent
              // and its rope key (DeepSeek-V3: 512 + 64), num_kv_heads = 1
  model_defined,  // one area of block_size_tokens * head_dim values per block
                  // (num_layers 1, num_kv_heads 1) that the architecture lays out
                  // itself (DeepSeek-V4: window latents, compressed entries, index
                  // keys, compressor state); reached through Ops::model_defined_kv_block
};

// Paged KV cache geometry: per layer, K and V (or the latent) of shape
// [num_blocks, block_size_tokens, num_kv_heads, head_dim].
struct KvCacheSpec {
  std::int32_t num_layers = 0;
  std::int32_t num_blocks = 0;
  std::int32_t block_size_tokens = 16;
  std::int32_t num_kv_heads = 0;
  std::int32_t head_dim = 0;
  KvCacheLayout layout = KvCacheLayout::key_value;

  std::int64_t values_per_token_per_layer() const {
    return (layout == KvCacheLayout::key_value ? 2LL : 1LL) * num_kv_heads * head_dim;
  }
  std::int64_t bytes_per_block(DType dtype) const {
    return values_per_token_per_layer() * num_layers * block_size_tokens *
           static_cast<std::int64_t>(dtype_size_bytes(dtype));
  }
  // The type a backend whose activations are `activation` stores the values
  // in: a model-defined area is f32 on every backend (the CPU's bytes, so the
  // prefix cache and the host tier move the same state everywhere).
  DType value_dtype(DType activation) const { return layout == KvCacheLayout::model_defined ? DType::f32 : activation; }
};

struct RopeParams {
  std::int32_t head_dim = 0;       // the rotated dims (rope(): the whole head, rotate-half layout)
  float theta = 10000.0f;
  // Llama 3 frequency scaling (rope_type "llama3"); factor 0 = off.
  float llama3_factor = 0.0f;
  float llama3_low_freq_factor = 1.0f;
  float llama3_high_freq_factor = 4.0f;
  std::int32_t llama3_original_max_position = 8192;
  // YaRN frequency scaling (rope_type "yarn"); factor 0 = off. rope_partial() only.
  float yarn_factor = 0.0f;
  std::int32_t yarn_original_max_position = 4096;
  float yarn_beta_fast = 32.0f;
  float yarn_beta_slow = 1.0f;
  bool yarn_truncate = true;
  float cos_sin_scale = 1.0f;  // YaRN's attention factor multiplies cos and sin. rope_partial() only.
  // Pairs (2i, 2i + 1) rotate together and leave as [rotated evens | rotated
  // odds], as transformers' DeepSeek does (rope_interleave). rope_partial() only.
  bool interleaved = false;
};

// MLA (DeepSeek-V3 attention) shapes; one latent of kv_lora_rank dims per
// token, decompressed per head by kv_b_proj into a nope key and a value.
struct MlaShape {
  std::int32_t num_heads = 0;
  std::int32_t qk_nope_head_dim = 0;
  std::int32_t qk_rope_head_dim = 0;
  std::int32_t v_head_dim = 0;
  std::int32_t kv_lora_rank = 0;
  float softmax_scale = 1.0f;

  std::int32_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
};

// MLA's per-step inputs, see Ops::mla_attention.
struct MlaInputs {
  Tensor q;          // [rows, heads * qk_head_dim]: per head the nope dims, then the rotated rope dims
  Tensor latent;     // [rows, kv_lora_rank], after kv_a_layernorm
  Tensor k_rope;     // [rows, qk_rope_head_dim], rotated
  Tensor kv_b_proj;  // [heads * (nope + v), kv_lora_rank]: per head W_UK_h rows, then W_UV_h rows
};

// The routed experts of a MoE layer this device holds, stacked
// (upload_concatenated); bf16, or FP8 with block scales where the backend
// keeps them. All of them, or (expert parallelism) the E experts with global
// ids [first_expert, first_expert + E): an assignment to another id is
// another rank's and adds nothing here.
struct MoeExpertWeights {
  Tensor gate_up;  // [E * 2I, H]: expert first_expert + e's gate rows then up rows from row e * 2I
  Tensor down;     // [E * H, I]: expert first_expert + e's rows from e * H
  std::int32_t first_expert = 0;
};

// Which experts each row goes to, and with what weight.
struct MoeAssignment {
  Tensor expert_ids;      // [rows, k] i32
  Tensor expert_weights;  // [rows, k] f32
};

// DeepSeekMoE routing (transformers' DeepseekV3 route_tokens_to_experts).
struct MoeRouting {
  std::int32_t num_experts = 0;
  std::int32_t num_experts_per_token = 0;  // top k
  std::int32_t num_groups = 1;             // n_group: experts split into equal groups
  std::int32_t num_groups_selected = 1;    // topk_group
  bool normalize = true;                   // norm_topk_prob
  float scale = 1.0f;                      // routed_scaling_factor
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
  // (optional) Whether an FP8 e4m3 weight with block_rows x block_cols scales
  // (Tensor::scales set on the host tensor) may be uploaded as it is, for
  // matmul, gate_up_silu and moe_experts to read quantized. Backends without
  // FP8 GEMMs (the CPU reference) answer false: the loader dequantizes.
  virtual bool keeps_fp8_block_weights(std::int32_t /*block_rows*/, std::int32_t /*block_cols*/) const {
    return false;
  }

  // --- the host KV tier (optional: all three, or none) ---
  // Host memory for num_blocks KV blocks of allocate_kv_cache's geometry.
  virtual Status allocate_host_kv_cache(std::int32_t num_blocks) {
    (void)num_blocks;
    return Error{"this backend has no host KV tier"};
  }
  // Host<->device copy rate, each direction; 0: no host tier.
  virtual double host_link_bytes_per_s() const { return 0.0; }
  // Starts `copies` behind the work already issued (a store reads what
  // earlier steps wrote; a load lands after earlier steps stopped using its
  // block), skipping ids already in flight; then returns every copy complete
  // by now, each once. wait_for_one: first block until one in flight is.
  virtual Result<std::vector<KvCopyCompletion>> copy_kv_blocks(std::span<const KvBlockCopy> copies,
                                                               bool wait_for_one) {
    (void)copies;
    (void)wait_for_one;
    return Error{"this backend has no host KV tier"};
  }
  Tensor scratch(Shape shape) { return scratch(shape, activation_dtype()); }
  // (optional) Another Ops over this one's KV pages (allocate_kv_cache called
  // first), with its own stream, scratch and threads, for Backend::make_lane:
  // the weights uploaded here are usable there. No host tier; must be
  // destroyed before this one.
  virtual Result<std::unique_ptr<Ops>> make_lane(const LaneOptions& options) {
    (void)options;
    return Error{"this backend cannot run two step loops"};
  }

  // --- step ---
  virtual void begin_step(const StepLayout& layout) = 0;

  // out[r] = table[token_ids[r]]
  virtual void embedding(const Tensor& table, Tensor out) = 0;
  // (optional) Vocab-parallel embedding: `table` holds the rows of token ids
  // [first_token_id, first_token_id + table.rows()); out[r] = the row of
  // token_ids[r] where it falls there, else zeros (the ranks' outputs summed
  // give the whole lookup).
  virtual Status embedding_shard(const Tensor& table, TokenId first_token_id, Tensor out) {
    (void)table;
    (void)first_token_id;
    (void)out;
    return Error{"this backend has no vocab-parallel embedding"};
  }
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
  // --- DeepSeek-V3. These return an error on backends that lack them. ---
  // Rotates, in each head of x [rows, num_heads * head_stride], the dims
  // [rotary_offset, rotary_offset + params.head_dim) in place at the step's positions.
  virtual Status rope_partial(Tensor x, std::int32_t head_stride, std::int32_t rotary_offset,
                              const RopeParams& params) = 0;
  // MLA over a KvCacheLayout::latent cache. Writes [latent | k_rope] of each
  // row into `layer`'s pages at the step's positions, then
  //   out[r, h] = causal softmax(q_h . K_h^T * scale) . V_h over [0, position(r)]
  // with K_h = [c . W_UK_h^T | k_rope] and V_h = c . W_UV_h^T, c the cached
  // latents; out is [rows, heads * v_head_dim].
  // A sequence with several new rows (prefill) runs the decompressed form: K
  // and V materialised per head over its context. A sequence with one row
  // (decode) runs the absorbed form: q_nope folded through W_UK into the
  // latent space, attention over the latents, W_UV applied once to the result.
  virtual Status mla_attention(std::int32_t layer, const MlaInputs& in, const MlaShape& shape, Tensor out) = 0;
  // Per row of router_logits [rows, E] (f32): scores = sigmoid(logits); the
  // choice ranks scores + correction_bias [E]; groups rank by the sum of their
  // 2 best choices; the top num_groups_selected groups stay, the others'
  // choices become 0; the top k choices are the experts. Their weights are
  // the plain scores, divided by their sum (+1e-20) if normalize, times scale.
  virtual Status moe_route(const Tensor& router_logits, const Tensor& correction_bias, const MoeRouting& routing,
                           MoeAssignment out) = 0;
  // out[r] += sum_k expert_weights[r, k] * down_e(silu(gate_e . x[r]) * (up_e . x[r])), e = expert_ids[r, k],
  // over the k whose expert is held here (see MoeExpertWeights).
  virtual Status moe_experts(const Tensor& x, const MoeExpertWeights& experts, const MoeAssignment& assignment,
                             Tensor out) = 0;

  // --- DeepSeek-V4 (optional: the CPU reference has both) ---
  // The V4 kernels over host f32 rows; nullptr where the backend has none
  // (CUDA until issue 18 stage 3).
  virtual const DeepseekV4Kernels* deepseek_v4_kernels() const { return nullptr; }
  // Host memory of one block of a KvCacheLayout::model_defined cache, its
  // block_size_tokens * head_dim floats; empty where the cache is not host memory.
  virtual std::span<float> model_defined_kv_block(BlockId block) {
    (void)block;
    return {};
  }

  // out[i] = x[rows[i]] for the step's sample rows.
  virtual void gather_sample_rows(const Tensor& x, Tensor out) = 0;
  // Chooses one token per row of logits [num_sample_rows, vocab].
  virtual std::vector<SampleResult> sample(const Tensor& logits,
                                           std::span<const SampleRequest> requests) = 0;
  // Returns once the step's work has run, for a step that sampled nothing
  // (sample() returns only after it). A device that queues work would
  // otherwise take the next steps before this one ran: the step's measured
  // time would be its launches', and a queue of chunks would hold back the
  // decode lane's launches.
  virtual void end_step() {}
};

}  // namespace sluice
