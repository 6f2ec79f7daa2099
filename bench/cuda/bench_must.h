// The benchmarks' way with a failed Result: say why and exit (a benchmark has
// no one to hand the error to).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "sluice/common/result.h"

namespace sluice {

template <class T>
T must(Result<T> r) {
  if (!r.ok()) {
    std::fprintf(stderr, "error: %s\n", r.error_message().c_str());
    std::exit(1);
  }
  return std::move(r).value();
}

}  // namespace sluice
