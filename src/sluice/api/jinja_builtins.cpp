#include "sluice/api/jinja_builtins.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cctype>
#include <cmath>

#include "sluice/api/jinja_eval.h"
#include "sluice/api/jinja_strings.h"

namespace sluice::jinja {

BoundArgs::BoundArgs(std::string_view function, CallArgs&& args,
                     std::initializer_list<std::string_view> names)
    : function_(function), names_(names), values_(names.size()), present_(names.size(), false) {
  if (args.positional.size() > names_.size()) {
    throw RenderError(function_ + "() takes at most " + std::to_string(names_.size()) +
                      " argument(s), got " + std::to_string(args.positional.size()));
  }
  for (std::size_t i = 0; i < args.positional.size(); ++i) {
    values_[i] = std::move(args.positional[i]);
    present_[i] = true;
  }
  for (auto& [key, value] : args.keyword) {
    const auto it = std::find(names_.begin(), names_.end(), key);
    if (it == names_.end()) {
      throw RenderError(function_ + "() got an unexpected keyword argument '" + key + "'");
    }
    const auto i = static_cast<std::size_t>(it - names_.begin());
    if (present_[i]) throw RenderError(function_ + "() got multiple values for argument '" + key + "'");
    values_[i] = std::move(value);
    present_[i] = true;
  }
}

const Value& BoundArgs::required(std::size_t i) const {
  if (!present_[i]) {
    throw RenderError(function_ + "() missing required argument '" + std::string(names_[i]) + "'");
  }
  return values_[i];
}

namespace {

constexpr std::array<std::string_view, 34> kTests = {
    "boolean", "callable", "defined", "undefined", "divisibleby", "eq", "equalto", "==",
    "ne", "!=", "even", "odd", "false", "true", "float", "integer", "ge", ">=", "gt",
    "greaterthan", ">", "le", "<=", "lt", "lessthan", "<", "in", "iterable", "lower",
    "upper", "mapping", "none", "number", "sameas"};
constexpr std::array<std::string_view, 5> kMoreTests = {"sequence", "string", "escaped",
                                                        "filter", "test"};

constexpr std::array<std::string_view, 11> kDictMethods = {
    "items", "keys", "values", "get", "copy", "pop", "update", "setdefault", "clear", "popitem",
    "fromkeys"};
constexpr std::array<std::string_view, 9> kListMethods = {
    "index", "count", "append", "extend", "insert", "pop", "remove", "sort", "reverse"};
constexpr std::array<std::string_view, 31> kStringMethods = {
    "strip", "lstrip", "rstrip", "startswith", "endswith", "split", "rsplit", "replace",
    "upper", "lower", "title", "capitalize", "format", "join", "find", "rfind", "count",
    "isdigit", "isalpha", "isalnum", "isspace", "isupper", "islower", "splitlines", "index",
    "rindex", "removeprefix", "removesuffix", "partition", "rpartition", "zfill"};

template <std::size_t N>
bool contains(const std::array<std::string_view, N>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

bool has_method(const Value& obj, std::string_view name) {
  if (obj.is_string()) return contains(kStringMethods, name);
  if (obj.is_dict()) return contains(kDictMethods, name);
  if (obj.is_list()) return contains(kListMethods, name);
  return false;
}

std::int64_t to_index(const Value& v, const char* what) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool() ? 1 : 0;
  throw RenderError(std::string(what) + " indices must be integers, not '" + type_name(v) + "'");
}

std::string expect_string(const Value& v, const char* what) {
  if (v.is_string()) return v.as_string();
  if (v.is_undefined()) fail_undefined(v);
  throw RenderError(std::string(what) + " expects a string, got '" + type_name(v) + "'");
}

const std::string* optional_string(const BoundArgs& a, std::size_t i, std::string& storage,
                                   const char* what) {
  const Value* v = a.get(i);
  if (v == nullptr || v->is_none()) return nullptr;
  storage = expect_string(*v, what);
  return &storage;
}

// str.format with positional and named fields; format specs and conversions are
// refused rather than approximated.
std::string py_format(const std::string& fmt, const CallArgs& args) {
  std::string out;
  std::size_t auto_index = 0;
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '{') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
        out += '{';
        ++i;
        continue;
      }
      const std::size_t close = fmt.find('}', i);
      if (close == std::string::npos) throw RenderError("str.format: single '{' encountered");
      const std::string field = fmt.substr(i + 1, close - i - 1);
      if (field.find_first_of(":!.[") != std::string::npos) {
        throw RenderError("str.format: format specs and conversions are not supported ('{" + field + "}')");
      }
      const Value* v = nullptr;
      if (field.empty() || std::all_of(field.begin(), field.end(), ::isdigit)) {
        const std::size_t idx = field.empty() ? auto_index++ : std::stoul(field);
        if (idx >= args.positional.size()) throw RenderError("str.format: replacement index out of range");
        v = &args.positional[idx];
      } else {
        for (const auto& [k, kv] : args.keyword) {
          if (k == field) v = &kv;
        }
        if (v == nullptr) throw RenderError("str.format: missing key '" + field + "'");
      }
      out += to_str(*v);
      i = close;
    } else if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') ++i;
      else throw RenderError("str.format: single '}' encountered");
      out += '}';
    } else {
      out += c;
    }
  }
  return out;
}

std::vector<std::string> splitlines(const std::string& s) {
  std::vector<std::string> lines;
  const std::vector<char32_t> cps = utf8_decode(s);
  std::size_t start = 0;
  for (std::size_t i = 0; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    const bool is_break = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C ||
                          c == 0x1D || c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!is_break) continue;
    lines.push_back(utf8_encode(cps, start, i));
    if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    start = i + 1;
  }
  if (start < cps.size()) lines.push_back(utf8_encode(cps, start, cps.size()));
  return lines;
}

Value string_method(Interpreter& in, const std::string& s, const std::string& name, CallArgs&& args) {
  in.charge(1 + static_cast<std::int64_t>(s.size() / 4096));
  std::string tmp;
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    BoundArgs a(name, std::move(args), {"chars"});
    const std::string* chars = optional_string(a, 0, tmp, "str.strip");
    return py_strip(s, chars, name != "rstrip", name != "lstrip");
  }
  if (name == "startswith" || name == "endswith") {
    BoundArgs a(name, std::move(args), {"prefix"});
    const Value& p = a.required(0);
    std::vector<std::string> options;
    if (p.is_list()) {
      for (const Value& v : p.as_list()) options.push_back(expect_string(v, name.c_str()));
    } else {
      options.push_back(expect_string(p, name.c_str()));
    }
    for (const std::string& o : options) {
      if (name == "startswith" ? s.starts_with(o) : s.ends_with(o)) return true;
    }
    return false;
  }
  if (name == "split" || name == "rsplit") {
    BoundArgs a(name, std::move(args), {"sep", "maxsplit"});
    const std::string* sep = optional_string(a, 0, tmp, "str.split");
    if (sep != nullptr && sep->empty()) throw RenderError("empty separator");
    const std::int64_t maxsplit = to_index(a.get_or(1, Value(-1)), "maxsplit");
    List out;
    for (std::string& part : py_split(s, sep, maxsplit, name == "rsplit")) out.emplace_back(std::move(part));
    return out;
  }
  if (name == "replace") {
    BoundArgs a(name, std::move(args), {"old", "new", "count"});
    const std::string result = py_replace(s, expect_string(a.required(0), "str.replace"),
                                          expect_string(a.required(1), "str.replace"),
                                          to_index(a.get_or(2, Value(-1)), "count"));
    in.check_size(result.size());
    return result;
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    BoundArgs a(name, std::move(args), {});
    if (name == "upper") return py_upper(s);
    if (name == "lower") return py_lower(s);
    if (name == "title") return py_title(s);
    return py_capitalize(s);
  }
  if (name == "format") {
    std::string out = py_format(s, args);
    in.check_size(out.size());
    return out;
  }
  if (name == "join") {
    BoundArgs a(name, std::move(args), {"iterable"});
    std::string out;
    bool first = true;
    for (const Value& v : iterate(a.required(0))) {
      if (!first) out += s;
      first = false;
      out += expect_string(v, "str.join");
      in.check_size(out.size());
    }
    return out;
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    BoundArgs a(name, std::move(args), {"sub"});
    const std::string sub = expect_string(a.required(0), name.c_str());
    const std::size_t pos = (name == "find" || name == "index") ? s.find(sub) : s.rfind(sub);
    if (pos == std::string::npos) {
      if (name == "index" || name == "rindex") throw RenderError("substring not found");
      return -1;
    }
    return static_cast<std::int64_t>(utf8_length(std::string_view(s).substr(0, pos)));
  }
  if (name == "count") {
    BoundArgs a(name, std::move(args), {"sub"});
    return py_count(s, expect_string(a.required(0), "str.count"));
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" ||
      name == "isupper" || name == "islower") {
    BoundArgs a(name, std::move(args), {});
    const std::vector<char32_t> cps = utf8_decode(s);
    if (name == "isupper" || name == "islower") {
      const std::string upper = py_upper(s);
      const std::string lower = py_lower(s);
      const bool cased = upper != lower;
      return cased && (name == "isupper" ? s == upper : s == lower);
    }
    if (cps.empty()) return false;
    for (char32_t c : cps) {
      if (c >= 0x80) {
        if (name == "isspace" && !is_python_space(c)) return false;
        if (name != "isspace") throw RenderError("str." + name + "() on non-ASCII text is not supported");
        continue;
      }
      const int ch = static_cast<int>(c);
      const bool ok = name == "isdigit" ? std::isdigit(ch) != 0
                      : name == "isalpha" ? std::isalpha(ch) != 0
                      : name == "isalnum" ? std::isalnum(ch) != 0
                                          : is_python_space(c);
      if (!ok) return false;
    }
    return true;
  }
  if (name == "splitlines") {
    BoundArgs a(name, std::move(args), {});
    List out;
    for (std::string& line : splitlines(s)) out.emplace_back(std::move(line));
    return out;
  }
  if (name == "removeprefix" || name == "removesuffix") {
    BoundArgs a(name, std::move(args), {"affix"});
    const std::string affix = expect_string(a.required(0), name.c_str());
    if (name == "removeprefix") return s.starts_with(affix) ? s.substr(affix.size()) : s;
    return s.ends_with(affix) ? s.substr(0, s.size() - affix.size()) : s;
  }
  if (name == "partition" || name == "rpartition") {
    BoundArgs a(name, std::move(args), {"sep"});
    const std::string sep = expect_string(a.required(0), name.c_str());
    if (sep.empty()) throw RenderError("empty separator");
    const std::size_t pos = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (pos == std::string::npos) {
      return Value::tuple(name == "partition" ? List{Value(s), Value(""), Value("")}
                                              : List{Value(""), Value(""), Value(s)});
    }
    return Value::tuple(List{Value(s.substr(0, pos)), Value(sep), Value(s.substr(pos + sep.size()))});
  }
  if (name == "zfill") {
    BoundArgs a(name, std::move(args), {"width"});
    const std::int64_t width = to_index(a.required(0), "width");
    const auto len = static_cast<std::int64_t>(utf8_length(s));
    if (len >= width) return s;
    in.check_size(static_cast<std::size_t>(width));
    const std::size_t sign = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
    return s.substr(0, sign) + std::string(static_cast<std::size_t>(width - len), '0') + s.substr(sign);
  }
  throw RenderError("'str object' has no attribute '" + name + "'");
}

[[noreturn]] void fail_unsafe(const Value& obj, const std::string& name) {
  throw RenderError("access to attribute '" + name + "' of '" + type_name(obj) +
                    "' object is unsafe (the template environment is immutable)");
}

Value dict_method(const Value& obj, const std::string& name, CallArgs&& args) {
  const Dict& d = obj.as_dict();
  if (name == "items" || name == "keys" || name == "values") {
    BoundArgs a(name, std::move(args), {});
    List out;
    for (const auto& [k, v] : d.entries()) {
      if (name == "items") out.push_back(Value::tuple(List{Value(k), v}));
      else if (name == "keys") out.emplace_back(k);
      else out.push_back(v);
    }
    return out;
  }
  if (name == "get") {
    BoundArgs a(name, std::move(args), {"key", "default"});
    const Value& key = a.required(0);
    if (key.is_string()) {
      if (const Value* v = d.find(key.as_string())) return *v;
    }
    return a.get_or(1, Value(None{}));
  }
  if (name == "copy") return obj;
  fail_unsafe(obj, name);
}

Value list_method(const Value& obj, const std::string& name, CallArgs&& args) {
  const List& l = obj.as_list();
  if (name == "index" || name == "count") {
    BoundArgs a(name, std::move(args), {"value"});
    const Value& needle = a.required(0);
    std::int64_t n = 0;
    for (std::size_t i = 0; i < l.size(); ++i) {
      if (!equals(l[i], needle)) continue;
      if (name == "index") return static_cast<std::int64_t>(i);
      ++n;
    }
    if (name == "index") throw RenderError(repr(needle) + " is not in list");
    return n;
  }
  fail_unsafe(obj, name);
}

Value loop_attribute(const LoopState& loop, const std::string& name) {
  const std::int64_t i = loop.index0;
  const auto n = static_cast<std::int64_t>(loop.items->size());
  if (name == "index") return i + 1;
  if (name == "index0") return i;
  if (name == "revindex") return n - i;
  if (name == "revindex0") return n - i - 1;
  if (name == "first") return i == 0;
  if (name == "last") return i == n - 1;
  if (name == "length") return n;
  if (name == "depth") return 1;
  if (name == "depth0") return 0;
  if (name == "cycle") return Value(loop.cycle);
  if (name == "previtem") {
    if (i == 0) return Undefined{"there is no previous item"};
    return (*loop.items)[static_cast<std::size_t>(i - 1)];
  }
  if (name == "nextitem") {
    if (i + 1 >= n) return Undefined{"there is no next item"};
    return (*loop.items)[static_cast<std::size_t>(i + 1)];
  }
  return Undefined{"'LoopContext object' has no attribute '" + name + "'"};
}

}  // namespace

std::string percent_format(const std::string& format, const Value& args) {
  // A tuple supplies positional values; a dict (or list, which Python treats as a
  // mapping here) is a mapping; anything else is the single value.
  const bool positional = args.is_tuple();
  const bool mapping = !positional && (args.is_dict() || args.is_list());
  std::vector<Value> values;
  if (positional) values = args.as_list();
  else if (!mapping) values.push_back(args);
  std::size_t next = 0;
  bool used_mapping = false;
  std::string out;
  for (std::size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) throw RenderError("incomplete format");
    if (format[i] == '%') {
      out += '%';
      continue;
    }
    const Value* value = nullptr;
    if (format[i] == '(') {
      const std::size_t close = format.find(')', i);
      if (close == std::string::npos || !args.is_dict()) throw RenderError("format requires a mapping");
      value = args.as_dict().find(format.substr(i + 1, close - i - 1));
      if (value == nullptr) throw RenderError("KeyError in % format: '" + format.substr(i + 1, close - i - 1) + "'");
      used_mapping = true;
      i = close + 1;
    }
    int precision = -1;
    if (i < format.size() && format[i] == '.') {
      precision = 0;
      while (++i < format.size() && std::isdigit(static_cast<unsigned char>(format[i]))) {
        precision = precision * 10 + (format[i] - '0');
      }
    }
    if (i >= format.size()) throw RenderError("incomplete format");
    if (value == nullptr) {
      if (next >= values.size()) throw RenderError("not enough arguments for format string");
      value = &values[next++];
    }
    const char conversion = format[i];
    if (conversion == 's' && precision < 0) {
      out += to_str(*value);
    } else if (conversion == 'r' && precision < 0) {
      out += repr(*value);
    } else if ((conversion == 'd' || conversion == 'i') && precision < 0) {
      if (!value->is_number()) throw RenderError("%d format: a real number is required, not " + type_name(*value));
      out += std::to_string(value->is_float() ? static_cast<std::int64_t>(std::trunc(value->as_float()))
                                              : value->is_bool() ? std::int64_t{value->as_bool()} : value->as_int());
    } else if (conversion == 'f') {
      if (!value->is_number()) throw RenderError("%f format: a real number is required, not " + type_name(*value));
      char buf[512];
      std::snprintf(buf, sizeof(buf), "%.*f", precision < 0 ? 6 : std::min(precision, 100), to_double(*value));
      out += buf;
    } else {
      throw RenderError(std::string("unsupported format conversion '%") + conversion + "'");
    }
  }
  if (!mapping && !used_mapping && next < values.size()) {
    throw RenderError("not all arguments converted during string formatting");
  }
  return out;
}

bool is_test(std::string_view name) { return contains(kTests, name) || contains(kMoreTests, name); }

Value bound_method(const Value& obj, const std::string& name) {
  auto callable = std::make_shared<Callable>();
  callable->name = name;
  callable->call = [obj, name](Interpreter& in, CallArgs&& args) -> Value {
    std::optional<Value> r = call_method(in, obj, name, std::move(args));
    if (!r) throw RenderError("'" + type_name(obj) + "' object has no method '" + name + "'");
    return std::move(*r);
  };
  return Value(std::shared_ptr<const Callable>(std::move(callable)));
}

Value get_attribute(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (has_method(obj, name)) return bound_method(obj, name);
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(name)) return *v;
    return Undefined{"'dict object' has no attribute '" + name + "'"};
  }
  if (obj.is_loop()) return loop_attribute(obj.as_loop(), name);
  if (obj.is_namespace()) {
    if (const Value* v = obj.as_namespace().attributes.find(name)) return *v;
    return Undefined{"'Namespace object' has no attribute '" + name + "'"};
  }
  return Undefined{std::string("'").append(type_name(obj)).append(" object' has no attribute '").append(name).append("'")};
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict()) {
    if (key.is_string()) {
      if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
      if (has_method(obj, key.as_string())) return bound_method(obj, key.as_string());
    }
    return Undefined{"'dict object' has no attribute " + repr(key)};
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    std::int64_t i = to_index(key, "list");
    if (obj.is_list()) {
      const auto n = static_cast<std::int64_t>(obj.as_list().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Undefined{"'list object' has no element " + std::to_string(to_index(key, "list"))};
      return obj.as_list()[static_cast<std::size_t>(i)];
    }
    const std::vector<char32_t> cps = utf8_decode(obj.as_string());
    const auto n = static_cast<std::int64_t>(cps.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Undefined{"'str object' has no element " + std::to_string(to_index(key, "str"))};
    std::string one;
    utf8_append(one, cps[static_cast<std::size_t>(i)]);
    return one;
  }
  if (key.is_string()) return get_attribute(obj, key.as_string());
  if (key.is_undefined()) fail_undefined(key);
  return Undefined{std::string("'").append(type_name(obj)).append(" object' has no element ").append(repr(key))};
}

Value get_slice(const Value& obj, const std::optional<std::int64_t>& start,
                const std::optional<std::int64_t>& stop, std::int64_t step) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (step == 0) throw RenderError("slice step cannot be zero");
  std::vector<char32_t> cps;
  std::int64_t n = 0;
  if (obj.is_list()) {
    n = static_cast<std::int64_t>(obj.as_list().size());
  } else if (obj.is_string()) {
    cps = utf8_decode(obj.as_string());
    n = static_cast<std::int64_t>(cps.size());
  } else {
    // jinja2 compiles a slice to a plain Python subscript, so this is a TypeError
    // (only constant-folded literals become Undefined; templates do not slice those).
    throw RenderError("'" + type_name(obj) + "' object is not subscriptable");
  }
  // Python's slice.indices().
  auto clamp = [&](std::optional<std::int64_t> v, std::int64_t fallback) {
    if (!v) return fallback;
    std::int64_t x = *v;
    if (x < 0) x += n;
    if (step > 0) return std::clamp<std::int64_t>(x, 0, n);
    return std::clamp<std::int64_t>(x, -1, n - 1);
  };
  const std::int64_t begin = clamp(start, step > 0 ? 0 : n - 1);
  const std::int64_t end = clamp(stop, step > 0 ? n : -1);
  List items;
  std::string text;
  for (std::int64_t i = begin; step > 0 ? i < end : i > end; i += step) {
    if (obj.is_list()) items.push_back(obj.as_list()[static_cast<std::size_t>(i)]);
    else utf8_append(text, cps[static_cast<std::size_t>(i)]);
  }
  if (obj.is_list()) return items;
  return text;
}

std::optional<Value> call_method(Interpreter& in, const Value& obj, const std::string& name,
                                 CallArgs&& args) {
  if (!has_method(obj, name)) return std::nullopt;
  if (obj.is_string()) return string_method(in, obj.as_string(), name, std::move(args));
  if (obj.is_dict()) return dict_method(obj, name, std::move(args));
  return list_method(obj, name, std::move(args));
}

bool apply_test(Interpreter& in, std::string_view name, const Value& v, CallArgs&& args) {
  (void)in;
  const std::string fn = "test '" + std::string(name) + "'";
  auto arg = [&]() -> Value {
    BoundArgs a(fn, std::move(args), {"other"});
    return a.required(0);
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  // Undefined defines __call__ (to raise), so Python's callable() says yes.
  if (name == "callable") return v.is_callable() || v.is_undefined();
  if (name == "escaped") return false;
  // Undefined iterates as empty and has a length, so it is a sequence and iterable.
  if (name == "iterable") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined() || v.is_iterator();
  if (name == "sequence") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (name == "lower" || name == "upper") {
    // str(value).islower()/isupper(): needs at least one cased character.
    const std::string s = to_str(v);
    const bool has_cased = py_lower(s) != py_upper(s);
    return has_cased && (name == "lower" ? py_lower(s) == s : py_upper(s) == s);
  }
  if (name == "even" || name == "odd" || name == "divisibleby") {
    // value % n == 0 (or == 1 for odd) with Python's floor modulo, on ints or floats.
    if (v.is_undefined()) fail_undefined(v);
    if (!v.is_number()) throw RenderError("unsupported operand type(s) for %: '" + type_name(v) + "' and 'int'");
    const Value divisor = name == "divisibleby" ? arg() : Value(2);
    if (!divisor.is_number()) throw RenderError("unsupported operand type(s) for %");
    const double y = to_double(divisor);
    if (y == 0.0) throw RenderError("integer division or modulo by zero");
    const double x = to_double(v);
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return name == "odd" ? m == 1.0 : m == 0.0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, arg());
  if (name == "ne" || name == "!=") return !equals(v, arg());
  if (name == "lt" || name == "lessthan" || name == "<") return compare(v, arg()) < 0;
  if (name == "le" || name == "<=") return compare(v, arg()) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare(v, arg()) > 0;
  if (name == "ge" || name == ">=") return compare(v, arg()) >= 0;
  if (name == "sameas") {
    const Value other = arg();
    if (v.is_none() || v.is_bool() || v.is_undefined()) {
      return v.storage().index() == other.storage().index() && equals(v, other);
    }
    if (v.is_list() && other.is_list()) return &v.as_list() == &other.as_list();
    if (v.is_dict() && other.is_dict()) return &v.as_dict() == &other.as_dict();
    if (v.is_namespace() || v.is_callable()) return equals(v, other);
    return v.storage().index() == other.storage().index() && equals(v, other);
  }
  if (name == "in") {
    const Value container = arg();
    if (container.is_string()) {
      return container.as_string().find(expect_string(v, "'in <string>'")) != std::string::npos;
    }
    if (container.is_dict()) {
      if (v.is_list() && !v.is_tuple()) throw RenderError("unhashable type: 'list'");
      if (v.is_dict()) throw RenderError("unhashable type: 'dict'");
      return v.is_string() && container.as_dict().find(v.as_string()) != nullptr;
    }
    for (const Value& item : iterate(container)) {
      if (equals(item, v)) return true;
    }
    return false;
  }
  if (name == "filter") return v.is_string() && is_filter(v.as_string());
  if (name == "test") return v.is_string() && is_test(v.as_string());
  throw RenderError("no test named '" + std::string(name) + "'");
}

std::vector<std::pair<std::string, Value>> builtin_globals() {
  std::vector<std::pair<std::string, Value>> globals;
  auto add = [&](const std::string& name, std::function<Value(Interpreter&, CallArgs&&)> fn) {
    auto c = std::make_shared<Callable>();
    c->name = name;
    c->call = std::move(fn);
    globals.emplace_back(name, Value(std::shared_ptr<const Callable>(std::move(c))));
  };
  add("range", [](Interpreter& in, CallArgs&& args) -> Value {
    if (!args.keyword.empty()) throw RenderError("range() takes no keyword arguments");
    std::vector<std::int64_t> n;
    for (const Value& v : args.positional) n.push_back(to_index(v, "range"));
    std::int64_t start = 0;
    std::int64_t stop = 0;
    std::int64_t step = 1;
    if (n.size() == 1) {
      stop = n[0];
    } else if (n.size() == 2 || n.size() == 3) {
      start = n[0];
      stop = n[1];
      if (n.size() == 3) step = n[2];
    } else {
      throw RenderError("range expected 1 to 3 arguments, got " + std::to_string(n.size()));
    }
    if (step == 0) throw RenderError("range() arg 3 must not be zero");
    const std::int64_t count = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                                        : (start > stop ? (start - stop - step - 1) / -step : 0);
    // jinja2's sandbox refuses ranges above MAX_RANGE; so do we, with its message.
    constexpr std::int64_t kMaxRange = 100000;
    if (count > kMaxRange) {
      throw RenderError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    }
    in.charge(count);
    List out;
    out.reserve(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i) out.emplace_back(start + i * step);
    return out;
  });
  add("namespace", [](Interpreter& in, CallArgs&& args) -> Value {
    auto ns = std::make_shared<Namespace>();
    in.track(ns);
    for (const Value& v : args.positional) {
      if (!v.is_dict()) throw RenderError("namespace() positional arguments must be dicts");
      for (const auto& [k, item] : v.as_dict().entries()) ns->attributes.set(k, item);
    }
    for (auto& [k, v] : args.keyword) ns->attributes.set(k, std::move(v));
    return Value(std::move(ns));
  });
  add("dict", [](Interpreter&, CallArgs&& args) -> Value {
    Dict d;
    for (const Value& v : args.positional) {
      if (!v.is_dict()) throw RenderError("dict() positional arguments must be dicts");
      for (const auto& [k, item] : v.as_dict().entries()) d.set(k, item);
    }
    for (auto& [k, v] : args.keyword) d.set(k, std::move(v));
    return d;
  });
  add("raise_exception", [](Interpreter&, CallArgs&& args) -> Value {
    BoundArgs a("raise_exception", std::move(args), {"message"});
    throw RenderError("template raised an exception: " + to_str(a.get_or(0, Value(""))));
  });
  return globals;
}

}  // namespace sluice::jinja
