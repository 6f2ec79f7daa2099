#include "sluice/api/jinja_lexer.h"

#include <array>
#include <cctype>

#include "sluice/api/jinja_strings.h"

namespace sluice::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

// Python's str.rstrip() / "\s" on the ASCII-dominated text around tags; Unicode
// spaces are handled by decoding when present.
std::size_t rstrip_end(std::string_view text) {
  std::vector<char32_t> cps = utf8_decode(text);
  std::size_t end = cps.size();
  while (end > 0 && is_python_space(cps[end - 1])) --end;
  return utf8_encode(cps, 0, end).size();
}

bool all_space(std::string_view text) {
  for (char32_t cp : utf8_decode(text)) {
    if (!is_python_space(cp)) return false;
  }
  return true;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {
    for (std::size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    std::size_t pos = 0;
    bool line_starting = true;
    while (pos <= src_.size()) {
      const std::size_t tag = find_tag(pos);
      std::string_view text(src_.data() + pos, (tag == std::string::npos ? src_.size() : tag) - pos);
      if (tag == std::string::npos) {
        emit_data(text, pos);
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'
      const char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      text = strip_before_tag(text, sign, kind != '{', line_starting);
      emit_data(text, pos);
      std::size_t body = tag + 2 + ((sign == '-' || (sign == '+' && kind != '{')) ? 1 : 0);
      std::size_t after = 0;
      if (kind == '#') {
        after = lex_comment(tag, body);
      } else if (kind == '%' && is_raw_block(body)) {
        after = lex_raw(tag, body);
      } else {
        after = lex_tag(tag, body, kind == '%');
      }
      line_starting = after > 0 && src_[after - 1] == '\n';
      pos = after;
      if (pos == src_.size()) break;
    }
    tokens_.push_back(Token{TokenKind::kEnd, "", line_of(src_.size()), column_of(src_.size())});
    return std::move(tokens_);
  }

 private:
  int line_of(std::size_t offset) const {
    std::size_t lo = 0;
    std::size_t hi = line_starts_.size();
    while (hi - lo > 1) {
      const std::size_t mid = (lo + hi) / 2;
      if (line_starts_[mid] <= offset) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    return static_cast<int>(lo) + 1;
  }
  int column_of(std::size_t offset) const {
    return static_cast<int>(offset - line_starts_[static_cast<std::size_t>(line_of(offset) - 1)]) + 1;
  }
  [[noreturn]] void fail(const std::string& message, std::size_t offset) const {
    throw SyntaxError{message, line_of(offset), column_of(offset)};
  }

  // Whitespace control on the text before a tag: `-` strips all trailing
  // whitespace; otherwise lstrip_blocks drops the indentation before a block or
  // comment tag that starts its line (`+` opts out).
  static std::string_view strip_before_tag(std::string_view text, char sign, bool is_block,
                                           bool line_starting) {
    if (sign == '-') return text.substr(0, rstrip_end(text));
    if (sign == '+' || !is_block) return text;
    const std::size_t newline = text.rfind('\n');
    const std::size_t line_pos = newline == std::string_view::npos ? 0 : newline + 1;
    if ((line_pos > 0 || line_starting) && line_pos < text.size() && all_space(text.substr(line_pos))) {
      return text.substr(0, line_pos);
    }
    return text;
  }

  std::size_t find_tag(std::size_t from) const {
    std::size_t pos = from;
    while (true) {
      pos = src_.find('{', pos);
      if (pos == std::string::npos || pos + 1 >= src_.size()) return std::string::npos;
      const char next = src_[pos + 1];
      if (next == '{' || next == '%' || next == '#') return pos;
      ++pos;
    }
  }

  void emit_data(std::string_view text, std::size_t offset) {
    if (text.empty()) return;
    tokens_.push_back(Token{TokenKind::kData, std::string(text), line_of(offset), column_of(offset)});
  }

  // Whitespace after a closing delimiter: "-" eats all of it, trim_blocks eats one
  // newline after block and comment tags, "+" keeps it.
  std::size_t consume_after_end(std::size_t after, char sign, bool is_block_like) const {
    if (sign == '-') {
      while (after < src_.size()) {
        const std::size_t next = skip_one_space(after);
        if (next == after) break;
        after = next;
      }
      return after;
    }
    if (sign != '+' && is_block_like && after < src_.size() && src_[after] == '\n') return after + 1;
    return after;
  }

  std::size_t skip_one_space(std::size_t at) const {
    if (is_space(src_[at])) return at + 1;
    const std::vector<char32_t> cps = utf8_decode(std::string_view(src_).substr(at, 4));
    if (!cps.empty() && cps[0] >= 0x80 && is_python_space(cps[0])) {
      std::string one;
      utf8_append(one, cps[0]);
      return at + one.size();
    }
    return at;
  }

  std::size_t lex_comment(std::size_t tag, std::size_t body) {
    // jinja2 quirk, kept for byte equality: a `{#` that ends the template is dropped.
    if (body >= src_.size()) return src_.size();
    const std::size_t end = src_.find("#}", body);
    if (end == std::string::npos) fail("missing end of comment tag", tag);
    char sign = '\0';
    if (end > body && (src_[end - 1] == '-' || src_[end - 1] == '+')) sign = src_[end - 1];
    return consume_after_end(end + 2, sign, true);
  }

  std::size_t skip_spaces(std::size_t at) const {
    while (at < src_.size() && is_space(src_[at])) ++at;
    return at;
  }

  bool word_at(std::size_t at, std::string_view word) const {
    if (src_.compare(at, word.size(), word) != 0) return false;
    const std::size_t end = at + word.size();
    return end >= src_.size() || !(std::isalnum(static_cast<unsigned char>(src_[end])) || src_[end] == '_');
  }

  // `{% raw %}` / `{% raw -%}`: jinja2 only recognises these two forms (a `+%}` end
  // makes it an ordinary, unknown tag) and never trims the newline after them.
  std::size_t raw_block_end(std::size_t body) const {
    const std::size_t name = skip_spaces(body);
    if (!word_at(name, "raw")) return std::string::npos;
    std::size_t at = skip_spaces(name + 3);
    if (src_.compare(at, 3, "-%}") == 0) return consume_after_end(at + 3, '-', true);
    if (src_.compare(at, 2, "%}") == 0) return at + 2;
    return std::string::npos;
  }
  bool is_raw_block(std::size_t body) const { return raw_block_end(body) != std::string::npos; }

  // {% raw %}...{% endraw %}: the text in between is emitted verbatim, with the
  // usual strip/lstrip_blocks rules before `{% endraw`.
  std::size_t lex_raw(std::size_t tag, std::size_t body) {
    const std::size_t content = raw_block_end(body);
    std::size_t search = content;
    while (true) {
      const std::size_t open = src_.find("{%", search);
      if (open == std::string::npos) fail("missing '{% endraw %}' for this raw block", tag);
      const char open_sign = open + 2 < src_.size() ? src_[open + 2] : '\0';
      std::size_t p = open + 2 + ((open_sign == '-' || open_sign == '+') ? 1 : 0);
      p = skip_spaces(p);
      if (!word_at(p, "endraw")) {
        search = open + 2;
        continue;
      }
      p = skip_spaces(p + 6);
      char end_sign = '\0';
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) end_sign = src_[p++];
      if (src_.compare(p, 2, "%}") != 0) fail("expected '%}' after 'endraw'", p);
      std::string_view text(src_.data() + content, open - content);
      const bool line_starting = content > 0 && src_[content - 1] == '\n';
      text = strip_before_tag(text, open_sign, /*is_block=*/true, line_starting);
      emit_data(text, content);
      return consume_after_end(p + 2, end_sign, true);
    }
  }

  // Expression tokens of a {{ }} or {% %} tag, up to and including its end.
  std::size_t lex_tag(std::size_t tag, std::size_t body, bool is_block) {
    tokens_.push_back(Token{is_block ? TokenKind::kBlockBegin : TokenKind::kVariableBegin, "",
                            line_of(tag), column_of(tag)});
    const std::string_view end_delim = is_block ? "%}" : "}}";
    std::vector<char> brackets;
    std::size_t at = body;
    while (true) {
      while (at < src_.size() && is_space(src_[at])) ++at;
      if (at >= src_.size()) {
        fail(is_block ? "unclosed block tag: missing '%}'" : "unclosed variable tag: missing '}}'",
             tag);
      }
      if (brackets.empty()) {
        for (char sign : {'-', '+', '\0'}) {
          const std::size_t d = at + (sign != '\0' ? 1 : 0);
          if (sign != '\0' && src_[at] != sign) continue;
          if (sign == '+' && !is_block) continue;
          if (src_.compare(d, 2, end_delim) != 0) continue;
          tokens_.push_back(Token{is_block ? TokenKind::kBlockEnd : TokenKind::kVariableEnd, "",
                                  line_of(at), column_of(at)});
          return consume_after_end(d + 2, sign, is_block);
        }
      }
      at = lex_one(at, brackets);
    }
  }

  std::size_t lex_one(std::size_t at, std::vector<char>& brackets) {
    const char c = src_[at];
    const int line = line_of(at);
    const int column = column_of(at);
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t end = at;
      while (end < src_.size() &&
             (std::isalnum(static_cast<unsigned char>(src_[end])) || src_[end] == '_')) {
        ++end;
      }
      tokens_.push_back(Token{TokenKind::kName, src_.substr(at, end - at), line, column});
      return end;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) return lex_number(at, line, column);
    if (c == '\'' || c == '"') return lex_string(at, line, column);
    static constexpr std::array<std::string_view, 27> kOperators = {
        "**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">",
        "=",  "(",  ")",  "[",  "]",  "{",  "}", ",", ".", ":", "|", ";", "!"};
    for (std::string_view op : kOperators) {
      if (op == "!") continue;  // '!' alone is not an operator; only "!="
      if (src_.compare(at, op.size(), op) != 0) continue;
      if (op == "(" || op == "[" || op == "{") brackets.push_back(op[0]);
      if (op == ")" || op == "]" || op == "}") {
        const char open = op == ")" ? '(' : (op == "]" ? '[' : '{');
        if (brackets.empty() || brackets.back() != open) {
          fail("unexpected '" + std::string(op) + "'", at);
        }
        brackets.pop_back();
      }
      tokens_.push_back(Token{TokenKind::kOperator, std::string(op), line, column});
      return at + op.size();
    }
    fail(std::string("unexpected character '") + c + "'", at);
  }

  std::size_t lex_number(std::size_t at, int line, int column) {
    auto digits = [&](std::size_t p) {
      while (p < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[p])) ||
                                 (src_[p] == '_' && p + 1 < src_.size() &&
                                  std::isdigit(static_cast<unsigned char>(src_[p + 1]))))) {
        ++p;
      }
      return p;
    };
    std::size_t end = digits(at);
    bool is_float = false;
    if (end + 1 < src_.size() && src_[end] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[end + 1]))) {
      end = digits(end + 1);
      is_float = true;
    }
    if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      std::size_t p = end + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) {
        end = digits(p);
        is_float = true;
      }
    }
    std::string text;
    for (std::size_t i = at; i < end; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    tokens_.push_back(Token{is_float ? TokenKind::kFloat : TokenKind::kInteger, text, line, column});
    return end;
  }

  // Python "unicode-escape" decoding of a string literal's body.
  std::size_t lex_string(std::size_t at, int line, int column) {
    const char quote = src_[at];
    std::string value;
    std::size_t p = at + 1;
    while (true) {
      if (p >= src_.size()) fail("unterminated string literal", at);
      const char c = src_[p];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) fail("unterminated string literal", at);
      const char e = src_[p + 1];
      p += 2;
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case '\\': value += '\\'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case 'a': value += '\a'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'v': value += '\v'; break;
        case '\n': break;  // line continuation
        case 'x': case 'u': case 'U': {
          const std::size_t width = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
          if (p + width > src_.size()) fail("truncated \\" + std::string(1, e) + " escape", p - 2);
          char32_t cp = 0;
          for (std::size_t k = 0; k < width; ++k) {
            const char h = src_[p + k];
            if (!std::isxdigit(static_cast<unsigned char>(h))) {
              fail("truncated \\" + std::string(1, e) + " escape", p - 2);
            }
            cp = cp * 16 + static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(h))
                                                     ? h - '0'
                                                     : std::tolower(static_cast<unsigned char>(h)) - 'a' + 10);
          }
          p += width;
          utf8_append(value, cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            char32_t cp = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++k) {
              cp = cp * 8 + static_cast<char32_t>(src_[p++] - '0');
            }
            utf8_append(value, cp);
          } else {
            value += '\\';  // unknown escapes stay as written, as in Python
            value += e;
          }
      }
    }
    tokens_.push_back(Token{TokenKind::kString, std::move(value), line, column});
    return p + 1;
  }

  std::string src_;
  std::vector<std::size_t> line_starts_{0};
  std::vector<Token> tokens_;
};

std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
  return Lexer(normalize_newlines(source)).run();
}

}  // namespace sluice::jinja
