// Tokenizer::load / from_json: builds the Model from tokenizer.json and
// tokenizer_config.json. Every problem with the files is a Result error that
// names the file and the field.
#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "sluice/common/io.h"
#include "sluice/tokenizer/json_fields.h"
#include "sluice/tokenizer/tokenizer.h"
#include "sluice/tokenizer/tokenizer_model.h"

namespace sluice {
namespace {

using tokenizer_detail::Json;
using tokenizer_detail::LoadError;
using tokenizer_detail::Model;
using tokenizer_detail::bool_or;
using tokenizer_detail::expect_array;
using tokenizer_detail::expect_object;
using tokenizer_detail::expect_string;
using tokenizer_detail::join_path;
using tokenizer_detail::optional_field;
using tokenizer_detail::required_field;
using tokenizer_detail::throw_load_error;

// Largest vocabulary we accept: ids index a dense table.
constexpr std::int64_t kMaxVocabSize = 16 * 1024 * 1024;

// Tokenizer classes whose Hugging Face implementation rebuilds the
// post-processor from add_bos_token / add_eos_token (defaults: BOS yes, EOS no).
bool class_uses_add_bos_eos(std::string name) {
  if (name.ends_with("Fast")) name.resize(name.size() - 4);
  return name == "LlamaTokenizer" || name == "CodeLlamaTokenizer" || name == "GemmaTokenizer";
}

Result<Json> parse_json(std::string_view text, std::string_view file_name) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    return Error{fmt::format("{}: not valid JSON: {}", file_name, e.what())};
  }
}

// A token given in tokenizer_config.json: a string, or {"content": ..., "__type": "AddedToken"}.
std::string config_token(const Json& config, std::string_view key) {
  const Json* value = optional_field(config, key);
  if (value == nullptr) return "";
  if (value->is_string()) return value->get<std::string>();
  if (value->is_object()) return expect_string(required_field(*value, "content", key), join_path(key, "content"));
  throw_load_error(key, fmt::format("expected a string or an AddedToken object, got {}", value->type_name()));
}

std::string config_chat_template(const Json& config) {
  const Json* value = optional_field(config, "chat_template");
  if (value == nullptr) return "";
  if (value->is_string()) return value->get<std::string>();
  const Json& list = expect_array(*value, "chat_template");
  std::string chosen;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string path = fmt::format("chat_template[{}]", i);
    const Json& item = expect_object(list[i], path);
    const std::string& name = expect_string(required_field(item, "name", path), join_path(path, "name"));
    const std::string& text = expect_string(required_field(item, "template", path), join_path(path, "template"));
    if (name == "default") chosen = text;
  }
  return chosen;
}

void load_tokenizer_json(const Json& root, Model& model) {
  expect_object(root, "");
  const Json& model_json = expect_object(required_field(root, "model", ""), "model");

  std::string type;
  if (const Json* type_json = optional_field(model_json, "type")) {
    type = expect_string(*type_json, "model.type");
  } else if (optional_field(model_json, "merges") != nullptr && optional_field(model_json, "vocab") != nullptr &&
             model_json["vocab"].is_object()) {
    type = "BPE";  // old files omit the type; vocab + merges means BPE
  } else {
    throw_load_error("model.type", "missing, and the model is not recognisable as BPE");
  }
  if (type != "BPE") {
    throw_load_error("model.type",
                     fmt::format("unsupported tokenizer model type \"{}\" (only BPE is supported)", type));
  }

  const Json null_json;
  const auto component = [&](const char* key) -> const Json& {
    const Json* value = optional_field(root, key);
    return value == nullptr ? null_json : *value;
  };
  model.normalizer = tokenizer_detail::Normalizer::from_json(component("normalizer"), "normalizer");
  model.pre_tokenizer = tokenizer_detail::PreTokenizer::from_json(component("pre_tokenizer"), "pre_tokenizer");
  model.decoder = tokenizer_detail::Decoder::from_json(component("decoder"), "decoder");
  model.bpe = tokenizer_detail::BpeModel::from_json(model_json, "model", model.pre_tokenizer.byte_level());

  model.added_tokens = tokenizer_detail::added_tokens_from_json(optional_field(root, "added_tokens"), "added_tokens");
  for (const auto& token : model.added_tokens) {
    model.bpe.add_token(token.content, token.id);
    model.added_contents.insert(token.content);
    if (token.special) model.special_contents.insert(token.content);
  }
  model.bpe.finish_loading();
  model.splitter = tokenizer_detail::AddedTokenSplitter(model.added_tokens);
  model.special_template = tokenizer_detail::special_token_template_from_json(
      component("post_processor"), "post_processor", model.bpe);

  // id -> string: the vocabulary, then added tokens on top (they win, as in the reference).
  std::int64_t max_id = -1;
  model.bpe.for_each_vocab_entry([&](TokenId id, const std::string&) { max_id = std::max<std::int64_t>(max_id, id); });
  for (const auto& token : model.added_tokens) max_id = std::max<std::int64_t>(max_id, token.id);
  if (max_id + 1 > kMaxVocabSize) {
    throw_load_error("model.vocab", fmt::format("largest id {} exceeds the supported vocabulary size {}", max_id, kMaxVocabSize));
  }
  model.token_of_id.assign(static_cast<std::size_t>(max_id + 1), std::nullopt);
  model.bpe.for_each_vocab_entry([&](TokenId id, const std::string& token) {
    model.token_of_id[static_cast<std::size_t>(id)] = token;
  });
  for (const auto& token : model.added_tokens) model.token_of_id[static_cast<std::size_t>(token.id)] = token.content;
}

void load_tokenizer_config(const Json& config, Model& model) {
  expect_object(config, "");
  model.bos_token = config_token(config, "bos_token");
  model.eos_token = config_token(config, "eos_token");
  if (!model.bos_token.empty()) model.bos_id = model.bpe.find_token(model.bos_token);
  if (!model.eos_token.empty()) model.eos_id = model.bpe.find_token(model.eos_token);
  model.chat_template = config_chat_template(config);

  if (const Json* extra = optional_field(config, "additional_special_tokens")) {
    const Json& list = expect_array(*extra, "additional_special_tokens");
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string path = fmt::format("additional_special_tokens[{}]", i);
      if (list[i].is_object()) {
        model.special_contents.insert(expect_string(required_field(list[i], "content", path), join_path(path, "content")));
      } else {
        model.special_contents.insert(expect_string(list[i], path));
      }
    }
  }

  const std::string tokenizer_class =
      tokenizer_detail::string_or(config, "tokenizer_class", "", "");
  if (class_uses_add_bos_eos(tokenizer_class)) {
    const bool add_bos = bool_or(config, "add_bos_token", true, "");
    const bool add_eos = bool_or(config, "add_eos_token", false, "");
    model.special_template = {};
    if (add_bos && model.bos_id) model.special_template.before.push_back(*model.bos_id);
    if (add_eos && model.eos_id) model.special_template.after.push_back(*model.eos_id);
  }
}

}  // namespace

Result<Tokenizer> Tokenizer::from_json(std::string_view tokenizer_json,
                                       std::string_view tokenizer_config_json) {
  auto model = std::make_shared<Model>();
  SLUICE_TRY_ASSIGN(root, parse_json(tokenizer_json, "tokenizer.json"));
  try {
    load_tokenizer_json(root, *model);
  } catch (const LoadError& e) {
    return Error{fmt::format("tokenizer.json: {}", e.what())};
  }
  if (!tokenizer_config_json.empty()) {
    SLUICE_TRY_ASSIGN(config, parse_json(tokenizer_config_json, "tokenizer_config.json"));
    try {
      load_tokenizer_config(config, *model);
    } catch (const LoadError& e) {
      return Error{fmt::format("tokenizer_config.json: {}", e.what())};
    }
  }
  return Tokenizer(std::move(model));
}

Result<Tokenizer> Tokenizer::load(const std::string& model_dir) {
  const std::filesystem::path dir(model_dir);
  const std::filesystem::path json_path = dir / "tokenizer.json";
  const std::filesystem::path config_path = dir / "tokenizer_config.json";
  if (!std::filesystem::exists(json_path)) {
    return Error{fmt::format("tokenizer: {} not found", json_path.string())};
  }
  SLUICE_TRY_ASSIGN(json_text, read_file(json_path.string()));
  std::string config_text;
  if (std::filesystem::exists(config_path)) {
    SLUICE_TRY_ASSIGN(text, read_file(config_path.string()));
    config_text = std::move(text);
  }
  auto tokenizer = from_json(json_text, config_text);
  if (!tokenizer.ok()) return Error{fmt::format("{}: {}", model_dir, tokenizer.error_message())};
  return tokenizer;
}

}  // namespace sluice
