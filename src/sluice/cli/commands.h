// Each subcommand lives in its own cmd_*.cpp and registers itself here.
// A subcommand is added only when it works.
#pragma once

#include <CLI/CLI.hpp>

namespace sluice::cli {

void add_make_model_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_calibrate_command(CLI::App& app);
void add_tokenize_commands(CLI::App& app);  // tokenize, detokenize
void add_serve_command(CLI::App& app);
void add_bench_command(CLI::App& app);  // bench serve | compare

}  // namespace sluice::cli
