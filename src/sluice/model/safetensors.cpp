#include "sluice/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "sluice/common/io.h"

namespace sluice {
namespace {

using nlohmann::json;

constexpr std::uint64_t kMaxHeaderBytes = 100ull << 20;  // the format's own limit

Result<DType> parse_dtype(const std::string& name, const std::string& tensor, const std::string& path) {
  if (name == "F32") return DType::f32;
  if (name == "F16") return DType::f16;
  if (name == "BF16") return DType::bf16;
  if (name == "F8_E4M3") return DType::f8_e4m3;
  if (name == "I32") return DType::i32;  // DeepSeek-V4's hash-routing table (tid2eid)
  // DeepSeek-V4: `.scale` tensors (E8M0), and FP4 experts as bytes of e2m1 pairs.
  if (name == "F8_E8M0") return DType::f8_e8m0;
  if (name == "I8") return DType::i8;
  if (name == "U8") return DType::u8;
  return Error{fmt::format("{}: tensor '{}' has dtype {} (supported: F32, F16, BF16, F8_E4M3, F8_E8M0, I32, I8, U8)",
                           path, tensor, name)};
}

Result<Tensor> parse_entry(const std::string& name, const json& info, std::byte* data,
                           std::uint64_t data_bytes, const std::string& path) {
  auto bad = [&](std::string_view why) {
    return Error{fmt::format("{}: tensor '{}': {}", path, name, why)};
  };
  if (!info.is_object()) return bad("entry is not an object");
  if (!info.contains("dtype") || !info["dtype"].is_string()) return bad("dtype missing");
  SLUICE_TRY_ASSIGN(dtype, parse_dtype(info["dtype"].get<std::string>(), name, path));
  const json& shape_json = info.value("shape", json());
  if (!shape_json.is_array() || shape_json.size() > kMaxTensorRank)
    return bad(fmt::format("shape must be a list of at most {} dimensions", kMaxTensorRank));
  Shape shape;
  std::uint64_t numel = 1;
  for (const auto& d : shape_json) {
    if (!d.is_number_unsigned() || d.get<std::uint64_t>() > (1ull << 40)) return bad("shape has a bad dimension");
    shape.dims[shape.rank++] = d.get<std::int64_t>();
    numel *= d.get<std::uint64_t>();
  }
  const json& offsets = info.value("data_offsets", json());
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    return bad("data_offsets must be [begin, end]");
  const auto begin = offsets[0].get<std::uint64_t>();
  const auto end = offsets[1].get<std::uint64_t>();
  if (begin > end || end > data_bytes)
    return bad(fmt::format("data_offsets [{}, {}] lie outside the data region of {} bytes (truncated file?)",
                           begin, end, data_bytes));
  if (end - begin != numel * dtype_size_bytes(dtype))
    return bad(fmt::format("data_offsets span {} bytes but shape {} of {} needs {}", end - begin, shape.str(),
                           dtype_name(dtype), numel * dtype_size_bytes(dtype)));
  return Tensor{data + begin, dtype, shape};
}

}  // namespace

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error{fmt::format("cannot open {}: {}", path, std::strerror(errno))};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return Error{fmt::format("cannot stat {}: {}", path, std::strerror(errno))};
  }
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->size_bytes_ = static_cast<std::size_t>(st.st_size);
  if (file->size_bytes_ < 8) {
    ::close(fd);
    return Error{fmt::format("{}: file of {} bytes is too short to hold a safetensors header", path,
                             file->size_bytes_)};
  }
  file->mapping_ = ::mmap(nullptr, file->size_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (file->mapping_ == MAP_FAILED) {
    file->mapping_ = nullptr;
    return Error{fmt::format("cannot mmap {}: {}", path, std::strerror(errno))};
  }
  auto* bytes = static_cast<std::byte*>(file->mapping_);
  std::uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes, 8);  // little-endian on every platform we build for
  if (header_bytes > kMaxHeaderBytes || header_bytes > file->size_bytes_ - 8)
    return Error{fmt::format("{}: header length {} exceeds the file size {} (truncated or not safetensors)",
                             path, header_bytes, file->size_bytes_)};
  const std::string_view header_text(reinterpret_cast<const char*>(bytes + 8), header_bytes);
  json header = json::parse(header_text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object())
    return Error{fmt::format("{}: header is not a JSON object", path)};
  std::byte* data = bytes + 8 + header_bytes;
  const std::uint64_t data_bytes = file->size_bytes_ - 8 - header_bytes;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    SLUICE_TRY_ASSIGN(tensor, parse_entry(name, info, data, data_bytes, path));
    file->tensors_.emplace(name, tensor);
  }
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_) ::munmap(mapping_, size_bytes_);
}

Result<Checkpoint> Checkpoint::open(const std::string& model_dir) {
  namespace fs = std::filesystem;
  Checkpoint checkpoint;
  std::vector<std::string> shard_paths;
  const std::string index_path = model_dir + "/model.safetensors.index.json";
  const std::string single_path = model_dir + "/model.safetensors";
  if (fs::exists(index_path)) {
    SLUICE_TRY_ASSIGN(text, read_file(index_path));
    json index = json::parse(text, nullptr, false);
    if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") ||
        !index["weight_map"].is_object())
      return Error{fmt::format("{}: no 'weight_map' object", index_path)};
    std::set<std::string> shards;
    for (const auto& [name, shard] : index["weight_map"].items()) {
      if (!shard.is_string()) return Error{fmt::format("{}: weight_map['{}'] is not a file name", index_path, name)};
      const auto shard_name = shard.get<std::string>();
      if (shard_name.find('/') != std::string::npos)
        return Error{fmt::format("{}: shard '{}' must be a file in the model directory", index_path, shard_name)};
      shards.insert(shard_name);
    }
    for (const auto& shard : shards) shard_paths.push_back(model_dir + "/" + shard);
  } else if (fs::exists(single_path)) {
    shard_paths.push_back(single_path);
  } else {
    return Error{fmt::format("{}: neither model.safetensors nor model.safetensors.index.json exists", model_dir)};
  }
  for (const auto& path : shard_paths) {
    SLUICE_TRY_ASSIGN(file, SafetensorsFile::open(path));
    std::shared_ptr<SafetensorsFile> shared = std::move(file);
    for (const auto& [name, tensor] : shared->tensors()) {
      auto [it, inserted] = checkpoint.tensors_.emplace(name, Entry{tensor, shared.get()});
      if (!inserted)
        return Error{fmt::format("tensor '{}' appears in both {} and {}", name, it->second.file->path(), path)};
    }
    checkpoint.files_.push_back(std::move(shared));
  }
  return checkpoint;
}

Result<Tensor> Checkpoint::get(const std::string& name, const Shape& shape) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return Error{fmt::format("checkpoint has no tensor '{}'", name)};
  const Tensor& tensor = it->second.tensor;
  if (!(tensor.shape == shape))
    return Error{fmt::format("{}: tensor '{}' has shape {}, the config implies {}", it->second.file->path(), name,
                             tensor.shape.str(), shape.str())};
  return tensor;
}

const Tensor& Checkpoint::tensor(const std::string& name) const {
  auto it = tensors_.find(name);
  SLUICE_CHECK_MSG(it != tensors_.end(), "checkpoint has no tensor '" + name + "'");
  return it->second.tensor;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, entry] : tensors_) out.push_back(name);
  return out;
}

std::size_t Checkpoint::total_bytes() const {
  std::size_t total = 0;
  for (const auto& [name, entry] : tensors_) total += entry.tensor.size_bytes();
  return total;
}

}  // namespace sluice
