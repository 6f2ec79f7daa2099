#include "sluice/common/check.h"

#include <cstdio>
#include <cstdlib>

namespace sluice {

void check_failed(std::string_view condition, std::string_view detail,
                  const std::source_location& where) {
  std::fprintf(stderr, "sluice: invariant broken at %s:%u (%s): %.*s%s%.*s\n", where.file_name(),
               static_cast<unsigned>(where.line()), where.function_name(),
               static_cast<int>(condition.size()), condition.data(), detail.empty() ? "" : " — ",
               static_cast<int>(detail.size()), detail.data());
  std::abort();
}

}  // namespace sluice
