#include "sluice/model/make_model.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "sluice/backend/float_convert.h"
#include "sluice/common/io.h"
#include "sluice/common/rng.h"
#include "sluice/model/tokenizer_builder.h"

namespace sluice {
namespace {

using nlohmann::ordered_json;

// How a tensor's random values are drawn: uniform in center ± spread.
struct Init {
  float center = 0.0f;
  float spread = 0.0f;
};

struct PendingTensor {
  std::string name;
  Shape shape;
  Init init;
};

std::uint64_t name_hash(std::string_view name) {
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  return h;
}

// Values are a function of (seed, tensor name, index) only, so adding a tensor
// never changes the others.
std::string random_tensor_bytes(const PendingTensor& t, std::uint64_t seed, DType dtype) {
  SplitMix64 rng(seed ^ name_hash(t.name));
  const auto n = static_cast<std::size_t>(t.shape.numel());
  std::string bytes(n * dtype_size_bytes(dtype), '\0');
  for (std::size_t i = 0; i < n; ++i) {
    const float value = t.init.center + t.init.spread * static_cast<float>(2.0 * rng.uniform() - 1.0);
    if (dtype == DType::f32) {
      std::memcpy(bytes.data() + 4 * i, &value, 4);
    } else {
      SLUICE_CHECK(dtype == DType::bf16);
      const std::uint16_t bits = f32_to_bf16(value);
      std::memcpy(bytes.data() + 2 * i, &bits, 2);
    }
  }
  return bytes;
}

Status write_safetensors(const std::string& path, const std::vector<PendingTensor>& tensors, std::uint64_t seed,
                         DType dtype) {
  ordered_json header = ordered_json::object();
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    const std::uint64_t bytes = static_cast<std::uint64_t>(t.shape.numel()) * dtype_size_bytes(dtype);
    std::vector<std::int64_t> dims(t.shape.dims.begin(), t.shape.dims.begin() + t.shape.rank);
    header[t.name] = {{"dtype", dtype_name(dtype)}, {"shape", dims}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  header["__metadata__"] = {{"format", "pt"}, {"producer", "sluice make-model"}};
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');  // align the data region
  std::string file;
  const std::uint64_t header_bytes = header_text.size();
  file.append(reinterpret_cast<const char*>(&header_bytes), 8);
  file += header_text;
  for (const auto& t : tensors) file += random_tensor_bytes(t, seed, dtype);
  return write_file(path, file);
}

std::vector<PendingTensor> llama_tensors(const MakeModelOptions& o, std::int32_t head_dim, bool tied) {
  const std::int64_t h = o.hidden_size, inter = o.intermediate_size, v = o.vocab_size;
  const std::int64_t q = std::int64_t{o.num_heads} * head_dim, kv = std::int64_t{o.num_kv_heads} * head_dim;
  // Linear weights scaled by fan-in keep activations near unit size, so logits
  // spread out and greedy choices are not decided by rounding.
  auto linear = [](std::int64_t fan_in) { return Init{0.0f, std::sqrt(3.0f / static_cast<float>(fan_in))}; };
  const Init norm{1.0f, 0.2f};
  const Init bias{0.0f, 0.2f};
  std::vector<PendingTensor> out;
  // A tied head scores each token by its own embedding: a unit-sized embedding
  // would outweigh what the layers add to the residual, and every greedy step
  // would repeat the last token. A smaller one lets the layers decide.
  const Init embedding{0.0f, tied ? 0.05f : 1.0f};
  out.push_back({"model.embed_tokens.weight", {v, h}, embedding});
  for (std::int32_t i = 0; i < o.num_layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    out.push_back({p + "input_layernorm.weight", {h}, norm});
    out.push_back({p + "self_attn.q_proj.weight", {q, h}, linear(h)});
    out.push_back({p + "self_attn.k_proj.weight", {kv, h}, linear(h)});
    out.push_back({p + "self_attn.v_proj.weight", {kv, h}, linear(h)});
    if (o.architecture == Architecture::qwen2) {
      out.push_back({p + "self_attn.q_proj.bias", {q}, bias});
      out.push_back({p + "self_attn.k_proj.bias", {kv}, bias});
      out.push_back({p + "self_attn.v_proj.bias", {kv}, bias});
    }
    if (o.architecture == Architecture::qwen3) {
      out.push_back({p + "self_attn.q_norm.weight", {head_dim}, norm});
      out.push_back({p + "self_attn.k_norm.weight", {head_dim}, norm});
    }
    out.push_back({p + "self_attn.o_proj.weight", {h, q}, linear(q)});
    out.push_back({p + "post_attention_layernorm.weight", {h}, norm});
    out.push_back({p + "mlp.gate_proj.weight", {inter, h}, linear(h)});
    out.push_back({p + "mlp.up_proj.weight", {inter, h}, linear(h)});
    out.push_back({p + "mlp.down_proj.weight", {h, inter}, linear(inter)});
  }
  // With the small tied embedding, a larger final norm gain gives logits the
  // spread of an untied head (trained tied models have gains of several units).
  out.push_back({"model.norm.weight", {h}, tied ? Init{8.0f, 1.0f} : norm});
  if (!tied) out.push_back({"lm_head.weight", {v, h}, linear(h)});
  return out;
}

// Each architecture exercises what makes it different: Llama 3 rope scaling,
// qwen2's qkv bias and tied embeddings, qwen3's q/k norm and explicit head_dim.
ordered_json config_json(const MakeModelOptions& o, std::int32_t head_dim, bool tied, const BuiltTokenizer& tok) {
  static constexpr const char* kClassNames[] = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
                                                "Qwen3ForCausalLM"};
  ordered_json c = {{"architectures", {kClassNames[static_cast<int>(o.architecture)]}},
                    {"model_type", architecture_name(o.architecture)},
                    {"vocab_size", o.vocab_size},
                    {"hidden_size", o.hidden_size},
                    {"intermediate_size", o.intermediate_size},
                    {"num_hidden_layers", o.num_layers},
                    {"num_attention_heads", o.num_heads},
                    {"num_key_value_heads", o.num_kv_heads},
                    {"hidden_act", "silu"},
                    {"max_position_embeddings", o.max_position_embeddings},
                    {"rms_norm_eps", 1e-5},
                    {"tie_word_embeddings", tied},
                    {"bos_token_id", tok.bos_token_id},
                    {"eos_token_id", {tok.eos_token_id, tok.end_of_turn_token_id}},
                    {"torch_dtype", o.dtype == DType::bf16 ? "bfloat16" : "float32"}};
  switch (o.architecture) {
    case Architecture::llama:
      c["rope_theta"] = 500000.0;
      // Scaled to a quarter of the context, as Llama 3.1 scales 8k to 128k, so
      // long golden prompts run past the original length.
      c["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", 8.0},
                           {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0},
                           {"original_max_position_embeddings", o.max_position_embeddings / 4}};
      c["attention_bias"] = false;
      c["mlp_bias"] = false;
      break;
    case Architecture::mistral:
      c["rope_theta"] = 1000000.0;
      c["sliding_window"] = nullptr;
      c["head_dim"] = head_dim;
      break;
    case Architecture::qwen2:
      c["rope_theta"] = 1000000.0;
      c["use_sliding_window"] = false;
      c["sliding_window"] = o.max_position_embeddings;
      break;
    case Architecture::qwen3:
      c["rope_theta"] = 1000000.0;
      c["head_dim"] = head_dim;
      c["attention_bias"] = false;
      c["use_sliding_window"] = false;
      c["sliding_window"] = nullptr;
      break;
  }
  return c;
}

}  // namespace

Status make_model(const MakeModelOptions& o) {
  if (o.out_dir.empty()) return Error{"--out is required"};
  for (auto [value, name] : {std::pair{o.num_layers, "--layers"}, {o.hidden_size, "--hidden"}, {o.num_heads, "--heads"},
                             {o.num_kv_heads, "--kv-heads"}, {o.intermediate_size, "--intermediate"},
                             {o.vocab_size, "--vocab"}})
    if (value <= 0) return Error{fmt::format("{} must be positive", name)};
  if (o.num_heads % o.num_kv_heads != 0)
    return Error{fmt::format("--kv-heads {} must divide --heads {}", o.num_kv_heads, o.num_heads)};
  const std::int32_t head_dim = o.head_dim > 0 ? o.head_dim : o.hidden_size / o.num_heads;
  if (o.head_dim == 0 && o.hidden_size % o.num_heads != 0)
    return Error{fmt::format("--hidden {} must be a multiple of --heads {}", o.hidden_size, o.num_heads)};
  if (head_dim % 2 != 0) return Error{fmt::format("head dimension {} must be even", head_dim)};
  if (o.dtype != DType::bf16 && o.dtype != DType::f32) return Error{"--dtype must be bf16 or f32"};
  SLUICE_TRY_ASSIGN(tokenizer, build_byte_level_tokenizer(o.vocab_size));
  const bool tied = o.architecture == Architecture::qwen2;

  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  if (ec) return Error{fmt::format("cannot create {}: {}", o.out_dir, ec.message())};
  const std::string dir = o.out_dir + "/";
  SLUICE_TRY(write_file(dir + "config.json", config_json(o, head_dim, tied, tokenizer).dump(2) + "\n"));
  SLUICE_TRY(write_safetensors(dir + "model.safetensors", llama_tensors(o, head_dim, tied), o.seed, o.dtype));
  SLUICE_TRY(write_file(dir + "tokenizer.json", tokenizer.tokenizer_json));
  SLUICE_TRY(write_file(dir + "tokenizer_config.json", tokenizer.tokenizer_config_json));
  const ordered_json generation = {{"bos_token_id", tokenizer.bos_token_id},
                                   {"eos_token_id", {tokenizer.eos_token_id, tokenizer.end_of_turn_token_id}}};
  SLUICE_TRY(write_file(dir + "generation_config.json", generation.dump(2) + "\n"));
  SLUICE_TRY(write_file(dir + "README.md",
                        "# Random weights\n\nMade by `sluice make-model` for tests: the weights are random, so the "
                        "model produces noise, not language.\n"));
  return Ok{};
}

}  // namespace sluice
