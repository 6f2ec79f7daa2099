// Runtime values of the Jinja2 subset: the Python object model that chat templates
// assume (None, bool, int, float, str, list, insertion-ordered dict), plus Jinja's
// Undefined, namespaces and callables (macros, loop.cycle, builtin globals).
// Lists and dicts are immutable once built (the reference environment is an
// ImmutableSandboxedEnvironment), so they are shared, never copied; only a
// namespace's attributes can change.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace sluice::jinja {

// Thrown while rendering; caught at the ChatTemplate API boundary and turned into a
// Result error. `what()` is the user-facing message.
class RenderError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Value;
class Interpreter;

using List = std::vector<Value>;

// Python dict with string keys: iteration follows insertion order, like json.loads.
class Dict {
 public:
  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);  // replaces an existing key in place
  std::size_t size() const { return entries_.size(); }
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }

 private:
  std::vector<std::pair<std::string, Value>> entries_;
};

// jinja2.Undefined: a missing variable, attribute or item. `hint` is the message
// used when an operation on it fails, e.g. "'foo' is undefined".
struct Undefined {
  std::string hint;
};
struct None {};

// `namespace(...)`: the only mutable object, through `{% set ns.attr = ... %}`.
struct Namespace {
  Dict attributes;
};

// A Python generator or iterator (what map, select, selectattr, unique, items and
// reverse return in jinja2): always truthy, no len(), no printable form, and
// consumed by the first pass over it. Items are computed eagerly (inputs are
// immutable); only the single-pass behaviour is emulated.
struct IteratorState {
  List items;
  std::size_t position = 0;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct Callable {
  std::string name;
  std::function<Value(Interpreter&, CallArgs&&)> call;
};

// The `loop` variable of one for-loop iteration; its attributes (index, first,
// previtem, ...) are computed on access rather than stored.
struct LoopState {
  std::int64_t index0 = 0;
  std::shared_ptr<const List> items;
  std::shared_ptr<const Callable> cycle;
};


class Value {
 public:
  using Storage =
      std::variant<Undefined, None, bool, std::int64_t, double, std::string,
                   std::shared_ptr<const List>, std::shared_ptr<const Dict>,
                   std::shared_ptr<Namespace>, std::shared_ptr<const Callable>,
                   std::shared_ptr<const LoopState>, std::shared_ptr<IteratorState>>;

  Value() : storage_(Undefined{}) {}
  Value(None) : storage_(None{}) {}                                     // NOLINT
  Value(Undefined u) : storage_(std::move(u)) {}                         // NOLINT
  Value(bool b) : storage_(b) {}                                         // NOLINT
  Value(std::int64_t i) : storage_(i) {}                                 // NOLINT
  Value(int i) : storage_(static_cast<std::int64_t>(i)) {}               // NOLINT
  Value(double d) : storage_(d) {}                                       // NOLINT
  Value(std::string s) : storage_(std::move(s)) {}                       // NOLINT
  Value(const char* s) : storage_(std::string(s)) {}                     // NOLINT
  Value(List l) : storage_(std::make_shared<const List>(std::move(l))) {}  // NOLINT
  Value(Dict d) : storage_(std::make_shared<const Dict>(std::move(d))) {}  // NOLINT
  Value(std::shared_ptr<const List> l) : storage_(std::move(l)) {}       // NOLINT
  Value(std::shared_ptr<const Dict> d) : storage_(std::move(d)) {}       // NOLINT
  Value(std::shared_ptr<Namespace> n) : storage_(std::move(n)) {}        // NOLINT
  Value(std::shared_ptr<const Callable> c) : storage_(std::move(c)) {}   // NOLINT
  Value(std::shared_ptr<const LoopState> l) : storage_(std::move(l)) {}  // NOLINT

  static Value iterator(List items) {
    return Value(std::make_shared<IteratorState>(IteratorState{std::move(items), 0}));
  }
  Value(std::shared_ptr<IteratorState> it) : storage_(std::move(it)) {}  // NOLINT

  // A Python tuple: a list that prints as (a, b).
  static Value tuple(List items) {
    Value v(std::move(items));
    v.is_tuple_ = true;
    return v;
  }
  bool is_tuple() const { return is_tuple_; }

  bool is_undefined() const { return std::holds_alternative<Undefined>(storage_); }
  bool is_none() const { return std::holds_alternative<None>(storage_); }
  bool is_bool() const { return std::holds_alternative<bool>(storage_); }
  bool is_int() const { return std::holds_alternative<std::int64_t>(storage_); }
  bool is_float() const { return std::holds_alternative<double>(storage_); }
  // Python's numbers.Number: bool counts, as it is an int subclass.
  bool is_number() const { return is_bool() || is_int() || is_float(); }
  bool is_string() const { return std::holds_alternative<std::string>(storage_); }
  bool is_list() const { return std::holds_alternative<std::shared_ptr<const List>>(storage_); }
  bool is_dict() const { return std::holds_alternative<std::shared_ptr<const Dict>>(storage_); }
  bool is_namespace() const { return std::holds_alternative<std::shared_ptr<Namespace>>(storage_); }
  bool is_callable() const {
    return std::holds_alternative<std::shared_ptr<const Callable>>(storage_);
  }
  bool is_iterator() const { return std::holds_alternative<std::shared_ptr<IteratorState>>(storage_); }
  IteratorState& as_iterator() const { return *std::get<std::shared_ptr<IteratorState>>(storage_); }
  bool is_loop() const { return std::holds_alternative<std::shared_ptr<const LoopState>>(storage_); }
  const LoopState& as_loop() const { return *std::get<std::shared_ptr<const LoopState>>(storage_); }

  bool as_bool() const { return std::get<bool>(storage_); }
  std::int64_t as_int() const { return std::get<std::int64_t>(storage_); }
  double as_float() const { return std::get<double>(storage_); }
  const std::string& as_string() const { return std::get<std::string>(storage_); }
  const List& as_list() const { return *std::get<std::shared_ptr<const List>>(storage_); }
  const Dict& as_dict() const { return *std::get<std::shared_ptr<const Dict>>(storage_); }
  Namespace& as_namespace() const { return *std::get<std::shared_ptr<Namespace>>(storage_); }
  const Callable& as_callable() const {
    return *std::get<std::shared_ptr<const Callable>>(storage_);
  }
  const Undefined& as_undefined() const { return std::get<Undefined>(storage_); }
  const std::shared_ptr<const List>& list_ptr() const {
    return std::get<std::shared_ptr<const List>>(storage_);
  }

  const Storage& storage() const { return storage_; }

 private:
  Storage storage_;
  bool is_tuple_ = false;
};

// Python type names, as used in error messages ("'str' object", "dict object").
std::string type_name(const Value& v);

// Throws the UndefinedError jinja2 raises when an Undefined is used.
[[noreturn]] void fail_undefined(const Value& v);

bool truthy(const Value& v);
// Numeric view of bool/int/float (bool → 0/1); throws for non-numbers.
double to_double(const Value& v);
// Python `==` between any two values.
bool equals(const Value& a, const Value& b);
// Python `<` (and friends) ordering: numbers, strings, lists; throws TypeError otherwise.
int compare(const Value& a, const Value& b);

// Python str(v) as Jinja prints it in `{{ }}` (Undefined prints as "").
std::string to_str(const Value& v);
// Python repr(v).
std::string repr(const Value& v);
std::string python_float_repr(double d);
std::string python_string_repr(std::string_view s);

struct JsonDumpOptions {
  int indent = -1;  // < 0: compact one-line form
  std::string indent_string;  // used when set via a string indent
  bool sort_keys = false;
  bool ensure_ascii = false;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
};
// Python json.dumps(v, ...) with the given options (HF's tojson filter).
std::string json_dumps(const Value& v, const JsonDumpOptions& options);

// Iterate like Python `for x in v`: list items, dict keys, string characters
// (code points), the remaining items of an iterator (consuming it), nothing for
// Undefined. Throws for non-iterables.
List iterate(const Value& v);

}  // namespace sluice::jinja
