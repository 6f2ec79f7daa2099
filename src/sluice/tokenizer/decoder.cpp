#include "sluice/tokenizer/decoder.h"

#include <fmt/format.h>

#include "sluice/tokenizer/byte_level.h"
#include "sluice/tokenizer/utf8.h"

namespace sluice::tokenizer_detail {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The byte a "<0xNN>" token stands for (JavaScript parseInt(token.slice(3, 5), 16)).
std::optional<unsigned char> byte_fallback_value(std::string_view token) {
  if (token.size() != 6 || !token.starts_with("<0x") || !token.ends_with(">")) return std::nullopt;
  const int high = hex_value(token[3]);
  if (high < 0) return std::nullopt;
  const int low = hex_value(token[4]);
  return static_cast<unsigned char>(low < 0 ? high : high * 16 + low);
}

std::string replace_literal(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  std::size_t begin = 0;
  while (true) {
    const std::size_t found = from.empty() ? std::string_view::npos : text.find(from, begin);
    out.append(text.substr(begin, found - begin));
    if (found == std::string_view::npos) break;
    out.append(to);
    begin = found + from.size();
  }
  return out;
}

// Byte-level strings -> raw bytes (a code point outside the byte map becomes
// byte 0, as in the reference's Uint8Array conversion).
std::string byte_level_bytes(std::string_view text) {
  const ByteLevelMap& map = ByteLevelMap::get();
  std::string bytes;
  bytes.reserve(text.size());
  std::size_t pos = 0;
  while (pos < text.size()) {
    const auto byte = map.byte_of(next_code_point(text, pos));
    bytes.push_back(static_cast<char>(byte ? *byte : 0));
  }
  return bytes;
}

// Byte-level strings -> bytes -> text.
void append_byte_level_decoded(std::string_view text, std::string& out) {
  append_utf8_replacing_invalid(byte_level_bytes(text), out);
}

std::vector<std::string> byte_level(std::vector<std::string> tokens, const StringSet& added_contents) {
  std::vector<std::string> out;
  std::string run;
  bool have_run = false;
  for (std::string& token : tokens) {
    if (added_contents.contains(token)) {
      if (have_run) {
        out.emplace_back();
        append_byte_level_decoded(run, out.back());
        run.clear();
        have_run = false;
      }
      out.push_back(std::move(token));
    } else {
      run += token;
      have_run = true;
    }
  }
  if (have_run) {
    out.emplace_back();
    append_byte_level_decoded(run, out.back());
  }
  return out;
}

std::vector<std::string> byte_fallback(std::vector<std::string> tokens) {
  std::vector<std::string> out;
  std::string bytes;
  const auto flush = [&] {
    if (bytes.empty()) return;
    out.emplace_back();
    append_utf8_replacing_invalid(bytes, out.back());
    bytes.clear();
  };
  for (std::string& token : tokens) {
    if (const auto byte = byte_fallback_value(token)) {
      bytes.push_back(static_cast<char>(*byte));
    } else {
      flush();
      out.push_back(std::move(token));
    }
  }
  flush();
  return out;
}

std::string strip(std::string_view token, const StripDecoder& step) {
  // Count code points from each end that equal `content` (up to start / stop).
  std::size_t begin = 0;
  for (std::int64_t i = 0; i < step.start && begin < token.size(); ++i) {
    std::size_t pos = begin;
    if (next_code_point(token, pos) != step.content) break;
    begin = pos;
  }
  std::size_t end = token.size();
  for (std::int64_t i = 0; i < step.stop && end > begin; ++i) {
    std::size_t start = end - 1;
    while (start > begin && (static_cast<unsigned char>(token[start]) & 0xC0) == 0x80) --start;
    std::size_t pos = start;
    if (next_code_point(token, pos) != step.content) break;
    end = start;
  }
  return std::string(token.substr(begin, end - begin));
}

}  // namespace

Decoder Decoder::from_json(const Json& value, std::string_view path) {
  Decoder decoder;
  if (!value.is_null()) {
    decoder.steps_.emplace();
    decoder.add(value, path);
  }
  return decoder;
}

void Decoder::add(const Json& value, std::string_view path) {
  const std::string& type = expect_string(required_field(value, "type", path), join_path(path, "type"));
  if (type == "Sequence") {
    const std::string list_path = join_path(path, "decoders");
    const Json& list = expect_array(required_field(value, "decoders", path), list_path);
    for (std::size_t i = 0; i < list.size(); ++i) add(list[i], fmt::format("{}[{}]", list_path, i));
  } else if (type == "ByteLevel") {
    steps_->emplace_back(ByteLevelDecoder{});
  } else if (type == "Replace") {
    steps_->emplace_back(ReplaceDecoder{
        Pattern::from_json(required_field(value, "pattern", path), join_path(path, "pattern")),
        expect_string(required_field(value, "content", path), join_path(path, "content"))});
  } else if (type == "ByteFallback") {
    steps_->emplace_back(ByteFallbackDecoder{});
  } else if (type == "Fuse") {
    steps_->emplace_back(FuseDecoder{});
  } else if (type == "Strip") {
    const std::string content = expect_string(required_field(value, "content", path), join_path(path, "content"));
    std::size_t pos = 0;
    const char32_t cp = content.empty() ? U' ' : next_code_point(content, pos);
    if (content.empty() || pos != content.size()) {
      throw_load_error(join_path(path, "content"), "expected a single character");
    }
    steps_->emplace_back(StripDecoder{cp, int_or(value, "start", 0, path), int_or(value, "stop", 0, path)});
  } else if (type == "Metaspace") {
    // Without add_prefix_space (newer files), Hugging Face strips the first
    // token's space unless prepend_scheme is "never".
    const bool strip_first = optional_field(value, "add_prefix_space") != nullptr
                                 ? bool_or(value, "add_prefix_space", false, path)
                                 : string_or(value, "prepend_scheme", "always", path) != "never";
    steps_->emplace_back(MetaspaceDecoder{string_or(value, "replacement", "\xE2\x96\x81", path), strip_first});
  } else if (type == "BPEDecoder") {
    steps_->emplace_back(BpeSuffixDecoder{string_or(value, "suffix", "</w>", path)});
  } else {
    throw_load_error(join_path(path, "type"), fmt::format("unsupported decoder type \"{}\"", type));
  }
}

std::string Decoder::decode(std::vector<std::string> tokens, const StringSet& added_contents) const {
  if (!steps_) {
    std::string joined;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) joined.push_back(' ');
      joined += tokens[i];
    }
    return joined;
  }
  for (const DecoderStep& step : *steps_) {
    std::visit(
        [&](const auto& s) {
          using S = std::decay_t<decltype(s)>;
          if constexpr (std::is_same_v<S, ByteLevelDecoder>) {
            tokens = byte_level(std::move(tokens), added_contents);
          } else if constexpr (std::is_same_v<S, ReplaceDecoder>) {
            for (std::string& token : tokens) token = s.pattern.replace_all(token, s.content);
          } else if constexpr (std::is_same_v<S, ByteFallbackDecoder>) {
            tokens = byte_fallback(std::move(tokens));
          } else if constexpr (std::is_same_v<S, FuseDecoder>) {
            std::string fused;
            for (const std::string& token : tokens) fused += token;
            tokens.assign(1, std::move(fused));
          } else if constexpr (std::is_same_v<S, StripDecoder>) {
            for (std::string& token : tokens) token = strip(token, s);
          } else if constexpr (std::is_same_v<S, MetaspaceDecoder>) {
            for (std::size_t i = 0; i < tokens.size(); ++i) {
              tokens[i] = replace_literal(tokens[i], s.replacement, " ");
              if (s.add_prefix_space && i == 0 && tokens[i].starts_with(' ')) tokens[i].erase(0, 1);
            }
          } else if constexpr (std::is_same_v<S, BpeSuffixDecoder>) {
            for (std::size_t i = 0; i < tokens.size(); ++i) {
              tokens[i] = replace_literal(tokens[i], s.suffix, i + 1 == tokens.size() ? "" : " ");
            }
          }
        },
        step);
  }
  std::string text;
  for (const std::string& token : tokens) text += token;
  return text;
}

std::string Decoder::token_bytes(std::string token, bool is_added) const {
  if (!steps_) return token;
  for (const DecoderStep& step : *steps_) {
    std::visit(
        [&](const auto& s) {
          using S = std::decay_t<decltype(s)>;
          if constexpr (std::is_same_v<S, ByteLevelDecoder>) {
            if (!is_added) token = byte_level_bytes(token);
          } else if constexpr (std::is_same_v<S, ReplaceDecoder>) {
            token = s.pattern.replace_all(token, s.content);
          } else if constexpr (std::is_same_v<S, ByteFallbackDecoder>) {
            if (const auto byte = byte_fallback_value(token)) token.assign(1, static_cast<char>(*byte));
          } else if constexpr (std::is_same_v<S, MetaspaceDecoder>) {
            token = replace_literal(token, s.replacement, " ");
          } else if constexpr (std::is_same_v<S, BpeSuffixDecoder>) {
            token = replace_literal(token, s.suffix, " ");
          }
          // Fuse joins tokens and Strip trims the text's ends: neither changes
          // a token in the middle.
        },
        step);
  }
  return token;
}

}  // namespace sluice::tokenizer_detail
