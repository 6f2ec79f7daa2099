#include "sluice/tokenizer/pre_tokenizer.h"

#include <fmt/format.h>

namespace sluice::tokenizer_detail {
namespace {

// The reference's fixed patterns (transformers.js), in its JavaScript dialect.
constexpr std::string_view kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kPunctuationClass =
    "\\p{P}\\u0021-\\u002F\\u003A-\\u0040\\u005B-\\u0060\\u007B-\\u007E";

JsRegex compile_or_throw(std::string_view pattern, std::string_view path) {
  auto regex = JsRegex::compile(pattern);
  if (!regex.ok()) throw_load_error(path, regex.error_message());
  return std::move(regex).value();
}

std::string lowercase_ascii(std::string text) {
  for (char& c : text) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return text;
}

}  // namespace

PreTokenizer PreTokenizer::from_json(const Json& value, std::string_view path) {
  PreTokenizer pre_tokenizer;
  if (!value.is_null()) pre_tokenizer.add(value, path);
  return pre_tokenizer;
}

void PreTokenizer::add(const Json& value, std::string_view path) {
  const std::string& type = expect_string(required_field(value, "type", path), join_path(path, "type"));
  if (byte_level_ && type != "Sequence") {
    throw_load_error(path, fmt::format("unsupported: pre-tokenizer \"{}\" after ByteLevel", type));
  }
  if (type == "Sequence") {
    const std::string list_path = join_path(path, "pretokenizers");
    const Json& list = expect_array(required_field(value, "pretokenizers", path), list_path);
    for (std::size_t i = 0; i < list.size(); ++i) add(list[i], fmt::format("{}[{}]", list_path, i));
  } else if (type == "Split") {
    const std::string pattern_path = join_path(path, "pattern");
    const Json& pattern = expect_object(required_field(value, "pattern", path), pattern_path);
    const bool invert = bool_or(value, "invert", false, path);
    const std::string behavior = lowercase_ascii(string_or(value, "behavior", "", path));
    RegexSplit split;
    if (const Json* literal = optional_field(pattern, "String")) {
      auto regex = JsRegex::literal(expect_string(*literal, join_path(pattern_path, "String")));
      if (!regex.ok()) throw_load_error(pattern_path, regex.error_message());
      split.regex = std::move(regex).value();
      // The reference wraps a string delimiter in a group, so "removed" keeps it.
      split.mode = invert ? SplitMode::kMatchesOnly : SplitMode::kIsolate;
    } else if (const Json* regex = optional_field(pattern, "Regex")) {
      const std::string regex_path = join_path(pattern_path, "Regex");
      split.regex = compile_or_throw(expect_string(*regex, regex_path), regex_path);
      split.mode = invert ? SplitMode::kMatchesOnly
                          : (behavior == "removed" ? SplitMode::kRemove : SplitMode::kIsolate);
    } else {
      throw_load_error(pattern_path, "expected {\"String\": ...} or {\"Regex\": ...}");
    }
    steps_.emplace_back(std::move(split));
  } else if (type == "ByteLevel") {
    ByteLevelStep step;
    step.add_prefix_space = bool_or(value, "add_prefix_space", false, path);
    if (bool_or(value, "use_regex", true, path)) step.gpt2_split = compile_or_throw(kGpt2Pattern, path);
    steps_.emplace_back(std::move(step));
    byte_level_ = true;
  } else if (type == "Metaspace") {
    MetaspaceStep step;
    step.replacement = string_or(value, "replacement", "\xE2\x96\x81", path);
    step.str_rep = string_or(value, "str_rep", "", path);
    if (step.str_rep.empty()) step.str_rep = step.replacement;
    // Files written by tokenizers >= 0.19 drop add_prefix_space in favour of
    // prepend_scheme; Hugging Face then prepends (the reference would not, as
    // it reads only add_prefix_space). Follow Hugging Face when it is absent.
    step.add_prefix_space = bool_or(value, "add_prefix_space", true, path);
    const std::string scheme = string_or(value, "prepend_scheme", "always", path);
    if (scheme == "always") {
      step.prepend_scheme = MetaspaceStep::Prepend::kAlways;
    } else if (scheme == "first") {
      step.prepend_scheme = MetaspaceStep::Prepend::kFirst;
    } else if (scheme == "never") {
      step.prepend_scheme = MetaspaceStep::Prepend::kNever;
    } else {
      throw_load_error(join_path(path, "prepend_scheme"), fmt::format("unknown scheme \"{}\"", scheme));
    }
    steps_.emplace_back(std::move(step));
  } else if (type == "Digits") {
    const bool individual = bool_or(value, "individual_digits", false, path);
    steps_.emplace_back(RegexSplit{compile_or_throw(individual ? "[^\\d]+|\\d" : "[^\\d]+|\\d+", path),
                                   SplitMode::kMatchesOnly});
  } else if (type == "Punctuation") {
    steps_.emplace_back(RegexSplit{
        compile_or_throw(fmt::format("[^{0}]+|[{0}]+", kPunctuationClass), path),
        SplitMode::kMatchesOnly});
  } else if (type == "WhitespaceSplit") {
    steps_.emplace_back(RegexSplit{compile_or_throw("\\S+", path), SplitMode::kMatchesOnly});
  } else if (type == "Whitespace") {
    steps_.emplace_back(RegexSplit{compile_or_throw("\\w+|[^\\w\\s]+", path), SplitMode::kMatchesOnly});
  } else {
    throw_load_error(join_path(path, "type"), fmt::format("unsupported pre-tokenizer type \"{}\"", type));
  }
}

void PreTokenizer::run(std::string_view text, int section_index,
                       FunctionRef<void(std::string_view)> on_piece) const {
  run_from(0, text, section_index, on_piece);
}

void PreTokenizer::run_from(std::size_t step_index, std::string_view text, int section_index,
                            FunctionRef<void(std::string_view)> on_piece) const {
  if (step_index == steps_.size()) {
    on_piece(text);
    return;
  }
  const auto next = [&](std::string_view piece) {
    run_from(step_index + 1, piece, section_index, on_piece);
  };
  const auto split = [&](const JsRegex& regex, SplitMode mode, std::string_view subject) {
    if (mode == SplitMode::kRemove) {
      std::size_t previous = 0;
      std::size_t start = 0;
      RegexMatch match;
      while (start <= subject.size() && regex.find_with_groups(subject, start, &match)) {
        if (match.begin > previous) next(subject.substr(previous, match.begin - previous));
        for (const auto& [b, e] : match.groups) {
          if (b != std::string_view::npos && e > b) next(subject.substr(b, e - b));
        }
        previous = match.end;
        start = match.end > match.begin ? match.end : match.end + 1;
        while (start < subject.size() && (static_cast<unsigned char>(subject[start]) & 0xC0) == 0x80) ++start;
      }
      if (previous < subject.size()) next(subject.substr(previous));
      return;
    }
    std::size_t previous = 0;
    regex.for_each_match(subject, [&](std::size_t begin, std::size_t end) {
      if (mode == SplitMode::kIsolate && begin > previous) next(subject.substr(previous, begin - previous));
      if (end > begin) next(subject.substr(begin, end - begin));
      previous = end;
    });
    if (mode == SplitMode::kIsolate && previous < subject.size()) next(subject.substr(previous));
  };

  std::visit(
      [&](const auto& step) {
        using S = std::decay_t<decltype(step)>;
        if constexpr (std::is_same_v<S, RegexSplit>) {
          split(step.regex, step.mode, text);
        } else if constexpr (std::is_same_v<S, ByteLevelStep>) {
          std::string prefixed;
          std::string_view subject = text;
          if (step.add_prefix_space && !text.starts_with(' ')) {
            prefixed = " ";
            prefixed += text;
            subject = prefixed;
          }
          if (step.gpt2_split) {
            split(*step.gpt2_split, SplitMode::kMatchesOnly, subject);
          } else {
            next(subject);
          }
        } else if constexpr (std::is_same_v<S, MetaspaceStep>) {
          std::string replaced;
          std::size_t begin = 0;
          while (true) {
            const std::size_t found = text.find(' ', begin);
            replaced.append(text.substr(begin, found - begin));
            if (found == std::string_view::npos) break;
            replaced += step.str_rep;
            begin = found + 1;
          }
          const bool prepend =
              step.add_prefix_space && !std::string_view(replaced).starts_with(step.replacement) &&
              (step.prepend_scheme == MetaspaceStep::Prepend::kAlways ||
               (step.prepend_scheme == MetaspaceStep::Prepend::kFirst && section_index == 0));
          if (prepend) replaced.insert(0, step.str_rep);
          next(replaced);
        }
      },
      steps_[step_index]);
}

}  // namespace sluice::tokenizer_detail
