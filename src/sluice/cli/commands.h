// Each subcommand lives in its own cmd_*.cpp and registers itself here.
// A subcommand is added only when it works.
#pragma once

#include <CLI/CLI.hpp>

namespace sluice::cli {

}  // namespace sluice::cli
