// Syntax tree of a parsed template. Nodes are immutable after parsing and carry the
// template line they came from, so render errors can name it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sluice/api/jinja_value.h"

namespace sluice::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind {
  kLiteral,   // value
  kName,      // name
  kList,      // items
  kTuple,     // items (a list at runtime)
  kDict,      // keys, items
  kGetAttr,   // operand.name
  kGetItem,   // operand[items[0]]
  kSlice,     // operand[items[0]:items[1]:items[2]] (null parts allowed)
  kCall,      // operand(items..., keyword...)
  kFilter,    // operand | name(items..., keyword...)
  kTest,      // operand is [not] name(items...)
  kUnary,     // op operand
  kBinary,    // operand op items[0]
  kCondition  // items[0] if operand else items[1] (items[1] may be null)
};

enum class Op {
  kNot, kNeg, kPos,
  kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kConcat,
  kAnd, kOr,
  kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn,
};

struct Expr {
  ExprKind kind;
  int line = 0;
  int depth = 1;              // height of this subtree; bounded by the parser
  Value value;                // kLiteral
  std::string name;           // kName, kGetAttr, kFilter, kTest
  Op op = Op::kAdd;           // kUnary, kBinary
  bool negated = false;       // kTest: `is not`
  ExprPtr operand;
  std::vector<ExprPtr> items;  // see ExprKind
  std::vector<ExprPtr> keys;   // kDict keys
  std::vector<std::pair<std::string, ExprPtr>> keyword;  // kCall, kFilter
};

// The target of {% set %} / {% for %}: a name, names to unpack, or ns.attr.
struct Target {
  std::vector<std::string> names;  // one name, or several to unpack a sequence
  std::string attribute;           // non-empty: names[0].attribute (namespace write)
};

struct FilterCall {
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  int line = 0;
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // may be null
};

enum class StmtKind {
  kText,      // text
  kOutput,    // {{ expr }}
  kIf,        // conditions[i] -> bodies[i]; else_body
  kFor,       // for target in expr [if condition]: body; else_body
  kSet,       // set target = expr
  kBlockSet,  // set target | filters: body
  kMacro,     // macro name(params): body
  kFilterBlock,  // filter filters: body
  kBreak,
  kContinue,
  kScope,     // {% generation %} (HF): just body
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  Target target;
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  ExprPtr condition;  // kFor filter
  std::vector<FilterCall> filters;
  std::vector<MacroParam> params;
};

struct Template {
  Body body;
};

}  // namespace sluice::jinja
