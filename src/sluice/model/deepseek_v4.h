// DeepSeek-V4 (DeepseekV4ForCausalLM, model_type deepseek_v4): the CPU
// reference of issue 18 stage 1, checked against transformers
// (tests/model/deepseek_v4_golden_test.cpp), one sequence (append) or every
// sequence of an engine step (forward) at a time.
//   - Shared-KV attention: one 512-wide latent per token is every head's key
//     and value; queries through q_a/q_b with an unweighted per-head norm;
//     rope on the last qk_rope_head_dim dims (interleaved pairs), undone on
//     the output; a per-head sink logit; grouped low-rank output (wo_a, wo_b).
//   - Three attention kinds over a sliding window of recent tokens: window
//     only; CSA, adding entries pooled from overlapping windows of 4 tokens,
//     top-k picked by the lightning indexer; HCA, adding every entry pooled
//     from disjoint windows of 128 tokens.
//   - 4 residual streams mixed by hyper-connections (mHC, Sinkhorn).
//   - MoE everywhere: hash routing by token id in the first layers,
//     sqrt(softplus) top-k elsewhere; clamped SwiGLU experts plus one shared.
//
// The forward pass reads and writes each sequence's state through
// DeepseekV4SequenceState: the reference's own Sequence keeps every
// position's history (window latents and the compressors' projections, never
// evicted); the engine's DeepseekV4Model (deepseek_v4_model.h, stage 2) runs
// the same pass over its paged blocks on the CPU; on CUDA,
// model/cuda/deepseek_v4_forward.h runs it on the device with these weights. Weights load from the published layout (embed, layers.N.attn.*,
// layers.N.ffn.*, hc_*; mtp.* skipped) in f32 or bf16, or as DeepSeek ships
// them: FP8 e4m3 linears with `.scale` block scales (F8_E8M0 powers of two, or
// F32) and, under expert_dtype fp4, routed experts as e2m1 pairs with one
// E8M0 scale per 32 inputs (model/fp4_weights.h). Both are dequantized to f32
// on load, exactly: every decoded value is an f32; or, for the device forward
// (DeepseekV4LoadOptions::keep_quantized), kept as stored.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sluice/backend/deepseek_v4_kernels.h"
#include "sluice/backend/ops.h"
#include "sluice/common/ids.h"
#include "sluice/common/result.h"
#include "sluice/model/config.h"
#include "sluice/model/deepseek_v4_state.h"
#include "sluice/model/safetensors.h"

namespace sluice {

// The rotary parameters of one of V4's ropes (main or compress) over its
// rope_dim dims, YaRN included: what the CPU reference and the device forward
// both build their frequency tables from.
RopeParams deepseek_v4_rope_params(const DeepseekV4Rope& rope, std::int32_t rope_dim);

namespace cuda {
class DeepseekV4DeviceForward;  // uploads these weights (model/cuda/deepseek_v4_forward.h)
}

// A linear kept as the checkpoint stores it (DeepseekV4LoadOptions::keep_quantized),
// for a backend with FP8 GEMMs: the bytes and the scales, undecoded.
struct DeepseekV4QuantizedLinear {
  enum class Format {
    fp8_blocks,  // bytes: e4m3 [rows, cols]; scales: f32 multipliers [ceil(rows / 128), ceil(cols / 128)]
    fp4_groups,  // bytes: e2m1 pairs [rows, cols / 2]; scales: e8m0 codes [rows, ceil(cols / 32)] (fp4_weights.h)
  };
  Format format = Format::fp8_blocks;
  std::int64_t rows = 0, cols = 0;
  std::vector<std::uint8_t> bytes;
  std::vector<float> block_scales;         // fp8_blocks
  std::vector<std::uint8_t> group_scales;  // fp4_groups
};

struct DeepseekV4LoadOptions {
  // FP8 linears and FP4 routed experts stay as stored (quantized(name)), their
  // f32 vectors empty: for the device forward, which runs them as they are.
  // Such a reference cannot run forward() itself (it refuses).
  bool keep_quantized = false;
};

class DeepseekV4Reference {
 public:
  // Tensors are copied to f32 host memory; `kernels` must outlive the model.
  static Result<std::unique_ptr<DeepseekV4Reference>> load(const ModelConfig& config, const Checkpoint& checkpoint,
                                                           const DeepseekV4Kernels& kernels,
                                                           const DeepseekV4LoadOptions& options = {});
  // The checkpoint's bytes of `name` (e.g. "layers.0.attn.wq_a.weight") when
  // loaded with keep_quantized and stored FP8 or FP4; null otherwise.
  const DeepseekV4QuantizedLinear* quantized(const std::string& name) const;

  // The reference's own sequence state: every position's window latent,
  // every entry's pool state and every compressed entry, never evicted.
  class Sequence final : public DeepseekV4SequenceState {
   public:
    std::int64_t num_tokens = 0;  // positions run so far

    void reserve(std::int64_t num_tokens) override;
    std::span<float> window_latent(std::int32_t layer, std::int64_t position) override;
    std::span<float> pool_state(std::int32_t layer, DeepseekV4Pool pool, std::int64_t index,
                                std::int64_t position) override;
    std::span<float> entry(std::int32_t layer, DeepseekV4Pool pool, std::int64_t index) override;

   private:
    friend class DeepseekV4Reference;
    struct Pool {
      std::int64_t dim = 0, width = 0, rate = 0;
      std::vector<float> states;   // [tokens / rate + 2, 3 * dim]: every entry opened so far
      std::vector<float> entries;  // [tokens / rate, dim]
    };
    struct Layer {
      std::int64_t head_dim = 0;
      std::vector<float> window;          // [tokens, head_dim]
      std::optional<Pool> compressor, indexer;
    };
    Pool& pool(std::int32_t layer, DeepseekV4Pool which);
    std::vector<Layer> layers_;
  };

  // One sequence's rows of a step: where its state lives, the position of
  // its first row and its tokens (one row each).
  struct StepSequence {
    DeepseekV4SequenceState* state = nullptr;
    std::int64_t first_position = 0;
    std::span<const TokenId> tokens;
  };

  const ModelConfig& config() const { return config_; }
  Sequence start_sequence() const;
  // Runs `tokens` after those the sequence has seen; returns the logits [vocab]
  // after the last of them.
  Result<std::vector<float>> append(Sequence& sequence, std::span<const TokenId> tokens) const;
  // Runs every sequence's rows (rows numbered in sequence order, each row
  // independent of the others but through its sequence's state); returns the
  // logits [sample_rows.size(), vocab] of the rows named.
  Result<std::vector<float>> forward(std::span<const StepSequence> sequences,
                                     std::span<const std::int64_t> sample_rows) const;

 private:
  friend class cuda::DeepseekV4DeviceForward;
  struct HyperConnection {
    std::vector<float> fn, base, scale;
    HyperConnectionWeights view() const { return {fn, base, scale}; }
  };
  struct Compressor {  // pools windows of `rate` tokens; width = 2 * dim when windows overlap (CSA)
    std::vector<float> wkv, wgate;  // [width, hidden]
    std::vector<float> ape;         // [rate, width]: position bias of each slot of a window
    std::vector<float> norm;        // [dim]
  };
  struct Indexer {
    std::vector<float> wq_b;          // [index_heads * index_head_dim, q_lora_rank]
    std::vector<float> weights_proj;  // [index_heads, hidden]
    Compressor compressor;            // dim = index_head_dim, overlapping
  };
  struct Attention {
    std::vector<float> wq_a, q_norm, wq_b, wkv, kv_norm, wo_a, wo_b, sinks;
    std::optional<Compressor> compressor;  // CSA and HCA
    std::optional<Indexer> indexer;        // CSA
  };
  struct Moe {
    std::vector<float> router;               // [experts, hidden]
    std::vector<float> bias;                 // moe: [experts] selection-only correction
    std::vector<std::int32_t> tid2eid;       // hash_moe: [vocab, experts_per_token]
    std::vector<std::vector<float>> gate_up; // per expert [2 * inter, hidden]: w1 rows, then w3 rows
    std::vector<std::vector<float>> down;    // per expert [hidden, inter]
    std::vector<float> shared_gate_up, shared_down;
  };
  struct Layer {
    DeepseekV4Attention type;
    HyperConnection attn_hc, ffn_hc;
    std::vector<float> attn_norm, ffn_norm;
    Attention attention;
    Moe moe;
  };
  struct StepRows;  // the rows of one forward() call

  void run_attention(std::int32_t layer_index, StepRows& rows, std::span<const float> x, std::span<float> out) const;
  void run_moe(const Layer& layer, const StepRows& rows, std::span<const float> x, std::span<float> out) const;
  // Folds each row's projections [rows, width] of one compressor into the
  // pool states of the entries it feeds, emitting each entry at its window's
  // last token.
  void compress(std::int32_t layer_index, DeepseekV4Pool pool, const Compressor& compressor, std::int64_t dim,
                const StepRows& rows, std::span<const float> kv, std::span<const float> gate) const;
  void emit_entry(std::int32_t layer_index, DeepseekV4Pool pool, const Compressor& compressor, std::int64_t dim,
                  DeepseekV4SequenceState& state, std::int64_t window) const;
  HyperConnectionShape hc_shape() const;

  ModelConfig config_;
  DeepseekV4Config ds_;
  std::map<std::string, DeepseekV4QuantizedLinear, std::less<>> quantized_;  // keep_quantized only
  const DeepseekV4Kernels* kernels_ = nullptr;
  RotaryTable main_rope_, compress_rope_;
  std::vector<float> embed_;  // [vocab, hidden]
  std::vector<Layer> layers_;
  HyperConnection hc_head_;
  std::vector<float> final_norm_, head_;  // [hidden], [vocab, hidden]
};

}  // namespace sluice
