#include "sluice/tokenizer/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <fmt/format.h>

#include "sluice/tokenizer/utf8.h"

namespace sluice::tokenizer_detail {
namespace {

bool is_ascii(std::string_view text) {
  for (const char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

template <class T>
T value_or_throw(Result<T> result, std::string_view path) {
  if (!result.ok()) throw_load_error(path, result.error_message());
  return std::move(result).value();
}

std::string to_lower(std::string_view text) {
  std::string out;
  icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<std::int32_t>(text.size())))
      .toLower(icu::Locale::getRoot())
      .toUTF8String(out);
  return out;
}

std::string strip_marks(std::string_view text) {
  std::string out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t start = pos;
    const char32_t cp = next_code_point(text, pos);
    if ((U_GET_GC_MASK(static_cast<UChar32>(cp)) & U_GC_M_MASK) == 0) out.append(text.substr(start, pos - start));
  }
  return out;
}

// The reference's Precompiled normalizer (its stand-in for nmt_nfkc).
std::string precompiled_nmt_nfkc(std::string_view text) {
  std::string spaced;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t start = pos;
    const char32_t cp = next_code_point(text, pos);
    const bool control = (cp >= 0x01 && cp <= 0x08) || cp == 0x0B || (cp >= 0x0E && cp <= 0x1F) ||
                         cp == 0x7F || cp == 0x8F || cp == 0x9F;
    const bool to_space = cp == 0x09 || cp == 0x0A || cp == 0x0C || cp == 0x0D || cp == 0xA0 ||
                          cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) || cp == 0x2028 ||
                          cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x2581 ||
                          cp == 0x3000 || cp == 0xFEFF || cp == 0xFFFD;
    if (control) continue;
    if (to_space) {
      spaced.push_back(' ');
    } else {
      spaced.append(text.substr(start, pos - start));
    }
  }
  // Fullwidth tilde must survive NFKC (SentencePiece keeps it).
  constexpr std::string_view kFullwidthTilde = "\xEF\xBD\x9E";
  std::string out;
  std::size_t begin = 0;
  while (true) {
    const std::size_t found = spaced.find(kFullwidthTilde, begin);
    out += unicode_normalize(std::string_view(spaced).substr(begin, found - begin), UnicodeForm::kNfkc);
    if (found == std::string::npos) break;
    out += kFullwidthTilde;
    begin = found + kFullwidthTilde.size();
  }
  return out;
}

}  // namespace

std::string unicode_normalize(std::string_view text, UnicodeForm form) {
  if (is_ascii(text)) return std::string(text);  // every form leaves ASCII alone
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* normalizer = nullptr;
  switch (form) {
    case UnicodeForm::kNfc: normalizer = icu::Normalizer2::getNFCInstance(status); break;
    case UnicodeForm::kNfd: normalizer = icu::Normalizer2::getNFDInstance(status); break;
    case UnicodeForm::kNfkc: normalizer = icu::Normalizer2::getNFKCInstance(status); break;
    case UnicodeForm::kNfkd: normalizer = icu::Normalizer2::getNFKDInstance(status); break;
  }
  SLUICE_CHECK_MSG(U_SUCCESS(status) && normalizer != nullptr, "ICU normalizer data unavailable");
  const icu::StringPiece piece(text.data(), static_cast<std::int32_t>(text.size()));
  if (normalizer->isNormalizedUTF8(piece, status) && U_SUCCESS(status)) return std::string(text);
  status = U_ZERO_ERROR;
  std::string out;
  icu::StringByteSink<std::string> sink(&out);
  normalizer->normalizeUTF8(0, piece, sink, nullptr, status);
  SLUICE_CHECK_MSG(U_SUCCESS(status), "ICU normalization failed on valid UTF-8");
  return out;
}

Pattern Pattern::from_json(const Json& value, std::string_view path) {
  expect_object(value, path);
  Pattern pattern;
  if (const Json* literal = optional_field(value, "String")) {
    pattern.literal = expect_string(*literal, join_path(path, "String"));
  } else if (const Json* regex = optional_field(value, "Regex")) {
    const std::string regex_path = join_path(path, "Regex");
    pattern.regex = value_or_throw(JsRegex::compile(expect_string(*regex, regex_path)), regex_path);
  } else {
    throw_load_error(path, "expected {\"String\": ...} or {\"Regex\": ...}");
  }
  return pattern;
}

std::string Pattern::replace_all(std::string_view text, std::string_view content) const {
  std::string out;
  if (literal) {
    if (literal->empty()) {
      // JavaScript replaceAll("", x) inserts x between every code point and at both ends.
      std::size_t pos = 0;
      out.append(content);
      while (pos < text.size()) {
        const std::size_t start = pos;
        next_code_point(text, pos);
        out.append(text.substr(start, pos - start));
        out.append(content);
      }
      return out;
    }
    std::size_t begin = 0;
    while (true) {
      const std::size_t found = text.find(*literal, begin);
      out.append(text.substr(begin, found - begin));
      if (found == std::string_view::npos) break;
      out.append(content);
      begin = found + literal->size();
    }
    return out;
  }
  std::size_t copied = 0;
  std::size_t start = 0;
  RegexMatch match;
  while (start <= text.size() && regex->find_with_groups(text, start, &match)) {
    out.append(text.substr(copied, match.begin - copied));
    // JavaScript replacement patterns.
    for (std::size_t i = 0; i < content.size(); ++i) {
      if (content[i] == '$' && i + 1 < content.size()) {
        const char next = content[i + 1];
        if (next == '$') { out.push_back('$'); ++i; continue; }
        if (next == '&') { out.append(text.substr(match.begin, match.end - match.begin)); ++i; continue; }
        if (next >= '1' && next <= '9' && static_cast<std::size_t>(next - '1') < match.groups.size()) {
          const auto [b, e] = match.groups[static_cast<std::size_t>(next - '1')];
          if (b != std::string_view::npos) out.append(text.substr(b, e - b));
          ++i;
          continue;
        }
      }
      out.push_back(content[i]);
    }
    copied = match.end;
    if (match.end > match.begin) {
      start = match.end;
    } else {
      start = match.end + (match.end < text.size()
                               ? utf8_sequence_length(static_cast<unsigned char>(text[match.end]))
                               : 1);
    }
  }
  if (copied < text.size()) out.append(text.substr(copied));
  return out;
}

Normalizer Normalizer::from_json(const Json& value, std::string_view path) {
  Normalizer normalizer;
  if (!value.is_null()) normalizer.add(value, path);
  return normalizer;
}

void Normalizer::add(const Json& value, std::string_view path) {
  const std::string& type = expect_string(required_field(value, "type", path), join_path(path, "type"));
  if (type == "Sequence") {
    const std::string list_path = join_path(path, "normalizers");
    const Json& list = expect_array(required_field(value, "normalizers", path), list_path);
    for (std::size_t i = 0; i < list.size(); ++i) add(list[i], fmt::format("{}[{}]", list_path, i));
  } else if (type == "NFC") {
    steps_.emplace_back(UnicodeNormalization{UnicodeForm::kNfc});
  } else if (type == "NFD") {
    steps_.emplace_back(UnicodeNormalization{UnicodeForm::kNfd});
  } else if (type == "NFKC") {
    steps_.emplace_back(UnicodeNormalization{UnicodeForm::kNfkc});
  } else if (type == "NFKD") {
    steps_.emplace_back(UnicodeNormalization{UnicodeForm::kNfkd});
  } else if (type == "Replace") {
    steps_.emplace_back(ReplaceNormalizer{
        Pattern::from_json(required_field(value, "pattern", path), join_path(path, "pattern")),
        expect_string(required_field(value, "content", path), join_path(path, "content"))});
  } else if (type == "Prepend") {
    steps_.emplace_back(PrependNormalizer{
        expect_string(required_field(value, "prepend", path), join_path(path, "prepend"))});
  } else if (type == "Strip") {
    steps_.emplace_back(StripNormalizer{bool_or(value, "strip_left", false, path),
                                        bool_or(value, "strip_right", false, path)});
  } else if (type == "StripAccents") {
    steps_.emplace_back(StripAccentsNormalizer{});
  } else if (type == "Lowercase") {
    steps_.emplace_back(LowercaseNormalizer{});
  } else if (type == "Precompiled") {
    steps_.emplace_back(PrecompiledNormalizer{});
  } else {
    throw_load_error(join_path(path, "type"), fmt::format("unsupported normalizer type \"{}\"", type));
  }
}

void Normalizer::apply(std::string& text) const {
  for (const NormalizerStep& step : steps_) {
    std::visit(
        [&](const auto& s) {
          using S = std::decay_t<decltype(s)>;
          if constexpr (std::is_same_v<S, UnicodeNormalization>) {
            text = unicode_normalize(text, s.form);
          } else if constexpr (std::is_same_v<S, ReplaceNormalizer>) {
            text = s.pattern.replace_all(text, s.content);
          } else if constexpr (std::is_same_v<S, PrependNormalizer>) {
            text.insert(0, s.prepend);
          } else if constexpr (std::is_same_v<S, StripNormalizer>) {
            std::string_view view = text;
            if (s.left) view = js_trim_start(view);
            if (s.right) view = js_trim_end(view);
            text = std::string(view);
          } else if constexpr (std::is_same_v<S, StripAccentsNormalizer>) {
            text = strip_marks(text);
          } else if constexpr (std::is_same_v<S, LowercaseNormalizer>) {
            text = to_lower(text);
          } else if constexpr (std::is_same_v<S, PrecompiledNormalizer>) {
            text = precompiled_nmt_nfkc(text);
          }
        },
        step);
  }
}

}  // namespace sluice::tokenizer_detail
