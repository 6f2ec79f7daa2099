#include <algorithm>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "sluice/cli/commands.h"
#include "sluice/cli/vllm_flags.h"

int main(int argc, char** argv) {
  CLI::App app{"sluice: an LLM inference server that keeps every stream flowing"};
  app.name("sluice");  // parse() of a vector does not take it from argv[0]
  app.require_subcommand(1);
  sluice::cli::add_make_model_command(app);
  sluice::cli::add_generate_command(app);
  sluice::cli::add_plan_command(app);
  sluice::cli::add_calibrate_command(app);
  sluice::cli::add_tokenize_commands(app);
  sluice::cli::add_serve_command(app);
  sluice::cli::add_bench_command(app);
  std::vector<std::string> args(argv + 1, argv + argc);
  // `serve` takes a vLLM launch line: its vLLM-only flags are checked (and the
  // no-ops dropped) before CLI11 parses the rest.
  if (!args.empty() && args.front() == "serve") {
    auto translated = sluice::cli::translate_vllm_flags(*app.get_subcommand("serve"), {args.begin() + 1, args.end()});
    if (!translated) {
      sluice::cli::log_error_lines(translated.error().message);
      return 1;
    }
    args.resize(1);
    args.insert(args.end(), translated->begin(), translated->end());
  }
  std::reverse(args.begin(), args.end());  // CLI11 parses a vector from its back
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}
