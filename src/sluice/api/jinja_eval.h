// Renders a parsed template: statements, expressions, scoping and the safety
// budget. Scoping follows jinja2: a for-loop iteration and a macro call open a
// new scope, `if` does not; names resolve outwards to the globals.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/api/jinja_ast.h"
#include "sluice/api/jinja_value.h"

namespace sluice::jinja {

struct RenderLimits {
  std::int64_t max_operations = 10'000'000;  // evaluated nodes + loop iterations
  std::size_t max_output_bytes = 64u << 20;  // any single rendered or computed string
  int max_call_depth = 100;                  // nested macro calls
};

// A scope's names. Scopes hold a handful of names, so a flat vector beats a hash map.
class VarMap {
 public:
  Value& operator[](const std::string& name);
  const Value* find(const std::string& name) const;
  void clear() { entries_.clear(); }

 private:
  std::vector<std::pair<std::string, Value>> entries_;
};

struct Frame {
  VarMap vars;
  std::shared_ptr<Frame> parent;

  const Value* lookup(const std::string& name) const;
};

class Interpreter {
 public:
  explicit Interpreter(const RenderLimits& limits) : limits_(limits) {}

  // Renders `tmpl` with `globals` as the outermost scope. Throws RenderError; the
  // message is prefixed with the template line being rendered.
  std::string render(const Template& tmpl, std::shared_ptr<Frame> globals);

  Value eval(const Expr& e, const std::shared_ptr<Frame>& frame);
  Value call(const Value& callee, CallArgs&& args);

  // Spends `n` operations from the budget; throws when it is exhausted.
  void charge(std::int64_t n = 1) {
    operations_ += n;
    if (operations_ > limits_.max_operations) fail_budget();
  }
  // Namespaces can reference themselves (`set ns.me = ns`); they are emptied when
  // the render ends so such shared_ptr cycles are freed.
  void track(const std::shared_ptr<Namespace>& ns) { namespaces_.push_back(ns); }

  // Throws if a string about to be built would exceed the output cap.
  void check_size(std::size_t num_bytes) const;
  const RenderLimits& limits() const { return limits_; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  [[noreturn]] void fail_budget() const;
  Flow exec_body(const Body& body, const std::shared_ptr<Frame>& frame, std::string& out);
  Flow exec(const Stmt& s, const std::shared_ptr<Frame>& frame, std::string& out);
  void exec_for(const Stmt& s, const std::shared_ptr<Frame>& frame, std::string& out);
  void assign(const Target& target, Value value, const std::shared_ptr<Frame>& frame, int line);
  Value make_macro(const Stmt& s, const std::shared_ptr<Frame>& frame);
  Value apply_filters(const std::vector<FilterCall>& filters, Value value,
                      const std::shared_ptr<Frame>& frame);
  Value eval_binary(const Expr& e, const std::shared_ptr<Frame>& frame);
  Value eval_call(const Expr& e, const std::shared_ptr<Frame>& frame);
  CallArgs eval_args(const std::vector<ExprPtr>& items,
                     const std::vector<std::pair<std::string, ExprPtr>>& keyword,
                     const std::shared_ptr<Frame>& frame);
  void append(std::string& out, std::string_view text) const;
  void release_cycles();

  RenderLimits limits_;
  std::int64_t operations_ = 0;
  int call_depth_ = 0;
  int current_line_ = 0;
  // A macro holds the scope it was defined in, and that scope holds the macro: the
  // cycle is broken by emptying these scopes when the render ends.
  std::vector<std::shared_ptr<Frame>> macro_scopes_;
  std::vector<std::shared_ptr<Namespace>> namespaces_;
};

}  // namespace sluice::jinja
