// Output parsers: split a model's generated text into what OpenAI clients
// expect in separate fields: reasoning ("<think>...</think>") goes to
// reasoning_content, tool calls to incremental tool_calls, the rest to content.
// They work on streamed text in any chunking: feeding the text in pieces gives
// the same result as feeding it whole (markers split across pieces are held
// back until they are decided).
//
// Model families differ in their markers and in how a call's body is spelled,
// so each format is a table (OutputFormat) and one state machine reads them
// all; a complete call's body is read by tool_call_body.h. A new family (e.g.
// DeepSeek-V4.1) is a new table entry in output_format_by_name.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "sluice/common/result.h"
#include "sluice/server/json_object_scanner.h"

namespace sluice::server {

// One fragment of one tool call, as it goes on the wire: the first fragment
// of a call carries id and name, later ones only argument text.
struct ToolCallDelta {
  std::int32_t index = 0;  // position of the call within the choice
  std::string id;          // non-empty only on the first fragment
  std::string name;        // non-empty only on the first fragment
  std::string arguments;   // a piece of the JSON text
};

struct ParsedDelta {
  std::string content;
  std::string reasoning;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return content.empty() && reasoning.empty() && tool_calls.empty(); }
};

// How tool calls are spelled.
enum class ToolCallSyntax {
  kNone,
  // <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Qwen3, Hermes):
  // the call is complete only at the closing tag, so it goes out in one fragment.
  kTaggedJson,
  // DeepSeek: a section of calls, each a header that names the function and
  // raw argument JSON up to an end marker; the arguments stream as they come.
  kDeepSeek,
  // <tool_call><function=NAME><parameter=P>VALUE</parameter>...</function></tool_call>
  // (Qwen3-Coder): read like kTaggedJson, the values typed by the request's
  // tool schemas (tool_call_body.h).
  kTaggedXml,
  // {"name": ..., "parameters": {...}} objects joined by call_separator (Llama
  // 3.x), after call_begin (<|python_tag|>) or bare at the start of the output
  // (or of the content after reasoning). A call ends with its object, so it
  // goes out in one fragment when the closing brace arrives.
  kBareJson,
  // DeepSeek-V4's DSML: a section of invokes, each a name and parameters typed
  // by their own string="true|false" attribute. The arguments stream as JSON
  // as they come: a string value as it is written (escaped), any other value
  // whole at its end (JSON, or the string it was when it does not parse).
  kDsml,
};

struct OutputFormat {
  std::string name;  // "qwen3", "deepseek_r1", ...
  // Reasoning markers; empty = no reasoning parsing.
  std::string reasoning_begin, reasoning_end;
  ToolCallSyntax tool_syntax = ToolCallSyntax::kNone;
  // kTaggedJson, kTaggedXml: call_begin/call_end around each call.
  // kBareJson: call_begin before the first object, call_separator between objects.
  // kDeepSeek: section_begin [call_begin HEADER header_end ARGS call_end]* section_end,
  // where the function name is HEADER after name_after (or all of it if empty).
  // kDsml: section_begin [call_begin BODY call_end]* section_end, the BODY's
  // parameters between parameter_begin and parameter_end.
  std::string section_begin, section_end;
  std::string call_begin, call_end;
  std::string header_end, name_after;
  std::string call_separator;
  std::string parameter_begin, parameter_end;
};

// Known formats by name: "none", "qwen3", "hermes", "qwen3_coder", "llama3_json",
// "deepseek_r1", "deepseek_v3", "deepseek_v31", "deepseek_v4", "deepseek_v41".
// The error lists them.
Result<OutputFormat> output_format_by_name(std::string_view name);
// The format for a config.json model_type ("qwen3" -> qwen3, "deepseek_v3" ->
// deepseek_v3, "deepseek_v4" -> deepseek_v4, anything else -> none).
OutputFormat output_format_for_model_type(std::string_view model_type);

class OutputParser {
 public:
  struct Options {
    bool parse_tool_calls = false;   // the request has tools and tool_choice is not "none"
    bool starts_in_reasoning = false;  // the prompt already opened the reasoning block
    std::string tool_call_id_prefix = "call_";  // ids are prefix + index
    nlohmann::ordered_json tools;  // the request's tools: kTaggedXml types parameter values by their schemas
  };
  OutputParser(OutputFormat format, Options options);

  // Appends to `out` what `text` decides.
  void feed(std::string_view text, ParsedDelta& out);
  // End of output: whatever was held back, as content (an unterminated tool
  // call is returned as the text it was).
  void finish(ParsedDelta& out);

  bool in_reasoning() const { return state_ == State::kReasoning; }
  std::int32_t num_tool_calls() const { return num_tool_calls_; }

 private:
  enum class State {
    kContent,
    kReasoning,
    kTaggedCall,
    kSection,
    kCallHeader,
    kCallArguments,
    kJsonCall,
    kDsmlInvoke,     // after <｜DSML｜invoke: its name="F">
    kDsmlParameter,  // in an invoke: the next parameter's tag, or the invoke's end
    kDsmlValue,      // a parameter's value, up to its closing tag
  };
  // Returns false when more text is needed.
  bool step(ParsedDelta& out, bool at_end);
  bool step_content(ParsedDelta& out, bool at_end);
  bool step_reasoning(ParsedDelta& out, bool at_end);
  bool step_tagged_call(ParsedDelta& out, bool at_end);
  bool step_section(ParsedDelta& out, bool at_end);  // only moves between states
  bool step_call_header(ParsedDelta& out, bool at_end);
  bool step_call_arguments(ParsedDelta& out, bool at_end);
  bool step_json_call(ParsedDelta& out, bool at_end);
  bool step_dsml_invoke(ParsedDelta& out, bool at_end);
  bool step_dsml_parameter(ParsedDelta& out, bool at_end);
  bool step_dsml_value(ParsedDelta& out, bool at_end);
  // Ends the DSML call being read ("}") and reads on from `state`.
  bool close_dsml_call(ParsedDelta& out, State state);
  // kBareJson in kContent: whether a call opens at the start of pending_ (an
  // object before any content, or a separator right after a call); nullopt
  // when none can, false when more text is needed.
  std::optional<bool> start_bare_json_call(bool at_end);
  // The read so far of a kBareJson call that is not one, back to content.
  bool abandon_json_call(ParsedDelta& out);
  void emit_content(ParsedDelta& out, std::string_view text);
  void emit_tool_call(ParsedDelta& out, std::string name, std::string arguments);

  OutputFormat format_;
  Options options_;
  State state_ = State::kContent;
  std::string pending_;  // text not yet decided
  std::string raw_call_;  // kBareJson: the marker or separator before the object being read, returned if it is none
  JsonObjectScanner json_scanner_;  // kBareJson: where the object being read closes
  bool content_started_ = false;  // content other than whitespace has gone out
  bool after_json_call_ = false;  // kBareJson: only whitespace since the last call (a separator may follow)
  std::int32_t num_tool_calls_ = 0;
  // kDsml: the current call's parameter names, whether the value being read
  // is a string, and a non-string value until its end.
  std::vector<std::string> dsml_keys_;
  bool dsml_string_value_ = false;
  std::string dsml_value_;
};

}  // namespace sluice::server
