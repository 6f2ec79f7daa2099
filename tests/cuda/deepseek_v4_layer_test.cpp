// DeepSeek-V4's per-layer CUDA kernels (backend/cuda/kernels/
// deepseek_v4_kernels.h) against the CPU reference ops
// (backend/cpu/deepseek_v4_ops.cpp, model/deepseek_v4_pool_fold.h): the compressors (CSA's overlapping
// windows, HCA, the indexer's), mHC, routing (top-k with bias, ties, hash),
// clamped SwiGLU and the FP4 expert GEMM against the CPU FP4 dequantization;
// and the launchers' refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <vector>

#include "deepseek_v4_test_util.h"
#include "sluice/backend/cuda/kernels/deepseek_v4_forward_kernels.h"
#include "sluice/backend/cuda/kernels/deepseek_v4_kernels.h"

#include "sluice/model/deepseek_v4_pool_fold.h"
#include "sluice/model/deepseek_v4_step_plan.h"
#include "sluice/model/fp4_weights.h"

namespace sluice {
namespace {

using namespace sluice::v4_testing;

// The compressors' fold (launch_v4_compress over a DeepseekV4CompressPlan)
// against the host's fold of the same items (model/deepseek_v4_pool_fold.h,
// as DeepseekV4Reference::compress): one sequence's step of `windows`
// windows deep in a long context (rope at ~4096 windows), starting 3 tokens
// into a window and crossing a block boundary, so items read a starting
// state, store into both blocks and emit. Blocks of 16 windows: the table
// sends every position before the boundary to block 0 (whose states start
// random), every later one to block 1.
void check_compress(std::int32_t dim, std::int32_t width, std::int32_t rate, std::int32_t windows) {
  const bool overlap = width == 2 * dim;
  const std::int32_t slots = overlap ? 2 : 1, block_size = 16 * rate, boundary = 4096 * rate;
  const std::int32_t first = boundary - 2 * rate + 3, rows = windows * rate;
  const std::int64_t state_floats = std::int64_t{slots} * 3 * dim, floats_per_block = state_floats + 64;
  std::vector<float> blocks(static_cast<std::size_t>(2 * floats_per_block), 0.0f);
  const std::vector<float> m0 = uniform(static_cast<std::size_t>(state_floats), 35, -2.0f, 2.0f);
  const std::vector<float> s0 = uniform(static_cast<std::size_t>(state_floats), 36, 0.5f, 3.0f);
  for (std::int64_t i = 0; i < state_floats; ++i) {  // [slot][m | s | a]: m and a from m0, s from s0
    const std::int64_t part = i / dim % 3;
    blocks[static_cast<std::size_t>(i)] = part == 1 ? s0[static_cast<std::size_t>(i)] : m0[static_cast<std::size_t>(i)];
  }
  const std::vector<float> kv = uniform(static_cast<std::size_t>(rows) * width, 31, -2.0f, 2.0f);
  const std::vector<float> gate = uniform(static_cast<std::size_t>(rows) * width, 32, -4.0f, 4.0f);
  const std::vector<float> ape = uniform(static_cast<std::size_t>(rate) * width, 33, -1.0f, 1.0f);
  const std::vector<float> norm = uniform(static_cast<std::size_t>(dim), 34, 0.5f, 1.5f);
  const RotaryTable rope = test_rope(160000.0f);
  StepLayout step;
  std::vector<BlockId> table((first + rows) / block_size + 1);
  for (std::size_t b = 0; b < table.size(); ++b) table[b] = static_cast<std::int64_t>(b) * block_size < boundary ? 0 : 1;
  step.sequences.push_back({.row_begin = 0, .num_rows = rows, .num_computed_tokens = first, .block_table = table});
  for (std::int32_t r = 0; r < rows; ++r) {
    step.token_ids.push_back(0);
    step.positions.push_back(first + r);
  }
  const DeepseekV4StepTables t = DeepseekV4StepTables::make(step);
  const DeepseekV4CompressPlan plan = DeepseekV4CompressPlan::make(t, rate, overlap, block_size);
  ASSERT_GT(plan.num_entries(), 0);

  // The host: every item from the states before the step.
  auto state_at = [&](std::vector<float>& image, std::int64_t position, std::int32_t entry) {
    const std::int64_t block = table[static_cast<std::size_t>(position / block_size)];
    return std::span<float>(image).subspan(static_cast<std::size_t>(block * floats_per_block + entry % slots * 3 * dim),
                                           static_cast<std::size_t>(3 * dim));
  };
  std::vector<float> before = blocks, want_blocks = blocks, want_out(static_cast<std::size_t>(plan.num_entries()) * dim);
  std::int32_t reads = 0, stores_in_block0 = 0, stores_in_block1 = 0;
  for (std::int32_t i = 0; i < plan.num_items(); ++i) {
    const std::int32_t e = plan.item_entry[i], t0 = plan.item_first_token[i], flags = plan.item_flags[i];
    std::vector<float> pool_state(static_cast<std::size_t>(3 * dim));
    if (flags & DeepseekV4CompressPlan::kReadState) {
      std::ranges::copy(state_at(before, t0 - 1, e), pool_state.begin());
      ++reads;
    } else {
      deepseek_v4_pool_init(pool_state);
    }
    std::vector<float> values(static_cast<std::size_t>(dim)), gates(static_cast<std::size_t>(dim));
    for (std::int32_t k = 0; k < plan.item_count[i]; ++k) {
      const std::int64_t tok = t0 + k, row = plan.item_first_row[i] + k;
      const std::int64_t half = overlap && tok / rate == e ? dim : 0;
      for (std::int64_t c = 0; c < dim; ++c) {
        values[static_cast<std::size_t>(c)] = kv[static_cast<std::size_t>(row * width + half + c)];
        gates[static_cast<std::size_t>(c)] = gate[static_cast<std::size_t>(row * width + half + c)] +
                                             ape[static_cast<std::size_t>(tok % rate * width + half + c)];
      }
      deepseek_v4_pool_fold(pool_state, values, gates);
    }
    const std::int64_t last = t0 + plan.item_count[i] - 1;
    if (flags & DeepseekV4CompressPlan::kStoreState) {
      std::ranges::copy(pool_state, state_at(want_blocks, last, e).begin());
      (last < boundary ? stores_in_block0 : stores_in_block1) += 1;
    }
    if (flags & DeepseekV4CompressPlan::kEmit) {
      std::vector<float> entry(static_cast<std::size_t>(dim));
      deepseek_v4_pool_finish(pool_state, entry);
      cpu_ops().rms_norm(entry, dim, norm, 1e-6f);
      const std::int64_t position = std::int64_t{e} * rate;
      cpu_ops().rope_tail(entry, dim, 1, std::span(&position, 1), rope, false);
      std::ranges::copy(entry, want_out.begin() + std::int64_t{plan.item_emit_row[i]} * dim);
    }
  }
  EXPECT_GT(reads, 0);
  EXPECT_GT(stores_in_block0, 0);
  EXPECT_GT(stores_in_block1, 0);

  // The device.
  std::vector<std::int32_t> ids(table.begin(), table.end()), begin(plan.item_sequence.size(), 0),
      len(plan.item_sequence.size(), static_cast<std::int32_t>(table.size()));
  Dev<float> d_blocks(blocks), d_kv(kv), d_gate(gate), d_ape(ape), d_norm(norm), d_freq(rope.inv_freq);
  Dev<std::int32_t> d_ids(ids), d_begin(begin), d_len(len), d_entry(plan.item_entry), d_row(plan.item_first_row),
      d_token(plan.item_first_token), d_count(plan.item_count), d_flags(plan.item_flags), d_emit(plan.item_emit_row);
  Dev<float> d_out(want_out.size()), d_start(static_cast<std::size_t>(plan.num_items()) * 3 * dim);
  cuda::launch_v4_compress(
      {.kv = d_kv.get(), .gate = d_gate.get(), .ape = d_ape.get(), .norm = d_norm.get(),
       .blocks = {.data = d_blocks.get(), .floats_per_block = floats_per_block, .num_blocks = 2, .block_size = block_size},
       .tables = {.block_ids = d_ids.get(), .table_begin = d_begin.get(), .table_len = d_len.get()},
       .state_offset = 0, .slots = slots, .entry = d_entry.get(), .first_row = d_row.get(),
       .first_token = d_token.get(), .count = d_count.get(), .flags = d_flags.get(), .emit_row = d_emit.get(),
       .start_states = d_start.get(), .rope = {.inv_freq = d_freq.get(), .rope_dim = 64}, .out = d_out.get(),
       .out_dt = kF32, .items = plan.num_items(), .dim = dim, .width = width, .rate = rate, .eps = 1e-6f},
      nullptr);
  EXPECT_LT(relative_error(d_out.host(), want_out), 1e-5)
      << "dim " << dim << " width " << width << " rate " << rate << " max |delta| "
      << max_abs_difference(d_out.host(), want_out);
  EXPECT_LT(relative_error(d_blocks.host(), want_blocks), 1e-5) << "the stored states";
}

TEST(DeepseekV4CudaKernels, CompressorsMatchTheReferenceEntries) {
  check_compress(512, 1024, 4, 9);   // CSA: overlapping windows
  check_compress(512, 512, 128, 3);  // HCA: disjoint windows of 128
  check_compress(128, 256, 4, 6);    // the indexer's compressor (index_head_dim 128)
}

// hc_pre in either form: a block a row, or (split) with a workspace, its dot
// products split over the width across blocks first.
void check_hyper_connections(bool split) {
  const HyperConnectionShape shape{.hc_mult = 4, .hidden = 4096, .sinkhorn_iters = 20, .hc_eps = 1e-6f, .norm_eps = 1e-6f};
  const std::int32_t rows = 5, hc = 4, hidden = 4096, mixes = (2 + hc) * hc;
  const std::vector<float> streams = uniform(static_cast<std::size_t>(rows) * hc * hidden, 41, -3.0f, 3.0f);
  const float fn_scale = 1.0f / std::sqrt(static_cast<float>(hc * hidden));
  const std::vector<float> fn = uniform(static_cast<std::size_t>(mixes) * hc * hidden, 42, -2 * fn_scale, 2 * fn_scale);
  const std::vector<float> base = uniform(static_cast<std::size_t>(mixes), 43, -1.0f, 1.0f);
  const std::vector<float> scale = uniform(3, 44, 0.5f, 2.0f);
  const std::vector<float> y = uniform(static_cast<std::size_t>(rows) * hidden, 45, -1.0f, 1.0f);
  const std::vector<float> head_fn(fn.begin(), fn.begin() + static_cast<std::int64_t>(hc) * hc * hidden);
  const std::vector<float> head_base(base.begin(), base.begin() + hc), head_scale(scale.begin(), scale.begin() + 1);

  const std::int64_t workspace_floats = cuda::v4_hc_pre_workspace_floats(rows, hc, hidden);
  ASSERT_GT(workspace_floats, 0);
  Dev<float> dworkspace(static_cast<std::size_t>(workspace_floats));
  float* workspace = split ? dworkspace.get() : nullptr;
  Dev<float> dstreams(streams), dfn(fn), dbase(base), dscale(scale), dy(y);
  Dev<float> dpost(static_cast<std::size_t>(rows) * hc), dcomb(static_cast<std::size_t>(rows) * hc * hc);
  Dev<float> dcollapsed(static_cast<std::size_t>(rows) * hidden), dhead(static_cast<std::size_t>(rows) * hidden);
  cuda::launch_v4_hc_pre({.streams = dstreams.get(), .w = {dfn.get(), dbase.get(), dscale.get()}, .post = dpost.get(),
                          .comb = dcomb.get(), .collapsed = dcollapsed.get(), .out_dt = kF32, .rows = rows, .hc = hc,
                          .hidden = hidden, .sinkhorn_iters = 20, .workspace = workspace},
                         nullptr);
  cuda::launch_v4_hc_pre({.streams = dstreams.get(), .w = {dfn.get(), dbase.get(), dscale.get()},
                          .collapsed = dhead.get(), .out_dt = kF32, .rows = rows, .hc = hc, .hidden = hidden,
                          .head = true, .workspace = workspace},
                         nullptr);
  const std::vector<float> post = dpost.host(), comb = dcomb.host(), collapsed = dcollapsed.host(), head = dhead.host();
  cuda::launch_v4_hc_post({.streams = dstreams.get(), .y = dy.get(), .y_dt = kF32, .post = dpost.get(),
                           .comb = dcomb.get(), .rows = rows, .hc = hc, .hidden = hidden},
                          nullptr);
  const std::vector<float> mixed = dstreams.host();

  std::vector<float> want_post, want_comb, want_collapsed, want_head(static_cast<std::size_t>(rows) * hidden),
      want_mixed(streams);
  for (std::int32_t r = 0; r < rows; ++r) {
    const auto row_streams = std::span<const float>(streams).subspan(static_cast<std::size_t>(r) * hc * hidden, hc * hidden);
    HyperConnectionMix mix;
    cpu_ops().hc_pre(row_streams, {fn, base, scale}, shape, mix);
    want_post.insert(want_post.end(), mix.post.begin(), mix.post.end());
    want_comb.insert(want_comb.end(), mix.comb.begin(), mix.comb.end());
    want_collapsed.insert(want_collapsed.end(), mix.collapsed.begin(), mix.collapsed.end());
    cpu_ops().hc_head(row_streams, {head_fn, head_base, head_scale}, shape,
                      std::span<float>(want_head).subspan(static_cast<std::size_t>(r) * hidden, hidden));
    // hc_post from the device's own mix (its inputs), so this checks the mixing alone.
    HyperConnectionMix device_mix;
    device_mix.post.assign(post.begin() + r * hc, post.begin() + (r + 1) * hc);
    device_mix.comb.assign(comb.begin() + r * hc * hc, comb.begin() + (r + 1) * hc * hc);
    cpu_ops().hc_post(std::span<float>(want_mixed).subspan(static_cast<std::size_t>(r) * hc * hidden, hc * hidden),
                      std::span<const float>(y).subspan(static_cast<std::size_t>(r) * hidden, hidden), device_mix, shape);
  }
  EXPECT_LT(max_abs_difference(post, want_post), 1e-5);
  EXPECT_LT(max_abs_difference(comb, want_comb), 1e-5);
  EXPECT_LT(relative_error(collapsed, want_collapsed), 1e-5);
  EXPECT_LT(relative_error(head, want_head), 1e-5);
  EXPECT_LT(relative_error(mixed, want_mixed), 1e-6);
  // Sinkhorn's result is (nearly) doubly stochastic: a real mix, not an identity.
  for (std::int32_t r = 0; r < rows; ++r)
    for (std::int32_t k = 0; k < hc; ++k) {
      double column = 0.0;
      for (std::int32_t j = 0; j < hc; ++j) column += comb[(r * hc + j) * hc + k];
      EXPECT_NEAR(column, 1.0, 1e-4);
    }
}

TEST(DeepseekV4CudaKernels, HyperConnectionsMatchTheReference) { check_hyper_connections(/*split=*/false); }

TEST(DeepseekV4CudaKernels, HyperConnectionsSplitOverTheWidthMatchTheReference) {
  check_hyper_connections(/*split=*/true);
}

// Prefill's split form (more than 1,024 rows: 16 rows a block, fn read once
// for them) leaves the same bits as decode's (2 rows a block) on every row,
// a last block of 5 rows included: each row's dot products keep their order.
TEST(DeepseekV4CudaKernels, HyperConnectionsSplitForPrefillEqualsTheDecodeForm) {
  const std::int32_t rows = 1029, first = 1000, hc = 4, hidden = 4096, mixes = (2 + hc) * hc;
  const std::vector<float> streams = uniform(static_cast<std::size_t>(rows) * hc * hidden, 46, -3.0f, 3.0f);
  const float fn_scale = 1.0f / std::sqrt(static_cast<float>(hc * hidden));
  const std::vector<float> fn = uniform(static_cast<std::size_t>(mixes) * hc * hidden, 47, -2 * fn_scale, 2 * fn_scale);
  const std::vector<float> base = uniform(static_cast<std::size_t>(mixes), 48, -1.0f, 1.0f);
  const std::vector<float> scale = uniform(3, 49, 0.5f, 2.0f);
  Dev<float> dstreams(streams), dfn(fn), dbase(base), dscale(scale);
  Dev<float> dworkspace(static_cast<std::size_t>(cuda::v4_hc_pre_workspace_floats(rows, hc, hidden)));
  auto run = [&](std::int32_t row0, std::int32_t n, Dev<float>& post, Dev<float>& comb, Dev<float>& collapsed) {
    cuda::launch_v4_hc_pre({.streams = dstreams.get() + static_cast<std::int64_t>(row0) * hc * hidden,
                            .w = {dfn.get(), dbase.get(), dscale.get()},
                            .post = post.get() + static_cast<std::int64_t>(row0) * hc,
                            .comb = comb.get() + static_cast<std::int64_t>(row0) * hc * hc,
                            .collapsed = collapsed.get() + static_cast<std::int64_t>(row0) * hidden, .out_dt = kF32,
                            .rows = n, .hc = hc, .hidden = hidden, .sinkhorn_iters = 20,
                            .workspace = dworkspace.get()},
                           nullptr);
  };
  Dev<float> post(static_cast<std::size_t>(rows) * hc), comb(static_cast<std::size_t>(rows) * hc * hc),
      collapsed(static_cast<std::size_t>(rows) * hidden);
  Dev<float> post2(static_cast<std::size_t>(rows) * hc), comb2(static_cast<std::size_t>(rows) * hc * hc),
      collapsed2(static_cast<std::size_t>(rows) * hidden);
  run(0, rows, post, comb, collapsed);  // prefill's form
  run(0, first, post2, comb2, collapsed2);  // decode's form, in two calls of <= 1,024 rows
  run(first, rows - first, post2, comb2, collapsed2);
  EXPECT_EQ(post.host(), post2.host());
  EXPECT_EQ(comb.host(), comb2.host());
  EXPECT_EQ(collapsed.host(), collapsed2.host());
}


// The forward's RMS norm at each width it takes apart (512 and 1,024 a warp a
// piece, 4,096 a block a piece, in registers) and one it does not (96), with
// and without a weight, piece counts off the block's 8 warps, against the
// norm in double.
TEST(DeepseekV4CudaKernels, RmsNormMatchesTheNormInDouble) {
  for (const std::int32_t dim : {512, 1024, 4096, 96})
    for (const bool weighted : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "dim " << dim << (weighted ? ", weighted" : ""));
      const std::int64_t pieces = 37;
      const std::vector<float> x = uniform(static_cast<std::size_t>(pieces * dim), 61 + dim, -4.0f, 4.0f);
      const std::vector<float> w = uniform(static_cast<std::size_t>(dim), 62, 0.5f, 1.5f);
      Dev<float> dx(x), dw(w);
      cuda::launch_v4_rms_norm_f32(dx.get(), pieces, dim, weighted ? dw.get() : nullptr, 1e-6f, nullptr);
      const std::vector<float> got = dx.host();
      std::vector<float> want(x.size());
      for (std::int64_t p = 0; p < pieces; ++p) {
        double sum_sq = 0.0;
        for (std::int32_t i = 0; i < dim; ++i) sum_sq += static_cast<double>(x[p * dim + i]) * x[p * dim + i];
        const double inv = 1.0 / std::sqrt(sum_sq / dim + 1e-6);
        for (std::int32_t i = 0; i < dim; ++i)
          want[p * dim + i] = static_cast<float>(x[p * dim + i] * inv * (weighted ? w[i] : 1.0f));
      }
      EXPECT_LT(relative_error(got, want), 1e-6);
    }
}

// f32 -> bf16, four at a time where the buffers allow it, else one: both give
// the host's round-to-nearest-even bits.
TEST(DeepseekV4CudaKernels, ToBf16RoundsAsTheHost) {
  const std::vector<float> x = uniform(4001, 63, -1000.0f, 1000.0f);
  const std::vector<std::uint16_t> want = to_bf16(x);
  Dev<float> dx(x);
  Dev<std::uint16_t> out(x.size());
  cuda::launch_v4_f32_to_bf16(dx.get(), out.get(), 4000, nullptr);  // four at a time
  cuda::launch_v4_f32_to_bf16(dx.get() + 4000, out.get() + 4000, 1, nullptr);
  EXPECT_EQ(out.host(), want);
  Dev<std::uint16_t> odd(x.size());
  cuda::launch_v4_f32_to_bf16(dx.get() + 1, odd.get(), 4000, nullptr);  // misaligned: one at a time
  const std::vector<std::uint16_t> got = odd.host();
  EXPECT_TRUE(std::equal(want.begin() + 1, want.end(), got.begin()));
}

TEST(DeepseekV4CudaKernels, SqrtSoftplusRoutingPicksTheReferenceExperts) {
  const std::int32_t rows = 64, experts = 256, k = 6;
  std::vector<float> logits = uniform(static_cast<std::size_t>(rows) * experts, 51, -6.0f, 25.0f);  // past softplus' 20
  for (std::int32_t e = 0; e < experts; ++e) logits[3 * experts + e] = 0.5f;  // row 3: every expert ties
  for (std::int32_t e = 0; e < experts; e += 2) logits[4 * experts + e] = 9.0f;  // row 4: ties at the top
  const std::vector<float> bias = uniform(static_cast<std::size_t>(experts), 52, -0.1f, 0.1f);
  const std::vector<float> zero_bias(static_cast<std::size_t>(experts), 0.0f);
  const std::int32_t vocab = 100;
  std::vector<std::int32_t> table(static_cast<std::size_t>(vocab) * k), tokens(rows);
  SplitMix64 rng(53);
  for (auto& e : table) e = static_cast<std::int32_t>(rng.next() % experts);
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng.next() % vocab);
  Dev<float> dlogits(logits), dbias(bias), dzero(zero_bias);
  Dev<std::int32_t> dtable(table), dtokens(tokens);
  for (int mode = 0; mode < 3; ++mode) {  // biased top-k, unbiased top-k (ties stay ties), hash
    Dev<std::int32_t> dids(static_cast<std::size_t>(rows) * k);
    Dev<float> dweights(static_cast<std::size_t>(rows) * k);
    cuda::launch_v4_route({.logits = dlogits.get(), .bias = mode == 0 ? dbias.get() : dzero.get(),
                           .hash_table = mode == 2 ? dtable.get() : nullptr, .token_ids = dtokens.get(),
                           .expert_ids = dids.get(), .expert_weights = dweights.get(), .rows = rows,
                           .num_experts = experts, .k = k, .scale = 1.5f},
                          nullptr);
    const std::vector<std::int32_t> ids = dids.host();
    const std::vector<float> weights = dweights.host();
    for (std::int32_t r = 0; r < rows; ++r) {
      std::vector<std::int32_t> want_ids(k);
      std::vector<float> want_weights(k);
      const std::span<const std::int32_t> hashed =
          mode == 2 ? std::span<const std::int32_t>(table).subspan(static_cast<std::size_t>(tokens[r]) * k, k)
                    : std::span<const std::int32_t>();
      cpu_ops().route_sqrtsoftplus(std::span<const float>(logits).subspan(static_cast<std::size_t>(r) * experts, experts),
                                   mode == 0 ? bias : zero_bias, hashed, k, 1.5f, want_ids, want_weights);
      for (std::int32_t i = 0; i < k; ++i) {
        ASSERT_EQ(ids[r * k + i], want_ids[i]) << "mode " << mode << " row " << r << " choice " << i;
        ASSERT_NEAR(weights[r * k + i], want_weights[i], 2e-6) << "mode " << mode << " row " << r;
      }
    }
  }
}

TEST(DeepseekV4CudaKernels, ClampedSwigluMatchesTheReference) {
  // The reference op is the whole expert; with gate_up = identity and down = [identity; 0], its
  // output is the activation itself.
  const std::int32_t rows = 3, inter = 256, hidden = 2 * inter;
  const float limit = 7.0f;
  const std::vector<float> in = uniform(static_cast<std::size_t>(rows) * hidden, 61, -12.0f, 12.0f);
  std::vector<float> gate_up(static_cast<std::size_t>(hidden) * hidden, 0.0f), down(static_cast<std::size_t>(hidden) * inter, 0.0f);
  for (std::int32_t i = 0; i < hidden; ++i) gate_up[static_cast<std::size_t>(i) * hidden + i] = 1.0f;
  for (std::int32_t i = 0; i < inter; ++i) down[static_cast<std::size_t>(i) * inter + i] = 1.0f;
  Dev<float> din(in), dout(static_cast<std::size_t>(rows) * inter);
  cuda::launch_v4_clamped_swiglu({.in = din.get(), .in_dt = kF32, .out = dout.get(), .out_dt = kF32, .rows = rows,
                                  .inter = inter, .limit = limit},
                                 nullptr);
  const std::vector<float> got = dout.host();
  std::vector<float> want;
  for (std::int32_t r = 0; r < rows; ++r) {
    std::vector<float> out(static_cast<std::size_t>(hidden), 0.0f);
    cpu_ops().clamped_swiglu(std::span<const float>(in).subspan(static_cast<std::size_t>(r) * hidden, hidden), gate_up,
                             down, limit, 1.0f, out);
    want.insert(want.end(), out.begin(), out.begin() + inter);
  }
  EXPECT_LT(relative_error(got, want), 1e-6) << "max |delta| " << max_abs_difference(got, want);
  // The clamps bind: silu(7) * 7 = 48.94 is the most, where the unclamped inputs reach silu(12) * 12 = 144.
  const float most = *std::max_element(want.begin(), want.end());
  EXPECT_GT(most, 40.0f);
  EXPECT_LT(most, 49.0f);
  EXPECT_LT(*std::max_element(got.begin(), got.end()), 49.0f);
}

void check_fp4_gemm(std::int32_t experts, std::int32_t n_out, std::int32_t k_in, const std::vector<std::int32_t>& slots_of_expert) {
  const std::int32_t x_rows = 13;
  const std::vector<float> x = bf16_values(static_cast<std::size_t>(x_rows) * k_in, 71, 2.0f);
  std::vector<std::uint8_t> packed, scales;
  std::vector<float> dequantized;  // [experts, n_out, k_in], the CPU's dequantization
  for (std::int32_t e = 0; e < experts; ++e) {
    // Rows of different magnitudes so that the group scales differ.
    std::vector<float> w = uniform(static_cast<std::size_t>(n_out) * k_in, 72 + e, -1.0f, 1.0f);
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(w.size()); ++i) w[i] *= std::ldexp(1.0f, static_cast<int>((i / 32) % 9) - 6);
    const Shape shape{n_out, k_in};
    Fp4Groups q = quantize_fp4_groups(w, shape);
    const Tensor packed_t{q.packed.data(), DType::u8, fp4_packed_shape(shape)};
    const Tensor scale_t{q.scale_codes.data(), DType::f8_e8m0, fp4_scale_shape(shape)};
    auto d = dequantize_fp4_groups(packed_t, scale_t, shape, "test");
    ASSERT_TRUE(d.ok()) << d.error_message();
    packed.insert(packed.end(), q.packed.begin(), q.packed.end());
    scales.insert(scales.end(), q.scale_codes.begin(), q.scale_codes.end());
    dequantized.insert(dequantized.end(), d.value().begin(), d.value().end());
  }
  std::vector<std::int32_t> offsets{0}, row_of_slot;
  SplitMix64 rng(79);
  for (std::int32_t e = 0; e < experts; ++e) {
    for (std::int32_t s = 0; s < slots_of_expert[e]; ++s) row_of_slot.push_back(static_cast<std::int32_t>(rng.next() % x_rows));
    offsets.push_back(static_cast<std::int32_t>(row_of_slot.size()));
  }
  const auto slots = static_cast<std::int32_t>(row_of_slot.size());
  Dev<std::uint16_t> dx(to_bf16(x));
  Dev<std::int32_t> drows(row_of_slot), doffsets(offsets);
  Dev<std::uint8_t> dw(packed), dscale(scales);
  Dev<float> dout(static_cast<std::size_t>(slots) * n_out);
  cuda::launch_v4_fp4_gemm({.x = dx.get(), .row_of_slot = drows.get(), .expert_offsets = doffsets.get(), .w = dw.get(),
                            .w_scale = dscale.get(), .out = dout.get(), .out_dt = kF32, .num_experts = experts,
                            .n_out = n_out, .k_in = k_in},
                           nullptr);
  const std::vector<float> got = dout.host();
  std::vector<float> want(static_cast<std::size_t>(slots) * n_out);
  for (std::int32_t e = 0; e < experts; ++e)
    for (std::int32_t s = offsets[e]; s < offsets[e + 1]; ++s)
      for (std::int64_t n = 0; n < n_out; ++n) {
        double sum = 0.0;
        const float* wr = dequantized.data() + (static_cast<std::int64_t>(e) * n_out + n) * k_in;
        const float* xr = x.data() + static_cast<std::int64_t>(row_of_slot[s]) * k_in;
        for (std::int64_t i = 0; i < k_in; ++i) sum += static_cast<double>(wr[i]) * xr[i];
        want[static_cast<std::size_t>(s) * n_out + n] = static_cast<float>(sum);
      }
  EXPECT_LT(relative_error(got, want), 1e-5) << "n_out " << n_out << " k_in " << k_in
                                             << " max |delta| " << max_abs_difference(got, want);
}

TEST(DeepseekV4CudaKernels, Fp4ExpertGemmMatchesTheCpuDequantization) {
  // An expert without slots, one with more slots than a pass (8), one with a single slot.
  check_fp4_gemm(4, 136, 512, {3, 0, 11, 1});
  // V4-Flash's down projection shape per expert (4096 x 2048) and gate_up's input width 4096.
  check_fp4_gemm(2, 4096, 2048, {2, 5});
  check_fp4_gemm(1, 64, 4096, {9});
}

TEST(DeepseekV4CudaKernels, LaunchersRejectShapesTheyAreNotBuiltFor) {
  EXPECT_DEATH(cuda::launch_v4_fp4_gemm({.num_experts = 1, .n_out = 64, .k_in = 100}, nullptr), "");
  EXPECT_DEATH(cuda::launch_v4_indexer_scores({.num_heads = 65}, nullptr), "");
  EXPECT_DEATH(cuda::launch_v4_indexer_scores_wgmma({.num_heads = 65}, nullptr), "");
  EXPECT_DEATH(cuda::launch_v4_compress({.dim = 512, .width = 700, .rate = 4}, nullptr), "");
}

}  // namespace
}  // namespace sluice
