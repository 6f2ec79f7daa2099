#include "sluice/loadgen/stream_chunk.h"

#include <gtest/gtest.h>

namespace sluice::loadgen {
namespace {

TEST(StreamChunk, CompletionTextCountsAndEmptyFinalChunkDoesNot) {
  auto chunk = interpret_stream_data(R"({"choices":[{"index":0,"text":"Hi","finish_reason":null}]})");
  EXPECT_EQ(chunk.num_text_pieces, 1);
  EXPECT_FALSE(chunk.done);
  EXPECT_FALSE(chunk.error);
  chunk = interpret_stream_data(R"({"choices":[{"index":0,"text":"","finish_reason":"length"}],"usage":null})");
  EXPECT_EQ(chunk.num_text_pieces, 0);
  EXPECT_FALSE(chunk.usage);
}

TEST(StreamChunk, EmptyCompletionTextBeforeTheFinishIsAToken) {
  // vLLM sends a chunk per generated token even when it decodes to no text yet.
  EXPECT_EQ(interpret_stream_data(R"({"choices":[{"index":0,"text":"","finish_reason":null}]})").num_text_pieces, 1);
  EXPECT_EQ(interpret_stream_data(R"({"choices":[{"index":0,"text":""}]})").num_text_pieces, 1);
  // Chat's opening role chunk has empty content and is not a token.
  EXPECT_EQ(interpret_stream_data(R"({"choices":[{"delta":{"role":"assistant","content":""},"finish_reason":null}]})")
                .num_text_pieces,
            0);
}

TEST(StreamChunk, ChatDeltaContentAndReasoningCount) {
  EXPECT_EQ(interpret_stream_data(R"({"choices":[{"delta":{"role":"assistant","content":""}}]})").num_text_pieces, 0);
  EXPECT_EQ(interpret_stream_data(R"({"choices":[{"delta":{"content":"a"}},{"delta":{"reasoning_content":"b"}}]})")
                .num_text_pieces,
            2);
}

TEST(StreamChunk, UsageWithCachedTokens) {
  const auto chunk = interpret_stream_data(
      R"({"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":7,"total_tokens":107,)"
      R"("prompt_tokens_details":{"cached_tokens":64}}})");
  ASSERT_TRUE(chunk.usage);
  EXPECT_EQ(chunk.usage->num_prompt_tokens, 100);
  EXPECT_EQ(chunk.usage->num_output_tokens, 7);
  EXPECT_EQ(chunk.usage->num_cached_tokens, 64);
}

TEST(StreamChunk, DoneErrorsAndGarbage) {
  EXPECT_TRUE(interpret_stream_data("[DONE]").done);
  const auto error = interpret_stream_data(R"({"error":{"message":"boom","type":"server_error"}})");
  ASSERT_TRUE(error.error);
  EXPECT_EQ(*error.error, "boom");
  EXPECT_TRUE(interpret_stream_data("not json").error);
  EXPECT_TRUE(interpret_stream_data("[1,2]").error);
}

}  // namespace
}  // namespace sluice::loadgen
