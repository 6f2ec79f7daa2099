#include "sluice/structured/json_schema.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string_view>

#include <fmt/format.h>

namespace sluice::structured {
namespace {

using Json = nlohmann::json;

constexpr std::array<std::string_view, 7> kIgnoredKeywords = {"title", "description", "$schema", "$id",
                                                              "$comment", "examples", "default"};
constexpr std::array<std::string_view, 10> kSupportedKeywords = {
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "enum", "const",
    "$defs"};  // $defs alone is inert; $ref (which would use it) is refused

struct TypeName {
  std::string_view name;
  std::uint8_t bits;
};
constexpr std::array<TypeName, 7> kTypeNames = {{
    {"object", JsonSchema::kObject},
    {"array", JsonSchema::kArray},
    {"string", JsonSchema::kString},
    {"number", JsonSchema::kNumber | JsonSchema::kInteger},
    {"integer", JsonSchema::kInteger},
    {"boolean", JsonSchema::kBoolean},
    {"null", JsonSchema::kNull},
}};

std::uint8_t type_of_value(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null: return JsonSchema::kNull;
    case Json::value_t::boolean: return JsonSchema::kBoolean;
    case Json::value_t::string: return JsonSchema::kString;
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return JsonSchema::kInteger;
    case Json::value_t::number_float: return JsonSchema::kNumber;
    default: return 0;
  }
}

class Compiler {
 public:
  JsonSchema schema;
  std::string error;

  Compiler() {
    schema.literals = {"true", "false", "null"};
    schema.nodes.emplace_back();  // kAnyNode
  }

  // Compiles `value` at `path`; the node index, or nullopt with `error` set.
  std::optional<std::uint16_t> compile(const Json& value, const std::string& path, int depth) {
    if (depth > JsonSchema::kMaxDepth) return fail(path, fmt::format("schemas nest deeper than {}", JsonSchema::kMaxDepth));
    if (value.is_boolean()) {
      if (!value.get<bool>()) return fail(path, "the schema 'false' accepts nothing");
      return JsonSchema::kAnyNode;
    }
    if (!value.is_object()) return fail(path, "a schema must be an object");
    if (static_cast<int>(schema.nodes.size()) >= JsonSchema::kMaxNodes)
      return fail(path, fmt::format("the schema has more than {} subschemas", JsonSchema::kMaxNodes));
    for (const auto& [key, unused] : value.items()) {
      const bool known = std::find(kSupportedKeywords.begin(), kSupportedKeywords.end(), key) != kSupportedKeywords.end() ||
                         std::find(kIgnoredKeywords.begin(), kIgnoredKeywords.end(), key) != kIgnoredKeywords.end();
      if (!known) return fail(path, fmt::format("unsupported keyword '{}'", key));
    }
    const auto index = static_cast<std::uint16_t>(schema.nodes.size());
    schema.nodes.emplace_back();
    JsonSchema::Node node;
    if (!compile_type(value, path, node)) return std::nullopt;
    if (!compile_enum(value, path, node)) return std::nullopt;
    if (!compile_object(value, path, depth, node)) return std::nullopt;
    if (!compile_array(value, path, depth, node)) return std::nullopt;
    schema.nodes[index] = std::move(node);
    return index;
  }

 private:
  std::nullopt_t fail(const std::string& path, std::string_view message) {
    error = fmt::format("{} at {}", message, path);
    return std::nullopt;
  }
  bool refuse(const std::string& path, std::string_view message) {
    fail(path, message);
    return false;
  }

  bool compile_type(const Json& value, const std::string& path, JsonSchema::Node& node) {
    auto it = value.find("type");
    if (it == value.end()) return true;
    auto bits_of = [&](const Json& name) -> std::optional<std::uint8_t> {
      if (name.is_string())
        for (const TypeName& t : kTypeNames)
          if (t.name == name.get<std::string>()) return t.bits;
      return std::nullopt;
    };
    node.types = 0;
    if (it->is_array()) {
      if (it->empty()) return refuse(path + ".type", "'type' must not be an empty list");
      for (const Json& name : *it) {
        auto bits = bits_of(name);
        if (!bits) return refuse(path + ".type", fmt::format("unknown type {}", name.dump()));
        node.types |= *bits;
      }
    } else {
      auto bits = bits_of(*it);
      if (!bits) return refuse(path + ".type", fmt::format("unknown type {}", it->dump()));
      node.types = *bits;
    }
    return true;
  }

  bool compile_enum(const Json& value, const std::string& path, JsonSchema::Node& node) {
    std::vector<Json> values;
    std::string where;
    if (auto it = value.find("enum"); it != value.end()) {
      where = path + ".enum";
      if (!it->is_array() || it->empty()) return refuse(where, "'enum' must be a non-empty array");
      values.assign(it->begin(), it->end());
    }
    if (auto it = value.find("const"); it != value.end()) {
      if (!values.empty()) return refuse(path, "'enum' and 'const' together are not supported");
      where = path + ".const";
      values.push_back(*it);
    }
    if (values.empty()) return true;
    if (static_cast<int>(values.size()) > JsonSchema::kMaxEnumValues)
      return refuse(where, fmt::format("more than {} enum values", JsonSchema::kMaxEnumValues));
    node.has_enum = true;
    node.first_literal = static_cast<std::uint16_t>(schema.literals.size());
    for (const Json& v : values) {
      const std::uint8_t type = type_of_value(v);
      if (type == 0) return refuse(where, "enum values must be strings, numbers, booleans or null");
      // A float with an integral value (1.0) also matches `integer`.
      const bool integral_float = v.is_number_float() && std::abs(v.get<double>()) < 0x1p53 &&
                                  v.get<double>() == std::trunc(v.get<double>());
      if (!(node.types & type) && !(integral_float && (node.types & JsonSchema::kInteger))) continue;
      // Spelled as an integer only where the schema wants one (`integer` has no fraction).
      const bool as_integer = integral_float && !(node.types & JsonSchema::kNumber);
      std::string text = as_integer ? Json(static_cast<std::int64_t>(v.get<double>())).dump() : v.dump();
      if (text.size() > JsonSchema::kMaxLiteralBytes)
        return refuse(where, fmt::format("an enum value is longer than {} bytes", JsonSchema::kMaxLiteralBytes));
      const auto begin = schema.literals.begin() + node.first_literal;
      if (std::find(begin, schema.literals.end(), text) == schema.literals.end()) schema.literals.push_back(std::move(text));
    }
    node.num_literals = static_cast<std::uint16_t>(schema.literals.size() - node.first_literal);
    if (node.num_literals == 0) return refuse(where, "no enum value has the schema's type");
    return true;
  }

  bool compile_object(const Json& value, const std::string& path, int depth, JsonSchema::Node& node) {
    if (auto it = value.find("properties"); it != value.end()) {
      if (!it->is_object()) return refuse(path + ".properties", "'properties' must be an object");
      if (static_cast<int>(it->size()) > JsonSchema::kMaxProperties)
        return refuse(path + ".properties", fmt::format("more than {} properties", JsonSchema::kMaxProperties));
      for (const auto& [name, sub] : it->items()) {
        const std::string encoded = Json(name).dump();
        if (encoded.size() != name.size() + 2)
          return refuse(path + ".properties", fmt::format("property name {} needs escaping in JSON", encoded));
        if (name.size() > JsonSchema::kMaxLiteralBytes)
          return refuse(path + ".properties", "a property name is too long");
        auto child = compile(sub, path + ".properties." + name, depth + 1);
        if (!child) return false;
        node.properties.push_back({name, *child});
      }
    }
    if (auto it = value.find("required"); it != value.end()) {
      if (!it->is_array()) return refuse(path + ".required", "'required' must be an array of names");
      for (const Json& name : *it) {
        if (!name.is_string()) return refuse(path + ".required", "'required' must be an array of names");
        auto p = std::find_if(node.properties.begin(), node.properties.end(),
                              [&](const JsonSchema::Property& prop) { return prop.name == name.get<std::string>(); });
        if (p == node.properties.end())
          return refuse(path + ".required", fmt::format("required property '{}' is not in 'properties'", name.get<std::string>()));
        node.required_bits |= std::uint64_t{1} << (p - node.properties.begin());
      }
    }
    if (auto it = value.find("additionalProperties"); it != value.end()) {
      if (it->is_boolean()) {
        node.additional = it->get<bool>() ? JsonSchema::Additional::kAny : JsonSchema::Additional::kForbidden;
      } else {
        auto child = compile(*it, path + ".additionalProperties", depth + 1);
        if (!child) return false;
        node.additional = *child == JsonSchema::kAnyNode ? JsonSchema::Additional::kAny : JsonSchema::Additional::kSchema;
        node.additional_node = *child;
      }
    }
    return true;
  }

  bool compile_array(const Json& value, const std::string& path, int depth, JsonSchema::Node& node) {
    if (auto it = value.find("items"); it != value.end()) {
      if (it->is_array()) return refuse(path + ".items", "tuple 'items' (an array of schemas) is not supported");
      auto child = compile(*it, path + ".items", depth + 1);
      if (!child) return false;
      node.items_node = *child;
    }
    for (const char* key : {"minItems", "maxItems"}) {
      auto it = value.find(key);
      if (it == value.end()) continue;
      if (!it->is_number_unsigned() || it->get<std::uint64_t>() >= UINT32_MAX)
        return refuse(path + "." + key, fmt::format("'{}' must be a non-negative integer", key));
      (std::string_view(key) == "minItems" ? node.min_items : node.max_items) = static_cast<std::uint32_t>(it->get<std::uint64_t>());
    }
    if (node.min_items > node.max_items) return refuse(path, "'minItems' is greater than 'maxItems'");
    return true;
  }
};

}  // namespace

Result<std::shared_ptr<const JsonSchema>> compile_json_schema(const nlohmann::json& schema) {
  Compiler compiler;
  auto root = compiler.compile(schema, "$", 0);
  if (!root) return Error{compiler.error};
  compiler.schema.root = *root;
  return std::shared_ptr<const JsonSchema>(std::make_shared<JsonSchema>(std::move(compiler.schema)));
}

}  // namespace sluice::structured
