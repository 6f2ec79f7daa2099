// JsRegex: a JavaScript regular expression (the dialect tokenizer.json
// patterns are run with in the reference: flags "gu") compiled with PCRE2 in
// UTF mode with JIT. The pattern is rewritten first so PCRE2 gives the
// JavaScript answer: \s and \S use JavaScript's whitespace set, `.` excludes
// JavaScript's line terminators, \uXXXX escapes become \x{XXXX}, and the
// Python-only constructs the reference rewrites (`(?i:'s|'t|...)`, needless
// escapes of # & ~) are rewritten the same way. \d and \w stay ASCII, as in
// JavaScript. Matching iterates like String.prototype.matchAll: an empty match
// advances by one code point.
//
// Thread-safe: the compiled pattern is shared; per-thread match data and JIT
// stack live in thread_local storage.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/common/result.h"

namespace sluice::tokenizer_detail {

struct RegexMatch {
  std::size_t begin = 0;  // byte offsets into the subject
  std::size_t end = 0;
  // Capture groups 1..n as (begin, end); npos begin means "did not participate".
  std::vector<std::pair<std::size_t, std::size_t>> groups;
};

class JsRegex {
 public:
  // `js_pattern` as written in tokenizer.json (a Python/Rust regex that the
  // reference hands to JavaScript after its rewrites).
  static Result<JsRegex> compile(std::string_view js_pattern);
  // A pattern matching `literal` exactly.
  static Result<JsRegex> literal(std::string_view literal);

  // Calls on_match(begin, end) for each match in `subject` (valid UTF-8), in order.
  // If PCRE2 hits a resource limit (none of the tokenizer patterns come close,
  // even on megabytes of one character), the rest of the subject is reported as
  // one match, so no text is ever dropped.
  template <class F>
  void for_each_match(std::string_view subject, F&& on_match) const {
    std::size_t start = 0;
    std::size_t begin = 0;
    std::size_t end = 0;
    while (start <= subject.size()) {
      const FindResult found = find(subject, start, &begin, &end);
      if (found == FindResult::kNoMatch) break;
      if (found == FindResult::kLimitExceeded) {
        if (start < subject.size()) on_match(start, subject.size());
        break;
      }
      on_match(begin, end);
      start = end > begin ? end : advance_one_code_point(subject, end);
    }
  }

  enum class FindResult { kMatch, kNoMatch, kLimitExceeded };
  // Finds the first match at or after `start`.
  FindResult find(std::string_view subject, std::size_t start, std::size_t* begin, std::size_t* end) const;
  // Like find, also reporting capture groups.
  bool find_with_groups(std::string_view subject, std::size_t start, RegexMatch* match) const;

  const std::string& pcre2_pattern() const { return pattern_; }

 private:
  struct Code;
  static std::size_t advance_one_code_point(std::string_view subject, std::size_t pos);
  std::shared_ptr<const Code> code_;
  std::string pattern_;  // after rewriting, for error messages
};

// Rewrites a JavaScript pattern into the PCRE2 dialect (exposed for tests).
Result<std::string> js_pattern_to_pcre2(std::string_view js_pattern);

}  // namespace sluice::tokenizer_detail
