#include "sluice/common/io.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace sluice {

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{fmt::format("cannot open {}: {}", path, std::strerror(errno))};
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return Error{fmt::format("cannot read {}", path)};
  return contents.str();
}

Status write_file(const std::string& path, std::string_view contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Error{fmt::format("cannot create {}: {}", path, std::strerror(errno))};
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  if (!out) return Error{fmt::format("cannot write {}", path)};
  return Ok{};
}

}  // namespace sluice
