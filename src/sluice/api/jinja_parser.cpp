#include "sluice/api/jinja_parser.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <initializer_list>

#include "sluice/api/jinja_builtins.h"

namespace sluice::jinja {
namespace {

constexpr int kMaxNestingDepth = 200;  // bounds parser recursion on hostile input

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Template parse() {
    Template t;
    const std::string stop = parse_body(t.body, {});
    if (!stop.empty()) fail_at(current(), "encountered unknown tag '" + stop + "'");
    return t;
  }

 private:
  const Token& current() const { return tokens_[pos_]; }
  const Token& peek(std::size_t ahead = 1) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token& advance() { return tokens_[pos_ < tokens_.size() - 1 ? pos_++ : pos_]; }

  [[noreturn]] void fail_at(const Token& t, const std::string& message) const {
    throw SyntaxError{message, t.line, t.column};
  }

  bool is_op(std::string_view op) const {
    return current().kind == TokenKind::kOperator && current().text == op;
  }
  bool is_name(std::string_view name) const {
    return current().kind == TokenKind::kName && current().text == name;
  }
  void expect_op(std::string_view op) {
    if (!is_op(op)) fail_at(current(), "expected '" + std::string(op) + "', got " + describe(current()));
    advance();
  }
  std::string expect_name() {
    if (current().kind != TokenKind::kName) fail_at(current(), "expected a name, got " + describe(current()));
    return advance().text;
  }
  void expect_block_end() {
    if (current().kind != TokenKind::kBlockEnd) {
      fail_at(current(), "expected end of statement block, got " + describe(current()));
    }
    advance();
  }

  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kEnd: return "end of template";
      case TokenKind::kBlockEnd: return "end of statement block";
      case TokenKind::kVariableEnd: return "end of print statement";
      case TokenKind::kData: return "template data";
      case TokenKind::kString: return "string";
      default: return "'" + t.text + "'";
    }
  }

  // Parses statements until one of `stop_tags` opens a block tag; returns that tag
  // name (the tag's name token is consumed, its arguments are not), or "" at the end.
  std::string parse_body(Body& body, std::initializer_list<std::string_view> stop_tags,
                         const Token* opener = nullptr, std::string_view opener_name = {}) {
    while (true) {
      const Token& t = current();
      switch (t.kind) {
        case TokenKind::kEnd:
          if (opener != nullptr) {
            std::string wanted;
            for (std::string_view s : stop_tags) wanted += (wanted.empty() ? "'" : " or '") + std::string(s) + "'";
            fail_at(*opener, "unexpected end of template: the '" + std::string(opener_name) +
                                 "' block opened here is not closed (looking for " + wanted + ")");
          }
          return "";
        case TokenKind::kData: {
          auto s = make_stmt(StmtKind::kText, t.line);
          s->text = t.text;
          body.push_back(std::move(s));
          advance();
          break;
        }
        case TokenKind::kVariableBegin: {
          advance();
          auto s = make_stmt(StmtKind::kOutput, t.line);
          s->expr = parse_tuple_expression();
          if (current().kind != TokenKind::kVariableEnd) {
            fail_at(current(), "expected end of print statement, got " + describe(current()));
          }
          advance();
          body.push_back(std::move(s));
          break;
        }
        case TokenKind::kBlockBegin: {
          const Token& name_token = peek();
          if (name_token.kind != TokenKind::kName) fail_at(name_token, "expected a tag name");
          for (std::string_view stop : stop_tags) {
            if (name_token.text == stop) {
              advance();
              advance();
              return std::string(stop);
            }
          }
          advance();
          body.push_back(parse_statement());
          break;
        }
        default:
          fail_at(t, "unexpected " + describe(t));
      }
    }
  }

  StmtPtr make_stmt(StmtKind kind, int line) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = line;
    return s;
  }

  StmtPtr parse_statement() {
    const Token& tag = advance();
    BlockDepthGuard guard(*this, tag);
    const std::string& name = tag.text;
    if (name == "if") return parse_if(tag);
    if (name == "for") return parse_for(tag);
    if (name == "set") return parse_set(tag);
    if (name == "macro") return parse_macro(tag);
    if (name == "filter") return parse_filter_block(tag);
    if (name == "generation") {
      auto s = make_stmt(StmtKind::kScope, tag.line);
      expect_block_end();
      parse_body(s->body, {"endgeneration"}, &tag, "generation");
      expect_block_end();
      return s;
    }
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) fail_at(tag, "'" + name + "' outside of a loop");
      auto s = make_stmt(name == "break" ? StmtKind::kBreak : StmtKind::kContinue, tag.line);
      expect_block_end();
      return s;
    }
    if (name == "include" || name == "extends" || name == "import" || name == "from" ||
        name == "block" || name == "call" || name == "with" || name == "do" ||
        name == "autoescape" || name == "trans") {
      fail_at(tag, "the '" + name + "' tag is not supported by sluice's chat-template renderer");
    }
    fail_at(tag, "encountered unknown tag '" + name + "'");
  }

  StmtPtr parse_if(const Token& tag) {
    auto s = make_stmt(StmtKind::kIf, tag.line);
    s->conditions.push_back(parse_tuple_expression());
    expect_block_end();
    while (true) {
      Body branch;
      const std::string stop = parse_body(branch, {"elif", "else", "endif"}, &tag, "if");
      s->bodies.push_back(std::move(branch));
      if (stop == "elif") {
        s->conditions.push_back(parse_tuple_expression());
        expect_block_end();
        continue;
      }
      if (stop == "else") {
        expect_block_end();
        parse_body(s->else_body, {"endif"}, &tag, "if");
      }
      expect_block_end();
      return s;
    }
  }

  Target parse_assign_target(bool allow_attribute) {
    Target target;
    target.names.push_back(expect_name());
    if (allow_attribute && is_op(".")) {
      advance();
      target.attribute = expect_name();
      return target;
    }
    while (is_op(",")) {
      advance();
      if (current().kind != TokenKind::kName) break;
      target.names.push_back(expect_name());
    }
    return target;
  }

  StmtPtr parse_for(const Token& tag) {
    auto s = make_stmt(StmtKind::kFor, tag.line);
    if (is_op("(")) {
      advance();
      s->target = parse_assign_target(false);
      expect_op(")");
    } else {
      s->target = parse_assign_target(false);
    }
    if (!is_name("in")) fail_at(current(), "expected 'in' in for loop, got " + describe(current()));
    advance();
    s->expr = parse_tuple_expression(/*allow_condition=*/false);
    if (is_name("if")) {
      advance();
      s->condition = parse_expression();
    }
    if (is_name("recursive")) fail_at(current(), "recursive loops are not supported");
    expect_block_end();
    ++loop_depth_;
    const std::string stop = parse_body(s->body, {"else", "endfor"}, &tag, "for");
    --loop_depth_;
    if (stop == "else") {
      expect_block_end();
      parse_body(s->else_body, {"endfor"}, &tag, "for");
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_set(const Token& tag) {
    Target target = parse_assign_target(true);
    if (is_op("=")) {
      advance();
      auto s = make_stmt(StmtKind::kSet, tag.line);
      s->target = std::move(target);
      s->expr = parse_tuple_expression();
      expect_block_end();
      return s;
    }
    auto s = make_stmt(StmtKind::kBlockSet, tag.line);
    if (target.names.size() != 1) fail_at(current(), "a block set assigns a single name");
    s->target = std::move(target);
    parse_filter_chain(s->filters);
    expect_block_end();
    parse_body(s->body, {"endset"}, &tag, "set");
    expect_block_end();
    return s;
  }

  void parse_filter_chain(std::vector<FilterCall>& filters) {
    while (is_op("|")) {
      advance();
      filters.push_back(parse_filter_call());
    }
  }

  FilterCall parse_filter_call() {
    FilterCall f;
    const Token& name_token = current();
    f.line = name_token.line;
    f.name = expect_name();
    while (is_op(".")) {
      advance();
      f.name += "." + expect_name();
    }
    if (!is_filter(f.name)) fail_at(name_token, "no filter named '" + f.name + "'");
    if (is_op("(")) parse_call_args(f.args, f.keyword);
    return f;
  }

  StmtPtr parse_filter_block(const Token& tag) {
    auto s = make_stmt(StmtKind::kFilterBlock, tag.line);
    s->filters.push_back(parse_filter_call());
    parse_filter_chain(s->filters);
    expect_block_end();
    parse_body(s->body, {"endfilter"}, &tag, "filter");
    expect_block_end();
    return s;
  }

  StmtPtr parse_macro(const Token& tag) {
    auto s = make_stmt(StmtKind::kMacro, tag.line);
    s->target.names.push_back(expect_name());
    expect_op("(");
    while (!is_op(")")) {
      if (!s->params.empty()) expect_op(",");
      if (is_op(")")) break;
      MacroParam p;
      p.name = expect_name();
      if (is_op("=")) {
        advance();
        p.default_value = parse_expression();
      } else if (!s->params.empty() && s->params.back().default_value) {
        fail_at(current(), "non-default argument follows default argument");
      }
      s->params.push_back(std::move(p));
    }
    advance();
    expect_block_end();
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    parse_body(s->body, {"endmacro"}, &tag, "macro");
    loop_depth_ = saved_loop_depth;
    if (current().kind == TokenKind::kName) advance();  // {% endmacro name %}
    expect_block_end();
    return s;
  }

  // ---- expressions -------------------------------------------------------

  ExprPtr make_expr(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // Nested blocks recurse in the parser, the evaluator and the destructor.
  struct BlockDepthGuard {
    BlockDepthGuard(Parser& p, const Token& tag) : parser(p) {
      if (++parser.block_depth_ > kMaxNestingDepth) parser.fail_at(tag, "blocks nested too deeply");
    }
    ~BlockDepthGuard() { --parser.block_depth_; }
    Parser& parser;
  };

  struct DepthGuard {
    explicit DepthGuard(Parser& p) : parser(p) {
      if (++parser.depth_ > kMaxNestingDepth) parser.fail_at(parser.current(), "expression nested too deeply");
    }
    ~DepthGuard() { --parser.depth_; }
    Parser& parser;
  };

  // An expression or a bare tuple `a, b` (as in `{% set a = 1, 2 %}`).
  ExprPtr parse_tuple_expression(bool allow_condition = true) {
    const int line = current().line;
    ExprPtr first = allow_condition ? parse_expression() : parse_or();
    if (!is_op(",")) return first;
    auto tuple = make_expr(ExprKind::kTuple, line);
    tuple->items.push_back(std::move(first));
    while (is_op(",")) {
      advance();
      if (!starts_expression()) break;
      tuple->items.push_back(allow_condition ? parse_expression() : parse_or());
    }
    return sealed(std::move(tuple));
  }

  bool starts_expression() const {
    const Token& t = current();
    if (t.kind == TokenKind::kName || t.kind == TokenKind::kString || t.kind == TokenKind::kInteger ||
        t.kind == TokenKind::kFloat) {
      return true;
    }
    return t.kind == TokenKind::kOperator &&
           (t.text == "(" || t.text == "[" || t.text == "{" || t.text == "-" || t.text == "+");
  }

  ExprPtr parse_expression() {
    DepthGuard guard(*this);
    const int line = current().line;
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      advance();
      auto cond = make_expr(ExprKind::kCondition, line);
      cond->operand = parse_or();
      cond->items.push_back(std::move(expr));
      if (is_name("else")) {
        advance();
        cond->items.push_back(parse_expression());
      } else {
        cond->items.push_back(nullptr);
      }
      expr = sealed(std::move(cond));
    }
    return expr;
  }

  ExprPtr binary(Op op, ExprPtr left, ExprPtr right, int line) {
    auto e = make_expr(ExprKind::kBinary, line);
    e->op = op;
    e->operand = std::move(left);
    e->items.push_back(std::move(right));
    return sealed(std::move(e));
  }

  // Records the subtree height and refuses deep trees: long operator, filter or
  // attribute chains are built by loops, not recursion, but evaluating and
  // destroying them recurses, so their height is bounded here.
  ExprPtr sealed(ExprPtr e) {
    int depth = 0;
    auto visit = [&depth](const ExprPtr& child) {
      if (child) depth = std::max(depth, child->depth);
    };
    visit(e->operand);
    for (const ExprPtr& c : e->items) visit(c);
    for (const ExprPtr& c : e->keys) visit(c);
    for (const auto& [name, c] : e->keyword) visit(c);
    e->depth = depth + 1;
    if (e->depth > kMaxNestingDepth) fail_at(current(), "expression nested too deeply");
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const int line = advance().line;
      left = binary(Op::kOr, std::move(left), parse_and(), line);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const int line = advance().line;
      left = binary(Op::kAnd, std::move(left), parse_not(), line);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      const int line = advance().line;
      auto e = make_expr(ExprKind::kUnary, line);
      e->op = Op::kNot;
      e->operand = parse_not();
      return sealed(std::move(e));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr left = parse_math1();
    // Python chains comparisons (a < b < c); templates do not, so one is enough,
    // and a chain is refused rather than evaluated differently.
    int num_compares = 0;
    while (true) {
      const int line = current().line;
      std::optional<Op> op;
      if (current().kind == TokenKind::kOperator) {
        const std::string& t = current().text;
        if (t == "==") op = Op::kEq;
        else if (t == "!=") op = Op::kNe;
        else if (t == "<") op = Op::kLt;
        else if (t == "<=") op = Op::kLe;
        else if (t == ">") op = Op::kGt;
        else if (t == ">=") op = Op::kGe;
        if (op) advance();
      } else if (is_name("in")) {
        op = Op::kIn;
        advance();
      } else if (is_name("not") && peek().kind == TokenKind::kName && peek().text == "in") {
        op = Op::kNotIn;
        advance();
        advance();
      }
      if (!op) return left;
      if (++num_compares > 1) fail_at(current(), "chained comparisons are not supported");
      left = binary(*op, std::move(left), parse_math1(), line);
    }
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Op op = current().text == "+" ? Op::kAdd : Op::kSub;
      const int line = advance().line;
      left = binary(op, std::move(left), parse_concat(), line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const int line = advance().line;
      left = binary(Op::kConcat, std::move(left), parse_math2(), line);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string& t = current().text;
      const Op op = t == "*" ? Op::kMul : t == "/" ? Op::kDiv : t == "//" ? Op::kFloorDiv : Op::kMod;
      const int line = advance().line;
      left = binary(op, std::move(left), parse_pow(), line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const int line = advance().line;
      left = binary(Op::kPow, std::move(left), parse_unary(true), line);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      const Op op = current().text == "-" ? Op::kNeg : Op::kPos;
      const int line = advance().line;
      node = make_expr(ExprKind::kUnary, line);
      node->op = op;
      node->operand = parse_unary(false);
      node = sealed(std::move(node));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = current();
    switch (t.kind) {
      case TokenKind::kName: {
        advance();
        if (t.text == "true" || t.text == "True") return literal(Value(true), t.line);
        if (t.text == "false" || t.text == "False") return literal(Value(false), t.line);
        if (t.text == "none" || t.text == "None") return literal(Value(None{}), t.line);
        auto e = make_expr(ExprKind::kName, t.line);
        e->name = t.text;
        return e;
      }
      case TokenKind::kString: {
        std::string s = advance().text;
        while (current().kind == TokenKind::kString) s += advance().text;  // "a" "b"
        return literal(Value(std::move(s)), t.line);
      }
      case TokenKind::kInteger: {
        advance();
        errno = 0;
        const long long v = std::strtoll(t.text.c_str(), nullptr, 10);
        if (errno == ERANGE) fail_at(t, "integer literal out of range");
        return literal(Value(static_cast<std::int64_t>(v)), t.line);
      }
      case TokenKind::kFloat:
        advance();
        return literal(Value(std::strtod(t.text.c_str(), nullptr)), t.line);
      case TokenKind::kOperator:
        if (t.text == "(") return parse_paren();
        if (t.text == "[") return parse_list();
        if (t.text == "{") return parse_dict();
        break;
      default:
        break;
    }
    fail_at(t, "unexpected " + describe(t));
  }

  ExprPtr literal(Value v, int line) {
    auto e = make_expr(ExprKind::kLiteral, line);
    e->value = std::move(v);
    return e;
  }

  ExprPtr parse_paren() {
    const int line = advance().line;
    if (is_op(")")) {
      advance();
      return make_expr(ExprKind::kTuple, line);
    }
    ExprPtr first = parse_expression();
    if (is_op(")")) {
      advance();
      return first;
    }
    auto tuple = make_expr(ExprKind::kTuple, line);
    tuple->items.push_back(std::move(first));
    while (is_op(",")) {
      advance();
      if (is_op(")")) break;
      tuple->items.push_back(parse_expression());
    }
    expect_op(")");
    return sealed(std::move(tuple));
  }

  ExprPtr parse_list() {
    auto e = make_expr(ExprKind::kList, advance().line);
    while (!is_op("]")) {
      if (!e->items.empty()) expect_op(",");
      if (is_op("]")) break;
      e->items.push_back(parse_expression());
    }
    advance();
    return sealed(std::move(e));
  }

  ExprPtr parse_dict() {
    auto e = make_expr(ExprKind::kDict, advance().line);
    while (!is_op("}")) {
      if (!e->items.empty()) expect_op(",");
      if (is_op("}")) break;
      e->keys.push_back(parse_expression());
      expect_op(":");
      e->items.push_back(parse_expression());
    }
    advance();
    return sealed(std::move(e));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".")) {
        const int line = advance().line;
        if (current().kind == TokenKind::kInteger) {
          auto e = make_expr(ExprKind::kGetItem, line);
          e->operand = std::move(node);
          e->items.push_back(literal(Value(static_cast<std::int64_t>(std::strtoll(advance().text.c_str(), nullptr, 10))), line));
          node = sealed(std::move(e));
          continue;
        }
        auto e = make_expr(ExprKind::kGetAttr, line);
        e->operand = std::move(node);
        e->name = expect_name();
        node = sealed(std::move(e));
      } else if (is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const int line = advance().line;
    ExprPtr parts[3];
    int num_colons = 0;
    while (!is_op("]")) {
      if (is_op(":")) {
        if (++num_colons > 2) fail_at(current(), "too many ':' in slice");
        advance();
        continue;
      }
      if (parts[num_colons]) fail_at(current(), "expected ']' or ':' in subscript");
      parts[num_colons] = parse_expression();
      if (num_colons == 0 && is_op(",")) fail_at(current(), "tuple subscripts are not supported");
    }
    advance();
    if (num_colons == 0) {
      if (!parts[0]) fail_at(current(), "empty subscript");
      auto e = make_expr(ExprKind::kGetItem, line);
      e->operand = std::move(node);
      e->items.push_back(std::move(parts[0]));
      return sealed(std::move(e));
    }
    auto e = make_expr(ExprKind::kSlice, line);
    e->operand = std::move(node);
    for (auto& p : parts) e->items.push_back(std::move(p));
    return sealed(std::move(e));
  }

  void parse_call_args(std::vector<ExprPtr>& args, std::vector<std::pair<std::string, ExprPtr>>& keyword) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail_at(current(), "*args / **kwargs calls are not supported");
      if (current().kind == TokenKind::kName && peek().kind == TokenKind::kOperator && peek().text == "=") {
        std::string name = advance().text;
        advance();
        keyword.emplace_back(std::move(name), parse_expression());
      } else {
        if (!keyword.empty()) fail_at(current(), "positional argument follows keyword argument");
        args.push_back(parse_expression());
      }
    }
    advance();
  }

  ExprPtr parse_call(ExprPtr node) {
    auto e = make_expr(ExprKind::kCall, current().line);
    e->operand = std::move(node);
    parse_call_args(e->items, e->keyword);
    return sealed(std::move(e));
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        advance();
        FilterCall f = parse_filter_call();
        auto e = make_expr(ExprKind::kFilter, f.line);
        e->operand = std::move(node);
        e->name = std::move(f.name);
        e->items = std::move(f.args);
        e->keyword = std::move(f.keyword);
        node = sealed(std::move(e));
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_test(ExprPtr node) {
    const int line = advance().line;
    auto e = make_expr(ExprKind::kTest, line);
    e->operand = std::move(node);
    if (is_name("not")) {
      advance();
      e->negated = true;
    }
    const Token& name_token = current();
    e->name = expect_name();
    while (is_op(".")) {
      advance();
      e->name += "." + expect_name();
    }
    if (!is_test(e->name)) fail_at(name_token, "no test named '" + e->name + "'");
    if (is_op("(")) {
      std::vector<std::pair<std::string, ExprPtr>> keyword;
      parse_call_args(e->items, keyword);
      if (!keyword.empty()) fail_at(name_token, "keyword arguments to tests are not supported");
    } else {
      const Token& t = current();
      const bool starts_arg =
          t.kind == TokenKind::kString || t.kind == TokenKind::kInteger || t.kind == TokenKind::kFloat ||
          (t.kind == TokenKind::kName && t.text != "else" && t.text != "or" && t.text != "and") ||
          (t.kind == TokenKind::kOperator && (t.text == "[" || t.text == "{" || t.text == "("));
      if (starts_arg && !(t.kind == TokenKind::kName && (t.text == "if" || t.text == "is"))) {
        if (t.kind == TokenKind::kName && t.text == "not" ) fail_at(t, "unexpected 'not'");
        e->items.push_back(parse_postfix(parse_primary()));
      }
    }
    return sealed(std::move(e));
  }

  std::vector<Token> tokens_;
  std::size_t pos_ = 0;
  int loop_depth_ = 0;
  int depth_ = 0;
  int block_depth_ = 0;
};

}  // namespace

Template parse_template(std::string_view source) { return Parser(tokenize(source)).parse(); }

}  // namespace sluice::jinja
