// The CUDA backend against the Hugging Face goldens that the CPU backend
// passes (tests/fixtures/golden_*.json): logits within 1e-2 relative error
// (bf16 activations), or twice transformers' own bf16 error where that is
// larger, after the prompt and after 31 more tokens, and the
// golden greedy tokens wherever the step is decisive, for every architecture,
// one sequence at a time with chunked prefill and all prompts batched together;
// free-running, the golden tokens for as long as the float32 reference's
// steps are wide.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "../model/test_models.h"
#include "golden_margins.h"
#include "sluice/backend/cpu/cpu_ops.h"
#include "sluice/backend/cuda/cuda_ops.h"
#include "sluice/common/io.h"
#include "sluice/model/generate.h"
#include "sluice/model/model_runner.h"

namespace sluice {
namespace {

constexpr double kMaxRelativeLogitError = 1e-2;
// Where transformers' own bf16 forward errs more than that at a position, ours
// may err up to this multiple of it (FlashAttention-3's rule for kernels).
constexpr double kMaxErrorOverReferenceBf16 = 2.0;

using testing::Golden;
using testing::GoldenCase;
using testing::top2_margin;

Golden load_golden(const std::string& arch) { return testing::load_golden(arch, "cuda-golden-" + arch); }

double relative_error(const std::vector<float>& got, const std::vector<float>& ref) {
  EXPECT_EQ(got.size(), ref.size());
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < std::min(got.size(), ref.size()); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

std::unique_ptr<Backend> cuda_runner(const std::string& dir, std::int32_t block_size, std::int32_t num_blocks) {
  auto ops = make_cuda_ops({.scratch_bytes = 64LL << 20});
  EXPECT_TRUE(ops.ok()) << ops.error_message();
  auto backend = make_model_runner(dir, std::move(ops).value(),
                                   {.block_size_tokens = block_size, .num_kv_blocks = num_blocks});
  EXPECT_TRUE(backend.ok()) << backend.error_message();
  return std::move(backend).value();
}

// Greedy decoding is compared teacher-forced: each step feeds the golden
// token, so one near-tie (the fixtures have top-2 gaps of 0.007 on logits of
// rms 1, below bf16's resolution) does not derail the rest of the sequence.
// A step's token must equal the golden one whenever our own top-2 margin
// exceeds kDecisiveMargin: a mismatch there means a logit error of that size.
constexpr float kDecisiveMargin = 0.1f;

// transformers' own bf16 logits at the same two positions (golden_bf16_*.json,
// tools/reference/golden.py --bf16): the bar for a bf16 backend is the error
// the reference implementation itself makes in bf16.
struct Bf16Reference {
  std::vector<std::vector<float>> prompt_logits, final_logits;  // per golden case
};

Bf16Reference load_bf16_reference(const std::string& arch) {
  auto text = read_file(std::string(SLUICE_SOURCE_DIR) + "/tests/fixtures/golden_bf16_" + arch + ".json");
  EXPECT_TRUE(text.ok()) << text.error_message();
  Bf16Reference ref;
  if (!text.ok()) return ref;
  const auto fixture = nlohmann::json::parse(text.value());  // kept alive: the loop walks into it
  for (const auto& c : fixture.at("cases")) {
    ref.prompt_logits.push_back(c.at("prompt_logits"));
    ref.final_logits.push_back(c.at("final_logits"));
  }
  return ref;
}

// Relative errors against the float32 golden, summed over checked positions.
struct Bf16Tally {
  double ours = 0.0, transformers_bf16 = 0.0, ours_vs_transformers_bf16_max = 0.0;
  int positions = 0;
  void add(const std::vector<float>& got, const std::vector<float>& f32, const std::vector<float>& bf16) {
    ours += relative_error(got, f32);
    transformers_bf16 += relative_error(bf16, f32);
    ours_vs_transformers_bf16_max = std::max(ours_vs_transformers_bf16_max, relative_error(got, bf16));
    ++positions;
  }
};

struct SequenceRun {
  const GoldenCase* golden;
  std::size_t case_index = 0;
  std::vector<TokenId> tokens;  // prompt, then the golden tokens fed so far
  std::vector<BlockId> table;
  std::int32_t computed = 0;
};

// Runs the sequences to the end of their golden tokens, `chunk` prompt tokens
// per step (0 = whole prompt), all of them in every step.
void run_teacher_forced(Backend& backend, std::vector<SequenceRun>& runs, std::int32_t chunk,
                        const Bf16Reference& bf16, Bf16Tally* tally = nullptr) {
  auto bound = [](const std::vector<float>& f32, const std::vector<float>& reference_bf16) {
    return std::max(kMaxRelativeLogitError, kMaxErrorOverReferenceBf16 * relative_error(reference_bf16, f32));
  };
  std::vector<int> step_of(runs.size(), 0);
  int num_decisive = 0;
  for (bool active = true; active;) {
    active = false;
    Batch batch;
    std::vector<std::size_t> index;
    for (std::size_t i = 0; i < runs.size(); ++i) {
      SequenceRun& r = runs[i];
      if (step_of[i] >= 32) continue;
      const auto total = static_cast<std::int32_t>(r.tokens.size());
      const std::int32_t n = chunk > 0 ? std::min(chunk, total - r.computed) : total - r.computed;
      const bool samples = r.computed + n == total;
      batch.sequences.push_back({.seq_id = i,
                                 .tokens = r.tokens,
                                 .num_prompt_tokens = static_cast<std::int32_t>(r.golden->prompt.size()),
                                 .num_computed_tokens = r.computed,
                                 .num_new_tokens = n,
                                 .block_table = r.table,
                                 .sample = samples,
                                 .return_logits = samples});
      index.push_back(i);
    }
    if (batch.sequences.empty()) break;
    auto output = backend.execute(batch);
    ASSERT_TRUE(output.ok()) << output.error_message();
    for (std::size_t b = 0; b < index.size(); ++b) {
      SequenceRun& r = runs[index[b]];
      r.computed += batch.sequences[b].num_new_tokens;
      active = true;
      const SequenceOutput& out = output->sequences[b];
      if (!batch.sequences[b].sample) continue;
      ASSERT_TRUE(out.token.has_value());
      const int step = step_of[index[b]]++;
      const TokenId expect = r.golden->greedy_tokens[static_cast<std::size_t>(step)];
      SCOPED_TRACE(::testing::Message() << "sequence " << index[b] << " step " << step);
      if (step == 0) {
        const auto& reference = bf16.prompt_logits.at(r.case_index);
        EXPECT_LE(relative_error(out.logits, r.golden->prompt_logits), bound(r.golden->prompt_logits, reference));
        if (tally) tally->add(out.logits, r.golden->prompt_logits, reference);
      }
      if (step == 31) {
        const auto& reference = bf16.final_logits.at(r.case_index);
        EXPECT_LE(relative_error(out.logits, r.golden->final_logits), bound(r.golden->final_logits, reference));
        if (tally) tally->add(out.logits, r.golden->final_logits, reference);
      }
      if (top2_margin(out.logits) > kDecisiveMargin) {
        ++num_decisive;
        EXPECT_EQ(*out.token, expect) << "decisive step chose another token";
      }
      r.tokens.push_back(expect);
    }
  }
  // The margin rule must leave most steps checked, or it checks nothing.
  EXPECT_GE(num_decisive, static_cast<int>(runs.size()) * 32 / 2);
}

std::vector<SequenceRun> make_runs(const Golden& golden, const std::vector<std::size_t>& which,
                                   std::int32_t block_size) {
  std::vector<SequenceRun> runs;
  BlockId next_block = 0;
  for (std::size_t i : which) {
    SequenceRun r{.golden = &golden.cases[i], .case_index = i, .tokens = golden.cases[i].prompt, .table = {}};
    const std::size_t blocks = (r.tokens.size() + 32 + block_size - 1) / block_size;
    for (std::size_t b = 0; b < blocks; ++b) r.table.push_back(next_block++);
    runs.push_back(std::move(r));
  }
  return runs;
}

class CudaGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaGoldenTest, SingleSequenceMatchesTransformers) {
  const Golden golden = load_golden(GetParam());
  const Bf16Reference bf16 = load_bf16_reference(GetParam());
  struct Layout {
    std::int32_t block_size_tokens, prefill_chunk_tokens;
  };
  for (Layout layout : {Layout{16, 0}, Layout{4, 5}, Layout{1, 7}}) {
    for (std::size_t i = 0; i < golden.cases.size(); ++i) {
      SCOPED_TRACE(::testing::Message() << "block " << layout.block_size_tokens << " chunk "
                                        << layout.prefill_chunk_tokens << " prompt of " << golden.cases[i].prompt.size());
      auto backend = cuda_runner(golden.model_dir, layout.block_size_tokens,
                                 testing::num_blocks_for(golden, layout.block_size_tokens));
      auto runs = make_runs(golden, {i}, layout.block_size_tokens);
      run_teacher_forced(*backend, runs, layout.prefill_chunk_tokens, bf16);
    }
  }
}

// All prompts prefill in one step, then decode together: rows of different
// sequences must not see each other's KV.
TEST_P(CudaGoldenTest, BatchedSequencesMatchTransformers) {
  const Golden golden = load_golden(GetParam());
  constexpr std::int32_t kBlockSize = 8;
  auto backend = cuda_runner(golden.model_dir, kBlockSize, testing::num_blocks_for(golden, kBlockSize));
  std::vector<std::size_t> all(golden.cases.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  auto runs = make_runs(golden, all, kBlockSize);
  run_teacher_forced(*backend, runs, 0, load_bf16_reference(GetParam()));
}

// Our bf16 logits are at least as close to float32 as transformers' own bf16
// forward (sdpa, on the GPU) at the same positions, on average over every
// prompt; and no position is far from transformers' bf16 logits.
TEST_P(CudaGoldenTest, Bf16ErrorNoWorseThanTransformersBf16) {
  const Golden golden = load_golden(GetParam());
  const Bf16Reference bf16 = load_bf16_reference(GetParam());
  ASSERT_EQ(bf16.prompt_logits.size(), golden.cases.size());
  Bf16Tally tally;
  for (std::size_t i = 0; i < golden.cases.size(); ++i) {
    auto backend = cuda_runner(golden.model_dir, 16, testing::num_blocks_for(golden, 16));
    auto runs = make_runs(golden, {i}, 16);
    run_teacher_forced(*backend, runs, 0, bf16, &tally);
  }
  ASSERT_EQ(tally.positions, static_cast<int>(2 * golden.cases.size()));
  const double ours = tally.ours / tally.positions, theirs = tally.transformers_bf16 / tally.positions;
  std::printf("[ info ] %s: mean relative logit error vs float32: sluice cuda %.5f, transformers bf16 %.5f; "
              "largest sluice vs transformers bf16 %.5f\n",
              GetParam().c_str(), ours, theirs, tally.ours_vs_transformers_bf16_max);
  EXPECT_LE(ours, 1.25 * theirs);
  EXPECT_LE(tally.ours_vs_transformers_bf16_max, 2.5e-2);
}

// Free-running greedy generation, as the CPU golden test does it: it follows
// the golden sequence at least as long as the float32 reference's steps are
// wide, and leaves it only at one of our own near-ties.
//
// bf16 cannot resolve the fixtures' near-ties (top-2 gaps down to 0.003), so
// where a free run leaves the golden sequence is not fixed; but an argmax
// moves only when logit errors of half the top-2 margin hit both tokens, and
// the errors are small: transformers' own bf16 logits err against float32 by
// at most 4% of the logits' rms (0.02-0.04 at rms 1; 0.09-0.14 for qwen2, at
// rms 5: golden_bf16_*.json against golden_*.json, first and last step), and
// ours by about as much (Bf16ErrorNoWorseThanTransformersBf16 holds the mean
// to 1.25x theirs). A float32 margin above kWideMarginOfRms = 20% of the rms
// is more than twice what an error of 8% (2x theirs) can close. The float32
// margins come from the CPU backend (float32, its tokens the golden ones).
// The bound is 0 wherever the first step is a near-tie already.
// Where the run does leave the golden sequence, the step is one the
// teacher-forced tests leave unchecked: our own margin there is at most
// kDecisiveMargin.
constexpr double kWideMarginOfRms = 0.2;

TEST_P(CudaGoldenTest, FreeRunningGreedyAgreement) {
  const Golden golden = load_golden(GetParam());
  auto backend = cuda_runner(golden.model_dir, 16, testing::num_blocks_for(golden, 16));
  auto reference =
      make_model_runner(golden.model_dir, make_cpu_ops({.num_threads = 4}),
                        {.block_size_tokens = 16, .num_kv_blocks = testing::num_blocks_for(golden, 16)});
  ASSERT_TRUE(reference.ok()) << reference.error_message();
  for (const GoldenCase& c : golden.cases) {
    SCOPED_TRACE(::testing::Message() << "prompt of " << c.prompt.size());
    testing::expect_free_run_follows_golden(**reference, *backend, c, GetParam(), kWideMarginOfRms,
                                            kDecisiveMargin);
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, CudaGoldenTest, ::testing::Values("llama", "mistral", "qwen2", "qwen3"));

}  // namespace
}  // namespace sluice
