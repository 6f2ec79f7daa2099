#include "sluice/server/generation_defaults.h"

#include <filesystem>
#include <variant>

#include <fmt/format.h>

#include "sluice/common/io.h"

namespace sluice::server {
namespace {

using Json = nlohmann::ordered_json;

// generation_config.json's keys and the request fields they default.
struct Key {
  const char* file_key;
  const char* request_field;
};
constexpr Key kKeys[] = {{"temperature", "temperature"}, {"top_p", "top_p"},
                         {"top_k", "top_k"},             {"min_p", "min_p"},
                         {"repetition_penalty", "repetition_penalty"}, {"max_new_tokens", "max_tokens"}};

}  // namespace

Result<RequestDefaults> read_generation_defaults(const std::string& setting, const std::string& model_dir) {
  if (setting == "vllm") return RequestDefaults{};
  const std::string dir = setting == "auto" ? model_dir : setting;
  const std::string path = dir + "/generation_config.json";
  if (!std::filesystem::exists(path)) {
    if (setting == "auto") return RequestDefaults{};
    return Error{fmt::format("--generation-config {}: no generation_config.json in that directory", setting)};
  }
  SLUICE_TRY_ASSIGN(text, read_file(path));
  const Json config = Json::parse(text, nullptr, false);
  if (config.is_discarded() || !config.is_object())
    return Error{fmt::format("--generation-config {}: {} is not a JSON object", setting, path)};
  // The values are checked as a request carrying them would be: the same
  // ranges, the same messages.
  Json request = {{"model", "m"}, {"prompt", "x"}};
  for (const Key& key : kKeys)
    if (auto it = config.find(key.file_key); it != config.end() && !it->is_null())
      request[key.request_field] = *it;
  auto parsed = parse_completion_request(request, RequestLimits{});
  if (const auto* error = std::get_if<ApiError>(&parsed))
    return Error{fmt::format("--generation-config {}: {}: {}", setting, path, error->message)};
  const GenerationOptions& options = std::get<CompletionRequest>(parsed).options;
  RequestDefaults defaults;
  if (request.contains("temperature")) defaults.temperature = options.sampling.temperature;
  if (request.contains("top_p")) defaults.top_p = options.sampling.top_p;
  if (request.contains("top_k")) defaults.top_k = options.sampling.top_k;
  if (request.contains("min_p")) defaults.min_p = options.sampling.min_p;
  if (request.contains("repetition_penalty")) defaults.repetition_penalty = options.sampling.repetition_penalty;
  if (request.contains("max_tokens")) defaults.max_tokens = options.max_tokens;
  return defaults;
}

std::string describe(const RequestDefaults& defaults) {
  std::string out;
  auto add = [&out](const char* name, const auto& value) {
    if (value) out += fmt::format("{}{} {}", out.empty() ? "" : ", ", name, *value);
  };
  add("temperature", defaults.temperature);
  add("top_p", defaults.top_p);
  add("top_k", defaults.top_k);
  add("min_p", defaults.min_p);
  add("repetition_penalty", defaults.repetition_penalty);
  add("max_tokens", defaults.max_tokens);
  return out.empty() ? "none" : out;
}

}  // namespace sluice::server
