#include "sluice/structured/json_acceptor.h"

namespace sluice::structured {
namespace {


constexpr const char* kTrue = "true";
constexpr const char* kFalse = "false";
constexpr const char* kNull = "null";

}  // namespace

bool JsonAcceptor::feed(std::uint8_t byte) {
  JsonAcceptor next = *this;
  if (!next.step(byte)) return false;
  *this = next;
  return true;
}

bool JsonAcceptor::feed(std::string_view bytes) {
  for (char c : bytes)
    if (!feed(static_cast<std::uint8_t>(c))) return false;
  return true;
}

bool JsonAcceptor::is_complete() const {
  if (mode_ == Mode::kDone) return true;
  // A bare number at the top level has no closing byte: it is complete
  // whenever it could end.
  return mode_ == Mode::kNumber && depth_ == 0 && number_.can_end();
}

bool JsonAcceptor::step(std::uint8_t byte) {
  switch (mode_) {
    case Mode::kString:
      return feed_string(byte);
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
      if (static_cast<char>(byte) != literal_[literal_pos_]) return false;
      if (literal_[++literal_pos_] == '\0') end_value();
      return true;
    case Mode::kDone:
      return false;
    default:
      return feed_structural(byte);
  }
}

bool JsonAcceptor::feed_whitespace() {
  if (whitespace_run_ >= kMaxWhitespaceRun) return false;
  ++whitespace_run_;
  return true;
}

bool JsonAcceptor::feed_structural(std::uint8_t byte) {
  if (is_json_whitespace(byte)) return feed_whitespace();
  whitespace_run_ = 0;
  switch (mode_) {
    case Mode::kStart:
      if (top_level_object_ && byte != '{') return false;
      return begin_value(byte);
    case Mode::kValue:
      return begin_value(byte);
    case Mode::kArrayFirst:
      if (byte == ']') {
        --depth_;
        end_value();
        return true;
      }
      return begin_value(byte);
    case Mode::kObjectFirst:
    case Mode::kObjectKey:
      if (byte == '}' && mode_ == Mode::kObjectFirst) {
        --depth_;
        end_value();
        return true;
      }
      if (byte != '"') return false;
      mode_ = Mode::kString;
      in_key_ = true;
      return true;
    case Mode::kColon:
      if (byte != ':') return false;
      mode_ = Mode::kValue;
      return true;
    case Mode::kAfterValue: {
      const std::uint8_t open = stack_[depth_ - 1];
      if (byte == ',') {
        mode_ = open == '{' ? Mode::kObjectKey : Mode::kValue;
        return true;
      }
      if ((open == '{' && byte == '}') || (open == '[' && byte == ']')) {
        --depth_;
        end_value();
        return true;
      }
      return false;
    }
    default:
      return false;
  }
}

bool JsonAcceptor::begin_value(std::uint8_t byte) {
  switch (byte) {
    case '{':
      if (!push('{')) return false;
      mode_ = Mode::kObjectFirst;
      return true;
    case '[':
      if (!push('[')) return false;
      mode_ = Mode::kArrayFirst;
      return true;
    case '"':
      mode_ = Mode::kString;
      in_key_ = false;
      return true;
    case 't':
    case 'f':
    case 'n':
      literal_ = byte == 't' ? kTrue : byte == 'f' ? kFalse : kNull;
      literal_pos_ = 1;
      mode_ = Mode::kLiteral;
      return true;
    default:
      if (byte != '-' && !is_json_digit(byte)) return false;
      mode_ = Mode::kNumber;
      number_.begin(byte);
      return true;
  }
}

bool JsonAcceptor::push(std::uint8_t bracket) {
  if (depth_ >= kMaxDepth) return false;
  stack_[depth_++] = bracket;
  return true;
}

void JsonAcceptor::end_value() {
  mode_ = depth_ == 0 ? Mode::kDone : Mode::kAfterValue;
}

// Strings: any UTF-8 character but '"', '\' and controls below 0x20, with the
// multi-byte forms checked as RFC 3629 does (no overlongs, no surrogates,
// nothing past U+10FFFF), so the output always decodes.
bool JsonAcceptor::feed_string(std::uint8_t byte) {
  if (utf8_.mid_character()) return utf8_.feed(byte);
  if (byte == '"') {
    if (in_key_) {
      mode_ = Mode::kColon;
      in_key_ = false;
    } else {
      end_value();
    }
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

}  // namespace sluice::structured
