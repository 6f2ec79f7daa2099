#include "sluice/api/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "sluice/api/jinja_strings.h"

namespace sluice::jinja {

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : entries_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::set(std::string key, Value value) {
  for (auto& [k, v] : entries_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  entries_.emplace_back(std::move(key), std::move(value));
}

std::string type_name(const Value& v) {
  if (v.is_undefined()) return "Undefined";
  if (v.is_none()) return "NoneType";
  if (v.is_bool()) return "bool";
  if (v.is_int()) return "int";
  if (v.is_float()) return "float";
  if (v.is_string()) return "str";
  if (v.is_list()) return "list";
  if (v.is_dict()) return "dict";
  if (v.is_namespace()) return "Namespace";
  if (v.is_loop()) return "LoopContext";
  if (v.is_iterator()) return "generator";
  return "function";
}

void fail_undefined(const Value& v) {
  const std::string& hint = v.as_undefined().hint;
  throw RenderError(hint.empty() ? "value is undefined" : hint);
}

bool truthy(const Value& v) {
  struct Visitor {
    bool operator()(const Undefined&) const { return false; }
    bool operator()(const None&) const { return false; }
    bool operator()(bool b) const { return b; }
    bool operator()(std::int64_t i) const { return i != 0; }
    bool operator()(double d) const { return d != 0.0; }
    bool operator()(const std::string& s) const { return !s.empty(); }
    bool operator()(const std::shared_ptr<const List>& l) const { return !l->empty(); }
    bool operator()(const std::shared_ptr<const Dict>& d) const { return d->size() != 0; }
    bool operator()(const std::shared_ptr<Namespace>&) const { return true; }
    bool operator()(const std::shared_ptr<const Callable>&) const { return true; }
    bool operator()(const std::shared_ptr<const LoopState>&) const { return true; }
    bool operator()(const std::shared_ptr<IteratorState>&) const { return true; }
  };
  return std::visit(Visitor{}, v.storage());
}

double to_double(const Value& v) {
  if (v.is_bool()) return v.as_bool() ? 1.0 : 0.0;
  if (v.is_int()) return static_cast<double>(v.as_int());
  if (v.is_float()) return v.as_float();
  if (v.is_undefined()) fail_undefined(v);
  throw RenderError("expected a number, got '" + type_name(v) + "'");
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) {
      auto as_i = [](const Value& x) { return x.is_bool() ? std::int64_t{x.as_bool()} : x.as_int(); };
      return as_i(a) == as_i(b);
    }
    return to_double(a) == to_double(b);
  }
  if (a.storage().index() != b.storage().index()) return false;
  if (a.is_undefined() || a.is_none()) return true;
  if (a.is_string()) return a.as_string() == b.as_string();
  if (a.is_list()) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    if (x.size() != y.size()) return false;
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (!equals(x[i], y[i])) return false;
    }
    return true;
  }
  if (a.is_dict()) {
    const Dict& x = a.as_dict();
    const Dict& y = b.as_dict();
    if (x.size() != y.size()) return false;
    for (const auto& [k, v] : x.entries()) {
      const Value* other = y.find(k);
      if (other == nullptr || !equals(v, *other)) return false;
    }
    return true;
  }
  if (a.is_namespace()) return &a.as_namespace() == &b.as_namespace();
  if (a.is_loop()) return &a.as_loop() == &b.as_loop();
  if (a.is_iterator()) return &a.as_iterator() == &b.as_iterator();
  return &a.as_callable() == &b.as_callable();
}

int compare(const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    const double x = to_double(a);
    const double y = to_double(b);
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    // Byte order of UTF-8 equals code point order, which is Python's str order.
    const int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list()) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  throw RenderError("'<' not supported between instances of '" + type_name(a) + "' and '" +
                    type_name(b) + "'");
}

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  // Shortest round-trip digits in scientific form, then laid out the way Python's
  // repr() does: positional for exponents in [-4, 16), scientific otherwise.
  const auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  const std::size_t e_pos = sci.find('e');
  std::string digits = sci.substr(0, e_pos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exponent = std::stoi(sci.substr(e_pos + 1));
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(static_cast<std::size_t>(-exponent - 1), '0') + digits;
    } else {
      const auto int_len = static_cast<std::size_t>(exponent + 1);
      if (digits.size() <= int_len) {
        out += digits + std::string(int_len - digits.size(), '0') + ".0";
      } else {
        out += digits.substr(0, int_len) + "." + digits.substr(int_len);
      }
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exp_buf;
}

namespace {

// str.isprintable() for repr(): control, format, separator (other than ' '),
// surrogate and private-use characters are escaped. Covers the ranges chat text
// meets; unassigned code points are treated as printable.
bool is_printable_for_repr(char32_t cp) {
  if (cp < 0x20 || cp == 0x7F) return false;
  if (cp >= 0x80 && cp < 0xA0) return false;
  if (cp == 0xA0 || cp == 0xAD) return false;
  if (cp >= 0x600 && cp <= 0x605) return false;
  if (cp == 0x61C || cp == 0x6DD || cp == 0x70F || cp == 0x180E || cp == 0x1680) return false;
  if (cp >= 0x2000 && cp <= 0x200F) return false;
  if (cp >= 0x2028 && cp <= 0x202F) return false;
  if (cp >= 0x205F && cp <= 0x206F) return false;
  if (cp == 0x3000 || cp == 0xFEFF) return false;
  if (cp >= 0xD800 && cp <= 0xF8FF) return false;  // surrogates (incl. escaped bytes), private use
  if (cp >= 0xFFF9 && cp <= 0xFFFB) return false;
  if (cp >= 0xE0000 && cp <= 0xE007F) return false;  // tag characters
  if (cp >= 0xF0000) return false;                    // supplementary private use
  return true;
}

void append_hex(std::string& out, const char* prefix, unsigned value, int width) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%s%0*x", prefix, width, value);
  out += buf;
}

}  // namespace

std::string python_string_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t cp : utf8_decode(s)) {
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (is_printable_for_repr(cp)) {
      utf8_append(out, cp);
    } else if (cp < 0x100 || (cp >= 0xDC80 && cp <= 0xDCFF)) {  // escaped raw byte → \xNN
      append_hex(out, "\\x", cp >= 0xDC80 ? cp - 0xDC00 : cp, 2);
    } else if (cp < 0x10000) {
      append_hex(out, "\\u", cp, 4);
    } else {
      append_hex(out, "\\U", cp, 8);
    }
  }
  out += quote;
  return out;
}

std::string repr(const Value& v) {
  if (v.is_string()) return python_string_repr(v.as_string());
  if (v.is_undefined()) return "Undefined";
  if (v.is_list()) {
    std::string out = v.is_tuple() ? "(" : "[";
    bool first = true;
    for (const Value& item : v.as_list()) {
      if (!first) out += ", ";
      first = false;
      out += repr(item);
    }
    if (v.is_tuple() && v.as_list().size() == 1) out += ",";
    return out + (v.is_tuple() ? ")" : "]");
  }
  if (v.is_dict()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, item] : v.as_dict().entries()) {
      if (!first) out += ", ";
      first = false;
      out += python_string_repr(k) + ": " + repr(item);
    }
    return out + "}";
  }
  return to_str(v);
}

std::string to_str(const Value& v) {
  if (v.is_undefined()) return "";
  if (v.is_none()) return "None";
  if (v.is_bool()) return v.as_bool() ? "True" : "False";
  if (v.is_int()) return std::to_string(v.as_int());
  if (v.is_float()) return python_float_repr(v.as_float());
  if (v.is_string()) return v.as_string();
  if (v.is_list() || v.is_dict()) return repr(v);
  // Python prints these with a memory address; output that depends on one would
  // never match a reference, so refuse instead.
  throw RenderError("cannot convert a " + type_name(v) + " to a string");
}

namespace {

void json_escape(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (char32_t cp : utf8_decode(s)) {
    switch (cp) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (cp < 0x20) {
          append_hex(out, "\\u", cp, 4);
        } else if (ensure_ascii && cp >= 0x80) {
          if (cp >= 0x10000) {
            const char32_t v = cp - 0x10000;
            append_hex(out, "\\u", 0xD800 + (v >> 10), 4);
            append_hex(out, "\\u", 0xDC00 + (v & 0x3FF), 4);
          } else {
            append_hex(out, "\\u", cp, 4);
          }
        } else {
          utf8_append(out, cp);
        }
    }
  }
  out += '"';
}

void json_dump_into(std::string& out, const Value& v, const JsonDumpOptions& o, int depth) {
  if (depth > 512) throw RenderError("tojson: value nested too deeply");
  const bool pretty = o.indent >= 0 || !o.indent_string.empty();
  auto newline = [&](int level) {
    out += '\n';
    for (int i = 0; i < level; ++i) {
      if (!o.indent_string.empty()) {
        out += o.indent_string;
      } else {
        out.append(static_cast<std::size_t>(o.indent), ' ');
      }
    }
  };
  if (v.is_none()) {
    out += "null";
  } else if (v.is_bool()) {
    out += v.as_bool() ? "true" : "false";
  } else if (v.is_int()) {
    out += std::to_string(v.as_int());
  } else if (v.is_float()) {
    const double d = v.as_float();
    if (std::isnan(d)) {
      out += "NaN";
    } else if (std::isinf(d)) {
      out += d > 0 ? "Infinity" : "-Infinity";
    } else {
      out += python_float_repr(d);
    }
  } else if (v.is_string()) {
    json_escape(out, v.as_string(), o.ensure_ascii);
  } else if (v.is_list()) {
    const List& items = v.as_list();
    if (items.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += o.item_separator;
      if (pretty) newline(depth + 1);
      json_dump_into(out, items[i], o, depth + 1);
    }
    if (pretty) newline(depth);
    out += ']';
  } else if (v.is_dict()) {
    std::vector<const std::pair<std::string, Value>*> entries;
    for (const auto& e : v.as_dict().entries()) entries.push_back(&e);
    if (entries.empty()) {
      out += "{}";
      return;
    }
    if (o.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(),
                       [](const auto* a, const auto* b) { return a->first < b->first; });
    }
    out += '{';
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (i > 0) out += o.item_separator;
      if (pretty) newline(depth + 1);
      json_escape(out, entries[i]->first, o.ensure_ascii);
      out += o.key_separator;
      json_dump_into(out, entries[i]->second, o, depth + 1);
    }
    if (pretty) newline(depth);
    out += '}';
  } else {
    throw RenderError("Object of type " + type_name(v) + " is not JSON serializable");
  }
}

}  // namespace

std::string json_dumps(const Value& v, const JsonDumpOptions& options) {
  std::string out;
  json_dump_into(out, v, options, 0);
  return out;
}

List iterate(const Value& v) {
  if (v.is_list()) return v.as_list();
  if (v.is_iterator()) {
    IteratorState& it = v.as_iterator();
    List rest(it.items.begin() + static_cast<std::ptrdiff_t>(it.position), it.items.end());
    it.position = it.items.size();
    return rest;
  }
  if (v.is_undefined()) return {};
  if (v.is_dict()) {
    List keys;
    for (const auto& [k, item] : v.as_dict().entries()) keys.emplace_back(k);
    return keys;
  }
  if (v.is_string()) {
    List chars;
    for (char32_t cp : utf8_decode(v.as_string())) {
      std::string one;
      utf8_append(one, cp);
      chars.emplace_back(std::move(one));
    }
    return chars;
  }
  throw RenderError("'" + type_name(v) + "' object is not iterable");
}

}  // namespace sluice::jinja
