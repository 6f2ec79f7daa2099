// Random byte-level edits of a text, for parser tests that compare against an
// oracle on almost-valid input: each edit replaces, inserts or deletes one
// byte, the new bytes drawn from `alphabet`.
#pragma once

#include <cstddef>
#include <random>
#include <string>

namespace sluice::testing {

inline void mutate_bytes(std::string& text, int num_edits, const std::string& alphabet, std::mt19937_64& rng) {
  for (int m = num_edits; m > 0 && !text.empty(); --m) {
    const std::size_t at = std::uniform_int_distribution<std::size_t>(0, text.size() - 1)(rng);
    const char c = alphabet[std::uniform_int_distribution<std::size_t>(0, alphabet.size() - 1)(rng)];
    switch (std::uniform_int_distribution<int>(0, 2)(rng)) {
      case 0: text[at] = c; break;
      case 1: text.insert(text.begin() + static_cast<std::ptrdiff_t>(at), c); break;
      default: text.erase(at, 1); break;
    }
  }
}

}  // namespace sluice::testing
