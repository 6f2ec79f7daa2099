// The server's per-token work on one core, as a streamed chat response does
// it: incremental detokenization, stop-string matching, the output parser,
// building the chunk JSON and its SSE line. Socket writes are not included.
// The bar: >= 20,000 streamed tokens/s per core.
#include <benchmark/benchmark.h>

#include <random>

#include "sluice/model/tokenizer_builder.h"
#include "sluice/server/openai_response.h"
#include "sluice/server/output_parser.h"
#include "sluice/server/stop_matcher.h"
#include "sluice/tokenizer/tokenizer.h"

namespace sluice::server {
namespace {

void BM_StreamedChatToken(benchmark::State& state) {
  const BuiltTokenizer built = build_byte_level_tokenizer(2048).value();
  const Tokenizer tokenizer = Tokenizer::from_json(built.tokenizer_json, built.tokenizer_config_json).value();
  std::mt19937 rng(1);
  std::vector<TokenId> ids(4096);
  for (TokenId& id : ids) id = static_cast<TokenId>(rng() % static_cast<unsigned>(built.num_tokens - 8));
  const ResponseHeader header{.id = "chatcmpl-0123456789abcdef01234567", .created_s = 1730000000, .model = "m"};
  const bool with_parser = state.range(0) != 0;
  std::size_t bytes = 0;
  std::size_t i = 0;
  IncrementalDetokenizer detokenizer(tokenizer, true);
  StopMatcher stop({"</answer>", "\n\nUser:"});
  OutputParser parser(output_format_by_name(with_parser ? "qwen3" : "none").value(), {.parse_tool_calls = with_parser});
  for (auto _ : state) {
    const std::string text = detokenizer.push(ids[i++ % ids.size()]);
    const StopMatcher::Step step = stop.feed(text);
    ParsedDelta delta;
    parser.feed(step.text, delta);
    nlohmann::json choice = {{"index", 0}, {"delta", chat_delta(delta, false)}, {"logprobs", nullptr},
                             {"finish_reason", nullptr}};
    const std::string line = sse_event(chat_chunk(header, nlohmann::json::array({std::move(choice)}), true));
    bytes += line.size();
    benchmark::DoNotOptimize(line.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
}
BENCHMARK(BM_StreamedChatToken)->Arg(0)->Arg(1)->ArgName("qwen3_parser");

}  // namespace
}  // namespace sluice::server
