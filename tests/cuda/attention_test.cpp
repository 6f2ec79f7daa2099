// Paged attention of the CUDA backend against a float64 reference: mixed
// steps of decodes and prefill chunks with cached prefixes, GQA group sizes
// 1..16, odd block sizes, block-boundary positions and long contexts. Each
// case runs two steps: the first writes every prefix into the pages (and is
// itself checked), the second runs the rows under test on top of them. The
// decode cases under CUDA graphs run the rows under test as one decode step
// each, so graphs are captured and then replayed at other contexts of their
// bucket (the split-KV plan is made on the device from each row's context).
// Every case runs under each prefill choice (CudaOptions::prefill_attention,
// the suite's parameter: .../mma, .../wgmma, .../wgmma_ws, .../cudnn). Under
// cudnn a case cuDNN can take must have run through it (cuda_cudnn_sdpa_runs)
// wherever libcudnn.so.9 loads; elsewhere it checks the wgmma_ws fallback.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <numeric>
#include <thread>

#include "sluice/backend/cuda/cudnn_sdpa.h"
#include "sluice/backend/cuda/cudnn_split_plan.h"
#include "sluice/backend/cuda/kernels/kernels.h"
#include "sluice/backend/rope.h"
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
  // Rows under test as one decode step each, through CUDA graphs.
  bool decode_steps_with_graphs = false;
  // RoPE (Llama 3) on q and k before attention, through Ops::rope: under
  // graphs the decode steps run it fused with the KV page write.
  bool rope = false;
  cuda::PrefillAttention prefill_attention = cuda::PrefillAttention::mma;
  cuda::DecodeSplitTiles decode_split_tiles = CudaOptions{}.decode_split_tiles;
  std::int32_t decode_split_stages = CudaOptions{}.decode_split_stages;
  cuda::DecodeSplitLoads decode_split_loads = CudaOptions{}.decode_split_loads;
  // The whole cache NaN before the first step: slots no step wrote (a
  // sequence's last page past its keys) must not reach any output.
  bool nan_kv_cache = false;
  // cuDNN plans on the builder thread: the steps run once before their plans
  // exist (declined: our kernels), then again after they are built.
  bool cudnn_plans_in_background = false;
  // The server's bounds (cuda_options.h): plans built at allocate_kv_cache,
  // so steps within them run on cuDNN from the first.
  cuda::SdpaServingBounds cudnn_serving_bounds;
};

const RopeParams kLlama3Rope{.head_dim = 0, .theta = 500000.0f, .llama3_factor = 8.0f};

// Rotate-half RoPE of each head of rows of x at their positions, in float64
// from the f32 angle Hugging Face computes.
std::vector<float> rotated(const std::vector<float>& x, std::int64_t width, std::int32_t head_dim,
                           const std::vector<std::int32_t>& positions, const std::vector<float>& inv_freq) {
  std::vector<float> out(x.size());
  const int half = head_dim / 2;
  for (std::size_t r = 0; r < positions.size(); ++r)
    for (std::int64_t h = 0; h < width / head_dim; ++h)
      for (int d = 0; d < half; ++d) {
        const double angle = static_cast<float>(positions[r]) * inv_freq[d];
        const std::size_t o = r * width + h * head_dim;
        const double x1 = x[o + d], x2 = x[o + d + half];
        out[o + d] = static_cast<float>(x1 * std::cos(angle) - x2 * std::sin(angle));
        out[o + d + half] = static_cast<float>(x2 * std::cos(angle) + x1 * std::sin(angle));
      }
  return out;
}

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
      if (c.rope) {
        std::vector<std::int32_t> positions(static_cast<std::size_t>(total));
        std::iota(positions.begin(), positions.end(), 0);
        ref_keys_.push_back(rotated(keys_.back(), kv_width_, c.head_dim, positions, inv_freq()));
      }
    }
    CudaOptions options{.scratch_bytes = 256LL << 20, .use_cuda_graphs = c.decode_steps_with_graphs};
    options.prefill_attention = c.prefill_attention;
    options.decode_split_tiles = c.decode_split_tiles;
    options.decode_split_stages = c.decode_split_stages;
    options.decode_split_loads = c.decode_split_loads;
    options.cudnn_plans_in_background = c.cudnn_plans_in_background;
    options.cudnn_serving_bounds = c.cudnn_serving_bounds;
    options.cudnn_serving_wait_s = 600.0;  // every class built before the first step
    auto ops = make_cuda_ops(options);
    SLUICE_CHECK_MSG(ops.ok(), ops.error_message());
    ops_ = std::move(ops).value();
    const Status status = ops_->allocate_kv_cache({.num_layers = 2, .num_blocks = num_blocks,
                                                   .block_size_tokens = c.block_size,
                                                   .num_kv_heads = c.num_kv_heads, .head_dim = c.head_dim});
    SLUICE_CHECK_MSG(status.ok(), status.error_message());
    if (c.nan_kv_cache) {
      const Status filled = cuda_fill_kv_cache_nan(*ops_);
      SLUICE_CHECK_MSG(filled.ok(), filled.error_message());
    }
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
    const float scale = 1.0f / std::sqrt(static_cast<float>(c_.head_dim));
    const std::vector<float> q_ref = c_.rope ? rotated(q, q_width, c_.head_dim, row_pos, inv_freq()) : q;
    std::vector<float> got;
    if (c_.decode_steps_with_graphs) {
      got = run_in_scratch(layer, layout, q, k, v, scale);
    } else {
      DeviceArray dq(q, DType::bf16, {rows, q_width}), dk(k, DType::bf16, {rows, kv_width_}),
          dv(v, DType::bf16, {rows, kv_width_});
      ops_->begin_step(layout);
      Tensor out = ops_->scratch({rows, q_width});
      poison(out);
      if (c_.rope) ops_->rope(dq.tensor(), dk.tensor(), rope_params());
      ops_->attention(layer, dq.tensor(), dk.tensor(), dv.tensor(), scale, out);
      got = download(out);
    }
    *finite = all_finite(got);

    std::vector<std::int32_t> checked(static_cast<std::size_t>(rows));
    std::iota(checked.begin(), checked.end(), 0);
    if (rows > c_.max_checked_rows) {
      for (std::size_t i = checked.size() - 1; i > 0; --i) std::swap(checked[i], checked[rng_.next() % (i + 1)]);
      checked.resize(static_cast<std::size_t>(c_.max_checked_rows));
    }
    // The float64 reference, one (row, head) a task over every core: at long
    // prefixes it is most of a test's time on the GPU machine.
    const int group = c_.num_q_heads / c_.num_kv_heads;
    const std::size_t num_tasks = checked.size() * static_cast<std::size_t>(c_.num_q_heads);
    std::vector<float> got_checked(num_tasks * static_cast<std::size_t>(c_.head_dim));
    std::vector<double> ref(got_checked.size());
    std::atomic<std::size_t> next_task{0};
    auto work = [&] {
      std::vector<double> scores;
      for (std::size_t task; (task = next_task.fetch_add(1)) < num_tasks;) {
        const std::int32_t r = checked[task / static_cast<std::size_t>(c_.num_q_heads)];
        const int h = static_cast<int>(task % static_cast<std::size_t>(c_.num_q_heads));
        const auto& ks = c_.rope ? ref_keys_[row_seq[r]] : keys_[row_seq[r]];
        const auto& vs = values_[row_seq[r]];
        const std::int32_t num_keys = row_pos[r] + 1;
        scores.resize(static_cast<std::size_t>(num_keys));
        const int kvh = h / group;
        const float* qh = q_ref.data() + r * q_width + h * c_.head_dim;
        double max_score = -INFINITY;
        for (std::int32_t j = 0; j < num_keys; ++j) {
          const float* kj = ks.data() + static_cast<std::int64_t>(j) * kv_width_ + kvh * c_.head_dim;
          double dot = 0.0;
          for (int d = 0; d < c_.head_dim; ++d) dot += double(qh[d]) * kj[d];
          scores[j] = dot * scale;
          max_score = std::max(max_score, scores[j]);
        }
        double sum = 0.0;
        for (double& sc : scores) sum += (sc = std::exp(sc - max_score));
        for (int d = 0; d < c_.head_dim; ++d) {
          double acc = 0.0;
          for (std::int32_t j = 0; j < num_keys; ++j)
            acc += scores[j] * vs[static_cast<std::int64_t>(j) * kv_width_ + kvh * c_.head_dim + d];
          const std::size_t at = task * static_cast<std::size_t>(c_.head_dim) + static_cast<std::size_t>(d);
          ref[at] = acc / sum;
          got_checked[at] = got[r * q_width + h * c_.head_dim + d];
        }
      }
    };
    std::vector<std::thread> workers(std::max(1u, std::thread::hardware_concurrency()) - 1);
    for (auto& w : workers) w = std::thread(work);
    work();
    for (auto& w : workers) w.join();
    return relative_error(got_checked, ref);
  }

  void run_case() {
    std::vector<std::pair<std::int32_t, std::int32_t>> prefix, under_test;
    std::int32_t max_rows = 0;
    for (const SeqSpec& s : c_.seqs) {
      prefix.push_back({0, s.prefix_tokens});
      under_test.push_back({s.prefix_tokens, s.prefix_tokens + s.num_rows});
      max_rows = std::max(max_rows, s.num_rows);
    }
    for (int pass = 0; pass < (c_.cudnn_plans_in_background ? 2 : 1); ++pass) {
    if (pass == 1) {
      ASSERT_TRUE(cuda_cudnn_wait_for_plans(*ops_).ok());
    }
    for (std::int32_t layer : {1, 0}) {  // layer 1 first: layers must not alias
      bool finite = false;
      const double prefix_error = run_step(layer, prefix, &finite);
      EXPECT_TRUE(finite) << "prefix step, layer " << layer;
      EXPECT_LE(prefix_error, 1e-2) << "prefix step, layer " << layer;
      if (!c_.decode_steps_with_graphs) {
        Result<std::int64_t> runs_before = cuda_cudnn_sdpa_runs(*ops_);
        ASSERT_TRUE(runs_before.ok()) << runs_before.error_message();
        const double error = run_step(layer, under_test, &finite);
        EXPECT_TRUE(finite) << "step under test, layer " << layer;
        EXPECT_LE(error, 1e-2) << "step under test, layer " << layer;
        if (c_.cudnn_serving_bounds.max_step_rows > 0 && pass == 0) {
          // Every plan was built before the first step: this one ran on cuDNN.
          Result<std::int64_t> runs = cuda_cudnn_sdpa_runs(*ops_);
          ASSERT_TRUE(runs.ok()) << runs.error_message();
          EXPECT_GT(*runs, *runs_before) << "a step within the bounds did not run on cuDNN at once, layer " << layer;
        } else if (c_.cudnn_plans_in_background && pass == 0 && layer == 1) {
          // The first step of each shape class asks for its plan and cannot
          // find it built: nothing has run on cuDNN yet.
          Result<std::int64_t> runs = cuda_cudnn_sdpa_runs(*ops_);
          ASSERT_TRUE(runs.ok()) << runs.error_message();
          EXPECT_EQ(*runs, 0) << "a step ran on cuDNN before its plan was built";
        }
        continue;
      }
      // Row i of every sequence that has one, as decode step i.
      for (std::int32_t i = 0; i < max_rows; ++i) {
        std::vector<std::pair<std::int32_t, std::int32_t>> step;
        for (const SeqSpec& s : c_.seqs) {
          const std::int32_t pos = s.prefix_tokens + std::min(i, s.num_rows);
          step.push_back({pos, i < s.num_rows ? pos + 1 : pos});
        }
        const double error = run_step(layer, step, &finite);
        EXPECT_TRUE(finite) << "decode step " << i << ", layer " << layer;
        EXPECT_LE(error, 1e-2) << "decode step " << i << ", layer " << layer;
      }
    }
    }
    if (c_.prefill_attention == cuda::PrefillAttention::cudnn && cudnn_takes_case() && cudnn_loads()) {
      Result<std::int64_t> runs = cuda_cudnn_sdpa_runs(*ops_);
      ASSERT_TRUE(runs.ok()) << runs.error_message();
      EXPECT_GT(*runs, 0) << "cuDNN loads but ran no layer of this case";
    }
    // A step whose route is a split must have run split (both cuDNN choices).
    if (cuda::uses_cudnn(c_.prefill_attention) && cudnn_takes_case() && cudnn_loads() && !c_.decode_steps_with_graphs &&
        routes_split()) {
      Result<std::int64_t> split = cuda_cudnn_sdpa_split_runs(*ops_);
      ASSERT_TRUE(split.ok()) << split.error_message();
      EXPECT_GT(*split, 0) << "the step under test routes to a split over keys but none ran";
    }
  }

 private:
  // One step whose inputs and output live in the Ops' scratch, so a replayed
  // graph finds them where it was captured: scratch is handed out in the same
  // order every step. Inputs go in by plain copies (the Ops stream does not
  // wait for them; nothing of it runs until the graph is launched), and the
  // zero-row sample() launches the step's graph.
  std::vector<float> run_in_scratch(std::int32_t layer, const StepLayout& layout, const std::vector<float>& q,
                                    const std::vector<float>& k, const std::vector<float>& v, float scale) {
    const std::int32_t rows = layout.num_rows();
    const std::int64_t q_width = static_cast<std::int64_t>(c_.num_q_heads) * c_.head_dim;
    ops_->begin_step(layout);
    Tensor dq = ops_->scratch({rows, q_width}), dk = ops_->scratch({rows, kv_width_}),
           dv = ops_->scratch({rows, kv_width_}), out = ops_->scratch({rows, q_width});
    auto put = [](const Tensor& t, const std::vector<float>& values) {
      std::vector<std::uint16_t> bits(values.size());
      for (std::size_t i = 0; i < values.size(); ++i) bits[i] = f32_to_bf16(values[i]);
      SLUICE_CHECK(cudaMemcpy(t.data, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice) == cudaSuccess);
    };
    put(dq, q);
    put(dk, k);
    put(dv, v);
    SLUICE_CHECK(cudaMemset(out.data, 0xff, out.size_bytes()) == cudaSuccess);
    settle_default_stream();  // the copies and the fill, before the graph runs
    if (c_.rope) ops_->rope(dq, dk, rope_params());
    ops_->attention(layer, dq, dk, dv, scale, out);
    (void)ops_->sample(Tensor{nullptr, DType::bf16, Shape{0, 1}}, {});
    return download(out);
  }

  // Whether the case has a step of more than one row that cuDNN accepts.
  bool cudnn_takes_case() const {
    if (!cuda::prefill_kernel_supports(c_.head_dim) ||
        !cuda::cudnn_sdpa_unsupported(c_.num_q_heads, c_.num_kv_heads, c_.head_dim, c_.head_dim, c_.block_size)
             .empty())
      return false;
    for (const SeqSpec& s : c_.seqs)
      if (s.prefix_tokens > 1 || (s.num_rows > 1 && !c_.decode_steps_with_graphs)) return true;
    return false;
  }
  // Whether the step under test's prefill sequences route to a split over keys.
  bool routes_split() const {
    std::vector<cuda::SdpaShape> shapes;
    for (const SeqSpec& s : c_.seqs)
      if (s.num_rows > 1) shapes.push_back({.num_rows = s.num_rows, .num_keys = s.prefix_tokens + s.num_rows});
    int device = 0, num_sms = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device);
    return !shapes.empty() &&
           cuda::route_sdpa_step(shapes, c_.num_q_heads, c_.block_size, num_sms).route == cuda::SdpaRoute::split;
  }
  static bool cudnn_loads() {
    static const bool loads = cuda::CudnnSdpa::open(nullptr).ok();
    return loads;
  }

  RopeParams rope_params() const {
    RopeParams params = kLlama3Rope;
    params.head_dim = c_.head_dim;
    return params;
  }
  std::vector<float> inv_freq() const { return rope_inverse_frequencies(rope_params()); }

  AttentionCase c_;
  SplitMix64 rng_;
  std::int64_t kv_width_ = 0;
  std::vector<std::vector<BlockId>> tables_;
  std::vector<std::vector<float>> keys_, values_;  // per sequence [tokens, kv_heads, head_dim]
  std::vector<std::vector<float>> ref_keys_;        // keys_ rotated at their positions (rope cases)
  std::unique_ptr<Ops> ops_;
};

// The cases of the suite, each under the prefill kernel of the test's parameter.
class CudaAttention : public ::testing::TestWithParam<cuda::PrefillAttention> {
 protected:
  void run(AttentionCase c, std::uint64_t seed) const {
    c.prefill_attention = GetParam();
    SCOPED_TRACE(::testing::Message() << "heads " << c.num_q_heads << "/" << c.num_kv_heads << " head_dim "
                                      << c.head_dim << " block " << c.block_size);
    AttentionHarness(c, seed).run_case();
  }
};

INSTANTIATE_TEST_SUITE_P(PrefillKernels, CudaAttention,
                         ::testing::Values(cuda::PrefillAttention::mma, cuda::PrefillAttention::wgmma_ws,
                                           cuda::PrefillAttention::cudnn, cuda::PrefillAttention::automatic),
                         [](const ::testing::TestParamInfo<cuda::PrefillAttention>& info) {
                           // gtest names take no '-' (the flag's "wgmma-ws" is wgmma_ws here).
                           std::string name(cuda::name_of(info.param, cuda::kPrefillAttentionNames));
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

const std::vector<SeqSpec> kMixed = {{0, 1},    {0, 64},  {0, 65},  {17, 63}, {100, 1},
                                     {4095, 1}, {4096, 200}, {31, 129}, {15, 1}, {16, 2}};

TEST_P(CudaAttention, MixedStepLlama3Shapes) { run({32, 8, 128, 16, kMixed}, 1); }
TEST_P(CudaAttention, MixedStepMultiHeadDim64OddBlocks) { run({8, 8, 64, 7, kMixed}, 2); }
TEST_P(CudaAttention, MixedStepBlockSizeOne) { run({4, 2, 128, 1, {{0, 70}, {9, 1}, {130, 3}}}, 3); }
TEST_P(CudaAttention, GroupOfSeven) { run({28, 4, 128, 16, kMixed}, 4); }
TEST_P(CudaAttention, GroupOfSixteenLongDecode) { run({32, 2, 64, 16, {{20000, 1}, {777, 1}, {3000, 100}}, 16}, 5); }
TEST_P(CudaAttention, SmallHeadDimsUseSplitKernel) {
  run({4, 1, 16, 4, {{0, 50}, {13, 1}, {37, 9}}}, 6);
  run({4, 2, 32, 16, {{0, 50}, {13, 1}, {300, 70}}}, 7);
}
TEST_P(CudaAttention, HeadDim256) { run({8, 4, 256, 16, {{0, 33}, {500, 1}, {1000, 64}}}, 8); }
TEST_P(CudaAttention, LongContextDecodeAndChunk) {
  run({8, 2, 128, 16, {{32767, 1}, {16000, 256}, {5000, 1}}, 12}, 9);
}

// Each decode row cuts its own keys into splits: contexts just past a split
// length (129 keys: a 128-key and a 1-key split; 257: 128 + 128 + 1), at page
// boundaries, odd, and on both sides of a graph bucket (8192 / 16384), all in
// one batch.
const std::vector<SeqSpec> kSplitEdges = {{0, 1},    {127, 1},  {128, 1},  {129, 1}, {255, 1},
                                          {256, 1},  {4095, 1}, {4096, 1}, {8191, 1}, {8192, 1},
                                          {1000, 1}, {16, 1},   {33, 1}};

TEST_P(CudaAttention, RowSplitsAtEdges) { run({32, 8, 128, 16, kSplitEdges}, 20); }

// Decode steps through CUDA graphs: captured at one context, replayed at the
// next ones of the bucket, and recaptured past it (8192 -> 16384).
TEST_P(CudaAttention, GraphReplayedDecodeSteps) {
  AttentionCase c{32, 8, 128, 16, {{8189, 6}, {128, 3}, {4095, 2}, {30, 5}}};
  c.decode_steps_with_graphs = true;
  run(c, 30);
}
// RoPE then attention: eager (rope and the KV write apart) for the prefixes,
// then decode steps captured and replayed with the two fused.
TEST_P(CudaAttention, GraphDecodeStepsWithFusedRope) {
  AttentionCase c{32, 8, 128, 16, {{4094, 4}, {17, 3}, {0, 2}}};
  c.decode_steps_with_graphs = true;
  c.rope = true;
  run(c, 34);
  AttentionCase small{8, 2, 64, 7, {{300, 3}, {6, 2}}};
  small.decode_steps_with_graphs = true;
  small.rope = true;
  run(small, 35);
}
TEST_P(CudaAttention, GraphReplayedBatchOneDecode) {
  AttentionCase c{32, 8, 128, 16, {{4094, 4}}};
  c.decode_steps_with_graphs = true;
  run(c, 32);
}

// Prefill shapes aimed at the wgmma kernel (head_dim 128, 128-key tiles, two
// 64-row warpgroups): chunk lengths on both sides of 64, 128 and 256 rows,
// prefixes ending on and beside key-tile and page edges, long prefixes, GQA
// ratios 1 to 8 and an odd page size.
TEST_P(CudaAttention, PrefillTileEdges) {
  run({16, 4, 128, 16,
       {{0, 1}, {0, 63}, {0, 64}, {0, 127}, {0, 128}, {0, 129}, {0, 255}, {0, 257}, {1, 127}, {127, 2},
        {128, 128}, {129, 191}, {200, 77}, {16, 1000}}},
      10);
}
TEST_P(CudaAttention, PrefillLongPrefixes) {
  run({8, 8, 128, 16, {{12345, 300}, {8191, 129}, {4096, 64}}, 24}, 11);
}
TEST_P(CudaAttention, PrefillGqaRatiosAndOddPages) {
  run({4, 4, 128, 16, {{0, 333}, {77, 200}}}, 12);
  run({32, 4, 128, 13, {{0, 300}, {500, 129}}}, 13);
  run({24, 3, 128, 16, {{1000, 385}}}, 14);
}

// A short chunk over a long cached prefix: too few tiles to fill the GPU, so
// each tile's keys are split over several blocks and merged
// (launch_attention_prefill_split); also a step where a fresh prompt's tiles
// run whole beside the split ones, and a head_dim of 64.
TEST_P(CudaAttention, ChunkOverLongPrefixSplitsKeys) {
  run({32, 8, 128, 16, {{65536, 300}, {9000, 64}, {5000, 1}}, 12}, 40);
  run({32, 8, 128, 16, {{20000, 129}, {0, 100}}, 16}, 41);
  run({16, 2, 64, 16, {{40000, 77}}, 12}, 42);
}

// The server's way: plans built on a thread of their own. A step whose plan is
// not built runs on our kernels (and is still right); once built, on cuDNN.
TEST(CudnnPlansInBackground, StepsWaitForNoPlanAndRunOnCudnnOnceBuilt) {
  AttentionCase whole{32, 8, 128, 16, {{0, 4096}, {0, 2000}}};
  whole.prefill_attention = cuda::PrefillAttention::cudnn;
  whole.cudnn_plans_in_background = true;
  AttentionHarness(whole, 50).run_case();
  AttentionCase split{32, 8, 128, 16, {{20000, 256}, {5000, 1}}, 12};
  split.prefill_attention = cuda::PrefillAttention::automatic;
  split.cudnn_plans_in_background = true;
  AttentionHarness(split, 51).run_case();
}

// The server's bounds set: every plan its steps can ask for is built when
// the cache is allocated, so the first step of each shape runs
// on cuDNN and is right. Whole (fresh prompts, then chunks over prefixes,
// three sequences padded to four) and split. The prefix steps (up to 12,000
// rows) are past the bounds: their plans come from the builder thread.
TEST(CudnnPlansBeforeServing, StepsWithinTheBoundsRunOnCudnnFromTheFirst) {
  const cuda::SdpaServingBounds bounds{.num_q_heads = 32, .max_step_rows = 2048, .max_keys = 16384,
                                       .max_sequences = 3};
  AttentionCase whole{32, 8, 128, 16, {{0, 1024}, {3000, 600}, {100, 300}}};
  whole.prefill_attention = cuda::PrefillAttention::cudnn;
  whole.cudnn_plans_in_background = true;
  whole.cudnn_serving_bounds = bounds;
  AttentionHarness(whole, 60).run_case();
  AttentionCase split{32, 8, 128, 16, {{12000, 256}, {9000, 100}}, 12};
  split.prefill_attention = cuda::PrefillAttention::automatic;
  split.cudnn_plans_in_background = true;
  split.cudnn_serving_bounds = bounds;
  AttentionHarness(split, 61).run_case();
}

// Decode rows on the default prefill kernel, aimed at the tensor-core
// split-KV kernels (each case under both tile layouts, CudaOptions::
// decode_split_tiles, and the keys-as-rows kernel under TMA loads,
// decode_split_loads, which falls back to cp.async where its shape rules do
// not hold: pages of 7, groups of 16; DecodeSplitRingOfThree below takes the
// 3-tile ring):
// groups of 4, 7 and 16 heads at head_dim 128 and 64, uneven batches
// (by-step-work splits), contexts on both sides of its 64-key tile and of a
// page (of 16 keys, found by shift and mask, and of 7, by division), splits at
// their edges, and graph replays.
void run_decode_case(AttentionCase c, std::uint64_t seed, std::int32_t stages_of_keys_kernel = 2,
                     bool default_prefill = true) {
  if (default_prefill) c.prefill_attention = CudaOptions{}.prefill_attention;
  struct Kernel {
    cuda::DecodeSplitTiles tiles;
    std::int32_t stages;
    cuda::DecodeSplitLoads loads;
  };
  const Kernel kernels[] = {
      {cuda::DecodeSplitTiles::keys_as_rows, stages_of_keys_kernel, cuda::DecodeSplitLoads::cp_async},
      {cuda::DecodeSplitTiles::keys_as_rows, stages_of_keys_kernel, cuda::DecodeSplitLoads::tma},
      {cuda::DecodeSplitTiles::keys_as_rows, stages_of_keys_kernel, cuda::DecodeSplitLoads::tma_steal},
      {cuda::DecodeSplitTiles::heads_as_rows, 2, cuda::DecodeSplitLoads::cp_async}};
  for (const auto& [tiles, stages, loads] : kernels) {
    if (stages_of_keys_kernel != 2 && tiles == cuda::DecodeSplitTiles::heads_as_rows) continue;  // run above
    c.decode_split_tiles = tiles;
    c.decode_split_stages = stages;
    c.decode_split_loads = loads;
    SCOPED_TRACE(::testing::Message() << "heads " << c.num_q_heads << "/" << c.num_kv_heads << " head_dim "
                                      << c.head_dim << " block " << c.block_size << " tiles "
                                      << cuda::name_of(tiles, cuda::kDecodeSplitTilesNames) << ", " << stages
                                      << " stages, loads " << cuda::name_of(loads, cuda::kDecodeSplitLoadsNames));
    AttentionHarness(c, seed).run_case();
  }
}

// Tile and page edges: 15/16/17, 31/32/33, 63/64/65 keys, beside rows long
// enough to be cut (so each row's splits end on the tile multiple).
const std::vector<SeqSpec> kDecodeTileEdges = {{14, 1},  {15, 1},  {16, 1},  {30, 1},   {31, 1},  {32, 1},
                                               {62, 1},  {63, 1},  {64, 1},  {95, 1},   {96, 1},  {159, 1},
                                               {6143, 1}, {6144, 1}, {20001, 1}, {3000, 1}};

TEST(CudaDecodeAttention, UnevenBatchAtTileEdges) { run_decode_case({32, 8, 128, 16, kDecodeTileEdges, 64}, 50); }
TEST(CudaDecodeAttention, EvenBatchSplitsGroupOfFour) {
  run_decode_case({32, 8, 128, 16, {{9000, 1}, {9001, 1}, {8999, 1}, {9017, 1}, {9100, 1}, {8990, 1}}}, 51);
}
TEST(CudaDecodeAttention, HeadDim64OddPages) { run_decode_case({16, 4, 64, 7, kDecodeTileEdges, 64}, 52); }
TEST(CudaDecodeAttention, GroupsOfSevenAndSixteen) {
  run_decode_case({28, 4, 128, 16, {{0, 1}, {33, 1}, {5000, 1}, {777, 3}}}, 53);
  run_decode_case({32, 2, 64, 16, {{20000, 1}, {777, 1}, {3000, 2}}, 16}, 54);
}
TEST(CudaDecodeAttention, GroupsOfTwoAndEightPagesOf64) {
  run_decode_case({16, 8, 128, 64, {{0, 1}, {63, 1}, {64, 1}, {5000, 1}, {9000, 1}, {130, 2}}}, 57);
  run_decode_case({32, 4, 64, 64, {{0, 1}, {130, 1}, {7000, 1}, {20000, 1}}}, 58);
}
TEST(CudaDecodeAttention, SplitEdges) { run_decode_case({32, 8, 128, 16, kSplitEdges}, 55); }
// The keys-as-rows kernel with a ring of three tiles (CudaOptions::
// decode_split_stages, cuda_bench's A/B): tile and split edges, a graph replay.
TEST(CudaDecodeAttention, DecodeSplitRingOfThree) {
  run_decode_case({32, 8, 128, 16, kDecodeTileEdges, 64}, 60, 3);
  run_decode_case({16, 4, 64, 64, kSplitEdges}, 61, 3);
  AttentionCase c{32, 8, 128, 16, {{8189, 6}, {128, 3}, {4095, 2}, {30, 5}}};
  c.decode_steps_with_graphs = true;
  run_decode_case(c, 62, 3);
}
TEST(CudaDecodeAttention, GraphReplayedDecodeSteps) {
  AttentionCase c{32, 8, 128, 16, {{8189, 6}, {128, 3}, {4095, 2}, {30, 5}}};
  c.decode_steps_with_graphs = true;
  run_decode_case(c, 56);
}

// The benchmarks' timeline (cuda::set_decode_split_timeline, cuda_bench
// --decode-timeline): every block of the keys-as-rows kernel that had keys
// stamps the five moments in order, and one that stamped no start of loads
// (a block past its row's splits) stamps nothing after its entry. Rows of
// uneven lengths (split by the step's work), TMA loads, two launches of the
// same shape (layers 1 and 0) over one timeline.
TEST(CudaDecodeAttention, SplitTimelineStampsEachBlocksMomentsInOrder) {
  constexpr std::int64_t kBlocks = 4096;
  constexpr int kMoments = cuda::kDecodeSplitMoments;
  std::uint64_t* stamps = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&stamps), kBlocks * kMoments * sizeof(std::uint64_t)), cudaSuccess);
  ASSERT_EQ(cudaMemset(stamps, 0, kBlocks * kMoments * sizeof(std::uint64_t)), cudaSuccess);
  cuda::set_decode_split_timeline(stamps, kBlocks);
  AttentionCase c{32, 8, 128, 16, {{9000, 1}, {9001, 1}, {3000, 1}, {200, 1}}};
  c.prefill_attention = CudaOptions{}.prefill_attention;
  c.decode_split_tiles = cuda::DecodeSplitTiles::keys_as_rows;
  c.decode_split_loads = cuda::DecodeSplitLoads::tma;
  AttentionHarness(c, 66).run_case();
  cuda::set_decode_split_timeline(nullptr, 0);
  std::vector<std::uint64_t> host(kBlocks * kMoments);
  ASSERT_EQ(cudaMemcpy(host.data(), stamps, host.size() * sizeof(std::uint64_t), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaFree(stamps), cudaSuccess);
  int with_keys = 0;
  for (std::int64_t b = 0; b < kBlocks; ++b) {
    const std::uint64_t* m = host.data() + b * kMoments;
    if (m[0] == 0) {
      for (int i = 1; i < kMoments; ++i) EXPECT_EQ(m[i], 0u) << "block " << b << " moment " << i << " without an entry";
      continue;
    }
    if (m[1] == 0) {
      for (int i = 2; i < kMoments; ++i) EXPECT_EQ(m[i], 0u) << "block " << b << " moment " << i << " without keys";
      continue;
    }
    ++with_keys;
    for (int i = 1; i < kMoments; ++i) EXPECT_LE(m[i - 1], m[i]) << "block " << b << " moment " << i;
  }
  EXPECT_GT(with_keys, 8) << "too few blocks stamped: was the keys-as-rows kernel run?";
}

// The TMA loads' other page sizes: pages of 128 (a 64-key tile is half a
// page: boxes at slot offsets inside it) and of 32 at head_dim 64 (one
// 128-byte line a key), at tile, page and split edges, and a graph replay
// at pages of 64.
TEST(CudaDecodeAttention, TmaLoadsPagesOf32And128) {
  run_decode_case({32, 8, 128, 128, kDecodeTileEdges, 64}, 63);
  run_decode_case({16, 4, 64, 32, kSplitEdges}, 64);
  AttentionCase c{32, 8, 128, 64, {{8189, 6}, {128, 3}, {4095, 2}, {30, 5}}};
  c.decode_steps_with_graphs = true;
  run_decode_case(c, 65);
}

// A NaN cache: each sequence's last page holds NaN past its keys (and a
// split's last tile may take a warp's keys entirely past them), which the
// loaders must turn into zeros, since P = 0 times NaN is NaN. The prefix
// steps run on the mma prefill kernel, whose loads zero such keys too.
TEST(CudaDecodeAttention, StaleNanSlotsStayOut) {
  AttentionCase c{32, 8, 128, 16, kDecodeTileEdges, 64};
  c.nan_kv_cache = true;
  c.prefill_attention = cuda::PrefillAttention::mma;
  run_decode_case(c, 66, 2, /*default_prefill=*/false);
  AttentionCase pages_of_64{16, 4, 64, 64, {{0, 1}, {63, 1}, {64, 1}, {100, 1}, {5000, 1}, {130, 2}}};
  pages_of_64.nan_kv_cache = true;
  pages_of_64.prefill_attention = cuda::PrefillAttention::mma;
  run_decode_case(pages_of_64, 67, 2, /*default_prefill=*/false);
}

// Where the TMA loads apply (split_tma_loads_apply) and where the cp.async
// ring runs instead.
TEST(CudaDecodeAttention, TmaLoadsShapeRules) {
  alignas(16) static std::uint16_t cache[16];
  cuda::AttentionArgs args;
  args.k_cache = cache;
  args.v_cache = cache;
  args.num_q_heads = 32;
  args.num_kv_heads = 8;
  args.head_dim = 128;
  args.block_size_tokens = 16;
  args.kv_cache_slots = 1 << 20;
  args.decode_split_tiles = cuda::DecodeSplitTiles::keys_as_rows;
  args.decode_split_loads = cuda::DecodeSplitLoads::tma;
  EXPECT_TRUE(cuda::split_tma_loads_apply(args));
  args.decode_split_loads = cuda::DecodeSplitLoads::tma_steal;  // the same ring, its slices claimed
  EXPECT_TRUE(cuda::split_tma_loads_apply(args));
  args.decode_split_loads = cuda::DecodeSplitLoads::tma;
  auto with = [&](auto change) {
    cuda::AttentionArgs a = args;
    change(a);
    return cuda::split_tma_loads_apply(a);
  };
  for (const std::int32_t block : {16, 32, 64, 128, 256})
    EXPECT_TRUE(with([&](cuda::AttentionArgs& a) { a.block_size_tokens = block; })) << block;
  for (const std::int32_t block : {1, 7, 8, 13, 24, 48})
    EXPECT_FALSE(with([&](cuda::AttentionArgs& a) { a.block_size_tokens = block; })) << block;
  EXPECT_TRUE(with([](cuda::AttentionArgs& a) { a.head_dim = 64; }));
  EXPECT_FALSE(with([](cuda::AttentionArgs& a) { a.head_dim = 256; }));
  EXPECT_FALSE(with([](cuda::AttentionArgs& a) { a.num_kv_heads = 2; }));   // groups of 16: heads as rows
  EXPECT_FALSE(with([](cuda::AttentionArgs& a) { a.num_kv_heads = 32; }));  // no GQA: CUDA cores
  EXPECT_FALSE(with([](cuda::AttentionArgs& a) { a.decode_split_tiles = cuda::DecodeSplitTiles::heads_as_rows; }));
  EXPECT_FALSE(with([](cuda::AttentionArgs& a) { a.decode_split_loads = cuda::DecodeSplitLoads::cp_async; }));
  EXPECT_FALSE(with([](cuda::AttentionArgs& a) { a.kv_cache_slots = 0; }));
  EXPECT_FALSE(with([](cuda::AttentionArgs& a) { a.kv_cache_slots = 1LL << 31; }));
  EXPECT_FALSE(with([&](cuda::AttentionArgs& a) { a.v_cache = cache + 1; }));
}

// The q|k|v GEMV with RoPE and the KV page write as its epilogue
// (DecodeRopeFusion::qkv_epilogue) against the GEMV then the RoPE/page-write
// kernel (kv_write_kernel): decode steps under graphs (the first captured,
// the rest replayed at later positions), two Ops over the same random cache,
// weights and inputs. Each step attends to the pages the earlier steps
// wrote, and rows at a few keys weigh the new key heavily, so a wrong or
// missing page write shows in that row's output. Shapes: the GEMV's split K
// in 4, 2 and 1 parts (hidden 4096 under GemvSplitK::by_waves, 4096 and 2048
// under two_parts, 256), 1 to 4 rows, pages of 16 and 7, with the one-row
// GEMVs at 8 blocks a multiprocessor (the 32-register form); one row again at
// 6 blocks, the default since session 43 (cuda::set_gemv_one_row_blocks).
TEST(CudaDecodeAttention, QkvGemvRopeEpilogueMatchesSeparateKernels) {
  struct Case {
    std::int32_t num_q_heads, num_kv_heads, head_dim, block_size, hidden, rows;
    cuda::GemvSplitK split_k = cuda::GemvSplitK::two_parts;
    int one_row_blocks = 8;  // the form before session 43; the 6-block cases name theirs
  };
  constexpr std::int32_t kSteps = 4;
  const std::int32_t first_positions[4] = {2, 4000, 17, 0};
  std::uint64_t seed = 700;
  for (const Case c : {Case{32, 8, 128, 16, 4096, 1}, Case{32, 8, 128, 16, 4096, 3, cuda::GemvSplitK::by_waves},
                       Case{16, 4, 128, 16, 2048, 2}, Case{8, 2, 64, 7, 256, 4},
                       Case{32, 8, 128, 16, 4096, 1, cuda::GemvSplitK::two_parts, 6},
                       Case{32, 8, 128, 16, 4096, 1, cuda::GemvSplitK::by_waves, 6},
                       Case{8, 2, 64, 7, 256, 1, cuda::GemvSplitK::two_parts, 6}}) {
    SCOPED_TRACE(::testing::Message() << "heads " << c.num_q_heads << "/" << c.num_kv_heads << " x " << c.head_dim
                                      << ", hidden " << c.hidden << ", " << c.rows << " rows, pages of "
                                      << c.block_size << ", one-row GEMVs at " << c.one_row_blocks << " blocks");
    const ScopedGemvOneRowBlocks one_row_blocks(c.one_row_blocks);  // the graphs captured below keep it
    const std::int64_t q_width = static_cast<std::int64_t>(c.num_q_heads) * c.head_dim;
    const std::int64_t kv_width = static_cast<std::int64_t>(c.num_kv_heads) * c.head_dim;
    const std::int64_t n = q_width + 2 * kv_width;
    const std::int32_t blocks_per_seq = (4000 + kSteps) / c.block_size + 1;
    const auto w = random_bf16(static_cast<std::size_t>(n * c.hidden), ++seed, 0.05f);
    DeviceArray x(random_bf16(static_cast<std::size_t>(c.rows) * c.hidden, ++seed), DType::bf16, {c.rows, c.hidden});
    RopeParams rope = kLlama3Rope;
    rope.head_dim = c.head_dim;
    std::unique_ptr<Ops> ops[2];
    Tensor weight[2];
    for (int i = 0; i < 2; ++i) {
      CudaOptions options{.scratch_bytes = 256LL << 20, .use_cuda_graphs = true};
      options.decode_rope_fusion =
          i == 0 ? cuda::DecodeRopeFusion::qkv_epilogue : cuda::DecodeRopeFusion::kv_write_kernel;
      options.gemv_max_rows = static_cast<std::int32_t>(cuda::kGemvMaxRows);  // every row count the kernel has, 4 included
      options.gemv_split_k = c.split_k;
      auto made = make_cuda_ops(options);
      ASSERT_TRUE(made.ok()) << made.error_message();
      ops[i] = std::move(made).value();
      ASSERT_TRUE(ops[i]->allocate_kv_cache({.num_layers = 1, .num_blocks = c.rows * blocks_per_seq,
                                             .block_size_tokens = c.block_size, .num_kv_heads = c.num_kv_heads,
                                             .head_dim = c.head_dim}).ok());
      ASSERT_TRUE(cuda_fill_kv_cache_random(*ops[i], 9).ok());
      auto uploaded = ops[i]->upload_weight(Tensor{const_cast<float*>(w.data()), DType::f32, Shape{n, c.hidden}});
      ASSERT_TRUE(uploaded.ok()) << uploaded.error_message();
      weight[i] = *uploaded;
    }
    for (std::int32_t step = 0; step < kSteps; ++step) {
      StepLayout layout;
      for (std::int32_t r = 0; r < c.rows; ++r) {
        SequenceLayout seq{.row_begin = r, .num_rows = 1, .num_computed_tokens = first_positions[r] + step,
                           .block_table = {}};
        for (std::int32_t b = 0; b < blocks_per_seq; ++b) seq.block_table.push_back(r * blocks_per_seq + b);
        layout.sequences.push_back(seq);
        layout.token_ids.push_back(0);
        layout.positions.push_back(first_positions[r] + step);
      }
      // New inputs at the address the graphs read.
      sync();
      const auto x_step = random_bf16(static_cast<std::size_t>(c.rows) * c.hidden, ++seed);
      std::vector<std::uint16_t> bits(x_step.size());
      for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = f32_to_bf16(x_step[i]);
      ASSERT_EQ(cudaMemcpy(x.tensor().data, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
      std::vector<float> got[2][3];  // [ops][out, q, k]
      for (int i = 0; i < 2; ++i) {
        ops[i]->begin_step(layout);
        Tensor q = ops[i]->scratch({c.rows, q_width}), k = ops[i]->scratch({c.rows, kv_width}),
               v = ops[i]->scratch({c.rows, kv_width}), out = ops[i]->scratch({c.rows, q_width});
        // Not poison(): no device-wide sync while the stream captures.
        ASSERT_EQ(cudaMemset(out.data, 0xff, out.size_bytes()), cudaSuccess);
        settle_default_stream();
        const std::array<Tensor, 3> no_bias{};
        ops[i]->qkv_projection(x.tensor(), weight[i], no_bias, q, k, v);
        ops[i]->rope(q, k, rope);
        ops[i]->attention(0, q, k, v, 1.0f / std::sqrt(static_cast<float>(c.head_dim)), out);
        (void)ops[i]->sample(Tensor{nullptr, DType::bf16, Shape{0, 1}}, {});
        got[i][0] = download(out);
        got[i][1] = download(q);
        got[i][2] = download(k);
      }
      for (int t = 0; t < 3; ++t) {
        const std::int64_t width = t == 2 ? kv_width : q_width;
        for (std::int32_t r = 0; r < c.rows; ++r) {
          const auto begin = got[1][t].begin() + r * width;
          const std::vector<double> ref(begin, begin + width);
          const std::vector<float> fused(got[0][t].begin() + r * width, got[0][t].begin() + (r + 1) * width);
          EXPECT_LE(relative_error(fused, ref), 2e-3)
              << (t == 0 ? "attention output" : t == 1 ? "rotated q" : "rotated k") << ", step " << step << ", row "
              << r << " (position " << layout.positions[r] << ")";
        }
      }
    }
    Result<std::int64_t> fused = cuda_qkv_rope_epilogue_launches(*ops[0]);
    Result<std::int64_t> separate = cuda_qkv_rope_epilogue_launches(*ops[1]);
    ASSERT_TRUE(fused.ok() && separate.ok());
    EXPECT_GT(*fused, 0) << "the fused GEMV never ran: the comparison tested nothing";
    EXPECT_EQ(*separate, 0);
  }
}

}  // namespace
}  // namespace sluice
