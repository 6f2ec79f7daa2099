#include "sluice/cli/vllm_flags.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace sluice::cli {
namespace {

const VllmFlag* find_vllm_flag(std::string_view name) {
  for (const VllmFlag& flag : kVllmFlags)
    if (flag.name == name) return &flag;
  return nullptr;
}

bool value_accepted(const VllmFlag& flag, std::string_view value) {
  std::string_view rest = flag.accepted;
  while (!rest.empty()) {
    const std::size_t bar = rest.find('|');
    if (rest.substr(0, bar) == value) return true;
    if (bar == std::string_view::npos) break;
    rest.remove_prefix(bar + 1);
  }
  return false;
}

// Long names ("--x") of every option the serve command parses itself.
std::vector<std::string> serve_flag_names(const CLI::App& serve) {
  std::vector<std::string> names;
  for (const CLI::Option* option : serve.get_options())
    for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
  return names;
}

std::string nearest(std::string_view unknown, const std::vector<std::string>& known) {
  std::string best;
  std::size_t best_distance = std::numeric_limits<std::size_t>::max();
  for (const std::string& name : known)
    if (const std::size_t d = edit_distance(unknown, name); d < best_distance) {
      best_distance = d;
      best = name;
    }
  return best;
}

// vLLM's short spellings: "-tp 8", "-tp=8".
constexpr std::array<std::pair<std::string_view, std::string_view>, 4> kShortAliases = {{
    {"-tp", "--tensor-parallel-size"},
    {"-pp", "--pipeline-parallel-size"},
    {"-dp", "--data-parallel-size"},
    {"-q", "--quantization"},
}};

std::optional<std::string> expand_short_alias(std::string_view token) {
  for (const auto& [alias, name] : kShortAliases)
    if (token == alias || (token.starts_with(alias) && token.substr(alias.size()).starts_with('=')))
      return std::string(name) + std::string(token.substr(alias.size()));
  return std::nullopt;
}

// A leading en or em dash (U+2013, U+2014): a "--flag" that a web page or a
// word processor rewrote. Returns the flag spelled with two hyphens.
std::optional<std::string> undash(std::string_view token) {
  for (std::string_view dash : {std::string_view("\u2013"), std::string_view("\u2014")})
    if (token.starts_with(dash)) return "--" + std::string(token.substr(dash.size()));
  return std::nullopt;
}

}  // namespace

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), std::size_t{0});
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

Result<std::vector<std::string>> translate_vllm_flags(const CLI::App& serve, std::vector<std::string> args) {
  const std::vector<std::string> own = serve_flag_names(serve);
  std::vector<std::string> known = own;
  for (const VllmFlag& flag : kVllmFlags) known.emplace_back(flag.name);
  std::vector<std::string> out;
  std::vector<std::string> errors;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (auto expanded = expand_short_alias(args[i])) {
      spdlog::info("vllm flag {} is {}", args[i].substr(0, args[i].find('=')), expanded->substr(0, expanded->find('=')));
      args[i] = std::move(*expanded);
    }
    const std::string& token = args[i];
    if (auto fixed = undash(token)) {
      const std::string name = fixed->substr(0, fixed->find('='));
      errors.push_back(fmt::format("'{}' starts with a typographic dash, not '--' (pasted from a web page?): "
                                   "write {}",
                                   token, std::find(known.begin(), known.end(), name) != known.end()
                                              ? name
                                              : nearest(name, known)));
      continue;
    }
    if (!token.starts_with("--") || token == "--") {
      out.push_back(token);
      continue;
    }
    const std::size_t eq = token.find('=');
    const std::string name = token.substr(0, eq);
    if (std::find(own.begin(), own.end(), name) != own.end()) {
      out.push_back(token);
      continue;
    }
    const VllmFlag* flag = find_vllm_flag(name);
    if (!flag) {
      errors.push_back(fmt::format("unknown flag {}; nearest known flag: {} (sluice serve --vllm-flags lists vLLM's)",
                                   name, nearest(name, known)));
      continue;
    }
    std::optional<std::string> value;
    if (eq != std::string::npos) {
      value = token.substr(eq + 1);
    } else if (flag->takes_value) {
      if (i + 1 < args.size()) value = args[++i];
      else {
        errors.push_back(fmt::format("{} needs a value", name));
        continue;
      }
    }
    if (value && !flag->takes_value) {
      errors.push_back(fmt::format("{} takes no value (got '{}')", name, *value));
      continue;
    }
    const bool accepted = flag->kind == VllmFlagKind::kNoOp || (value && value_accepted(*flag, *value));
    if (flag->kind == VllmFlagKind::kSame) {
      // In the table but not parsed by serve: a table entry out of step with cmd_serve.cpp.
      errors.push_back(fmt::format("{}: listed as a sluice flag but serve does not parse it", name));
    } else if (accepted) {
      spdlog::info("vllm flag {}{} accepted, no effect: {}", name, value ? " " + *value : "", flag->note);
    } else {
      errors.push_back(fmt::format("{}{} is refused: {}", name, value ? " " + *value : "", flag->note));
    }
  }
  if (!errors.empty()) {
    std::string message;
    for (const std::string& line : errors) message += (message.empty() ? "" : "\n") + line;
    return Error{message};
  }
  return out;
}

void log_error_lines(std::string_view message) {
  while (!message.empty()) {
    const std::size_t newline = message.find('\n');
    spdlog::error("{}", message.substr(0, newline));
    message = newline == std::string_view::npos ? std::string_view() : message.substr(newline + 1);
  }
}

std::string vllm_flags_markdown() {
  std::string table = "| vLLM flag | sluice |\n|---|---|\n";
  for (const VllmFlag& flag : kVllmFlags) {
    std::string verdict;
    switch (flag.kind) {
      case VllmFlagKind::kSame:
        verdict = "same flag";
        break;
      case VllmFlagKind::kNoOp:
        verdict = "accepted, no effect";
        break;
      case VllmFlagKind::kRefused:
        verdict = flag.accepted.empty() ? "refused" : fmt::format("`{}` accepted (no effect), else refused", flag.accepted);
        std::replace(verdict.begin(), verdict.end(), '|', '/');
        break;
    }
    std::string note(flag.note);
    std::replace(note.begin(), note.end(), '|', '/');
    table += fmt::format("| `{}` | {}{}{} |\n", flag.name, verdict, note.empty() ? "" : ": ", note);
  }
  return table;
}

}  // namespace sluice::cli
