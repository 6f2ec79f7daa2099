#include "sluice/dist/nccl_library.h"

#include <dlfcn.h>

#include <fmt/format.h>

namespace sluice {
namespace {

// The symbol `name` as `Fn`: the declarations in nccl_api.h are the contract.
template <class Fn>
Status resolve(void* handle, const char* name, Fn& fn, const std::string& path) {
  void* symbol = dlsym(handle, name);
  if (!symbol) return Error{fmt::format("{} has no symbol {}: not an NCCL 2.x library", path, name)};
  fn = reinterpret_cast<Fn>(symbol);
  return Ok{};
}

// NCCL_VERSION(X, Y, Z) for X.Y >= 2.9: X * 10000 + Y * 100 + Z.
std::string version_string(int code) {
  if (code < 10000) return fmt::format("{} (before 2.9)", code);
  return fmt::format("{}.{}.{}", code / 10000, code % 10000 / 100, code % 100);
}

}  // namespace

std::vector<std::string> NcclLibrary::default_paths() {
  return {"libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2"};
}

Result<std::shared_ptr<const NcclLibrary>> NcclLibrary::load(const std::vector<std::string>& paths) {
  std::shared_ptr<NcclLibrary> library(new NcclLibrary());
  std::string tried;
  for (const std::string& path : paths) {
    library->handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library->handle_) {
      library->path_ = path;
      break;
    }
    tried += fmt::format("\n  {}: {}", path, dlerror());
  }
  if (!library->handle_) return Error{"cannot load NCCL (libnccl.so.2); tried:" + tried};
  void* h = library->handle_;
  NcclLibrary& l = *library;
  const std::string& p = l.path_;
  SLUICE_TRY(resolve(h, "ncclGetVersion", l.get_version, p));
  SLUICE_TRY(resolve(h, "ncclGetErrorString", l.get_error_string, p));
  int code = 0;
  if (const nccl::Result r = l.get_version(&code); r != nccl::kSuccess)
    return Error{fmt::format("{}: ncclGetVersion failed ({})", p, static_cast<int>(r))};
  l.version_code_ = code;
  if (code < nccl::kMinVersionCode)
    return Error{fmt::format("{} is NCCL {}; sluice needs 2.18 or newer", p, version_string(code))};
  SLUICE_TRY(resolve(h, "ncclGetUniqueId", l.get_unique_id, p));
  SLUICE_TRY(resolve(h, "ncclCommInitRank", l.comm_init_rank, p));
  SLUICE_TRY(resolve(h, "ncclCommInitAll", l.comm_init_all, p));
  SLUICE_TRY(resolve(h, "ncclCommDestroy", l.comm_destroy, p));
  SLUICE_TRY(resolve(h, "ncclCommAbort", l.comm_abort, p));
  SLUICE_TRY(resolve(h, "ncclCommGetAsyncError", l.comm_get_async_error, p));
  SLUICE_TRY(resolve(h, "ncclCommCount", l.comm_count, p));
  SLUICE_TRY(resolve(h, "ncclCommUserRank", l.comm_user_rank, p));
  SLUICE_TRY(resolve(h, "ncclAllReduce", l.all_reduce, p));
  SLUICE_TRY(resolve(h, "ncclAllGather", l.all_gather, p));
  SLUICE_TRY(resolve(h, "ncclReduceScatter", l.reduce_scatter, p));
  SLUICE_TRY(resolve(h, "ncclSend", l.send, p));
  SLUICE_TRY(resolve(h, "ncclRecv", l.recv, p));
  SLUICE_TRY(resolve(h, "ncclGroupStart", l.group_start, p));
  SLUICE_TRY(resolve(h, "ncclGroupEnd", l.group_end, p));
  return std::shared_ptr<const NcclLibrary>(std::move(library));
}

NcclLibrary::~NcclLibrary() {
  if (handle_) dlclose(handle_);
}

std::string NcclLibrary::version() const { return version_string(version_code_); }

std::string NcclLibrary::describe(const char* call, nccl::Result result) const {
  return fmt::format("{}: {} ({})", call, get_error_string(result), static_cast<int>(result));
}

}  // namespace sluice
