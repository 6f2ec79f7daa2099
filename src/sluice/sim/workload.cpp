#include "sluice/sim/workload.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

namespace sluice::sim {

std::vector<WorkloadRequest> report_workload(std::int32_t max_model_len_tokens) {
  constexpr std::int32_t kNumChats = 8;
  constexpr std::int32_t kNumLong = 8;
  constexpr double kChatTokens = 2000;  // prompt and output each
  constexpr double kShortestPrompt = 30000, kLongestPrompt = 300000;
  constexpr double kShortestOutput = 2000, kLongestOutput = 8000;
  // A model with a shorter context gets the same shape, scaled down to fit.
  const double max_len = max_model_len_tokens;
  const double chat_scale = std::min(1.0, max_len / (2 * kChatTokens));
  const double long_scale = std::min(1.0, max_len / (kLongestPrompt + kLongestOutput));
  const auto tokens = [](double n) { return std::max<std::int32_t>(1, static_cast<std::int32_t>(n)); };
  std::vector<WorkloadRequest> requests;
  for (std::int32_t i = 0; i < kNumChats; ++i) {
    requests.push_back({.arrival_ms = 0,
                        .num_prompt_tokens = tokens(kChatTokens * chat_scale),
                        .num_output_tokens = tokens(kChatTokens * chat_scale)});
  }
  for (std::int32_t i = 0; i < kNumLong; ++i) {
    const double t = static_cast<double>(i) / (kNumLong - 1);
    requests.push_back({.arrival_ms = 1000.0 + t * 9000.0,
                        .num_prompt_tokens = tokens((kShortestPrompt + t * (kLongestPrompt - kShortestPrompt)) * long_scale),
                        .num_output_tokens = tokens((kShortestOutput + t * (kLongestOutput - kShortestOutput)) * long_scale)});
  }
  return requests;
}

Result<std::vector<WorkloadRequest>> load_workload_jsonl(const std::string& path, std::int64_t max_requests) {
  std::ifstream in(path);
  if (!in) return Error{path + ": cannot open workload file"};
  std::vector<WorkloadRequest> requests;
  std::string line;
  std::int64_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (max_requests > 0 && static_cast<std::int64_t>(requests.size()) >= max_requests) break;
    const auto json = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const std::string where = path + ":" + std::to_string(line_number);
    if (json.is_discarded() || !json.is_object()) return Error{where + ": not a JSON object"};
    const auto get_int = [&](const char* key) -> Result<std::int32_t> {
      const auto it = json.find(key);
      if (it == json.end() || !it->is_number_integer() || it->get<std::int64_t>() < 1 ||
          it->get<std::int64_t>() > (1LL << 30)) {
        return Error{where + ": \"" + key + "\" must be a positive integer"};
      }
      return it->get<std::int32_t>();
    };
    SLUICE_TRY_ASSIGN(prompt, get_int("input_length"));
    SLUICE_TRY_ASSIGN(output, get_int("output_length"));
    double arrival_ms = 0;
    if (const auto it = json.find("timestamp"); it != json.end()) {
      if (!it->is_number() || it->get<double>() < 0) return Error{where + ": \"timestamp\" must be >= 0 (ms)"};
      arrival_ms = it->get<double>();
    }
    requests.push_back({.arrival_ms = arrival_ms, .num_prompt_tokens = prompt, .num_output_tokens = output});
  }
  if (requests.empty()) return Error{path + ": no requests"};
  std::stable_sort(requests.begin(), requests.end(),
                   [](const auto& a, const auto& b) { return a.arrival_ms < b.arrival_ms; });
  return requests;
}

}  // namespace sluice::sim
