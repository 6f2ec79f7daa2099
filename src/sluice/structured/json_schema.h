// JsonSchema: a JSON Schema (the subset `response_format: {"type":
// "json_schema"}` supports) compiled into a flat table of nodes that
// SchemaAcceptor walks byte by byte. Compiled once per request at the API
// boundary; anything outside the subset is refused there with the keyword and
// its JSON path, so the acceptor never meets it.
//
// The subset: type (one or a list of object, array, string, number, integer,
// boolean, null), properties, required, additionalProperties (true, false,
// absent = true, or a schema), items, minItems, maxItems, enum and const
// (strings, numbers, booleans, null); title, description, $schema, $id,
// $comment, examples and default are ignored. A schema with no type accepts
// any JSON value.
//
// Deliberate narrowings of JSON Schema (the output is still always valid;
// only some valid spellings are never produced): enum/const values and
// property names are matched in their canonical compact spelling (no \u
// escapes, 1 not 1.0), keys never contain escapes, and `integer` means digits
// only (no fraction or exponent).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sluice/common/result.h"

namespace sluice::structured {

struct JsonSchema {
  // Caps that keep a request's schema (and the acceptor's state) small.
  static constexpr int kMaxNodes = 1024;
  static constexpr int kMaxDepth = 16;           // nested schemas; the acceptor allows 32 levels of JSON
  static constexpr int kMaxProperties = 64;      // per object: the acceptor tracks seen keys in a 64-bit mask
  static constexpr int kMaxEnumValues = 64;      // per enum: candidates are a 64-bit mask
  static constexpr std::size_t kMaxLiteralBytes = 256;  // one property name or enum value, as JSON text

  enum TypeBit : std::uint8_t {
    kObject = 1, kArray = 2, kString = 4, kNumber = 8, kInteger = 16, kBoolean = 32, kNull = 64,
    kAnyType = 127,
  };
  enum class Additional : std::uint8_t { kForbidden, kAny, kSchema };

  struct Property {
    std::string name;      // raw key bytes (no escapes)
    std::uint16_t node = 0;
  };
  struct Node {
    std::uint8_t types = kAnyType;                 // TypeBit set; kInteger without kNumber: digits only
    // object
    std::vector<Property> properties;              // at most kMaxProperties
    std::uint64_t required_bits = 0;               // bit i: properties[i] is required
    Additional additional = Additional::kAny;
    std::uint16_t additional_node = 0;             // kSchema
    // array
    std::uint16_t items_node = 0;                  // kAnyNode when absent
    std::uint32_t min_items = 0;
    std::uint32_t max_items = UINT32_MAX;
    // enum / const: the value is one of literals[first_literal, + num_literals), as compact JSON text
    bool has_enum = false;
    std::uint16_t first_literal = 0;
    std::uint16_t num_literals = 0;
  };

  static constexpr std::uint16_t kAnyNode = 0;   // nodes[0]: any JSON value
  // literals[0..2]: "true", "false", "null", for the boolean and null types.
  static constexpr std::uint16_t kTrueFalseLiterals = 0;
  static constexpr std::uint16_t kNullLiteral = 2;

  std::vector<Node> nodes;
  std::vector<std::string> literals;
  std::uint16_t root = 0;
};

// Compiles `schema`; the error names the first unsupported keyword or bad
// value with its JSON path from the schema root ("$.properties.a.pattern").
Result<std::shared_ptr<const JsonSchema>> compile_json_schema(const nlohmann::json& schema);

}  // namespace sluice::structured
