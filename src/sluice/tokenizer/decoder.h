// Decoders: token strings -> text, the reverse of normalizer + pre-tokenizer +
// byte mapping. A chain of steps over the list of token strings, exactly as
// the reference applies them (a Sequence is flattened at load).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <variant>
#include <vector>

#include "sluice/tokenizer/bpe.h"
#include "sluice/tokenizer/json_fields.h"
#include "sluice/tokenizer/normalizer.h"

namespace sluice::tokenizer_detail {

using StringSet = std::unordered_set<std::string, StringHash, std::equal_to<>>;

// GPT-2 byte-level strings back to bytes; added tokens pass through as text.
struct ByteLevelDecoder {};
struct ReplaceDecoder { Pattern pattern; std::string content; };
// Runs of <0xNN> tokens back to the bytes they stand for.
struct ByteFallbackDecoder {};
struct FuseDecoder {};
struct StripDecoder { char32_t content = ' '; std::int64_t start = 0; std::int64_t stop = 0; };
struct MetaspaceDecoder { std::string replacement; bool add_prefix_space = false; };
struct BpeSuffixDecoder { std::string suffix; };

using DecoderStep = std::variant<ByteLevelDecoder, ReplaceDecoder, ByteFallbackDecoder, FuseDecoder,
                                 StripDecoder, MetaspaceDecoder, BpeSuffixDecoder>;

class Decoder {
 public:
  // `value` is tokenizer.json's "decoder" (null: tokens are joined with spaces).
  static Decoder from_json(const Json& value, std::string_view path);
  // `added_contents`: every added token's text (byte-level decoding leaves them as is).
  std::string decode(std::vector<std::string> tokens, const StringSet& added_contents) const;
  // The raw bytes one vocabulary token adds in the middle of a text: no
  // U+FFFD for a partial UTF-8 character (a byte token is its byte) and no
  // start/end stripping. What constrained decoding matches against.
  // `is_added`: an added token, which byte-level decoding leaves as is.
  std::string token_bytes(std::string token, bool is_added) const;

 private:
  void add(const Json& value, std::string_view path);
  std::optional<std::vector<DecoderStep>> steps_;  // nullopt: no decoder
};

}  // namespace sluice::tokenizer_detail
