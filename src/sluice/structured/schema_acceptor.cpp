#include "sluice/structured/schema_acceptor.h"

#include <bit>

namespace sluice::structured {
namespace {

std::uint64_t low_bits(std::size_t n) { return n >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << n) - 1; }

}  // namespace

bool SchemaAcceptor::feed(std::uint8_t byte) {
  SchemaAcceptor next = *this;
  if (!next.step(byte)) return false;
  *this = next;
  return true;
}

bool SchemaAcceptor::feed(std::string_view bytes) {
  for (char c : bytes)
    if (!feed(static_cast<std::uint8_t>(c))) return false;
  return true;
}

bool SchemaAcceptor::can_end() const {
  if (mode_ == Mode::kDone) return true;
  if (depth_ != 0) return false;
  return (mode_ == Mode::kNumber && number_.can_end()) || (mode_ == Mode::kLiteral && literal_can_end());
}

bool SchemaAcceptor::step(std::uint8_t byte) {
  switch (mode_) {
    case Mode::kString:
      return in_key_ ? feed_key(byte) : feed_string(byte);
    case Mode::kEscape:
      if (!escape_.feed(byte)) return false;
      if (escape_.done()) mode_ = Mode::kString;
      return true;
    case Mode::kNumber:
      if (number_.feed(byte)) return true;
      if (!number_.can_end()) return false;
      end_value();
      return step(byte);
    case Mode::kLiteral:
      if (feed_literal(byte)) return true;
      if (!literal_can_end()) return false;
      end_value();
      return step(byte);
    case Mode::kDone:
      return false;
    default:
      return feed_structural(byte);
  }
}

bool SchemaAcceptor::key_can_come() const {
  const Frame& frame = stack_[depth_ - 1];
  const JsonSchema::Node& n = node(frame.node);
  return n.additional != JsonSchema::Additional::kForbidden ||
         (low_bits(n.properties.size()) & ~frame.seen_or_count) != 0;
}

bool SchemaAcceptor::feed_structural(std::uint8_t byte) {
  if (is_json_whitespace(byte)) {
    if (whitespace_run_ >= kMaxWhitespaceRun) return false;
    ++whitespace_run_;
    return true;
  }
  whitespace_run_ = 0;
  switch (mode_) {
    case Mode::kStart:
    case Mode::kValue:
      return begin_value(byte);
    case Mode::kArrayFirst: {
      const JsonSchema::Node& array = node(stack_[depth_ - 1].node);
      if (byte == ']') return array.min_items == 0 && close_container();
      if (array.max_items == 0) return false;
      value_node_ = array.items_node;
      return begin_value(byte);
    }
    case Mode::kObjectFirst:
      if (byte == '}') return node(stack_[depth_ - 1].node).required_bits == 0 && close_container();
      return byte == '"' && begin_key();
    case Mode::kObjectKey:
      return byte == '"' && begin_key();
    case Mode::kColon:
      if (byte != ':') return false;
      mode_ = Mode::kValue;
      return true;
    case Mode::kAfterValue: {
      const Frame& frame = stack_[depth_ - 1];
      const JsonSchema::Node& n = node(frame.node);
      if (frame.is_object) {
        if (byte == ',' && key_can_come()) {
          mode_ = Mode::kObjectKey;
          return true;
        }
        return byte == '}' && (n.required_bits & ~frame.seen_or_count) == 0 && close_container();
      }
      if (byte == ',' && frame.seen_or_count < n.max_items) {
        value_node_ = n.items_node;
        mode_ = Mode::kValue;
        return true;
      }
      return byte == ']' && frame.seen_or_count >= n.min_items && close_container();
    }
    default:
      return false;
  }
}

bool SchemaAcceptor::begin_value(std::uint8_t byte) {
  const JsonSchema::Node& n = node(value_node_);
  if (n.has_enum) return begin_literal(n.first_literal, n.num_literals, byte);
  switch (byte) {
    case '{':
      if (!(n.types & JsonSchema::kObject) || !push(value_node_, true)) return false;
      mode_ = Mode::kObjectFirst;
      return true;
    case '[':
      if (!(n.types & JsonSchema::kArray) || !push(value_node_, false)) return false;
      mode_ = Mode::kArrayFirst;
      return true;
    case '"':
      if (!(n.types & JsonSchema::kString)) return false;
      mode_ = Mode::kString;
      in_key_ = false;
      return true;
    case 't':
    case 'f':
      return (n.types & JsonSchema::kBoolean) && begin_literal(JsonSchema::kTrueFalseLiterals, 2, byte);
    case 'n':
      return (n.types & JsonSchema::kNull) && begin_literal(JsonSchema::kNullLiteral, 1, byte);
    default:
      if (byte != '-' && !is_json_digit(byte)) return false;
      if (!(n.types & (JsonSchema::kNumber | JsonSchema::kInteger))) return false;
      mode_ = Mode::kNumber;
      number_.begin(byte, /*integer_only=*/!(n.types & JsonSchema::kNumber));
      return true;
  }
}

bool SchemaAcceptor::push(std::uint16_t index, bool is_object) {
  if (depth_ >= kMaxDepth) return false;
  stack_[depth_++] = Frame{0, index, is_object};
  return true;
}

bool SchemaAcceptor::close_container() {
  --depth_;
  end_value();
  return true;
}

void SchemaAcceptor::end_value() {
  if (depth_ == 0) {
    mode_ = Mode::kDone;
    return;
  }
  Frame& frame = stack_[depth_ - 1];
  if (!frame.is_object) ++frame.seen_or_count;
  mode_ = Mode::kAfterValue;
}

// Keys: candidates_ holds the properties whose names still match; a key that
// leaves them all is an additional property, allowed only if the schema says so.
bool SchemaAcceptor::begin_key() {
  const Frame& frame = stack_[depth_ - 1];
  const JsonSchema::Node& n = node(frame.node);
  key_may_be_additional_ = n.additional != JsonSchema::Additional::kForbidden;
  const std::uint64_t all = low_bits(n.properties.size());
  // A seen name may still begin an additional one ("a" then "ab"), but never repeat.
  candidates_ = key_may_be_additional_ ? all : all & ~frame.seen_or_count;
  if (candidates_ == 0 && !key_may_be_additional_) return false;
  match_pos_ = 0;
  mode_ = Mode::kString;
  in_key_ = true;
  return true;
}

bool SchemaAcceptor::feed_key(std::uint8_t byte) {
  Frame& frame = stack_[depth_ - 1];
  const JsonSchema::Node& n = node(frame.node);
  if (byte == '"' && !utf8_.mid_character()) {
    std::uint64_t matched = 0;
    for (std::uint64_t bits = candidates_; bits != 0; bits &= bits - 1) {
      const int i = std::countr_zero(bits);
      if (n.properties[static_cast<std::size_t>(i)].name.size() == match_pos_) matched = std::uint64_t{1} << i;
    }
    if (matched != 0) {
      if (frame.seen_or_count & matched) return false;
      frame.seen_or_count |= matched;
      value_node_ = n.properties[static_cast<std::size_t>(std::countr_zero(matched))].node;
    } else {
      if (!key_may_be_additional_) return false;
      value_node_ = n.additional == JsonSchema::Additional::kSchema ? n.additional_node : JsonSchema::kAnyNode;
    }
    in_key_ = false;
    mode_ = Mode::kColon;
    return true;
  }
  if (byte == '\\' || byte == '"' || byte < 0x20) return false;  // keys are spelled without escapes
  if ((utf8_.mid_character() || byte >= 0x80) && !utf8_.feed(byte)) return false;
  std::uint64_t next = 0;
  for (std::uint64_t bits = candidates_; bits != 0; bits &= bits - 1) {
    const int i = std::countr_zero(bits);
    const std::string& name = n.properties[static_cast<std::size_t>(i)].name;
    if (name.size() > match_pos_ && static_cast<std::uint8_t>(name[match_pos_]) == byte) next |= std::uint64_t{1} << i;
  }
  if (next == 0 && !key_may_be_additional_) return false;
  candidates_ = next;
  if (match_pos_ < UINT32_MAX) ++match_pos_;
  return true;
}

bool SchemaAcceptor::feed_string(std::uint8_t byte) {
  if (utf8_.mid_character()) return utf8_.feed(byte);
  if (byte == '"') {
    end_value();
    return true;
  }
  if (byte == '\\') {
    mode_ = Mode::kEscape;
    escape_.begin();
    return true;
  }
  if (byte < 0x20) return false;
  if (byte < 0x80) return true;
  return utf8_.feed(byte);
}

// Literals (enum values, true/false, null) are matched against their compact
// JSON spelling. One that is whole ends the value at once unless a longer
// candidate shares its prefix (12 of [12, 123]); then the next byte decides.
bool SchemaAcceptor::begin_literal(std::uint16_t first, std::uint16_t count, std::uint8_t byte) {
  literal_first_ = first;
  candidates_ = 0;
  for (std::uint16_t i = 0; i < count; ++i)
    if (static_cast<std::uint8_t>(schema_->literals[first + i][0]) == byte) candidates_ |= std::uint64_t{1} << i;
  if (candidates_ == 0) return false;
  match_pos_ = 1;
  mode_ = Mode::kLiteral;
  if (literal_can_end() && !literal_can_go_on()) end_value();
  return true;
}

bool SchemaAcceptor::feed_literal(std::uint8_t byte) {
  std::uint64_t next = 0;
  for (std::uint64_t bits = candidates_; bits != 0; bits &= bits - 1) {
    const int i = std::countr_zero(bits);
    const std::string& text = schema_->literals[literal_first_ + static_cast<std::size_t>(i)];
    if (text.size() > match_pos_ && static_cast<std::uint8_t>(text[match_pos_]) == byte) next |= std::uint64_t{1} << i;
  }
  if (next == 0) return false;
  candidates_ = next;
  ++match_pos_;
  if (literal_can_end() && !literal_can_go_on()) end_value();
  return true;
}

bool SchemaAcceptor::literal_can_end() const {
  for (std::uint64_t bits = candidates_; bits != 0; bits &= bits - 1)
    if (schema_->literals[literal_first_ + static_cast<std::size_t>(std::countr_zero(bits))].size() == match_pos_)
      return true;
  return false;
}

bool SchemaAcceptor::literal_can_go_on() const {
  for (std::uint64_t bits = candidates_; bits != 0; bits &= bits - 1)
    if (schema_->literals[literal_first_ + static_cast<std::size_t>(std::countr_zero(bits))].size() > match_pos_)
      return true;
  return false;
}

}  // namespace sluice::structured
