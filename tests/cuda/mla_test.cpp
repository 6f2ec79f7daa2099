// MLA (DeepSeek-V3 attention) and its partial RoPE on the CUDA backend
// against the CPU reference Ops (backend/cpu/deepseek_ops.cpp, itself checked
// against transformers through the DeepSeek-V3 goldens), on the same random
// bf16-representable inputs: prefill from zero, chunks over cached prefixes
// that cross blocks, decode at several contexts, mixed steps, decode steps
// captured and replayed as CUDA graphs, and dims other than DeepSeek-V3's
// (the simple kernels' generic path). Every MLA case runs under every kernel
// set (CudaOptions::mla_kernels, the suite's parameter: .../simple,
// .../tensor_core, .../wgmma and the 16-head sets
// .../mma_16_heads, .../mma_16_heads_pairs and .../mma_16_heads_one_barrier,
// which take their own kernels at <= 16 heads and block sizes that are
// multiples of 8, wgmma's kernel elsewhere).
//
// Tolerances. The CPU runs in f32; CUDA keeps bf16 (8 significant bits,
// relative rounding <= 2^-9) at each of: the decompressed K/V (prefill) or the
// absorbed query and the latent output (decode), the probabilities fed to
// the tensor cores, and the output. Inputs are scaled so outputs are O(0.1-1)
// and scores spread over a few units (a peaked but not one-hot softmax). With
// ~4 roundings of <= 2^-9 relative each on values <= ~2, any element may err
// by ~0.016 at worst when they line up; we allow max |delta| <= 0.03, and the
// L2 error relative to the reference's norm <= 1e-2 (the backend's bf16 bound
// elsewhere; ~2e-3 expected).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "sluice/backend/cpu/cpu_ops.h"
#include "sluice/backend/cuda/cudnn_sdpa.h"
#include "sluice/common/setup_time.h"
#include "test_util.h"

namespace sluice {
namespace {

using namespace sluice::testing;

constexpr double kMaxAbsTolerance = 0.03;
constexpr double kRelativeTolerance = 1e-2;

// The largest |got - want| and where, and the relative L2 error; fails with
// both values and the element's (row, column) spelled out.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, std::int64_t cols,
                  double max_abs_tolerance, double relative_tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0.0, num = 0.0, den = 0.0;
  std::size_t worst_at = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double delta = std::isfinite(got[i]) ? std::abs(double(got[i]) - want[i]) : INFINITY;
    if (!(delta <= worst)) {
      worst = delta;
      worst_at = i;
    }
    num += delta * delta;
    den += double(want[i]) * want[i];
  }
  const double relative = std::sqrt(num / std::max(den, 1e-300));
  const auto row = static_cast<std::int64_t>(worst_at) / cols, col = static_cast<std::int64_t>(worst_at) % cols;
  EXPECT_LE(worst, max_abs_tolerance) << what << ": max |delta| " << worst << " at row " << row << ", column "
                                      << col << " (cuda " << got[worst_at] << ", cpu " << want[worst_at]
                                      << "); relative L2 error " << relative;
  EXPECT_LE(relative, relative_tolerance) << what << ": relative L2 error " << relative << "; max |delta| " << worst
                                          << " at row " << row << ", column " << col;
}

// The step of `sequences` (row_begin and positions derived), one token id each row.
StepLayout make_layout(const std::vector<SequenceLayout>& sequences) {
  StepLayout layout;
  for (SequenceLayout seq : sequences) {
    seq.row_begin = layout.num_rows();
    for (std::int32_t i = 0; i < seq.num_rows; ++i) {
      layout.token_ids.push_back(0);
      layout.positions.push_back(seq.num_computed_tokens + i);
    }
    layout.sequences.push_back(seq);
  }
  return layout;
}

// --- rope_partial ---

TEST(CudaMla, RopePartialMatchesCpu) {
  auto cuda_ops = make_test_ops();
  auto cpu_ops = make_cpu_ops({});
  std::uint64_t seed = 7000;
  struct Placement {
    std::int32_t num_heads, head_stride, rotary_offset;
  };
  // q's rope dims at the end of each 192-dim head; k_rope alone.
  for (const Placement placement : {Placement{16, 192, 128}, Placement{1, 64, 0}}) {
    for (bool yarn : {false, true}) {
      for (bool interleaved : {false, true}) {
        for (DType dtype : {DType::f32, DType::bf16}) {
          SCOPED_TRACE(::testing::Message() << "heads " << placement.num_heads << " stride " << placement.head_stride
                                            << " yarn " << yarn << " interleaved " << interleaved << " "
                                            << dtype_name(dtype));
          RopeParams params{.head_dim = 64, .theta = 10000.0f, .interleaved = interleaved};
          if (yarn) {
            params.yarn_factor = 40.0f;
            params.yarn_original_max_position = 4096;
            params.cos_sin_scale = 1.0f + 0.1f * std::log(40.0f);
          }
          const std::int32_t rows = 37;
          const std::int64_t cols = static_cast<std::int64_t>(placement.num_heads) * placement.head_stride;
          // Positions up to 160k: YaRN past its original 4k.
          SplitMix64 rng(++seed);
          std::vector<SequenceLayout> seqs{{.num_rows = rows, .num_computed_tokens = 0}};
          StepLayout layout = make_layout(seqs);
          for (std::int32_t& p : layout.positions) p = static_cast<std::int32_t>(rng.next() % 160000);
          std::vector<float> x = random_bf16(static_cast<std::size_t>(rows * cols), ++seed, 2.0f);

          DeviceArray dx(x, dtype, {rows, cols});
          cuda_ops->begin_step(layout);
          ASSERT_TRUE(cuda_ops->rope_partial(dx.tensor(), placement.head_stride, placement.rotary_offset, params).ok());
          const std::vector<float> got = download(dx.tensor());

          std::vector<float> want = x;
          cpu_ops->begin_step(layout);
          ASSERT_TRUE(cpu_ops
                          ->rope_partial(Tensor{want.data(), DType::f32, Shape{rows, cols}}, placement.head_stride,
                                         placement.rotary_offset, params)
                          .ok());
          // f32: both rotate by the f32 angle; sincosf and std::cos differ by
          // a few ulp. bf16: one rounding of values <= ~2.4.
          const double tolerance = dtype == DType::f32 ? 1e-5 : 1e-2;
          expect_close(got, want, cols, tolerance, tolerance, "rope_partial");
        }
      }
    }
  }
}

// --- mla_attention ---

struct MlaSeqSpec {
  std::int32_t prefix_tokens;  // written by the first step (itself compared)
  std::int32_t num_rows;       // the rows of the step under test
};

struct MlaCase {
  std::string name;
  std::int32_t num_heads = 16;
  std::int32_t qk_nope_head_dim = 128, qk_rope_head_dim = 64, v_head_dim = 128, kv_lora_rank = 512;
  std::int32_t block_size = 16;
  std::vector<MlaSeqSpec> seqs;
  // The rows under test as one decode step each (every sequence one row),
  // through CUDA graphs: captured at one context, replayed at the others.
  bool decode_steps_with_graphs = false;
  // The CUDA cache filled with NaN before the first step: every kernel must
  // keep the slots past a row's context (a block's tail) out of its result.
  bool nan_kv_cache = false;
  // Set (max_step_rows > 0): a server's options, plans on the builder thread
  // and MLA's classes within these bounds queued at the first prefill.
  cuda::SdpaServingBounds cudnn_serving_bounds;
};

class MlaHarness {
 public:
  MlaHarness(const MlaCase& c, cuda::MlaKernels kernels, std::uint64_t seed,
             cuda::PrefillAttention prefill = cuda::PrefillAttention::wgmma_ws)
      : c_(c), seed_(seed), cpu_(make_cpu_ops({})) {
    shape_ = MlaShape{.num_heads = c.num_heads,
                      .qk_nope_head_dim = c.qk_nope_head_dim,
                      .qk_rope_head_dim = c.qk_rope_head_dim,
                      .v_head_dim = c.v_head_dim,
                      .kv_lora_rank = c.kv_lora_rank,
                      .softmax_scale = 1.0f / std::sqrt(static_cast<float>(c.qk_nope_head_dim + c.qk_rope_head_dim))};
    CudaOptions options{.scratch_bytes = 256LL << 20,
                        .use_cuda_graphs = c.decode_steps_with_graphs,
                        .prefill_attention = prefill,
                        .mla_kernels = kernels};
    if (c.cudnn_serving_bounds.max_step_rows > 0) {
      options.cudnn_plans_in_background = true;
      options.cudnn_serving_bounds = c.cudnn_serving_bounds;
    }
    auto cuda = make_cuda_ops(options);
    SLUICE_CHECK_MSG(cuda.ok(), cuda.error_message());
    cuda_ = std::move(cuda).value();

    std::int32_t num_blocks = 2;
    for (const MlaSeqSpec& s : c.seqs) num_blocks += (s.prefix_tokens + s.num_rows + c.block_size - 1) / c.block_size;
    // Shuffled physical blocks: a sequence's pages are never contiguous.
    SplitMix64 rng(seed_);
    std::vector<BlockId> blocks(static_cast<std::size_t>(num_blocks));
    std::iota(blocks.begin(), blocks.end(), 0);
    for (std::size_t i = blocks.size() - 1; i > 0; --i) std::swap(blocks[i], blocks[rng.next() % (i + 1)]);
    std::size_t next = 0;
    for (const MlaSeqSpec& s : c.seqs) {
      std::vector<BlockId> table;
      for (std::int32_t b = 0; b < (s.prefix_tokens + s.num_rows + c.block_size - 1) / c.block_size; ++b)
        table.push_back(blocks[next++]);
      tables_.push_back(table);
    }
    const KvCacheSpec spec{.num_layers = 2,
                           .num_blocks = num_blocks,
                           .block_size_tokens = c.block_size,
                           .num_kv_heads = 1,
                           .head_dim = c.kv_lora_rank + c.qk_rope_head_dim,
                           .layout = KvCacheLayout::latent};
    SLUICE_CHECK(cpu_->allocate_kv_cache(spec).ok());
    SLUICE_CHECK(cuda_->allocate_kv_cache(spec).ok());
    if (c.nan_kv_cache) SLUICE_CHECK(cuda_fill_kv_cache_nan(*cuda_).ok());

    const std::int64_t kv_b_rows = static_cast<std::int64_t>(c.num_heads) * (c.qk_nope_head_dim + c.v_head_dim);
    kv_b_proj_ = random_bf16(static_cast<std::size_t>(kv_b_rows * c.kv_lora_rank), ++seed_, 0.1f);
    const Tensor host{kv_b_proj_.data(), DType::f32, Shape{kv_b_rows, c.kv_lora_rank}};
    auto cpu_w = cpu_->upload_weight(host);
    auto cuda_w = cuda_->upload_weight(host);
    SLUICE_CHECK(cpu_w.ok() && cuda_w.ok());
    cpu_kv_b_proj_ = cpu_w.value();
    cuda_kv_b_proj_ = cuda_w.value();
  }

  // Runs the step where sequence s has rows [begin_s, end_s) on layer 1 of
  // both backends and compares the outputs.
  void run_step(const std::vector<std::pair<std::int32_t, std::int32_t>>& ranges, const std::string& what) {
    std::vector<SequenceLayout> seqs;
    for (std::size_t s = 0; s < ranges.size(); ++s)
      seqs.push_back({.num_rows = ranges[s].second - ranges[s].first,
                      .num_computed_tokens = ranges[s].first,
                      .block_table = tables_[s]});
    const StepLayout layout = make_layout(seqs);
    const std::int32_t rows = layout.num_rows();
    const std::int64_t q_cols = static_cast<std::int64_t>(c_.num_heads) * shape_.qk_head_dim();
    const std::int64_t out_cols = static_cast<std::int64_t>(c_.num_heads) * c_.v_head_dim;
    std::vector<float> q = random_bf16(static_cast<std::size_t>(rows * q_cols), ++seed_, 4.0f);
    std::vector<float> latent = random_bf16(static_cast<std::size_t>(rows) * c_.kv_lora_rank, ++seed_, 1.0f);
    std::vector<float> k_rope = random_bf16(static_cast<std::size_t>(rows) * c_.qk_rope_head_dim, ++seed_, 1.0f);

    cpu_->begin_step(layout);
    Tensor cpu_out = cpu_->scratch({rows, out_cols});
    const MlaInputs cpu_in{.q = Tensor{q.data(), DType::f32, Shape{rows, q_cols}},
                           .latent = Tensor{latent.data(), DType::f32, Shape{rows, c_.kv_lora_rank}},
                           .k_rope = Tensor{k_rope.data(), DType::f32, Shape{rows, c_.qk_rope_head_dim}},
                           .kv_b_proj = cpu_kv_b_proj_};
    ASSERT_TRUE(cpu_->mla_attention(kLayer, cpu_in, shape_, cpu_out).ok());
    const std::vector<float> want(cpu_out.as<float>(), cpu_out.as<float>() + cpu_out.numel());

    // Inputs and output in the Ops' scratch, so a replayed graph finds them
    // where it was captured (scratch is handed out in the same order every
    // step); the zero-row sample() launches the step's graph.
    cuda_->begin_step(layout);
    Tensor dq = cuda_->scratch({rows, q_cols}), dl = cuda_->scratch({rows, c_.kv_lora_rank}),
           dr = cuda_->scratch({rows, c_.qk_rope_head_dim}), out = cuda_->scratch({rows, out_cols});
    put(dq, q);
    put(dl, latent);
    put(dr, k_rope);
    SLUICE_CHECK(cudaMemset(out.data, 0xff, out.size_bytes()) == cudaSuccess);
    settle_default_stream();
    const Status status =
        cuda_->mla_attention(kLayer, {.q = dq, .latent = dl, .k_rope = dr, .kv_b_proj = cuda_kv_b_proj_}, shape_, out);
    ASSERT_TRUE(status.ok()) << status.error_message();
    (void)cuda_->sample(Tensor{nullptr, DType::bf16, Shape{0, 1}}, {});
    expect_close(download(out), want, out_cols, kMaxAbsTolerance, kRelativeTolerance, c_.name + ", " + what);
  }

  void run_case() {
    std::vector<std::pair<std::int32_t, std::int32_t>> prefix, under_test;
    std::int32_t max_rows = 0;
    for (const MlaSeqSpec& s : c_.seqs) {
      prefix.push_back({0, s.prefix_tokens});
      under_test.push_back({s.prefix_tokens, s.prefix_tokens + s.num_rows});
      max_rows = std::max(max_rows, s.num_rows);
    }
    run_step(prefix, "prefix step");
    if (!c_.decode_steps_with_graphs) {
      run_step(under_test, "step under test");
      return;
    }
    for (std::int32_t i = 0; i < max_rows; ++i) {
      std::vector<std::pair<std::int32_t, std::int32_t>> step;
      for (const MlaSeqSpec& s : c_.seqs) {
        const std::int32_t pos = s.prefix_tokens + i;
        step.push_back({pos, pos + 1});
      }
      run_step(step, "decode step " + std::to_string(i));
    }
  }

  std::int64_t cudnn_runs() const {
    Result<std::int64_t> runs = cuda_cudnn_sdpa_runs(*cuda_);
    SLUICE_CHECK_MSG(runs.ok(), runs.error_message());
    return *runs;
  }

 private:
  static constexpr std::int32_t kLayer = 1;  // not 0: the layer's offset into the cache is exercised

  static void put(const Tensor& t, const std::vector<float>& values) {
    std::vector<std::uint16_t> bits(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) bits[i] = f32_to_bf16(values[i]);
    SLUICE_CHECK(cudaMemcpy(t.data, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice) == cudaSuccess);
  }

  MlaCase c_;
  std::uint64_t seed_;
  MlaShape shape_;
  std::unique_ptr<Ops> cpu_;
  std::unique_ptr<Ops> cuda_;
  std::vector<std::vector<BlockId>> tables_;
  std::vector<float> kv_b_proj_;  // host copy: the CPU's weight is a view of it
  Tensor cpu_kv_b_proj_, cuda_kv_b_proj_;
};

class CudaMlaAttention : public ::testing::TestWithParam<cuda::MlaKernels> {
 protected:
  void run(const MlaCase& c, std::uint64_t seed) {
    MlaHarness harness(c, GetParam(), seed);
    harness.run_case();
  }
};

// Two prompts from position 0 in one step, one over two 128-row query tiles.
TEST_P(CudaMlaAttention, PrefillFromZero) {
  run({.name = "prefill from zero", .seqs = {{.prefix_tokens = 0, .num_rows = 150}, {.prefix_tokens = 0, .num_rows = 37}}},
      8100);
}

// Chunks over cached prefixes that end mid-block; the chunk crosses several blocks.
TEST_P(CudaMlaAttention, ChunkOverCachedPrefixCrossingBlocks) {
  run({.name = "chunk over prefix",
       .seqs = {{.prefix_tokens = 45, .num_rows = 70}, {.prefix_tokens = 130, .num_rows = 3}}},
      8200);
}

// One decode step at contexts 1 and on both sides of block boundaries, and long.
TEST_P(CudaMlaAttention, DecodeAtSeveralContexts) {
  run({.name = "decode",
       .seqs = {{.prefix_tokens = 0, .num_rows = 1},
                {.prefix_tokens = 15, .num_rows = 1},
                {.prefix_tokens = 16, .num_rows = 1},
                {.prefix_tokens = 17, .num_rows = 1},
                {.prefix_tokens = 300, .num_rows = 1},
                {.prefix_tokens = 1500, .num_rows = 1}}},
      8300);
}

// DeepSeek-V3's 128 heads: two 64-head groups in the tensor-core kernel.
TEST_P(CudaMlaAttention, DecodeWith128Heads) {
  run({.name = "decode 128 heads",
       .num_heads = 128,
       .seqs = {{.prefix_tokens = 700, .num_rows = 1}, {.prefix_tokens = 33, .num_rows = 1}}},
      8400);
}

// Decode steps the wgmma kernels run in one split per (row, head group), so
// their blocks write o_latent themselves (no combine): 128 heads at contexts
// within one 64-key tile, and 70 rows (>= 66 blocks: half the H200's SMs or
// more, where a second split would cost a second wave) at contexts across
// several tiles and block boundaries (1 to 4 tiles, odd counts and even).
TEST_P(CudaMlaAttention, DecodeInOneSplit) {
  run({.name = "decode, one tile",
       .num_heads = 128,
       .seqs = {{.prefix_tokens = 0, .num_rows = 1},
                {.prefix_tokens = 20, .num_rows = 1},
                {.prefix_tokens = 47, .num_rows = 1},
                {.prefix_tokens = 63, .num_rows = 1}}},
      8450);
  MlaCase many{.name = "decode, 70 rows", .seqs = {}};
  for (std::int32_t r = 0; r < 70; ++r) many.seqs.push_back({.prefix_tokens = (r * 37) % 200, .num_rows = 1});
  run(many, 8460);
}

// Block sizes other than 16 under decode: the wgmma kernel looks each key's
// cache slot up once a tile, a lane a row (page and offset by a division by
// the block size): pages smaller than a loading warp's 16 rows (8), pages
// that straddle its 64-key tiles (48) and pages longer than a tile (128),
// over several splits a row, then over several tiles of one split (70 rows).
TEST_P(CudaMlaAttention, DecodeWithOtherBlockSizes) {
  for (const std::int32_t block_size : {8, 48, 128}) {
    run({.name = "decode, block size " + std::to_string(block_size),
         .num_heads = 64,
         .block_size = block_size,
         .seqs = {{.prefix_tokens = 0, .num_rows = 1},
                  {.prefix_tokens = 100, .num_rows = 1},
                  {.prefix_tokens = 191, .num_rows = 1},
                  {.prefix_tokens = 450, .num_rows = 1}}},
        8800 + static_cast<std::uint64_t>(block_size));
  }
  MlaCase many{.name = "decode, block size 48, 70 rows", .block_size = 48, .seqs = {}};
  for (std::int32_t r = 0; r < 70; ++r) many.seqs.push_back({.prefix_tokens = 64 + (r * 37) % 240, .num_rows = 1});
  run(many, 8950);
}

// Decode at the head counts of tensor parallel shares of DeepSeek-V3's 128
// (16 under TP8, 8 under TP16) and one that is not a multiple of 8 (12: the
// 16-head kernels pad the MMA's M with zero queries), at contexts on both
// sides of their 32-key tiles and wgmma's 64-key ones (1, 63, 64, 65, 128,
// 129, and 701), and at 16 heads over the block sizes whose pages their TMA
// boxes cover (8, 16, 48, 128): a few rows take many splits, several of them
// empty. Then 70 rows in one split (its blocks write o_latent themselves)
// over up to 24 tiles of 32 keys, so the 16-head kernels' rings wrap around
// several times (again at pages of 8 rows, four boxes a tile). Block size 12
// is not a multiple of 8: the 16-head sets take wgmma's kernel there.
TEST_P(CudaMlaAttention, DecodeWithFewHeads) {
  struct Shape {
    std::int32_t heads, block_size;
  };
  for (const Shape shape : {Shape{16, 16}, Shape{16, 8}, Shape{16, 48}, Shape{16, 128}, Shape{8, 16}, Shape{12, 48},
                            Shape{16, 12}}) {
    run({.name = "decode, " + std::to_string(shape.heads) + " heads, block size " + std::to_string(shape.block_size),
         .num_heads = shape.heads,
         .block_size = shape.block_size,
         .seqs = {{.prefix_tokens = 0, .num_rows = 1},
                  {.prefix_tokens = 62, .num_rows = 1},
                  {.prefix_tokens = 63, .num_rows = 1},
                  {.prefix_tokens = 64, .num_rows = 1},
                  {.prefix_tokens = 127, .num_rows = 1},
                  {.prefix_tokens = 128, .num_rows = 1},
                  {.prefix_tokens = 700, .num_rows = 1}}},
        9400 + static_cast<std::uint64_t>(shape.heads * 1000 + shape.block_size));
  }
  // And at pages of 8 rows, a tile of 32 keys is four boxes of four pages.
  for (const Shape shape : {Shape{16, 16}, Shape{12, 16}, Shape{16, 8}}) {
    MlaCase many{.name = "decode, " + std::to_string(shape.heads) + " heads, 70 rows, block size " +
                         std::to_string(shape.block_size),
                 .num_heads = shape.heads,
                 .block_size = shape.block_size,
                 .seqs = {}};
    for (std::int32_t r = 0; r < 70; ++r) many.seqs.push_back({.prefix_tokens = (r * 37) % 760, .num_rows = 1});
    run(many, 9500 + static_cast<std::uint64_t>(shape.heads) + (shape.block_size == 8 ? 100 : 0));
  }
}

// A cache that starts as NaN: the slots past each context (the tails of
// partial blocks and 64-key tiles, at 16 and 128 heads) hold NaN, so a kernel
// that lets a stale key or value into its sums fails here, where a zeroed or
// finite cache would hide it.
TEST_P(CudaMlaAttention, StaleNanSlotsStayOut) {
  for (const std::int32_t heads : {16, 128}) {
    run({.name = "NaN cache, " + std::to_string(heads) + " heads",
         .num_heads = heads,
         .block_size = 48,
         .seqs = {{.prefix_tokens = 0, .num_rows = 1},
                  {.prefix_tokens = 62, .num_rows = 1},
                  {.prefix_tokens = 64, .num_rows = 1},
                  {.prefix_tokens = 100, .num_rows = 1},
                  {.prefix_tokens = 700, .num_rows = 1},
                  {.prefix_tokens = 30, .num_rows = 20}},
         .nan_kv_cache = true},
        9600 + static_cast<std::uint64_t>(heads));
  }
}

// Prefill chunks and decodes in one step, decodes between and after prefills.
TEST_P(CudaMlaAttention, MixedBatch) {
  run({.name = "mixed",
       .seqs = {{.prefix_tokens = 0, .num_rows = 40},
                {.prefix_tokens = 64, .num_rows = 1},
                {.prefix_tokens = 20, .num_rows = 25},
                {.prefix_tokens = 100, .num_rows = 1},
                {.prefix_tokens = 5, .num_rows = 1}}},
      8500);
}

// Decode steps under CUDA graphs: the longest contexts are 255, 256 and 257,
// so step 0 is captured in bucket 256, step 1 replays it at another context
// and step 2 is captured in bucket 512.
TEST_P(CudaMlaAttention, GraphReplayedDecodeSteps) {
  run({.name = "graph decode",
       .seqs = {{.prefix_tokens = 40, .num_rows = 3},
                {.prefix_tokens = 254, .num_rows = 3},
                {.prefix_tokens = 17, .num_rows = 3}},
       .decode_steps_with_graphs = true},
      8600);
}

// Dims other than DeepSeek-V3's run the simple kernels under either choice.
TEST_P(CudaMlaAttention, OtherDimsMixedBatch) {
  run({.name = "other dims",
       .num_heads = 4,
       .qk_nope_head_dim = 32,
       .qk_rope_head_dim = 16,
       .v_head_dim = 24,
       .kv_lora_rank = 64,
       .block_size = 8,
       .seqs = {{.prefix_tokens = 0, .num_rows = 20},
                {.prefix_tokens = 30, .num_rows = 1},
                {.prefix_tokens = 10, .num_rows = 12}}},
      8700);
}

// MLA prefill under PrefillAttention::cudnn: cuDNN's SDPA over the
// decompressed keys (QK 192, V 128), against the same CPU reference; where
// libcudnn.so.9 is 9.19 or newer it must have run (older ones refuse these
// dims, and our kernels run instead). Decodes stay on tensor_core.
class CudaMlaCudnnPrefill : public ::testing::Test {
 protected:
  static void run(const MlaCase& c, std::uint64_t seed) {
    MlaHarness harness(c, cuda::MlaKernels::tensor_core, seed, cuda::PrefillAttention::cudnn);
    harness.run_case();
    auto probe = cuda::CudnnSdpa::open(nullptr);
    if (probe.ok() && (*probe)->version() >= 91900) {
      EXPECT_GT(harness.cudnn_runs(), 0) << c.name;
    }
  }
};

TEST_F(CudaMlaCudnnPrefill, PrefillFromZero) {
  run({.name = "cudnn prefill from zero",
       .seqs = {{.prefix_tokens = 0, .num_rows = 150}, {.prefix_tokens = 0, .num_rows = 37}}},
      9100);
}
TEST_F(CudaMlaCudnnPrefill, ChunksOverPrefixesWithDecodes) {
  run({.name = "cudnn chunks and decodes",
       .seqs = {{.prefix_tokens = 45, .num_rows = 70},
                {.prefix_tokens = 64, .num_rows = 1},
                {.prefix_tokens = 130, .num_rows = 3},
                {.prefix_tokens = 1000, .num_rows = 300}}},
      9200);
}
// DeepSeek-V3's 128 heads over a 1.5k prefix.
TEST_F(CudaMlaCudnnPrefill, AllHeadsLongerPrefix) {
  run({.name = "cudnn 128 heads", .num_heads = 128, .seqs = {{.prefix_tokens = 1500, .num_rows = 200}}}, 9300);
}

// A server's MLA (serve's bounds, plans on the builder thread): the first
// prefill queues every class within the bounds and waits for them, so a
// later chunk of another class builds nothing on its path (S34-4: in line,
// 45-150 ms a plan and 1.1 s for the first of a kind, the burst's longest gap).
TEST(CudaMlaCudnnPlans, ChunksWithinTheBoundsBuildNoPlanOnTheirPath) {
  const MlaCase c{.name = "cudnn plans before serving",
                  .seqs = {{.prefix_tokens = 300, .num_rows = 200}, {.prefix_tokens = 40, .num_rows = 90}},
                  .cudnn_serving_bounds = {.num_q_heads = 16, .max_step_rows = 512, .max_keys = 1024,
                                           .max_sequences = 2}};
  MlaHarness harness(c, cuda::MlaKernels::tensor_core, 9400, cuda::PrefillAttention::cudnn);
  harness.run_step({{0, 300}, {0, 40}}, "the first prefill (plans queued)");
  const double setup_before = total_setup_ms();
  // Keys 500 and 130 with rows 200 and 90: classes the first step did not use.
  harness.run_step({{300, 500}, {40, 130}}, "chunks of other classes");
  auto probe = cuda::CudnnSdpa::open(nullptr);
  if (probe.ok() && (*probe)->version() >= 91900) {
    EXPECT_GT(harness.cudnn_runs(), 0);
    EXPECT_EQ(total_setup_ms(), setup_before) << "a plan was built on the second step's path";
  }
}

INSTANTIATE_TEST_SUITE_P(MlaKernels, CudaMlaAttention,
                         ::testing::Values(cuda::MlaKernels::simple, cuda::MlaKernels::tensor_core,
                                           cuda::MlaKernels::wgmma, cuda::MlaKernels::mma_16_heads,
                                           cuda::MlaKernels::mma_16_heads_pairs,
                                           cuda::MlaKernels::mma_16_heads_one_barrier),
                         [](const ::testing::TestParamInfo<cuda::MlaKernels>& info) {
                           // The set's option name, as gtest names take it ("mma-16-heads" -> "mma_16_heads").
                           std::string name(cuda::name_of(info.param, cuda::kMlaKernelsNames));
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace sluice
