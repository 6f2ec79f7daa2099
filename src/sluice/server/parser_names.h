// vLLM's --reasoning-parser and --tool-call-parser names, mapped onto sluice's
// output formats (output_parser.h). vLLM picks the two separately (Qwen3 is
// typically `--reasoning-parser qwen3 --tool-call-parser hermes`, DeepSeek-V3.1
// `--reasoning-parser deepseek_v3 --tool-call-parser deepseek_v31`); sluice
// reads one format, so the reasoning markers come from the reasoning parser
// and the tool-call syntax from the tool-call parser. A name vLLM has and
// sluice does not is refused with the names sluice has; a tool-call parser's
// name given as the reasoning parser (hermes, qwen3_coder, llama3_json,
// deepseek_v31: vLLM has no reasoning parser by those names) is refused with
// the reasoning parser to use.
#pragma once

#include <string>
#include <string_view>

#include "sluice/common/result.h"
#include "sluice/server/output_parser.h"

namespace sluice::server {

struct ParserNames {
  std::string reasoning = "auto";  // "auto": by config.json's model_type
  std::string tool_call;           // empty: the reasoning parser's own format (auto: by model_type)
};

// Each name alone, without a model (the start-up flag check).
Status check_parser_names(const ParserNames& names);

// The format the two names make for a model of `model_type`.
Result<OutputFormat> output_format_for_parsers(const ParserNames& names, std::string_view model_type);

}  // namespace sluice::server
