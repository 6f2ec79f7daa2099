// Paged attention of the CUDA backend against a float64 reference: mixed
// steps of decodes and prefill chunks with cached prefixes, GQA group sizes
// 1..16, odd block sizes, block-boundary positions and long contexts. Each
// case runs two steps: the first writes every prefix into the pages (and is
// itself checked), the second runs the rows under test on top of them.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "test_util.h"

namespace sluice {
namespace {

using namespace sluice::testing;

struct SeqSpec {
  std::int32_t prefix_tokens;  // already in the cache when the rows under test run
  std::int32_t num_rows;       // rows under test
};

struct AttentionCase {
  std::int32_t num_q_heads, num_kv_heads, head_dim, block_size;
  std::vector<SeqSpec> seqs;
  std::int32_t max_checked_rows = 48;  // float64 reference on a random subset past this
};

class AttentionHarness {
 public:
  explicit AttentionHarness(const AttentionCase& c, std::uint64_t seed) : c_(c), rng_(seed) {
    kv_width_ = c.num_kv_heads * c.head_dim;
    std::int32_t num_blocks = 0;
    for (const SeqSpec& s : c.seqs) num_blocks += (s.prefix_tokens + s.num_rows + c.block_size - 1) / c.block_size;
    num_blocks += 3;
    // Shuffled physical blocks: a sequence's pages are never contiguous.
    std::vector<BlockId> blocks(static_cast<std::size_t>(num_blocks));
    std::iota(blocks.begin(), blocks.end(), 0);
    for (std::size_t i = blocks.size() - 1; i > 0; --i) std::swap(blocks[i], blocks[rng_.next() % (i + 1)]);
    std::size_t next = 0;
    for (const SeqSpec& s : c.seqs) {
      const std::int32_t total = s.prefix_tokens + s.num_rows;
      std::vector<BlockId> table;
      for (std::int32_t b = 0; b < (total + c.block_size - 1) / c.block_size; ++b) table.push_back(blocks[next++]);
      tables_.push_back(table);
      keys_.push_back(random_bf16(static_cast<std::size_t>(total) * kv_width_, rng_.next()));
      values_.push_back(random_bf16(static_cast<std::size_t>(total) * kv_width_, rng_.next()));
    }
    ops_ = make_test_ops();
    const Status status = ops_->allocate_kv_cache({.num_layers = 2, .num_blocks = num_blocks,
                                                   .block_size_tokens = c.block_size,
                                                   .num_kv_heads = c.num_kv_heads, .head_dim = c.head_dim});
    SLUICE_CHECK_MSG(status.ok(), status.error_message());
  }

  // Runs rows [begin_i, end_i) of each sequence as one step on `layer`; returns
  // the worst relative error over the checked rows (and whether all rows are finite).
  double run_step(std::int32_t layer, const std::vector<std::pair<std::int32_t, std::int32_t>>& ranges, bool* finite) {
    StepLayout layout;
    std::vector<std::int32_t> row_seq, row_pos;
    for (std::size_t s = 0; s < ranges.size(); ++s) {
      const auto [begin, end] = ranges[s];
      if (end <= begin) continue;
      layout.sequences.push_back({.row_begin = layout.num_rows(), .num_rows = end - begin,
                                  .num_computed_tokens = begin, .block_table = tables_[s]});
      for (std::int32_t p = begin; p < end; ++p) {
        layout.token_ids.push_back(0);
        layout.positions.push_back(p);
        row_seq.push_back(static_cast<std::int32_t>(s));
        row_pos.push_back(p);
      }
    }
    const std::int32_t rows = layout.num_rows();
    const std::int64_t q_width = static_cast<std::int64_t>(c_.num_q_heads) * c_.head_dim;
    const auto q = random_bf16(static_cast<std::size_t>(rows) * q_width, rng_.next(), 2.0f);
    std::vector<float> k(static_cast<std::size_t>(rows) * kv_width_), v(k.size());
    for (std::int32_t r = 0; r < rows; ++r) {
      const auto& ks = keys_[row_seq[r]];
      const auto& vs = values_[row_seq[r]];
      std::copy_n(ks.begin() + static_cast<std::int64_t>(row_pos[r]) * kv_width_, kv_width_, k.begin() + r * kv_width_);
      std::copy_n(vs.begin() + static_cast<std::int64_t>(row_pos[r]) * kv_width_, kv_width_, v.begin() + r * kv_width_);
    }
    DeviceArray dq(q, DType::bf16, {rows, q_width}), dk(k, DType::bf16, {rows, kv_width_}),
        dv(v, DType::bf16, {rows, kv_width_});
    ops_->begin_step(layout);
    Tensor out = ops_->scratch({rows, q_width});
    poison(out);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c_.head_dim));
    ops_->attention(layer, dq.tensor(), dk.tensor(), dv.tensor(), scale, out);
    const std::vector<float> got = download(out);
    *finite = all_finite(got);

    std::vector<std::int32_t> checked(static_cast<std::size_t>(rows));
    std::iota(checked.begin(), checked.end(), 0);
    if (rows > c_.max_checked_rows) {
      for (std::size_t i = checked.size() - 1; i > 0; --i) std::swap(checked[i], checked[rng_.next() % (i + 1)]);
      checked.resize(static_cast<std::size_t>(c_.max_checked_rows));
    }
    std::vector<float> got_checked;
    std::vector<double> ref;
    const int group = c_.num_q_heads / c_.num_kv_heads;
    std::vector<double> scores;
    for (std::int32_t r : checked) {
      const auto& ks = keys_[row_seq[r]];
      const auto& vs = values_[row_seq[r]];
      const std::int32_t num_keys = row_pos[r] + 1;
      scores.resize(static_cast<std::size_t>(num_keys));
      for (int h = 0; h < c_.num_q_heads; ++h) {
        const int kvh = h / group;
        const float* qh = q.data() + r * q_width + h * c_.head_dim;
        double max_score = -INFINITY;
        for (std::int32_t j = 0; j < num_keys; ++j) {
          const float* kj = ks.data() + static_cast<std::int64_t>(j) * kv_width_ + kvh * c_.head_dim;
          double dot = 0.0;
          for (int d = 0; d < c_.head_dim; ++d) dot += double(qh[d]) * kj[d];
          scores[j] = dot * scale;
          max_score = std::max(max_score, scores[j]);
        }
        double sum = 0.0;
        for (double& s : scores) sum += (s = std::exp(s - max_score));
        for (int d = 0; d < c_.head_dim; ++d) {
          double acc = 0.0;
          for (std::int32_t j = 0; j < num_keys; ++j)
            acc += scores[j] * vs[static_cast<std::int64_t>(j) * kv_width_ + kvh * c_.head_dim + d];
          ref.push_back(acc / sum);
          got_checked.push_back(got[r * q_width + h * c_.head_dim + d]);
        }
      }
    }
    return relative_error(got_checked, ref);
  }

  void run_case() {
    std::vector<std::pair<std::int32_t, std::int32_t>> prefix, under_test;
    for (const SeqSpec& s : c_.seqs) {
      prefix.push_back({0, s.prefix_tokens});
      under_test.push_back({s.prefix_tokens, s.prefix_tokens + s.num_rows});
    }
    for (std::int32_t layer : {1, 0}) {  // layer 1 first: layers must not alias
      bool finite = false;
      const double prefix_error = run_step(layer, prefix, &finite);
      EXPECT_TRUE(finite) << "prefix step, layer " << layer;
      EXPECT_LE(prefix_error, 1e-2) << "prefix step, layer " << layer;
      const double error = run_step(layer, under_test, &finite);
      EXPECT_TRUE(finite) << "step under test, layer " << layer;
      EXPECT_LE(error, 1e-2) << "step under test, layer " << layer;
    }
  }

 private:
  AttentionCase c_;
  SplitMix64 rng_;
  std::int64_t kv_width_ = 0;
  std::vector<std::vector<BlockId>> tables_;
  std::vector<std::vector<float>> keys_, values_;  // per sequence [tokens, kv_heads, head_dim]
  std::unique_ptr<Ops> ops_;
};

void run(const AttentionCase& c, std::uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "heads " << c.num_q_heads << "/" << c.num_kv_heads << " head_dim "
                                    << c.head_dim << " block " << c.block_size);
  AttentionHarness(c, seed).run_case();
}

const std::vector<SeqSpec> kMixed = {{0, 1},    {0, 64},  {0, 65},  {17, 63}, {100, 1},
                                     {4095, 1}, {4096, 200}, {31, 129}, {15, 1}, {16, 2}};

TEST(CudaAttention, MixedStepLlama3Shapes) { run({32, 8, 128, 16, kMixed}, 1); }
TEST(CudaAttention, MixedStepMultiHeadDim64OddBlocks) { run({8, 8, 64, 7, kMixed}, 2); }
TEST(CudaAttention, MixedStepBlockSizeOne) { run({4, 2, 128, 1, {{0, 70}, {9, 1}, {130, 3}}}, 3); }
TEST(CudaAttention, GroupOfSeven) { run({28, 4, 128, 16, kMixed}, 4); }
TEST(CudaAttention, GroupOfSixteenLongDecode) { run({32, 2, 64, 16, {{20000, 1}, {777, 1}, {3000, 100}}, 16}, 5); }
TEST(CudaAttention, SmallHeadDimsUseSplitKernel) {
  run({4, 1, 16, 4, {{0, 50}, {13, 1}, {37, 9}}}, 6);
  run({4, 2, 32, 16, {{0, 50}, {13, 1}, {300, 70}}}, 7);
}
TEST(CudaAttention, HeadDim256) { run({8, 4, 256, 16, {{0, 33}, {500, 1}, {1000, 64}}}, 8); }
TEST(CudaAttention, LongContextDecodeAndChunk) {
  run({8, 2, 128, 16, {{32767, 1}, {16000, 256}, {5000, 1}}, 12}, 9);
}

// A short chunk over a long cached prefix: too few tiles to fill the GPU, so
// each tile's keys are split over several blocks and merged
// (launch_attention_prefill_split); also a step where a fresh prompt's tiles
// run whole beside the split ones, a head_dim of 64, and the same shapes with
// splitting off.
TEST(CudaAttention, ChunkOverLongPrefixSplitsKeys) {
  run({32, 8, 128, 16, {{65536, 300}, {9000, 64}, {5000, 1}}, 12}, 40);
  run({32, 8, 128, 16, {{20000, 129}, {0, 100}}, 16}, 41);
  run({16, 2, 64, 16, {{40000, 77}}, 12}, 42);
  setenv("SLUICE_PREFILL_SPLIT_OFF", "1", 1);  // read when each step is laid out
  run({32, 8, 128, 16, {{65536, 300}}, 12}, 43);
  unsetenv("SLUICE_PREFILL_SPLIT_OFF");
}

}  // namespace
}  // namespace sluice
