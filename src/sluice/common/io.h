// Whole-file reads and writes with errors that name the path.
#pragma once

#include <string>
#include <string_view>

#include "sluice/common/result.h"

namespace sluice {

Result<std::string> read_file(const std::string& path);
Status write_file(const std::string& path, std::string_view contents);

}  // namespace sluice
