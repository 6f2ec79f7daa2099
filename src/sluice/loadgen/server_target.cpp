#include "sluice/loadgen/server_target.h"

#include <nlohmann/json.hpp>

namespace sluice::loadgen {

Result<ServerTarget> parse_base_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind("https://", 0) == 0) return Error{"--base-url " + url + ": https is not supported (plain http only)"};
  if (url.rfind(scheme, 0) != 0) return Error{"--base-url " + url + ": must start with http://"};
  std::string rest = url.substr(scheme.size());
  ServerTarget target;
  const std::size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  target.path_prefix = slash == std::string::npos ? "" : rest.substr(slash);
  while (!target.path_prefix.empty() && target.path_prefix.back() == '/') target.path_prefix.pop_back();
  if (target.path_prefix.size() >= 3 && target.path_prefix.compare(target.path_prefix.size() - 3, 3, "/v1") == 0)
    target.path_prefix.resize(target.path_prefix.size() - 3);
  const std::size_t colon = authority.rfind(':');
  if (colon != std::string::npos && authority.find(']') == std::string::npos) {
    target.host = authority.substr(0, colon);
    target.port = authority.substr(colon + 1);
  } else {
    target.host = authority;
    target.port = "80";
  }
  if (target.host.empty()) return Error{"--base-url " + url + ": no host"};
  if (target.port.empty() || target.port.find_first_not_of("0123456789") != std::string::npos)
    return Error{"--base-url " + url + ": bad port"};
  return target;
}

std::string request_body(const ServerTarget& target, const PlannedRequest& request, const TokenSpace& tokens) {
  nlohmann::json body = {{"model", target.model},
                         {"max_tokens", request.max_output_tokens},
                         {"stream", true},
                         {"stream_options", {{"include_usage", true}}}};
  if (target.ignore_eos) body["ignore_eos"] = true;
  if (target.temperature) body["temperature"] = *target.temperature;
  if (target.endpoint == Endpoint::kChat) {
    body["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", prompt_text(request.prompt, tokens)}}});
  } else if (target.prompt_format == PromptFormat::kTokenIds && request.prompt.literal_text.empty()) {
    body["prompt"] = prompt_token_ids(request.prompt, tokens);
  } else {
    body["prompt"] = prompt_text(request.prompt, tokens);
  }
  return body.dump();
}

}  // namespace sluice::loadgen
