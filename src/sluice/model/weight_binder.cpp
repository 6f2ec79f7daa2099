#include "sluice/model/weight_binder.h"

#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "sluice/model/fp8_weights.h"

namespace sluice {

WeightBinder::WeightBinder(const Checkpoint& checkpoint, Ops& ops, const LoadProgress& progress,
                           std::optional<Fp8BlockQuantization> fp8, HostWeightBuffers& host_buffers)
    : checkpoint_(checkpoint), ops_(ops), progress_(progress), fp8_(fp8), host_buffers_(host_buffers),
      bytes_total_(checkpoint.total_bytes()), num_total_(checkpoint.names().size()) {}

void WeightBinder::mark_used(const std::string& name, std::size_t bytes) {
  if (!used_.insert(name).second) return;
  bytes_done_ += bytes;
  if (progress_) progress_(used_.size(), num_total_, bytes_done_, bytes_total_);
}

bool WeightBinder::keeps_fp8(const std::vector<Shape>& part_shapes, const WeightUse& use) const {
  if (!fp8_ || !use.matmul_only || !ops_.keeps_fp8_block_weights(fp8_->block_rows, fp8_->block_cols)) return false;
  if (use.row_slice_at % fp8_->block_rows != 0) return false;
  // Stacked parts keep one scale grid only if each part but the last ends on a block row.
  for (std::size_t i = 0; i + 1 < part_shapes.size(); ++i)
    if (part_shapes[i].rows() % fp8_->block_rows != 0) return false;
  return true;
}

Result<Tensor> WeightBinder::host(const std::string& name, const Shape& shape, bool keep_fp8) {
  SLUICE_TRY_ASSIGN(tensor, checkpoint_.get(name, shape));
  if (tensor.dtype == DType::i32) return Error{fmt::format("tensor '{}' must hold floats", name)};
  if (tensor.dtype != DType::f8_e4m3) {
    mark_used(name, tensor.size_bytes());
    return tensor;
  }
  if (!fp8_)
    return Error{fmt::format("tensor '{}' is F8_E4M3 but config.json has no fp8 quantization_config", name)};
  const std::string scale_name = name + "_scale_inv";
  if (!checkpoint_.contains(scale_name))
    return Error{fmt::format("FP8 tensor '{}' has no '{}' block scales", name, scale_name)};
  const Tensor& scales = checkpoint_.tensor(scale_name);
  mark_used(name, tensor.size_bytes());
  mark_used(scale_name, scales.size_bytes());
  if (keep_fp8) {
    SLUICE_TRY(check_fp8_scales(tensor, scales, *fp8_, name));
    tensor.scales = fp8_block_scales(scales, *fp8_);
    return tensor;
  }
  SLUICE_TRY_ASSIGN(values, dequantize_fp8_blocks(tensor, scales, *fp8_, name));
  std::vector<float>& buffer = host_buffers_.emplace_back(std::move(values));
  return Tensor{buffer.data(), DType::f32, shape};
}

Result<Tensor> WeightBinder::weight(const std::string& name, const Shape& shape, const WeightUse& use) {
  SLUICE_TRY_ASSIGN(tensor, host(name, shape, keeps_fp8({shape}, use)));
  return ops_.upload_weight(tensor);
}

Result<Tensor> WeightBinder::concatenated(const std::vector<std::pair<std::string, Shape>>& parts,
                                          const WeightUse& use) {
  std::vector<Shape> shapes;
  for (const auto& part : parts) shapes.push_back(part.second);
  const bool keep_fp8 = keeps_fp8(shapes, use);
  std::vector<Tensor> tensors;
  for (const auto& [name, shape] : parts) {
    SLUICE_TRY_ASSIGN(tensor, host(name, shape, keep_fp8));
    if (!tensors.empty() && tensor.dtype != tensors.front().dtype)
      return Error{fmt::format("tensor '{}' is {} but '{}' is {}; fused projections need one dtype", name,
                               dtype_name(tensor.dtype), parts.front().first, dtype_name(tensors.front().dtype))};
    tensors.push_back(tensor);
  }
  return ops_.upload_concatenated(tensors);
}

Result<Tensor> WeightBinder::row_shards(const std::vector<std::pair<std::string, Shape>>& parts,
                                        WeightShard shard) {
  if (shard.size == 1) return parts.size() == 1 ? weight(parts[0].first, parts[0].second) : concatenated(parts);
  std::vector<Tensor> slices;
  for (const auto& [name, shape] : parts) {
    SLUICE_TRY_ASSIGN(tensor, host(name, shape, false));
    // A 1-D tensor is a column of rows here; its slice goes back to 1-D.
    const Tensor rows = shape.rank == 1 ? tensor.reshaped({shape[0], 1}) : tensor;
    if (rows.rows() % shard.size != 0)
      return Error{fmt::format("tensor '{}' has {} rows, which {} tensor-parallel ranks cannot split evenly", name,
                               rows.rows(), shard.size)};
    const std::int64_t count = rows.rows() / shard.size;
    const Tensor slice = rows.row_slice(shard.rank * count, count);
    slices.push_back(shape.rank == 1 ? slice.reshaped({count}) : slice);
  }
  return ops_.upload_concatenated(slices);
}

Result<Tensor> WeightBinder::column_shard(const std::string& name, const Shape& shape, WeightShard shard) {
  return column_shards({{name, shape}}, shard);
}

Result<Tensor> WeightBinder::column_shards(const std::vector<std::pair<std::string, Shape>>& parts,
                                           WeightShard shard) {
  if (shard.size == 1) return parts.size() == 1 ? weight(parts[0].first, parts[0].second) : concatenated(parts);
  std::vector<Tensor> tensors;
  std::int64_t rows = 0;
  for (const auto& [name, shape] : parts) {
    SLUICE_TRY_ASSIGN(tensor, host(name, shape, false));
    if (shape.rank != 2 || shape.cols() % shard.size != 0)
      return Error{fmt::format("tensor '{}' of shape {} has columns {} tensor-parallel ranks cannot split evenly",
                               name, shape.str(), shard.size)};
    if (!tensors.empty() && (shape.cols() != parts.front().second.cols() || tensor.dtype != tensors.front().dtype))
      return Error{fmt::format("tensor '{}' ({} {}) cannot stack under '{}'", name, shape.str(),
                               dtype_name(tensor.dtype), parts.front().first)};
    tensors.push_back(tensor);
    rows += shape.rows();
  }
  const DType dtype = tensors.front().dtype;
  const std::int64_t full_cols = parts.front().second.cols(), cols = full_cols / shard.size;
  const std::size_t element_bytes = dtype_size_bytes(dtype);
  const std::size_t row_bytes = static_cast<std::size_t>(cols) * element_bytes;
  // Host buffers are float vectors: rounded up to hold the bytes of any dtype.
  std::vector<float>& buffer =
      host_buffers_.emplace_back((static_cast<std::size_t>(rows) * row_bytes + sizeof(float) - 1) / sizeof(float));
  auto* dst = reinterpret_cast<std::byte*>(buffer.data());
  for (const Tensor& tensor : tensors) {
    const auto* src = static_cast<const std::byte*>(tensor.data);
    for (std::int64_t r = 0; r < tensor.rows(); ++r, dst += row_bytes)
      std::memcpy(dst,
                  src + (static_cast<std::size_t>(r * full_cols) + static_cast<std::size_t>(shard.rank * cols)) *
                            element_bytes,
                  row_bytes);
  }
  return ops_.upload_weight(Tensor{buffer.data(), dtype, Shape{rows, cols}});
}

void WeightBinder::skip(const std::string& prefix, const std::string& why) { skipped_.emplace_back(prefix, why); }

Status WeightBinder::reject_unused() const {
  std::vector<std::size_t> num_skipped(skipped_.size(), 0);
  for (const std::string& name : checkpoint_.names()) {
    if (used_.count(name)) continue;
    if (name.ends_with("rotary_emb.inv_freq")) continue;  // recomputed, as transformers does
    if (name == "lm_head.weight") continue;               // with tied embeddings transformers ignores it
    bool skipped = false;
    for (std::size_t i = 0; i < skipped_.size() && !skipped; ++i)
      if (name.starts_with(skipped_[i].first)) {
        ++num_skipped[i];
        skipped = true;
      }
    if (!skipped) return Error{fmt::format("checkpoint tensor '{}' is not used by this architecture", name)};
  }
  // One line per reason: expert parallelism skips other ranks' experts under
  // one prefix per layer.
  for (std::size_t i = 0; i < skipped_.size(); ++i) {
    if (num_skipped[i] == 0) continue;
    bool said = false;
    for (std::size_t j = 0; j < i && !said; ++j) said = num_skipped[j] > 0 && skipped_[j].second == skipped_[i].second;
    if (said) continue;
    std::size_t num_tensors = 0, num_prefixes = 0;
    for (std::size_t j = i; j < skipped_.size(); ++j)
      if (num_skipped[j] > 0 && skipped_[j].second == skipped_[i].second) {
        num_tensors += num_skipped[j];
        ++num_prefixes;
      }
    spdlog::info("skipping {} checkpoint tensors under '{}'{}: {}", num_tensors, skipped_[i].first,
                 num_prefixes > 1 ? fmt::format(" and {} more prefixes", num_prefixes - 1) : "", skipped_[i].second);
  }
  return Ok{};
}

}  // namespace sluice
