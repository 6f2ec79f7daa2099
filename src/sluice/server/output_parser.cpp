#include "sluice/server/output_parser.h"

#include <algorithm>
#include <initializer_list>

#include "sluice/server/tool_call_body.h"

namespace sluice::server {
namespace {

struct Found {
  std::size_t pos = std::string::npos;
  const std::string* marker = nullptr;
};

// Earliest occurrence of any non-empty marker.
Found find_first(std::string_view text, std::initializer_list<const std::string*> markers) {
  Found found;
  for (const std::string* m : markers) {
    if (m->empty()) continue;
    const std::size_t pos = text.find(*m);
    if (pos < found.pos) found = {pos, m};
  }
  return found;
}

// Length of the longest suffix of `text` that is a proper prefix of a marker:
// those bytes cannot be released until the next piece decides.
std::size_t partial_marker_bytes(std::string_view text, std::initializer_list<const std::string*> markers) {
  std::size_t best = 0;
  for (const std::string* m : markers) {
    const std::size_t max_len = std::min(text.size(), m->empty() ? 0 : m->size() - 1);
    for (std::size_t len = max_len; len > best; --len) {
      if (text.substr(text.size() - len) == std::string_view(*m).substr(0, len)) {
        best = len;
        break;
      }
    }
  }
  return best;
}

constexpr std::string_view kSpace = " \n\t\r";

bool all_space(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; });
}

std::string trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \n\t\r");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \n\t\r");
  return std::string(text.substr(first, last - first + 1));
}

void add_tool_delta(ParsedDelta& out, ToolCallDelta delta) {
  // Argument fragments of the same call within one feed() travel together.
  if (!out.tool_calls.empty() && out.tool_calls.back().index == delta.index && delta.id.empty()) {
    out.tool_calls.back().arguments += delta.arguments;
    return;
  }
  out.tool_calls.push_back(std::move(delta));
}

}  // namespace

Result<OutputFormat> output_format_by_name(std::string_view name) {
  OutputFormat f;
  f.name = std::string(name);
  // DeepSeek markers use U+FF5C (fullwidth vertical line) and U+2581 (lower one eighth block).
  const std::string ds_section_begin = "<\uFF5Ctool\u2581calls\u2581begin\uFF5C>";
  const std::string ds_section_end = "<\uFF5Ctool\u2581calls\u2581end\uFF5C>";
  const std::string ds_call_begin = "<\uFF5Ctool\u2581call\u2581begin\uFF5C>";
  const std::string ds_call_end = "<\uFF5Ctool\u2581call\u2581end\uFF5C>";
  const std::string ds_sep = "<\uFF5Ctool\u2581sep\uFF5C>";
  if (name == "none") return f;
  if (name == "qwen3" || name == "hermes" || name == "qwen3_coder") {
    // Qwen's markers; Qwen3-Coder writes XML calls inside them, the others JSON.
    f.reasoning_begin = "<think>";
    f.reasoning_end = "</think>";
    f.tool_syntax = name == "qwen3_coder" ? ToolCallSyntax::kTaggedXml : ToolCallSyntax::kTaggedJson;
    f.call_begin = "<tool_call>";
    f.call_end = "</tool_call>";
    return f;
  }
  if (name == "llama3_json") {
    // Llama 3.x writes no reasoning block.
    f.tool_syntax = ToolCallSyntax::kBareJson;
    f.call_begin = "<|python_tag|>";
    f.call_separator = ";";
    return f;
  }
  if (name == "deepseek_r1" || name == "deepseek_v3") {
    // vLLM's deepseek_v3 tool format: function<sep>NAME\n```json\nARGS\n```<call end>
    f.reasoning_begin = "<think>";
    f.reasoning_end = "</think>";
    f.tool_syntax = ToolCallSyntax::kDeepSeek;
    f.section_begin = ds_section_begin;
    f.section_end = ds_section_end;
    f.call_begin = ds_call_begin;
    f.call_end = "\n```" + ds_call_end;
    f.header_end = "\n```json\n";
    f.name_after = ds_sep;
    return f;
  }
  if (name == "deepseek_v31") {
    // DeepSeek-V3.1: NAME<sep>ARGS<call end>
    f.reasoning_begin = "<think>";
    f.reasoning_end = "</think>";
    f.tool_syntax = ToolCallSyntax::kDeepSeek;
    f.section_begin = ds_section_begin;
    f.section_end = ds_section_end;
    f.call_begin = ds_call_begin;
    f.call_end = ds_call_end;
    f.header_end = ds_sep;
    return f;
  }
  if (name == "deepseek_v4" || name == "deepseek_v41") {
    // DeepSeek-V4's DSML (../shared/models/deepseek-v41-flash.md, §5): <｜DSML｜tool_calls>
    // [<｜DSML｜invoke name="F"> <｜DSML｜parameter ...>V</｜DSML｜parameter> </｜DSML｜invoke>]*
    // </｜DSML｜tool_calls>; V4.1 names the block `calls` and writes a space after the
    // second ｜ of every tag.
    const std::string dsml = name == "deepseek_v4" ? "\uFF5CDSML\uFF5C" : "\uFF5CDSML\uFF5C ";
    const std::string block = name == "deepseek_v4" ? "tool_calls" : "calls";
    f.reasoning_begin = "<think>";
    f.reasoning_end = "</think>";
    f.tool_syntax = ToolCallSyntax::kDsml;
    f.section_begin = "<" + dsml + block + ">";
    f.section_end = "</" + dsml + block + ">";
    f.call_begin = "<" + dsml + "invoke";
    f.call_end = "</" + dsml + "invoke>";
    f.parameter_begin = "<" + dsml + "parameter";
    f.parameter_end = "</" + dsml + "parameter>";
    return f;
  }
  return Error{"unknown output format '" + std::string(name) +
               "'; known: none, qwen3, hermes, qwen3_coder, llama3_json, deepseek_r1, deepseek_v3, deepseek_v31, "
               "deepseek_v4, deepseek_v41"};
}

OutputFormat output_format_for_model_type(std::string_view model_type) {
  if (model_type == "qwen3" || model_type == "qwen3_moe") return output_format_by_name("qwen3").value();
  if (model_type == "deepseek_v3") return output_format_by_name("deepseek_v3").value();
  if (model_type == "deepseek_v4") return output_format_by_name("deepseek_v4").value();
  return output_format_by_name("none").value();
}

OutputParser::OutputParser(OutputFormat format, Options options)
    : format_(std::move(format)), options_(std::move(options)) {
  if (options_.starts_in_reasoning && !format_.reasoning_end.empty()) state_ = State::kReasoning;
  if (format_.tool_syntax == ToolCallSyntax::kNone) options_.parse_tool_calls = false;
}

void OutputParser::feed(std::string_view text, ParsedDelta& out) {
  pending_.append(text);
  while (step(out, /*at_end=*/false)) {
  }
}

void OutputParser::finish(ParsedDelta& out) {
  while (step(out, /*at_end=*/true)) {
  }
  if (!pending_.empty()) {
    (state_ == State::kReasoning ? out.reasoning : out.content) += pending_;
    pending_.clear();
  }
}

bool OutputParser::step(ParsedDelta& out, bool at_end) {
  switch (state_) {
    case State::kContent: return step_content(out, at_end);
    case State::kReasoning: return step_reasoning(out, at_end);
    case State::kTaggedCall: return step_tagged_call(out, at_end);
    case State::kSection: return step_section(out, at_end);
    case State::kCallHeader: return step_call_header(out, at_end);
    case State::kCallArguments: return step_call_arguments(out, at_end);
    case State::kJsonCall: return step_json_call(out, at_end);
    case State::kDsmlInvoke: return step_dsml_invoke(out, at_end);
    case State::kDsmlParameter: return step_dsml_parameter(out, at_end);
    case State::kDsmlValue: return step_dsml_value(out, at_end);
  }
  return false;
}

void OutputParser::emit_content(ParsedDelta& out, std::string_view text) {
  out.content += text;
  if (!all_space(text)) {
    content_started_ = true;
    after_json_call_ = false;
  }
}

void OutputParser::emit_tool_call(ParsedDelta& out, std::string name, std::string arguments) {
  const std::int32_t index = num_tool_calls_++;
  out.tool_calls.push_back({.index = index,
                            .id = options_.tool_call_id_prefix + std::to_string(index),
                            .name = std::move(name),
                            .arguments = std::move(arguments)});
}

bool OutputParser::step_content(ParsedDelta& out, bool at_end) {
  if (options_.parse_tool_calls && format_.tool_syntax == ToolCallSyntax::kBareJson)
    if (const std::optional<bool> started = start_bare_json_call(at_end)) return *started;
  static const std::string kNone;
  const bool sections = format_.tool_syntax == ToolCallSyntax::kDeepSeek || format_.tool_syntax == ToolCallSyntax::kDsml;
  const std::string& tool_begin = !options_.parse_tool_calls ? kNone
                                  : sections                 ? format_.section_begin
                                                             : format_.call_begin;
  const Found found = find_first(pending_, {&format_.reasoning_begin, &tool_begin});
  std::size_t end = found.marker ? found.pos
                    : at_end     ? pending_.size()
                                 : pending_.size() - partial_marker_bytes(pending_, {&format_.reasoning_begin, &tool_begin});
  std::string_view text = std::string_view(pending_).substr(0, end);
  // DeepSeek-V4 writes a blank line before its DSML block: layout, not content
  // (its encoder writes it back). Trailing whitespace waits until what follows decides.
  if (format_.tool_syntax == ToolCallSyntax::kDsml && options_.parse_tool_calls &&
      (found.marker == &tool_begin || (!found.marker && !at_end))) {
    const std::size_t last = text.find_last_not_of(kSpace);
    const std::size_t kept = last == std::string_view::npos ? 0 : last + 1;
    if (found.marker) pending_.erase(kept, end - kept);  // before the block: dropped
    end = kept;
    text = std::string_view(pending_).substr(0, end);
  }
  // Whitespace between tool calls (and after the last) is layout, not content.
  // It is held until non-space text shows it belongs to content, so the result
  // does not depend on how the text was chunked.
  if (num_tool_calls_ > 0 && all_space(text)) {
    if (!found.marker && !at_end) return false;
    pending_.erase(0, end);
  } else {
    emit_content(out, text);
    pending_.erase(0, end);
  }
  if (!found.marker) return false;
  pending_.erase(0, found.marker->size());
  if (found.marker == &format_.reasoning_begin) {
    state_ = State::kReasoning;
    return true;
  }
  switch (format_.tool_syntax) {
    case ToolCallSyntax::kDeepSeek:
    case ToolCallSyntax::kDsml: state_ = State::kSection; break;
    case ToolCallSyntax::kBareJson:
      raw_call_ = *found.marker;
      state_ = State::kJsonCall;
      break;
    default: state_ = State::kTaggedCall; break;
  }
  return true;
}

std::optional<bool> OutputParser::start_bare_json_call(bool at_end) {
  const bool may_open = num_tool_calls_ == 0 && !content_started_;
  if (!may_open && !after_json_call_) return std::nullopt;
  const std::size_t first = pending_.find_first_not_of(kSpace);
  // Only whitespace yet: it is layout if an object follows, content if text does.
  if (first == std::string::npos) return at_end ? std::nullopt : std::optional<bool>(false);
  const std::string_view rest = std::string_view(pending_).substr(first);
  if (may_open && rest.starts_with('{')) {
    raw_call_.clear();
    pending_.erase(0, first);
    state_ = State::kJsonCall;
    return true;
  }
  const std::string_view separator = format_.call_separator;
  if (after_json_call_ && !separator.empty()) {
    if (rest.starts_with(separator)) {
      raw_call_ = pending_.substr(0, first + separator.size());
      pending_.erase(0, first + separator.size());
      state_ = State::kJsonCall;
      return true;
    }
    if (separator.starts_with(rest) && !at_end) return false;
  }
  return std::nullopt;
}

bool OutputParser::abandon_json_call(ParsedDelta& out) {
  emit_content(out, raw_call_);
  raw_call_.clear();
  json_scanner_.reset();
  // What follows is content too: it must not open a bare call again.
  content_started_ = true;
  after_json_call_ = false;
  state_ = State::kContent;
  return true;
}

bool OutputParser::step_json_call(ParsedDelta& out, bool at_end) {
  if (!json_scanner_.started()) {
    const std::size_t first = pending_.find_first_not_of(kSpace);
    if (first == std::string::npos) return at_end ? abandon_json_call(out) : false;
    raw_call_.append(pending_, 0, first);
    pending_.erase(0, first);
    if (pending_.front() != '{') return abandon_json_call(out);
  }
  const std::optional<std::size_t> length = json_scanner_.scan(pending_);
  if (!length) return at_end ? abandon_json_call(out) : false;
  std::optional<ToolCallBody> call = json_tool_call(std::string_view(pending_).substr(0, *length), true);
  if (!call) {
    raw_call_.append(pending_, 0, *length);
    pending_.erase(0, *length);
    return abandon_json_call(out);
  }
  pending_.erase(0, *length);
  emit_tool_call(out, std::move(call->name), std::move(call->arguments));
  raw_call_.clear();
  json_scanner_.reset();
  after_json_call_ = true;
  state_ = State::kContent;
  return true;
}

bool OutputParser::step_reasoning(ParsedDelta& out, bool at_end) {
  const Found found = find_first(pending_, {&format_.reasoning_end});
  const std::size_t end = found.marker ? found.pos
                          : at_end     ? pending_.size()
                                       : pending_.size() - partial_marker_bytes(pending_, {&format_.reasoning_end});
  out.reasoning.append(pending_, 0, end);
  pending_.erase(0, end);
  if (!found.marker) return false;
  pending_.erase(0, found.marker->size());
  state_ = State::kContent;
  return true;
}

bool OutputParser::step_tagged_call(ParsedDelta& out, bool at_end) {
  const std::size_t pos = pending_.find(format_.call_end);
  if (pos == std::string::npos) {
    if (at_end) {  // never closed: it was text after all
      emit_content(out, format_.call_begin + pending_);
      pending_.clear();
      state_ = State::kContent;
    }
    return false;
  }
  const std::string body = pending_.substr(0, pos);
  pending_.erase(0, pos + format_.call_end.size());
  state_ = State::kContent;
  std::optional<ToolCallBody> call = format_.tool_syntax == ToolCallSyntax::kTaggedXml
                                         ? xml_tool_call(body, options_.tools)
                                         : json_tool_call(body, /*arguments_required=*/false);
  if (call) {
    emit_tool_call(out, std::move(call->name), std::move(call->arguments));
  } else {
    emit_content(out, format_.call_begin + body + format_.call_end);
  }
  return true;
}

bool OutputParser::step_section(ParsedDelta& /*out*/, bool at_end) {
  const auto first = pending_.find_first_not_of(" \n\t\r");
  const std::string_view rest = first == std::string::npos ? std::string_view() : std::string_view(pending_).substr(first);
  if (rest.starts_with(format_.call_begin)) {
    pending_.erase(0, first + format_.call_begin.size());
    state_ = format_.tool_syntax == ToolCallSyntax::kDsml ? State::kDsmlInvoke : State::kCallHeader;
    return true;
  }
  if (rest.starts_with(format_.section_end)) {
    pending_.erase(0, first + format_.section_end.size());
    state_ = State::kContent;
    return true;
  }
  const bool undecided = std::string_view(format_.call_begin).starts_with(rest) ||
                         std::string_view(format_.section_end).starts_with(rest);
  if (undecided && !at_end) return false;
  // Not a call: the rest is ordinary text.
  state_ = State::kContent;
  if (at_end && rest.empty()) {
    pending_.clear();
    return false;
  }
  return true;
}

bool OutputParser::step_call_header(ParsedDelta& out, bool at_end) {
  const std::size_t pos = pending_.find(format_.header_end);
  if (pos == std::string::npos) {
    if (at_end) {
      out.content += format_.call_begin + pending_;
      pending_.clear();
      state_ = State::kContent;
    }
    return false;
  }
  std::string_view header = std::string_view(pending_).substr(0, pos);
  if (!format_.name_after.empty()) {
    const std::size_t sep = header.find(format_.name_after);
    if (sep != std::string_view::npos) header = header.substr(sep + format_.name_after.size());
  }
  const std::int32_t index = num_tool_calls_;
  out.tool_calls.push_back(
      {.index = index, .id = options_.tool_call_id_prefix + std::to_string(index), .name = trim(header), .arguments = ""});
  pending_.erase(0, pos + format_.header_end.size());
  state_ = State::kCallArguments;
  return true;
}

bool OutputParser::step_call_arguments(ParsedDelta& out, bool at_end) {
  const Found found = find_first(pending_, {&format_.call_end});
  const std::size_t end = found.marker ? found.pos
                          : at_end     ? pending_.size()
                                       : pending_.size() - partial_marker_bytes(pending_, {&format_.call_end});
  if (end > 0) add_tool_delta(out, {.index = num_tool_calls_, .arguments = pending_.substr(0, end)});
  pending_.erase(0, end);
  if (!found.marker && !at_end) return false;
  if (found.marker) pending_.erase(0, found.marker->size());
  ++num_tool_calls_;
  state_ = State::kSection;
  return found.marker != nullptr;
}

namespace {

// A string's bytes inside a JSON string literal: quote, backslash and control
// characters escaped, every other byte as it is (UTF-8 passes through). Byte
// by byte, unlike the Jinja engine's json_escape: a streamed piece may end
// inside a code point.
std::string json_string_bytes(std::string_view text) {
  std::string out;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          constexpr char kHex[] = "0123456789abcdef";
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  return out;
}

// A JSON string of `text` (bytes that are not UTF-8 replaced, never thrown on).
std::string json_string(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

bool OutputParser::close_dsml_call(ParsedDelta& out, State state) {
  add_tool_delta(out, {.index = num_tool_calls_, .arguments = "}"});
  ++num_tool_calls_;
  dsml_keys_.clear();
  state_ = state;
  return true;
}

// ` name="F">`: the call goes out with its name and "{".
bool OutputParser::step_dsml_invoke(ParsedDelta& out, bool at_end) {
  static constexpr std::string_view kNameOpen = " name=\"";
  const std::size_t close = pending_.find("\">");
  const std::string_view head = std::string_view(pending_).substr(0, close);
  const bool well_begun = head.starts_with(kNameOpen) || std::string_view(kNameOpen).starts_with(head);
  if (close == std::string::npos && well_begun && !at_end) return false;
  const std::string_view name =
      close == std::string::npos || !head.starts_with(kNameOpen) ? std::string_view() : head.substr(kNameOpen.size());
  if (name.empty() || name.find_first_of("\"<\n") != std::string_view::npos) {  // not an invoke: text
    emit_content(out, format_.call_begin);
    state_ = State::kContent;
    return true;
  }
  const std::int32_t index = num_tool_calls_;
  out.tool_calls.push_back({.index = index,
                            .id = options_.tool_call_id_prefix + std::to_string(index),
                            .name = std::string(name),
                            .arguments = "{"});
  pending_.erase(0, close + 2);
  dsml_keys_.clear();
  state_ = State::kDsmlParameter;
  return true;
}

// The next parameter's ` name="K" string="true|false">`, or the invoke's end.
// Anything else ends the call where it stands and is content.
bool OutputParser::step_dsml_parameter(ParsedDelta& out, bool at_end) {
  const std::size_t first = pending_.find_first_not_of(kSpace);
  const std::string_view rest = first == std::string::npos ? std::string_view() : std::string_view(pending_).substr(first);
  if (rest.starts_with(format_.call_end)) {
    pending_.erase(0, first + format_.call_end.size());
    return close_dsml_call(out, State::kSection);
  }
  if (rest.starts_with(format_.parameter_begin)) {
    static constexpr std::string_view kName = " name=\"", kString = "\" string=\"";
    std::string_view tag = rest.substr(format_.parameter_begin.size());
    const std::size_t close = tag.find("\">");
    if (close == std::string_view::npos && !at_end) return false;
    tag = tag.substr(0, close);  // ` name="K" string="true`
    const std::size_t attribute = tag.rfind(kString);
    const bool well_formed = close != std::string_view::npos && tag.starts_with(kName) &&
                             attribute != std::string_view::npos && attribute >= kName.size();
    const std::string_view flag = well_formed ? tag.substr(attribute + kString.size()) : std::string_view();
    const std::string key = well_formed ? std::string(tag.substr(kName.size(), attribute - kName.size())) : std::string();
    if (!well_formed || (flag != "true" && flag != "false") || key.empty() ||
        std::find(dsml_keys_.begin(), dsml_keys_.end(), key) != dsml_keys_.end())
      return close_dsml_call(out, State::kContent);
    dsml_string_value_ = flag == "true";
    add_tool_delta(out, {.index = num_tool_calls_,
                         .arguments = (dsml_keys_.empty() ? "" : ", ") + json_string(key) + ": " +
                                      (dsml_string_value_ ? "\"" : "")});
    dsml_keys_.push_back(key);
    dsml_value_.clear();
    pending_.erase(0, first + format_.parameter_begin.size() + close + 2);
    state_ = State::kDsmlValue;
    return true;
  }
  const bool undecided = std::string_view(format_.call_end).starts_with(rest) ||
                         std::string_view(format_.parameter_begin).starts_with(rest);
  if (undecided && !at_end) return false;
  return close_dsml_call(out, State::kContent);
}

// A string value streams, escaped; any other waits for its end, then goes out
// as its JSON, or as the string it was when it is none.
bool OutputParser::step_dsml_value(ParsedDelta& out, bool at_end) {
  const Found found = find_first(pending_, {&format_.parameter_end});
  const std::size_t end = found.marker ? found.pos
                          : at_end     ? pending_.size()
                                       : pending_.size() - partial_marker_bytes(pending_, {&format_.parameter_end});
  const std::string_view piece = std::string_view(pending_).substr(0, end);
  if (dsml_string_value_) {
    if (!piece.empty()) add_tool_delta(out, {.index = num_tool_calls_, .arguments = json_string_bytes(piece)});
  } else {
    dsml_value_.append(piece);
  }
  pending_.erase(0, end);
  if (!found.marker && !at_end) return false;
  if (dsml_string_value_) {
    add_tool_delta(out, {.index = num_tool_calls_, .arguments = "\""});
  } else {
    const nlohmann::json parsed = nlohmann::json::parse(dsml_value_, nullptr, /*allow_exceptions=*/false);
    add_tool_delta(out, {.index = num_tool_calls_,
                         .arguments = parsed.is_discarded() ? json_string(dsml_value_) : dsml_value_});
  }
  if (!found.marker) return close_dsml_call(out, State::kContent);  // the output ended inside the value
  pending_.erase(0, found.marker->size());
  state_ = State::kDsmlParameter;
  return true;
}

}  // namespace sluice::server
