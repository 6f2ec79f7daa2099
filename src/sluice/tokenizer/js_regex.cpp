#include "sluice/tokenizer/js_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <fmt/format.h>

#include "sluice/tokenizer/utf8.h"

namespace sluice::tokenizer_detail {
namespace {

// JavaScript's \s, as the body of a character class.
constexpr std::string_view kJsSpaceClassBody =
    "\\t\\n\\x{0B}\\f\\r \\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}\\x{FEFF}";

// The reference's PROBLEMATIC_REGEX_MAP: JavaScript has no (?i:...) groups.
constexpr std::string_view kCaseInsensitiveContractions = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";
constexpr std::string_view kCaseInsensitiveContractionsJs =
    "(?:'([sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]))";

std::string replace_all(std::string text, std::string_view from, std::string_view to) {
  std::size_t pos = 0;
  while ((pos = text.find(from, pos)) != std::string::npos) {
    text.replace(pos, from.size(), to);
    pos += to.size();
  }
  return text;
}

bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

struct ThreadMatchState {
  pcre2_match_data* data = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  pcre2_match_context* context = nullptr;
  ThreadMatchState() {
    data = pcre2_match_data_create(32, nullptr);
    // Patterns with lookahead on huge inputs can need more than the default 32 KiB.
    jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    context = pcre2_match_context_create(nullptr);
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~ThreadMatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_data_free(data);
  }
  ThreadMatchState(const ThreadMatchState&) = delete;
  ThreadMatchState& operator=(const ThreadMatchState&) = delete;
};

ThreadMatchState& thread_match_state() {
  thread_local ThreadMatchState state;
  return state;
}

}  // namespace

struct JsRegex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

Result<std::string> js_pattern_to_pcre2(std::string_view js_pattern) {
  // 1. The reference strips backslashes before # & ~ (valid in Python, not with the u flag).
  std::string pattern;
  for (std::size_t i = 0; i < js_pattern.size(); ++i) {
    if (js_pattern[i] == '\\' && i + 1 < js_pattern.size() &&
        (js_pattern[i + 1] == '#' || js_pattern[i + 1] == '&' || js_pattern[i + 1] == '~')) {
      continue;
    }
    pattern.push_back(js_pattern[i]);
  }
  // 2. Its rewrite of the case-insensitive group (PCRE2 would also fold 's' to U+017F).
  pattern = replace_all(std::move(pattern), kCaseInsensitiveContractions,
                        kCaseInsensitiveContractionsJs);

  // 3. JavaScript semantics for \s, \S, '.', \uXXXX.
  std::string out;
  bool in_class = false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      if (e == 's') {
        out += in_class ? std::string(kJsSpaceClassBody) : fmt::format("[{}]", kJsSpaceClassBody);
      } else if (e == 'S') {
        if (in_class) {
          return Error{fmt::format("regex '{}': \\S inside a character class is not supported",
                                   js_pattern)};
        }
        out += fmt::format("[^{}]", kJsSpaceClassBody);
      } else if (e == 'u' && i + 5 < pattern.size() && is_hex(pattern[i + 2]) &&
                 is_hex(pattern[i + 3]) && is_hex(pattern[i + 4]) && is_hex(pattern[i + 5])) {
        out += fmt::format("\\x{{{}}}", pattern.substr(i + 2, 4));
        i += 4;
      } else if (e == 'u' && i + 2 < pattern.size() && pattern[i + 2] == '{') {
        const std::size_t close = pattern.find('}', i + 3);
        if (close == std::string::npos) {
          return Error{fmt::format("regex '{}': unterminated \\u{{...}} escape", js_pattern)};
        }
        out += fmt::format("\\x{{{}}}", pattern.substr(i + 3, close - i - 3));
        i = close - 1;
      } else {
        out.push_back(c);
        out.push_back(e);
      }
      ++i;
      continue;
    }
    if (in_class) {
      if (c == ']') in_class = false;
      out.push_back(c);
      continue;
    }
    if (c == '[') {
      in_class = true;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal in PCRE2 but ends an empty class in
      // JavaScript; no tokenizer pattern relies on either, so keep PCRE2's reading.
      continue;
    }
    if (c == '.') {
      out += "[^\\n\\r\\x{2028}\\x{2029}]";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

Result<JsRegex> JsRegex::compile(std::string_view js_pattern) {
  SLUICE_TRY_ASSIGN(pattern, js_pattern_to_pcre2(js_pattern));
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_NO_UTF_CHECK, &error_code, &error_offset,
                                   nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    return Error{fmt::format("regex '{}' does not compile (as '{}'): {} at offset {}", js_pattern,
                             pattern, reinterpret_cast<const char*>(message), error_offset)};
  }
  auto compiled = std::make_shared<Code>();
  compiled->code = code;
  compiled->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  JsRegex regex;
  regex.code_ = std::move(compiled);
  regex.pattern_ = std::move(pattern);
  return regex;
}

Result<JsRegex> JsRegex::literal(std::string_view literal) {
  std::string escaped;
  for (const char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}/-").find(c) != std::string_view::npos) escaped.push_back('\\');
    escaped.push_back(c);
  }
  return compile(escaped);
}

std::size_t JsRegex::advance_one_code_point(std::string_view subject, std::size_t pos) {
  if (pos >= subject.size()) return pos + 1;
  return pos + utf8_sequence_length(static_cast<unsigned char>(subject[pos]));
}

JsRegex::FindResult JsRegex::find(std::string_view subject, std::size_t start, std::size_t* begin,
                                  std::size_t* end) const {
  ThreadMatchState& state = thread_match_state();
  const auto* data = reinterpret_cast<PCRE2_SPTR>(subject.data());
  const int rc = code_->jit
                     ? pcre2_jit_match(code_->code, data, subject.size(), start, 0, state.data,
                                       state.context)
                     : pcre2_match(code_->code, data, subject.size(), start, PCRE2_NO_UTF_CHECK,
                                   state.data, state.context);
  if (rc == PCRE2_ERROR_NOMATCH) return FindResult::kNoMatch;
  if (rc < 0) return FindResult::kLimitExceeded;  // match/depth limit or JIT stack
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
  *begin = ovector[0];
  *end = ovector[1];
  return FindResult::kMatch;
}

bool JsRegex::find_with_groups(std::string_view subject, std::size_t start,
                               RegexMatch* match) const {
  ThreadMatchState& state = thread_match_state();
  const auto* data = reinterpret_cast<PCRE2_SPTR>(subject.data());
  const int rc = code_->jit
                     ? pcre2_jit_match(code_->code, data, subject.size(), start, 0, state.data,
                                       state.context)
                     : pcre2_match(code_->code, data, subject.size(), start, PCRE2_NO_UTF_CHECK,
                                   state.data, state.context);
  if (rc < 0) return false;
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
  const std::uint32_t num_pairs = pcre2_get_ovector_count(state.data);
  std::uint32_t num_groups = 0;
  pcre2_pattern_info(code_->code, PCRE2_INFO_CAPTURECOUNT, &num_groups);
  match->begin = ovector[0];
  match->end = ovector[1];
  match->groups.clear();
  for (std::uint32_t g = 1; g <= num_groups; ++g) {
    if (g < num_pairs && ovector[2 * g] != PCRE2_UNSET) {
      match->groups.emplace_back(ovector[2 * g], ovector[2 * g + 1]);
    } else {
      match->groups.emplace_back(std::string_view::npos, std::string_view::npos);
    }
  }
  return true;
}

}  // namespace sluice::tokenizer_detail
