// The server under test and how to talk to it: where, which API, and how a
// prompt is written into the request body.
#pragma once

#include <optional>
#include <string>

#include "sluice/common/result.h"
#include "sluice/loadgen/prompt_source.h"
#include "sluice/loadgen/workload.h"

namespace sluice::loadgen {

enum class Endpoint { kCompletions, kChat };
// Token ids need the completions API; text works everywhere.
enum class PromptFormat { kTokenIds, kText };

struct ServerTarget {
  std::string host = "127.0.0.1";
  std::string port = "8000";
  std::string path_prefix;  // the base URL's path, without a trailing "/v1"
  std::string model;
  std::string api_key;
  Endpoint endpoint = Endpoint::kCompletions;
  PromptFormat prompt_format = PromptFormat::kTokenIds;
  bool ignore_eos = true;  // vLLM's extension: generate exactly max_tokens
  std::optional<double> temperature = 0.0;

  std::string path(const std::string& route) const { return path_prefix + route; }
  std::string request_path() const {
    return path(endpoint == Endpoint::kChat ? "/v1/chat/completions" : "/v1/completions");
  }
};

// "http://host[:port][/prefix][/v1]"; https is refused (no TLS here).
Result<ServerTarget> parse_base_url(const std::string& url);

// The JSON body of one streaming request.
std::string request_body(const ServerTarget& target, const PlannedRequest& request, const TokenSpace& tokens);

}  // namespace sluice::loadgen
