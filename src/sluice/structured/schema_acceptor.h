// SchemaAcceptor: a byte-at-a-time recognizer of JSON text valid against a
// compiled JsonSchema, the state machine behind `response_format: {"type":
// "json_schema"}`. feed() says whether a byte keeps the output a prefix of
// some document the schema accepts: the type decides a value's first byte,
// object keys come from `properties` (any order, each once; others only when
// additional properties are allowed), `required` keys are all there before
// '}', arrays keep to minItems/maxItems, enum values and keys are matched as
// prefixes of the allowed spellings. A copyable value type like JsonAcceptor
// (the token-mask search copies it at every trie branch), with the same
// runaway limits: nesting deeper than kMaxDepth and whitespace runs longer
// than kMaxWhitespaceRun are refused.
//
// The schema is borrowed: whoever holds the acceptor keeps it alive.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "sluice/structured/json_lexemes.h"
#include "sluice/structured/json_schema.h"

namespace sluice::structured {

class SchemaAcceptor {
 public:
  static constexpr int kMaxDepth = 32;
  static constexpr int kMaxWhitespaceRun = 64;

  explicit SchemaAcceptor(const JsonSchema& schema) : schema_(&schema), value_node_(schema.root) {}
  // Copies only the open frames: the trie walk copies the state at every
  // node, and the whole stack would be most of the cost (~4x in strings).
  SchemaAcceptor(const SchemaAcceptor& other) { copy_from(other); }
  SchemaAcceptor& operator=(const SchemaAcceptor& other) {
    copy_from(other);
    return *this;
  }

  // Consumes one byte; false (and the state unchanged) if no valid document
  // starts with what was accepted followed by this byte.
  bool feed(std::uint8_t byte);
  // All bytes, or false at the first refused one (the state is then partially
  // advanced: feed a copy when probing).
  bool feed(std::string_view bytes);
  // feed() without the rollback: on false the state is spoiled. For callers
  // that probe a copy they throw away on failure (the trie walk).
  bool feed_or_spoil(std::uint8_t byte) { return step(byte); }
  // The document is finished: nothing more may follow.
  bool is_complete() const { return mode_ == Mode::kDone; }
  // The output may end here: complete, or a top-level number (or numeric enum
  // value) that could also go on ("12" of [12, 123]).
  bool can_end() const;
  // Inside a string whose content is free (a string value, or an additional
  // key that no longer matches a declared name) with nothing half done: any
  // whole UTF-8 text without '"', '\\' or control bytes continues it.
  bool in_plain_string() const {
    return mode_ == Mode::kString && !utf8_.mid_character() && (!in_key_ || (key_may_be_additional_ && candidates_ == 0));
  }

 private:
  enum class Mode : std::uint8_t {
    kStart,          // before the top-level value
    kValue,          // after ':' or ',' in an array: a value of value_node_ must come
    kArrayFirst,     // after '[': a value or ']'
    kObjectFirst,    // after '{': a key or '}'
    kObjectKey,      // after ',' in an object: a key
    kColon,          // after a key
    kAfterValue,     // in a container after a value: ',' or the closing bracket
    kString,         // inside a string (key when in_key_)
    kEscape,         // in an escape (escape_)
    kNumber,         // inside a number (number_)
    kLiteral,        // inside an enum value, true/false or null: literal_candidates_
    kDone,
  };

  // One open container. Trivial on purpose: frames past depth_ stay unset.
  struct Frame {
    std::uint64_t seen_or_count;  // object: bit i = properties[i] seen; array: items so far
    std::uint16_t node;
    bool is_object;
  };

  void copy_from(const SchemaAcceptor& other);

  bool step(std::uint8_t byte);
  bool feed_structural(std::uint8_t byte);
  bool begin_value(std::uint8_t byte);
  bool begin_key();
  bool feed_key(std::uint8_t byte);
  bool feed_string(std::uint8_t byte);
  bool begin_literal(std::uint16_t first, std::uint16_t count, std::uint8_t byte);
  bool feed_literal(std::uint8_t byte);
  bool literal_can_end() const;
  bool literal_can_go_on() const;
  void end_value();
  bool close_container();
  bool push(std::uint16_t node, bool is_object);
  bool key_can_come() const;  // another key fits in the innermost object
  const JsonSchema::Node& node(std::uint16_t index) const { return schema_->nodes[index]; }

  const JsonSchema* schema_;
  Mode mode_ = Mode::kStart;
  NumberLexer number_;
  bool in_key_ = false;
  bool key_may_be_additional_ = false;
  std::uint8_t depth_ = 0;
  std::uint8_t whitespace_run_ = 0;
  EscapeLexer escape_;
  sluice::Utf8Checker utf8_;  // inside strings and keys
  std::uint16_t value_node_ = 0;          // the schema of the value to come (kStart, kValue)
  std::uint16_t literal_first_ = 0;       // kLiteral: candidates are literals[first + i]
  std::uint32_t match_pos_ = 0;           // bytes of the key / literal matched so far
  std::uint64_t candidates_ = 0;          // key: property bits; literal: literal bits still matching
  std::array<Frame, kMaxDepth> stack_;    // [depth_] open containers, innermost last; must stay the last member
};

inline void SchemaAcceptor::copy_from(const SchemaAcceptor& other) {
  static_assert(std::is_standard_layout_v<SchemaAcceptor> && std::is_trivially_copyable_v<Frame>);
  // Every member before stack_, then the open frames.
  const std::size_t bytes = offsetof(SchemaAcceptor, stack_) + other.depth_ * sizeof(Frame);
  std::memcpy(static_cast<void*>(this), static_cast<const void*>(&other), bytes);
}

}  // namespace sluice::structured
