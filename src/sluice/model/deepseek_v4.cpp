#include "sluice/model/deepseek_v4.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "sluice/backend/float_convert.h"
#include "sluice/backend/rope.h"
#include "sluice/model/deepseek_v4_pool_fold.h"
#include "sluice/model/fp4_weights.h"
#include "sluice/model/fp8_weights.h"

namespace sluice {
namespace {

// Reads the published checkpoint into f32 host vectors and remembers which
// tensors were read, so that every other tensor is rejected by name.
class HostWeightReader {
 public:
  // With `keep` (DeepseekV4LoadOptions::keep_quantized), FP8 and FP4 tensors
  // land there as stored and read as empty vectors.
  HostWeightReader(const Checkpoint& checkpoint, const ModelConfig& config,
                   std::map<std::string, DeepseekV4QuantizedLinear, std::less<>>* keep)
      : checkpoint_(checkpoint), config_(config), fp4_experts_(config.deepseek_v4->fp4_experts), keep_(keep) {}

  Result<std::vector<float>> floats(const std::string& name, const Shape& shape) {
    SLUICE_TRY_ASSIGN(tensor, checkpoint_.get(name, shape));
    used_.insert(name);
    std::vector<float> out(static_cast<std::size_t>(tensor.numel()));
    switch (tensor.dtype) {
      case DType::f32: std::copy_n(tensor.as<const float>(), out.size(), out.begin()); return out;
      case DType::bf16:
        for (std::size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_f32(tensor.as<const std::uint16_t>()[i]);
        return out;
      case DType::f16:
        for (std::size_t i = 0; i < out.size(); ++i) out[i] = f16_to_f32(tensor.as<const std::uint16_t>()[i]);
        return out;
      case DType::f8_e4m3: return dequantize(name, tensor);
      case DType::i32:
      case DType::f8_e8m0:
      case DType::i8:
      case DType::u8: break;
    }
    return Error{fmt::format("tensor '{}' has dtype {}, expected a float type", name, dtype_name(tensor.dtype))};
  }

  // A routed expert's [rows, cols] projection: FP4 pairs with their group
  // scales under expert_dtype fp4, else as floats() reads any weight.
  Result<std::vector<float>> routed_expert(const std::string& name, const Shape& shape) {
    if (!fp4_experts_) return floats(name, shape);
    if (shape[1] % 2 != 0)
      return Error{fmt::format("routed expert '{}' has {} inputs: FP4 pairs need an even number", name, shape[1])};
    SLUICE_TRY_ASSIGN(packed, checkpoint_.get(name, fp4_packed_shape(shape)));
    const std::string scale_name = scale_name_of(name);
    if (!checkpoint_.contains(scale_name))
      return Error{fmt::format("FP4 routed expert '{}' has no group scales '{}'", name, scale_name)};
    SLUICE_TRY_ASSIGN(scale, checkpoint_.get(scale_name, fp4_scale_shape(shape)));
    used_.insert(name);
    used_.insert(scale_name);
    if (keep_ != nullptr) {
      if (scale.dtype != DType::f8_e8m0 || (packed.dtype != DType::i8 && packed.dtype != DType::u8))
        return Error{fmt::format("FP4 routed expert '{}' must be I8/U8 codes with F8_E8M0 scales", name)};
      const auto* codes = packed.as<const std::uint8_t>();
      const auto* scales = scale.as<const std::uint8_t>();
      for (std::int64_t i = 0; i < scale.numel(); ++i)
        if (scales[i] == 0xff) return Error{fmt::format("FP4 routed expert '{}': a group scale is the E8M0 NaN", name)};
      (*keep_)[name] = DeepseekV4QuantizedLinear{
          .format = DeepseekV4QuantizedLinear::Format::fp4_groups, .rows = shape[0], .cols = shape[1],
          .bytes = std::vector<std::uint8_t>(codes, codes + packed.numel()),
          .group_scales = std::vector<std::uint8_t>(scales, scales + scale.numel())};
      return std::vector<float>{};
    }
    return dequantize_fp4_groups(packed, scale, shape, name);
  }

  Result<std::vector<std::int32_t>> ints(const std::string& name, const Shape& shape) {
    SLUICE_TRY_ASSIGN(tensor, checkpoint_.get(name, shape));
    used_.insert(name);
    if (tensor.dtype != DType::i32)
      return Error{fmt::format("tensor '{}' has dtype {}, expected I32", name, dtype_name(tensor.dtype))};
    return std::vector<std::int32_t>(tensor.as<const std::int32_t>(), tensor.as<const std::int32_t>() + tensor.numel());
  }

  // Every tensor read, or under `skipped_prefix` (the MTP layers).
  Status reject_unused(const std::string& skipped_prefix) const {
    for (const std::string& name : checkpoint_.names()) {
      if (used_.count(name) || (!skipped_prefix.empty() && name.starts_with(skipped_prefix))) continue;
      return Error{fmt::format("checkpoint tensor '{}' is not part of this deepseek_v4 config (refusing to ignore it)",
                               name)};
    }
    return Ok{};
  }

 private:
  // DeepSeek-V4 names a linear's scales `<linear>.scale` next to `<linear>.weight`.
  static std::string scale_name_of(const std::string& name) {
    return (name.ends_with(".weight") ? name.substr(0, name.size() - 7) : name) + ".scale";
  }

  // An FP8 weight and its block scales (F8_E8M0, or F32 in the -Base checkpoints).
  Result<std::vector<float>> dequantize(const std::string& name, const Tensor& weight) {
    if (!config_.fp8)
      return Error{fmt::format("tensor '{}' is float8 but config.json has no fp8 quantization_config", name)};
    const std::string scale_name = scale_name_of(name);
    if (!checkpoint_.contains(scale_name))
      return Error{fmt::format("float8 tensor '{}' has no block scales '{}'", name, scale_name)};
    SLUICE_TRY_ASSIGN(scale, checkpoint_.get(scale_name, fp8_scale_shape(weight.shape, *config_.fp8)));
    used_.insert(scale_name);
    const bool blocks_128 = config_.fp8->block_rows == 128 && config_.fp8->block_cols == 128;
    if (keep_ != nullptr && weight.shape.rank == 2 && blocks_128) {
      SLUICE_TRY_ASSIGN(multipliers, scale_multipliers(scale, scale_name));
      const auto* bytes = weight.as<const std::uint8_t>();
      (*keep_)[name] = DeepseekV4QuantizedLinear{
          .format = DeepseekV4QuantizedLinear::Format::fp8_blocks, .rows = weight.shape[0], .cols = weight.shape[1],
          .bytes = std::vector<std::uint8_t>(bytes, bytes + weight.numel()), .block_scales = std::move(multipliers)};
      return std::vector<float>{};
    }
    return dequantize_fp8_blocks(weight, scale, *config_.fp8, name);
  }

  const Checkpoint& checkpoint_;
  const ModelConfig& config_;
  const bool fp4_experts_;  // expert_dtype fp4: routed experts are FP4 pairs (model/fp4_weights.h)
  std::map<std::string, DeepseekV4QuantizedLinear, std::less<>>* keep_;
  std::set<std::string, std::less<>> used_;
};

// Routed experts are FP4 under expert_dtype fp4; the shared expert never is.
enum class ExpertKind { routed, shared };

RotaryTable rotary_table(const DeepseekV4Rope& rope, std::int32_t rope_dim) {
  return RotaryTable{.inv_freq = rope_inverse_frequencies(deepseek_v4_rope_params(rope, rope_dim)),
                     .cos_sin_scale = rope.cos_sin_scale};
}

std::span<float> row(std::vector<float>& m, std::int64_t r, std::int64_t width) {
  return std::span<float>(m).subspan(r * width, width);
}

}  // namespace

RopeParams deepseek_v4_rope_params(const DeepseekV4Rope& rope, std::int32_t rope_dim) {
  RopeParams params{.head_dim = rope_dim, .theta = rope.theta};
  if (rope.yarn) {
    params.yarn_factor = rope.yarn->factor;
    params.yarn_original_max_position = rope.yarn->original_max_position_embeddings;
    params.yarn_beta_fast = rope.yarn->beta_fast;
    params.yarn_beta_slow = rope.yarn->beta_slow;
    params.yarn_truncate = rope.yarn->truncate;
  }
  return params;
}

// The rows of one forward(), every sequence's in order: their positions,
// token ids, states and q_a outputs.
struct DeepseekV4Reference::StepRows {
  std::vector<std::int64_t> positions;             // [n]
  std::vector<TokenId> tokens;                     // [n]
  std::vector<DeepseekV4SequenceState*> states;    // [n]: the state of the row's sequence
  std::vector<std::int64_t> first_row;             // [n]: the row of its sequence's first position this step
  std::vector<float> q_residual;                   // [n, q_lora_rank]: q_a_norm(wq_a x), the indexer's query input too

  std::int64_t size() const { return static_cast<std::int64_t>(positions.size()); }
};

Result<std::unique_ptr<DeepseekV4Reference>> DeepseekV4Reference::load(const ModelConfig& config,
                                                                       const Checkpoint& checkpoint,
                                                                       const DeepseekV4Kernels& kernels,
                                                                       const DeepseekV4LoadOptions& options) {
  SLUICE_CHECK(config.deepseek_v4 != nullptr);
  auto owned = std::unique_ptr<DeepseekV4Reference>(new DeepseekV4Reference());
  DeepseekV4Reference& m = *owned;
  m.config_ = config;
  m.ds_ = *config.deepseek_v4;
  m.kernels_ = &kernels;
  const DeepseekV4Config& ds = m.ds_;
  m.main_rope_ = rotary_table(ds.main_rope, ds.qk_rope_head_dim);
  m.compress_rope_ = rotary_table(ds.compress_rope, ds.qk_rope_head_dim);
  const std::int64_t hidden = config.hidden_size, vocab = config.vocab_size, heads = config.num_heads;
  const std::int64_t hd = config.head_dim, hc = ds.hc_mult, inter = ds.moe_intermediate_size;
  const std::int64_t experts = ds.n_routed_experts;
  HostWeightReader read(checkpoint, config, options.keep_quantized ? &m.quantized_ : nullptr);
  auto hyper_connection = [&](const std::string& prefix, std::int64_t mixes,
                              std::int64_t scales) -> Result<HyperConnection> {
    SLUICE_TRY_ASSIGN(fn, read.floats(prefix + "fn", {mixes, hc * hidden}));
    SLUICE_TRY_ASSIGN(base, read.floats(prefix + "base", {mixes}));
    SLUICE_TRY_ASSIGN(scale, read.floats(prefix + "scale", {scales}));
    return HyperConnection{std::move(fn), std::move(base), std::move(scale)};
  };
  auto compressor = [&](const std::string& prefix, std::int64_t dim, std::int64_t width,
                        std::int64_t rate) -> Result<Compressor> {
    SLUICE_TRY_ASSIGN(wkv, read.floats(prefix + "wkv.weight", {width, hidden}));
    SLUICE_TRY_ASSIGN(wgate, read.floats(prefix + "wgate.weight", {width, hidden}));
    SLUICE_TRY_ASSIGN(ape, read.floats(prefix + "ape", {rate, width}));
    SLUICE_TRY_ASSIGN(norm, read.floats(prefix + "norm.weight", {dim}));
    return Compressor{std::move(wkv), std::move(wgate), std::move(ape), std::move(norm)};
  };
  // Routed experts may be FP4 (expert_dtype); the shared expert is a dense linear like the others.
  auto expert = [&](const std::string& prefix, ExpertKind kind, Moe& moe) -> Status {
    auto projection = [&](const std::string& name, const Shape& shape) {
      return kind == ExpertKind::routed ? read.routed_expert(name, shape) : read.floats(name, shape);
    };
    SLUICE_TRY_ASSIGN(w1, projection(prefix + "w1.weight", {inter, hidden}));
    SLUICE_TRY_ASSIGN(w3, projection(prefix + "w3.weight", {inter, hidden}));
    SLUICE_TRY_ASSIGN(w2, projection(prefix + "w2.weight", {hidden, inter}));
    w1.insert(w1.end(), w3.begin(), w3.end());
    moe.gate_up.push_back(std::move(w1));
    moe.down.push_back(std::move(w2));
    return Ok{};
  };

  SLUICE_TRY_ASSIGN(embed, read.floats("embed.weight", {vocab, hidden}));
  m.embed_ = std::move(embed);
  for (std::int32_t i = 0; i < config.num_layers; ++i) {
    const std::string p = fmt::format("layers.{}.", i);
    Layer layer;
    layer.type = ds.layer_types[i];
    SLUICE_TRY_ASSIGN(attn_hc, hyper_connection(p + "hc_attn_", (2 + hc) * hc, 3));
    SLUICE_TRY_ASSIGN(ffn_hc, hyper_connection(p + "hc_ffn_", (2 + hc) * hc, 3));
    SLUICE_TRY_ASSIGN(attn_norm, read.floats(p + "attn_norm.weight", {hidden}));
    SLUICE_TRY_ASSIGN(ffn_norm, read.floats(p + "ffn_norm.weight", {hidden}));
    layer.attn_hc = std::move(attn_hc);
    layer.ffn_hc = std::move(ffn_hc);
    layer.attn_norm = std::move(attn_norm);
    layer.ffn_norm = std::move(ffn_norm);

    const std::string a = p + "attn.";
    Attention& attn = layer.attention;
    SLUICE_TRY_ASSIGN(wq_a, read.floats(a + "wq_a.weight", {ds.q_lora_rank, hidden}));
    SLUICE_TRY_ASSIGN(q_norm, read.floats(a + "q_norm.weight", {ds.q_lora_rank}));
    SLUICE_TRY_ASSIGN(wq_b, read.floats(a + "wq_b.weight", {heads * hd, ds.q_lora_rank}));
    SLUICE_TRY_ASSIGN(wkv, read.floats(a + "wkv.weight", {hd, hidden}));
    SLUICE_TRY_ASSIGN(kv_norm, read.floats(a + "kv_norm.weight", {hd}));
    SLUICE_TRY_ASSIGN(wo_a, read.floats(a + "wo_a.weight",
                                        {std::int64_t{ds.o_groups} * ds.o_lora_rank, heads * hd / ds.o_groups}));
    SLUICE_TRY_ASSIGN(wo_b, read.floats(a + "wo_b.weight", {hidden, std::int64_t{ds.o_groups} * ds.o_lora_rank}));
    SLUICE_TRY_ASSIGN(sinks, read.floats(a + "attn_sink", {heads}));
    attn.wq_a = std::move(wq_a);
    attn.q_norm = std::move(q_norm);
    attn.wq_b = std::move(wq_b);
    attn.wkv = std::move(wkv);
    attn.kv_norm = std::move(kv_norm);
    attn.wo_a = std::move(wo_a);
    attn.wo_b = std::move(wo_b);
    attn.sinks = std::move(sinks);
    const std::int32_t rate = ds.compress_rate(layer.type);
    if (layer.type == DeepseekV4Attention::heavily_compressed) {
      SLUICE_TRY_ASSIGN(c, compressor(a + "compressor.", hd, hd, rate));
      attn.compressor = std::move(c);
    } else if (layer.type == DeepseekV4Attention::compressed_sparse) {
      SLUICE_TRY_ASSIGN(c, compressor(a + "compressor.", hd, 2 * hd, rate));
      attn.compressor = std::move(c);
      const std::int64_t ihd = ds.index_head_dim, ih = ds.index_n_heads;
      Indexer indexer;
      SLUICE_TRY_ASSIGN(iq, read.floats(a + "indexer.wq_b.weight", {ih * ihd, ds.q_lora_rank}));
      SLUICE_TRY_ASSIGN(iw, read.floats(a + "indexer.weights_proj.weight", {ih, hidden}));
      SLUICE_TRY_ASSIGN(ic, compressor(a + "indexer.compressor.", ihd, 2 * ihd, rate));
      indexer.wq_b = std::move(iq);
      indexer.weights_proj = std::move(iw);
      indexer.compressor = std::move(ic);
      attn.indexer = std::move(indexer);
    }

    const std::string f = p + "ffn.";
    Moe& moe = layer.moe;
    SLUICE_TRY_ASSIGN(router, read.floats(f + "gate.weight", {experts, hidden}));
    moe.router = std::move(router);
    if (ds.mlp_layer_types[i] == DeepseekV4Mlp::hash_moe) {
      SLUICE_TRY_ASSIGN(table, read.ints(f + "gate.tid2eid", {vocab, ds.num_experts_per_tok}));
      for (std::int32_t e : table)
        if (e < 0 || e >= experts)
          return Error{fmt::format("{}gate.tid2eid holds expert {} of {}", f, e, experts)};
      moe.tid2eid = std::move(table);
    } else {
      SLUICE_TRY_ASSIGN(bias, read.floats(f + "gate.bias", {experts}));
      moe.bias = std::move(bias);
    }
    for (std::int64_t e = 0; e < experts; ++e)
      SLUICE_TRY(expert(fmt::format("{}experts.{}.", f, e), ExpertKind::routed, moe));
    Moe shared;
    SLUICE_TRY(expert(f + "shared_experts.", ExpertKind::shared, shared));
    moe.shared_gate_up = std::move(shared.gate_up.front());
    moe.shared_down = std::move(shared.down.front());
    m.layers_.push_back(std::move(layer));
  }
  SLUICE_TRY_ASSIGN(head_hc, hyper_connection("hc_head_", hc, 1));
  SLUICE_TRY_ASSIGN(final_norm, read.floats("norm.weight", {hidden}));
  SLUICE_TRY_ASSIGN(head, read.floats("head.weight", {vocab, hidden}));
  m.hc_head_ = std::move(head_hc);
  m.final_norm_ = std::move(final_norm);
  m.head_ = std::move(head);
  // The multi-token-prediction layers (num_nextn_predict_layers) are not run.
  SLUICE_TRY(read.reject_unused(ds.num_nextn_predict_layers > 0 ? "mtp." : ""));
  return owned;
}

HyperConnectionShape DeepseekV4Reference::hc_shape() const {
  return HyperConnectionShape{.hc_mult = ds_.hc_mult,
                              .hidden = config_.hidden_size,
                              .sinkhorn_iters = ds_.hc_sinkhorn_iters,
                              .hc_eps = ds_.hc_eps,
                              .norm_eps = config_.rms_norm_eps};
}

DeepseekV4Reference::Sequence DeepseekV4Reference::start_sequence() const {
  Sequence sequence;
  for (const Layer& layer : layers_) {
    Sequence::Layer& l = sequence.layers_.emplace_back();
    l.head_dim = config_.head_dim;
    const std::int64_t rate = ds_.compress_rate(layer.type);
    if (layer.attention.compressor) {
      const bool overlap = layer.type == DeepseekV4Attention::compressed_sparse;
      l.compressor = Sequence::Pool{.dim = l.head_dim, .width = overlap ? 2 * l.head_dim : l.head_dim, .rate = rate};
    }
    if (layer.attention.indexer)
      l.indexer = Sequence::Pool{.dim = ds_.index_head_dim, .width = 2LL * ds_.index_head_dim, .rate = rate};
  }
  return sequence;
}

void DeepseekV4Reference::Sequence::reserve(std::int64_t tokens) {
  for (Layer& l : layers_) {
    l.window.resize(tokens * l.head_dim);
    for (std::optional<Pool>* pool : {&l.compressor, &l.indexer}) {
      if (!*pool) continue;
      (*pool)->states.resize((tokens / (*pool)->rate + 2) * 3 * (*pool)->dim);
      (*pool)->entries.resize(tokens / (*pool)->rate * (*pool)->dim);
    }
  }
}

DeepseekV4Reference::Sequence::Pool& DeepseekV4Reference::Sequence::pool(std::int32_t layer, DeepseekV4Pool which) {
  std::optional<Pool>& p = which == DeepseekV4Pool::compressor ? layers_[layer].compressor : layers_[layer].indexer;
  SLUICE_CHECK(p.has_value());
  return *p;
}

std::span<float> DeepseekV4Reference::Sequence::window_latent(std::int32_t layer, std::int64_t position) {
  return row(layers_[layer].window, position, layers_[layer].head_dim);
}

std::span<float> DeepseekV4Reference::Sequence::pool_state(std::int32_t layer, DeepseekV4Pool which,
                                                           std::int64_t index, std::int64_t /*position*/) {
  Pool& p = pool(layer, which);
  return row(p.states, index, 3 * p.dim);
}

std::span<float> DeepseekV4Reference::Sequence::entry(std::int32_t layer, DeepseekV4Pool which, std::int64_t index) {
  Pool& p = pool(layer, which);
  return row(p.entries, index, p.dim);
}

// Emits entry `window` of a compressor from its pool state as of `position`,
// the window's last token (deepseek_v4_pool_fold.h): normed, then roped at
// the window's first token.
void DeepseekV4Reference::emit_entry(std::int32_t layer_index, DeepseekV4Pool pool, const Compressor& c,
                                     std::int64_t dim, DeepseekV4SequenceState& state, std::int64_t window) const {
  const std::int64_t width = static_cast<std::int64_t>(c.wkv.size()) / config_.hidden_size;
  const std::int64_t rate = static_cast<std::int64_t>(c.ape.size()) / width;  // ape is [rate, width]
  std::vector<float> entry(dim);
  deepseek_v4_pool_finish(state.pool_state(layer_index, pool, window, (window + 1) * rate - 1), entry);
  kernels_->rms_norm(entry, dim, c.norm, config_.rms_norm_eps);
  const std::int64_t position = window * rate;
  kernels_->rope_tail(entry, dim, 1, std::span(&position, 1), compress_rope_, false);
  std::ranges::copy(entry, state.entry(layer_index, pool, window).begin());
}

// Each token feeds the entry of its own window (disjoint windows, HCA: all
// `dim` channels; overlapping, CSA: its second half) and, overlapping, the
// next window's entry (its first half), whose pool opens at the window's
// first token. A token continues the state its predecessor left.
void DeepseekV4Reference::compress(std::int32_t layer_index, DeepseekV4Pool pool, const Compressor& c,
                                   std::int64_t dim, const StepRows& rows, std::span<const float> kv,
                                   std::span<const float> gate) const {
  const std::int64_t width = static_cast<std::int64_t>(kv.size()) / rows.size();
  const std::int64_t rate = static_cast<std::int64_t>(c.ape.size()) / width;
  const bool overlap = width == 2 * dim;
  std::vector<float> gates(dim);
  for (std::int64_t r = 0; r < rows.size(); ++r) {
    DeepseekV4SequenceState& state = *rows.states[r];
    const std::int64_t p = rows.positions[r], w = p / rate, slot = p % rate;
    auto feed = [&](std::int64_t entry, std::int64_t half) {
      const std::span<float> pool_state = continue_pool_state(
          state, layer_index, pool, entry, p, deepseek_v4_entry_first_token(entry, rate, overlap));
      for (std::int64_t ch = 0; ch < dim; ++ch) gates[ch] = gate[r * width + half + ch] + c.ape[slot * width + half + ch];
      deepseek_v4_pool_fold(pool_state, kv.subspan(r * width + half, dim), gates);
    };
    feed(w, overlap ? dim : 0);
    if (overlap) feed(w + 1, 0);
    if ((p + 1) % rate == 0) emit_entry(layer_index, pool, c, dim, state, w);
  }
}

void DeepseekV4Reference::run_attention(std::int32_t layer_index, StepRows& rows, std::span<const float> x,
                                        std::span<float> out) const {
  const DeepseekV4Kernels& k = *kernels_;
  const Layer& layer = layers_[layer_index];
  const Attention& a = layer.attention;
  const std::int64_t n = rows.size(), hidden = config_.hidden_size, heads = config_.num_heads;
  const std::int64_t hd = config_.head_dim, q_lora = ds_.q_lora_rank;
  const float eps = config_.rms_norm_eps;
  const RotaryTable& rope = layer.type == DeepseekV4Attention::sliding ? main_rope_ : compress_rope_;

  // Queries: q_a, its norm, q_b, an unweighted norm per head, rope.
  rows.q_residual.assign(n * q_lora, 0.0f);
  k.linear(x, a.wq_a, hidden, rows.q_residual);
  k.rms_norm(rows.q_residual, q_lora, a.q_norm, eps);
  std::vector<float> q(n * heads * hd);
  k.linear(rows.q_residual, a.wq_b, q_lora, q);
  k.rms_norm(q, hd, {}, eps);
  k.rope_tail(q, hd, heads, rows.positions, rope, false);
  // The shared K=V latent of each new token joins its sequence's window
  // (stored after the attention: it may take the slot of a position the
  // step's earlier rows still see).
  std::vector<float> kv(n * hd);
  k.linear(x, a.wkv, hidden, kv);
  k.rms_norm(kv, hd, a.kv_norm, eps);
  k.rope_tail(kv, hd, 1, rows.positions, rope, false);

  const std::int32_t rate = ds_.compress_rate(layer.type);
  const std::int64_t ih = ds_.index_n_heads, ihd = ds_.index_head_dim;
  std::vector<float> index_q, index_weights;
  if (a.compressor) {
    const std::int64_t width = static_cast<std::int64_t>(a.compressor->wkv.size()) / hidden;
    std::vector<float> ckv(n * width), cgate(n * width);
    k.linear(x, a.compressor->wkv, hidden, ckv);
    k.linear(x, a.compressor->wgate, hidden, cgate);
    compress(layer_index, DeepseekV4Pool::compressor, *a.compressor, hd, rows, ckv, cgate);
  }
  if (a.indexer) {
    const Indexer& idx = *a.indexer;
    std::vector<float> ikv(n * 2 * ihd), igate(n * 2 * ihd);
    k.linear(x, idx.compressor.wkv, hidden, ikv);
    k.linear(x, idx.compressor.wgate, hidden, igate);
    compress(layer_index, DeepseekV4Pool::indexer, idx.compressor, ihd, rows, ikv, igate);
    index_q.assign(n * ih * ihd, 0.0f);
    k.linear(rows.q_residual, idx.wq_b, q_lora, index_q);
    k.rope_tail(index_q, ihd, ih, rows.positions, compress_rope_, false);
    index_weights.assign(n * ih, 0.0f);
    k.linear(x, idx.weights_proj, hidden, index_weights);
    const float weight_scale = 1.0f / std::sqrt(static_cast<float>(ih));
    for (float& w : index_weights) w *= weight_scale;
  }

  // Per query: the window (the last sliding_window tokens, itself included),
  // then the compressed entries whose windows ended at or before it.
  const SinkAttentionShape shape{.num_heads = heads,
                                 .head_dim = hd,
                                 .softmax_scale = 1.0f / std::sqrt(static_cast<float>(hd))};
  std::vector<float> keys, index_keys, attn(n * heads * hd);
  auto append_to = [](std::vector<float>& v, std::span<const float> more) { v.insert(v.end(), more.begin(), more.end()); };
  for (std::int64_t r = 0; r < n; ++r) {
    DeepseekV4SequenceState& state = *rows.states[r];
    const std::int64_t p = rows.positions[r];
    keys.clear();
    const std::int64_t step_first = rows.first_row[r], step_first_position = rows.positions[step_first];
    for (std::int64_t t = std::max<std::int64_t>(0, p - ds_.sliding_window + 1); t <= p; ++t)
      append_to(keys, t >= step_first_position ? row(kv, step_first + t - step_first_position, hd)
                                               : state.window_latent(layer_index, t));
    if (a.compressor) {
      const std::int64_t num_visible = (p + 1) / rate;
      std::vector<std::int64_t> picked;
      if (a.indexer) {
        index_keys.clear();
        for (std::int64_t e = 0; e < num_visible; ++e)
          append_to(index_keys, state.entry(layer_index, DeepseekV4Pool::indexer, e));
        picked = k.indexer_top_k(row(index_q, r, ih * ihd), row(index_weights, r, ih), index_keys, ihd, num_visible,
                                 ds_.index_topk);
      } else {
        for (std::int64_t e = 0; e < num_visible; ++e) picked.push_back(e);
      }
      for (std::int64_t e : picked) append_to(keys, state.entry(layer_index, DeepseekV4Pool::compressor, e));
    }
    k.sink_attention(row(q, r, heads * hd), keys, a.sinks, shape, row(attn, r, heads * hd));
  }
  for (std::int64_t r = 0; r < n; ++r)
    std::ranges::copy(row(kv, r, hd), rows.states[r]->window_latent(layer_index, rows.positions[r]).begin());
  // The values carried their keys' rope: rotate the output back by the query's angle.
  k.rope_tail(attn, hd, heads, rows.positions, rope, true);
  // Grouped output: each group of heads to o_lora_rank by its block of wo_a, then wo_b.
  const std::int64_t groups = ds_.o_groups, group_in = heads * hd / groups, o_lora = ds_.o_lora_rank;
  std::vector<float> grouped(n * groups * o_lora);
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t g = 0; g < groups; ++g) {
      const auto in = row(attn, r, heads * hd).subspan(g * group_in, group_in);
      k.linear(in, std::span<const float>(a.wo_a).subspan(g * o_lora * group_in, o_lora * group_in), group_in,
               std::span<float>(grouped).subspan((r * groups + g) * o_lora, o_lora));
    }
  k.linear(grouped, a.wo_b, groups * o_lora, out);
}

void DeepseekV4Reference::run_moe(const Layer& layer, const StepRows& rows, std::span<const float> x,
                                  std::span<float> out) const {
  const DeepseekV4Kernels& k = *kernels_;
  const Moe& moe = layer.moe;
  const std::int64_t n = rows.size(), hidden = config_.hidden_size, top_k = ds_.num_experts_per_tok;
  const std::int64_t experts = ds_.n_routed_experts;
  std::vector<float> logits(n * experts);
  k.linear(x, moe.router, hidden, logits);
  std::vector<std::int32_t> ids(top_k);
  std::vector<float> weights(top_k);
  std::fill(out.begin(), out.end(), 0.0f);
  for (std::int64_t r = 0; r < n; ++r) {
    std::span<const std::int32_t> hashed;
    if (!moe.tid2eid.empty()) hashed = std::span(moe.tid2eid).subspan(rows.tokens[r] * top_k, top_k);
    k.route_sqrtsoftplus(row(logits, r, experts), moe.bias, hashed, top_k, ds_.routed_scaling_factor, ids, weights);
    const auto xr = x.subspan(r * hidden, hidden);
    const auto yr = out.subspan(r * hidden, hidden);
    for (std::int64_t i = 0; i < top_k; ++i)
      k.clamped_swiglu(xr, moe.gate_up[ids[i]], moe.down[ids[i]], ds_.swiglu_limit, weights[i], yr);
    k.clamped_swiglu(xr, moe.shared_gate_up, moe.shared_down, ds_.swiglu_limit, 1.0f, yr);
  }
}

Result<std::vector<float>> DeepseekV4Reference::append(Sequence& sequence, std::span<const TokenId> tokens) const {
  if (tokens.empty()) return Error{"deepseek_v4: append() needs at least one token"};
  SLUICE_CHECK_EQ(sequence.layers_.size(), layers_.size());
  const StepSequence step{.state = &sequence, .first_position = sequence.num_tokens, .tokens = tokens};
  const std::int64_t last_row = static_cast<std::int64_t>(tokens.size()) - 1;
  SLUICE_TRY_ASSIGN(logits, forward(std::span(&step, 1), std::span(&last_row, 1)));
  sequence.num_tokens += static_cast<std::int64_t>(tokens.size());
  return logits;
}

const DeepseekV4QuantizedLinear* DeepseekV4Reference::quantized(const std::string& name) const {
  const auto it = quantized_.find(name);
  return it == quantized_.end() ? nullptr : &it->second;
}

Result<std::vector<float>> DeepseekV4Reference::forward(std::span<const StepSequence> sequences,
                                                        std::span<const std::int64_t> sample_rows) const {
  if (!quantized_.empty())
    return Error{"deepseek_v4: loaded with keep_quantized (for a device forward); the reference cannot run it"};
  const DeepseekV4Kernels& k = *kernels_;
  const std::int64_t hidden = config_.hidden_size, hc = ds_.hc_mult, vocab = config_.vocab_size;
  StepRows rows;
  for (const StepSequence& seq : sequences) {
    SLUICE_CHECK(seq.state != nullptr);
    const std::int64_t first_row = rows.size();
    for (std::size_t i = 0; i < seq.tokens.size(); ++i) {
      if (seq.tokens[i] < 0 || seq.tokens[i] >= vocab)
        return Error{fmt::format("deepseek_v4: token id {} is outside the vocabulary of {}", seq.tokens[i], vocab)};
      rows.positions.push_back(seq.first_position + static_cast<std::int64_t>(i));
      rows.tokens.push_back(seq.tokens[i]);
      rows.states.push_back(seq.state);
      rows.first_row.push_back(first_row);
    }
    seq.state->reserve(seq.first_position + static_cast<std::int64_t>(seq.tokens.size()));
  }
  const std::int64_t n = rows.size();
  for (std::int64_t r : sample_rows) SLUICE_CHECK(r >= 0 && r < n);
  // Every stream starts as the token's embedding.
  std::vector<float> streams(n * hc * hidden);
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t j = 0; j < hc; ++j)
      std::copy_n(embed_.begin() + rows.tokens[r] * hidden, hidden, streams.begin() + (r * hc + j) * hidden);

  const HyperConnectionShape shape = hc_shape();
  std::vector<HyperConnectionMix> mixes(n);
  std::vector<float> x(n * hidden), y(n * hidden);
  // One sub-layer: collapse each row's streams, norm, run, expand back.
  auto sub_layer = [&](const HyperConnection& site, const std::vector<float>& norm, auto&& run) {
    for (std::int64_t r = 0; r < n; ++r) {
      k.hc_pre(row(streams, r, hc * hidden), site.view(), shape, mixes[r]);
      std::copy(mixes[r].collapsed.begin(), mixes[r].collapsed.end(), x.begin() + r * hidden);
    }
    k.rms_norm(x, hidden, norm, config_.rms_norm_eps);
    run();
    for (std::int64_t r = 0; r < n; ++r) k.hc_post(row(streams, r, hc * hidden), row(y, r, hidden), mixes[r], shape);
  };
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const Layer& layer = layers_[l];
    sub_layer(layer.attn_hc, layer.attn_norm, [&] { run_attention(static_cast<std::int32_t>(l), rows, x, y); });
    sub_layer(layer.ffn_hc, layer.ffn_norm, [&] { run_moe(layer, rows, x, y); });
  }
  std::vector<float> last(hidden), logits(sample_rows.size() * vocab);
  for (std::size_t i = 0; i < sample_rows.size(); ++i) {
    k.hc_head(row(streams, sample_rows[i], hc * hidden), hc_head_.view(), shape, last);
    k.rms_norm(last, hidden, final_norm_, config_.rms_norm_eps);
    k.linear(last, head_, hidden, row(logits, static_cast<std::int64_t>(i), vocab));
  }
  return logits;
}

}  // namespace sluice
