#include "sluice/cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"sluice: an LLM inference server that keeps every stream flowing"};
  app.require_subcommand(1);
  sluice::cli::add_make_model_command(app);
  sluice::cli::add_generate_command(app);
  sluice::cli::add_plan_command(app);
  sluice::cli::add_tokenize_commands(app);
  sluice::cli::add_serve_command(app);
  sluice::cli::add_bench_command(app);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
