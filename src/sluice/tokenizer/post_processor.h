// Special tokens added around an encoded text when add_special_tokens is set,
// resolved at load into a template: [ids before] A [ids after].
//
// Source, in order: tokenizer_config.json's add_bos_token / add_eos_token for
// the tokenizer classes whose Hugging Face implementation rebuilds the
// post-processor from them (Llama, CodeLlama, Gemma: e.g. DeepSeek V3 ships a
// ByteLevel post-processor with add_bos_token = true and gets a BOS); else
// tokenizer.json's post_processor (TemplateProcessing, Bert/RobertaProcessing,
// ByteLevel = nothing, or a Sequence of those).
#pragma once

#include <string>
#include <vector>

#include "sluice/common/ids.h"
#include "sluice/tokenizer/bpe.h"
#include "sluice/tokenizer/json_fields.h"

namespace sluice::tokenizer_detail {

struct SpecialTokenTemplate {
  std::vector<TokenId> before;  // e.g. BOS
  std::vector<TokenId> after;   // e.g. EOS
};

// `find_token` resolves token strings to ids (vocabulary and added tokens).
SpecialTokenTemplate special_token_template_from_json(const Json& post_processor,
                                                      std::string_view path,
                                                      const BpeModel& model);

}  // namespace sluice::tokenizer_detail
