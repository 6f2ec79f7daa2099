// The builtin filters, with jinja2 3.1's argument names and defaults, and Hugging
// Face's tojson (json.dumps with ensure_ascii=False) instead of jinja2's HTML-safe one.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "sluice/api/jinja_builtins.h"
#include "sluice/api/jinja_eval.h"
#include "sluice/api/jinja_strings.h"

namespace sluice::jinja {
namespace {

constexpr std::array<std::string_view, 44> kFilters = {
    "abs", "attr", "capitalize", "count", "d", "default", "dictsort", "e", "escape", "first",
    "float", "indent", "int", "items", "join", "last", "length", "list", "lower", "map", "max",
    "min", "reject", "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr",
    "sort", "string", "sum", "title", "tojson", "trim", "unique", "upper", "wordcount", "center",
    "batch", "forceescape", "truncate", "format"};

std::string str_of(const Value& v) { return to_str(v); }

std::int64_t int_arg(const Value& v, const char* what) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool() ? 1 : 0;
  throw RenderError(std::string(what) + " must be an integer, got '" + type_name(v) + "'");
}

// Attribute lookup for map/sort/selectattr: "a.b" walks nested attributes, and an
// integer component indexes, like jinja2's make_attrgetter.
Value lookup_path(const Value& item, const std::string& path) {
  Value current = item;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    current = numeric ? get_item(current, Value(static_cast<std::int64_t>(std::stoll(part))))
                      : get_item(current, Value(part));
    if (dot == std::string::npos) return current;
    start = dot + 1;
  }
}

Value attribute_arg(const Value* attribute, const Value& item) {
  if (attribute == nullptr || attribute->is_none()) return item;
  if (attribute->is_int()) return get_item(item, *attribute);
  return lookup_path(item, str_of(*attribute));
}

Value case_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return py_lower(v.as_string());
  return v;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// Python round(x, ndigits): correctly rounded from the exact binary value, ties to
// even, which is what printf's "%.*f" does.
double py_round(double x, std::int64_t digits) {
  if (!std::isfinite(x)) return x;
  if (digits > 300) return x;
  if (digits < 0) {
    const double scale = std::pow(10.0, static_cast<double>(-digits));
    return std::nearbyint(x / scale) * scale;
  }
  char buf[512];
  std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(digits), x);
  return std::strtod(buf, nullptr);
}

Value filter_int(const Value& v, const Value& fallback, std::int64_t base) {
  if (v.is_undefined()) fail_undefined(v);  // int(Undefined) raises in jinja2
  if (v.is_int()) return v;
  if (v.is_bool()) return static_cast<std::int64_t>(v.as_bool());
  if (v.is_float()) {
    if (!std::isfinite(v.as_float())) return fallback;
    return static_cast<std::int64_t>(std::trunc(v.as_float()));
  }
  if (v.is_string()) {
    std::string s = py_strip(v.as_string(), nullptr, true, true);
    std::string digits;
    for (char c : s) {
      if (c != '_') digits += c;
    }
    if (!digits.empty()) {
      char* end = nullptr;
      errno = 0;
      const long long parsed = std::strtoll(digits.c_str(), &end, static_cast<int>(base));
      if (errno == 0 && end != nullptr && *end == '\0') return static_cast<std::int64_t>(parsed);
      // jinja2 falls back to int(float(value)).
      const double d = std::strtod(digits.c_str(), &end);
      if (end != nullptr && *end == '\0' && std::isfinite(d) && base == 10) {
        return static_cast<std::int64_t>(std::trunc(d));
      }
    }
  }
  return fallback;
}

Value filter_float(const Value& v, const Value& fallback) {
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_float()) return v;
  if (v.is_int() || v.is_bool()) return to_double(v);
  if (v.is_string()) {
    const std::string s = py_strip(v.as_string(), nullptr, true, true);
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end != nullptr && *end == '\0') return d;
  }
  return fallback;
}

std::string filter_indent(const std::string& s, const Value& width, bool first, bool blank) {
  const std::string indention = width.is_string() ? width.as_string()
                                                  : std::string(static_cast<std::size_t>(std::max<std::int64_t>(0, int_arg(width, "width"))), ' ');
  // jinja2 appends a newline before splitlines(), so a trailing newline is dropped.
  std::vector<std::string> lines;
  {
    const std::string text = s + "\n";
    std::size_t start = 0;
    for (std::size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '\n' || text[i] == '\r') {
        lines.push_back(text.substr(start, i - start));
        if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
        start = i + 1;
      }
    }
    if (start < text.size()) lines.push_back(text.substr(start));
  }
  std::string rv;
  if (blank) {
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) rv += "\n" + indention;
      rv += lines[i];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (std::size_t i = 1; i < lines.size(); ++i) {
      rv += "\n";
      if (!lines[i].empty()) rv += indention;
      rv += lines[i];
    }
  }
  if (first) rv = indention + rv;
  return rv;
}

std::int64_t wordcount(const std::string& s) {
  // re.findall(r"\w+") : runs of letters, digits and underscore (any script).
  std::int64_t n = 0;
  bool in_word = false;
  for (char32_t c : utf8_decode(s)) {
    const bool word = (c < 0x80) ? (std::isalnum(static_cast<int>(c)) != 0 || c == '_')
                                 : !is_python_space(c) && !(c >= 0x2000 && c <= 0x206F) &&
                                       !(c >= 0x3000 && c <= 0x303F) && !(c >= 0xFF00 && c <= 0xFF0F) &&
                                       !(c >= 0x80 && c <= 0xBF);
    if (word && !in_word) ++n;
    in_word = word;
  }
  return n;
}

List sorted_list(Interpreter& in, List items, bool reverse, bool case_sensitive, const Value* attribute) {
  in.charge(static_cast<std::int64_t>(items.size()));
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) keyed.emplace_back(case_key(attribute_arg(attribute, item), case_sensitive), std::move(item));
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& a, const auto& b) {
    return reverse ? compare(b.first, a.first) < 0 : compare(a.first, b.first) < 0;
  });
  List out;
  for (auto& [key, item] : keyed) out.push_back(std::move(item));
  return out;
}

Value select_like(Interpreter& in, std::string_view name, const Value& seq, CallArgs&& args) {
  const bool by_attribute = name == "selectattr" || name == "rejectattr";
  const bool keep_matching = name == "select" || name == "selectattr";
  std::vector<Value> rest = std::move(args.positional);
  if (!args.keyword.empty()) throw RenderError(std::string(name) + "() takes no keyword arguments");
  std::size_t next = 0;
  Value attribute;
  if (by_attribute) {
    if (rest.empty()) throw RenderError(std::string(name) + "() missing the attribute name");
    attribute = rest[next++];
  }
  std::string test;
  if (next < rest.size()) test = str_of(rest[next++]);
  if (!test.empty() && !is_test(test)) throw RenderError("no test named '" + test + "'");
  List out;
  for (const Value& item : iterate(seq)) {
    in.charge();
    const Value subject = by_attribute ? attribute_arg(&attribute, item) : item;
    bool matches = false;
    if (test.empty()) {
      matches = truthy(subject);
    } else {
      CallArgs test_args;
      test_args.positional.assign(rest.begin() + static_cast<std::ptrdiff_t>(next), rest.end());
      matches = apply_test(in, test, subject, std::move(test_args));
    }
    if (matches == keep_matching) out.push_back(item);
  }
  return out;
}

Value filter_map(Interpreter& in, const Value& seq, CallArgs&& args) {
  const Value* attribute = nullptr;
  const Value* fallback = nullptr;
  for (const auto& [k, v] : args.keyword) {
    if (k == "attribute") attribute = &v;
    else if (k == "default") fallback = &v;
    else if (args.positional.empty()) throw RenderError("map() got an unexpected keyword argument '" + k + "'");
  }
  List out;
  if (attribute != nullptr) {
    if (!args.positional.empty()) throw RenderError("map(attribute=...) takes no positional arguments");
    for (const Value& item : iterate(seq)) {
      in.charge();
      Value v = attribute_arg(attribute, item);
      if (v.is_undefined() && fallback != nullptr) v = *fallback;
      out.push_back(std::move(v));
    }
    return out;
  }
  if (args.positional.empty()) throw RenderError("map() requires a filter name or attribute=");
  const std::string filter = str_of(args.positional[0]);
  if (!is_filter(filter)) throw RenderError("no filter named '" + filter + "'");
  for (const Value& item : iterate(seq)) {
    in.charge();
    CallArgs filter_args;
    filter_args.positional.assign(args.positional.begin() + 1, args.positional.end());
    filter_args.keyword = args.keyword;
    out.push_back(apply_filter(in, filter, item, std::move(filter_args)));
  }
  return out;
}

Value filter_tojson(Interpreter& in, const Value& v, CallArgs&& args) {
  BoundArgs a("tojson", std::move(args), {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonDumpOptions o;
  o.ensure_ascii = truthy(a.get_or(0, Value(false)));
  const Value indent = a.get_or(1, Value(None{}));
  if (indent.is_string()) {
    o.indent_string = indent.as_string();
    o.indent = 0;
  } else if (!indent.is_none()) {
    o.indent = static_cast<int>(std::max<std::int64_t>(0, int_arg(indent, "indent")));
  }
  if (!indent.is_none()) o.item_separator = ",";
  const Value separators = a.get_or(2, Value(None{}));
  if (!separators.is_none()) {
    if (!separators.is_list() || separators.as_list().size() != 2) {
      throw RenderError("tojson separators must be a (item, key) pair");
    }
    o.item_separator = str_of(separators.as_list()[0]);
    o.key_separator = str_of(separators.as_list()[1]);
  }
  o.sort_keys = truthy(a.get_or(3, Value(false)));
  std::string out = json_dumps(v, o);
  in.check_size(out.size());
  in.charge(1 + static_cast<std::int64_t>(out.size() / 4096));
  return out;
}

Value min_max(const Value& seq, bool want_max, CallArgs&& args) {
  BoundArgs a(want_max ? "max" : "min", std::move(args), {"case_sensitive", "attribute"});
  const bool case_sensitive = truthy(a.get_or(0, Value(false)));
  const Value* attribute = a.get(1);
  const List items = iterate(seq);
  if (items.empty()) return Undefined{"No aggregated item, sequence was empty."};
  std::size_t best = 0;
  for (std::size_t i = 1; i < items.size(); ++i) {
    const int c = compare(case_key(attribute_arg(attribute, items[i]), case_sensitive),
                          case_key(attribute_arg(attribute, items[best]), case_sensitive));
    if (want_max ? c > 0 : c < 0) best = i;
  }
  return items[best];
}

}  // namespace

bool is_filter(std::string_view name) {
  return std::find(kFilters.begin(), kFilters.end(), name) != kFilters.end();
}

Value apply_filter(Interpreter& in, std::string_view name, Value v, CallArgs&& args) {
  in.charge();
  const std::string fn(name);
  if (name == "default" || name == "d") {
    BoundArgs a(fn, std::move(args), {"default_value", "boolean"});
    const bool boolean = truthy(a.get_or(1, Value(false)));
    if (v.is_undefined() || (boolean && !truthy(v))) return a.get_or(0, Value(""));
    return v;
  }
  if (name == "tojson") return filter_tojson(in, v, std::move(args));
  // jinja2's map/select family starts with `if value:`, so a falsy input (None,
  // "", Undefined) yields an empty sequence instead of failing to iterate.
  if (name == "map") {
    return Value::iterator(truthy(v) ? filter_map(in, v, std::move(args)).as_list() : List{});
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    return Value::iterator(truthy(v) ? select_like(in, name, v, std::move(args)).as_list() : List{});
  }
  if (name == "safe") {
    BoundArgs a(fn, std::move(args), {});
    return v;
  }
  if (name == "string") {
    BoundArgs a(fn, std::move(args), {});
    return v.is_string() ? v : Value(str_of(v));
  }
  if (name == "trim") {
    BoundArgs a(fn, std::move(args), {"chars"});
    const Value* chars = a.get(0);
    std::string chars_storage;
    const std::string* chars_ptr = nullptr;
    if (chars != nullptr && !chars->is_none()) {
      chars_storage = str_of(*chars);
      chars_ptr = &chars_storage;
    }
    return py_strip(str_of(v), chars_ptr, true, true);
  }
  if (name == "length" || name == "count") {
    BoundArgs a(fn, std::move(args), {});
    if (v.is_string()) return static_cast<std::int64_t>(utf8_length(v.as_string()));
    if (v.is_list()) return static_cast<std::int64_t>(v.as_list().size());
    if (v.is_dict()) return static_cast<std::int64_t>(v.as_dict().size());
    if (v.is_undefined()) return 0;
    throw RenderError("object of type '" + type_name(v) + "' has no len()");  // e.g. a generator
  }
  if (name == "upper" || name == "lower" || name == "capitalize") {
    BoundArgs a(fn, std::move(args), {});
    const std::string s = str_of(v);
    if (name == "upper") return py_upper(s);
    if (name == "lower") return py_lower(s);
    return py_capitalize(s);
  }
  if (name == "title") {
    BoundArgs a(fn, std::move(args), {});
    // jinja2 capitalises each word, words being split at whitespace and -([{<.
    std::string out;
    bool at_word_start = true;
    for (char32_t c : utf8_decode(str_of(v))) {
      const bool separator = is_python_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
      std::string one;
      utf8_append(one, c);
      if (separator) {
        out += one;
        at_word_start = true;
      } else {
        out += at_word_start ? py_upper(one) : py_lower(one);
        at_word_start = false;
      }
    }
    return out;
  }
  if (name == "replace") {
    BoundArgs a(fn, std::move(args), {"old", "new", "count"});
    const Value count = a.get_or(2, Value(None{}));
    std::string out = py_replace(str_of(v), str_of(a.required(0)), str_of(a.required(1)),
                                 count.is_none() ? -1 : int_arg(count, "count"));
    in.check_size(out.size());
    return out;
  }
  if (name == "join") {
    BoundArgs a(fn, std::move(args), {"d", "attribute"});
    const std::string sep = str_of(a.get_or(0, Value("")));
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v)) {
      in.charge();
      if (!first) out += sep;
      first = false;
      out += str_of(attribute_arg(a.get(1), item));
      in.check_size(out.size());
    }
    return out;
  }
  if (name == "first" || name == "last") {
    BoundArgs a(fn, std::move(args), {});
    if (v.is_list()) {
      if (v.as_list().empty()) return Undefined{"No " + fn + " item, sequence was empty."};
      return name == "first" ? v.as_list().front() : v.as_list().back();
    }
    if (v.is_iterator()) {
      // first() takes one item with next(); last() needs reversed(), which a
      // generator does not support.
      if (name == "last") throw RenderError("'generator' object is not reversible");
      IteratorState& it = v.as_iterator();
      if (it.position >= it.items.size()) return Undefined{"No first item, sequence was empty."};
      return it.items[it.position++];
    }
    const List items = iterate(v);
    if (items.empty()) return Undefined{"No " + fn + " item, sequence was empty."};
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") {
    BoundArgs a(fn, std::move(args), {});
    return iterate(v);
  }
  if (name == "items") {
    BoundArgs a(fn, std::move(args), {});
    if (v.is_undefined()) return Value::iterator({});
    if (!v.is_dict()) throw RenderError("Can only get item pairs from a mapping.");
    List out;
    for (const auto& [k, item] : v.as_dict().entries()) out.push_back(Value::tuple(List{Value(k), item}));
    return Value::iterator(std::move(out));
  }
  if (name == "dictsort") {
    BoundArgs a(fn, std::move(args), {"case_sensitive", "by", "reverse"});
    if (!v.is_dict()) throw RenderError("dictsort expects a mapping");
    const bool case_sensitive = truthy(a.get_or(0, Value(false)));
    const std::string by = str_of(a.get_or(1, Value("key")));
    if (by != "key" && by != "value") throw RenderError("You can only sort by either \"key\" or \"value\"");
    List pairs;
    for (const auto& [k, item] : v.as_dict().entries()) pairs.push_back(Value::tuple(List{Value(k), item}));
    const Value index(static_cast<std::int64_t>(by == "key" ? 0 : 1));
    return sorted_list(in, std::move(pairs), truthy(a.get_or(2, Value(false))), case_sensitive, &index);
  }
  if (name == "sort") {
    BoundArgs a(fn, std::move(args), {"reverse", "case_sensitive", "attribute"});
    return sorted_list(in, iterate(v), truthy(a.get_or(0, Value(false))), truthy(a.get_or(1, Value(false))), a.get(2));
  }
  if (name == "unique") {
    BoundArgs a(fn, std::move(args), {"case_sensitive", "attribute"});
    const bool case_sensitive = truthy(a.get_or(0, Value(false)));
    List out;
    List seen;
    for (const Value& item : iterate(v)) {
      in.charge(1 + static_cast<std::int64_t>(seen.size()));
      const Value key = case_key(attribute_arg(a.get(1), item), case_sensitive);
      if ((key.is_list() && !key.is_tuple()) || key.is_dict()) {
        throw RenderError("unhashable type: '" + type_name(key) + "'");
      }
      if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) continue;
      seen.push_back(key);
      out.push_back(item);
    }
    return Value::iterator(std::move(out));
  }
  if (name == "reverse") {
    BoundArgs a(fn, std::move(args), {});
    if (v.is_string()) {
      std::vector<char32_t> cps = utf8_decode(v.as_string());
      std::reverse(cps.begin(), cps.end());
      return utf8_encode(cps, 0, cps.size());
    }
    // reversed() of a list or dict is an iterator; a generator is not reversible,
    // so jinja2 falls back to a reversed list.
    const bool was_iterator = v.is_iterator();
    List items = iterate(v);
    std::reverse(items.begin(), items.end());
    return was_iterator ? Value(std::move(items)) : Value::iterator(std::move(items));
  }
  if (name == "abs") {
    BoundArgs a(fn, std::move(args), {});
    if (v.is_int()) {
      if (v.as_int() == INT64_MIN) throw RenderError("integer overflow in abs");
      return std::abs(v.as_int());
    }
    if (v.is_bool()) return static_cast<std::int64_t>(v.as_bool());
    return std::fabs(to_double(v));
  }
  if (name == "round") {
    BoundArgs a(fn, std::move(args), {"precision", "method"});
    const std::int64_t precision = int_arg(a.get_or(0, Value(0)), "precision");
    const std::string method = str_of(a.get_or(1, Value("common")));
    const double x = to_double(v);
    if (method == "common") {
      if (v.is_int() || v.is_bool()) return v.is_bool() ? Value(static_cast<std::int64_t>(v.as_bool())) : v;
      return py_round(x, precision);
    }
    if (method != "floor" && method != "ceil") throw RenderError("method must be common, ceil or floor");
    const double scale = std::pow(10.0, static_cast<double>(precision));
    return (method == "floor" ? std::floor(x * scale) : std::ceil(x * scale)) / scale;
  }
  if (name == "int") {
    BoundArgs a(fn, std::move(args), {"default", "base"});
    return filter_int(v, a.get_or(0, Value(0)), int_arg(a.get_or(1, Value(10)), "base"));
  }
  if (name == "float") {
    BoundArgs a(fn, std::move(args), {"default"});
    return filter_float(v, a.get_or(0, Value(0.0)));
  }
  if (name == "sum") {
    BoundArgs a(fn, std::move(args), {"attribute", "start"});
    Value total = a.get_or(1, Value(0));
    for (const Value& item : iterate(v)) {
      in.charge();
      const Value x = attribute_arg(a.get(0), item);
      if (total.is_float() || x.is_float()) {
        total = to_double(total) + to_double(x);
      } else {
        const std::int64_t t = total.is_bool() ? total.as_bool() : total.as_int();
        if (!x.is_int() && !x.is_bool()) to_double(x);
        const std::int64_t y = x.is_bool() ? x.as_bool() : x.as_int();
        std::int64_t r = 0;
        if (__builtin_add_overflow(t, y, &r)) throw RenderError("integer overflow in sum");
        total = r;
      }
    }
    return total;
  }
  if (name == "max" || name == "min") return min_max(v, name == "max", std::move(args));
  if (name == "attr") {
    BoundArgs a(fn, std::move(args), {"name"});
    if (v.is_undefined()) fail_undefined(v);
    return get_attribute(v, str_of(a.required(0)));
  }
  if (name == "escape" || name == "e" || name == "forceescape") {
    BoundArgs a(fn, std::move(args), {});
    return html_escape(str_of(v));
  }
  if (name == "indent") {
    BoundArgs a(fn, std::move(args), {"width", "first", "blank"});
    if (v.is_undefined()) fail_undefined(v);
    // jinja2 appends "\n" to the value, which only works on strings.
    if (!v.is_string()) throw RenderError("indent expects a string, got '" + type_name(v) + "'");
    std::string out = filter_indent(v.as_string(), a.get_or(0, Value(4)), truthy(a.get_or(1, Value(false))),
                                    truthy(a.get_or(2, Value(false))));
    in.check_size(out.size());
    return out;
  }
  if (name == "wordcount") {
    BoundArgs a(fn, std::move(args), {});
    return wordcount(str_of(v));
  }
  if (name == "center") {
    BoundArgs a(fn, std::move(args), {"width"});
    const std::string s = str_of(v);
    const auto len = static_cast<std::int64_t>(utf8_length(s));
    const std::int64_t width = int_arg(a.get_or(0, Value(80)), "width");
    if (len >= width) return s;
    in.check_size(static_cast<std::size_t>(width));
    // Python's str.center puts the odd extra space on the left when the padding
    // count is odd and the width is odd... exactly: left = pad/2 + (pad & width & 1).
    const std::int64_t pad = width - len;
    const std::int64_t left = pad / 2 + (pad & width & 1);
    return std::string(static_cast<std::size_t>(left), ' ') + s +
           std::string(static_cast<std::size_t>(pad - left), ' ');
  }
  if (name == "batch") {
    BoundArgs a(fn, std::move(args), {"linecount", "fill_with"});
    const std::int64_t size = int_arg(a.required(0), "linecount");
    if (size <= 0) throw RenderError("batch size must be positive");
    List out;
    List current;
    for (const Value& item : iterate(v)) {
      current.push_back(item);
      if (static_cast<std::int64_t>(current.size()) == size) {
        out.emplace_back(std::move(current));
        current = {};
      }
    }
    if (!current.empty()) {
      if (const Value* fill = a.get(1); fill != nullptr && !fill->is_none()) {
        while (static_cast<std::int64_t>(current.size()) < size) current.push_back(*fill);
      }
      out.emplace_back(std::move(current));
    }
    return Value::iterator(std::move(out));
  }
  if (name == "format") {
    // jinja2: soft_str(value) % (kwargs or args).
    if (!args.positional.empty() && !args.keyword.empty()) {
      throw RenderError("can't handle positional and keyword arguments at the same time");
    }
    Value operands;
    if (!args.keyword.empty()) {
      Dict d;
      for (auto& [k, item] : args.keyword) d.set(k, std::move(item));
      operands = Value(std::move(d));
    } else {
      operands = Value::tuple(std::move(args.positional));
    }
    std::string out = percent_format(str_of(v), operands);
    in.check_size(out.size());
    return out;
  }
  if (name == "truncate") {
    BoundArgs a(fn, std::move(args), {"length", "killwords", "end", "leeway"});
    const std::string s = str_of(v);
    const std::int64_t length = int_arg(a.get_or(0, Value(255)), "length");
    const std::int64_t leeway = int_arg(a.get_or(3, Value(5)), "leeway");
    const std::string end = str_of(a.get_or(2, Value("...")));
    const std::vector<char32_t> cps = utf8_decode(s);
    if (static_cast<std::int64_t>(cps.size()) <= length + leeway) return s;
    const auto keep = static_cast<std::size_t>(std::max<std::int64_t>(0, length - static_cast<std::int64_t>(utf8_length(end))));
    std::string head = utf8_encode(cps, 0, std::min(keep, cps.size()));
    if (truthy(a.get_or(1, Value(false)))) return head + end;
    const std::size_t space = head.rfind(' ');
    if (space != std::string::npos) head = head.substr(0, space);
    return head + end;
  }
  throw RenderError("no filter named '" + fn + "'");
}

}  // namespace sluice::jinja
