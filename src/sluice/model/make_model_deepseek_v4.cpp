// make-model --arch deepseek_v4: the layout DeepSeek publishes V4 in (embed,
// layers.N.attn.*, layers.N.ffn.experts.E.w1/w2/w3, hc_* hyper-connection
// parameters, head, mtp.*), with transformers' DeepseekV4Config fields in
// config.json. f32 or bf16; the mHC parameters, sinks, window position biases
// and the router bias stay f32 as DeepSeek stores them, tid2eid is I32.
// --dtype fp8 writes what V4-Flash ships: the attention projections (wq_a,
// wq_b, wkv, wo_a, wo_b, the indexer's wq_b), the shared expert and MTP's
// e_proj / h_proj in FP8 e4m3 with F8_E8M0 128x128 `.scale` blocks; routed
// experts as FP4 e2m1 pairs with one F8_E8M0 `.scale` per 32 inputs
// (expert_dtype fp4); compressors, the indexer's weights_proj, the router,
// norms, embed and head in bf16 (inference/model.py's dtypes).
#include <fmt/format.h>

#include "sluice/model/make_model_parts.h"

namespace sluice {
namespace {

std::int64_t v4_head_dim(const MakeModelOptions& o) { return o.head_dim > 0 ? o.head_dim : 32; }

// The attention kind of each layer, from the letters of --layer-types
// repeated; by default sliding, CSA, HCA, so a tiny model has every kind.
std::vector<char> layer_letters(const MakeModelOptions& o) {
  const std::string_view spec = o.deepseek_v4.layer_types_or_default();
  std::vector<char> letters;
  for (std::int32_t i = 0; i < o.num_layers; ++i) letters.push_back(spec[i % spec.size()]);
  return letters;
}

constexpr Init kF32Bias{0.0f, 0.5f};

// An FP8 linear in an fp8 model (PendingTensor::quantizable).
PendingTensor fp8_linear(const std::string& name, std::int64_t rows, std::int64_t cols) {
  return PendingTensor{name, {rows, cols}, linear_init(cols), true};
}

void add_compressor(std::vector<PendingTensor>& out, const std::string& p, std::int64_t hidden, std::int64_t dim,
                    std::int64_t width, std::int64_t rate) {
  out.push_back({p + "wkv.weight", {width, hidden}, linear_init(hidden)});
  out.push_back({p + "wgate.weight", {width, hidden}, linear_init(hidden)});
  out.push_back({p + "ape", {rate, width}, kF32Bias, false, true});
  out.push_back({p + "norm.weight", {dim}, kNormInit});
}

// A routed expert is FP4 in an fp8 model (FP8 with fp8_experts), the shared one FP8.
enum class Expert { routed, shared };

void add_swiglu(std::vector<PendingTensor>& out, const std::string& p, std::int64_t hidden, std::int64_t inter,
                Expert kind, bool fp8_experts) {
  for (PendingTensor t : {fp8_linear(p + "w1.weight", inter, hidden), fp8_linear(p + "w2.weight", hidden, inter),
                          fp8_linear(p + "w3.weight", inter, hidden)}) {
    t.fp4_expert = kind == Expert::routed && !fp8_experts;
    t.quantizable = kind == Expert::shared || fp8_experts;
    out.push_back(t);
  }
}

// Mixes near unit size (fn over the normed streams), so pre, post and comb vary per token.
void add_hyper_connection(std::vector<PendingTensor>& out, const std::string& p, std::int64_t mixes,
                          std::int64_t scales, std::int64_t hc, std::int64_t hidden) {
  out.push_back({p + "fn", {mixes, hc * hidden}, linear_init(hc * hidden), false, true});
  out.push_back({p + "base", {mixes}, kF32Bias, false, true});
  out.push_back({p + "scale", {scales}, Init{1.0f, 0.3f}, false, true});
}

void add_layer(std::vector<PendingTensor>& out, const MakeModelOptions& o, const std::string& p, char type,
               bool hash) {
  const DeepseekV4Shape& d = o.deepseek_v4;
  const std::int64_t h = o.hidden_size, heads = o.num_heads, hd = v4_head_dim(o), hc = d.hc_mult;
  add_hyper_connection(out, p + "hc_attn_", (2 + hc) * hc, 3, hc, h);
  add_hyper_connection(out, p + "hc_ffn_", (2 + hc) * hc, 3, hc, h);
  out.push_back({p + "attn_norm.weight", {h}, kNormInit});
  out.push_back({p + "ffn_norm.weight", {h}, kNormInit});
  const std::string a = p + "attn.";
  out.push_back(fp8_linear(a + "wq_a.weight", d.q_lora_rank, h));
  out.push_back({a + "q_norm.weight", {d.q_lora_rank}, kNormInit});
  out.push_back(fp8_linear(a + "wq_b.weight", heads * hd, d.q_lora_rank));
  out.push_back(fp8_linear(a + "wkv.weight", hd, h));
  out.push_back({a + "kv_norm.weight", {hd}, kNormInit});
  const std::int64_t group_in = heads * hd / d.o_groups, o_width = std::int64_t{d.o_groups} * d.o_lora_rank;
  out.push_back(fp8_linear(a + "wo_a.weight", o_width, group_in));
  out.push_back(fp8_linear(a + "wo_b.weight", h, o_width));
  out.push_back({a + "attn_sink", {heads}, Init{0.0f, 1.0f}, false, true});
  if (type == 'h') add_compressor(out, a + "compressor.", h, hd, hd, d.hca_compress_rate);
  if (type == 'c') {
    add_compressor(out, a + "compressor.", h, hd, 2 * hd, d.csa_compress_rate);
    out.push_back(fp8_linear(a + "indexer.wq_b.weight", std::int64_t{d.index_n_heads} * d.index_head_dim,
                             d.q_lora_rank));
    out.push_back({a + "indexer.weights_proj.weight", {d.index_n_heads, h}, linear_init(h)});
    add_compressor(out, a + "indexer.compressor.", h, d.index_head_dim, 2 * d.index_head_dim, d.csa_compress_rate);
  }
  const std::string f = p + "ffn.";
  out.push_back({f + "gate.weight", {d.n_routed_experts, h}, linear_init(h)});
  if (hash) {
    PendingTensor table{f + "gate.tid2eid", {o.vocab_size, d.num_experts_per_tok}, Init{}};
    table.table_range = d.n_routed_experts;
    out.push_back(table);
  } else {
    out.push_back({f + "gate.bias", {d.n_routed_experts}, Init{0.0f, 0.1f}, false, true});
  }
  for (std::int32_t e = 0; e < d.n_routed_experts; ++e)
    add_swiglu(out, fmt::format("{}experts.{}.", f, e), h, d.moe_intermediate_size, Expert::routed, d.fp8_experts);
  add_swiglu(out, f + "shared_experts.", h, d.moe_intermediate_size, Expert::shared, d.fp8_experts);
}

}  // namespace

Status check_deepseek_v4_options(const MakeModelOptions& o) {
  const DeepseekV4Shape& d = o.deepseek_v4;
  for (auto [value, name] :
       {std::pair{d.q_lora_rank, "--q-lora-rank"}, {d.qk_rope_head_dim, "--qk-rope-head-dim"},
        {d.o_groups, "--o-groups"}, {d.o_lora_rank, "--o-lora-rank"}, {d.csa_compress_rate, "--csa-rate"},
        {d.hca_compress_rate, "--hca-rate"}, {d.sliding_window, "--sliding-window"},
        {d.index_n_heads, "--index-heads"}, {d.index_head_dim, "--index-head-dim"}, {d.index_topk, "--index-topk"},
        {d.hc_mult, "--hc-mult"}, {d.hc_sinkhorn_iters, "--sinkhorn-iters"}, {d.n_routed_experts, "--experts"},
        {d.num_experts_per_tok, "--experts-per-token"}, {d.moe_intermediate_size, "--moe-intermediate"}})
    if (value <= 0) return Error{fmt::format("{} must be positive", name)};
  if (d.num_hash_layers < 0 || d.mtp_layers < 0) return Error{"--hash-layers and --mtp-layers must be >= 0"};
  const std::int64_t hd = v4_head_dim(o);
  if (d.qk_rope_head_dim % 2 != 0 || d.qk_rope_head_dim > hd || d.qk_rope_head_dim > d.index_head_dim)
    return Error{"--qk-rope-head-dim must be even and at most the head and index head dims"};
  if (std::int64_t{o.num_heads} * hd % d.o_groups != 0) return Error{"--o-groups must divide heads * head_dim"};
  if (d.num_experts_per_tok > d.n_routed_experts) return Error{"--experts-per-token exceeds --experts"};
  for (char c : d.layer_types_or_default())
    if (c != 's' && c != 'c' && c != 'h')
      return Error{fmt::format("--layer-types '{}': one letter per layer, s, c or h", d.layer_types_or_default())};
  if (d.yarn_factor != 0 && d.yarn_factor < 1) return Error{"--yarn-factor must be 0 or >= 1"};
  if (d.yarn_factor > 0 && o.max_position_embeddings % static_cast<std::int32_t>(d.yarn_factor) != 0)
    return Error{"--yarn-factor must divide --max-position"};
  // FP4 experts pack two inputs a byte: w1 / w3 take --hidden inputs, w2 --moe-intermediate.
  if (o.dtype == DType::f8_e4m3 && (o.hidden_size % 2 != 0 || d.moe_intermediate_size % 2 != 0))
    return Error{"--dtype fp8 writes FP4 experts, two inputs a byte: --hidden and --moe-intermediate must be even"};
  return Ok{};
}

std::vector<PendingTensor> deepseek_v4_tensors(const MakeModelOptions& o) {
  const DeepseekV4Shape& d = o.deepseek_v4;
  const std::int64_t h = o.hidden_size, v = o.vocab_size, hc = d.hc_mult;
  std::vector<PendingTensor> out;
  out.push_back({"embed.weight", {v, h}, Init{0.0f, 1.0f}});
  const std::vector<char> letters = layer_letters(o);
  for (std::int32_t i = 0; i < o.num_layers; ++i)
    add_layer(out, o, fmt::format("layers.{}.", i), letters[i], i < d.num_hash_layers);
  out.push_back({"norm.weight", {h}, kNormInit});
  out.push_back({"head.weight", {v, h}, linear_init(h)});
  add_hyper_connection(out, "hc_head_", hc, 1, hc, h);
  // The MTP block's own tensors (not run): its projections and one decoder layer.
  for (std::int32_t j = 0; j < d.mtp_layers; ++j) {
    const std::string p = fmt::format("mtp.{}.", j);
    out.push_back({p + "enorm.weight", {h}, kNormInit});
    out.push_back({p + "hnorm.weight", {h}, kNormInit});
    out.push_back(fp8_linear(p + "e_proj.weight", h, h));
    out.push_back(fp8_linear(p + "h_proj.weight", h, h));
    add_layer(out, o, p, 's', false);
  }
  return out;
}

nlohmann::ordered_json deepseek_v4_config_json(const MakeModelOptions& o, const BuiltTokenizer& tok) {
  const DeepseekV4Shape& d = o.deepseek_v4;
  nlohmann::ordered_json c = {
      {"architectures", {"DeepseekV4ForCausalLM"}},
      {"model_type", "deepseek_v4"},
      {"vocab_size", o.vocab_size},
      {"hidden_size", o.hidden_size},
      {"moe_intermediate_size", d.moe_intermediate_size},
      {"num_hidden_layers", o.num_layers},
      {"num_attention_heads", o.num_heads},
      {"num_key_value_heads", 1},
      {"head_dim", v4_head_dim(o)},
      {"q_lora_rank", d.q_lora_rank},
      // The legacy spellings DeepSeek's own config.json uses, folded in by the loaders.
      {"qk_rope_head_dim", d.qk_rope_head_dim},
      {"num_hash_layers", d.num_hash_layers},
      {"o_groups", d.o_groups},
      {"o_lora_rank", d.o_lora_rank},
      {"n_routed_experts", d.n_routed_experts},
      {"n_shared_experts", 1},
      {"num_experts_per_tok", d.num_experts_per_tok},
      {"scoring_func", "sqrtsoftplus"},
      {"norm_topk_prob", true},
      {"routed_scaling_factor", d.routed_scaling_factor},
      {"swiglu_limit", d.swiglu_limit},
      {"sliding_window", d.sliding_window},
      {"index_n_heads", d.index_n_heads},
      {"index_head_dim", d.index_head_dim},
      {"index_topk", d.index_topk},
      {"hc_mult", d.hc_mult},
      {"hc_sinkhorn_iters", d.hc_sinkhorn_iters},
      {"hc_eps", 1e-6},
      {"num_nextn_predict_layers", d.mtp_layers},
      {"hidden_act", "silu"},
      {"max_position_embeddings", o.max_position_embeddings},
      {"rms_norm_eps", 1e-6},
      {"rope_theta", d.rope_theta},
      {"compress_rope_theta", d.compress_rope_theta},
      {"attention_bias", false},
      {"tie_word_embeddings", false},
      {"bos_token_id", tok.bos_token_id},
      {"eos_token_id", tok.eos_token_id},
      {"torch_dtype", o.dtype == DType::f32 ? "float32" : "bfloat16"}};
  nlohmann::ordered_json types = nlohmann::ordered_json::array();
  for (char letter : layer_letters(o))
    types.push_back(letter == 's'   ? "sliding_attention"
                    : letter == 'c' ? "compressed_sparse_attention"
                                    : "heavily_compressed_attention");
  c["layer_types"] = types;
  c["compress_rates"] = {{"compressed_sparse_attention", d.csa_compress_rate},
                         {"heavily_compressed_attention", d.hca_compress_rate}};
  if (d.yarn_factor > 0)
    c["rope_scaling"] = {{"type", "yarn"},
                         {"factor", d.yarn_factor},
                         {"original_max_position_embeddings",
                          static_cast<std::int32_t>(o.max_position_embeddings / d.yarn_factor)},
                         {"beta_fast", 32},
                         {"beta_slow", 1}};
  if (o.dtype == DType::f8_e4m3) {  // V4-Flash's own config.json fields
    c["expert_dtype"] = d.fp8_experts ? "fp8" : "fp4";
    c["quantization_config"] = {{"activation_scheme", "dynamic"},
                                {"fmt", "e4m3"},
                                {"quant_method", "fp8"},
                                {"scale_fmt", "ue8m0"},
                                {"weight_block_size", {128, 128}}};
  }
  return c;
}

}  // namespace sluice
