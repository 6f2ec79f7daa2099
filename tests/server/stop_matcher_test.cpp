// StopMatcher against an oracle: the text cut at the first occurrence of any
// stop string in the whole output, whatever the chunking.
#include "sluice/server/stop_matcher.h"

#include <random>

#include <gtest/gtest.h>

namespace sluice::server {
namespace {

struct Outcome {
  std::string text;
  bool stopped = false;
};

Outcome run(const std::vector<std::string>& stops, const std::vector<std::string>& pieces) {
  StopMatcher matcher(stops);
  Outcome out;
  for (const std::string& p : pieces) {
    auto step = matcher.feed(p);
    out.text += step.text;
    if (step.stopped) {
      out.stopped = true;
      return out;
    }
  }
  out.text += matcher.flush();
  return out;
}

Outcome oracle(const std::vector<std::string>& stops, const std::string& whole) {
  std::size_t first = std::string::npos;
  for (const auto& s : stops)
    if (!s.empty()) first = std::min(first, whole.find(s));
  if (first == std::string::npos) return {whole, false};
  return {whole.substr(0, first), true};
}

std::vector<std::string> random_chunks(const std::string& text, std::mt19937& rng) {
  std::vector<std::string> chunks;
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t n = std::min<std::size_t>(text.size() - i, 1 + rng() % 4);
    chunks.push_back(text.substr(i, n));
    i += n;
  }
  return chunks;
}

TEST(StopMatcher, StopSplitAcrossPiecesIsFoundAndNotLeaked) {
  const auto out = run({"STOP"}, {"hello S", "T", "OP and more"});
  EXPECT_EQ(out.text, "hello ");
  EXPECT_TRUE(out.stopped);
}

TEST(StopMatcher, PartialMatchThatFailsIsReleased) {
  StopMatcher matcher({"STOP"});
  auto a = matcher.feed("abc ST");
  EXPECT_EQ(a.text, "abc ");  // "ST" held back
  auto b = matcher.feed("ART");
  EXPECT_EQ(b.text, "START");
  EXPECT_FALSE(b.stopped);
  EXPECT_EQ(matcher.flush(), "");
}

TEST(StopMatcher, HeldTailIsFlushedAtEnd) {
  const auto out = run({"</end>"}, {"text </e"});
  EXPECT_EQ(out.text, "text </e");
  EXPECT_FALSE(out.stopped);
}

TEST(StopMatcher, EarliestOfSeveralWins) {
  const auto out = run({"world", "lo w"}, {"hello world"});
  EXPECT_EQ(out.text, "hel");
}

TEST(StopMatcher, RandomChunkingsMatchOracle) {
  std::mt19937 rng(7);
  const std::string alphabet = "ab\n<>";
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    const int len = static_cast<int>(rng() % 30);
    for (int i = 0; i < len; ++i) text += alphabet[rng() % alphabet.size()];
    std::vector<std::string> stops;
    const int num_stops = 1 + static_cast<int>(rng() % 3);
    for (int s = 0; s < num_stops; ++s) {
      std::string stop;
      const int stop_len = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < stop_len; ++i) stop += alphabet[rng() % alphabet.size()];
      stops.push_back(stop);
    }
    const auto expected = oracle(stops, text);
    const auto got = run(stops, random_chunks(text, rng));
    ASSERT_EQ(got.text, expected.text) << "text=" << text;
    ASSERT_EQ(got.stopped, expected.stopped) << "text=" << text;
  }
}

TEST(StopMatcher, MultibyteStopString) {
  // "é" is two bytes; a piece boundary inside the stop string is still found.
  const auto out = run({"café"}, {"un caf", "\xC3", "\xA9 noir"});
  EXPECT_EQ(out.text, "un ");
  EXPECT_TRUE(out.stopped);
}

}  // namespace
}  // namespace sluice::server
