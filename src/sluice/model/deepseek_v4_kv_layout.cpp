#include "sluice/model/deepseek_v4_kv_layout.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "sluice/common/check.h"
#include "sluice/model/deepseek_v4_fp8_ds_mla.h"

namespace sluice {
namespace {

constexpr double kF32Bytes = 4.0;

}  // namespace

DeepseekV4KvRecords DeepseekV4KvRecords::cpu_f32(const ModelConfig& config) {
  return {.latent_bytes = kF32Bytes * config.head_dim,
          .index_key_bytes = kF32Bytes * config.deepseek_v4->index_head_dim,
          .state_value_bytes = kF32Bytes};
}

DeepseekV4KvRecords DeepseekV4KvRecords::cuda_fp8(const ModelConfig& config) {
  const Fp8DsMlaShape record{.head_dim = config.head_dim, .rope_dim = config.deepseek_v4->qk_rope_head_dim};
  return {.latent_bytes = static_cast<double>(record.bytes()),
          .index_key_bytes = static_cast<double>(config.deepseek_v4->index_head_dim) + kF32Bytes,
          .state_value_bytes = kF32Bytes};
}

std::int32_t deepseek_v4_block_alignment(const ModelConfig& config) {
  SLUICE_CHECK(config.deepseek_v4 != nullptr);
  const DeepseekV4Config& ds = *config.deepseek_v4;
  std::int32_t alignment = 1;
  for (DeepseekV4Attention type : ds.layer_types)
    if (const std::int32_t rate = ds.compress_rate(type); rate > 0) alignment = std::lcm(alignment, rate);
  return alignment;
}

std::int32_t deepseek_v4_default_block_size(const ModelConfig& config) {
  constexpr std::int32_t kDefaultBlockTokens = 1024;
  const std::int32_t alignment = deepseek_v4_block_alignment(config);
  return (kDefaultBlockTokens + alignment - 1) / alignment * alignment;
}

Result<DeepseekV4KvLayout> DeepseekV4KvLayout::make(const ModelConfig& config, std::int32_t block_size_tokens,
                                                    DeepseekV4KvFormats formats) {
  SLUICE_CHECK(config.deepseek_v4 != nullptr);
  const DeepseekV4Config& ds = *config.deepseek_v4;
  const std::int32_t alignment = deepseek_v4_block_alignment(config);
  if (block_size_tokens <= 0 || block_size_tokens % alignment != 0)
    return Error{fmt::format("--block-size {}: deepseek_v4 needs a multiple of {} (compress rates: CSA {}, HCA {}), "
                             "so that every block boundary is a compression-window boundary and a prefix-cache hit "
                             "restores the compressors' state exactly",
                             block_size_tokens, alignment, ds.csa_compress_rate, ds.hca_compress_rate),
                 ErrorCode::kInvalidArgument};
  if (formats.latents == DeepseekV4ValueFormat::e4m3_scaled)
    return Error{"deepseek_v4 KV layout: latents and entries are f32, bf16 or fp8_ds_mla records, not e4m3 with "
                 "a scale a latent",
                 ErrorCode::kInvalidArgument};
  if (formats.index_keys == DeepseekV4ValueFormat::bf16 || formats.index_keys == DeepseekV4ValueFormat::fp8_ds_mla)
    return Error{"deepseek_v4 KV layout: index keys are f32 or e4m3 with a scale a key, not bf16 or fp8_ds_mla",
                 ErrorCode::kInvalidArgument};
  const Fp8DsMlaShape record{.head_dim = config.head_dim, .rope_dim = ds.qk_rope_head_dim};
  if (formats.latents == DeepseekV4ValueFormat::fp8_ds_mla && !record.valid())
    return Error{fmt::format("deepseek_v4 KV layout: fp8_ds_mla records need head_dim minus the {} rope dims a "
                             "multiple of {}; head_dim is {}",
                             ds.qk_rope_head_dim, kFp8DsMlaGroup, config.head_dim),
                 ErrorCode::kInvalidArgument};
  // An e4m3 record's codes stay 4-byte aligned, so that a lane reads four of them as one word.
  if (formats.index_keys == DeepseekV4ValueFormat::e4m3_scaled && ds.index_head_dim % 4 != 0)
    return Error{fmt::format("deepseek_v4 KV layout: e4m3 index keys need index_head_dim a multiple of 4, not {}",
                             ds.index_head_dim),
                 ErrorCode::kInvalidArgument};
  DeepseekV4KvLayout layout;
  layout.block_size_tokens_ = block_size_tokens;
  layout.head_dim_ = config.head_dim;
  layout.sliding_window_ = ds.sliding_window;
  layout.window_slots_ = std::min(block_size_tokens, ds.sliding_window);
  layout.formats_ = formats;
  const std::int64_t bs = block_size_tokens;
  // Floats of `items` items of `dim` values in `format` (bf16: two a float, rounded up).
  auto floats = [&record](std::int64_t items, std::int64_t dim, DeepseekV4ValueFormat format) {
    switch (format) {
      case DeepseekV4ValueFormat::f32: return items * dim;
      case DeepseekV4ValueFormat::bf16: return (items * dim + 1) / 2;
      case DeepseekV4ValueFormat::e4m3_scaled: return items * dim / 4 + items;
      case DeepseekV4ValueFormat::fp8_ds_mla: return items * record.bytes() / 4;
    }
    return items * dim;
  };
  std::int64_t offset = 0;
  auto pool = [&](std::int64_t dim, std::int64_t rate, bool overlap, DeepseekV4ValueFormat format) {
    DeepseekV4PoolRegion r{.dim = dim, .width = overlap ? 2 * dim : dim, .rate = rate, .slots = overlap ? 2 : 1};
    const std::int64_t entries = bs / rate;
    r.entries_offset = offset;
    r.entries_format = format;
    if (format == DeepseekV4ValueFormat::e4m3_scaled) r.scales_offset = offset + entries * dim / 4;
    offset += floats(entries, dim, format);
    r.state_offset = offset;
    offset += r.state_floats();
    return r;
  };
  for (DeepseekV4Attention type : ds.layer_types) {
    DeepseekV4LayerRegion region{.type = type, .window_offset = offset};
    offset += floats(layout.window_slots_, config.head_dim, formats.latents);
    const std::int32_t rate = ds.compress_rate(type);
    if (type != DeepseekV4Attention::sliding) {
      const bool csa = type == DeepseekV4Attention::compressed_sparse;
      region.compressor = pool(config.head_dim, rate, csa, formats.latents);
      if (csa) region.indexer = pool(ds.index_head_dim, rate, true, formats.index_keys);
    }
    layout.layers_.push_back(region);
  }
  layout.floats_per_block_ = offset;
  return layout;
}

DeepseekV4KvFootprint DeepseekV4KvLayout::footprint(const DeepseekV4KvRecords& records) const {
  DeepseekV4KvFootprint f;
  const auto num_layers = static_cast<double>(layers_.size());
  f.window_bytes_per_token =
      num_layers * records.latent_bytes * window_slots_ / static_cast<double>(block_size_tokens_);
  f.window_ring_bytes_per_sequence = num_layers * sliding_window_ * records.latent_bytes;
  for (const DeepseekV4LayerRegion& layer : layers_) {
    if (layer.compressor) {
      const auto rate = static_cast<double>(layer.compressor->rate);
      f.compressed_bytes_per_token += records.latent_bytes / rate;
      f.state_bytes_per_sequence +=
          static_cast<double>(layer.compressor->state_floats()) * records.state_value_bytes;
    }
    if (layer.indexer) {
      f.compressed_bytes_per_token += records.index_key_bytes / static_cast<double>(layer.indexer->rate);
      f.state_bytes_per_sequence +=
          static_cast<double>(layer.indexer->state_floats()) * records.state_value_bytes;
    }
  }
  return f;
}

}  // namespace sluice
