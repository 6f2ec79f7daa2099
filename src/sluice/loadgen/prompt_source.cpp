#include "sluice/loadgen/prompt_source.h"

#include <array>
#include <string_view>

#include "sluice/common/check.h"
#include "sluice/common/rng.h"

namespace sluice::loadgen {
namespace {

// Short, frequent words: each is a single token in the common BPE vocabularies.
constexpr std::array<std::string_view, 64> kWords = {
    "the",   "of",   "and",  "to",    "in",    "is",   "that",  "for",   "it",    "as",    "was",  "with",  "be",
    "by",    "on",   "not",  "he",    "this",  "are",  "or",    "his",   "from",  "at",    "which", "but",  "have",
    "an",    "had",  "they", "you",   "were",  "their", "one",  "all",   "we",    "can",   "her",  "has",   "there",
    "been",  "if",   "more", "when",  "will",  "would", "who",  "so",    "no",    "time",  "up",   "out",   "about",
    "into",  "than", "them", "only",  "other", "new",   "some", "could", "these", "two",   "may",  "first"};

template <class Visit>
void for_each_token(const PromptSpec& prompt, const TokenSpace& space, Visit visit) {
  SLUICE_CHECK_LT(space.min_token_id, space.max_token_id);
  const auto range = static_cast<std::uint64_t>(space.max_token_id - space.min_token_id);
  for (const PromptSegment& segment : prompt.segments) {
    const std::uint64_t stream = splitmix64(space.seed ^ splitmix64(segment.key));
    for (std::int32_t i = 0; i < segment.num_tokens; ++i) {
      const auto offset = static_cast<std::uint64_t>(uniform_from(stream, static_cast<std::uint64_t>(i)) *
                                                     static_cast<double>(range));
      visit(space.min_token_id + static_cast<std::int32_t>(offset < range ? offset : range - 1));
    }
  }
}

}  // namespace

std::int64_t PromptSpec::num_planned_tokens() const {
  std::int64_t total = 0;
  for (const PromptSegment& segment : segments) total += segment.num_tokens;
  return total;
}

std::vector<std::int32_t> prompt_token_ids(const PromptSpec& prompt, const TokenSpace& space) {
  std::vector<std::int32_t> ids;
  ids.reserve(static_cast<std::size_t>(prompt.num_planned_tokens()));
  for_each_token(prompt, space, [&](std::int32_t id) { ids.push_back(id); });
  return ids;
}

std::string prompt_text(const PromptSpec& prompt, const TokenSpace& space) {
  if (!prompt.literal_text.empty()) return prompt.literal_text;
  std::string text;
  for_each_token(prompt, space, [&](std::int32_t id) {
    if (!text.empty()) text += ' ';
    text += kWords[static_cast<std::size_t>(id) % kWords.size()];
  });
  return text;
}

}  // namespace sluice::loadgen
