// DeepSeekMoE and FP8 block-scaled weights on the CUDA backend against the
// CPU reference (backend/cpu/deepseek_ops.cpp) and float64 oracles: routing
// (identical experts, ties included), routed experts in bf16 and FP8 at
// decode-like and prefill-like row counts, and the dense FP8 matmul on both
// of its paths.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <span>

#include "sluice/backend/cpu/deepseek_ops.h"
#include "sluice/backend/cpu/thread_pool.h"
#include "sluice/backend/cuda/fp8_matmul.h"
#include "sluice/backend/cuda/kernels/grouped_gemm_fp8_kernel.h"
#include "sluice/backend/cuda/kernels/moe_kernels.h"
#include "sluice/backend/cuda/moe.h"
#include "test_util.h"

namespace sluice {
namespace {

using namespace sluice::testing;

constexpr double kBf16Tolerance = 1e-2;  // bf16 outputs and bf16 intermediates: ~3e-3 expected

Tensor host_tensor(std::vector<float>& values, Shape shape) { return Tensor{values.data(), DType::f32, shape}; }

std::vector<std::int32_t> download_i32(const Tensor& t) {
  sync();
  std::vector<std::int32_t> out(static_cast<std::size_t>(t.numel()));
  SLUICE_CHECK(cudaMemcpy(out.data(), t.data, out.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
  return out;
}

void upload_to(const Tensor& device, const void* host) {
  sync();
  SLUICE_CHECK(cudaMemcpy(device.data, host, device.size_bytes(), cudaMemcpyHostToDevice) == cudaSuccess);
  settle_default_stream();
}

StepLayout layout_with_rows(std::int32_t rows) {
  StepLayout layout;
  layout.token_ids.assign(static_cast<std::size_t>(rows), 0);
  layout.positions.assign(static_cast<std::size_t>(rows), 0);
  layout.sequences.push_back({.row_begin = 0, .num_rows = rows, .num_computed_tokens = 0, .block_table = {}});
  return layout;
}

// An FP8 weight [rows, cols] with 128x128 block scales, on the host: random
// finite e4m3 bytes and scales in [scale / 2, scale).
struct HostFp8Weight {
  std::vector<std::uint8_t> values;
  std::vector<float> scales;
  Shape shape;

  HostFp8Weight(std::int64_t rows, std::int64_t cols, std::uint64_t seed, float scale) : shape{rows, cols} {
    SplitMix64 rng(seed);
    values.resize(static_cast<std::size_t>(rows * cols));
    for (auto& v : values) {
      v = static_cast<std::uint8_t>(rng.next() & 0xff);
      if ((v & 0x7f) == 0x7f) v ^= 0x01;  // no NaN
    }
    scales.resize(static_cast<std::size_t>(((rows + 127) / 128) * ((cols + 127) / 128)));
    for (float& s : scales) s = static_cast<float>(scale * (0.5 + 0.5 * rng.uniform()));
  }
  Tensor tensor() {
    return Tensor{values.data(), DType::f8_e4m3, shape,
                  BlockScales{.data = scales.data(), .block_rows = 128, .block_cols = 128,
                              .row_stride = (shape[1] + 127) / 128}};
  }
  // What WeightBinder gives a backend that dequantizes.
  std::vector<float> dequantized() const {
    const std::int64_t cols = shape[1], scale_cols = (cols + 127) / 128;
    std::vector<float> out(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
      const std::int64_t r = static_cast<std::int64_t>(i) / cols, c = static_cast<std::int64_t>(i) % cols;
      out[i] = fp8_e4m3_to_f32(values[i]) * scales[static_cast<std::size_t>(r / 128 * scale_cols + c / 128)];
    }
    return out;
  }
};

struct RouteCase {
  std::int32_t rows, experts, k, groups, groups_selected;
  bool normalize;
  float scale;
  bool ties;  // logits from a handful of values: many exact ties
};

// The CPU reference's routing of `logits` ([rows, experts]): ids and weights.
struct RouteResult {
  std::vector<std::int32_t> ids;
  std::vector<float> weights;
};
RouteResult route_on_cpu(std::vector<float>& logits, std::vector<float>& bias, const MoeRouting& routing,
                         std::int32_t rows) {
  ThreadPool pool(2);
  const std::int32_t experts = routing.num_experts, k = routing.num_experts_per_token;
  RouteResult ref{std::vector<std::int32_t>(static_cast<std::size_t>(rows) * k),
                  std::vector<float>(static_cast<std::size_t>(rows) * k)};
  cpu::moe_route(pool, host_tensor(logits, {rows, experts}), host_tensor(bias, {experts}), routing,
                 {.expert_ids = Tensor{ref.ids.data(), DType::i32, Shape{rows, k}},
                  .expert_weights = host_tensor(ref.weights, {rows, k})});
  return ref;
}
// The same on the device, its outputs poisoned first.
RouteResult route_on_device(Ops& ops, const std::vector<float>& logits, const std::vector<float>& bias,
                            const MoeRouting& routing, std::int32_t rows) {
  const std::int32_t experts = routing.num_experts, k = routing.num_experts_per_token;
  DeviceArray d_logits(logits, DType::f32, {rows, experts}), d_bias(bias, DType::f32, {experts});
  ops.begin_step(layout_with_rows(rows));
  const MoeAssignment out{.expert_ids = ops.scratch({rows, k}, DType::i32),
                          .expert_weights = ops.scratch({rows, k}, DType::f32)};
  poison(out.expert_ids);
  poison(out.expert_weights);
  EXPECT_TRUE(ops.moe_route(d_logits.tensor(), d_bias.tensor(), routing, out).ok());
  return {download_i32(out.expert_ids), download(out.expert_weights)};
}

TEST(CudaMoe, RouteChoosesTheCpuReferencesExperts) {
  auto ops = make_test_ops();
  std::uint64_t seed = 7000;
  for (const RouteCase& c : {RouteCase{64, 256, 8, 8, 4, true, 2.5f, false},
                             RouteCase{300, 256, 8, 8, 4, true, 2.5f, true},
                             RouteCase{17, 64, 6, 1, 1, false, 1.0f, false},
                             RouteCase{33, 16, 4, 4, 2, true, 1.0f, true},
                             RouteCase{5, 32, 3, 4, 3, false, 0.5f, true}}) {
    SCOPED_TRACE(::testing::Message() << c.rows << " rows, " << c.experts << " experts top " << c.k << ", groups "
                                      << c.groups_selected << "/" << c.groups << (c.ties ? ", ties" : ""));
    SplitMix64 rng(++seed);
    // Ties: logits from 5 levels and no bias, so equal choices and equal
    // group sums come from equal values (bit-equal on both sides, whatever
    // expf's last bit); distinct pair sums of these levels differ by > 0.01.
    constexpr std::array<float, 5> kLevels = {-1.7f, -0.6f, 0.3f, 0.9f, 2.1f};
    std::vector<float> logits(static_cast<std::size_t>(c.rows) * c.experts), bias(static_cast<std::size_t>(c.experts));
    for (float& v : logits)
      v = c.ties ? kLevels[rng.next() % kLevels.size()] : static_cast<float>((2.0 * rng.uniform() - 1.0) * 2.0);
    for (float& v : bias) v = c.ties ? 0.0f : static_cast<float>((2.0 * rng.uniform() - 1.0) * 0.5);
    const MoeRouting routing{.num_experts = c.experts, .num_experts_per_token = c.k, .num_groups = c.groups,
                             .num_groups_selected = c.groups_selected, .normalize = c.normalize, .scale = c.scale};
    const RouteResult ref = route_on_cpu(logits, bias, routing, c.rows);
    const RouteResult got = route_on_device(*ops, logits, bias, routing, c.rows);
    for (std::size_t i = 0; i < got.ids.size(); ++i) {
      ASSERT_EQ(got.ids[i], ref.ids[i]) << "row " << i / c.k << " choice " << i % c.k;
      EXPECT_NEAR(got.weights[i], ref.weights[i], 1e-5 * std::max(1.0f, std::fabs(ref.weights[i])))
          << "row " << i / c.k << " choice " << i % c.k;
    }
  }
}

// A row of NaN router logits (a model gone wrong, or poisoned input) ranks
// no expert before another: its choices must still name experts that exist,
// and the rows beside it keep the reference's choices.
TEST(CudaMoe, RouteKeepsNanRowsInBounds) {
  constexpr std::int32_t kRows = 6, kExperts = 64, kK = 6;
  auto ops = make_test_ops();
  SplitMix64 rng(7100);
  std::vector<float> logits(static_cast<std::size_t>(kRows) * kExperts), bias(kExperts, 0.0f);
  for (float& v : logits) v = static_cast<float>((2.0 * rng.uniform() - 1.0) * 2.0);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::fill_n(logits.begin() + 1 * kExperts, kExperts, nan);  // row 1: every logit NaN
  for (std::int32_t e = 0; e < kExperts; e += 2) logits[3 * kExperts + e] = nan;  // row 3: half
  const MoeRouting routing{.num_experts = kExperts, .num_experts_per_token = kK, .num_groups = 8,
                           .num_groups_selected = 4, .normalize = true, .scale = 1.0f};
  // The reference for the other rows (rows are routed alone): the NaN rows zeroed.
  std::vector<float> finite = logits;
  for (float& v : finite) v = std::isnan(v) ? 0.0f : v;
  const std::vector<std::int32_t> ref_ids = route_on_cpu(finite, bias, routing, kRows).ids;
  const std::vector<std::int32_t> ids = route_on_device(*ops, logits, bias, routing, kRows).ids;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::size_t row = i / kK;
    EXPECT_GE(ids[i], 0) << "row " << row;
    EXPECT_LT(ids[i], kExperts) << "row " << row;
    if (row != 1 && row != 3) {
      EXPECT_EQ(ids[i], ref_ids[i]) << "row " << row << " choice " << i % kK;
    }
  }
}

// Routed experts: the device result against the CPU reference fed the same
// (bf16-representable, or dequantized FP8) weights, routing and starting output.
struct ExpertsCase {
  std::int32_t rows, experts, k;
  std::int64_t hidden, inter;
  bool skewed;  // most pairs on a few experts: experts span several GEMM tiles
  bool fp8;
  cuda::MoeExpertGemm gemm = cuda::MoeExpertGemm::grouped;
};

// The grouped kernel keeps bf16 activations: the bf16 bound. Per-expert
// cuBLASLt and fp8_wgmma quantize them to e4m3 per 1x128 block (~2.5% RMS a value).
constexpr double kFp8ActivationTolerance = 0.06;

TEST(CudaMoe, ExpertsMatchTheCpuReference) {
  ThreadPool pool(2);
  std::uint64_t seed = 8000;
  for (const ExpertsCase& c : {
           ExpertsCase{64, 256, 8, 256, 128, false, false},  // decode-like: ~2 slots an expert
           ExpertsCase{1, 16, 4, 200, 72, false, false},     // ragged widths
           ExpertsCase{300, 8, 2, 256, 192, true, false},    // prefill-like: experts over many tiles
           ExpertsCase{512, 64, 6, 128, 64, false, false},
           ExpertsCase{3, 4, 2, 256, 128, false, true},      // FP8 experts, decode-like
           ExpertsCase{200, 4, 2, 384, 256, true, true},     // FP8 experts, prefill-like
           // FP8 tensor cores (widths multiples of 128): decode-like, and experts over several 128-slot tiles.
           ExpertsCase{64, 256, 8, 256, 128, false, true, cuda::MoeExpertGemm::fp8_wgmma},
           ExpertsCase{300, 8, 2, 384, 256, true, true, cuda::MoeExpertGemm::fp8_wgmma},
       }) {
    auto made = make_cuda_ops({.scratch_bytes = 256LL << 20, .use_cuda_graphs = false, .moe_expert_gemm = c.gemm});
    ASSERT_TRUE(made.ok()) << made.error_message();
    auto ops = std::move(made).value();
    SCOPED_TRACE(::testing::Message() << c.rows << " rows, " << c.experts << " experts top " << c.k << ", hidden "
                                      << c.hidden << ", inter " << c.inter << (c.skewed ? ", skewed" : "")
                                      << (c.fp8 ? ", FP8" : ", bf16") << ", "
                                      << cuda::name_of(c.gemm, cuda::kMoeExpertGemmNames));
    SplitMix64 rng(++seed);
    const std::int64_t e = c.experts, h = c.hidden, inter = c.inter;
    // Weights: bf16-rounded values, or FP8 whose dequantization the CPU takes.
    std::vector<float> gate_up, down;
    std::optional<HostFp8Weight> fp8_gate_up, fp8_down;
    Tensor host_gate_up, host_down;
    if (c.fp8) {
      fp8_gate_up.emplace(e * 2 * inter, h, ++seed, 2e-3f);
      fp8_down.emplace(e * h, inter, ++seed, 2e-3f);
      gate_up = fp8_gate_up->dequantized();
      down = fp8_down->dequantized();
      host_gate_up = fp8_gate_up->tensor();
      host_down = fp8_down->tensor();
    } else {
      gate_up = random_bf16(static_cast<std::size_t>(e * 2 * inter * h), ++seed, 0.1f);
      down = random_bf16(static_cast<std::size_t>(e * h * inter), ++seed, 0.1f);
      host_gate_up = host_tensor(gate_up, {e * 2 * inter, h});
      host_down = host_tensor(down, {e * h, inter});
    }
    auto d_gate_up = ops->upload_concatenated(std::span<const Tensor>(&host_gate_up, 1));
    auto d_down = ops->upload_weight(host_down);
    ASSERT_TRUE(d_gate_up.ok()) << d_gate_up.error_message();
    ASSERT_TRUE(d_down.ok()) << d_down.error_message();
    ASSERT_EQ(d_gate_up->dtype, c.fp8 ? DType::f8_e4m3 : DType::bf16);

    std::vector<float> x = random_bf16(static_cast<std::size_t>(c.rows * h), ++seed, 2.0f);
    std::vector<float> out = random_bf16(x.size(), ++seed, 1.0f);
    std::vector<std::int32_t> ids(static_cast<std::size_t>(c.rows) * c.k);
    std::vector<float> weights(ids.size());
    for (std::int32_t r = 0; r < c.rows; ++r) {
      // k distinct experts a row; skewed: drawn from the first quarter most of the time.
      std::vector<std::int32_t> row;
      while (static_cast<std::int32_t>(row.size()) < c.k) {
        const std::int32_t span = c.skewed && rng.uniform() < 0.8 ? std::max(c.k, c.experts / 4) : c.experts;
        const auto id = static_cast<std::int32_t>(rng.next() % static_cast<std::uint64_t>(span));
        if (std::find(row.begin(), row.end(), id) == row.end()) row.push_back(id);
      }
      for (std::int32_t j = 0; j < c.k; ++j) {
        ids[static_cast<std::size_t>(r * c.k + j)] = row[static_cast<std::size_t>(j)];
        weights[static_cast<std::size_t>(r * c.k + j)] = static_cast<float>(0.1 + rng.uniform());
      }
    }
    std::vector<float> ref = out;
    cpu::moe_experts(pool, host_tensor(x, {c.rows, h}),
                     {.gate_up = host_tensor(gate_up, {e * 2 * inter, h}), .down = host_tensor(down, {e * h, inter})},
                     {.expert_ids = Tensor{ids.data(), DType::i32, Shape{c.rows, c.k}},
                      .expert_weights = host_tensor(weights, {c.rows, c.k})},
                     host_tensor(ref, {c.rows, h}));

    DeviceArray d_x(x, DType::bf16, {c.rows, h}), d_out(out, DType::bf16, {c.rows, h});
    DeviceArray d_weights(weights, DType::f32, {c.rows, c.k});
    ops->begin_step(layout_with_rows(c.rows));
    const Tensor d_ids = ops->scratch({c.rows, c.k}, DType::i32);
    upload_to(d_ids, ids.data());
    const Status status = ops->moe_experts(d_x.tensor(), {.gate_up = *d_gate_up, .down = *d_down},
                                           {.expert_ids = d_ids, .expert_weights = d_weights.tensor()},
                                           d_out.tensor());
    ASSERT_TRUE(status.ok()) << status.error_message();
    // The routed part alone (out started at `out`), so the bound is the experts' error.
    const std::vector<float> got = download(d_out.tensor());
    std::vector<float> routed(got.size());
    std::vector<double> ref_routed(got.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      routed[i] = got[i] - out[i];
      ref_routed[i] = double(ref[i]) - out[i];
    }
    const bool quantized = c.fp8 && c.gemm == cuda::MoeExpertGemm::fp8_wgmma;
    EXPECT_LE(relative_error(routed, ref_routed), quantized ? kFp8ActivationTolerance : kBf16Tolerance);
  }
}

// A decode step of the MoE ops captured as a CUDA graph, then replayed on new
// router logits: every replay routes afresh on the device (nothing of the
// captured step's routing is baked in) and matches the CPU reference.
TEST(CudaMoe, DecodeGraphReplaysRouteNewLogits) {
  ThreadPool pool(2);
  constexpr std::int32_t kRows = 8, kExperts = 32, kTopK = 4;
  constexpr std::int64_t kHidden = 256, kInter = 128;
  struct Variant {
    bool fp8;
    cuda::MoeExpertGemm gemm;
  };
  for (const Variant v : {Variant{false, cuda::MoeExpertGemm::grouped}, Variant{true, cuda::MoeExpertGemm::grouped},
                          Variant{true, cuda::MoeExpertGemm::fp8_wgmma}}) {
    const bool fp8 = v.fp8;
    const bool quantized = v.gemm == cuda::MoeExpertGemm::fp8_wgmma;  // e4m3 activations
    SCOPED_TRACE(::testing::Message() << (fp8 ? "FP8 experts, " : "bf16 experts, ")
                                      << cuda::name_of(v.gemm, cuda::kMoeExpertGemmNames));
    auto made = make_cuda_ops({.scratch_bytes = 64LL << 20, .use_cuda_graphs = true, .moe_expert_gemm = v.gemm});
    ASSERT_TRUE(made.ok()) << made.error_message();
    auto ops = std::move(made).value();
    // Graphs need a KV cache (the key holds its buckets); the MoE ops never read it.
    ASSERT_TRUE(ops->allocate_kv_cache({.num_layers = 1, .num_blocks = 4, .block_size_tokens = 16,
                                        .num_kv_heads = 1, .head_dim = 64})
                    .ok());
    StepLayout decode;
    for (std::int32_t r = 0; r < kRows; ++r) {
      decode.token_ids.push_back(0);
      decode.positions.push_back(0);
      decode.sequences.push_back({.row_begin = r, .num_rows = 1, .num_computed_tokens = 0, .block_table = {0}});
    }
    HostFp8Weight fp8_gate_up(kExperts * 2 * kInter, kHidden, 11, 2e-3f), fp8_down(kExperts * kHidden, kInter, 12, 2e-3f);
    std::vector<float> gate_up = fp8 ? fp8_gate_up.dequantized()
                                     : random_bf16(static_cast<std::size_t>(kExperts * 2 * kInter * kHidden), 13, 0.1f);
    std::vector<float> down = fp8 ? fp8_down.dequantized()
                                  : random_bf16(static_cast<std::size_t>(kExperts * kHidden * kInter), 14, 0.1f);
    auto d_gate_up = ops->upload_weight(fp8 ? fp8_gate_up.tensor() : host_tensor(gate_up, {kExperts * 2 * kInter, kHidden}));
    auto d_down = ops->upload_weight(fp8 ? fp8_down.tensor() : host_tensor(down, {kExperts * kHidden, kInter}));
    ASSERT_TRUE(d_gate_up.ok() && d_down.ok());
    std::vector<float> x = random_bf16(static_cast<std::size_t>(kRows * kHidden), 15, 2.0f);
    std::vector<float> bias(kExperts, 0.0f), zeros(static_cast<std::size_t>(kRows * kHidden), 0.0f);
    DeviceArray d_x(x, DType::bf16, {kRows, kHidden}), d_bias(bias, DType::f32, {kExperts});
    DeviceArray d_logits(std::vector<float>(kRows * kExperts, 0.0f), DType::f32, {kRows, kExperts});
    DeviceArray d_out(zeros, DType::f32, {kRows, kHidden});
    const MoeRouting routing{.num_experts = kExperts, .num_experts_per_token = kTopK, .num_groups = 4,
                             .num_groups_selected = 2, .normalize = true, .scale = 2.5f};
    for (int step = 0; step < 3; ++step) {  // capture, then two replays
      SCOPED_TRACE(::testing::Message() << "step " << step);
      std::vector<float> logits = random_bf16(static_cast<std::size_t>(kRows * kExperts), 100 + step, 3.0f);
      upload_to(d_logits.tensor(), logits.data());
      upload_to(d_out.tensor(), zeros.data());
      ops->begin_step(decode);
      const MoeAssignment assignment{.expert_ids = ops->scratch({kRows, kTopK}, DType::i32),
                                     .expert_weights = ops->scratch({kRows, kTopK}, DType::f32)};
      ASSERT_TRUE(ops->moe_route(d_logits.tensor(), d_bias.tensor(), routing, assignment).ok());
      ASSERT_TRUE(ops->moe_experts(d_x.tensor(), {.gate_up = *d_gate_up, .down = *d_down}, assignment,
                                   d_out.tensor())
                      .ok());
      ops->begin_step(StepLayout{});  // ends the capture or replay: the graph runs now
      std::vector<std::int32_t> ids(static_cast<std::size_t>(kRows * kTopK));
      std::vector<float> weights(ids.size()), ref = zeros;
      cpu::moe_route(pool, host_tensor(logits, {kRows, kExperts}), host_tensor(bias, {kExperts}), routing,
                     {.expert_ids = Tensor{ids.data(), DType::i32, Shape{kRows, kTopK}},
                      .expert_weights = host_tensor(weights, {kRows, kTopK})});
      cpu::moe_experts(pool, host_tensor(x, {kRows, kHidden}),
                       {.gate_up = host_tensor(gate_up, {kExperts * 2 * kInter, kHidden}),
                        .down = host_tensor(down, {kExperts * kHidden, kInter})},
                       {.expert_ids = Tensor{ids.data(), DType::i32, Shape{kRows, kTopK}},
                        .expert_weights = host_tensor(weights, {kRows, kTopK})},
                       host_tensor(ref, {kRows, kHidden}));
      EXPECT_LE(relative_error(download(d_out.tensor()), std::vector<double>(ref.begin(), ref.end())),
                quantized ? kFp8ActivationTolerance : kBf16Tolerance);
    }
  }
}

// The activations as the cuBLASLt path quantizes them: per 1x128 block,
// scale = amax / 448 and e4m3(x / scale), back to f32.
std::vector<float> fp8_quantized_rows(const std::vector<float>& x, std::int64_t m, std::int64_t k) {
  std::vector<float> out(x.size());
  for (std::int64_t r = 0; r < m; ++r)
    for (std::int64_t b = 0; b < k; b += 128) {
      const std::int64_t end = std::min(k, b + 128);
      float amax = 0.0f;
      for (std::int64_t c = b; c < end; ++c) amax = std::max(amax, std::fabs(x[r * k + c]));
      const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
      for (std::int64_t c = b; c < end; ++c)
        out[r * k + c] = fp8_e4m3_to_f32(f32_to_fp8_e4m3(x[r * k + c] / scale)) * scale;
    }
  return out;
}

std::vector<double> matmul_f64(const std::vector<float>& x, const std::vector<float>& w, std::int64_t m,
                               std::int64_t n, std::int64_t k) {
  std::vector<double> out(static_cast<std::size_t>(m * n));
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (std::int64_t kk = 0; kk < k; ++kk) acc += double(x[i * k + kk]) * w[j * k + kk];
      out[i * n + j] = acc;
    }
  return out;
}

// The dense FP8 matmul against the dequantized weight in float64. The grouped
// kernel keeps bf16 activations: within the bf16 bound. cuBLASLt quantizes
// the activations to e4m3: within the bf16 bound of the reference fed the
// same quantized activations, and within kFp8ActivationTolerance of the
// unquantized one. Which path ran is asked of the Ops (cuda_fp8_gemm_counts),
// not inferred from the error: every case that fp8_matmul_path sends to
// cuBLASLt keeps cuBLAS's rules (m = 129 included: its rows are padded to 4),
// so a refusal fails with cuBLASLt's reason.

TEST(CudaMoe, Fp8MatmulMatchesTheDequantizedWeight) {
  std::uint64_t seed = 9000;
  struct Case {
    std::int64_t m, n, k;
    DType out;
  };
  for (cuda::Fp8DenseGemm path : {cuda::Fp8DenseGemm::kernel, cuda::Fp8DenseGemm::cublaslt}) {
    auto made = make_cuda_ops({.scratch_bytes = 256LL << 20, .use_cuda_graphs = false, .fp8_dense_gemm = path});
    ASSERT_TRUE(made.ok()) << made.error_message();
    auto ops = std::move(made).value();
    for (Case c : {Case{1, 256, 512, DType::bf16}, Case{7, 300, 1040, DType::f32}, Case{16, 576, 7168, DType::bf16},
                   Case{64, 512, 1024, DType::bf16}, Case{300, 1024, 2048, DType::f32},
                   Case{129, 1536, 7168, DType::bf16}, Case{17, 2048, 512, DType::f32}}) {
      const bool quantized = cuda::fp8_matmul_path(path, c.m, c.n, c.k) == cuda::Fp8MatmulPath::cublaslt;
      SCOPED_TRACE(::testing::Message() << c.m << "x" << c.n << "x" << c.k << " "
                                        << cuda::name_of(path, cuda::kFp8DenseGemmNames)
                                        << (quantized ? " (cuBLASLt)"
                                            : cuda::fp8_matmul_path(path, c.m, c.n, c.k) == cuda::Fp8MatmulPath::gemv
                                                ? " (FP8 GEMV)"
                                                : " (grouped kernel)"));
      HostFp8Weight w(c.n, c.k, ++seed, 1e-2f);
      const std::vector<float> x = random_bf16(static_cast<std::size_t>(c.m * c.k), ++seed, 2.0f);
      auto dw = ops->upload_weight(w.tensor());
      ASSERT_TRUE(dw.ok()) << dw.error_message();
      ASSERT_EQ(dw->dtype, DType::f8_e4m3);
      DeviceArray dx(x, DType::bf16, {c.m, c.k});
      const auto before = cuda_fp8_gemm_counts(*ops);
      ASSERT_TRUE(before.ok()) << before.error_message();
      ops->begin_step(layout_with_rows(static_cast<std::int32_t>(c.m)));
      Tensor out = ops->scratch({c.m, c.n}, c.out);
      poison(out);
      ops->matmul(dx.tensor(), *dw, Tensor{}, out);
      const std::vector<float> got = download(out);
      const auto after = cuda_fp8_gemm_counts(*ops);
      ASSERT_TRUE(after.ok()) << after.error_message();
      EXPECT_EQ(after->num_refused, before->num_refused) << "cuBLASLt refused: " << after->last_refusal;
      EXPECT_EQ(after->num_cublaslt, before->num_cublaslt + (quantized ? 1 : 0))
          << "the FP8 matmul did not take the path fp8_matmul_path chose";
      const std::vector<float> dequantized = w.dequantized();
      const std::vector<double> ref = matmul_f64(x, dequantized, c.m, c.n, c.k);
      const double error = relative_error(got, ref);
      if (!quantized) {
        EXPECT_LE(error, kBf16Tolerance) << worst_difference(got, ref).where(c.n);
        continue;
      }
      EXPECT_LE(error, kFp8ActivationTolerance) << worst_difference(got, ref).where(c.n);
      const std::vector<double> quantized_ref =
          matmul_f64(fp8_quantized_rows(x, c.m, c.k), dequantized, c.m, c.n, c.k);
      EXPECT_LE(relative_error(got, quantized_ref), kBf16Tolerance)
          << "against the host-quantized activations: " << worst_difference(got, quantized_ref).where(c.n);
    }
  }
}

// FP8 weights sliced at a block row (kv_a_proj's latent and rope rows) keep their scales.
TEST(CudaMoe, Fp8RowSliceKeepsItsScales) {
  auto ops = make_test_ops();
  const std::int64_t n = 576, k = 256, m = 3, begin = 512;
  HostFp8Weight w(n, k, 9500, 1e-2f);
  const std::vector<float> x = random_bf16(static_cast<std::size_t>(m * k), 9501, 2.0f);
  auto dw = ops->upload_weight(w.tensor());
  ASSERT_TRUE(dw.ok()) << dw.error_message();
  DeviceArray dx(x, DType::bf16, {m, k});
  ops->begin_step(layout_with_rows(static_cast<std::int32_t>(m)));
  Tensor out = ops->scratch({m, n - begin}, DType::f32);
  poison(out);
  ops->matmul(dx.tensor(), dw->row_slice(begin, n - begin), Tensor{}, out);
  std::vector<float> dequantized = w.dequantized();
  const std::vector<float> rows(dequantized.begin() + begin * k, dequantized.end());
  EXPECT_LE(relative_error(download(out), matmul_f64(x, rows, m, n - begin, k)), kBf16Tolerance);
}

// Expert loads for Fp8WgmmaExpertsUnderUnevenLoads and CudaMoeFp8Ws (below):
// the slots of each expert, then empty_experts more with none.
struct UnevenLoads {
  std::vector<std::int32_t> counts = {0, 1, 3, 63, 64, 65, 127, 128, 129, 200, 255, 1};
  std::int32_t empty_experts = 0;
  std::int64_t hidden = 1024, inter = 256;  // multiples of 128
};

std::int32_t total_slots(const UnevenLoads& loads) {
  return std::accumulate(loads.counts.begin(), loads.counts.end(), std::int32_t{0});
}

// One UnevenLoads case on the host: two choices a row, random FP8 experts
// (hidden and moe_intermediate as the loads say), bf16 activations and output.
struct UnevenLoadsProblem {
  static constexpr std::int32_t kTopK = 2;
  std::int64_t hidden, inter;
  std::int32_t num_experts, rows;
  std::vector<std::int32_t> ids;  // [rows, kTopK]
  std::vector<float> weights;     // [rows, kTopK]
  HostFp8Weight gate_up, down;    // [experts * 2 * inter, hidden], [experts * hidden, inter]
  std::vector<float> x, out;      // [rows, hidden], bf16 values

  explicit UnevenLoadsProblem(const UnevenLoads& loads)
      : hidden(loads.hidden),
        inter(loads.inter),
        num_experts(static_cast<std::int32_t>(loads.counts.size()) + loads.empty_experts),
        rows(total_slots(loads) / kTopK),
        gate_up(num_experts * 2 * inter, hidden, 9701, 2e-3f),
        down(num_experts * hidden, inter, 9702, 2e-3f),
        x(random_bf16(static_cast<std::size_t>(rows * hidden), 9703, 2.0f)),
        out(random_bf16(x.size(), 9704, 1.0f)) {
    // Pair i (expert sequence sorted by expert) goes to row i % rows, choice i / rows:
    // a row's two experts differ because no expert holds more than `rows` pairs.
    std::vector<std::int32_t> sequence;
    for (std::size_t e = 0; e < loads.counts.size(); ++e)
      sequence.insert(sequence.end(), loads.counts[e], static_cast<std::int32_t>(e));
    SLUICE_CHECK_EQ(sequence.size() % kTopK, 0u);
    SLUICE_CHECK(rows > *std::max_element(loads.counts.begin(), loads.counts.end()));
    ids.resize(sequence.size());
    weights.resize(ids.size());
    SplitMix64 rng(9700);
    for (std::size_t i = 0; i < sequence.size(); ++i) {
      const std::size_t row = i % static_cast<std::size_t>(rows), choice = i / static_cast<std::size_t>(rows);
      ids[row * kTopK + choice] = sequence[i];
      weights[row * kTopK + choice] = static_cast<float>(0.1 + rng.uniform());
    }
  }
};

// The problem's routed experts on the CUDA backend (fp8_wgmma, the 128-slot
// kernel grouped_gemm_fp8_kernel() names): routed = output - the output before.
void run_fp8_wgmma_experts(UnevenLoadsProblem& p, std::vector<float>& routed) {
  const std::int64_t hidden = p.hidden;
  constexpr std::int32_t kTopK = UnevenLoadsProblem::kTopK;
  auto made = make_cuda_ops(
      {.scratch_bytes = 256LL << 20, .use_cuda_graphs = false, .moe_expert_gemm = cuda::MoeExpertGemm::fp8_wgmma});
  ASSERT_TRUE(made.ok()) << made.error_message();
  auto ops = std::move(made).value();
  Tensor host_gate_up = p.gate_up.tensor();
  auto d_gate_up = ops->upload_concatenated(std::span<const Tensor>(&host_gate_up, 1));
  auto d_down = ops->upload_weight(p.down.tensor());
  ASSERT_TRUE(d_gate_up.ok()) << d_gate_up.error_message();
  ASSERT_TRUE(d_down.ok()) << d_down.error_message();
  ASSERT_EQ(d_gate_up->dtype, DType::f8_e4m3);
  DeviceArray d_x(p.x, DType::bf16, {p.rows, hidden}), d_out(p.out, DType::bf16, {p.rows, hidden});
  DeviceArray d_weights(p.weights, DType::f32, {p.rows, kTopK});
  ops->begin_step(layout_with_rows(p.rows));
  const Tensor d_ids = ops->scratch({p.rows, kTopK}, DType::i32);
  upload_to(d_ids, p.ids.data());
  const Status status = ops->moe_experts(d_x.tensor(), {.gate_up = *d_gate_up, .down = *d_down},
                                         {.expert_ids = d_ids, .expert_weights = d_weights.tensor()}, d_out.tensor());
  ASSERT_TRUE(status.ok()) << status.error_message();
  const std::vector<float> got = download(d_out.tensor());
  routed.resize(got.size());
  for (std::size_t i = 0; i < got.size(); ++i) routed[i] = got[i] - p.out[i];
}

// The routed output against the host with the kernel's numerics (float64
// sums of the same e4m3 values: the bf16 bound) and against the CPU
// reference's unquantized activations (the e4m3 bound); every row written.
void check_against_the_host(UnevenLoadsProblem& p, const std::vector<float>& routed) {
  ThreadPool pool(2);
  const std::int64_t hidden = p.hidden, inter = p.inter;
  constexpr std::int32_t kTopK = UnevenLoadsProblem::kTopK;
  const std::int32_t rows = p.rows, num_experts = p.num_experts;
  const std::vector<std::int32_t>& ids = p.ids;
  const std::vector<float>& x = p.x;
  const std::vector<float> gate_up = p.gate_up.dequantized(), down = p.down.dequantized();

  // The host with the kernel's numerics (float64 sums of the same e4m3 values).
  const std::vector<float> x_q = fp8_quantized_rows(x, rows, hidden);
  std::vector<double> ref_quantized(x.size(), 0.0);
  for (std::int32_t r = 0; r < rows; ++r)
    for (std::int32_t j = 0; j < kTopK; ++j) {
      const std::int64_t e = ids[static_cast<std::size_t>(r * kTopK + j)];
      std::vector<float> act(static_cast<std::size_t>(inter));
      for (std::int64_t c = 0; c < inter; ++c) {
        double g = 0.0, u = 0.0;
        const float* wg = &gate_up[static_cast<std::size_t>((e * 2 * inter + c) * hidden)];
        const float* wu = &gate_up[static_cast<std::size_t>((e * 2 * inter + inter + c) * hidden)];
        for (std::int64_t kk = 0; kk < hidden; ++kk) {
          g += double(x_q[static_cast<std::size_t>(r * hidden + kk)]) * wg[kk];
          u += double(x_q[static_cast<std::size_t>(r * hidden + kk)]) * wu[kk];
        }
        act[static_cast<std::size_t>(c)] = round_bf16(static_cast<float>(g / (1.0 + std::exp(-g)) * u));
      }
      const std::vector<float> act_q = fp8_quantized_rows(act, 1, inter);
      const double w = p.weights[static_cast<std::size_t>(r * kTopK + j)];
      for (std::int64_t c = 0; c < hidden; ++c) {
        double y = 0.0;
        const float* wd = &down[static_cast<std::size_t>((e * hidden + c) * inter)];
        for (std::int64_t kk = 0; kk < inter; ++kk) y += double(act_q[static_cast<std::size_t>(kk)]) * wd[kk];
        ref_quantized[static_cast<std::size_t>(r * hidden + c)] += w * y;
      }
    }
  // The CPU reference (unquantized activations), the routed part alone.
  std::vector<float> ref_cpu = p.out;
  std::vector<float> gate_up_copy = gate_up, down_copy = down, x_copy = x, weights_copy = p.weights;
  std::vector<std::int32_t> ids_copy = ids;
  cpu::moe_experts(pool, host_tensor(x_copy, {rows, hidden}),
                   {.gate_up = host_tensor(gate_up_copy, {num_experts * 2 * inter, hidden}),
                    .down = host_tensor(down_copy, {num_experts * hidden, inter})},
                   {.expert_ids = Tensor{ids_copy.data(), DType::i32, Shape{rows, kTopK}},
                    .expert_weights = host_tensor(weights_copy, {rows, kTopK})},
                   host_tensor(ref_cpu, {rows, hidden}));
  std::vector<double> ref_unquantized(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) ref_unquantized[i] = double(ref_cpu[i]) - p.out[i];

  EXPECT_LE(relative_error(routed, ref_quantized), kBf16Tolerance)
      << "against the host's quantized numerics: " << worst_difference(routed, ref_quantized).where(hidden);
  EXPECT_LE(relative_error(routed, ref_unquantized), kFp8ActivationTolerance)
      << "against the CPU reference: " << worst_difference(routed, ref_unquantized).where(hidden);
  // Every row, the lone slots and the spill tiles included, was written.
  for (std::int32_t r = 0; r < rows; ++r) {
    std::vector<float> got_row(routed.begin() + r * hidden, routed.begin() + (r + 1) * hidden);
    std::vector<double> ref_row(ref_quantized.begin() + r * hidden, ref_quantized.begin() + (r + 1) * hidden);
    ASSERT_LE(relative_error(got_row, ref_row), 4 * kBf16Tolerance)
        << "row " << r << " (experts " << ids[static_cast<std::size_t>(r * kTopK)] << ", "
        << ids[static_cast<std::size_t>(r * kTopK + 1)] << ")";
  }
}

// One case of Fp8WgmmaExpertsUnderUnevenLoads (below).
void fp8_wgmma_uneven_loads(const UnevenLoads& loads) {
  UnevenLoadsProblem problem(loads);
  std::vector<float> routed;
  run_fp8_wgmma_experts(problem, routed);
  if (::testing::Test::HasFatalFailure()) return;
  check_against_the_host(problem, routed);
}

// The plan's tiles (launch_moe_plan) in each order against the host's
// reading of moe_kernels.h: by expert, each expert's tiles in turn; paired,
// an expert's tiles two by two, then its odd tile beside the next odd one's
// (after that expert's pairs), a lone last odd tile with -1 as its partner;
// paired_odd_couples, the experts of even tile counts, then the odd ones in
// couples, the second's last tile first (beside the first's last), a lone
// last odd tile with -1 as its partner.
// by_expert_balanced, each expert's slots in equal tiles (balanced_tile_rows).
// At the 128-slot kernels' tile rows and at the swapped kernel's 192.
// Experts of 0-3 tiles, full and partial; one routing with an even number
// of odd tiles, one with a lone last odd tile (position `tiles` then holds
// -1, inside max_tiles).
TEST(CudaMoe, PlanPairsEachExpertsTiles) {
  struct Tile {
    std::int32_t expert, first_slot;
    bool operator==(const Tile&) const = default;
  };
  for (const std::int32_t tile_rows : {128, cuda::kSwapTileRows}) {
    for (const std::vector<std::int32_t>& counts :
         {std::vector<std::int32_t>{0, 129, 300, 1, 256, 0, 5, 384, 130},
          std::vector<std::int32_t>{0, 129, 300, 1, 256, 0, 5, 384, 130, 7},
          // More pairs than the kernel's threads load in one pass (8,192), and a partial last pass.
          std::vector<std::int32_t>{0, 129, 300, 1, 256, 0, 5, 384, 130, 7, 9000, 8001, 3}}) {
      const auto num_experts = static_cast<std::int32_t>(counts.size());
      std::vector<std::int32_t> expert_ids;  // pair p (k = 1: row p) -> its expert, experts in turn
      std::vector<Tile> by_expert;
      std::vector<std::vector<Tile>> tiles_of(counts.size());
      for (std::int32_t e = 0, slot = 0; e < num_experts; slot += counts[static_cast<std::size_t>(e)], ++e) {
        expert_ids.insert(expert_ids.end(), counts[static_cast<std::size_t>(e)], e);
        for (std::int32_t first = 0; first < counts[static_cast<std::size_t>(e)]; first += tile_rows)
          tiles_of[static_cast<std::size_t>(e)].push_back({e, slot + first});
        by_expert.insert(by_expert.end(), tiles_of[static_cast<std::size_t>(e)].begin(),
                         tiles_of[static_cast<std::size_t>(e)].end());
      }
      std::vector<Tile> paired;
      std::optional<Tile> waiting;
      for (const std::vector<Tile>& tiles : tiles_of) {
        paired.insert(paired.end(), tiles.begin(), tiles.begin() + static_cast<std::ptrdiff_t>(tiles.size() / 2 * 2));
        if (tiles.size() % 2 == 0) continue;
        if (!waiting) {
          waiting = tiles.back();
          continue;
        }
        paired.push_back(*waiting);
        paired.push_back(tiles.back());
        waiting.reset();
      }
      if (waiting) paired.push_back(*waiting);
      ASSERT_EQ(paired.size(), by_expert.size());
      std::vector<Tile> couples;
      for (const std::vector<Tile>& tiles : tiles_of)
        if (tiles.size() % 2 == 0) couples.insert(couples.end(), tiles.begin(), tiles.end());
      bool second_of_couple = false;
      for (const std::vector<Tile>& tiles : tiles_of) {
        if (tiles.size() % 2 == 0) continue;
        if (second_of_couple) couples.push_back(tiles.back());
        couples.insert(couples.end(), tiles.begin(), tiles.end() - (second_of_couple ? 1 : 0));
        second_of_couple = !second_of_couple;
      }
      ASSERT_EQ(couples.size(), by_expert.size());
      std::vector<Tile> balanced;  // each expert's slots in tiles of balanced_tile_rows
      for (std::int32_t e = 0, slot = 0; e < num_experts; slot += counts[static_cast<std::size_t>(e)], ++e) {
        const std::int32_t count = counts[static_cast<std::size_t>(e)];
        const std::int32_t rows = cuda::balanced_tile_rows(count, tile_rows);
        ASSERT_LE(rows, tile_rows);
        ASSERT_EQ(rows % 16, 0);
        for (std::int32_t first = 0; first < count; first += rows) balanced.push_back({e, slot + first});
        // Never more tiles than the fixed cut (moe_max_tiles' bound), none empty.
        ASSERT_LE(cuda::balanced_tiles(count, tile_rows), (count + tile_rows - 1) / tile_rows) << "expert " << e;
        if (count > 0) {
          ASSERT_LT((cuda::balanced_tiles(count, tile_rows) - 1) * rows, count) << "expert " << e;
        }
      }
      SCOPED_TRACE(::testing::Message() << by_expert.size() << " tiles of " << tile_rows);

      const auto num_pairs = static_cast<std::int32_t>(expert_ids.size());
      const std::int32_t max_tiles = cuda::moe_max_tiles(num_pairs, num_experts, tile_rows);
      ASSERT_GT(max_tiles, static_cast<std::int32_t>(by_expert.size()));
      auto ops = make_test_ops();
      ops->begin_step(layout_with_rows(num_pairs));
      const Tensor d_ids = ops->scratch({num_pairs}, DType::i32);
      upload_to(d_ids, expert_ids.data());
      const Tensor offsets = ops->scratch({num_experts + 1}, DType::i32);
      const Tensor slot_of_pair = ops->scratch({num_pairs}, DType::i32);
      const Tensor row_of_slot = ops->scratch({num_pairs}, DType::i32);
      const Tensor tile_expert = ops->scratch({max_tiles}, DType::i32);
      const Tensor tile_first_slot = ops->scratch({max_tiles}, DType::i32);
      for (const cuda::MoeTileOrder order : {cuda::MoeTileOrder::by_expert, cuda::MoeTileOrder::paired,
                                             cuda::MoeTileOrder::paired_odd_couples,
                                             cuda::MoeTileOrder::by_expert_balanced}) {
        const bool is_paired =
            order == cuda::MoeTileOrder::paired || order == cuda::MoeTileOrder::paired_odd_couples;
        SCOPED_TRACE(order == cuda::MoeTileOrder::paired              ? "paired"
                     : order == cuda::MoeTileOrder::paired_odd_couples ? "odd couples"
                     : order == cuda::MoeTileOrder::by_expert_balanced ? "balanced"
                                                                       : "by expert");
        cuda::launch_moe_plan({.expert_ids = d_ids.as<const std::int32_t>(),
                               .num_pairs = num_pairs,
                               .k = 1,
                               .num_experts = num_experts,
                               .tile_rows = tile_rows,
                               .max_tiles = max_tiles,
                               .tile_order = order,
                               .expert_offsets = offsets.as<std::int32_t>(),
                               .slot_of_pair = slot_of_pair.as<std::int32_t>(),
                               .row_of_slot = row_of_slot.as<std::int32_t>(),
                               .tile_expert = tile_expert.as<std::int32_t>(),
                               .tile_first_slot = tile_first_slot.as<std::int32_t>()},
                              cuda::Launch{.stream = nullptr, .programmatic = false});
        const std::vector<std::int32_t> experts = download_i32(tile_expert), firsts = download_i32(tile_first_slot);
        // Every pair in a slot of its expert's, every slot once, naming its pair's row.
        const std::vector<std::int32_t> got_offsets = download_i32(offsets), slots = download_i32(slot_of_pair),
                                        rows = download_i32(row_of_slot);
        for (std::int32_t e = 0, slot = 0; e <= num_experts; ++e) {
          ASSERT_EQ(got_offsets[static_cast<std::size_t>(e)], slot) << "expert " << e;
          if (e < num_experts) slot += counts[static_cast<std::size_t>(e)];
        }
        std::vector<bool> slot_used(slots.size(), false);
        for (std::size_t p = 0; p < slots.size(); ++p) {
          const auto e = static_cast<std::size_t>(expert_ids[p]);
          const std::int32_t slot = slots[p];
          ASSERT_GE(slot, got_offsets[e]) << "pair " << p;
          ASSERT_LT(slot, got_offsets[e + 1]) << "pair " << p;
          ASSERT_FALSE(slot_used[static_cast<std::size_t>(slot)]) << "slot " << slot << " twice";
          slot_used[static_cast<std::size_t>(slot)] = true;
          EXPECT_EQ(rows[static_cast<std::size_t>(slot)], static_cast<std::int32_t>(p)) << "slot " << slot;
        }
        const std::vector<Tile>& want = order == cuda::MoeTileOrder::paired              ? paired
                                        : order == cuda::MoeTileOrder::paired_odd_couples ? couples
                                        : order == cuda::MoeTileOrder::by_expert_balanced ? balanced
                                                                                          : by_expert;
        for (std::int32_t t = 0; t < max_tiles; ++t) {
          const std::size_t i = static_cast<std::size_t>(t);
          if (i < want.size()) {
            EXPECT_EQ((Tile{experts[i], firsts[i]}), want[i]) << "tile " << t << ": expert " << experts[i]
                                                               << ", first slot " << firsts[i];
          } else {
            EXPECT_EQ(experts[i], -1) << "tile " << t;
          }
        }
        if (!is_paired) continue;
        // The kernel's reading: tiles 2p and 2p + 1 of one expert wherever that expert has two left.
        for (std::size_t e = 0; e < tiles_of.size(); ++e) {
          std::size_t shared = 0;
          for (std::size_t t = 0; t + 1 < want.size(); t += 2)
            shared += experts[t] == static_cast<std::int32_t>(e) && experts[t + 1] == static_cast<std::int32_t>(e);
          EXPECT_EQ(shared, tiles_of[e].size() / 2) << "expert " << e;
        }
      }
    }
  }
}

// The FP8 tensor-core experts (MoeExpertGemm::fp8_wgmma) under uneven expert
// loads chosen to hit every edge of its 128-slot tiles and two 64-row
// warpgroups: experts with 0 slots, 1, 3 (not a multiple of 4), 63/64/65
// (one warpgroup full, the second idle or holding one row), 127/128/129 (a
// spill tile of one row), 255, and K blocks past the 6-deep copy ring
// (hidden 1024 = 8 blocks). Twice: 12 experts (1036 slots: 128-slot tiles of
// two warpgroups) and the same loads with 20 more experts left empty (64-slot
// tiles of one warpgroup, grouped_gemm_fp8_tile_rows). Against the host
// computing the same numerics in float64 (activations quantized per 1x128
// block, the SwiGLU product rounded to bf16 and quantized again before down):
// the bf16 bound; against the CPU reference's unquantized activations: the e4m3 bound.
//
// The 128-slot tiles run under the ring kernel here and under each
// warp-specialised kernel in CudaMoeFp8Ws below.
TEST(CudaMoe, Fp8WgmmaExpertsUnderUnevenLoads) {
  // The two tile shapes the cases below are meant to reach.
  ASSERT_EQ(cuda::grouped_gemm_fp8_tile_rows(1036, 12, false), 128);
  ASSERT_EQ(cuda::grouped_gemm_fp8_tile_rows(1036, 32, false), 64);
  const cuda::GroupedGemmFp8Kernel before = cuda::grouped_gemm_fp8_kernel();
  for (const std::int32_t empty_experts : {0, 20}) {
    SCOPED_TRACE(::testing::Message() << empty_experts << " more empty experts");
    cuda::set_grouped_gemm_fp8_kernel(cuda::GroupedGemmFp8Kernel::ring);
    fp8_wgmma_uneven_loads({.empty_experts = empty_experts});
  }
  cuda::set_grouped_gemm_fp8_kernel(before);
}

// x quantized into slot order (set_moe_fp8_x_by_slot: gate_up reads its A
// tiles as consecutive rows, a TMA box under the TMA kernels) against x
// quantized once a token and gathered through row_of_slot: the same bits,
// under the default 128-slot kernel, the ring kernel, and (20 more empty
// experts) the 64-slot tiles; the by-slot run also against the host.
TEST(CudaMoe, Fp8ExpertsWithXInSlotOrderGiveTheGatheredBits) {
  const cuda::GroupedGemmFp8Kernel before = cuda::grouped_gemm_fp8_kernel();
  const bool by_slot_before = cuda::moe_fp8_x_by_slot();
  for (const cuda::GroupedGemmFp8Kernel kernel : {before, cuda::GroupedGemmFp8Kernel::ring})
    for (const std::int32_t empty_experts : {0, 20}) {
      SCOPED_TRACE(::testing::Message() << cuda::name_of(kernel) << ", " << empty_experts << " more empty experts");
      cuda::set_grouped_gemm_fp8_kernel(kernel);
      std::vector<float> routed[2];
      for (const bool by_slot : {false, true}) {
        UnevenLoadsProblem problem({.empty_experts = empty_experts});
        cuda::set_moe_fp8_x_by_slot(by_slot);
        run_fp8_wgmma_experts(problem, routed[by_slot ? 1 : 0]);
        cuda::set_moe_fp8_x_by_slot(by_slot_before);
        if (::testing::Test::HasFatalFailure()) break;
        if (by_slot) check_against_the_host(problem, routed[1]);
      }
      ASSERT_EQ(routed[0].size(), routed[1].size());
      std::size_t differ = 0;
      for (std::size_t i = 0; i < routed[0].size(); ++i) differ += routed[0][i] != routed[1][i];
      EXPECT_EQ(differ, 0u) << "of " << routed[0].size() << " outputs";
    }
  cuda::set_grouped_gemm_fp8_kernel(before);
}

// The uneven loads' 128-slot tiles under one warp-specialised persistent
// kernel (grouped_gemm_fp8_kernel.h: cp.async or TMA loads, the weight tile
// multicast to a cluster of two on a tile pair, at 128 or 192 weight rows),
// with a block an SM (one or two work items a block at these sizes) and with 3
// blocks (each block, or cluster of 2, walks ~60 items, its copy ring
// wrapping across items); the 192-row kernel also under the plan's odd
// couples (set_grouped_gemm_fp8_odd_couples). A test each, so
// that a hang (a ring that never fills) names its kernel.
struct WsCase {
  cuda::GroupedGemmFp8Kernel kernel;
  int grid_limit;
  bool odd_couples = false;
};
class CudaMoeFp8Ws : public ::testing::TestWithParam<WsCase> {};
// The case's kernel, grid and plan order while in scope; the defaults after.
class WsCaseScope {
 public:
  explicit WsCaseScope(const WsCase& c) : before_(cuda::grouped_gemm_fp8_kernel()) {
    cuda::set_grouped_gemm_fp8_kernel(c.kernel);
    cuda::set_grouped_gemm_fp8_ws_grid_limit(c.grid_limit);
    cuda::set_grouped_gemm_fp8_odd_couples(c.odd_couples);
  }
  ~WsCaseScope() {
    cuda::set_grouped_gemm_fp8_kernel(before_);
    cuda::set_grouped_gemm_fp8_ws_grid_limit(0);
    cuda::set_grouped_gemm_fp8_odd_couples(false);
  }
  WsCaseScope(const WsCaseScope&) = delete;
  WsCaseScope& operator=(const WsCaseScope&) = delete;

 private:
  cuda::GroupedGemmFp8Kernel before_;
};

TEST_P(CudaMoeFp8Ws, UnevenLoads) {
  // Both GEMMs' column blocks (gate_up 256 / 64, down 1024 / 128) split into
  // clusters of 4, so no kernel here falls back to the ring kernel.
  for (const cuda::GroupedEpilogue epilogue : {cuda::GroupedEpilogue::swiglu, cuda::GroupedEpilogue::store})
    ASSERT_TRUE(cuda::grouped_gemm_fp8_ws_supports(
        GetParam().kernel, {.tile_rows = 128, .n = epilogue == cuda::GroupedEpilogue::swiglu ? 256 : 1024,
                            .epilogue = epilogue}));
  const WsCaseScope scope(GetParam());
  fp8_wgmma_uneven_loads({});
}

// The uneven loads with three experts of three tiles (256 + 44 slots, three
// full tiles, 256 + 2) and four empty experts after them: 23 tiles, 11 experts
// with an odd count. Under tma_weight_multicast the paired plan runs each
// 2-tile expert on one cluster sharing its weight tiles, each 3-tile expert's
// first two likewise, the odd tiles two experts to a cluster, and the last odd
// tile beside a block with no rows. The output must be the ring kernel's bit
// for bit: every kernel issues the same MMAs and promotions in the same order
// (the DeepSeek golden's WarpSpecializedExpertsMatchTheRingKernel found
// relative logit error 0 for each). In two shapes, so that under the 192-row
// tiles each GEMM's last column block is once a narrow tail (64 weight rows:
// gate_up at moe_intermediate 512, down at hidden 1024) and once a wide block
// whose columns pass n (gate_up at 256, down at 896).
TEST_P(CudaMoeFp8Ws, OddTileCountsMatchTheRingKernel) {
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{1024, 256}, {896, 512}};
  for (const auto& [hidden, inter] : shapes) {
    SCOPED_TRACE(::testing::Message() << "hidden " << hidden << ", moe_intermediate " << inter);
    UnevenLoads loads{.hidden = hidden, .inter = inter};
    loads.counts.insert(loads.counts.end(), {300, 384, 258});
    loads.empty_experts = 4;
    const auto num_experts = static_cast<std::int64_t>(loads.counts.size()) + loads.empty_experts;
    ASSERT_EQ(cuda::grouped_gemm_fp8_tile_rows(total_slots(loads), num_experts, false), 128);
    UnevenLoadsProblem problem(loads);
    std::vector<float> ring, got;
    {
      const WsCaseScope scope({.kernel = cuda::GroupedGemmFp8Kernel::ring, .grid_limit = 0});
      run_fp8_wgmma_experts(problem, ring);
    }
    {
      const WsCaseScope scope(GetParam());
      run_fp8_wgmma_experts(problem, got);
    }
    ASSERT_EQ(got.size(), ring.size());
    std::size_t num_different = 0, first_different = 0;
    for (std::size_t i = ring.size(); i-- > 0;)
      if (got[i] != ring[i]) {
        ++num_different;
        first_different = i;
      }
    EXPECT_EQ(num_different, 0u) << "first at row " << static_cast<std::int64_t>(first_different) / hidden
                                 << ", column " << static_cast<std::int64_t>(first_different) % hidden << ": "
                                 << (num_different > 0 ? got[first_different] : 0.0f) << " against the ring's "
                                 << (num_different > 0 ? ring[first_different] : 0.0f);
  }
}

std::vector<WsCase> ws_cases() {
  std::vector<WsCase> cases;
  for (const cuda::GroupedGemmFp8Kernel kernel :
       {cuda::GroupedGemmFp8Kernel::warp_specialized, cuda::GroupedGemmFp8Kernel::tma,
        cuda::GroupedGemmFp8Kernel::tma_weight_multicast, cuda::GroupedGemmFp8Kernel::tma_weight_multicast_n192})
    for (const int grid_limit : {0, 3}) cases.push_back({kernel, grid_limit});
  for (const int grid_limit : {0, 3})
    cases.push_back({cuda::GroupedGemmFp8Kernel::tma_weight_multicast_n192, grid_limit, true});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Kernels, CudaMoeFp8Ws, ::testing::ValuesIn(ws_cases()),
                         [](const ::testing::TestParamInfo<WsCase>& info) {
                           std::string name(cuda::name_of(info.param.kernel));
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name + (info.param.odd_couples ? "_odd_couples" : "") +
                                  (info.param.grid_limit > 0 ? "_grid" + std::to_string(info.param.grid_limit)
                                                             : std::string("_grid_sms"));
                         });

// The swapped kernel (GroupedGemmFp8Kernel::swap_ab: weight rows as wgmma's M,
// an expert's tokens as its N over the plan's balanced tiles of up to 192
// slots) against the host, as the 128-slot kernels above: the uneven loads
// (experts of 1 to 255 slots, two tiles at 200 and 255), loads for the
// widths those miss (32, 48, 176 tokens), then the odd-tile loads (300, 384
// and 258 slots: two balanced tiles each) in both of that test's shapes:
// together every width from 16 to 192 tokens by 16. With a block an SM, and
// with 3 blocks (each walking many items, its ring wrapping across them).
class CudaMoeFp8Swap : public ::testing::TestWithParam<int> {};

TEST_P(CudaMoeFp8Swap, UnevenLoadsMatchTheHost) {
  const WsCaseScope scope({.kernel = cuda::GroupedGemmFp8Kernel::swap_ab, .grid_limit = GetParam()});
  ASSERT_EQ(cuda::grouped_gemm_fp8_tile_rows(total_slots(UnevenLoads{}), 12, false), cuda::kSwapTileRows);
  ASSERT_EQ(cuda::grouped_gemm_fp8_tile_rows(total_slots(UnevenLoads{}), 12, true), 128);
  {
    SCOPED_TRACE("uneven loads");
    fp8_wgmma_uneven_loads({});
  }
  {
    SCOPED_TRACE("the other widths");
    const UnevenLoads loads{.counts = {20, 40, 170, 33, 47, 30, 50, 6, 180, 160}};
    ASSERT_EQ(cuda::grouped_gemm_fp8_tile_rows(total_slots(loads), 10, false), cuda::kSwapTileRows);
    fp8_wgmma_uneven_loads(loads);
  }
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{1024, 256}, {896, 512}};
  for (const auto& [hidden, inter] : shapes) {
    SCOPED_TRACE(::testing::Message() << "odd-tile loads, hidden " << hidden << ", moe_intermediate " << inter);
    UnevenLoads loads{.counts = {300, 384, 258}, .empty_experts = 4, .hidden = hidden, .inter = inter};
    fp8_wgmma_uneven_loads(loads);
  }
}

INSTANTIATE_TEST_SUITE_P(Grids, CudaMoeFp8Swap, ::testing::Values(0, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param > 0 ? "grid" + std::to_string(info.param) : std::string("grid_sms");
                         });
}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

using namespace sluice::testing;

// Device memory of `count` T with every byte `fill` (0x7f / 0xff: NaN codes
// and floats, so entries the kernel leaves unwritten show), freed with it.
template <typename T>
std::unique_ptr<T, cudaError_t (*)(void*)> device_filled(std::int64_t count, int fill) {
  T* p = nullptr;
  const auto bytes = static_cast<std::size_t>(std::max<std::int64_t>(count, 1)) * sizeof(T);
  SLUICE_CHECK(cudaMalloc(reinterpret_cast<void**>(&p), bytes) == cudaSuccess);
  SLUICE_CHECK(cudaMemset(p, fill, bytes) == cudaSuccess);
  return {p, cudaFree};
}
template <typename T>
std::unique_ptr<T, cudaError_t (*)(void*)> device_copy(const std::vector<T>& host) {
  auto d = device_filled<T>(static_cast<std::int64_t>(host.size()), 0);
  SLUICE_CHECK(cudaMemcpy(d.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  return d;
}
template <typename T>
std::vector<T> host_copy(const T* device, std::int64_t count) {
  std::vector<T> out(static_cast<std::size_t>(count));
  SLUICE_CHECK(cudaMemcpy(out.data(), device, out.size() * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
  return out;
}

// The host's rule for one 1x128 block, values [begin, end) of `row`: scale =
// amax / 448 (1 for an all-zero block); a value's code is e4m3(v / scale).
float host_fp8_scale(const float* row, std::int64_t begin, std::int64_t end) {
  float amax = 0.0f;
  for (std::int64_t c = begin; c < end; ++c) amax = std::max(amax, std::fabs(row[c]));
  return amax > 0.0f ? amax / 448.0f : 1.0f;
}

// The activations' FP8 quantization against the host's rule, bit for bit:
// scale = amax / 448 a 1x128 block (1 for an all-zero block), q =
// e4m3(x / scale) rounded to nearest even and saturated. k whole blocks (the
// half-warp path: 8 values a lane, two blocks a pass) and not (a warp a
// block); padding rows zeros with scale 1; the grouped scale layout.
void check_quantize(std::int64_t rows, std::int64_t padded_rows, std::int64_t k,
                    const std::vector<std::int32_t>& group_offsets) {
  std::vector<float> x = random_bf16(static_cast<std::size_t>(rows * k), 31, 3.0f);
  for (std::int64_t c = 0; c < std::min<std::int64_t>(k, 128); ++c) x[static_cast<std::size_t>(c)] = 0.0f;  // a zero block
  DeviceArray dx(x, DType::bf16, Shape{rows, k});
  const std::int64_t col_blocks = (k + 127) / 128, m = padded_rows;
  const auto dq = device_filled<std::uint8_t>(m * k, 0x7f);
  const auto dscales = device_filled<float>(m * col_blocks, 0);
  const auto doffsets = device_copy(group_offsets);
  settle_default_stream();
  cuda::launch_quantize_fp8_rows({.x = dx.tensor().data, .rows = rows, .padded_rows = padded_rows, .k = k, .q = dq.get(),
                                  .scales = dscales.get(), .group_offsets = group_offsets.empty() ? nullptr : doffsets.get(),
                                  .num_groups = static_cast<std::int32_t>(group_offsets.empty() ? 0 : group_offsets.size() - 1)},
                                 {});
  sync();
  const std::vector<std::uint8_t> q = host_copy(dq.get(), m * k);
  const std::vector<float> scales = host_copy(dscales.get(), m * col_blocks);
  const std::vector<float> zeros(static_cast<std::size_t>(k), 0.0f);  // a padding row
  for (std::int64_t r = 0; r < m; ++r) {
    std::int64_t first = 0, count = m;
    for (std::size_t g = 0; g + 1 < group_offsets.size(); ++g)
      if (group_offsets[g] <= r && r < group_offsets[g + 1]) first = group_offsets[g], count = group_offsets[g + 1] - first;
    const float* row = r < rows ? x.data() + r * k : zeros.data();
    for (std::int64_t b = 0; b < col_blocks; ++b) {
      const std::int64_t end = std::min(k, (b + 1) * 128);
      const float scale = host_fp8_scale(row, b * 128, end);
      ASSERT_EQ(scales[static_cast<std::size_t>(col_blocks * first + b * count + (r - first))], scale)
          << "row " << r << " block " << b << " k " << k;
      for (std::int64_t c = b * 128; c < end; ++c)
        ASSERT_EQ(q[static_cast<std::size_t>(r * k + c)], f32_to_fp8_e4m3(row[c] / scale)) << "row " << r << " col " << c;
    }
  }
}

// The scatter form (QuantizeFp8Args::slot_of_pair, the MoE experts' x in
// slot order): row r's blocks land in rows slot_of_pair[r * copies + j] of q
// and of the [k / 128, rows * copies] scales, each the host's rule bit for bit,
// every slot written once; slots a random permutation.
void check_quantize_scatter(std::int64_t rows, std::int32_t copies, std::int64_t k) {
  const std::vector<float> x = random_bf16(static_cast<std::size_t>(rows * k), 37, 3.0f);
  DeviceArray dx(x, DType::bf16, Shape{rows, k});
  const std::int64_t slots = rows * copies, col_blocks = k / 128;
  std::vector<std::int32_t> slot_of_pair(static_cast<std::size_t>(slots));
  std::iota(slot_of_pair.begin(), slot_of_pair.end(), 0);
  SplitMix64 rng(41);
  for (std::size_t i = slot_of_pair.size(); i > 1; --i)
    std::swap(slot_of_pair[i - 1], slot_of_pair[static_cast<std::size_t>(rng.next() % i)]);
  const auto dq = device_filled<std::uint8_t>(slots * k, 0x7f);
  const auto dscales = device_filled<float>(slots * col_blocks, 0xff);
  const auto dslots = device_copy(slot_of_pair);
  settle_default_stream();
  cuda::launch_quantize_fp8_rows({.x = dx.tensor().data, .rows = rows, .k = k, .q = dq.get(), .scales = dscales.get(),
                                  .slot_of_pair = dslots.get(), .copies = copies},
                                 {});
  sync();
  const std::vector<std::uint8_t> q = host_copy(dq.get(), slots * k);
  const std::vector<float> scales = host_copy(dscales.get(), slots * col_blocks);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int32_t j = 0; j < copies; ++j) {
      const std::int64_t slot = slot_of_pair[static_cast<std::size_t>(r * copies + j)];
      const float* row = x.data() + r * k;
      for (std::int64_t b = 0; b < col_blocks; ++b) {
        const float scale = host_fp8_scale(row, b * 128, (b + 1) * 128);
        ASSERT_EQ(scales[static_cast<std::size_t>(b * slots + slot)], scale) << "row " << r << " copy " << j << " block " << b;
        for (std::int64_t c = b * 128; c < (b + 1) * 128; ++c)
          ASSERT_EQ(q[static_cast<std::size_t>(slot * k + c)], f32_to_fp8_e4m3(row[c] / scale))
              << "row " << r << " copy " << j << " col " << c;
      }
    }
}

TEST(CudaFp8Quantize, ScattersEachRowToItsSlots) {
  check_quantize_scatter(37, 3, 1152);  // 9 blocks a row: a warp's pairs across rows; odd copies
  check_quantize_scatter(16, 8, 4096);  // DeepSeek-V3's top 8
  check_quantize_scatter(1, 6, 128);    // one block, V4's top 6
}

TEST(CudaFp8Quantize, MatchesTheHostsRuleBitForBit) {
  check_quantize(37, 40, 4096, {});  // whole blocks, padding rows, an odd number of blocks' pairs at the end
  check_quantize(5, 5, 1152, {});    // 9 blocks a row: pairs across rows
  check_quantize(3, 3, 128, {});     // one block a row
  check_quantize(7, 9, 200, {});     // not whole: a warp a block, columns checked
  check_quantize(12, 12, 384, {0, 5, 5, 12});  // grouped scales (an empty group)
}

}  // namespace
}  // namespace sluice
