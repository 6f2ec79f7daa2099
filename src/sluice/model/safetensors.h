// Safetensors checkpoints, read through mmap: tensors are views into the page
// cache, so opening a 16 GB checkpoint costs no copy and no heap.
//
// File format: u64 little-endian header length N, N bytes of JSON
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}},
// then the data region that the offsets index.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sluice/backend/tensor.h"
#include "sluice/common/result.h"

namespace sluice {

// One mapped .safetensors file.
class SafetensorsFile {
 public:
  static Result<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, Tensor>& tensors() const { return tensors_; }
  std::size_t size_bytes() const { return size_bytes_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* mapping_ = nullptr;
  std::size_t size_bytes_ = 0;
  std::map<std::string, Tensor> tensors_;
};

// All tensors of a model directory: model.safetensors, or the shards named by
// model.safetensors.index.json.
class Checkpoint {
 public:
  static Result<Checkpoint> open(const std::string& model_dir);

  // The tensor `name`, checked to have `shape`; errors name the tensor and file.
  Result<Tensor> get(const std::string& name, const Shape& shape) const;
  bool contains(const std::string& name) const { return tensors_.count(name) > 0; }
  // The tensor `name`, which the caller knows is there (contains()).
  const Tensor& tensor(const std::string& name) const;
  // Names in the checkpoint, for the "no unexpected tensors" check.
  std::vector<std::string> names() const;
  std::size_t total_bytes() const;

 private:
  struct Entry {
    Tensor tensor;
    const SafetensorsFile* file;
  };
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, Entry> tensors_;
};

}  // namespace sluice
