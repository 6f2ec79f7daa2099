// cuda_bench --deepseek-v4-kernels: each DeepSeek-V4 kernel of issue 18 stage 3
// (backend/cuda/kernels/deepseek_v4_kernels.h) timed alone at V4-Flash's full
// width (hidden 4096, 64 heads x 512, index 64 heads x 128 and top-512, 256
// experts top-6 with FP4 experts of 2048), contexts of 128k, with its share of
// HBM (bytes it must touch) or of the tensor peak (FLOPs). The sparse
// attention runs on warpgroup MMA (session 22, two bf16 softmax terms or one),
// mma.sync (session 18) and CUDA cores (stage 3); the indexer's scores on warpgroup MMA
// (session 21, prefill's), mma.sync (session 18, decode's) and CUDA cores.
// Inputs are filled on the device with patterns or random bytes (values do
// not change these kernels' work, except the top-k's, which gets random keys).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "sluice/backend/cuda/cuda_dtype.h"
#include "sluice/backend/cuda/kernels/deepseek_v4_kernels.h"
#include "sluice/common/rng.h"
#include "sluice/model/deepseek_v4_step_plan.h"
#include "bench_cuda.h"
#include "device_ceilings.h"

namespace sluice {
namespace {

constexpr double kBf16Peak = 989e12;        // H200 dense bf16 (spec)
constexpr double kFp8Peak = 1979e12;                // H200 dense FP8, the spec sheet
constexpr double kFlashMlaSparsePrefill = 640e12;  // FlashMLA sparse prefill on H800 (same dense peak as H200)
constexpr double kFlashMlaSparseDecode = 410e12;   // FlashMLA sparse decode, FP8 KV, H800

template <class T>
T* alloc(std::size_t n, int fill_byte = 0) {
  void* p = nullptr;
  check(cudaMalloc(&p, std::max<std::size_t>(n * sizeof(T), 16)), "cudaMalloc");
  check(cudaMemset(p, fill_byte, n * sizeof(T)), "cudaMemset");
  return static_cast<T*>(p);
}

template <class T>
T* upload(const std::vector<T>& host) {
  T* p = alloc<T>(host.size());
  check(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  return p;
}

// Median seconds of `fn` on the default stream, by events, after 2 warmups.
double time_median(int reps, const std::function<void()>& fn) {
  for (int i = 0; i < 2; ++i) fn();
  check(cudaDeviceSynchronize(), "warmup");
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(start, nullptr);
    fn();
    cudaEventRecord(stop, nullptr);
    check(cudaEventSynchronize(stop), "timed run");
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start, stop);
    t.push_back(ms * 1e-3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::string pct(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * x);
  return buf;
}

void row(const std::string& what, double seconds, const std::string& rate, const std::string& share) {
  std::printf("| %s | %.4g ms | %s | %s |\n", what.c_str(), seconds * 1e3, rate.c_str(), share.c_str());
  std::fflush(stdout);
}

std::string tbs(double bytes, double s) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g TB/s", bytes / s / 1e12);
  return buf;
}
std::string hbm_share(double bytes, double s) {
  const DeviceCeilings& hbm = device_ceilings();
  return pct(bytes / s / hbm.hbm_spec) + " of HBM spec (" + pct(bytes / s / hbm.hbm_copy) + " of the copy)";
}
std::string tflops(double flops, double s) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g TFLOP/s", flops / s / 1e12);
  return buf;
}

const cuda::Dt kBf16 = cuda::dt_of(DType::bf16);

// Sparse attention: rows over 128 window latents + `entries` gathered compressed entries each.
void bench_attention(std::int32_t rows, std::int32_t entries, std::int32_t sequences, const std::string& what,
                     bool prefill) {
  constexpr std::int32_t heads = 64, d = cuda::kV4LatentDim, window = 128, context = 131072;
  const std::int64_t per_seq = window + context / 4;  // the CSA entries of a 128k context, plus the ring
  const std::int64_t pool_rows = per_seq * sequences;
  auto* kv = alloc<std::uint16_t>(static_cast<std::size_t>(pool_rows) * d, 0x3c);  // bf16 ~0.0115
  auto* q = alloc<std::uint16_t>(static_cast<std::size_t>(rows) * heads * d, 0x3c);
  auto* out = alloc<std::uint16_t>(static_cast<std::size_t>(rows) * heads * d);
  const std::int32_t max_keys = window + entries;
  std::vector<std::int32_t> key_rows(static_cast<std::size_t>(rows) * max_keys), num_keys(rows, max_keys), positions(rows);
  SplitMix64 rng(5);
  for (std::int32_t r = 0; r < rows; ++r) {
    const std::int64_t base = (r % sequences) * per_seq;
    for (std::int32_t j = 0; j < window; ++j) key_rows[static_cast<std::size_t>(r) * max_keys + j] = static_cast<std::int32_t>(base + j);
    for (std::int32_t j = 0; j < entries; ++j)
      key_rows[static_cast<std::size_t>(r) * max_keys + window + j] =
          static_cast<std::int32_t>(base + window + static_cast<std::int64_t>(rng.next() % (context / 4)));
    positions[r] = context - rows + r;
  }
  std::vector<float> sinks(heads, 0.5f), inv_freq(32);
  for (int i = 0; i < 32; ++i) inv_freq[i] = std::pow(10000.0f, -static_cast<float>(i) / 32.0f);
  std::int32_t* dkey_rows = upload(key_rows);
  std::int32_t* dnum = upload(num_keys);
  std::int32_t* dpos = upload(positions);
  float* dsinks = upload(sinks);
  float* dfreq = upload(inv_freq);
  const cuda::V4SparseAttentionArgs args{.q = q, .kv = kv, .key_rows = dkey_rows, .num_keys = dnum, .sinks = dsinks,
                                         .positions = dpos, .rope = {.inv_freq = dfreq, .rope_dim = 64},
                                         .out = out, .out_dt = kBf16, .rows = rows, .num_heads = heads,
                                         .max_keys = max_keys, .softmax_scale = 1.0f / std::sqrt(512.0f)};
  const double flops = 4.0 * rows * heads * static_cast<double>(max_keys) * d;
  // Bytes: each row's gathered latents (bf16 here; FP8 fp8_ds_mla would be 584 B) + q + out.
  const double bytes = static_cast<double>(rows) * max_keys * d * 2 + 2.0 * rows * heads * d * 2;
  // Warpgroup MMA (session 22) with the softmax weights as two bf16 terms and as one, mma.sync
  // (session 18), then the CUDA-core stage-3 kernel.
  const std::pair<const char*, std::function<void()>> kernels[] = {
      {", wgmma (two bf16 terms)",
       [&] { cuda::launch_v4_sparse_attention_wgmma(args, cuda::V4SoftmaxWeights::two_bf16_terms, nullptr); }},
      {", wgmma (one bf16 term)",
       [&] { cuda::launch_v4_sparse_attention_wgmma(args, cuda::V4SoftmaxWeights::one_bf16, nullptr); }},
      {", mma.sync", [&] { cuda::launch_v4_sparse_attention_mma(args, nullptr); }},
      {", CUDA cores", [&] { cuda::launch_v4_sparse_attention(args, nullptr); }},
  };
  for (const auto& [name, launch] : kernels) {
    const double s = time_median(5, launch);
    row(what + name, s, tflops(flops, s) + ", " + tbs(bytes, s),
        pct(flops / s / kBf16Peak) + " of bf16 peak; " +
            (prefill ? pct(flops / s / kFlashMlaSparsePrefill) + " of FlashMLA sparse prefill (640)"
                     : pct(flops / s / kFlashMlaSparseDecode) + " of FlashMLA sparse decode (410); " +
                           hbm_share(bytes, s)));
  }
  for (void* p : {static_cast<void*>(kv), static_cast<void*>(q), static_cast<void*>(out), static_cast<void*>(dkey_rows),
                  static_cast<void*>(dnum), static_cast<void*>(dpos), static_cast<void*>(dsinks), static_cast<void*>(dfreq)})
    cudaFree(p);
}

// The top-k's forms on the scores in `args`: session 23's sampled threshold
// (in its 512-thread blocks), session 27's, session 32's bulk sweep, session 35's narrow
// blocks, and every row through the full selection.
struct TopKTimes {
  double sampled, session27, bulk, narrow, full;
};
TopKTimes time_top_k(const cuda::V4IndexerArgs& args) {
  TopKTimes t{};
  // Session 23's form in its 512-thread blocks at every row count: the
  // default takes the narrow ones from kV4TopKNarrowFromRows rows.
  cuda::set_v4_indexer_top_k_blocks(cuda::V4TopKBlocks::wide);
  t.sampled = time_median(5, [&] { cuda::launch_v4_indexer_top_k(args, nullptr); });
  cuda::set_v4_indexer_top_k_session27(true);
  t.session27 = time_median(5, [&] { cuda::launch_v4_indexer_top_k(args, nullptr); });
  cuda::set_v4_indexer_top_k_session27(false);
  cuda::set_v4_indexer_top_k_bulk_sweep(true);
  t.bulk = time_median(5, [&] { cuda::launch_v4_indexer_top_k(args, nullptr); });
  cuda::set_v4_indexer_top_k_bulk_sweep(false);
  cuda::set_v4_indexer_top_k_blocks(cuda::V4TopKBlocks::narrow);
  t.narrow = time_median(5, [&] { cuda::launch_v4_indexer_top_k(args, nullptr); });
  cuda::set_v4_indexer_top_k_blocks(cuda::V4TopKBlocks::by_rows);
  cuda::set_v4_indexer_top_k_sampled(false);
  t.full = time_median(5, [&] { cuda::launch_v4_indexer_top_k(args, nullptr); });
  cuda::set_v4_indexer_top_k_sampled(true);
  return t;
}

// The indexer: `rows` query rows of `sequences` sequences, each seeing `visible` FP8 keys.
void bench_indexer(std::int32_t rows, std::int32_t sequences, std::int32_t visible, const std::string& what) {
  constexpr std::int32_t heads = 64, d = cuda::kV4IndexHeadDim, top_k = 512;
  const std::size_t key_bytes = static_cast<std::size_t>(sequences) * visible * d;
  std::vector<std::uint8_t> keys(key_bytes), q(static_cast<std::size_t>(rows) * heads * d);
  SplitMix64 rng(7);
  auto random_codes = [&](std::vector<std::uint8_t>& v) {
    for (std::size_t i = 0; i < v.size(); i += 8) {
      std::uint64_t x = rng.next();
      for (std::size_t j = 0; j < 8 && i + j < v.size(); ++j, x >>= 8) {
        auto b = static_cast<std::uint8_t>(x & 0xff);
        if ((b & 0x7f) == 0x7f) b ^= 1;  // no NaN
        v[i + j] = b;
      }
    }
  };
  random_codes(keys);
  random_codes(q);
  std::vector<float> key_scale(static_cast<std::size_t>(sequences) * visible, 1e-3f), q_scale(static_cast<std::size_t>(rows) * heads, 1e-3f);
  std::vector<float> weights(static_cast<std::size_t>(rows) * heads), factors(weights.size());
  for (float& w : weights) w = static_cast<float>(rng.uniform() - 0.3);
  for (std::size_t i = 0; i < weights.size(); ++i) factors[i] = q_scale[i] * weights[i];
  std::vector<std::int32_t> key_begin(rows), num_visible(rows, visible);
  for (std::int32_t r = 0; r < rows; ++r) key_begin[r] = (r % sequences) * visible;
  auto* dkeys = upload(keys);
  auto* dq = upload(q);
  float* dks = upload(key_scale);
  float* dqs = upload(q_scale);
  float* dw = upload(weights);
  float* dfactors = upload(factors);
  std::int32_t* dbegin = upload(key_begin);
  std::int32_t* dvisible = upload(num_visible);
  float* scores = alloc<float>(static_cast<std::size_t>(rows) * visible);
  std::int32_t* selected = alloc<std::int32_t>(static_cast<std::size_t>(rows) * top_k);
  std::int32_t* count = alloc<std::int32_t>(static_cast<std::size_t>(rows));
  const cuda::V4IndexerArgs args{.q = dq, .q_scale = dqs, .weights = dw, .head_factors = dfactors, .keys = dkeys,
                                 .key_scale = dks,
                                 .key_begin = dbegin, .num_visible = dvisible, .scores = scores, .selected = selected,
                                 .num_selected = count, .rows = rows, .num_heads = heads, .max_visible = visible,
                                 .top_k = top_k};
  const double s_scores_wgmma = time_median(5, [&] { cuda::launch_v4_indexer_scores_wgmma(args, nullptr); });
  const double s_scores_tf32 = time_median(5, [&] { cuda::launch_v4_indexer_scores_wgmma_tf32(args, nullptr); });
  cuda::set_v4_indexer_scores_tf32_keys(cuda::V4IndexerTf32Keys::registers);
  const double s_scores_tf32_registers =
      time_median(5, [&] { cuda::launch_v4_indexer_scores_wgmma_tf32(args, nullptr); });
  cuda::set_v4_indexer_scores_tf32_keys(cuda::V4IndexerTf32Keys::shared);
  const double s_scores_tf32_shared = time_median(5, [&] { cuda::launch_v4_indexer_scores_wgmma_tf32(args, nullptr); });
  cuda::set_v4_indexer_scores_tf32_keys(cuda::V4IndexerTf32Keys::registers_in_pairs);
  const double s_scores_mma = time_median(5, [&] { cuda::launch_v4_indexer_scores_mma(args, nullptr); });
  const double s_scores = time_median(5, [&] { cuda::launch_v4_indexer_scores(args, nullptr); });
  const TopKTimes top_k_times = time_top_k(args);
  const double s_top_k = top_k_times.sampled, s_top_k_27 = top_k_times.session27, s_top_k_full = top_k_times.full;
  const double flops = 2.0 * rows * static_cast<double>(visible) * heads * d;
  const double bytes = static_cast<double>(sequences) * visible * (d + 4) + static_cast<double>(rows) * visible * 4;
  row(what + ": FP8 scores, warpgroup MMA (e4m3)", s_scores_wgmma,
      tflops(flops, s_scores_wgmma) + ", " + tbs(bytes, s_scores_wgmma),
      pct(flops / s_scores_wgmma / kFp8Peak) + " of FP8 peak; " + hbm_share(bytes, s_scores_wgmma));
  row(what + ": FP8 scores, warpgroup MMA, heads summed by a tf32 MMA (keys in registers, 128 a warpgroup)",
      s_scores_tf32,
      tflops(flops, s_scores_tf32) + ", " + tbs(bytes, s_scores_tf32),
      pct(flops / s_scores_tf32 / kFp8Peak) + " of FP8 peak (the head sum's tf32 not counted)");
  row(what + ": FP8 scores, warpgroup MMA, heads summed by a tf32 MMA, keys in registers, 64 a warpgroup",
      s_scores_tf32_registers,
      tflops(flops, s_scores_tf32_registers) + ", " + tbs(bytes, s_scores_tf32_registers),
      pct(flops / s_scores_tf32_registers / kFp8Peak) + " of FP8 peak (the head sum's tf32 not counted)");
  row(what + ": FP8 scores, warpgroup MMA, heads summed by a tf32 MMA, keys in shared memory (session 26)",
      s_scores_tf32_shared, tflops(flops, s_scores_tf32_shared) + ", " + tbs(bytes, s_scores_tf32_shared),
      pct(flops / s_scores_tf32_shared / kFp8Peak) + " of FP8 peak (the head sum's tf32 not counted)");
  row(what + ": FP8 scores, tensor cores", s_scores_mma, tflops(flops, s_scores_mma) + ", " + tbs(bytes, s_scores_mma),
      pct(flops / s_scores_mma / kBf16Peak) + " of bf16 peak (FP8 peak is 2x); " + hbm_share(bytes, s_scores_mma));
  row(what + ": FP8 scores, CUDA cores", s_scores, tflops(flops, s_scores) + ", " + tbs(bytes, s_scores),
      pct(flops / s_scores / kBf16Peak) + " of bf16 peak (FP8 peak is 2x); " + hbm_share(bytes, s_scores));
  const double score_bytes = static_cast<double>(rows) * visible * 4;
  row(what + ": top-512, sampled threshold", s_top_k, tbs(score_bytes, s_top_k),
      hbm_share(score_bytes, s_top_k) + " (the scores once)");
  row(what + ": top-512, sampled threshold, float4 loads, lists sized by the sample (session 27)", s_top_k_27,
      tbs(score_bytes, s_top_k_27), hbm_share(score_bytes, s_top_k_27) + " (the scores once)");
  row(what + ": top-512, sampled threshold, bulk-copy sweep (session 32)", top_k_times.bulk,
      tbs(score_bytes, top_k_times.bulk), hbm_share(score_bytes, top_k_times.bulk) + " (the scores once)");
  row(what + ": top-512, sampled threshold, 256-thread blocks, 8 a multiprocessor (session 35)", top_k_times.narrow,
      tbs(score_bytes, top_k_times.narrow), hbm_share(score_bytes, top_k_times.narrow) + " (the scores once)");
  row(what + ": top-512, full selection (session 22)", s_top_k_full, tbs(6 * score_bytes, s_top_k_full),
      hbm_share(6 * score_bytes, s_top_k_full) + " (6 reads of the scores)");
  for (void* p : {static_cast<void*>(dkeys), static_cast<void*>(dq), static_cast<void*>(dks), static_cast<void*>(dqs),
                  static_cast<void*>(dw), static_cast<void*>(dfactors), static_cast<void*>(dbegin), static_cast<void*>(dvisible),
                  static_cast<void*>(scores), static_cast<void*>(selected), static_cast<void*>(count)})
    cudaFree(p);
}

// The top-k alone on rows whose scores grow along the row (the top crowds
// into the last entries, as recent tokens may): the sampled path must not
// fall back to the full selection.
void bench_top_k_recent_heavy(std::int32_t rows, std::int32_t visible) {
  constexpr std::int32_t top_k = 512;
  std::vector<float> host(static_cast<std::size_t>(rows) * visible);
  SplitMix64 rng(11);
  for (std::int32_t r = 0; r < rows; ++r)
    for (std::int32_t t = 0; t < visible; ++t)
      host[static_cast<std::size_t>(r) * visible + t] =
          static_cast<float>((rng.uniform() - 0.3) * (1.0 + 8.0 * t / visible));
  float* scores = upload(host);
  std::int32_t* dvisible = upload(std::vector<std::int32_t>(rows, visible));
  std::int32_t* selected = alloc<std::int32_t>(static_cast<std::size_t>(rows) * top_k);
  std::int32_t* count = alloc<std::int32_t>(static_cast<std::size_t>(rows));
  const cuda::V4IndexerArgs args{.num_visible = dvisible, .scores = scores, .selected = selected,
                                 .num_selected = count, .rows = rows, .max_visible = visible, .top_k = top_k};
  const TopKTimes times = time_top_k(args);
  const double sampled = times.sampled, sampled_27 = times.session27, full = times.full;
  const double bytes = static_cast<double>(rows) * visible * 4;
  const std::string what = "top-512 of " + std::to_string(rows) + " rows x " + std::to_string(visible) +
                           " scores growing 9x along the row";
  row(what + ", sampled threshold", sampled, tbs(bytes, sampled), hbm_share(bytes, sampled) + " (the scores once)");
  row(what + ", sampled threshold (session 27's form)", sampled_27, tbs(bytes, sampled_27),
      hbm_share(bytes, sampled_27) + " (the scores once)");
  row(what + ", sampled threshold (session 32's bulk sweep)", times.bulk, tbs(bytes, times.bulk),
      hbm_share(bytes, times.bulk) + " (the scores once)");
  row(what + ", sampled threshold (session 35's 256-thread blocks)", times.narrow, tbs(bytes, times.narrow),
      hbm_share(bytes, times.narrow) + " (the scores once)");
  row(what + ", full selection", full, tbs(6 * bytes, full), hbm_share(6 * bytes, full) + " (6 reads)");
  for (void* p : {static_cast<void*>(scores), static_cast<void*>(dvisible), static_cast<void*>(selected),
                  static_cast<void*>(count)})
    cudaFree(p);
}

// A compressor's step (DeepseekV4CompressPlan + launch_v4_compress): `sequences`
// sequences of `tokens` rows each from `first` on, in blocks of 1024; each
// sequence's positions map to two blocks (the last one apart), so the states
// read and stored stay in bounds.
void bench_compress(std::int32_t sequences, std::int32_t tokens, std::int32_t first, std::int32_t dim,
                    std::int32_t width, std::int32_t rate, const std::string& what) {
  constexpr std::int32_t kBlock = 1024;
  const bool overlap = width == 2 * dim;
  const std::int32_t slots = overlap ? 2 : 1, rows = sequences * tokens;
  StepLayout step;
  for (std::int32_t q = 0; q < sequences; ++q) {
    std::vector<BlockId> table((first + tokens) / kBlock + 1);
    for (std::size_t b = 0; b < table.size(); ++b) table[b] = 2 * q + (b + 1 == table.size() ? 1 : 0);
    step.sequences.push_back({.row_begin = step.num_rows(), .num_rows = tokens, .num_computed_tokens = first,
                              .block_table = table});
    for (std::int32_t i = 0; i < tokens; ++i) {
      step.token_ids.push_back(0);
      step.positions.push_back(first + i);
    }
  }
  const DeepseekV4StepTables t = DeepseekV4StepTables::make(step);
  const DeepseekV4CompressPlan plan = DeepseekV4CompressPlan::make(t, rate, overlap, kBlock);
  std::vector<std::int32_t> begin, len;
  for (std::int32_t q : plan.item_sequence) {
    begin.push_back(t.sequence_table_begin[static_cast<std::size_t>(q)]);
    len.push_back(t.sequence_table_len[static_cast<std::size_t>(q)]);
  }
  const std::int64_t floats_per_block = std::int64_t{slots} * 3 * dim;
  float* blocks = upload(std::vector<float>(static_cast<std::size_t>(2 * sequences * floats_per_block), 0.0f));
  float* kv = alloc<float>(static_cast<std::size_t>(rows) * width);
  float* gate = alloc<float>(static_cast<std::size_t>(rows) * width);
  float* ape = alloc<float>(static_cast<std::size_t>(rate) * width);
  float* norm = upload(std::vector<float>(dim, 1.0f));
  float* dfreq = upload(std::vector<float>(32, 0.01f));
  float* start = alloc<float>(static_cast<std::size_t>(plan.num_items()) * 3 * dim);
  auto* out = alloc<std::uint16_t>(static_cast<std::size_t>(std::max(plan.num_entries(), 1)) * dim);
  std::vector<std::int32_t*> ints;
  const std::vector<const std::vector<std::int32_t>*> arrays = {
      &t.block_ids, &begin, &len, &plan.item_entry, &plan.item_first_row, &plan.item_first_token, &plan.item_count,
      &plan.item_flags, &plan.item_emit_row};
  for (const std::vector<std::int32_t>* v : arrays) ints.push_back(upload(*v));
  const cuda::V4CompressArgs args{
      .kv = kv, .gate = gate, .ape = ape, .norm = norm,
      .blocks = {.data = blocks, .floats_per_block = floats_per_block, .num_blocks = 2 * sequences, .block_size = kBlock},
      .tables = {.block_ids = ints[0], .table_begin = ints[1], .table_len = ints[2]},
      .state_offset = 0, .slots = slots, .entry = ints[3], .first_row = ints[4], .first_token = ints[5],
      .count = ints[6], .flags = ints[7], .emit_row = ints[8], .start_states = start,
      .rope = {.inv_freq = dfreq, .rope_dim = 64}, .out = out, .out_dt = kBf16, .items = plan.num_items(),
      .dim = dim, .width = width, .rate = rate};
  const double s = time_median(5, [&] { cuda::launch_v4_compress(args, nullptr); });
  // Each row's kv and gate once (overlap: its halves go to two entries).
  const double bytes = static_cast<double>(rows) * width * 2 * 4;
  row(what, s, tbs(bytes, s), hbm_share(bytes, s) + " (the step's projections read)");
  for (void* p : {static_cast<void*>(blocks), static_cast<void*>(kv), static_cast<void*>(gate), static_cast<void*>(ape),
                  static_cast<void*>(norm), static_cast<void*>(dfreq), static_cast<void*>(start), static_cast<void*>(out)})
    cudaFree(p);
  for (std::int32_t* p : ints) cudaFree(p);
}

void bench_mhc(std::int32_t rows) {
  constexpr std::int32_t hc = 4, hidden = 4096, mixes = (2 + hc) * hc;
  float* streams = alloc<float>(static_cast<std::size_t>(rows) * hc * hidden);
  float* fn = alloc<float>(static_cast<std::size_t>(mixes) * hc * hidden);
  float* base = alloc<float>(mixes);
  float* scale = upload(std::vector<float>{1.0f, 1.0f, 1.0f});
  float* post = alloc<float>(static_cast<std::size_t>(rows) * hc);
  float* comb = alloc<float>(static_cast<std::size_t>(rows) * hc * hc);
  auto* collapsed = alloc<std::uint16_t>(static_cast<std::size_t>(rows) * hidden);
  const cuda::V4HcPreArgs pre{.streams = streams, .w = {fn, base, scale}, .post = post, .comb = comb,
                              .collapsed = collapsed, .out_dt = kBf16, .rows = rows, .hc = hc, .hidden = hidden,
                              .sinkhorn_iters = 20};
  const cuda::V4HcPostArgs post_args{.streams = streams, .y = collapsed, .y_dt = kBf16, .post = post, .comb = comb,
                                     .rows = rows, .hc = hc, .hidden = hidden};
  const double s_pre = time_median(10, [&] { cuda::launch_v4_hc_pre(pre, nullptr); });
  const double s_post = time_median(10, [&] { cuda::launch_v4_hc_post(post_args, nullptr); });
  const double fn_bytes = static_cast<double>(mixes) * hc * hidden * 4;
  const double pre_bytes = static_cast<double>(rows) * hc * hidden * 4 + rows * hidden * 2.0 + fn_bytes;
  const double post_bytes = static_cast<double>(rows) * hc * hidden * 4 * 2 + rows * hidden * 2.0;
  row("mHC hc_pre (Sinkhorn 20), " + std::to_string(rows) + " rows", s_pre, tbs(pre_bytes, s_pre), hbm_share(pre_bytes, s_pre));
  row("mHC hc_post, " + std::to_string(rows) + " rows", s_post, tbs(post_bytes, s_post), hbm_share(post_bytes, s_post));
  for (void* p : {static_cast<void*>(streams), static_cast<void*>(fn), static_cast<void*>(base), static_cast<void*>(scale),
                  static_cast<void*>(post), static_cast<void*>(comb), static_cast<void*>(collapsed)})
    cudaFree(p);
}

void bench_route_and_swiglu(std::int32_t rows) {
  constexpr std::int32_t experts = 256, k = 6, inter = 2048;
  std::vector<float> logits(static_cast<std::size_t>(rows) * experts);
  SplitMix64 rng(9);
  for (float& l : logits) l = static_cast<float>(4.0 * rng.uniform() - 2.0);
  float* dlogits = upload(logits);
  float* bias = alloc<float>(experts);
  std::int32_t* ids = alloc<std::int32_t>(static_cast<std::size_t>(rows) * k);
  float* weights = alloc<float>(static_cast<std::size_t>(rows) * k);
  const cuda::V4RouteArgs route{.logits = dlogits, .bias = bias, .expert_ids = ids, .expert_weights = weights,
                                .rows = rows, .num_experts = experts, .k = k, .scale = 1.5f};
  const double s_route = time_median(10, [&] { cuda::launch_v4_route(route, nullptr); });
  const double route_bytes = static_cast<double>(rows) * experts * 4;
  row("sqrtsoftplus route 256 top-6, " + std::to_string(rows) + " rows", s_route, tbs(route_bytes, s_route),
      hbm_share(route_bytes, s_route));
  const std::int64_t pairs = static_cast<std::int64_t>(rows) * k;
  auto* in = alloc<std::uint16_t>(static_cast<std::size_t>(pairs) * 2 * inter, 0x3c);
  auto* out = alloc<std::uint16_t>(static_cast<std::size_t>(pairs) * inter);
  const cuda::V4SwigluArgs swiglu{.in = in, .in_dt = kBf16, .out = out, .out_dt = kBf16,
                                  .rows = static_cast<std::int32_t>(pairs), .inter = inter, .limit = 10.0f};
  const double s_swiglu = time_median(10, [&] { cuda::launch_v4_clamped_swiglu(swiglu, nullptr); });
  const double swiglu_bytes = static_cast<double>(pairs) * inter * 3 * 2;
  row("clamped SwiGLU, " + std::to_string(pairs) + " pairs x 2048", s_swiglu, tbs(swiglu_bytes, s_swiglu),
      hbm_share(swiglu_bytes, s_swiglu));
  for (void* p : {static_cast<void*>(dlogits), static_cast<void*>(bias), static_cast<void*>(ids),
                  static_cast<void*>(weights), static_cast<void*>(in), static_cast<void*>(out)})
    cudaFree(p);
}

// The FP4 expert GEMMs of one MoE layer: rows x top-6 pairs over 256 experts (random routing).
void bench_fp4_experts(std::int32_t rows) {
  constexpr std::int32_t experts = 256, k = 6, hidden = 4096, inter = 2048;
  SplitMix64 rng(11);
  std::vector<std::int32_t> count(experts, 0), expert_of_pair(static_cast<std::size_t>(rows) * k);
  for (std::int32_t r = 0; r < rows; ++r) {
    std::vector<std::int32_t> chosen;
    while (static_cast<std::int32_t>(chosen.size()) < k) {
      const auto e = static_cast<std::int32_t>(rng.next() % experts);
      if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
    }
    for (std::int32_t i = 0; i < k; ++i) {
      expert_of_pair[static_cast<std::size_t>(r) * k + i] = chosen[i];
      ++count[chosen[i]];
    }
  }
  std::vector<std::int32_t> offsets(experts + 1, 0);
  for (std::int32_t e = 0; e < experts; ++e) offsets[e + 1] = offsets[e] + count[e];
  std::vector<std::int32_t> row_of_slot(static_cast<std::size_t>(rows) * k), fill(offsets.begin(), offsets.end() - 1);
  for (std::size_t p = 0; p < expert_of_pair.size(); ++p) row_of_slot[fill[expert_of_pair[p]]++] = static_cast<std::int32_t>(p / k);
  const std::int32_t hit = static_cast<std::int32_t>(std::count_if(count.begin(), count.end(), [](std::int32_t c) { return c > 0; }));
  std::int32_t* doffsets = upload(offsets);
  std::int32_t* drows = upload(row_of_slot);
  const std::int64_t slots = static_cast<std::int64_t>(rows) * k;
  auto* x = alloc<std::uint16_t>(static_cast<std::size_t>(rows) * hidden, 0x3c);
  auto* act = alloc<std::uint16_t>(static_cast<std::size_t>(slots) * inter, 0x3c);
  std::vector<std::int32_t> identity(static_cast<std::size_t>(slots));
  std::iota(identity.begin(), identity.end(), 0);
  std::int32_t* dident = upload(identity);
  auto* gate_up_out = alloc<std::uint16_t>(static_cast<std::size_t>(slots) * 2 * inter);
  auto* down_out = alloc<std::uint16_t>(static_cast<std::size_t>(slots) * hidden);
  struct Projection {
    const char* name;
    std::int32_t n_out, k_in;
    const void* x;
    const std::int32_t* rows;
    void* out;
  };
  for (const Projection& p : {Projection{"gate_up 4096x4096", 2 * inter, hidden, x, drows, gate_up_out},
                              Projection{"down 4096x2048", hidden, inter, act, dident, down_out}}) {
    const std::size_t code_bytes = static_cast<std::size_t>(experts) * p.n_out * p.k_in / 2;
    const std::size_t scale_bytes = static_cast<std::size_t>(experts) * p.n_out * p.k_in / 32;
    auto* w = alloc<std::uint8_t>(code_bytes, 0x22);       // e2m1 1.0 pairs
    auto* w_scale = alloc<std::uint8_t>(scale_bytes, 120);  // 2^-7
    const cuda::V4Fp4GemmArgs args{.x = p.x, .row_of_slot = p.rows, .expert_offsets = doffsets, .w = w,
                                   .w_scale = w_scale, .out = p.out, .out_dt = kBf16, .num_experts = experts,
                                   .n_out = p.n_out, .k_in = p.k_in};
    const double s = time_median(5, [&] { cuda::launch_v4_fp4_gemm(args, nullptr); });
    const double bytes = static_cast<double>(hit) * (code_bytes + scale_bytes) / experts;
    const double flops = 2.0 * slots * p.n_out * p.k_in;
    row(std::string("FP4 experts ") + p.name + ", " + std::to_string(rows) + " rows top-6 (" + std::to_string(hit) +
            " experts hit)",
        s, tbs(bytes, s) + ", " + tflops(flops, s), hbm_share(bytes, s) + " (weights of the experts hit)");
    cudaFree(w);
    cudaFree(w_scale);
  }
  for (void* p : {static_cast<void*>(doffsets), static_cast<void*>(drows), static_cast<void*>(x), static_cast<void*>(act),
                  static_cast<void*>(dident), static_cast<void*>(gate_up_out), static_cast<void*>(down_out)})
    cudaFree(p);
}

}  // namespace

void bench_deepseek_v4_kernels() {
  std::printf("| DeepSeek-V4 kernel (V4-Flash width) | time | rate | share |\n| --- | --- | --- | --- |\n");
  bench_attention(64, 512, 64, "sparse attention decode, 64 seqs x (128 window + 512 top-k) at 128k", false);
  bench_attention(64, 1024, 64, "sparse attention decode, 64 seqs x (128 window + 1024 HCA entries) at 128k", false);
  bench_attention(1, 512, 1, "sparse attention decode, 1 seq x (128 + 512)", false);
  bench_attention(4096, 512, 1, "sparse attention prefill, 4096 rows x (128 + 512) at 128k", true);
  bench_attention(8192, 1024, 1, "sparse attention prefill (HCA), 8192 rows x (128 + 1024) at 128k", true);
  bench_indexer(64, 64, 32768, "indexer decode, 64 seqs at 128k (32768 entries)");
  bench_indexer(1024, 1, 32768, "indexer prefill chunk, 1024 rows of one 128k seq");
  // Where the tf32 head sum starts to win (1,024 rows: 4% slower; 8,192: 6% faster; S26-5).
  bench_indexer(2048, 1, 32768, "indexer prefill chunk, 2048 rows of one 128k seq");
  bench_indexer(4096, 1, 32768, "indexer prefill chunk, 4096 rows of one 128k seq");
  bench_indexer(8192, 1, 32768, "indexer prefill chunk, 8192 rows of one 128k seq");
  bench_top_k_recent_heavy(2048, 32768);
  bench_compress(1, 131072, 0, 512, 1024, 4, "CSA compressor, 32768 entries (a 128k prefill)");
  bench_compress(1, 131072, 0, 512, 512, 128, "HCA compressor, 1024 entries (a 128k prefill)");
  bench_compress(1, 131072, 0, 128, 256, 4, "indexer compressor, 32768 entries (a 128k prefill)");
  bench_compress(64, 1, 131071, 512, 1024, 4, "CSA compressor, 64 entries (a decode step of 64)");
  bench_mhc(64);
  bench_mhc(8192);
  bench_route_and_swiglu(64);
  bench_route_and_swiglu(8192);
  bench_fp4_experts(1);
  bench_fp4_experts(64);
  bench_fp4_experts(4096);
}

}  // namespace sluice
