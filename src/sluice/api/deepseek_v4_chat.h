// DeepSeek-V4's chat encoding. Its checkpoints ship a Python encoder
// (encoding/encoding_dsv4.py) and no Jinja chat template, so serve renders
// deepseek_v4 prompts with this one (api::ChatTemplate::native) unless a
// template is given. It writes what that encoder writes for the OpenAI
// message list (../shared/models/deepseek-v41-flash.md §5; fixtures from the
// encoder itself: tools/reference/deepseek_v4_chat_fixtures.py):
//   <｜begin▁of▁sentence｜>[system content][\n\n## Tools ...]
//   <｜User｜>user text<｜Assistant｜></think>answer<｜end▁of▁sentence｜>
//   <｜User｜>...<｜Assistant｜><think>          (thinking mode, the turn to write)
// - Tools (the request's) join the first system message, or an empty one put first.
// - An assistant's tool calls are a DSML block (<｜DSML｜tool_calls>, an invoke a
//   call, a parameter an argument: string="true" for strings, else its JSON).
// - Tool results join the next user turn as <tool_result>...</tool_result>,
//   in the order the assistant called them; consecutive user turns merge.
// - chat_template_kwargs: `thinking` (or `enable_thinking`) true opens the
//   reasoning block; earlier turns' reasoning is dropped unless tools are
//   present (or `drop_thinking` is false). `reasoning_effort` "max" (or
//   OpenAI's "xhigh") puts DeepSeek's maximum-effort preamble first; any other
//   value adds nothing (gateways forward OpenAI's values verbatim).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "sluice/api/chat_template.h"
#include "sluice/common/result.h"

namespace sluice::api {

Result<std::string> render_deepseek_v4_chat(const nlohmann::ordered_json& messages, const ChatRenderOptions& options);

}  // namespace sluice::api
