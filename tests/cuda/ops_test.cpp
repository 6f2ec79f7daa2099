// Element-wise, norm, GEMM, RoPE and sampling ops of the CUDA backend against
// float64 references on fresh random inputs, at odd and model-sized shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>

#include "sluice/backend/cpu/sampler.h"
#include "sluice/backend/rope.h"
#include "test_util.h"

namespace sluice {
namespace {

using namespace sluice::testing;

constexpr double kBf16Tolerance = 1e-2;  // bf16 outputs: ~2e-3 expected

StepLayout layout_with_rows(std::int32_t rows, std::uint64_t seed, std::int32_t vocab = 1000,
                            std::int32_t max_position = 4096) {
  SplitMix64 rng(seed);
  StepLayout layout;
  for (std::int32_t r = 0; r < rows; ++r) {
    layout.token_ids.push_back(static_cast<TokenId>(rng.next() % static_cast<std::uint64_t>(vocab)));
    layout.positions.push_back(static_cast<std::int32_t>(rng.next() % static_cast<std::uint64_t>(max_position)));
  }
  layout.sequences.push_back({.row_begin = 0, .num_rows = rows, .num_computed_tokens = 0, .block_table = {}});
  return layout;
}

TEST(CudaOps, RmsNormMatchesFloat64) {
  auto ops = make_test_ops();
  std::uint64_t seed = 100;
  for (auto [rows, cols] : {std::pair{1, 64}, {7, 4096}, {33, 1000}, {130, 5120}}) {
    for (DType w_dtype : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(::testing::Message() << rows << "x" << cols << " weight " << dtype_name(w_dtype));
      const auto x = random_bf16(static_cast<std::size_t>(rows) * cols, ++seed, 3.0f);
      const auto w = random_bf16(static_cast<std::size_t>(cols), ++seed);
      DeviceArray dx(x, DType::bf16, {rows, cols}), dw(w, w_dtype, {cols});
      ops->begin_step(layout_with_rows(rows, seed));
      Tensor out = ops->scratch({rows, cols});
      poison(out);
      ops->rms_norm(dx.tensor(), dw.tensor(), 1e-5f, out);
      std::vector<double> ref(x.size());
      for (int r = 0; r < rows; ++r) {
        double ss = 0;
        for (int c = 0; c < cols; ++c) ss += double(x[r * cols + c]) * x[r * cols + c];
        const double inv = 1.0 / std::sqrt(ss / cols + 1e-5);
        for (int c = 0; c < cols; ++c) ref[r * cols + c] = x[r * cols + c] * inv * w[c];
      }
      EXPECT_LE(relative_error(download(out), ref), kBf16Tolerance);
    }
  }
}

TEST(CudaOps, AddRmsNormUpdatesResidualAndNormalises) {
  auto ops = make_test_ops();
  std::uint64_t seed = 200;
  for (auto [rows, cols] : {std::pair{1, 4096}, {5, 999}, {64, 2048}}) {
    for (DType r_dtype : {DType::bf16, DType::f32}) {
      SCOPED_TRACE(::testing::Message() << rows << "x" << cols << " residual " << dtype_name(r_dtype));
      const auto res = random_bf16(static_cast<std::size_t>(rows) * cols, ++seed, 2.0f);
      const auto x = random_bf16(res.size(), ++seed, 2.0f);
      const auto w = random_bf16(static_cast<std::size_t>(cols), ++seed);
      DeviceArray dres(res, r_dtype, {rows, cols}), dx(x, DType::bf16, {rows, cols}), dw(w, DType::bf16, {cols});
      ops->begin_step(layout_with_rows(rows, seed));
      Tensor out = ops->scratch({rows, cols});
      poison(out);
      ops->add_rms_norm(dres.tensor(), dx.tensor(), dw.tensor(), 1e-6f, out);
      std::vector<double> ref_res(res.size()), ref_out(res.size());
      for (int r = 0; r < rows; ++r) {
        double ss = 0;
        for (int c = 0; c < cols; ++c) {
          ref_res[r * cols + c] = double(res[r * cols + c]) + x[r * cols + c];
          ss += ref_res[r * cols + c] * ref_res[r * cols + c];
        }
        const double inv = 1.0 / std::sqrt(ss / cols + 1e-6);
        for (int c = 0; c < cols; ++c) ref_out[r * cols + c] = ref_res[r * cols + c] * inv * w[c];
      }
      EXPECT_LE(relative_error(download(dres.tensor()), ref_res), kBf16Tolerance);
      EXPECT_LE(relative_error(download(out), ref_out), kBf16Tolerance);
    }
  }
}

// Under both split-K choices of the GEMV (CudaOptions::gemv_split_k): the
// 4-part loop runs only under by_waves.
class CudaOpsSplitK : public ::testing::TestWithParam<cuda::GemvSplitK> {};
INSTANTIATE_TEST_SUITE_P(GemvSplitK, CudaOpsSplitK,
                         ::testing::Values(cuda::GemvSplitK::by_waves, cuda::GemvSplitK::two_parts),
                         [](const ::testing::TestParamInfo<cuda::GemvSplitK>& info) {
                           std::string name(cuda::name_of(info.param, cuda::kGemvSplitKNames));
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST_P(CudaOpsSplitK, MatmulMatchesFloat64) {
  CudaOptions options{.scratch_bytes = 256LL << 20, .use_cuda_graphs = false};
  options.gemv_split_k = GetParam();
  auto made = make_cuda_ops(options);
  ASSERT_TRUE(made.ok()) << made.error_message();
  auto ops = std::move(made).value();
  std::uint64_t seed = 300;
  struct Case {
    std::int64_t m, n, k;
    bool bias;
    DType out;
  };
  for (Case c : {Case{1, 4096, 4096, false, DType::bf16}, Case{5, 1000, 520, true, DType::bf16},
                 Case{64, 1024, 4096, false, DType::f32}, Case{300, 384, 2048, true, DType::f32},
                 Case{129, 14336, 512, false, DType::bf16}, Case{3, 1001, 264, true, DType::f32},
                 Case{2, 777, 4104, false, DType::bf16}, Case{4, 64, 8, false, DType::bf16},
                 // Split K (few rows, long K): down_proj's shape, a ragged half, 4 rows.
                 Case{1, 4096, 14336, false, DType::f32}, Case{3, 5, 2056, true, DType::bf16},
                 Case{4, 4097, 2048, false, DType::bf16},
                 // Split K in 4 parts (rows that fill 4 parts' waves better): q|k|v's shape at 3
                 // rows, and a ragged last part at 4 rows.
                 Case{3, 6144, 4096, false, DType::bf16}, Case{4, 2000, 4104, true, DType::f32}}) {
    SCOPED_TRACE(::testing::Message() << c.m << "x" << c.n << "x" << c.k);
    const auto x = random_bf16(static_cast<std::size_t>(c.m * c.k), ++seed);
    const auto w = random_bf16(static_cast<std::size_t>(c.n * c.k), ++seed);
    const auto b = random_bf16(static_cast<std::size_t>(c.n), ++seed, 4.0f);
    DeviceArray dx(x, DType::bf16, {c.m, c.k});
    auto dw = ops->upload_weight(Tensor{const_cast<float*>(w.data()), DType::f32, Shape{c.n, c.k}});
    ASSERT_TRUE(dw.ok());
    ASSERT_EQ(dw->dtype, DType::bf16);
    auto db = ops->upload_weight(Tensor{const_cast<float*>(b.data()), DType::f32, Shape{c.n}});
    ASSERT_TRUE(db.ok());
    ops->begin_step(layout_with_rows(static_cast<std::int32_t>(c.m), seed));
    Tensor out = ops->scratch({c.m, c.n}, c.out);
    poison(out);
    ops->matmul(dx.tensor(), *dw, c.bias ? *db : Tensor{}, out);
    std::vector<double> ref(static_cast<std::size_t>(c.m * c.n));
    for (std::int64_t i = 0; i < c.m; ++i)
      for (std::int64_t j = 0; j < c.n; ++j) {
        double acc = c.bias ? b[j] : 0.0;
        for (std::int64_t kk = 0; kk < c.k; ++kk) acc += double(x[i * c.k + kk]) * w[j * c.k + kk];
        ref[i * c.n + j] = acc;
      }
    EXPECT_LE(relative_error(download(out), ref), c.out == DType::f32 ? 1e-4 : kBf16Tolerance);
  }
}

// The one-row GEMVs compiled for 8 blocks a multiprocessor (32 registers, the
// default before session 43; cuda::set_gemv_one_row_blocks) and 6 (40, the
// default now) give the same bits, in the plain loop (n above the split-K
// limit) and split K in 2 and 4 parts.
TEST(CudaOps, OneRowGemvsAtSixBlocksGiveTheSameBits) {
  CudaOptions options{.scratch_bytes = 256LL << 20, .use_cuda_graphs = false};
  options.gemv_split_k = cuda::GemvSplitK::by_waves;
  auto made = make_cuda_ops(options);
  ASSERT_TRUE(made.ok()) << made.error_message();
  auto ops = std::move(made).value();
  std::uint64_t seed = 350;
  struct Case {
    std::int64_t n, k;
  };
  // 9000 x 520: one warp a row; 4096 x 4096: two parts; 6144 x 4096: four.
  for (Case c : {Case{9000, 520}, Case{4096, 4096}, Case{6144, 4096}}) {
    SCOPED_TRACE(::testing::Message() << "1x" << c.n << "x" << c.k);
    const auto x = random_bf16(static_cast<std::size_t>(c.k), ++seed);
    const auto w = random_bf16(static_cast<std::size_t>(c.n * c.k), ++seed);
    DeviceArray dx(x, DType::bf16, {1, c.k});
    auto dw = ops->upload_weight(Tensor{const_cast<float*>(w.data()), DType::f32, Shape{c.n, c.k}});
    ASSERT_TRUE(dw.ok());
    std::vector<float> outs[2];
    for (int i = 0; i < 2; ++i) {
      const ScopedGemvOneRowBlocks one_row_blocks(i == 0 ? 8 : 6);
      ops->begin_step(layout_with_rows(1, seed));
      Tensor out = ops->scratch({1, c.n}, DType::f32);
      poison(out);
      ops->matmul(dx.tensor(), *dw, Tensor{}, out);
      outs[i] = download(out);
    }
    ASSERT_EQ(outs[0].size(), outs[1].size());
    EXPECT_EQ(std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * sizeof(float)), 0);
  }
}

// The fused projections (one GEMV pass for decode rows, the default ops
// above that) against float64, at decode and prefill row counts, odd widths,
// short K and with biases.
TEST(CudaOps, QkvProjectionMatchesFloat64) {
  auto ops = make_test_ops();
  std::uint64_t seed = 400;
  struct Case {
    std::int64_t m, nq, nkv, k;
    bool bias;
  };
  for (Case c : {Case{1, 4096, 1024, 4096, false}, Case{3, 520, 136, 264, true}, Case{4, 96, 32, 1000, false},
                 Case{5, 256, 64, 512, true}, Case{2, 64, 64, 40, false}, Case{1, 33, 7, 4104, true}}) {
    SCOPED_TRACE(::testing::Message() << c.m << " rows, q " << c.nq << ", kv " << c.nkv << ", k " << c.k);
    const std::int64_t n = c.nq + 2 * c.nkv;
    const auto x = random_bf16(static_cast<std::size_t>(c.m * c.k), ++seed);
    const auto w = random_bf16(static_cast<std::size_t>(n * c.k), ++seed);
    const auto b = random_bf16(static_cast<std::size_t>(n), ++seed, 4.0f);
    DeviceArray dx(x, DType::bf16, {c.m, c.k});
    const std::int64_t widths[3] = {c.nq, c.nkv, c.nkv};
    std::vector<Tensor> host_parts;
    std::array<Tensor, 3> biases{};
    std::int64_t at = 0;
    for (int i = 0; i < 3; ++i) {
      host_parts.push_back(Tensor{const_cast<float*>(w.data()) + at * c.k, DType::f32, Shape{widths[i], c.k}});
      if (c.bias) {
        auto db = ops->upload_weight(Tensor{const_cast<float*>(b.data()) + at, DType::f32, Shape{widths[i]}});
        ASSERT_TRUE(db.ok());
        biases[i] = *db;
      }
      at += widths[i];
    }
    auto dw = ops->upload_concatenated(host_parts);
    ASSERT_TRUE(dw.ok());
    ops->begin_step(layout_with_rows(static_cast<std::int32_t>(c.m), seed));
    Tensor q = ops->scratch({c.m, c.nq}), k = ops->scratch({c.m, c.nkv}), v = ops->scratch({c.m, c.nkv});
    for (const Tensor& t : {q, k, v}) poison(t);
    ops->qkv_projection(dx.tensor(), *dw, biases, q, k, v);
    at = 0;
    const Tensor outs[3] = {q, k, v};
    for (int i = 0; i < 3; ++i) {
      std::vector<double> ref(static_cast<std::size_t>(c.m * widths[i]));
      for (std::int64_t r = 0; r < c.m; ++r)
        for (std::int64_t j = 0; j < widths[i]; ++j) {
          double acc = c.bias ? b[at + j] : 0.0;
          for (std::int64_t kk = 0; kk < c.k; ++kk) acc += double(x[r * c.k + kk]) * w[(at + j) * c.k + kk];
          ref[r * widths[i] + j] = acc;
        }
      EXPECT_LE(relative_error(download(outs[i]), ref), kBf16Tolerance) << "part " << i;
      at += widths[i];
    }
  }
}

TEST(CudaOps, GateUpSiluMatchesFloat64) {
  auto ops = make_test_ops();
  std::uint64_t seed = 500;
  struct Case {
    std::int64_t m, inter, k;
  };
  for (Case c : {Case{1, 14336, 4096}, Case{2, 523, 264}, Case{4, 1000, 2048}, Case{6, 300, 512}, Case{3, 77, 104}}) {
    SCOPED_TRACE(::testing::Message() << c.m << " rows, inter " << c.inter << ", k " << c.k);
    const auto x = random_bf16(static_cast<std::size_t>(c.m * c.k), ++seed);
    const auto w = random_bf16(static_cast<std::size_t>(2 * c.inter * c.k), ++seed, 0.1f);
    DeviceArray dx(x, DType::bf16, {c.m, c.k});
    auto dw = ops->upload_weight(Tensor{const_cast<float*>(w.data()), DType::f32, Shape{2 * c.inter, c.k}});
    ASSERT_TRUE(dw.ok());
    ops->begin_step(layout_with_rows(static_cast<std::int32_t>(c.m), seed));
    Tensor out = ops->scratch({c.m, c.inter});
    poison(out);
    ops->gate_up_silu(dx.tensor(), *dw, ops->scratch({c.m, 2 * c.inter}), out);
    std::vector<double> ref(static_cast<std::size_t>(c.m * c.inter));
    for (std::int64_t r = 0; r < c.m; ++r)
      for (std::int64_t i = 0; i < c.inter; ++i) {
        double g = 0, u = 0;
        for (std::int64_t kk = 0; kk < c.k; ++kk) {
          g += double(x[r * c.k + kk]) * w[i * c.k + kk];
          u += double(x[r * c.k + kk]) * w[(c.inter + i) * c.k + kk];
        }
        ref[r * c.inter + i] = g / (1.0 + std::exp(-g)) * u;
      }
    EXPECT_LE(relative_error(download(out), ref), kBf16Tolerance);
  }
}

TEST(CudaOps, UploadConcatenatedStacksRows) {
  auto ops = make_test_ops();
  const auto a = random_bf16(3 * 40, 1), b = random_bf16(5 * 40, 2);
  const Tensor parts[] = {Tensor{const_cast<float*>(a.data()), DType::f32, Shape{3, 40}},
                          Tensor{const_cast<float*>(b.data()), DType::f32, Shape{5, 40}}};
  auto fused = ops->upload_concatenated(parts);
  ASSERT_TRUE(fused.ok());
  EXPECT_EQ(fused->shape, (Shape{8, 40}));
  std::vector<float> expect(a);
  expect.insert(expect.end(), b.begin(), b.end());
  EXPECT_EQ(download(*fused), expect);
}

TEST(CudaOps, EmbeddingSiluMulAndGather) {
  auto ops = make_test_ops();
  const std::int32_t rows = 37, hidden = 300, vocab = 1000, inter = 523;
  const auto table = random_bf16(static_cast<std::size_t>(vocab) * hidden, 7);
  auto dtable = ops->upload_weight(Tensor{const_cast<float*>(table.data()), DType::f32, Shape{vocab, hidden}});
  ASSERT_TRUE(dtable.ok());
  StepLayout layout = layout_with_rows(rows, 8, vocab);
  layout.sample_rows = {0, 5, 36, 17};
  ops->begin_step(layout);
  Tensor emb = ops->scratch({rows, hidden});
  poison(emb);
  ops->embedding(*dtable, emb);
  std::vector<float> expect;
  for (TokenId t : layout.token_ids)
    expect.insert(expect.end(), table.begin() + t * hidden, table.begin() + (t + 1) * hidden);
  EXPECT_EQ(download(emb), expect);

  Tensor gathered = ops->scratch({4, hidden});
  poison(gathered);
  ops->gather_sample_rows(emb, gathered);
  std::vector<float> expect_gather;
  for (std::int32_t r : layout.sample_rows)
    expect_gather.insert(expect_gather.end(), expect.begin() + r * hidden, expect.begin() + (r + 1) * hidden);
  EXPECT_EQ(download(gathered), expect_gather);

  const auto gu = random_bf16(static_cast<std::size_t>(rows) * 2 * inter, 9, 4.0f);
  DeviceArray dgu(gu, DType::bf16, {rows, 2 * inter});
  Tensor act = ops->scratch({rows, inter});
  poison(act);
  ops->silu_mul(dgu.tensor(), act);
  std::vector<double> ref(static_cast<std::size_t>(rows) * inter);
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < inter; ++i) {
      const double g = gu[r * 2 * inter + i], u = gu[r * 2 * inter + inter + i];
      ref[r * inter + i] = g / (1.0 + std::exp(-g)) * u;
    }
  EXPECT_LE(relative_error(download(act), ref), kBf16Tolerance);
}

TEST(CudaOps, RopeMatchesHuggingFaceAngles) {
  auto ops = make_test_ops();
  std::uint64_t seed = 400;
  for (bool llama3 : {false, true}) {
    for (std::int32_t head_dim : {64, 128}) {
      SCOPED_TRACE(::testing::Message() << "llama3 " << llama3 << " head_dim " << head_dim);
      RopeParams params{.head_dim = head_dim, .theta = 500000.0f};
      if (llama3) params.llama3_factor = 8.0f;
      const std::int32_t rows = 45, hq = 6, hk = 2;
      const auto q = random_bf16(static_cast<std::size_t>(rows) * hq * head_dim, ++seed);
      const auto k = random_bf16(static_cast<std::size_t>(rows) * hk * head_dim, ++seed);
      DeviceArray dq(q, DType::bf16, {rows, hq * head_dim}), dk(k, DType::bf16, {rows, hk * head_dim});
      const StepLayout layout = layout_with_rows(rows, ++seed, 1000, 131072);
      ops->begin_step(layout);
      ops->rope(dq.tensor(), dk.tensor(), params);
      const std::vector<float> inv_freq = rope_inverse_frequencies(params);
      auto reference = [&](const std::vector<float>& x, int heads) {
        std::vector<double> out(x.size());
        const int half = head_dim / 2;
        for (int r = 0; r < rows; ++r)
          for (int h = 0; h < heads; ++h)
            for (int d = 0; d < half; ++d) {
              const double angle = static_cast<float>(layout.positions[r]) * inv_freq[d];  // f32 product, as HF
              const std::size_t o = (static_cast<std::size_t>(r) * heads + h) * head_dim;
              const double x1 = x[o + d], x2 = x[o + d + half];
              out[o + d] = x1 * std::cos(angle) - x2 * std::sin(angle);
              out[o + d + half] = x2 * std::cos(angle) + x1 * std::sin(angle);
            }
        return out;
      };
      EXPECT_LE(relative_error(download(dq.tensor()), reference(q, hq)), kBf16Tolerance);
      EXPECT_LE(relative_error(download(dk.tensor()), reference(k, hk)), kBf16Tolerance);
    }
  }
}

TEST(CudaOps, SampleMatchesReferenceSampler) {
  auto ops = make_test_ops();
  const std::int32_t vocab = 5003;
  std::vector<SamplingParams> params(7);
  params[1].repetition_penalty = 1.3f;
  params[1].frequency_penalty = 0.5f;
  params[2].temperature = 0.8f;
  params[2].top_k = 50;
  params[2].seed = 42;
  params[3].temperature = 1.0f;
  params[3].top_p = 0.9f;
  params[3].seed = 7;
  params[4].temperature = 1.2f;
  params[4].min_p = 0.05f;
  params[4].seed = 9;
  params[5].num_top_logprobs = 5;
  // params[6]: plain greedy with return_logits.
  const std::vector<TokenId> history = {1, 2, 3, 4000, 17, 17, 5002};
  for (DType dtype : {DType::f32, DType::bf16}) {
    const auto logits = random_bf16(static_cast<std::size_t>(params.size() + 1) * vocab, 77, 6.0f);
    const auto rows = static_cast<std::int64_t>(params.size() + 1);  // last row: plain greedy
    DeviceArray dl(logits, dtype, {rows, vocab});
    std::vector<SampleRequest> requests;
    for (std::size_t i = 0; i < params.size(); ++i)
      requests.push_back({.params = params[i], .tokens = history, .num_prompt_tokens = 3,
                          .generated_index = static_cast<std::int32_t>(i) + 3, .return_logits = i == 6});
    requests.push_back({.params = {}, .tokens = history, .num_prompt_tokens = 3});
    const auto results = ops->sample(dl.tensor(), requests);
    ASSERT_EQ(results.size(), requests.size());
    for (std::size_t i = 0; i < requests.size(); ++i) {
      SCOPED_TRACE(::testing::Message() << "row " << i << " " << dtype_name(dtype));
      const std::span<const float> row(logits.data() + i * vocab, static_cast<std::size_t>(vocab));
      const SampleResult expect = sample_logits(row, requests[i]);
      EXPECT_EQ(results[i].token, expect.token);
      EXPECT_NEAR(results[i].logprob, expect.logprob, 1e-3);
      ASSERT_EQ(results[i].top_logprobs.size(), expect.top_logprobs.size());
      for (std::size_t j = 0; j < expect.top_logprobs.size(); ++j)
        EXPECT_EQ(results[i].top_logprobs[j].token, expect.top_logprobs[j].token);
      EXPECT_EQ(results[i].logits.size(), expect.logits.size());
    }
  }
}

// Plain greedy rows are decided on the device (the vectorised one-pass
// kernel for bf16 rows of a multiple of 8): the argmax (lowest id on ties) and
// its logprob against the reference sampler, at a Llama-3 vocabulary.
TEST(CudaOps, DeviceGreedyMatchesReferenceSampler) {
  auto ops = make_test_ops();
  const std::int32_t vocab = 128256, rows = 3;
  auto logits = random_bf16(static_cast<std::size_t>(rows) * vocab, 88, 8.0f);
  logits[1 * vocab + 70001] = 9.5f;  // a tie: id 70001 must win over 90000
  logits[1 * vocab + 90000] = 9.5f;
  logits[2 * vocab + vocab - 1] = 9.75f;  // the last element
  DeviceArray dl(logits, DType::bf16, {rows, vocab});
  std::vector<SampleRequest> requests(rows);
  const auto results = ops->sample(dl.tensor(), requests);
  ASSERT_EQ(results.size(), requests.size());
  for (std::int32_t i = 0; i < rows; ++i) {
    const std::span<const float> row(logits.data() + static_cast<std::size_t>(i) * vocab, static_cast<std::size_t>(vocab));
    const SampleResult expect = sample_logits(row, requests[i]);
    EXPECT_EQ(results[i].token, expect.token) << "row " << i;
    EXPECT_NEAR(results[i].logprob, expect.logprob, 1e-3) << "row " << i;
  }
  EXPECT_EQ(results[1].token, 70001);
  EXPECT_EQ(results[2].token, vocab - 1);
}

}  // namespace
}  // namespace sluice
