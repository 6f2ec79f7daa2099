// Malformed files, unsupported models, missing files and invalid text: clear
// errors (naming the file and field), never a crash. Plus a small GPT-2-style
// tokenizer written here (the kind `sluice make-model` writes), checked
// against the reference.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "sluice/common/io.h"
#include "test_support.h"

namespace sluice::test {
namespace {

using nlohmann::json;

constexpr const char* kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// GPT-2 byte -> code point (the vocabulary's spelling of a byte).
std::string byte_char(int b) {
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  int cp = b;
  if (!printable) {
    int n = 0;
    for (int x = 0; x < b; ++x) {
      if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF))) ++n;
    }
    cp = 256 + n;
  }
  std::string out;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return out;
}

// A small byte-level BPE tokenizer: 256 byte tokens, a few merges, two specials.
json small_gpt2_tokenizer() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"\xC4\xA0", "t"}, {"h", "e"}, {"\xC4\xA0t", "he"}, {"l", "l"}, {"ll", "o"}, {"\xC4\xA0", "w"},
      {"o", "r"}, {"\xC4\xA0w", "or"}, {"l", "d"}, {"\xC4\xA0wor", "ld"}, {"e", "ll"}, {"H", "ello"}};
  json merge_list = json::array();
  int next_id = 256;
  for (const auto& [a, b] : merges) {
    merge_list.push_back(a + " " + b);
    if (!vocab.contains(a + b)) vocab[a + b] = next_id++;
  }
  // "ello" is reachable only through "e"+"ll"+"o"... give it an id too.
  vocab["ello"] = next_id++;
  const int bos = next_id++;
  const int eos = next_id++;
  json pre = {{"type", "Sequence"},
              {"pretokenizers",
               {{{"type", "Split"}, {"pattern", {{"Regex", kLlama3Regex}}}, {"behavior", "Isolated"}, {"invert", false}},
                {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
  json post = {{"type", "TemplateProcessing"},
               {"single", {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                           {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
               {"pair", json::array()},
               {"special_tokens", {{"<|begin_of_text|>", {{"id", "<|begin_of_text|>"}, {"ids", {bos}}, {"tokens", {"<|begin_of_text|>"}}}}}}};
  const auto added = [](int id, const char* content) {
    return json{{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
                {"rstrip", false}, {"normalized", false}, {"special", true}};
  };
  return json{{"version", "1.0"},
              {"added_tokens", {added(bos, "<|begin_of_text|>"), added(eos, "<|end_of_text|>")}},
              {"normalizer", nullptr},
              {"pre_tokenizer", pre},
              {"post_processor", post},
              {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
              {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"fuse_unk", false},
                         {"byte_fallback", false}, {"vocab", vocab}, {"merges", merge_list}}}};
}

json small_config() {
  return json{{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|end_of_text|>"},
              {"chat_template", "{{ messages }}"}, {"tokenizer_class", "PreTrainedTokenizerFast"}};
}

std::string load_error(const json& tokenizer, const json& config = json::object()) {
  auto result = Tokenizer::from_json(tokenizer.dump(), config.dump());
  return result.ok() ? std::string("(loaded)") : result.error_message();
}

class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/sluice_tokenizer_test_XXXXXX";
    path_ = mkdtemp(pattern);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(SmallGpt2Tokenizer, MatchesReference) {
  TempDir dir;
  ASSERT_TRUE(write_file(dir.path() + "/tokenizer.json", small_gpt2_tokenizer().dump()).ok());
  ASSERT_TRUE(write_file(dir.path() + "/tokenizer_config.json", small_config().dump()).ok());
  auto tokenizer = Tokenizer::load(dir.path());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error_message();
  std::vector<std::string> inputs = {"Hello world", "the world", "<|begin_of_text|>Hello<|end_of_text|>",
                                     "héllo wörld 😀", "  spaces\n\nnewlines", "it's 12345"};
  const auto reference = run_reference(dir.path(), inputs);
  ASSERT_TRUE(reference.ok()) << reference.error_message();
  const std::vector<ReferenceResult>& expected = reference.value();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_EQ(tokenizer->encode(inputs[i], false), expected[i].ids) << inputs[i];
    EXPECT_EQ(tokenizer->encode(inputs[i], true), expected[i].ids_special) << inputs[i];
    EXPECT_EQ(tokenizer->decode(tokenizer->encode(inputs[i], false), false), inputs[i]);
  }
  EXPECT_EQ(tokenizer->bos_token(), "<|begin_of_text|>");
  EXPECT_TRUE(tokenizer->bos_token_id().has_value());
  EXPECT_TRUE(tokenizer->is_special(*tokenizer->eos_token_id()));
  EXPECT_EQ(tokenizer->chat_template(), "{{ messages }}");
}

TEST(BadTokenizerJson, NotJson) {
  const auto result = Tokenizer::from_json("{ not json", "");
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.error_message().find("tokenizer.json"), std::string::npos) << result.error_message();
  EXPECT_NE(result.error_message().find("not valid JSON"), std::string::npos) << result.error_message();
}

TEST(BadTokenizerJson, NotAnObject) {
  EXPECT_NE(load_error(json::array()).find("expected an object"), std::string::npos);
}

TEST(BadTokenizerJson, MissingModel) {
  json t = small_gpt2_tokenizer();
  t.erase("model");
  const std::string error = load_error(t);
  EXPECT_NE(error.find("model: missing"), std::string::npos) << error;
}

TEST(BadTokenizerJson, UnsupportedModelTypesAreNamed) {
  for (const char* type : {"Unigram", "WordPiece", "WordLevel", "Banana"}) {
    json t = small_gpt2_tokenizer();
    t["model"]["type"] = type;
    const std::string error = load_error(t);
    EXPECT_NE(error.find(std::string("\"") + type + "\""), std::string::npos) << error;
    EXPECT_NE(error.find("model.type"), std::string::npos) << error;
  }
}

TEST(BadTokenizerJson, WrongTypesNameTheField) {
  struct Case {
    const char* what;
    std::function<void(json&)> mutate;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"vocab array", [](json& t) { t["model"]["vocab"] = json::array(); }, "model.vocab"},
      {"vocab id string", [](json& t) { t["model"]["vocab"]["a"] = "one"; }, "model.vocab[\"a\"]"},
      {"merges number", [](json& t) { t["model"]["merges"] = 5; }, "model.merges"},
      {"merge without space", [](json& t) { t["model"]["merges"][0] = "ab"; }, "model.merges[0]"},
      {"model type number", [](json& t) { t["model"]["type"] = 3; }, "model.type"},
      {"added token without id", [](json& t) { t["added_tokens"][0].erase("id"); }, "added_tokens[0].id"},
      {"added tokens object", [](json& t) { t["added_tokens"] = json::object(); }, "added_tokens"},
      {"unknown normalizer", [](json& t) { t["normalizer"] = {{"type", "Frobnicate"}}; }, "normalizer.type"},
      {"unknown pre-tokenizer", [](json& t) { t["pre_tokenizer"]["pretokenizers"][0]["type"] = "Zap"; },
       "pre_tokenizer.pretokenizers[0].type"},
      {"unknown decoder", [](json& t) { t["decoder"] = {{"type", "Mystery"}}; }, "decoder.type"},
      {"bad regex", [](json& t) { t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed"; },
       "pre_tokenizer.pretokenizers[0].pattern.Regex"},
      {"pattern neither", [](json& t) { t["pre_tokenizer"]["pretokenizers"][0]["pattern"] = json::object(); },
       "pre_tokenizer.pretokenizers[0].pattern"},
      {"unknown post-processor", [](json& t) { t["post_processor"] = {{"type", "Nope"}}; }, "post_processor.type"},
      {"template token not in vocab",
       [](json& t) {
         t["post_processor"]["special_tokens"] = json::object();
         t["post_processor"]["single"][0]["SpecialToken"]["id"] = "<nope>";
       },
       "<nope>"},
      {"flag wrong type", [](json& t) { t["model"]["byte_fallback"] = "yes"; }, "model.byte_fallback"},
  };
  for (const Case& c : cases) {
    json t = small_gpt2_tokenizer();
    c.mutate(t);
    const std::string error = load_error(t);
    EXPECT_NE(error.find(c.expected), std::string::npos) << c.what << ": " << error;
    EXPECT_EQ(error.find("tokenizer.json"), 0u) << c.what << ": " << error;
  }
}

TEST(BadTokenizerConfig, ErrorsNameTheField) {
  const json t = small_gpt2_tokenizer();
  json config = small_config();
  config["chat_template"] = 5;
  std::string error = load_error(t, config);
  EXPECT_NE(error.find("tokenizer_config.json: chat_template"), std::string::npos) << error;
  config = small_config();
  config["bos_token"] = 7;
  error = load_error(t, config);
  EXPECT_NE(error.find("tokenizer_config.json: bos_token"), std::string::npos) << error;
  const auto result = Tokenizer::from_json(t.dump(), "{oops");
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.error_message().find("tokenizer_config.json"), std::string::npos) << result.error_message();
}

TEST(TokenizerConfig, NamedChatTemplatesPickDefault) {
  json config = small_config();
  config["chat_template"] = json::array({{{"name", "tool_use"}, {"template", "T"}}, {{"name", "default"}, {"template", "D"}}});
  auto tokenizer = Tokenizer::from_json(small_gpt2_tokenizer().dump(), config.dump());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error_message();
  EXPECT_EQ(tokenizer->chat_template(), "D");
}

TEST(MissingFiles, DirectoryWithoutTokenizerJson) {
  TempDir dir;
  const auto result = Tokenizer::load(dir.path());
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.error_message().find(dir.path() + "/tokenizer.json"), std::string::npos) << result.error_message();
  const auto nowhere = Tokenizer::load("/nonexistent/sluice/model");
  ASSERT_FALSE(nowhere.ok());
  EXPECT_NE(nowhere.error_message().find("tokenizer.json"), std::string::npos) << nowhere.error_message();
}

TEST(MissingFiles, ConfigIsOptional) {
  TempDir dir;
  ASSERT_TRUE(write_file(dir.path() + "/tokenizer.json", small_gpt2_tokenizer().dump()).ok());
  auto tokenizer = Tokenizer::load(dir.path());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error_message();
  EXPECT_EQ(tokenizer->chat_template(), "");
  EXPECT_EQ(tokenizer->bos_token(), "");
  EXPECT_FALSE(tokenizer->bos_token_id().has_value());
}

TEST(MissingFiles, MalformedFileInDirectoryNamesDirectory) {
  TempDir dir;
  ASSERT_TRUE(write_file(dir.path() + "/tokenizer.json", "[1,2").ok());
  const auto result = Tokenizer::load(dir.path());
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.error_message().find(dir.path()), std::string::npos) << result.error_message();
}

// Invalid UTF-8 is tokenized as if each maximal invalid subpart were U+FFFD
// (the reference test checks the same bytes against JavaScript).
TEST(InvalidUtf8, ReplacedByReplacementCharacter) {
  for (const char* name : {"llama3", "llama2"}) {
    const Tokenizer& tokenizer = cached_tokenizer(name);
    EXPECT_EQ(tokenizer.encode("a\xff" "b", false), tokenizer.encode("a\xEF\xBF\xBD" "b", false)) << name;
    EXPECT_EQ(tokenizer.encode("\xe4\xb8", false), tokenizer.encode("\xEF\xBF\xBD", false)) << name;
    EXPECT_EQ(tokenizer.encode("\xed\xa0\x80", false),
              tokenizer.encode("\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD", false)) << name;
  }
}

TEST(Decode, IdsOutsideTheVocabularyDoNotCrash) {
  const Tokenizer& llama3 = cached_tokenizer("llama3");
  const std::vector<TokenId> ids = {-5, llama3.vocab_size(), 1000000000};
  EXPECT_EQ(llama3.decode(ids, false), "");  // no unk token: nothing
  const Tokenizer& llama2 = cached_tokenizer("llama2");
  EXPECT_EQ(llama2.decode(ids, false), "<unk><unk><unk>");
  EXPECT_EQ(llama2.decode(ids, true), "");
  EXPECT_EQ(llama3.decode(std::vector<TokenId>{}, false), "");
}

TEST(Accessors, RealTokenizers) {
  const Tokenizer& llama3 = cached_tokenizer("llama3");
  EXPECT_EQ(llama3.bos_token(), "<|begin_of_text|>");
  EXPECT_EQ(llama3.bos_token_id(), llama3.token_to_id("<|begin_of_text|>"));
  EXPECT_EQ(llama3.vocab_size(), 128256);
  EXPECT_FALSE(llama3.chat_template().empty());
  const Tokenizer& qwen3 = cached_tokenizer("qwen3");
  EXPECT_EQ(qwen3.bos_token(), "");
  EXPECT_FALSE(qwen3.bos_token_id().has_value());
  EXPECT_EQ(qwen3.eos_token(), "<|im_end|>");
  EXPECT_TRUE(qwen3.is_special(*qwen3.token_to_id("<|im_start|>")));
  EXPECT_FALSE(qwen3.is_special(*qwen3.token_to_id("<think>")));
  EXPECT_FALSE(qwen3.is_special(*qwen3.token_to_id("hello")));
  const Tokenizer& deepseek = cached_tokenizer("deepseek_v3");
  EXPECT_EQ(deepseek.bos_token_id(), 0);
  EXPECT_EQ(cached_tokenizer("llama2").chat_template(), "");
}

}  // namespace
}  // namespace sluice::test
