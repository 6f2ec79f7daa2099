// Tokenizer: Hugging Face tokenizer.json (BPE models) loaded once, then used
// read-only from any number of threads. Matches the transformers.js
// implementation (@lenml/tokenizers) id for id; the tests run it as the oracle.
//
// Supported: BPE with merges (byte-level, and SentencePiece-style with byte
// fallback), the normalizers / pre-tokenizers / decoders that Llama 2/3,
// Qwen2/3, DeepSeek V3, Gemma 3 and GPT-2-style files use, added and special
// tokens, TemplateProcessing BOS and add_bos_token. Anything else (a Unigram
// or WordPiece model, an unknown normalizer type...) is a load error naming it.
//
// Invalid UTF-8 in encode() input: every maximal invalid subpart is replaced
// by one U+FFFD before tokenizing (the WHATWG rule), which is what the
// reference does: JavaScript receives the bytes as a string decoded with
// replacement. decode() of ids whose bytes are not valid UTF-8 (half of a
// byte-fallback sequence, a lone byte-level byte) yields U+FFFD the same way.
// Ids outside the vocabulary decode as the unk token, or as nothing.
//
// decode() never applies clean_up_tokenization_spaces (it would turn " ." into
// "." inside code): the text is exactly what the tokens spell, as streaming
// servers return it.
//
// BOS/EOS with add_special_tokens: tokenizer_config.json's add_bos_token /
// add_eos_token decide for the Llama, CodeLlama and Gemma tokenizer classes
// (as Hugging Face rebuilds their post-processor from them); otherwise
// tokenizer.json's post_processor does.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/common/ids.h"
#include "sluice/common/result.h"

namespace sluice {

namespace tokenizer_detail {
struct Model;  // the loaded tokenizer; defined in tokenizer_model.h
}

class Tokenizer {
 public:
  // Reads <model_dir>/tokenizer.json and <model_dir>/tokenizer_config.json
  // (the latter optional: without it there is no chat template and the
  // post-processor alone decides about BOS).
  static Result<Tokenizer> load(const std::string& model_dir);
  // Same from the two files' contents; an empty config string means "none".
  static Result<Tokenizer> from_json(std::string_view tokenizer_json,
                                     std::string_view tokenizer_config_json);

  // add_special_tokens: add BOS/EOS the way the post-processor (or
  // add_bos_token / add_eos_token in tokenizer_config.json) says.
  std::vector<TokenId> encode(std::string_view text, bool add_special_tokens) const;
  std::string decode(std::span<const TokenId> ids, bool skip_special_tokens) const;

  // One past the largest id (vocab and added tokens together).
  std::int32_t vocab_size() const;
  std::optional<TokenId> token_to_id(std::string_view token) const;
  // The token's string as stored in the vocabulary (not decoded), if the id exists.
  std::optional<std::string> id_to_token(TokenId id) const;
  std::optional<TokenId> bos_token_id() const;
  std::optional<TokenId> eos_token_id() const;
  // Strings for the chat template ("" when the config names none).
  std::string bos_token() const;
  std::string eos_token() const;
  // chat_template from tokenizer_config.json ("" if none); if it is a list of
  // named templates, the one named "default".
  const std::string& chat_template() const;
  // True for added tokens marked special and for tokenizer_config.json's
  // additional_special_tokens (these are what skip_special_tokens drops).
  bool is_special(TokenId id) const;
  // The bytes token `id` adds in the middle of a text, before any UTF-8
  // repair (see Decoder::token_bytes).
  // nullopt for ids the vocabulary lacks.
  std::optional<std::string> token_bytes(TokenId id) const;

 private:
  explicit Tokenizer(std::shared_ptr<const tokenizer_detail::Model> model)
      : model_(std::move(model)) {}
  std::shared_ptr<const tokenizer_detail::Model> model_;  // shared: copies are cheap
};

// Streaming decode: feed ids one at a time, get back only text that later ids
// cannot change. A character whose bytes are still incomplete (the first bytes
// of a multi-byte character, a byte-fallback sequence cut short) is held back
// until the ids that complete it arrive, so no chunk ever ends inside a
// character. Concatenating every push() and the final flush() gives
// decode(all ids, skip_special_tokens).
//
// Works for any decoder chain by decoding a small window of ids: the last
// fully emitted id stays in the window as context, because decoders treat the
// first token of a text specially (SentencePiece strips its leading space).
// Keeps its own handle on the tokenizer (copies share the loaded model), so
// it stays valid on its own. Not thread-safe: one per stream.
class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens);
  std::string push(TokenId id);
  // Ends the stream: returns whatever was held back (an incomplete character
  // decodes to U+FFFD, as decode() would give). A later push() starts a new stream.
  std::string flush();

 private:
  Tokenizer tokenizer_;
  bool skip_special_tokens_;
  std::vector<TokenId> ids_;           // the window: context id(s) + ids not fully emitted
  std::size_t num_emitted_bytes_ = 0;  // bytes of decode(ids_) already returned
};

}  // namespace sluice
