// DeepSeek-V4's CUDA kernels (backend/cuda/kernels/deepseek_v4_kernels.h)
// against the CPU reference ops (backend/cpu/deepseek_v4_ops.cpp) on random
// inputs at V4-Flash widths and at edges: sparse attention with sinks (0 to
// 1152 gathered keys, heads not a multiple of the block's 8, the inverse
// rope), the indexer (FP8 records, the selected sets equal, ties included),
// the compressors (CSA's overlapping windows, HCA, the indexer's),
// mHC, routing (top-k with bias, ties, hash), clamped SwiGLU and the FP4
// expert GEMM against the CPU FP4 dequantization.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <numeric>
#include <set>

#include "sluice/backend/cpu/deepseek_v4_ops.h"
#include "sluice/backend/cuda/cuda_dtype.h"
#include "sluice/backend/cuda/kernels/deepseek_v4_kernels.h"
#include "sluice/backend/float_convert.h"
#include "sluice/backend/rope.h"
#include "sluice/common/rng.h"
#include "sluice/model/fp4_weights.h"

namespace sluice {
namespace {

using cuda::Dt;
const Dt kF32 = cuda::dt_of(DType::f32);
const Dt kBf16 = cuda::dt_of(DType::bf16);

// A device copy of a host vector.
template <class T>
class Dev {
 public:
  explicit Dev(const std::vector<T>& host) : n_(host.size()) {
    SLUICE_CHECK(cudaMalloc(reinterpret_cast<void**>(&p_), std::max<std::size_t>(n_ * sizeof(T), 16)) == cudaSuccess);
    if (n_ > 0) SLUICE_CHECK(cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  explicit Dev(std::size_t n) : Dev(std::vector<T>(n)) {
    SLUICE_CHECK(cudaMemset(p_, 0xff, std::max<std::size_t>(n_ * sizeof(T), 16)) == cudaSuccess);  // poison
  }
  ~Dev() { cudaFree(p_); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  T* get() const { return p_; }
  std::vector<T> host() const {
    SLUICE_CHECK(cudaDeviceSynchronize() == cudaSuccess);
    std::vector<T> out(n_);
    if (n_ > 0) SLUICE_CHECK(cudaMemcpy(out.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return out;
  }

 private:
  T* p_ = nullptr;
  std::size_t n_;
};

float round_bf16(float v) { return bf16_to_f32(f32_to_bf16(v)); }

std::vector<float> uniform(std::size_t n, std::uint64_t seed, float lo, float hi) {
  SplitMix64 rng(seed);
  std::vector<float> out(n);
  for (float& v : out) v = static_cast<float>(lo + (hi - lo) * rng.uniform());
  return out;
}

std::vector<float> bf16_values(std::size_t n, std::uint64_t seed, float scale) {
  std::vector<float> v = uniform(n, seed, -scale, scale);
  for (float& x : v) x = round_bf16(x);
  return v;
}

std::vector<std::uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<std::uint16_t> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
  return out;
}

// ||a - b|| / ||b||.
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  SLUICE_CHECK_EQ(a.size(), b.size());
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

double max_abs_difference(const std::vector<float>& a, const std::vector<float>& b) {
  SLUICE_CHECK_EQ(a.size(), b.size());
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::isfinite(a[i]) ? std::fabs(static_cast<double>(a[i]) - b[i]) : INFINITY);
  return worst;
}

RotaryTable test_rope(float theta) {
  RopeParams params{.head_dim = 64, .theta = theta};
  return RotaryTable{.inv_freq = rope_inverse_frequencies(params), .cos_sin_scale = 1.0f};
}

const cpu::DeepseekV4CpuKernels& cpu_ops() {
  static const cpu::DeepseekV4CpuKernels ops;
  return ops;
}

// ---- sparse attention with sinks ------------------------------------------------------------

void check_sparse_attention(std::int32_t heads, const std::vector<std::int32_t>& num_keys, bool rope, Dt out_dt,
                            double tolerance) {
  constexpr std::int64_t d = cuda::kV4LatentDim;
  const auto rows = static_cast<std::int32_t>(num_keys.size());
  const std::int32_t max_keys = std::max(1, *std::max_element(num_keys.begin(), num_keys.end()));
  const std::int64_t pool_rows = 3000;
  const std::vector<float> q = bf16_values(static_cast<std::size_t>(rows) * heads * d, 11, 1.0f);
  // Latents at the scale of a normed row, so that scores spread over a few units.
  const std::vector<float> kv = bf16_values(static_cast<std::size_t>(pool_rows * d), 12, 3.0f);
  const std::vector<float> sinks = uniform(static_cast<std::size_t>(heads), 13, -2.0f, 4.0f);
  SplitMix64 rng(14);
  std::vector<std::int32_t> key_rows(static_cast<std::size_t>(rows) * max_keys, -7);
  std::vector<std::int32_t> positions(static_cast<std::size_t>(rows));
  for (std::int32_t r = 0; r < rows; ++r) {
    for (std::int32_t j = 0; j < num_keys[r]; ++j) key_rows[r * max_keys + j] = static_cast<std::int32_t>(rng.next() % pool_rows);
    positions[r] = static_cast<std::int32_t>(rng.next() % 131072);
  }
  const RotaryTable table = test_rope(10000.0f);
  const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(d));

  Dev<std::uint16_t> dq(to_bf16(q)), dkv(to_bf16(kv));
  Dev<std::int32_t> drows(key_rows), dnum(num_keys), dpos(positions);
  Dev<float> dsinks(sinks), dfreq(table.inv_freq);
  const std::size_t out_n = static_cast<std::size_t>(rows) * heads * d;
  Dev<float> dout_f32(out_n);
  Dev<std::uint16_t> dout_bf16(out_n);
  cuda::V4SparseAttentionArgs args{.q = dq.get(), .kv = dkv.get(), .key_rows = drows.get(), .num_keys = dnum.get(),
                                   .sinks = dsinks.get(), .positions = dpos.get(),
                                   .rope = {.inv_freq = rope ? dfreq.get() : nullptr, .rope_dim = 64},
                                   .out = out_dt == kF32 ? static_cast<void*>(dout_f32.get()) : dout_bf16.get(),
                                   .out_dt = out_dt, .rows = rows, .num_heads = heads, .max_keys = max_keys,
                                   .softmax_scale = softmax_scale};
  cuda::launch_v4_sparse_attention(args, nullptr);
  std::vector<float> got;
  if (out_dt == kF32) {
    got = dout_f32.host();
  } else {
    for (std::uint16_t b : dout_bf16.host()) got.push_back(bf16_to_f32(b));
  }

  std::vector<float> want(out_n);
  const SinkAttentionShape shape{.num_heads = heads, .head_dim = d, .softmax_scale = softmax_scale};
  for (std::int32_t r = 0; r < rows; ++r) {
    std::vector<float> keys;
    for (std::int32_t j = 0; j < num_keys[r]; ++j) {
      const auto begin = kv.begin() + static_cast<std::int64_t>(key_rows[r * max_keys + j]) * d;
      keys.insert(keys.end(), begin, begin + d);
    }
    const auto out_row = std::span<float>(want).subspan(static_cast<std::size_t>(r) * heads * d, heads * d);
    cpu_ops().sink_attention(std::span<const float>(q).subspan(static_cast<std::size_t>(r) * heads * d, heads * d),
                             keys, sinks, shape, out_row);
    if (rope) {
      const std::int64_t position = positions[r];
      cpu_ops().rope_tail(out_row, d, heads, std::span(&position, 1), table, true);
    }
    if (num_keys[r] == 0) {
      for (std::int64_t i = 0; i < heads * d; ++i) {
        ASSERT_EQ(got[r * heads * d + i], 0.0f) << "row " << r << " has no keys";
      }
    }
  }
  EXPECT_LT(relative_error(got, want), tolerance) << "heads " << heads << " max |delta| " << max_abs_difference(got, want);
}

TEST(DeepseekV4CudaKernels, SparseAttentionDecodeRowsMatchTheReference) {
  // Window only (128), window + top-512 (CSA at long context), window + 1024 HCA entries, and edges.
  check_sparse_attention(64, {128, 640, 1152, 1, 0, 31, 33}, /*rope=*/true, kF32, 2e-5);
}

TEST(DeepseekV4CudaKernels, SparseAttentionHeadsNotAMultipleOfTheBlockAndBf16Output) {
  check_sparse_attention(20, {5, 640, 200}, /*rope=*/false, kF32, 2e-5);
  check_sparse_attention(64, {640, 64}, /*rope=*/true, kBf16, 6e-3);
}

TEST(DeepseekV4CudaKernels, SparseAttentionPrefillRowsEachWithTheirOwnKeys) {
  // A prefill chunk: row i sees min(i + 1, 128) window latents plus (i + 1) / 4 entries.
  std::vector<std::int32_t> num_keys;
  for (std::int32_t i = 0; i < 40; ++i) num_keys.push_back(std::min(i + 1, 128) + (i + 1) / 4 + 7 * i);
  check_sparse_attention(64, num_keys, /*rope=*/true, kF32, 2e-5);
}

// ---- the lightning indexer ------------------------------------------------------------------

struct IndexerCase {
  std::int32_t heads = 64;
  std::vector<std::int32_t> num_visible;  // per row; every row has its own keys
  std::int32_t top_k = 512;
  std::int32_t prototypes = 0;  // > 0: every key is a copy of one of these (ties on purpose)
  std::uint64_t seed = 1;
};

std::uint8_t random_e4m3(SplitMix64& rng, float scale) {
  const float v = static_cast<float>((2.0 * rng.uniform() - 1.0) * scale);
  return f32_to_fp8_e4m3(v);
}

void check_indexer(const IndexerCase& c) {
  constexpr std::int64_t d = cuda::kV4IndexHeadDim;
  const auto rows = static_cast<std::int32_t>(c.num_visible.size());
  const std::int32_t max_visible = std::max(1, *std::max_element(c.num_visible.begin(), c.num_visible.end()));
  SplitMix64 rng(c.seed);
  std::vector<std::int32_t> key_begin(rows);
  std::int64_t pool_rows = 0;
  for (std::int32_t r = 0; r < rows; ++r) {
    key_begin[r] = static_cast<std::int32_t>(pool_rows);
    pool_rows += c.num_visible[r];
  }
  // Keys: e4m3 codes with one power-of-two-ish scale each (as a quantizer of amax / 448 gives).
  std::vector<std::uint8_t> keys(static_cast<std::size_t>(std::max<std::int64_t>(pool_rows, 1) * d));
  std::vector<float> key_scale(static_cast<std::size_t>(std::max<std::int64_t>(pool_rows, 1)));
  std::vector<std::uint8_t> proto_codes(static_cast<std::size_t>(std::max(c.prototypes, 1)) * d);
  std::vector<float> proto_scale(static_cast<std::size_t>(std::max(c.prototypes, 1)));
  for (auto& b : proto_codes) b = random_e4m3(rng, 448.0f);
  for (float& s : proto_scale) s = static_cast<float>(0.001 + 0.01 * rng.uniform());
  for (std::int64_t t = 0; t < pool_rows; ++t) {
    if (c.prototypes > 0) {
      const auto p = static_cast<std::int64_t>(rng.next() % static_cast<std::uint64_t>(c.prototypes));
      std::copy_n(proto_codes.begin() + p * d, d, keys.begin() + t * d);
      key_scale[t] = proto_scale[p];
    } else {
      for (std::int64_t i = 0; i < d; ++i) keys[t * d + i] = random_e4m3(rng, 448.0f);
      key_scale[t] = static_cast<float>(0.001 + 0.01 * rng.uniform());
    }
  }
  std::vector<std::uint8_t> q(static_cast<std::size_t>(rows) * c.heads * d);
  for (auto& b : q) b = random_e4m3(rng, 448.0f);
  const std::vector<float> q_scale = uniform(static_cast<std::size_t>(rows) * c.heads, c.seed + 1, 0.001f, 0.01f);
  // weights_proj(x) * heads^-0.5: either sign.
  const std::vector<float> weights = uniform(static_cast<std::size_t>(rows) * c.heads, c.seed + 2, -0.1f, 0.2f);

  Dev<std::uint8_t> dq(q), dkeys(keys);
  Dev<float> dqs(q_scale), dw(weights), dks(key_scale);
  Dev<std::int32_t> dbegin(key_begin), dvisible(c.num_visible);
  Dev<float> dscores(static_cast<std::size_t>(rows) * max_visible);
  Dev<std::int32_t> dselected(static_cast<std::size_t>(rows) * c.top_k), dcount(static_cast<std::size_t>(rows));
  const cuda::V4IndexerArgs args{.q = dq.get(), .q_scale = dqs.get(), .weights = dw.get(), .keys = dkeys.get(),
                                 .key_scale = dks.get(), .key_begin = dbegin.get(), .num_visible = dvisible.get(),
                                 .scores = dscores.get(), .selected = dselected.get(), .num_selected = dcount.get(),
                                 .rows = rows, .num_heads = c.heads, .max_visible = max_visible, .top_k = c.top_k};
  cuda::launch_v4_indexer_scores(args, nullptr);
  cuda::launch_v4_indexer_top_k(args, nullptr);
  const std::vector<float> scores = dscores.host();
  const std::vector<std::int32_t> selected = dselected.host(), count = dcount.host();

  for (std::int32_t r = 0; r < rows; ++r) {
    const std::int32_t n = c.num_visible[r];
    // The reference op on the dequantized records (e4m3 * scale is exact in f32).
    std::vector<float> qf(static_cast<std::size_t>(c.heads) * d), kf(static_cast<std::size_t>(n) * d);
    for (std::int64_t h = 0; h < c.heads; ++h)
      for (std::int64_t i = 0; i < d; ++i)
        qf[h * d + i] = fp8_e4m3_to_f32(q[(r * c.heads + h) * d + i]) * q_scale[r * c.heads + h];
    for (std::int64_t t = 0; t < n; ++t)
      for (std::int64_t i = 0; i < d; ++i) kf[t * d + i] = fp8_e4m3_to_f32(keys[(key_begin[r] + t) * d + i]) * key_scale[key_begin[r] + t];
    const std::vector<float> w_row(weights.begin() + r * c.heads, weights.begin() + (r + 1) * c.heads);
    const std::vector<std::int64_t> want = cpu_ops().indexer_top_k(qf, w_row, kf, d, n, c.top_k);
    // The reference's scores (its formula, in double), to judge near-boundary differences.
    std::vector<double> ref_scores(n);
    for (std::int64_t t = 0; t < n; ++t) {
      double s = 0.0;
      for (std::int64_t h = 0; h < c.heads; ++h) {
        double dot = 0.0;
        for (std::int64_t i = 0; i < d; ++i) dot += static_cast<double>(qf[h * d + i]) * kf[t * d + i];
        s += std::max(0.0, dot) / std::sqrt(static_cast<double>(d)) * w_row[h];
      }
      ref_scores[t] = s;
    }
    double score_scale = 1e-30;
    for (double s : ref_scores) score_scale = std::max(score_scale, std::fabs(s));
    for (std::int64_t t = 0; t < n; ++t)
      ASSERT_NEAR(scores[static_cast<std::size_t>(r) * max_visible + t], ref_scores[t], 2e-5 * score_scale)
          << "row " << r << " key " << t;

    ASSERT_EQ(count[r], static_cast<std::int32_t>(want.size())) << "row " << r;
    const auto got_begin = selected.begin() + static_cast<std::int64_t>(r) * c.top_k;
    const std::vector<std::int64_t> got(got_begin, got_begin + count[r]);
    for (std::int32_t i = count[r]; i < c.top_k; ++i) ASSERT_EQ(got_begin[i], -1) << "row " << r << " slot " << i;
    ASSERT_TRUE(std::is_sorted(got.begin(), got.end())) << "row " << r << ": not in ascending entry order";
    if (c.prototypes > 0) {
      // Copies of a prototype score identically on both sides, so the sets must be equal: the tie rule decides.
      EXPECT_EQ(got, want) << "row " << r;
    } else {
      // Distinct random keys: equal sets, except a swap across the boundary between scores the f32 and
      // double sums order differently (within 5e-6 of the score scale of the k-th score).
      std::vector<std::int64_t> only_got, only_want;
      std::set_difference(got.begin(), got.end(), want.begin(), want.end(), std::back_inserter(only_got));
      std::set_difference(want.begin(), want.end(), got.begin(), got.end(), std::back_inserter(only_want));
      double kth = INFINITY;
      for (std::int64_t t : want) kth = std::min(kth, ref_scores[t]);
      for (std::int64_t t : only_got) EXPECT_NEAR(ref_scores[t], kth, 5e-6 * score_scale) << "row " << r << " got " << t;
      for (std::int64_t t : only_want) EXPECT_NEAR(ref_scores[t], kth, 5e-6 * score_scale) << "row " << r << " missed " << t;
      EXPECT_LE(only_got.size(), 2u) << "row " << r;
    }
  }
}

TEST(DeepseekV4CudaKernels, IndexerTopKSelectsTheReferenceSetsOnRandomFp8Keys) {
  // 32768 entries: a 128k context at CSA's ratio 4. Then fewer than, exactly and just over top_k, and none.
  check_indexer({.num_visible = {32768, 511, 512, 513, 0, 2000}, .seed = 21});
}

TEST(DeepseekV4CudaKernels, IndexerTopKBreaksTiesByTheLowerEntryAsTheReference) {
  // 3000 keys that are copies of 37 prototypes: the 512th score falls inside a run of equal scores.
  check_indexer({.num_visible = {3000, 3000, 1500}, .prototypes = 37, .seed = 22});
  check_indexer({.heads = 7, .num_visible = {900, 40}, .top_k = 16, .prototypes = 5, .seed = 23});
}

// ---- compressors ----------------------------------------------------------------------------

// One entry as DeepseekV4Reference::emit_entry pools it, from the reference ops.
std::vector<float> reference_entry(const std::vector<float>& kv, const std::vector<float>& gate,
                                   const std::vector<float>& ape, const std::vector<float>& norm, std::int64_t dim,
                                   std::int64_t width, std::int64_t rate, std::int64_t window_row,
                                   std::int64_t prev_window_row, std::int64_t position, const RotaryTable& rope) {
  std::vector<float> values, gates, entry(dim);
  auto add_window = [&](std::int64_t first_row, std::int64_t half_offset) {
    for (std::int64_t s = 0; s < rate; ++s)
      for (std::int64_t ch = 0; ch < dim; ++ch) {
        values.push_back(kv[(first_row + s) * width + half_offset + ch]);
        gates.push_back(gate[(first_row + s) * width + half_offset + ch] + ape[s * width + half_offset + ch]);
      }
  };
  const bool overlap = width == 2 * dim;
  if (overlap && prev_window_row >= 0) add_window(prev_window_row, 0);
  add_window(window_row, overlap ? dim : 0);
  cpu_ops().softmax_pool(values, gates, dim, entry);
  cpu_ops().rms_norm(entry, dim, norm, 1e-6f);
  cpu_ops().rope_tail(entry, dim, 1, std::span(&position, 1), rope, false);
  return entry;
}

void check_compress(std::int32_t dim, std::int32_t width, std::int32_t rate, std::int32_t windows) {
  const std::int64_t pending_rows = static_cast<std::int64_t>(windows) * rate;
  const std::vector<float> kv = uniform(static_cast<std::size_t>(pending_rows * width), 31, -2.0f, 2.0f);
  const std::vector<float> gate = uniform(static_cast<std::size_t>(pending_rows * width), 32, -4.0f, 4.0f);
  const std::vector<float> ape = uniform(static_cast<std::size_t>(rate) * width, 33, -1.0f, 1.0f);
  const std::vector<float> norm = uniform(static_cast<std::size_t>(dim), 34, 0.5f, 1.5f);
  const RotaryTable rope = test_rope(160000.0f);
  std::vector<std::int32_t> window_row, prev_row, position;
  for (std::int32_t w = 0; w < windows; ++w) {
    window_row.push_back(w * rate);
    prev_row.push_back(w == 0 ? -1 : (w - 1) * rate);
    position.push_back(w * rate + 4096 * rate);  // entries deep in a long context
  }
  Dev<float> dkv(kv), dgate(gate), dape(ape), dnorm(norm), dfreq(rope.inv_freq);
  Dev<std::int32_t> dwin(window_row), dprev(prev_row), dpos(position);
  Dev<float> dout(static_cast<std::size_t>(windows) * dim);
  cuda::launch_v4_compress({.kv = dkv.get(), .gate = dgate.get(), .ape = dape.get(), .norm = dnorm.get(),
                            .window_row = dwin.get(), .prev_window_row = dprev.get(), .position = dpos.get(),
                            .rope = {.inv_freq = dfreq.get(), .rope_dim = 64}, .out = dout.get(), .out_dt = kF32,
                            .entries = windows, .dim = dim, .width = width, .rate = rate, .eps = 1e-6f},
                           nullptr);
  const std::vector<float> got = dout.host();
  std::vector<float> want;
  for (std::int32_t w = 0; w < windows; ++w) {
    const std::vector<float> e =
        reference_entry(kv, gate, ape, norm, dim, width, rate, window_row[w], prev_row[w], position[w], rope);
    want.insert(want.end(), e.begin(), e.end());
  }
  EXPECT_LT(relative_error(got, want), 1e-5) << "dim " << dim << " width " << width << " rate " << rate
                                             << " max |delta| " << max_abs_difference(got, want);
}

TEST(DeepseekV4CudaKernels, CompressorsMatchTheReferenceEntries) {
  check_compress(512, 1024, 4, 9);     // CSA: overlapping windows, the first without a predecessor
  check_compress(512, 512, 128, 3);    // HCA: disjoint windows of 128
  check_compress(128, 256, 4, 6);      // the indexer's compressor (index_head_dim 128)
}

// ---- mHC --------------------------------------------------------------------------------------

TEST(DeepseekV4CudaKernels, HyperConnectionsMatchTheReference) {
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

  Dev<float> dstreams(streams), dfn(fn), dbase(base), dscale(scale), dy(y);
  Dev<float> dpost(static_cast<std::size_t>(rows) * hc), dcomb(static_cast<std::size_t>(rows) * hc * hc);
  Dev<float> dcollapsed(static_cast<std::size_t>(rows) * hidden), dhead(static_cast<std::size_t>(rows) * hidden);
  cuda::launch_v4_hc_pre({.streams = dstreams.get(), .w = {dfn.get(), dbase.get(), dscale.get()}, .post = dpost.get(),
                          .comb = dcomb.get(), .collapsed = dcollapsed.get(), .out_dt = kF32, .rows = rows, .hc = hc,
                          .hidden = hidden, .sinkhorn_iters = 20},
                         nullptr);
  cuda::launch_v4_hc_pre({.streams = dstreams.get(), .w = {dfn.get(), dbase.get(), dscale.get()},
                          .collapsed = dhead.get(), .out_dt = kF32, .rows = rows, .hc = hc, .hidden = hidden,
                          .head = true},
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

// ---- routing, SwiGLU, FP4 experts --------------------------------------------------------------

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
  EXPECT_DEATH(cuda::launch_v4_compress({.dim = 512, .width = 700, .rate = 4}, nullptr), "");
}

}  // namespace
}  // namespace sluice
