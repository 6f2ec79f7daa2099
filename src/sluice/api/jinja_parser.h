// Parses the token stream of a template into a syntax tree. Everything outside the
// supported subset (unknown tags, filters or tests, `{% include %}`, ...) is a
// SyntaxError naming the line and column, so a template either parses into
// something we render exactly like jinja2 or is refused up front.
#pragma once

#include <string_view>

#include "sluice/api/jinja_ast.h"
#include "sluice/api/jinja_lexer.h"

namespace sluice::jinja {

// Throws SyntaxError.
Template parse_template(std::string_view source);

}  // namespace sluice::jinja
