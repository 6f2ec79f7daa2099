#include "sluice/loadgen/sse_parser.h"

#include <gtest/gtest.h>

namespace sluice::loadgen {
namespace {

using Events = std::vector<std::string>;

TEST(SseParser, EventsSplitAnywhereComeOutWhole) {
  const std::string stream = "data: {\"a\":1}\n\ndata: [DONE]\n\n";
  // Every split point gives the same two events.
  for (std::size_t cut = 0; cut <= stream.size(); ++cut) {
    SseParser parser;
    Events events = parser.feed(stream.substr(0, cut));
    for (std::string& e : parser.feed(stream.substr(cut))) events.push_back(std::move(e));
    EXPECT_EQ(events, (Events{"{\"a\":1}", "[DONE]"})) << "cut at " << cut;
  }
}

TEST(SseParser, CrLfSplitBetweenFeedsIsOneLineEnd) {
  SseParser parser;
  EXPECT_TRUE(parser.feed("data: x\r").empty());
  // The '\n' completes "\r\n"; only the second CRLF is the blank line.
  EXPECT_TRUE(parser.feed("\n").empty());
  EXPECT_EQ(parser.feed("\r\n"), (Events{"x"}));
}

TEST(SseParser, CommentsAndOtherFieldsAreSkipped) {
  SseParser parser;
  EXPECT_EQ(parser.feed(": keep-alive\n\nevent: message\nid: 7\ndata: payload\nretry: 10\n\n"), (Events{"payload"}));
}

TEST(SseParser, MultiLineDataIsJoinedAndSpaceIsOptional) {
  SseParser parser;
  EXPECT_EQ(parser.feed("data:one\ndata:  two\ndata\n\n"), (Events{"one\n two\n"}));
}

TEST(SseParser, LoneCrEndsLinesToo) {
  SseParser parser;
  EXPECT_EQ(parser.feed("data: a\r\rdata: b\r\r"), (Events{"a", "b"}));
}

TEST(SseParser, AnIncompleteEventWaits) {
  SseParser parser;
  EXPECT_TRUE(parser.feed("data: half").empty());
  EXPECT_TRUE(parser.feed("\n").empty());
  EXPECT_EQ(parser.feed("\n"), (Events{"half"}));
}

}  // namespace
}  // namespace sluice::loadgen
