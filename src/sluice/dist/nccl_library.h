// NcclLibrary: libnccl.so.2 opened with dlopen and its functions resolved
// against our declarations (nccl_api.h). Nothing links NCCL: a build without
// it on the machine starts and runs one device; asking for NCCL there fails
// with the paths tried. The loader refuses an NCCL older than 2.18 (the
// declarations' assumption) and names the version it found.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sluice/common/result.h"
#include "sluice/dist/nccl_api.h"

namespace sluice {

class NcclLibrary {
 public:
  // The first of `paths` that dlopen opens (a bare soname searches the
  // loader's path; CUDA's lib64 holds one where the toolkit is installed,
  // and torch wheels ship their own).
  static std::vector<std::string> default_paths();
  static Result<std::shared_ptr<const NcclLibrary>> load(const std::vector<std::string>& paths = default_paths());

  ~NcclLibrary();
  NcclLibrary(const NcclLibrary&) = delete;
  NcclLibrary& operator=(const NcclLibrary&) = delete;

  const std::string& path() const { return path_; }
  // NCCL_VERSION_CODE of the loaded library: 22809 for 2.28.9.
  int version_code() const { return version_code_; }
  // "2.28.9".
  std::string version() const;
  // "ncclAllReduce: unhandled cuda error (1)".
  std::string describe(const char* call, nccl::Result result) const;

  nccl::Api::GetVersion get_version = nullptr;
  nccl::Api::GetErrorString get_error_string = nullptr;
  nccl::Api::GetUniqueId get_unique_id = nullptr;
  nccl::Api::CommInitRank comm_init_rank = nullptr;
  nccl::Api::CommInitAll comm_init_all = nullptr;
  nccl::Api::CommDestroy comm_destroy = nullptr;
  nccl::Api::CommAbort comm_abort = nullptr;
  nccl::Api::CommGetAsyncError comm_get_async_error = nullptr;
  nccl::Api::CommCount comm_count = nullptr;
  nccl::Api::CommUserRank comm_user_rank = nullptr;
  nccl::Api::AllReduce all_reduce = nullptr;
  nccl::Api::AllGather all_gather = nullptr;
  nccl::Api::ReduceScatter reduce_scatter = nullptr;
  nccl::Api::Send send = nullptr;
  nccl::Api::Recv recv = nullptr;
  nccl::Api::GroupStart group_start = nullptr;
  nccl::Api::GroupEnd group_end = nullptr;

 private:
  NcclLibrary() = default;

  void* handle_ = nullptr;
  std::string path_;
  int version_code_ = 0;
};

}  // namespace sluice
