// Long inputs that become one huge pre-tokenizer piece (no spaces, one
// repeated character) must encode without going quadratic and without losing
// text; concurrent encodes must agree with sequential ones.
#include <gtest/gtest.h>

#include <thread>

#include "test_support.h"

namespace sluice::test {
namespace {

constexpr std::size_t kLongBytes = 128 * 1024;  // the 1 MiB cases are in bench/tokenizer

std::string repeat(const std::string& unit, std::size_t bytes) {
  std::string out;
  while (out.size() + unit.size() <= bytes) out += unit;
  return out;
}

std::string letters_without_spaces(std::size_t bytes) {
  std::string out;
  std::uint64_t state = 99;
  while (out.size() < bytes) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    out.push_back(static_cast<char>('a' + (state >> 59) % 26));
  }
  return out;
}

class LongInputTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LongInputTest, HugePiecesRoundTrip) {
  const Tokenizer& tokenizer = cached_tokenizer(GetParam());
  const std::vector<std::string> inputs = {
      letters_without_spaces(kLongBytes), repeat("a", kLongBytes),   repeat(" ", kLongBytes),
      repeat("\n", kLongBytes),           repeat("!", kLongBytes),   repeat("7", kLongBytes),
      repeat("\xC3\xA9", kLongBytes),     repeat("\xE6\xBC\xA2", kLongBytes), repeat(" \t", kLongBytes),
  };
  for (const std::string& input : inputs) {
    const auto ids = tokenizer.encode(input, false);
    EXPECT_LT(ids.size(), input.size() + 1) << GetParam();
    EXPECT_EQ(tokenizer.decode(ids, false), input)
        << GetParam() << ": " << input.size() << " bytes of '" << input.substr(0, 3) << "'";
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, LongInputTest,
                         ::testing::Values("llama3", "qwen3", "deepseek_v3", "gemma3"),
                         [](const auto& info) { return info.param; });

TEST(ConcurrentEncode, ThreadsAgreeWithSequential) {
  const Tokenizer& tokenizer = cached_tokenizer("deepseek_v3");
  std::vector<std::vector<TokenId>> expected;
  for (const auto& text : corpus()) expected.push_back(tokenizer.encode(text, true));
  constexpr int kNumThreads = 4;
  std::vector<int> num_mismatches(kNumThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kNumThreads; ++t) {
    threads.emplace_back([&, t] {
      for (std::size_t i = 0; i < corpus().size(); ++i) {
        // Different orders so threads interleave on different inputs.
        const std::size_t k = (i * 7 + static_cast<std::size_t>(t) * 13) % corpus().size();
        if (tokenizer.encode(corpus()[k], true) != expected[k]) ++num_mismatches[static_cast<std::size_t>(t)];
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kNumThreads; ++t) EXPECT_EQ(num_mismatches[static_cast<std::size_t>(t)], 0) << "thread " << t;
}

}  // namespace
}  // namespace sluice::test
