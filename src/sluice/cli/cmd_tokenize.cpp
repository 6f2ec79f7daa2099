// `sluice tokenize` and `sluice detokenize`: the model directory's tokenizer
// from the command line, for scripts (count tokens, inspect ids, decode ids).
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "sluice/cli/commands.h"
#include "sluice/common/io.h"
#include "sluice/tokenizer/tokenizer.h"

namespace sluice::cli {
namespace {

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  throw CLI::RuntimeError(1);
}

Tokenizer load_or_fail(const std::string& model_dir) {
  auto tokenizer = Tokenizer::load(model_dir);
  if (!tokenizer.ok()) fail(tokenizer.error_message());
  return std::move(tokenizer).value();
}

// "1,2,3", "1 2 3" or "[1, 2, 3]": every id must exist in the vocabulary.
Result<std::vector<TokenId>> parse_ids(const std::string& text, std::int32_t vocab_size) {
  std::vector<TokenId> ids;
  std::string current;
  const auto take = [&]() -> Status {
    if (current.empty()) return Ok{};
    std::size_t used = 0;
    long long value = -1;
    try {
      value = std::stoll(current, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != current.size() || value < 0 || value >= vocab_size) {
      return Error{fmt::format("--ids: '{}' is not a token id (the vocabulary has ids 0..{})", current, vocab_size - 1)};
    }
    ids.push_back(static_cast<TokenId>(value));
    current.clear();
    return Ok{};
  };
  for (const char c : text) {
    if (c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '[' || c == ']') {
      SLUICE_TRY(take());
    } else {
      current.push_back(c);
    }
  }
  SLUICE_TRY(take());
  return ids;
}

}  // namespace

void add_tokenize_commands(CLI::App& app) {
  struct TokenizeOptions {
    std::string model_dir;
    std::string text;
    std::string file;
    bool no_special_tokens = false;
  };
  auto tokenize_options = std::make_shared<TokenizeOptions>();
  CLI::App* tokenize = app.add_subcommand("tokenize", "print the token ids of a text as a JSON array");
  tokenize->add_option("--model", tokenize_options->model_dir, "model directory (tokenizer.json)")->required();
  auto* text_option = tokenize->add_option("--text", tokenize_options->text, "text to tokenize");
  auto* file_option = tokenize->add_option("--file", tokenize_options->file, "read the text from a file ('-': stdin)");
  text_option->excludes(file_option);
  tokenize->add_flag("--no-special-tokens", tokenize_options->no_special_tokens,
                     "do not add BOS/EOS (by default they are added as the tokenizer's config says)");
  tokenize->callback([tokenize_options, text_option, file_option] {
    if (text_option->count() == 0 && file_option->count() == 0) fail("tokenize: give --text or --file");
    std::string text = tokenize_options->text;
    if (file_option->count() > 0) {
      if (tokenize_options->file == "-") {
        text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
      } else {
        auto contents = read_file(tokenize_options->file);
        if (!contents.ok()) fail(contents.error_message());
        text = std::move(contents).value();
      }
    }
    const Tokenizer tokenizer = load_or_fail(tokenize_options->model_dir);
    const auto ids = tokenizer.encode(text, !tokenize_options->no_special_tokens);
    std::string out = "[";
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (i > 0) out += ",";
      out += std::to_string(ids[i]);
    }
    out += "]\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
  });

  struct DetokenizeOptions {
    std::string model_dir;
    std::string ids;
    bool skip_special_tokens = false;
  };
  auto detokenize_options = std::make_shared<DetokenizeOptions>();
  CLI::App* detokenize = app.add_subcommand("detokenize", "print the text of token ids (exactly, no newline added)");
  detokenize->add_option("--model", detokenize_options->model_dir, "model directory (tokenizer.json)")->required();
  detokenize->add_option("--ids", detokenize_options->ids, "ids: 1,2,3 or [1, 2, 3]")->required();
  detokenize->add_flag("--skip-special-tokens", detokenize_options->skip_special_tokens, "leave out special tokens");
  detokenize->callback([detokenize_options] {
    const Tokenizer tokenizer = load_or_fail(detokenize_options->model_dir);
    auto ids = parse_ids(detokenize_options->ids, tokenizer.vocab_size());
    if (!ids.ok()) fail(ids.error_message());
    const std::string text = tokenizer.decode(*ids, detokenize_options->skip_special_tokens);
    std::fwrite(text.data(), 1, text.size(), stdout);
  });
}

}  // namespace sluice::cli
