// CpuCommunicatorGroup: each collective against the sum or concatenation
// computed directly from every rank's input, for groups of 1 to 4 ranks; and
// a rank that fails ends the group on every rank instead of hanging.
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "sluice/dist/cpu_communicator.h"

namespace sluice {
namespace {

// Rank r's input: distinct per rank and element, exact in f32.
std::vector<float> input_of(std::int32_t rank, std::size_t count) {
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = static_cast<float>(rank * 1000 + static_cast<int>(i)) * 0.5f;
  return values;
}

// Runs body(rank) on one thread per rank; an exception is caught at the
// thread's boundary, as the tensor-parallel runner does, and aborts the group.
std::vector<Status> run_ranks(CpuCommunicatorGroup& group, const std::function<Status(Communicator&)>& body) {
  std::vector<Status> results(static_cast<std::size_t>(group.size()), Status{Ok{}});
  std::vector<std::jthread> threads;
  for (std::int32_t r = 0; r < group.size(); ++r)
    threads.emplace_back([&, r] {
      Communicator& comm = group.rank(r);
      try {
        results[static_cast<std::size_t>(r)] = body(comm);
      } catch (const std::exception& e) {
        comm.abort(e.what());
        results[static_cast<std::size_t>(r)] = Error{e.what()};
      }
    });
  threads.clear();
  return results;
}

class CollectiveTest : public ::testing::TestWithParam<std::int32_t> {};

TEST_P(CollectiveTest, AllReduceSumsEveryRankInPlace) {
  const std::int32_t size = GetParam();
  CpuCommunicatorGroup group(size);
  // 7 does not divide evenly over 2..4 ranks; 0 is the empty message.
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}}) {
    std::vector<float> expected(count, 0.0f);
    for (std::int32_t r = 0; r < size; ++r) {
      const std::vector<float> in = input_of(r, count);
      for (std::size_t i = 0; i < count; ++i) expected[i] += in[i];
    }
    std::vector<std::vector<float>> data(static_cast<std::size_t>(size));
    for (std::int32_t r = 0; r < size; ++r) data[static_cast<std::size_t>(r)] = input_of(r, count);
    const auto results = run_ranks(group, [&](Communicator& comm) {
      return comm.all_reduce_sum(data[static_cast<std::size_t>(comm.rank())]);
    });
    for (std::int32_t r = 0; r < size; ++r) {
      ASSERT_TRUE(results[static_cast<std::size_t>(r)].ok()) << results[static_cast<std::size_t>(r)].error_message();
      EXPECT_EQ(data[static_cast<std::size_t>(r)], expected) << "rank " << r << " count " << count;
    }
  }
}

TEST_P(CollectiveTest, AllGatherConcatenatesInRankOrder) {
  const std::int32_t size = GetParam();
  CpuCommunicatorGroup group(size);
  const std::size_t count = 5;
  std::vector<float> expected;
  for (std::int32_t r = 0; r < size; ++r) {
    const std::vector<float> in = input_of(r, count);
    expected.insert(expected.end(), in.begin(), in.end());
  }
  std::vector<std::vector<float>> recv(static_cast<std::size_t>(size), std::vector<float>(expected.size(), -1.0f));
  const auto results = run_ranks(group, [&](Communicator& comm) {
    const std::vector<float> send = input_of(comm.rank(), count);
    return comm.all_gather(send, recv[static_cast<std::size_t>(comm.rank())]);
  });
  for (std::int32_t r = 0; r < size; ++r) {
    ASSERT_TRUE(results[static_cast<std::size_t>(r)].ok()) << results[static_cast<std::size_t>(r)].error_message();
    EXPECT_EQ(recv[static_cast<std::size_t>(r)], expected) << "rank " << r;
  }
}

TEST_P(CollectiveTest, ReduceScatterGivesEachRankItsChunkOfTheSum) {
  const std::int32_t size = GetParam();
  CpuCommunicatorGroup group(size);
  const std::size_t chunk = 6, total = chunk * static_cast<std::size_t>(size);
  std::vector<float> sum(total, 0.0f);
  for (std::int32_t r = 0; r < size; ++r) {
    const std::vector<float> in = input_of(r, total);
    for (std::size_t i = 0; i < total; ++i) sum[i] += in[i];
  }
  std::vector<std::vector<float>> recv(static_cast<std::size_t>(size), std::vector<float>(chunk, -1.0f));
  const auto results = run_ranks(group, [&](Communicator& comm) {
    const std::vector<float> send = input_of(comm.rank(), total);
    return comm.reduce_scatter_sum(send, recv[static_cast<std::size_t>(comm.rank())]);
  });
  for (std::int32_t r = 0; r < size; ++r) {
    ASSERT_TRUE(results[static_cast<std::size_t>(r)].ok()) << results[static_cast<std::size_t>(r)].error_message();
    const auto first = sum.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r) * chunk);
    EXPECT_EQ(recv[static_cast<std::size_t>(r)], std::vector<float>(first, first + static_cast<std::ptrdiff_t>(chunk)))
        << "rank " << r;
  }
}

// Many collectives back to back: the barrier is reused without mixing steps.
TEST_P(CollectiveTest, RepeatedAllReducesStayInStep) {
  const std::int32_t size = GetParam();
  CpuCommunicatorGroup group(size);
  std::vector<std::vector<float>> data(static_cast<std::size_t>(size), std::vector<float>(3, 1.0f));
  const auto results = run_ranks(group, [&](Communicator& comm) -> Status {
    for (int i = 0; i < 10; ++i) SLUICE_TRY(comm.all_reduce_sum(data[static_cast<std::size_t>(comm.rank())]));
    return Ok{};
  });
  float expected = 1.0f;
  for (int i = 0; i < 10; ++i) expected *= static_cast<float>(size);
  for (std::int32_t r = 0; r < size; ++r) {
    ASSERT_TRUE(results[static_cast<std::size_t>(r)].ok());
    EXPECT_EQ(data[static_cast<std::size_t>(r)], std::vector<float>(3, expected));
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, CollectiveTest, ::testing::Values(1, 2, 3, 4));

// The last rank throws before its second collective while the others wait in
// it: they fail with an error naming that rank and its reason. Nothing
// sleeps; if the abort did not wake the barrier the test would hang, and
// ctest's timeout would report it.
TEST(CpuCommunicatorFailure, ARankThatThrowsFailsTheOthers) {
  for (std::int32_t size : {2, 3, 4}) {
    CpuCommunicatorGroup group(size);
    std::vector<std::vector<float>> data(static_cast<std::size_t>(size), std::vector<float>(4, 1.0f));
    const auto results = run_ranks(group, [&](Communicator& comm) -> Status {
      SLUICE_TRY(comm.all_reduce_sum(data[static_cast<std::size_t>(comm.rank())]));
      if (comm.rank() == comm.size() - 1) throw std::runtime_error("injected failure");
      return comm.all_reduce_sum(data[static_cast<std::size_t>(comm.rank())]);
    });
    for (std::int32_t r = 0; r + 1 < size; ++r) {
      const Status& status = results[static_cast<std::size_t>(r)];
      ASSERT_FALSE(status.ok()) << "rank " << r;
      EXPECT_NE(status.error_message().find(fmt::format("rank {}: injected failure", size - 1)), std::string::npos)
          << status.error_message();
    }
    // The group is finished: a later collective fails at once on any rank.
    std::vector<float> more(2, 1.0f);
    EXPECT_FALSE(group.rank(0).all_reduce_sum(more).ok());
  }
}

// Ranks that disagree on a collective's size all fail, and say which.
TEST(CpuCommunicatorFailure, MismatchedCountsFailEveryRank) {
  CpuCommunicatorGroup group(3);
  const auto results = run_ranks(group, [&](Communicator& comm) {
    std::vector<float> data(comm.rank() == 1 ? 5 : 4, 1.0f);
    return comm.all_reduce_sum(data);
  });
  for (const Status& status : results) {
    ASSERT_FALSE(status.ok());
    EXPECT_NE(status.error_message().find("all_reduce_sum"), std::string::npos) << status.error_message();
  }
}

}  // namespace
}  // namespace sluice
