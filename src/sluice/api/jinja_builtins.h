// The builtin filters, tests, attribute/item access and methods of Python objects
// that templates call (str.strip, dict.items, ...), with jinja2's argument
// conventions. Only what real chat templates use is here; the parser refuses any
// other filter or test name.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/api/jinja_value.h"

namespace sluice::jinja {

class Interpreter;

bool is_filter(std::string_view name);
bool is_test(std::string_view name);

Value apply_filter(Interpreter& in, std::string_view name, Value operand, CallArgs&& args);
bool apply_test(Interpreter& in, std::string_view name, const Value& operand, CallArgs&& args);

// jinja2's environment.getattr (`obj.name`) and getitem (`obj[key]`): missing
// attributes and items are Undefined; operations on Undefined throw.
Value get_attribute(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
Value get_slice(const Value& obj, const std::optional<std::int64_t>& start,
                const std::optional<std::int64_t>& stop, std::int64_t step);

// `obj.name(args)`; returns nullopt when `obj` has no such method (callers then
// fall back to getattr + call).
std::optional<Value> call_method(Interpreter& in, const Value& obj, const std::string& name,
                                 CallArgs&& args);

// Positional/keyword arguments bound to a Python-style signature.
class BoundArgs {
 public:
  BoundArgs(std::string_view function, CallArgs&& args, std::initializer_list<std::string_view> names);
  const Value* get(std::size_t i) const { return present_[i] ? &values_[i] : nullptr; }
  Value get_or(std::size_t i, Value fallback) const { return present_[i] ? values_[i] : fallback; }
  const Value& required(std::size_t i) const;

 private:
  std::string function_;
  std::vector<std::string_view> names_;
  std::vector<Value> values_;
  std::vector<bool> present_;
};

// Globals every render sees: range, namespace, dict, raise_exception.
std::vector<std::pair<std::string, Value>> builtin_globals();

// Python's `format % args` for the common conversions (%s %r %d %i %f %%, with an
// optional precision, and %(name)s with a dict); others throw.
std::string percent_format(const std::string& format, const Value& args);

// Python int(x) / float(x) on a value, as the int and float filters need.
Value bound_method(const Value& obj, const std::string& name);

}  // namespace sluice::jinja
