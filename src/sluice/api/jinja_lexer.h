// Splits a Jinja2 template into template text and expression tokens, applying the
// whitespace control of the reference environment: `{%-`/`-%}` strip, `{%+`/`+%}`
// keep, and Hugging Face's trim_blocks=True, lstrip_blocks=True. Newlines are
// normalised to "\n" and one trailing newline is dropped (keep_trailing_newline=False).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::jinja {

enum class TokenKind {
  kData,           // template text between tags, already whitespace-controlled
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,   // text: the unescaped value
  kInteger,  // text: digits without underscores
  kFloat,
  kOperator,  // text: the operator, e.g. "==", "(", "|"
  kEnd,
};

struct Token {
  TokenKind kind;
  std::string text;
  int line = 1;
  int column = 1;
};

// Thrown by the lexer and the parser; `line`/`column` are 1-based positions in the
// template. Caught at the ChatTemplate API boundary.
struct SyntaxError {
  std::string message;
  int line = 0;
  int column = 0;
};

// Throws SyntaxError on an unterminated tag, comment or string, or a stray character.
std::vector<Token> tokenize(std::string_view source);

}  // namespace sluice::jinja
