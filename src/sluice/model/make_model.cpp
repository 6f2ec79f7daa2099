#include "sluice/model/make_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "sluice/backend/float_convert.h"
#include "sluice/common/io.h"
#include "sluice/common/rng.h"
#include "sluice/model/fp4_weights.h"
#include "sluice/model/make_model_parts.h"
#include "sluice/model/tokenizer_builder.h"

namespace sluice {
namespace {

using nlohmann::ordered_json;

std::uint64_t name_hash(std::string_view name) {
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  return h;
}

// fn(begin, end) over [0, n) in contiguous pieces of at least min_per_thread
// on the machine's cores: a full-width checkpoint is tens of billions of
// values (DeepSeek-V3 at 3 dense + 3 MoE layers: ~40 GB of FP8), hours on one core.
constexpr std::int64_t kMinValuesPerThread = 1 << 20;
template <class Fn>
void parallel_for(std::int64_t n, std::int64_t min_per_thread, const Fn& fn) {
  const auto cores = static_cast<std::int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  const std::int64_t threads = std::clamp<std::int64_t>(n / min_per_thread, 1, cores);
  if (threads == 1) {
    fn(std::int64_t{0}, n);
    return;
  }
  std::vector<std::thread> pool;
  for (std::int64_t t = 0; t < threads; ++t) pool.emplace_back(fn, n * t / threads, n * (t + 1) / threads);
  for (std::thread& thread : pool) thread.join();
}

// SplitMix64 adds this to its state before each number, so the generator at
// element i of a sequence is SplitMix64(seed + i * kSplitMix64Increment).
constexpr std::uint64_t kSplitMix64Increment = 0x9e3779b97f4a7c15ULL;

// Values are a function of (seed, tensor name, index) only, so adding a tensor
// never changes the others (and any piece of a tensor can be made on its own).
std::vector<float> random_values(const PendingTensor& t, std::uint64_t seed) {
  const std::uint64_t base = seed ^ name_hash(t.name);
  std::vector<float> values(static_cast<std::size_t>(t.shape.numel()));
  parallel_for(t.shape.numel(), kMinValuesPerThread, [&](std::int64_t begin, std::int64_t end) {
    SplitMix64 rng(base + static_cast<std::uint64_t>(begin) * kSplitMix64Increment);
    for (std::int64_t i = begin; i < end; ++i) {
      const auto unit = static_cast<float>(2.0 * rng.uniform() - 1.0);
      values[static_cast<std::size_t>(i)] = t.init.center + t.init.spread * unit;
    }
  });
  return values;
}

constexpr std::int64_t kFp8BlockSize = 128;  // DeepSeek's weight_block_size, both dimensions
constexpr float kFp8Max = 448.0f;

// One tensor as stored: a pending tensor's values in a dtype, or one of the
// two tensors a quantized weight becomes (its codes and its scales).
struct StoredTensor {
  enum class Part { values, fp8_codes, fp8_scales, fp4_codes, fp4_scales };
  std::string name;
  DType dtype;
  Shape shape;
  const PendingTensor* source;
  Part part = Part::values;
  Fp8ScaleStorage scale_storage = Fp8ScaleStorage::f32_scale_inv;  // fp8 parts: how the scales round

  std::uint64_t size_bytes() const { return static_cast<std::uint64_t>(shape.numel()) * dtype_size_bytes(dtype); }
};

std::string scale_name(const std::string& weight, Fp8ScaleStorage storage) {
  if (storage == Fp8ScaleStorage::f32_scale_inv) return weight + "_scale_inv";
  return (weight.ends_with(".weight") ? weight.substr(0, weight.size() - 7) : weight) + ".scale";
}

std::vector<StoredTensor> storage_plan(const std::vector<PendingTensor>& tensors, DType dtype,
                                       Fp8ScaleStorage scales) {
  using Part = StoredTensor::Part;
  std::vector<StoredTensor> out;
  for (const PendingTensor& t : tensors) {
    if (dtype == DType::f8_e4m3 && t.fp4_expert) {
      out.push_back({t.name, DType::i8, fp4_packed_shape(t.shape), &t, Part::fp4_codes});
      out.push_back({scale_name(t.name, scales), DType::f8_e8m0, fp4_scale_shape(t.shape), &t, Part::fp4_scales});
      continue;
    }
    if (dtype == DType::f8_e4m3 && t.quantizable) {
      out.push_back({t.name, DType::f8_e4m3, t.shape, &t, Part::fp8_codes, scales});
      const Shape grid{(t.shape[0] + kFp8BlockSize - 1) / kFp8BlockSize,
                       (t.shape[1] + kFp8BlockSize - 1) / kFp8BlockSize};
      const DType scale_dtype = scales == Fp8ScaleStorage::f32_scale_inv ? DType::f32 : DType::f8_e8m0;
      out.push_back({scale_name(t.name, scales), scale_dtype, grid, &t, Part::fp8_scales, scales});
      continue;
    }
    const DType stored = t.table_range > 0 ? DType::i32
                         : t.keep_f32      ? DType::f32
                         : dtype == DType::f8_e4m3 ? DType::bf16
                                                   : dtype;
    out.push_back({t.name, stored, t.shape, &t});
  }
  return out;
}

// Per 128x128 block: scale = amax / 448 (ue8m0: rounded up to a power of
// two), so the block's largest value maps to float8's largest or below it;
// stored value = fp8(x / scale), and x ~ stored * scale.
struct QuantizedBlocks {
  std::vector<std::uint8_t> values;
  std::vector<float> scales;
};

float fp8_block_scale(float amax, Fp8ScaleStorage storage) {
  if (amax == 0.0f) return 1.0f;
  if (storage == Fp8ScaleStorage::f32_scale_inv) return amax / kFp8Max;
  constexpr float kAmaxFloor = kFp8Max * 0x1p-126f;  // keeps amax / 448 an f32 normal
  return e8m0_to_f32(f32_to_e8m0_ceil(std::max(amax, kAmaxFloor) / kFp8Max));
}

QuantizedBlocks quantize_fp8(const std::vector<float>& x, const Shape& shape, Fp8ScaleStorage storage) {
  const std::int64_t rows = shape[0], cols = shape[1];
  const std::int64_t block_rows = (rows + kFp8BlockSize - 1) / kFp8BlockSize;
  const std::int64_t block_cols = (cols + kFp8BlockSize - 1) / kFp8BlockSize;
  QuantizedBlocks q{std::vector<std::uint8_t>(x.size()), std::vector<float>(block_rows * block_cols)};
  // Blocks of 16K values: 64 blocks a piece at least.
  parallel_for(block_rows * block_cols, kMinValuesPerThread / (kFp8BlockSize * kFp8BlockSize),
               [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t block = first; block < last; ++block) {
      const std::int64_t br = block / block_cols, bc = block % block_cols;
      const std::int64_t r_end = std::min(rows, (br + 1) * kFp8BlockSize);
      const std::int64_t c_end = std::min(cols, (bc + 1) * kFp8BlockSize);
      float amax = 0.0f;
      for (std::int64_t r = br * kFp8BlockSize; r < r_end; ++r)
        for (std::int64_t c = bc * kFp8BlockSize; c < c_end; ++c) amax = std::max(amax, std::fabs(x[r * cols + c]));
      const float scale = fp8_block_scale(amax, storage);
      q.scales[br * block_cols + bc] = scale;
      for (std::int64_t r = br * kFp8BlockSize; r < r_end; ++r)
        for (std::int64_t c = bc * kFp8BlockSize; c < c_end; ++c)
          q.values[r * cols + c] = f32_to_fp8_e4m3(x[r * cols + c] / scale);
    }
  });
  return q;
}

// quantize_fp4_groups on the machine's cores, a piece of rows each (rows
// quantize independently): full-width experts are 8M values apiece.
Fp4Groups quantize_fp4_rows(const std::vector<float>& x, const Shape& shape) {
  const std::int64_t rows = shape[0], cols = shape[1], groups = fp4_scale_shape(shape)[1];
  Fp4Groups q{std::vector<std::uint8_t>(x.size() / 2), std::vector<std::uint8_t>(rows * groups)};
  parallel_for(rows, std::max<std::int64_t>(1, kMinValuesPerThread / cols), [&](std::int64_t first, std::int64_t last) {
    const Fp4Groups piece =
        quantize_fp4_groups(std::span(x).subspan(first * cols, (last - first) * cols), Shape{last - first, cols});
    std::copy(piece.packed.begin(), piece.packed.end(), q.packed.begin() + first * cols / 2);
    std::copy(piece.scale_codes.begin(), piece.scale_codes.end(), q.scale_codes.begin() + first * groups);
  });
  return q;
}

// Rows of distinct values in [0, range): a partial Fisher-Yates shuffle per row.
std::string table_bytes(const PendingTensor& t, std::uint64_t seed) {
  SplitMix64 rng(seed ^ name_hash(t.name));
  const std::int64_t rows = t.shape.rows(), cols = t.shape.cols();
  SLUICE_CHECK_LE(cols, std::int64_t{t.table_range});
  std::vector<std::int32_t> values(static_cast<std::size_t>(rows * cols)), pool(t.table_range);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int32_t i = 0; i < t.table_range; ++i) pool[i] = i;
    for (std::int64_t c = 0; c < cols; ++c) {
      const auto pick = c + static_cast<std::int64_t>(rng.uniform() * static_cast<double>(t.table_range - c));
      std::swap(pool[c], pool[std::min<std::int64_t>(pick, t.table_range - 1)]);
      values[r * cols + c] = pool[c];
    }
  }
  std::string bytes(values.size() * sizeof(std::int32_t), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// The last weight quantized: storage_plan puts its scales right after its
// codes, so both are written from one quantization.
struct QuantizedCache {
  const PendingTensor* source = nullptr;
  QuantizedBlocks fp8;
  Fp4Groups fp4;
};

std::string tensor_bytes(const StoredTensor& t, std::uint64_t seed, QuantizedCache& cache) {
  using Part = StoredTensor::Part;
  if (t.dtype == DType::i32) return table_bytes(*t.source, seed);
  std::string bytes(t.size_bytes(), '\0');
  if (t.part != Part::values) {
    const bool fp4 = t.part == Part::fp4_codes || t.part == Part::fp4_scales;
    if (cache.source != t.source) {
      cache.source = t.source;
      const std::vector<float> values = random_values(*t.source, seed);
      if (fp4)
        cache.fp4 = quantize_fp4_rows(values, t.source->shape);
      else
        cache.fp8 = quantize_fp8(values, t.source->shape, t.scale_storage);
    }
    const std::uint8_t* source = nullptr;
    std::vector<std::uint8_t> e8m0;
    switch (t.part) {
      case Part::fp4_codes: source = cache.fp4.packed.data(); break;
      case Part::fp4_scales: source = cache.fp4.scale_codes.data(); break;
      case Part::fp8_codes: source = cache.fp8.values.data(); break;
      case Part::fp8_scales:
        if (t.dtype == DType::f32) {
          source = reinterpret_cast<const std::uint8_t*>(cache.fp8.scales.data());
          break;
        }
        for (float scale : cache.fp8.scales) e8m0.push_back(f32_to_e8m0_ceil(scale));  // exact: powers of two
        source = e8m0.data();
        break;
      case Part::values: break;
    }
    std::memcpy(bytes.data(), source, bytes.size());
    return bytes;
  }
  const std::vector<float> values = random_values(*t.source, seed);
  SLUICE_CHECK(t.dtype == DType::f32 || t.dtype == DType::bf16);
  if (t.dtype == DType::f32) {
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return bytes;
  }
  const auto num_values = static_cast<std::int64_t>(values.size());
  parallel_for(num_values, kMinValuesPerThread, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const std::uint16_t bits = f32_to_bf16(values[static_cast<std::size_t>(i)]);
      std::memcpy(bytes.data() + 2 * i, &bits, 2);
    }
  });
  return bytes;
}

// Streams the tensors to `path` one at a time, so a full-width model needs no
// more memory than its largest tensor.
Status write_safetensors(const std::string& path, std::span<const StoredTensor> tensors, std::uint64_t seed) {
  ordered_json header = ordered_json::object();
  std::uint64_t offset = 0;
  for (const StoredTensor& t : tensors) {
    std::vector<std::int64_t> dims(t.shape.dims.begin(), t.shape.dims.begin() + t.shape.rank);
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", dims},
                      {"data_offsets", {offset, offset + t.size_bytes()}}};
    offset += t.size_bytes();
  }
  header["__metadata__"] = {{"format", "pt"}, {"producer", "sluice make-model"}};
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');  // align the data region
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) return Error{fmt::format("cannot write {}", path)};
  const std::uint64_t header_bytes = header_text.size();
  file.write(reinterpret_cast<const char*>(&header_bytes), 8);
  file << header_text;
  QuantizedCache quantized;  // a weight's codes and scales, from one quantization
  for (const StoredTensor& t : tensors) {
    const std::string bytes = tensor_bytes(t, seed, quantized);
    file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  file.close();
  if (!file) return Error{fmt::format("writing {} failed", path)};
  return Ok{};
}

// One file, or num_shards files of about equal size and the index transformers reads.
Status write_checkpoint(const std::string& dir, const std::vector<StoredTensor>& tensors, std::int32_t num_shards,
                        std::uint64_t seed) {
  if (num_shards <= 1) return write_safetensors(dir + "model.safetensors", tensors, seed);
  std::uint64_t total_bytes = 0;
  for (const StoredTensor& t : tensors) total_bytes += t.size_bytes();
  ordered_json weight_map = ordered_json::object();
  std::size_t begin = 0;
  std::uint64_t bytes_so_far = 0;
  for (std::int32_t shard = 0; shard < num_shards; ++shard) {
    const std::uint64_t target = total_bytes * static_cast<std::uint64_t>(shard + 1) / num_shards;
    std::size_t end = begin;
    while (end < tensors.size() && (bytes_so_far < target || shard == num_shards - 1)) bytes_so_far += tensors[end++].size_bytes();
    const std::string name = fmt::format("model-{:05d}-of-{:05d}.safetensors", shard + 1, num_shards);
    for (std::size_t i = begin; i < end; ++i) weight_map[tensors[i].name] = name;
    SLUICE_TRY(write_safetensors(dir + name, std::span(tensors).subspan(begin, end - begin), seed));
    begin = end;
  }
  const ordered_json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
  return write_file(dir + "model.safetensors.index.json", index.dump(2) + "\n");
}

std::vector<PendingTensor> llama_tensors(const MakeModelOptions& o, std::int32_t head_dim, bool tied) {
  const std::int64_t h = o.hidden_size, inter = o.intermediate_size, v = o.vocab_size;
  const std::int64_t q = std::int64_t{o.num_heads} * head_dim, kv = std::int64_t{o.num_kv_heads} * head_dim;
  const auto linear = linear_init;
  const Init norm = kNormInit;
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
  if (o.architecture == Architecture::deepseek_v3) return deepseek_v3_config_json(o, tok);
  if (o.architecture == Architecture::deepseek_v4) return deepseek_v4_config_json(o, tok);
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
    case Architecture::deepseek_v3:
    case Architecture::deepseek_v4: break;
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
  const bool is_v4 = o.architecture == Architecture::deepseek_v4;
  const bool is_deepseek = o.architecture == Architecture::deepseek_v3 || is_v4;
  if (o.architecture == Architecture::deepseek_v3) SLUICE_TRY(check_deepseek_v3_options(o));
  if (is_v4) SLUICE_TRY(check_deepseek_v4_options(o));
  if (!is_deepseek && o.num_heads % o.num_kv_heads != 0)
    return Error{fmt::format("--kv-heads {} must divide --heads {}", o.num_kv_heads, o.num_heads)};
  const std::int32_t head_dim = o.head_dim > 0 ? o.head_dim : o.hidden_size / o.num_heads;
  if (!is_deepseek && o.head_dim == 0 && o.hidden_size % o.num_heads != 0)
    return Error{fmt::format("--hidden {} must be a multiple of --heads {}", o.hidden_size, o.num_heads)};
  if (!is_deepseek && head_dim % 2 != 0) return Error{fmt::format("head dimension {} must be even", head_dim)};
  if (o.dtype != DType::bf16 && o.dtype != DType::f32 && !(is_deepseek && o.dtype == DType::f8_e4m3))
    return Error{"--dtype must be bf16 or f32 (fp8: deepseek_v3 and deepseek_v4 only)"};
  if (o.num_shards <= 0) return Error{"--shards must be positive"};
  SLUICE_TRY_ASSIGN(tokenizer, build_byte_level_tokenizer(o.vocab_size));
  const bool tied = o.architecture == Architecture::qwen2;

  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  if (ec) return Error{fmt::format("cannot create {}: {}", o.out_dir, ec.message())};
  const std::string dir = o.out_dir + "/";
  SLUICE_TRY(write_file(dir + "config.json", config_json(o, head_dim, tied, tokenizer).dump(2) + "\n"));
  const std::vector<PendingTensor> tensors = is_v4         ? deepseek_v4_tensors(o)
                                             : is_deepseek ? deepseek_v3_tensors(o)
                                                           : llama_tensors(o, head_dim, tied);
  const Fp8ScaleStorage scales = is_v4 ? Fp8ScaleStorage::ue8m0_dot_scale : Fp8ScaleStorage::f32_scale_inv;
  SLUICE_TRY(write_checkpoint(dir, storage_plan(tensors, o.dtype, scales), o.num_shards, o.seed));
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
