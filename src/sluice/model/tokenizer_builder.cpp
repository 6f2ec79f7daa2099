#include "sluice/model/tokenizer_builder.h"

#include "sluice/common/utf8_append.h"

#include <array>
#include <map>
#include <vector>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace sluice {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr std::array<const char*, 5> kSpecialTokens = {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                                       "<|end_header_id|>", "<|eot_id|>"};

constexpr const char* kLlama3SplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

constexpr const char* kChatTemplate =
    "{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}{%- if "
    "add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}";

// Text the merges are learned from: English prose and a little code, so common
// words become single tokens and the tokenizer behaves like a real one.
constexpr const char* kTrainingText =
    "The quick brown fox jumps over the lazy dog. A sluice lets a flood through without drowning what is "
    "downstream. Long prompts are the flood; decoding streams are downstream. The server keeps every stream "
    "flowing while long prompts are being prefilled, and the first tokens come as early as the hardware allows. "
    "Prefix caching keeps the blocks of a session so that the next turn of the conversation does not recompute "
    "them. The scheduler gives every running decode its token first, then fills the rest of the step with "
    "prefill chunks sized by time, not by token count. In the beginning the engine was small, and then it grew "
    "into a system that serves many users at the same time. They said that it would work, and it did work, "
    "because the people who built it measured everything they could and wrote down what they found. "
    "def main(): return 0\nfor (int i = 0; i < n; ++i) { total += values[i]; }\n"
    "import numpy as np\nprint(\"hello, world\")\nconst value = await fetch(url);\n"
    "One, two, three, four, five, six, seven, eight, nine, ten. 2024 2025 2026 100 200 300 12345 67890. "
    "What is the time? Where is the station? How are you today? I am fine, thank you, and you? "
    "This is a test of the tokenizer with some repeated words: the the the and and and of of of to to to.";

// GPT-2's byte-to-character table: printable bytes map to themselves, the rest
// to code points from 256 up, so every byte has a visible character.
std::array<std::string, 256> byte_to_char_table() {
  std::array<std::string, 256> table;
  auto utf8 = [](std::uint32_t cp) {
    std::string out;
    append_utf8(out, cp);
    return out;
  };
  std::uint32_t next = 256;
  for (std::uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    table[b] = utf8(printable ? b : next++);
  }
  return table;
}

// Words as GPT-2 sees them: a leading space stays with the word that follows.
std::vector<std::string> split_words(std::string_view text) {
  std::vector<std::string> words;
  std::string current;
  for (char c : text) {
    if ((c == ' ' || c == '\n') && !current.empty() && current != " ") {
      words.push_back(current);
      current.clear();
    }
    current += c;
  }
  if (!current.empty()) words.push_back(current);
  return words;
}

}  // namespace

std::int32_t min_builtin_vocab_size() { return 256 + static_cast<std::int32_t>(kSpecialTokens.size()); }

Result<BuiltTokenizer> build_byte_level_tokenizer(std::int32_t max_tokens) {
  if (max_tokens < min_builtin_vocab_size())
    return Error{fmt::format("vocabulary of {} is too small: the built-in tokenizer needs at least {} ids", max_tokens,
                             min_builtin_vocab_size())};
  const auto table = byte_to_char_table();
  ordered_json vocab = ordered_json::object();
  std::vector<std::string> id_to_token;
  for (int b = 0; b < 256; ++b) {
    vocab[table[b]] = b;
    id_to_token.push_back(table[b]);
  }
  // Each word as a list of symbols, weighted by how often it occurs.
  std::map<std::vector<std::string>, int> words;
  for (const std::string& word : split_words(kTrainingText)) {
    std::vector<std::string> symbols;
    for (unsigned char c : word) symbols.push_back(table[c]);
    ++words[symbols];
  }
  json merges = json::array();
  const int num_merges_wanted = max_tokens - min_builtin_vocab_size();
  for (int m = 0; m < num_merges_wanted; ++m) {
    std::map<std::pair<std::string, std::string>, int> pair_counts;
    for (const auto& [symbols, count] : words)
      for (std::size_t i = 0; i + 1 < symbols.size(); ++i) pair_counts[{symbols[i], symbols[i + 1]}] += count;
    // Most frequent pair; ties broken by the map's order, so the result is deterministic.
    const std::pair<std::string, std::string>* best = nullptr;
    int best_count = 1;
    for (const auto& [pair, count] : pair_counts)
      if (count > best_count) {
        best = &pair;
        best_count = count;
      }
    if (!best) break;
    const auto [left, right] = *best;
    const std::string merged = left + right;
    merges.push_back(json::array({left, right}));
    if (!vocab.contains(merged)) {
      vocab[merged] = static_cast<std::int32_t>(id_to_token.size());
      id_to_token.push_back(merged);
    }
    std::map<std::vector<std::string>, int> next;
    for (const auto& [symbols, count] : words) {
      std::vector<std::string> out;
      for (std::size_t i = 0; i < symbols.size(); ++i) {
        if (i + 1 < symbols.size() && symbols[i] == left && symbols[i + 1] == right) {
          out.push_back(merged);
          ++i;
        } else {
          out.push_back(symbols[i]);
        }
      }
      next[out] += count;
    }
    words = std::move(next);
  }

  BuiltTokenizer built;
  ordered_json added = ordered_json::array();
  const auto first_special = static_cast<std::int32_t>(id_to_token.size());
  for (std::size_t i = 0; i < kSpecialTokens.size(); ++i)
    added.push_back({{"id", first_special + static_cast<std::int32_t>(i)},
                     {"content", kSpecialTokens[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  built.first_filler_token_id = first_special + static_cast<std::int32_t>(kSpecialTokens.size());
  // Filler words up to the model's vocabulary: no merge produces them, so
  // encoding never does, but every id a random model samples decodes to
  // text (" qa", " qb", ...) and streams the way a real model's output does.
  std::int32_t next_id = built.first_filler_token_id;
  for (std::int64_t n = 0; next_id < max_tokens; ++n) {
    std::string name;
    for (std::int64_t k = n; ; k = k / 26 - 1) {
      name.insert(name.begin(), static_cast<char>('a' + k % 26));
      if (k < 26) break;
    }
    const std::string token = table[' '] + "q" + name;
    if (vocab.contains(token)) continue;
    vocab[token] = next_id++;
  }
  built.num_tokens = next_id;
  built.bos_token_id = first_special;
  built.eos_token_id = first_special + 1;
  built.end_of_turn_token_id = first_special + 4;

  const ordered_json bos_piece = {{"SpecialToken", {{"id", kSpecialTokens[0]}, {"type_id", 0}}}};
  ordered_json tokenizer = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         ordered_json::array({{{"type", "Split"},
                               {"pattern", {{"Regex", kLlama3SplitRegex}}},
                               {"behavior", "Isolated"},
                               {"invert", false}},
                              {{"type", "ByteLevel"},
                               {"add_prefix_space", false},
                               {"trim_offsets", true},
                               {"use_regex", false}}})}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", ordered_json::array({bos_piece, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"pair", ordered_json::array({bos_piece,
                                      {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                      bos_piece,
                                      {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
        {"special_tokens",
         {{kSpecialTokens[0],
           {{"id", kSpecialTokens[0]}, {"ids", {built.bos_token_id}}, {"tokens", {kSpecialTokens[0]}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merges}}}};
  built.tokenizer_json = tokenizer.dump(1);

  ordered_json config = {{"bos_token", kSpecialTokens[0]},
                         {"eos_token", kSpecialTokens[4]},
                         {"add_bos_token", true},
                         {"clean_up_tokenization_spaces", false},
                         {"model_max_length", 131072},
                         {"tokenizer_class", "PreTrainedTokenizerFast"},
                         {"chat_template", kChatTemplate}};
  built.tokenizer_config_json = config.dump(1);
  return built;
}

}  // namespace sluice
