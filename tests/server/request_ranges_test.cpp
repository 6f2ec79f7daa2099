// Every numeric field of a request, as it arrives on the wire (the body text
// through the server's own JSON reader, so 0 is an unsigned integer as it is
// there), at 0, negative, huge, fractional and null: a 400 whose param and
// message name the field, or the value the field's documented default or
// range says (openai_request.h lists them). "n": 0 once passed and hung.
#include <gtest/gtest.h>

#include <string>
#include <variant>

#include "sluice/server/openai_request.h"
#include "sluice/server/request_json.h"

namespace sluice::server {
namespace {

enum class Api { kChat, kCompletion };

// The request with `field: value` spliced in as text, parsed as the server parses it.
std::variant<GenerationOptions, ApiError> parse_with(Api api, const std::string& field, const std::string& value) {
  const std::string base = api == Api::kChat ? R"({"model": "m", "messages": [{"role": "user", "content": "hi"}])"
                                             : R"({"model": "m", "prompt": "hi")";
  const std::string text = base + ", \"" + field + "\": " + value + "}";
  auto body = parse_request_json(text);
  EXPECT_TRUE(body.ok()) << text;
  if (!body) return ApiError{};
  if (api == Api::kChat) {
    auto parsed = parse_chat_request(*body, {});
    if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
    return std::get<ChatRequest>(parsed).options;
  }
  auto parsed = parse_completion_request(*body, {});
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  return std::get<CompletionRequest>(parsed).options;
}

void expect_refused(Api api, const std::string& field, const std::string& value) {
  const auto result = parse_with(api, field, value);
  const auto* error = std::get_if<ApiError>(&result);
  ASSERT_NE(error, nullptr) << field << " = " << value << " was accepted";
  EXPECT_EQ(error->http_status, 400) << field << " = " << value;
  EXPECT_EQ(error->param, field) << field << " = " << value << ": " << error->message;
  EXPECT_NE(error->message.find(field), std::string::npos) << error->message;
}

GenerationOptions expect_accepted(Api api, const std::string& field, const std::string& value) {
  auto result = parse_with(api, field, value);
  if (auto* error = std::get_if<ApiError>(&result)) {
    ADD_FAILURE() << field << " = " << value << " refused: " << error->message;
    return {};
  }
  return std::get<GenerationOptions>(result);
}

// Values past every bound: past int32, past int64, past uint64, and a double.
const char* const kHuge[] = {"2147483648", "9223372036854775808", "18446744073709551616", "1e30"};

TEST(RequestRanges, CountsMustBePositiveIntegers) {
  for (Api api : {Api::kChat, Api::kCompletion}) {
    for (const char* field : {"n", "best_of", "max_tokens", "max_completion_tokens"}) {
      for (const char* bad : {"0", "-1", "2.5", "\"2\"", "true", "-0.0"}) expect_refused(api, field, bad);
      for (const char* huge : kHuge) expect_refused(api, field, huge);
    }
    EXPECT_EQ(expect_accepted(api, "n", "2").n, 2);
    EXPECT_EQ(expect_accepted(api, "n", "2.0").n, 2);  // integral float, as pydantic takes it
    EXPECT_EQ(expect_accepted(api, "n", "null").n, 1);
    EXPECT_EQ(expect_accepted(api, "best_of", "1").n, 1);
    EXPECT_EQ(expect_accepted(api, "best_of", "null").n, 1);
    EXPECT_EQ(expect_accepted(api, "max_tokens", "1").max_tokens, 1);
    EXPECT_EQ(expect_accepted(api, "max_tokens", "2147483647").max_tokens, 2147483647);
    EXPECT_FALSE(expect_accepted(api, "max_tokens", "null").max_tokens.has_value());
    EXPECT_FALSE(expect_accepted(api, "max_completion_tokens", "null").max_tokens.has_value());
    expect_refused(api, "n", "17");  // the default --max-n is 16
  }
}

TEST(RequestRanges, SamplingFields) {
  for (Api api : {Api::kChat, Api::kCompletion}) {
    for (const char* huge : kHuge)
      for (const char* field : {"top_k", "top_p", "min_p", "temperature", "presence_penalty", "frequency_penalty",
                                "repetition_penalty"})
        expect_refused(api, field, huge);
    for (const char* huge : {"9223372036854775808", "18446744073709551616", "1e30"}) expect_refused(api, "seed", huge);
    EXPECT_EQ(expect_accepted(api, "seed", "2147483648").sampling.seed, 2147483648u);
    // top_k: -1 and 0 both mean off; an integer.
    EXPECT_EQ(expect_accepted(api, "top_k", "0").sampling.top_k, 0);
    EXPECT_EQ(expect_accepted(api, "top_k", "-1").sampling.top_k, 0);
    EXPECT_EQ(expect_accepted(api, "top_k", "40").sampling.top_k, 40);
    EXPECT_EQ(expect_accepted(api, "top_k", "null").sampling.top_k, 0);
    expect_refused(api, "top_k", "-2");
    expect_refused(api, "top_k", "2.5");
    // top_p in (0, 1].
    expect_refused(api, "top_p", "0");
    expect_refused(api, "top_p", "-1");
    expect_refused(api, "top_p", "1.5");
    EXPECT_FLOAT_EQ(expect_accepted(api, "top_p", "0.5").sampling.top_p, 0.5f);
    EXPECT_FLOAT_EQ(expect_accepted(api, "top_p", "null").sampling.top_p, 1.0f);
    // min_p in [0, 1].
    EXPECT_FLOAT_EQ(expect_accepted(api, "min_p", "0").sampling.min_p, 0.0f);
    expect_refused(api, "min_p", "-1");
    expect_refused(api, "min_p", "1.5");
    EXPECT_FLOAT_EQ(expect_accepted(api, "min_p", "null").sampling.min_p, 0.0f);
    // temperature in [0, 2]; null is OpenAI's default, 1.
    EXPECT_FLOAT_EQ(expect_accepted(api, "temperature", "0").sampling.temperature, 0.0f);
    expect_refused(api, "temperature", "-1");
    expect_refused(api, "temperature", "2.5");
    EXPECT_FLOAT_EQ(expect_accepted(api, "temperature", "null").sampling.temperature, 1.0f);
    // Penalties.
    EXPECT_FLOAT_EQ(expect_accepted(api, "presence_penalty", "-1").sampling.presence_penalty, -1.0f);
    EXPECT_FLOAT_EQ(expect_accepted(api, "frequency_penalty", "-1").sampling.frequency_penalty, -1.0f);
    for (const char* field : {"presence_penalty", "frequency_penalty"}) {
      expect_refused(api, field, "-3");
      expect_refused(api, field, "2.5");
      EXPECT_FALSE(expect_accepted(api, field, "null").sampling.has_penalties());
    }
    expect_refused(api, "repetition_penalty", "0");
    expect_refused(api, "repetition_penalty", "-1");
    EXPECT_FLOAT_EQ(expect_accepted(api, "repetition_penalty", "1.5").sampling.repetition_penalty, 1.5f);
    EXPECT_FLOAT_EQ(expect_accepted(api, "repetition_penalty", "null").sampling.repetition_penalty, 1.0f);
    // seed: any signed 64-bit integer; null draws one per request.
    EXPECT_EQ(expect_accepted(api, "seed", "0").sampling.seed, 0u);
    EXPECT_EQ(expect_accepted(api, "seed", "-1").sampling.seed, ~std::uint64_t{0});
    EXPECT_EQ(expect_accepted(api, "seed", "9223372036854775807").sampling.seed, 9223372036854775807u);
    EXPECT_TRUE(expect_accepted(api, "seed", "7").has_seed);
    EXPECT_FALSE(expect_accepted(api, "seed", "null").has_seed);
    expect_refused(api, "seed", "2.5");
    expect_refused(api, "seed", "-1e19");
  }
}

TEST(RequestRanges, Logprobs) {
  // Chat: logprobs is a boolean, top_logprobs a count in [0, 20].
  expect_refused(Api::kChat, "logprobs", "0");
  expect_refused(Api::kChat, "logprobs", "1");
  EXPECT_FALSE(expect_accepted(Api::kChat, "logprobs", "null").logprobs);
  EXPECT_EQ(expect_accepted(Api::kChat, "top_logprobs", "0").top_logprobs, 0);
  EXPECT_EQ(expect_accepted(Api::kChat, "top_logprobs", "20").top_logprobs, 20);
  EXPECT_EQ(expect_accepted(Api::kChat, "top_logprobs", "null").top_logprobs, 0);
  // Completions: logprobs is the count.
  EXPECT_TRUE(expect_accepted(Api::kCompletion, "logprobs", "0").logprobs);
  EXPECT_EQ(expect_accepted(Api::kCompletion, "logprobs", "5").top_logprobs, 5);
  EXPECT_FALSE(expect_accepted(Api::kCompletion, "logprobs", "null").logprobs);
  for (const char* bad : {"-1", "21", "2.5"}) {
    expect_refused(Api::kChat, "top_logprobs", bad);
    expect_refused(Api::kCompletion, "logprobs", bad);
  }
  for (const char* huge : kHuge) {
    expect_refused(Api::kChat, "top_logprobs", huge);
    expect_refused(Api::kCompletion, "logprobs", huge);
  }
}

TEST(RequestRanges, MinTokens) {
  for (Api api : {Api::kChat, Api::kCompletion}) {
    EXPECT_EQ(expect_accepted(api, "min_tokens", "0").min_tokens, 0);
    EXPECT_EQ(expect_accepted(api, "min_tokens", "null").min_tokens, 0);
    expect_refused(api, "min_tokens", "-1");
    expect_refused(api, "min_tokens", "2.5");
    for (const char* huge : kHuge) expect_refused(api, "min_tokens", huge);
  }
}

}  // namespace
}  // namespace sluice::server
