#include "sluice/tokenizer/tokenizer.h"
#include "sluice/tokenizer/utf8.h"

namespace sluice {
namespace {

using tokenizer_detail::kReplacementChar;

// An incomplete character at the end of a text decodes to exactly one U+FFFD
// (one per maximal invalid subpart), so holding back one is enough.
bool ends_with_replacement(std::string_view text) { return text.ends_with(kReplacementChar); }

// Past this many ids without a clean end, the window is cut down (a stream
// that keeps producing invalid bytes must not make each push slower).
constexpr std::size_t kMaxWindowIds = 16;
// Ids kept when cutting: an incomplete character spans at most 3 bytes, so
// at most 3 ids, plus one for context.
constexpr std::size_t kIdsKeptWhenCut = 4;

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string IncrementalDetokenizer::push(TokenId id) {
  ids_.push_back(id);
  const std::string text = tokenizer_.decode(ids_, skip_special_tokens_);
  if (text.size() < num_emitted_bytes_) return {};  // decoders never shrink; be safe
  const bool hold_back = ends_with_replacement(text) && text.size() - num_emitted_bytes_ >= kReplacementChar.size();
  const std::size_t end = hold_back ? text.size() - kReplacementChar.size() : text.size();
  std::string chunk = text.substr(num_emitted_bytes_, end - num_emitted_bytes_);
  num_emitted_bytes_ = end;

  if (!hold_back) {
    // Everything is out: keep only the last id as context for the next one.
    ids_.erase(ids_.begin(), ids_.end() - 1);
    num_emitted_bytes_ = tokenizer_.decode(ids_, skip_special_tokens_).size();
  } else if (ids_.size() > kMaxWindowIds) {
    ids_.erase(ids_.begin(), ids_.end() - static_cast<std::ptrdiff_t>(kIdsKeptWhenCut));
    const std::string kept = tokenizer_.decode(ids_, skip_special_tokens_);
    num_emitted_bytes_ = ends_with_replacement(kept) ? kept.size() - kReplacementChar.size() : kept.size();
  }
  return chunk;
}

std::string IncrementalDetokenizer::flush() {
  const std::string text = tokenizer_.decode(ids_, skip_special_tokens_);
  std::string chunk = text.size() > num_emitted_bytes_ ? text.substr(num_emitted_bytes_) : std::string();
  ids_.clear();
  num_emitted_bytes_ = 0;
  return chunk;
}

}  // namespace sluice
