#include "sluice/api/jinja_eval.h"

#include <cmath>

#include "sluice/api/jinja_builtins.h"
#include "sluice/api/jinja_strings.h"

namespace sluice::jinja {

Value& VarMap::operator[](const std::string& name) {
  for (auto& [k, v] : entries_) {
    if (k == name) return v;
  }
  entries_.emplace_back(name, Value());
  return entries_.back().second;
}

const Value* VarMap::find(const std::string& name) const {
  for (const auto& [k, v] : entries_) {
    if (k == name) return &v;
  }
  return nullptr;
}

const Value* Frame::lookup(const std::string& name) const {
  for (const Frame* f = this; f != nullptr; f = f->parent.get()) {
    if (const Value* v = f->vars.find(name)) return v;
  }
  return nullptr;
}

std::string Interpreter::render(const Template& tmpl, std::shared_ptr<Frame> globals) {
  auto root = std::make_shared<Frame>();
  root->parent = std::move(globals);
  std::string out;
  try {
    exec_body(tmpl.body, root, out);
  } catch (const RenderError& e) {
    release_cycles();
    throw RenderError("line " + std::to_string(current_line_) + ": " + e.what());
  } catch (...) {
    release_cycles();
    throw;
  }
  release_cycles();
  return out;
}

void Interpreter::release_cycles() {
  for (const auto& scope : macro_scopes_) scope->vars.clear();
  for (const auto& ns : namespaces_) ns->attributes = Dict();
  macro_scopes_.clear();
  namespaces_.clear();
}

void Interpreter::fail_budget() const {
  throw RenderError("template exceeded its budget of " + std::to_string(limits_.max_operations) +
                    " operations");
}

void Interpreter::check_size(std::size_t num_bytes) const {
  if (num_bytes > limits_.max_output_bytes) {
    throw RenderError("template output exceeds the limit of " + std::to_string(limits_.max_output_bytes) +
                      " bytes");
  }
}

void Interpreter::append(std::string& out, std::string_view text) const {
  check_size(out.size() + text.size());
  out.append(text);
}

Interpreter::Flow Interpreter::exec_body(const Body& body, const std::shared_ptr<Frame>& frame,
                                         std::string& out) {
  for (const StmtPtr& s : body) {
    const Flow flow = exec(*s, frame, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, const std::shared_ptr<Frame>& frame, std::string& out) {
  charge();
  current_line_ = s.line;
  switch (s.kind) {
    case StmtKind::kText:
      append(out, s.text);
      return Flow::kNormal;
    case StmtKind::kOutput: {
      const Value v = eval(*s.expr, frame);
      if (v.is_string()) {
        append(out, v.as_string());
      } else {
        append(out, to_str(v));
      }
      return Flow::kNormal;
    }
    case StmtKind::kIf:
      for (std::size_t i = 0; i < s.conditions.size(); ++i) {
        if (truthy(eval(*s.conditions[i], frame))) return exec_body(s.bodies[i], frame, out);
      }
      return exec_body(s.else_body, frame, out);
    case StmtKind::kFor:
      exec_for(s, frame, out);
      return Flow::kNormal;
    case StmtKind::kSet:
      assign(s.target, eval(*s.expr, frame), frame, s.line);
      return Flow::kNormal;
    case StmtKind::kBlockSet: {
      std::string captured;
      exec_body(s.body, frame, captured);
      assign(s.target, apply_filters(s.filters, Value(std::move(captured)), frame), frame, s.line);
      return Flow::kNormal;
    }
    case StmtKind::kFilterBlock: {
      std::string captured;
      exec_body(s.body, frame, captured);
      append(out, to_str(apply_filters(s.filters, Value(std::move(captured)), frame)));
      return Flow::kNormal;
    }
    case StmtKind::kMacro:
      macro_scopes_.push_back(frame);
      frame->vars[s.target.names[0]] = make_macro(s, frame);
      return Flow::kNormal;
    case StmtKind::kBreak:
      return Flow::kBreak;
    case StmtKind::kContinue:
      return Flow::kContinue;
    case StmtKind::kScope:
      return exec_body(s.body, frame, out);
  }
  return Flow::kNormal;
}

void Interpreter::exec_for(const Stmt& s, const std::shared_ptr<Frame>& frame, std::string& out) {
  const Value iterable = eval(*s.expr, frame);
  if (iterable.is_none() || iterable.is_number() || iterable.is_callable() || iterable.is_namespace()) {
    throw RenderError("'" + type_name(iterable) + "' object is not iterable");
  }
  // Lists are iterated in place (they are immutable); other iterables are listed once.
  std::shared_ptr<const List> items =
      iterable.is_list() ? iterable.list_ptr() : std::make_shared<const List>(iterate(iterable));
  if (s.condition) {
    // `for x in xs if cond`: filtered before the loop starts, so loop.length and
    // loop.index count only the kept items.
    List kept;
    for (const Value& item : *items) {
      charge();
      auto probe = std::make_shared<Frame>();
      probe->parent = frame;
      assign(s.target, item, probe, s.line);
      if (truthy(eval(*s.condition, probe))) kept.push_back(item);
    }
    items = std::make_shared<const List>(std::move(kept));
  }
  if (items->empty()) {
    exec_body(s.else_body, frame, out);
    return;
  }
  const auto n = static_cast<std::int64_t>(items->size());
  auto position = std::make_shared<std::int64_t>(0);
  auto cycle = std::make_shared<Callable>();
  cycle->name = "loop.cycle";
  cycle->call = [position](Interpreter&, CallArgs&& args) -> Value {
    if (args.positional.empty()) throw RenderError("no items for cycling given");
    return args.positional[static_cast<std::size_t>(*position) % args.positional.size()];
  };
  const std::shared_ptr<const Callable> cycle_fn(std::move(cycle));
  for (std::int64_t i = 0; i < n; ++i) {
    charge();
    *position = i;
    auto iteration = std::make_shared<Frame>();
    iteration->parent = frame;
    assign(s.target, (*items)[static_cast<std::size_t>(i)], iteration, s.line);
    iteration->vars["loop"] = Value(std::make_shared<const LoopState>(LoopState{i, items, cycle_fn}));
    const Flow flow = exec_body(s.body, iteration, out);
    if (flow == Flow::kBreak) break;
  }
}

void Interpreter::assign(const Target& target, Value value, const std::shared_ptr<Frame>& frame, int line) {
  current_line_ = line;
  if (!target.attribute.empty()) {
    const Value* obj = frame->lookup(target.names[0]);
    if (obj == nullptr || !obj->is_namespace()) {
      throw RenderError("cannot assign attribute on non-namespace object '" + target.names[0] + "'");
    }
    obj->as_namespace().attributes.set(target.attribute, std::move(value));
    return;
  }
  if (target.names.size() == 1) {
    frame->vars[target.names[0]] = std::move(value);
    return;
  }
  const List parts = iterate(value);
  if (parts.size() != target.names.size()) {
    throw RenderError("cannot unpack " + std::to_string(parts.size()) + " values into " +
                      std::to_string(target.names.size()) + " names");
  }
  for (std::size_t i = 0; i < parts.size(); ++i) frame->vars[target.names[i]] = parts[i];
}

Value Interpreter::make_macro(const Stmt& s, const std::shared_ptr<Frame>& frame) {
  auto macro = std::make_shared<Callable>();
  macro->name = s.target.names[0];
  const Stmt* def = &s;
  // The macro sees the scope it was defined in, as it is when the macro is called.
  macro->call = [def, frame](Interpreter& in, CallArgs&& args) -> Value {
    const std::string& name = def->target.names[0];
    if (args.positional.size() > def->params.size()) {
      throw RenderError("macro '" + name + "' takes not more than " + std::to_string(def->params.size()) +
                        " argument(s)");
    }
    auto scope = std::make_shared<Frame>();
    scope->parent = frame;
    std::vector<bool> bound(def->params.size(), false);
    for (std::size_t i = 0; i < args.positional.size(); ++i) {
      scope->vars[def->params[i].name] = std::move(args.positional[i]);
      bound[i] = true;
    }
    for (auto& [key, value] : args.keyword) {
      std::size_t i = 0;
      while (i < def->params.size() && def->params[i].name != key) ++i;
      if (i == def->params.size()) {
        throw RenderError("macro '" + name + "' takes no keyword argument '" + key + "'");
      }
      if (bound[i]) throw RenderError("macro '" + name + "' got multiple values for argument '" + key + "'");
      scope->vars[key] = std::move(value);
      bound[i] = true;
    }
    for (std::size_t i = 0; i < def->params.size(); ++i) {
      if (bound[i]) continue;
      const MacroParam& p = def->params[i];
      scope->vars[p.name] = p.default_value ? in.eval(*p.default_value, scope)
                                            : Value(Undefined{"parameter '" + p.name + "' was not provided"});
    }
    std::string out;
    in.exec_body(def->body, scope, out);
    return out;
  };
  return Value(std::shared_ptr<const Callable>(std::move(macro)));
}

Value Interpreter::apply_filters(const std::vector<FilterCall>& filters, Value value,
                                 const std::shared_ptr<Frame>& frame) {
  for (const FilterCall& f : filters) {
    current_line_ = f.line;
    value = apply_filter(*this, f.name, std::move(value), eval_args(f.args, f.keyword, frame));
  }
  return value;
}

CallArgs Interpreter::eval_args(const std::vector<ExprPtr>& items,
                                const std::vector<std::pair<std::string, ExprPtr>>& keyword,
                                const std::shared_ptr<Frame>& frame) {
  CallArgs args;
  for (const ExprPtr& item : items) args.positional.push_back(eval(*item, frame));
  for (const auto& [key, expr] : keyword) args.keyword.emplace_back(key, eval(*expr, frame));
  return args;
}

Value Interpreter::call(const Value& callee, CallArgs&& args) {
  if (callee.is_undefined()) fail_undefined(callee);
  if (!callee.is_callable()) throw RenderError("'" + type_name(callee) + "' object is not callable");
  charge();
  if (++call_depth_ > limits_.max_call_depth) {
    call_depth_ = 0;
    throw RenderError("macro calls nested deeper than " + std::to_string(limits_.max_call_depth));
  }
  Value result = callee.as_callable().call(*this, std::move(args));
  --call_depth_;
  return result;
}

Value Interpreter::eval_call(const Expr& e, const std::shared_ptr<Frame>& frame) {
  if (e.operand->kind == ExprKind::kGetAttr) {
    const Value obj = eval(*e.operand->operand, frame);
    if (obj.is_undefined()) fail_undefined(obj);
    CallArgs args = eval_args(e.items, e.keyword, frame);
    current_line_ = e.line;
    // call_method leaves `args` untouched when `obj` has no such method.
    std::optional<Value> result = call_method(*this, obj, e.operand->name, std::move(args));
    if (result) return std::move(*result);
    return call(get_attribute(obj, e.operand->name), std::move(args));
  }
  const Value callee = eval(*e.operand, frame);
  CallArgs args = eval_args(e.items, e.keyword, frame);
  current_line_ = e.line;
  return call(callee, std::move(args));
}

namespace {

std::int64_t as_integer(const Value& v) { return v.is_bool() ? std::int64_t{v.as_bool()} : v.as_int(); }
bool is_integral(const Value& v) { return v.is_int() || v.is_bool(); }

[[noreturn]] void fail_operands(const char* op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  throw RenderError(std::string("unsupported operand type(s) for ") + op + ": '" + type_name(a) + "' and '" +
                    type_name(b) + "'");
}

void fail_if_overflow(bool overflow) {
  if (overflow) throw RenderError("integer overflow");
}

Value repeat(Interpreter& in, const Value& seq, std::int64_t times) {
  if (seq.is_tuple()) {
    Value as_list = repeat(in, Value(seq.as_list()), times);
    return Value::tuple(as_list.as_list());
  }
  if (times <= 0) return seq.is_string() ? Value("") : Value(List{});
  if (seq.is_string()) {
    const std::size_t num_bytes = seq.as_string().size() * static_cast<std::size_t>(times);
    if (times > 0 && num_bytes / static_cast<std::size_t>(times) != seq.as_string().size()) in.check_size(SIZE_MAX);
    in.check_size(num_bytes);
    in.charge(1 + static_cast<std::int64_t>(num_bytes / 4096));
    std::string out;
    out.reserve(num_bytes);
    for (std::int64_t i = 0; i < times; ++i) out += seq.as_string();
    return out;
  }
  const std::size_t n = seq.as_list().size() * static_cast<std::size_t>(times);
  in.charge(static_cast<std::int64_t>(n));
  List out;
  for (std::int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
  return out;
}

double py_floor_mod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

}  // namespace

Value Interpreter::eval_binary(const Expr& e, const std::shared_ptr<Frame>& frame) {
  const Op op = e.op;
  if (op == Op::kAnd || op == Op::kOr) {
    Value left = eval(*e.operand, frame);
    if ((op == Op::kAnd) != truthy(left)) return left;
    return eval(*e.items[0], frame);
  }
  const Value a = eval(*e.operand, frame);
  const Value b = eval(*e.items[0], frame);
  current_line_ = e.line;
  switch (op) {
    case Op::kConcat: {
      std::string s = to_str(a);
      s += to_str(b);
      check_size(s.size());
      charge(static_cast<std::int64_t>(s.size() / 4096));
      return s;
    }
    case Op::kEq: return equals(a, b);
    case Op::kNe: return !equals(a, b);
    case Op::kLt: return compare(a, b) < 0;
    case Op::kLe: return compare(a, b) <= 0;
    case Op::kGt: return compare(a, b) > 0;
    case Op::kGe: return compare(a, b) >= 0;
    case Op::kIn:
    case Op::kNotIn: {
      CallArgs args;
      args.positional.push_back(b);
      if (b.is_none() || b.is_number()) {
        throw RenderError("argument of type '" + type_name(b) + "' is not iterable");
      }
      const bool found = apply_test(*this, "in", a, std::move(args));
      return op == Op::kIn ? found : !found;
    }
    case Op::kAdd:
      if (is_integral(a) && is_integral(b)) {
        std::int64_t r = 0;
        fail_if_overflow(__builtin_add_overflow(as_integer(a), as_integer(b), &r));
        return r;
      }
      if (a.is_number() && b.is_number()) return to_double(a) + to_double(b);
      if (a.is_string() && b.is_string()) {
        check_size(a.as_string().size() + b.as_string().size());
        charge(static_cast<std::int64_t>((a.as_string().size() + b.as_string().size()) / 4096));
        return a.as_string() + b.as_string();
      }
      if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
        List out = a.as_list();
        out.insert(out.end(), b.as_list().begin(), b.as_list().end());
        charge(static_cast<std::int64_t>(out.size()));
        return a.is_tuple() ? Value::tuple(std::move(out)) : Value(std::move(out));
      }
      fail_operands("+", a, b);
    case Op::kSub:
      if (is_integral(a) && is_integral(b)) {
        std::int64_t r = 0;
        fail_if_overflow(__builtin_sub_overflow(as_integer(a), as_integer(b), &r));
        return r;
      }
      if (a.is_number() && b.is_number()) return to_double(a) - to_double(b);
      fail_operands("-", a, b);
    case Op::kMul:
      if (is_integral(a) && is_integral(b)) {
        std::int64_t r = 0;
        fail_if_overflow(__builtin_mul_overflow(as_integer(a), as_integer(b), &r));
        return r;
      }
      if (a.is_number() && b.is_number()) return to_double(a) * to_double(b);
      if ((a.is_string() || a.is_list()) && is_integral(b)) return repeat(*this, a, as_integer(b));
      if (is_integral(a) && (b.is_string() || b.is_list())) return repeat(*this, b, as_integer(a));
      fail_operands("*", a, b);
    case Op::kDiv:
      if (a.is_number() && b.is_number()) {
        if (to_double(b) == 0.0) throw RenderError("division by zero");
        return to_double(a) / to_double(b);
      }
      fail_operands("/", a, b);
    case Op::kFloorDiv:
    case Op::kMod:
      if (is_integral(a) && is_integral(b)) {
        const std::int64_t x = as_integer(a);
        const std::int64_t y = as_integer(b);
        if (y == 0) throw RenderError("integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) throw RenderError("integer overflow");
        std::int64_t q = x / y;
        std::int64_t r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) {
          --q;
          r += y;
        }
        return op == Op::kFloorDiv ? q : r;
      }
      if (a.is_number() && b.is_number()) {
        const double x = to_double(a);
        const double y = to_double(b);
        if (y == 0.0) throw RenderError("float division by zero");
        const double mod = py_floor_mod(x, y);
        if (op == Op::kMod) return mod;
        // CPython's float floor division: exact quotient of (x - mod), then floored.
        const double div = (x - mod) / y;
        double floored = std::floor(div);
        if (div - floored > 0.5) floored += 1.0;
        return floored;
      }
      if (op == Op::kMod && a.is_string()) {
        if (b.is_undefined()) fail_undefined(b);
        std::string formatted = percent_format(a.as_string(), b);
        check_size(formatted.size());
        return formatted;
      }
      fail_operands(op == Op::kMod ? "%" : "//", a, b);
    case Op::kPow:
      if (is_integral(a) && is_integral(b) && as_integer(b) >= 0) {
        std::int64_t r = 1;
        const std::int64_t base = as_integer(a);
        for (std::int64_t i = 0; i < as_integer(b); ++i) {
          charge();
          if (__builtin_mul_overflow(r, base, &r)) throw RenderError("integer overflow");
        }
        return r;
      }
      if (a.is_number() && b.is_number()) return std::pow(to_double(a), to_double(b));
      fail_operands("**", a, b);
    default:
      break;
  }
  throw RenderError("unsupported operator");
}

Value Interpreter::eval(const Expr& e, const std::shared_ptr<Frame>& frame) {
  charge();
  current_line_ = e.line;
  switch (e.kind) {
    case ExprKind::kLiteral:
      return e.value;
    case ExprKind::kName: {
      if (const Value* v = frame->lookup(e.name)) return *v;
      return Undefined{"'" + e.name + "' is undefined"};
    }
    case ExprKind::kList:
    case ExprKind::kTuple: {
      List items;
      for (const ExprPtr& item : e.items) items.push_back(eval(*item, frame));
      return e.kind == ExprKind::kTuple ? Value::tuple(std::move(items)) : Value(std::move(items));
    }
    case ExprKind::kDict: {
      Dict d;
      for (std::size_t i = 0; i < e.items.size(); ++i) {
        const Value key = eval(*e.keys[i], frame);
        if (!key.is_string()) throw RenderError("dict keys must be strings, got '" + type_name(key) + "'");
        d.set(key.as_string(), eval(*e.items[i], frame));
      }
      return d;
    }
    case ExprKind::kGetAttr: {
      const Value obj = eval(*e.operand, frame);
      current_line_ = e.line;
      return get_attribute(obj, e.name);
    }
    case ExprKind::kGetItem: {
      const Value obj = eval(*e.operand, frame);
      const Value key = eval(*e.items[0], frame);
      current_line_ = e.line;
      return get_item(obj, key);
    }
    case ExprKind::kSlice: {
      const Value obj = eval(*e.operand, frame);
      std::optional<std::int64_t> parts[3];
      for (int i = 0; i < 3; ++i) {
        const ExprPtr& p = e.items[static_cast<std::size_t>(i)];
        if (!p) continue;
        const Value v = eval(*p, frame);
        if (v.is_none()) continue;
        if (!v.is_int() && !v.is_bool()) throw RenderError("slice indices must be integers or None");
        parts[i] = as_integer(v);
      }
      current_line_ = e.line;
      return get_slice(obj, parts[0], parts[1], parts[2].value_or(1));
    }
    case ExprKind::kCall:
      return eval_call(e, frame);
    case ExprKind::kFilter: {
      Value operand = eval(*e.operand, frame);
      CallArgs args = eval_args(e.items, e.keyword, frame);
      current_line_ = e.line;
      return apply_filter(*this, e.name, std::move(operand), std::move(args));
    }
    case ExprKind::kTest: {
      const Value operand = eval(*e.operand, frame);
      CallArgs args = eval_args(e.items, {}, frame);
      current_line_ = e.line;
      const bool result = apply_test(*this, e.name, operand, std::move(args));
      return e.negated ? !result : result;
    }
    case ExprKind::kUnary: {
      const Value v = eval(*e.operand, frame);
      if (e.op == Op::kNot) return !truthy(v);
      if (v.is_undefined()) fail_undefined(v);
      if (e.op == Op::kPos) {
        if (is_integral(v)) return as_integer(v);
        if (v.is_float()) return v;
      } else {
        if (is_integral(v)) {
          fail_if_overflow(as_integer(v) == INT64_MIN);
          return -as_integer(v);
        }
        if (v.is_float()) return -v.as_float();
      }
      throw RenderError("bad operand type for unary " + std::string(e.op == Op::kPos ? "+" : "-") + ": '" +
                        type_name(v) + "'");
    }
    case ExprKind::kBinary:
      return eval_binary(e, frame);
    case ExprKind::kCondition:
      if (truthy(eval(*e.operand, frame))) return eval(*e.items[0], frame);
      if (e.items[1]) return eval(*e.items[1], frame);
      return Undefined{"the inline if-expression evaluated to false and no else section was defined"};
  }
  return Value();
}

}  // namespace sluice::jinja
