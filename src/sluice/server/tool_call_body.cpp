#include "sluice/server/tool_call_body.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>

namespace sluice::server {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kSpace = " \n\t\r";
constexpr std::string_view kFunctionOpen = "<function=";
constexpr std::string_view kFunctionClose = "</function>";
constexpr std::string_view kParameterOpen = "<parameter=";
constexpr std::string_view kParameterClose = "</parameter>";

std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(kSpace) - first + 1);
}

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

// The JSON schema of `function`'s parameter `parameter` in the request's tools
// (null when the tool or the parameter is not declared). Like vLLM, parameters
// without "properties" are read as the properties themselves.
const Json* parameter_schema(const Json& tools, std::string_view function, std::string_view parameter) {
  if (!tools.is_array()) return nullptr;
  for (const Json& tool : tools) {
    if (!tool.is_object()) continue;
    const auto fn = tool.find("function");
    if (fn == tool.end() || !fn->is_object()) continue;
    const auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || name->get<std::string>() != function) continue;
    const auto params = fn->find("parameters");
    if (params == fn->end() || !params->is_object()) return nullptr;
    const auto properties = params->find("properties");
    const Json& declared = properties != params->end() && properties->is_object() ? *properties : *params;
    const auto schema = declared.find(std::string(parameter));
    return schema == declared.end() ? nullptr : &*schema;
  }
  return nullptr;
}

// The schema's type, lower case; "string" when it names none. A list of types
// ("integer", "null") is read as its first type that is not "null".
std::string schema_type(const Json* schema) {
  if (!schema || !schema->is_object()) return "string";
  const auto type = schema->find("type");
  if (type == schema->end()) return "string";
  if (type->is_string()) return lower(type->get<std::string>());
  if (type->is_array())
    for (const Json& t : *type)
      if (t.is_string() && t.get<std::string>() != "null") return lower(t.get<std::string>());
  return "string";
}

bool starts_with_any(std::string_view text, std::initializer_list<std::string_view> prefixes) {
  return std::any_of(prefixes.begin(), prefixes.end(), [&](std::string_view p) { return text.starts_with(p); });
}

// The value as its schema types it; the raw string when it is not one.
Json typed_value(const std::string& raw, const Json* schema) {
  const std::string type = schema_type(schema);
  if (type == "string" || type == "str" || type == "text" || type == "varchar" || type == "char" || type == "enum")
    return raw;
  if (lower(trim(raw)) == "null") return nullptr;
  if (type == "boolean" || type == "bool" || type == "binary") {
    const std::string word = lower(trim(raw));
    if (word == "true" || word == "false") return word == "true";
    return raw;
  }
  const Json parsed = Json::parse(raw, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return raw;
  if (starts_with_any(type, {"int", "uint", "long", "short", "unsigned"}))
    return parsed.is_number_integer() ? parsed : Json(raw);
  if (starts_with_any(type, {"num", "float", "double"})) {
    if (!parsed.is_number()) return raw;
    // An integral number is written as an integer (5.0 -> 5), as vLLM does.
    if (parsed.is_number_float()) {
      const double value = parsed.get<double>();
      if (std::trunc(value) == value && std::abs(value) < 9.0e15) return static_cast<std::int64_t>(value);
    }
    return parsed;
  }
  if (starts_with_any(type, {"object", "dict"})) return parsed.is_object() ? parsed : Json(raw);
  if (starts_with_any(type, {"array", "arr", "list"})) return parsed.is_array() ? parsed : Json(raw);
  return parsed;  // a type it does not know: the JSON it is
}

}  // namespace

std::optional<ToolCallBody> json_tool_call(std::string_view text, bool arguments_required) {
  const Json call = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!call.is_object()) return std::nullopt;
  const auto name = call.find("name");
  if (name == call.end() || !name->is_string()) return std::nullopt;
  ToolCallBody body{.name = name->get<std::string>(), .arguments = "{}"};
  if (auto arguments = call.find("arguments"); arguments != call.end()) {
    body.arguments = arguments->is_string() ? arguments->get<std::string>() : arguments->dump();
  } else if (auto parameters = call.find("parameters"); parameters != call.end()) {
    body.arguments = parameters->dump();
  } else if (arguments_required) {
    return std::nullopt;
  }
  return body;
}

std::optional<ToolCallBody> xml_tool_call(std::string_view text, const nlohmann::ordered_json& tools) {
  std::string_view rest = trim(text);
  if (!rest.starts_with(kFunctionOpen)) return std::nullopt;
  rest.remove_prefix(kFunctionOpen.size());
  const std::size_t name_end = rest.find('>');
  if (name_end == std::string_view::npos) return std::nullopt;
  const std::string_view name = trim(rest.substr(0, name_end));
  if (name.empty() || name.find_first_of("<\n") != std::string_view::npos) return std::nullopt;
  rest.remove_prefix(name_end + 1);

  Json arguments = Json::object();
  for (;;) {
    rest = trim(rest);
    // </function> may be missing at the very end (vLLM reads such calls too).
    if (rest.empty()) break;
    if (rest.starts_with(kFunctionClose)) {
      if (!trim(rest.substr(kFunctionClose.size())).empty()) return std::nullopt;  // one function per call
      break;
    }
    if (!rest.starts_with(kParameterOpen)) return std::nullopt;
    rest.remove_prefix(kParameterOpen.size());
    const std::size_t parameter_end = rest.find('>');
    const std::size_t value_end = rest.find(kParameterClose);
    if (parameter_end == std::string_view::npos || value_end == std::string_view::npos || value_end < parameter_end)
      return std::nullopt;
    const std::string_view parameter = trim(rest.substr(0, parameter_end));
    if (parameter.empty()) return std::nullopt;
    std::string_view value = rest.substr(parameter_end + 1, value_end - parameter_end - 1);
    if (value.starts_with('\n')) value.remove_prefix(1);
    if (value.ends_with('\n')) value.remove_suffix(1);
    arguments[std::string(parameter)] = typed_value(std::string(value), parameter_schema(tools, name, parameter));
    rest.remove_prefix(value_end + kParameterClose.size());
  }
  return ToolCallBody{.name = std::string(name), .arguments = arguments.dump()};
}

}  // namespace sluice::server
