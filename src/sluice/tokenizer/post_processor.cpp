#include "sluice/tokenizer/post_processor.h"

#include <fmt/format.h>

namespace sluice::tokenizer_detail {
namespace {

TokenId resolve(const BpeModel& model, const std::string& token, std::string_view path) {
  const auto id = model.find_token(token);
  if (!id) throw_load_error(path, fmt::format("special token \"{}\" is not in the vocabulary", token));
  return *id;
}

void add_processor(const Json& value, std::string_view path, const BpeModel& model,
                   SpecialTokenTemplate& out) {
  const std::string& type = expect_string(required_field(value, "type", path), join_path(path, "type"));
  if (type == "ByteLevel") return;  // offsets only; no tokens
  if (type == "Sequence") {
    const std::string list_path = join_path(path, "processors");
    const Json& list = expect_array(required_field(value, "processors", path), list_path);
    for (std::size_t i = 0; i < list.size(); ++i) add_processor(list[i], fmt::format("{}[{}]", list_path, i), model, out);
    return;
  }
  if (type == "TemplateProcessing") {
    const std::string single_path = join_path(path, "single");
    const Json& single = expect_array(required_field(value, "single", path), single_path);
    const Json* special_tokens = optional_field(value, "special_tokens");
    SpecialTokenTemplate result;
    bool seen_sequence = false;
    for (std::size_t i = 0; i < single.size(); ++i) {
      const std::string item_path = fmt::format("{}[{}]", single_path, i);
      const Json& item = expect_object(single[i], item_path);
      if (const Json* special = optional_field(item, "SpecialToken")) {
        const std::string token_path = join_path(item_path, "SpecialToken.id");
        const std::string& token = expect_string(required_field(*special, "id", join_path(item_path, "SpecialToken")), token_path);
        std::vector<TokenId> ids;
        // Prefer the ids the template declares for this token; else look it up.
        const Json* declared = special_tokens == nullptr ? nullptr : optional_field(*special_tokens, token);
        if (declared != nullptr && optional_field(*declared, "ids") != nullptr) {
          const std::string ids_path = fmt::format("{}.special_tokens[\"{}\"].ids", path, token);
          const Json& list = expect_array(*optional_field(*declared, "ids"), ids_path);
          for (const Json& id : list) ids.push_back(static_cast<TokenId>(expect_int(id, ids_path)));
        } else {
          ids.push_back(resolve(model, token, token_path));
        }
        auto& target = seen_sequence ? result.after : result.before;
        target.insert(target.end(), ids.begin(), ids.end());
      } else if (optional_field(item, "Sequence") != nullptr) {
        seen_sequence = true;
      } else {
        throw_load_error(item_path, "expected {\"SpecialToken\": ...} or {\"Sequence\": ...}");
      }
    }
    out = result;
    return;
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    const auto first_token = [&](const char* key) {
      const std::string key_path = join_path(path, key);
      const Json& pair = expect_array(required_field(value, key, path), key_path);
      if (pair.empty()) throw_load_error(key_path, "expected [token, id]");
      return resolve(model, expect_string(pair[0], key_path + "[0]"), key_path);
    };
    out.before = {first_token("cls")};
    out.after = {first_token("sep")};
    return;
  }
  throw_load_error(join_path(path, "type"), fmt::format("unsupported post-processor type \"{}\"", type));
}

}  // namespace

SpecialTokenTemplate special_token_template_from_json(const Json& post_processor,
                                                      std::string_view path,
                                                      const BpeModel& model) {
  SpecialTokenTemplate result;
  if (!post_processor.is_null()) add_processor(post_processor, path, model, result);
  return result;
}

}  // namespace sluice::tokenizer_detail
