// Sampling on the device for every row the greedy kernel (sampling.cu) does
// not decide: penalties, the allowed-token mask, temperature, top-k, top-p,
// min-p, the seeded draw and top logprobs. One 1024-thread block a row; the
// host reads back a DeviceSampleResult (172 bytes) instead of the row's f32
// logits (512 KB at a 128k vocabulary).
//
// It chooses the token the reference sampler (backend/cpu/sampler.cpp) does,
// step for step:
//   - the row after penalties and mask is written once as f32 (workspace) and
//     every later pass reads it; penalties use the reference's f32 operations
//     (no FMA contraction);
//   - weights are exp((l - max) * (1/T)) in f32;
//   - top-k, top-p's prefix and, under top-p, the draw are positions in the
//     order (logit desc, id asc). Each is found by a radix select on the
//     logit's order-preserving key, 8 bits a pass, where a bin holds the count
//     and the 2^-44 fixed-point weight sum of its kept tokens: integer sums,
//     exact and independent of the atomics' order, so a bin chosen at one
//     level still holds the position at the next. Ties at the final key (one
//     logit, one weight) are cut by id;
//   - without top-p the draw walks the kept tokens in id order (as the
//     reference does; under top-p it walks the prefix in logit-desc order):
//     warp-chunk sums, then a block-wide scan of the chunk that crosses.
// A device expf may differ from the host's by an ulp, and the sums run in
// another order than the reference's sequential double sums (the fixed point
// also drops weights below 2^-45), so a draw within ~1e-7 relative of a CDF
// boundary may pick the neighbour, and a weight within an ulp of min-p may
// fall on the other side of it. tests/cuda/sampling_test.cpp asserts equal
// tokens wherever the reference's decisions are 1e-5 away from a boundary.
#include <cuda_bf16.h>

#include <climits>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/kernels.h"

namespace sluice::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 256;
// Lanes add into one of kCopies histograms (lane % kCopies), each padded by a
// word so a bin's copies sit in different banks: logits crowd into a few
// sign/exponent bins at the first level, and same-address atomics of one warp
// serialise (run 1: ~70 us a pass over a 128k row with one copy).
constexpr int kCopies = 8;
constexpr int kCopyStride = kBins + 1;
constexpr int kLevels = 4;  // 8 key bits a pass
constexpr unsigned kFullMask = 0xffffffffu;
// Weights are <= 1 (the top token's is 1), so a sum of up to 2^20 of them in
// units of 2^-44 fits in 64 bits.
using Fixed = unsigned long long;
constexpr float kFixedScale = 17592186044416.0f;  // 2^44
constexpr double kFixedScaleD = 17592186044416.0;
constexpr std::int64_t kMaxVocab = 1 << 20;

__device__ __forceinline__ Fixed to_fixed(float w) { return __float2ull_rn(w * kFixedScale); }

// Keeps the tokens at or ahead of (key, id) in the order (key desc, id asc);
// the default keeps every token.
struct Cut {
  std::uint32_t key = 0;
  int id = INT_MAX;
  __device__ bool keeps(std::uint32_t k, int t) const { return k > key || (k == key && t <= id); }
};

// The set a selection or draw runs over: top-k's and top-p's cuts and min-p.
struct Kept {
  Cut top_k, top_p;
  float min_p = 0.0f;
};

struct Row {
  const float* logits;  // [vocab] after penalties and mask
  int vocab;
  float max_logit;
  float inverse_temperature;
  __device__ float weight(float l) const {
    return expf(__fmul_rn(__fsub_rn(l, max_logit), inverse_temperature));
  }
  // Whether token t is kept; its weight in `w` when min-p or the caller needs it.
  __device__ bool kept(const Kept& set, int t, float l, std::uint32_t k, bool want_weight, float& w) const {
    if (!set.top_k.keeps(k, t) || !set.top_p.keeps(k, t)) return false;
    if (want_weight || set.min_p > 0.0f) w = weight(l);
    return !(set.min_p > 0.0f && w < set.min_p);
  }
};

struct SelectShared {
  unsigned int count[kCopies * kCopyStride];
  Fixed sum[kCopies * kCopyStride];  // the measure: a count, or weights in 2^-44 units
  int min_id[kBins];                 // last level only
  int max_id[kBins];
  int chosen_bin;
  Fixed chosen_before;
  unsigned int chosen_count;  // over the copies
  Fixed chosen_sum;
  int reached;
};

struct Shared {
  SelectShared select;
  double warp_double[kWarps];
  float warp_float[kWarps];
  int warp_int[kWarps];
  int crossing_warp;
  double crossing_base;
  double crossing_goal;
  int crossing_result;
  int crossing_first;
  int num_top;
  int top_ids[kMaxDeviceTopLogprobs];
};

__device__ __forceinline__ double warp_sum_double(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ __forceinline__ int warp_max_int(int v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Sum over the block, added in warp order so every thread gets the same bits.
__device__ double block_sum_double(double v, Shared& sh) {
  v = warp_sum_double(v);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) sh.warp_double[threadIdx.x >> 5] = v;
  __syncthreads();
  double total = 0.0;
  for (int w = 0; w < kWarps; ++w) total += sh.warp_double[w];
  return total;
}

__device__ __forceinline__ void better(float& v, int& i, float v_o, int i_o) {
  if (v_o > v || (v_o == v && i_o < i)) {
    v = v_o;
    i = i_o;
  }
}

// The highest logit, lowest id on ties (as std::max_element).
__device__ void block_argmax(float& best, int& best_id, Shared& sh) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    better(best, best_id, __shfl_xor_sync(kFullMask, best, o), __shfl_xor_sync(kFullMask, best_id, o));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) {
    sh.warp_float[threadIdx.x >> 5] = best;
    sh.warp_int[threadIdx.x >> 5] = best_id;
  }
  __syncthreads();
  for (int w = 0; w < kWarps; ++w) better(best, best_id, sh.warp_float[w], sh.warp_int[w]);
}

// Calls f(t, logit) for t in [begin, end) split over `num_ranks` ranks (this
// one is `rank`), t increasing within a rank; begin a multiple of 4 and the
// row 16-byte aligned. 16-byte loads, four in flight: one 4-byte load per L2
// round trip made a pass over a 128k row take ~30 us (run 1).
template <class F>
__device__ __forceinline__ void for_each_in(const float* row, int begin, int end, int rank, int num_ranks,
                                            F&& f) {
  const float4* v = reinterpret_cast<const float4*>(row + begin);
  const int num_vec = (end - begin) >> 2;
  int i = rank;
  for (; i + 3 * num_ranks < num_vec; i += 4 * num_ranks) {
    float4 x[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) x[u] = v[i + u * num_ranks];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int t = begin + 4 * (i + u * num_ranks);
      f(t, x[u].x);
      f(t + 1, x[u].y);
      f(t + 2, x[u].z);
      f(t + 3, x[u].w);
    }
  }
  for (; i < num_vec; i += num_ranks) {
    const float4 x = v[i];
    const int t = begin + 4 * i;
    f(t, x.x);
    f(t + 1, x.y);
    f(t + 2, x.z);
    f(t + 3, x.w);
  }
  for (int t = begin + 4 * num_vec + rank; t < end; t += num_ranks) f(t, row[t]);
}

// Every token of the row over the block.
template <class F>
__device__ __forceinline__ void for_each_token(const float* row, int vocab, F&& f) {
  for_each_in(row, 0, vocab, threadIdx.x, kThreads, f);
}

// Walking ids upward over the tokens `item(t, logit, value)` marks as members,
// the first id at which the running sum of their values exceeds the goal
// (goal = target, or target * the members' total when `of_total`); the last
// member if the sums never do (the reference's kept.back()). Each warp sums a
// contiguous id range; then the whole block scans the range that crosses, 4
// ids a thread.
template <class Item>
__device__ int first_crossing_in_id_order(const Row& row, Item item, double target, bool of_total, Shared& sh) {
  const int vocab = row.vocab;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int chunk = ((vocab + kWarps - 1) / kWarps + 127) / 128 * 128;
  double sum = 0.0;
  int last = -1;
  {
    const int begin = min(warp * chunk, vocab), end = min(begin + chunk, vocab);
    for_each_in(row.logits, begin, end, lane, 32, [&](int t, float l) {
      float v = 0.0f;
      if (item(t, l, v)) {
        sum += v;
        last = t;
      }
    });
  }
  sum = warp_sum_double(sum);
  last = warp_max_int(last);
  __syncthreads();
  if (lane == 0) {
    sh.warp_double[warp] = sum;
    sh.warp_int[warp] = last;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int w = 0; w < kWarps; ++w) total += sh.warp_double[w];
    const double goal = of_total ? target * total : target;
    double acc = 0.0;
    int chosen = -1, last_member = -1;
    for (int w = 0; w < kWarps; ++w) {
      if (sh.warp_int[w] >= 0) last_member = sh.warp_int[w];
      if (chosen < 0 && acc + sh.warp_double[w] > goal) {
        chosen = w;
        sh.crossing_base = acc;
      }
      acc += sh.warp_double[w];
    }
    sh.crossing_warp = chosen;
    sh.crossing_goal = goal;
    // Rounding (the range's sum crossed, its walk does not): the range's last member.
    sh.crossing_result = chosen >= 0 ? sh.warp_int[chosen] : last_member;
    sh.crossing_first = INT_MAX;
  }
  __syncthreads();
  const int chosen = sh.crossing_warp;
  if (chosen < 0) return sh.crossing_result;
  const int begin = min(chosen * chunk, vocab), end = min(begin + chunk, vocab);
  const double goal = sh.crossing_goal;
  double carry = sh.crossing_base;
  for (int tile = begin; tile < end; tile += 4 * kThreads) {
    const int t0 = tile + 4 * threadIdx.x;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    bool member[4] = {false, false, false, false};
    if (t0 + 3 < end) {
      const float4 x = *reinterpret_cast<const float4*>(row.logits + t0);
      member[0] = item(t0, x.x, v[0]);
      member[1] = item(t0 + 1, x.y, v[1]);
      member[2] = item(t0 + 2, x.z, v[2]);
      member[3] = item(t0 + 3, x.w, v[3]);
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k)
        if (t0 + k < end) member[k] = item(t0 + k, row.logits[t0 + k], v[k]);
    }
    double own = 0.0;
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (member[k]) own += v[k];
    double inclusive = own;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const double y = __shfl_up_sync(kFullMask, inclusive, o);
      if (lane >= o) inclusive += y;
    }
    double exclusive = __shfl_up_sync(kFullMask, inclusive, 1);
    if (lane == 0) exclusive = 0.0;
    __syncthreads();
    if (lane == 31) sh.warp_double[warp] = inclusive;
    __syncthreads();
    double warp_base = 0.0, tile_total = 0.0;
    for (int w = 0; w < kWarps; ++w) {
      if (w < warp) warp_base += sh.warp_double[w];
      tile_total += sh.warp_double[w];
    }
    double c = carry + warp_base + exclusive;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (!member[k]) continue;
      c += v[k];
      if (c > goal) {
        atomicMin(&sh.crossing_first, t0 + k);
        break;
      }
    }
    __syncthreads();
    if (sh.crossing_first != INT_MAX) return sh.crossing_first;
    carry += tile_total;
  }
  return sh.crossing_result;
}

__device__ __forceinline__ void flush_run(SelectShared& s, int bin, unsigned count, Fixed sum, int min_id,
                                          int max_id, bool with_ids) {
  if (bin < 0) return;
  const int slot = (threadIdx.x % kCopies) * kCopyStride + bin;
  atomicAdd(&s.count[slot], count);
  atomicAdd(&s.sum[slot], sum);
  if (with_ids) {
    atomicMin(&s.min_id[bin], min_id);
    atomicMax(&s.max_id[bin], max_id);
  }
}

__device__ __forceinline__ bool meets(Fixed through, double target, bool strict) {
  const double acc = static_cast<double>(through);
  return strict ? acc > target : acc >= target;
}

// Warp 0: the first bin, keys descending, whose running measure meets the
// target; else (or once a level missed) the last non-empty bin.
__device__ void choose_bin(SelectShared& s, Fixed before, double target, bool strict, bool reached) {
  const int lane = threadIdx.x;
  unsigned bin_count[8];
  Fixed bin_sum[8];
  Fixed lane_total = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int b = kBins - 1 - 8 * lane - i;
    bin_count[i] = 0;
    bin_sum[i] = 0;
#pragma unroll
    for (int c = 0; c < kCopies; ++c) {
      bin_count[i] += s.count[c * kCopyStride + b];
      bin_sum[i] += s.sum[c * kCopyStride + b];
    }
    lane_total += bin_sum[i];
  }
  Fixed inclusive = lane_total;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const Fixed y = __shfl_up_sync(kFullMask, inclusive, o);
    if (lane >= o) inclusive += y;
  }
  Fixed acc = before + inclusive - lane_total;
  int found = -1, last = -1;
  Fixed found_before = 0, last_before = 0;
  unsigned found_count = 0, last_count = 0;
  Fixed found_sum = 0, last_sum = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int b = kBins - 1 - 8 * lane - i;
    if (bin_count[i] == 0) continue;
    const Fixed through = acc + bin_sum[i];
    if (reached && found < 0 && meets(through, target, strict)) {
      found = b;
      found_before = acc;
      found_count = bin_count[i];
      found_sum = bin_sum[i];
    }
    last = b;
    last_before = acc;
    last_count = bin_count[i];
    last_sum = bin_sum[i];
    acc = through;
  }
  const unsigned found_lanes = __ballot_sync(kFullMask, found >= 0);
  if (found_lanes != 0) {
    if (lane == __ffs(found_lanes) - 1) {
      s.chosen_bin = found;
      s.chosen_before = found_before;
      s.chosen_count = found_count;
      s.chosen_sum = found_sum;
      s.reached = 1;
    }
    return;
  }
  const unsigned last_lanes = __ballot_sync(kFullMask, last >= 0);
  if (last_lanes == 0) {
    if (lane == 0) {
      s.chosen_bin = 0;
      s.chosen_before = before;
      s.chosen_count = 0;
      s.chosen_sum = 0;
      s.reached = 0;
    }
    return;
  }
  if (lane == 31 - __clz(last_lanes)) {
    s.chosen_bin = last;
    s.chosen_before = last_before;
    s.chosen_count = last_count;
    s.chosen_sum = last_sum;
    s.reached = 0;
  }
}

enum class Measure { count, weight };

// A position in the kept tokens' order (logit desc, id asc).
struct Position {
  std::uint32_t key;
  int id;
  Fixed through;  // measure of the kept tokens up to and including this one
  bool reached;   // false: the target was past the end, and this is the last position
};

// The first position at which the running measure (count, or weight in 2^-44
// units) of the kept tokens meets the target: >= target, or > with `strict`.
template <Measure kMeasure>
__device__ Position select_position(const Row& row, const Kept& set, double target, bool strict, Shared& sh) {
  SelectShared& s = sh.select;
  constexpr bool kWantWeight = kMeasure == Measure::weight;
  std::uint32_t prefix = 0, prefix_mask = 0;
  Fixed before = 0;
  bool reached = true;
  int bin = 0;
  for (int level = 0; level < kLevels; ++level) {
    const int shift = 24 - 8 * level;
    const bool with_ids = level == kLevels - 1;
    for (int i = threadIdx.x; i < kCopies * kCopyStride; i += kThreads) {
      s.count[i] = 0;
      s.sum[i] = 0;
    }
    for (int b = threadIdx.x; b < kBins; b += kThreads) {
      s.min_id[b] = INT_MAX;
      s.max_id[b] = -1;
    }
    __syncthreads();
    // Runs of one bin are added once: where the keys crowd into a few bins
    // (the first level), runs are long and the atomics few.
    int run_bin = -1, run_min = 0, run_max = 0;
    unsigned run_count = 0;
    Fixed run_sum = 0;
    for_each_token(row.logits, row.vocab, [&](int t, float l) {
      const std::uint32_t k = float_order_key(l);
      if ((k & prefix_mask) != prefix) return;
      float w = 0.0f;
      if (!row.kept(set, t, l, k, kWantWeight, w)) return;
      const int b = static_cast<int>((k >> shift) & 0xffu);
      if (b != run_bin) {
        flush_run(s, run_bin, run_count, run_sum, run_min, run_max, with_ids);
        run_bin = b;
        run_count = 0;
        run_sum = 0;
        run_min = t;
      }
      ++run_count;
      run_sum += kWantWeight ? to_fixed(w) : Fixed{1};
      run_max = t;
    });
    flush_run(s, run_bin, run_count, run_sum, run_min, run_max, with_ids);
    __syncthreads();
    if (threadIdx.x < 32) choose_bin(s, before, target, strict, reached);
    __syncthreads();
    bin = s.chosen_bin;
    before = s.chosen_before;
    reached = s.reached != 0;
    prefix |= static_cast<std::uint32_t>(bin) << shift;
    prefix_mask |= 0xffu << shift;
    if (level < kLevels - 1) __syncthreads();  // the next level clears the bins
  }
  // Every kept token with the final key has the same logit, so the same weight.
  const unsigned num_ties = s.chosen_count;
  const Fixed tie_sum = s.chosen_sum;
  const int min_id = s.min_id[bin], max_id = s.max_id[bin];
  __syncthreads();
  if (num_ties == 0) return {prefix, 0, before, false};
  const Fixed unit = tie_sum / num_ties;
  unsigned rank = num_ties;  // 1-based, in id order among the ties
  if (reached && unit > 0) {
    const double guess = floor((target - static_cast<double>(before)) / static_cast<double>(unit));
    rank = static_cast<unsigned>(fmin(fmax(guess, 1.0), static_cast<double>(num_ties)));
    while (rank > 1 && meets(before + Fixed{rank - 1} * unit, target, strict)) --rank;
    while (rank < num_ties && !meets(before + Fixed{rank} * unit, target, strict)) ++rank;
  }
  int id = rank == 1 ? min_id : max_id;
  if (rank != 1 && rank != num_ties) {
    const std::uint32_t key = prefix;
    id = first_crossing_in_id_order(
        row,
        [&](int t, float l, float& v) {
          const std::uint32_t k = float_order_key(l);
          float w = 0.0f;
          if (k != key || !row.kept(set, t, l, k, false, w)) return false;
          v = 1.0f;
          return true;
        },
        static_cast<double>(rank) - 0.5, false, sh);
  }
  return {prefix, id, before + Fixed{rank} * unit, reached};
}

// The reference's draw: top-k (a selection), top-p's mass as a share of the
// top-k mass, min-p, top-p (the shortest logit-desc prefix reaching it), then
// the cumulative walk against uniform * mass, in logit-desc order under top-p
// and in id order without it.
__device__ int draw(const Row& row, const DeviceSampleRow& p, Shared& sh) {
  Kept set;
  if (p.top_k > 0 && p.top_k < row.vocab) {
    const Position k = select_position<Measure::count>(row, Kept{}, static_cast<double>(p.top_k), false, sh);
    set.top_k = Cut{k.key, k.id};
  }
  set.min_p = p.min_p;
  if (p.top_p < 1.0f) {
    double total = 0.0;
    for_each_token(row.logits, row.vocab, [&](int t, float l) {
      if (set.top_k.keeps(float_order_key(l), t)) total += row.weight(l);
    });
    total = block_sum_double(total, sh);
    const double target_mass = static_cast<double>(p.top_p) * total;
    const Position prefix = select_position<Measure::weight>(row, set, target_mass * kFixedScaleD, false, sh);
    if (prefix.reached) set.top_p = Cut{prefix.key, prefix.id};
    const double target = p.uniform * static_cast<double>(prefix.through);
    return select_position<Measure::weight>(row, set, target, true, sh).id;
  }
  return first_crossing_in_id_order(
      row, [&](int t, float l, float& v) { return row.kept(set, t, l, float_order_key(l), true, v); },
      p.uniform, true, sh);
}

__device__ __forceinline__ bool mask_allows(const std::uint64_t* words, int num_words, int t) {
  return (t >> 6) < num_words && ((words[t >> 6] >> (t & 63)) & 1u) != 0;
}

__global__ void __launch_bounds__(kThreads, 1) sample_rows_kernel(const SampleRowsArgs args) {
  __shared__ Shared sh;
  const DeviceSampleRow p = args.rows[blockIdx.x];
  const int vocab = static_cast<int>(args.vocab);
  float* work = args.workspace + static_cast<std::int64_t>(blockIdx.x) * sample_workspace_row_floats(vocab);
  const std::int64_t base = static_cast<std::int64_t>(p.logits_row) * vocab;
  const std::uint64_t* mask = p.mask_word_begin >= 0 ? args.mask_words + p.mask_word_begin : nullptr;
  if (args.dt == Dt::bf16 && vocab % 8 == 0 && reinterpret_cast<std::uintptr_t>(args.logits) % 16 == 0) {
    const uint4* in = static_cast<const uint4*>(args.logits) + base / 8;
    for (int i = threadIdx.x; i < vocab / 8; i += kThreads) {
      const uint4 raw = in[i];
      const __nv_bfloat16* h = reinterpret_cast<const __nv_bfloat16*>(&raw);
      float l[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        l[k] = __bfloat162float(h[k]);
        if (mask != nullptr && !mask_allows(mask, p.num_mask_words, 8 * i + k)) l[k] = -INFINITY;
      }
      reinterpret_cast<float4*>(work)[2 * i] = make_float4(l[0], l[1], l[2], l[3]);
      reinterpret_cast<float4*>(work)[2 * i + 1] = make_float4(l[4], l[5], l[6], l[7]);
    }
  } else {
    for (int t = threadIdx.x; t < vocab; t += kThreads) {
      float l = load_f(args.logits, args.dt, base + t);
      if (mask != nullptr && !mask_allows(mask, p.num_mask_words, t)) l = -INFINITY;
      work[t] = l;
    }
  }
  __syncthreads();
  // The bias and penalties after the mask: a masked token is -inf and stays
  // -inf under them, as when the reference masks after penalising.
  for (int e = threadIdx.x; e < p.num_penalties; e += kThreads) {
    const DevicePenaltyEntry entry = args.penalties[p.penalty_begin + e];
    float l = __fadd_rn(work[entry.token], entry.bias);
    if (entry.in_history && p.repetition_penalty != 1.0f)
      l = l > 0.0f ? __fdiv_rn(l, p.repetition_penalty) : __fmul_rn(l, p.repetition_penalty);
    if (entry.num_generated > 0)
      l = __fsub_rn(l, __fadd_rn(__fmul_rn(p.frequency_penalty, static_cast<float>(entry.num_generated)),
                                 p.presence_penalty));
    work[entry.token] = l;
  }
  __syncthreads();
  float best = -INFINITY;
  int best_id = INT_MAX;
  for_each_token(work, vocab, [&](int t, float l) { better(best, best_id, l, t); });
  block_argmax(best, best_id, sh);
  const float max_logit = best;
  // Logprobs are of the temperature-1 distribution, as the reference reports them.
  double unit_sum = 0.0;
  for_each_token(work, vocab, [&](int t, float l) { unit_sum += expf(__fsub_rn(l, max_logit)); });
  unit_sum = block_sum_double(unit_sum, sh);
  const float log_sum = __fadd_rn(static_cast<float>(log(unit_sum)), max_logit);
  const Row row{work, vocab, max_logit, p.inverse_temperature};
  const int token = p.greedy ? best_id : draw(row, p, sh);
  DeviceSampleResult& out = args.out[blockIdx.x];
  if (threadIdx.x == 0) {
    out.token = token;
    out.logprob = __fsub_rn(work[token], log_sum);
    out.num_top_logprobs = 0;
  }
  const int num_top = min(min(p.num_top_logprobs, kMaxDeviceTopLogprobs), vocab);
  if (num_top <= 0) return;
  const Position last = select_position<Measure::count>(row, Kept{}, static_cast<double>(num_top), false, sh);
  const Cut cut{last.key, last.id};
  if (threadIdx.x == 0) sh.num_top = 0;
  __syncthreads();
  for_each_token(work, vocab, [&](int t, float l) {
    if (!cut.keeps(float_order_key(l), t)) return;
    const int i = atomicAdd(&sh.num_top, 1);
    if (i < kMaxDeviceTopLogprobs) sh.top_ids[i] = t;
  });
  __syncthreads();
  if (threadIdx.x != 0) return;
  const int n = min(sh.num_top, kMaxDeviceTopLogprobs);
  for (int i = 1; i < n; ++i) {  // insertion sort, (logit desc, id asc)
    const int id = sh.top_ids[i];
    const float l = work[id];
    int j = i - 1;
    while (j >= 0 && (work[sh.top_ids[j]] < l || (work[sh.top_ids[j]] == l && sh.top_ids[j] > id))) {
      sh.top_ids[j + 1] = sh.top_ids[j];
      --j;
    }
    sh.top_ids[j + 1] = id;
  }
  int num_finite = 0;
  for (int i = 0; i < n; ++i) {
    const float l = work[sh.top_ids[i]];
    if (!isfinite(l)) continue;
    out.top_tokens[num_finite] = sh.top_ids[i];
    out.top_logprobs[num_finite] = __fsub_rn(l, log_sum);
    ++num_finite;
  }
  out.num_top_logprobs = num_finite;
}

}  // namespace

void launch_sample_rows(const SampleRowsArgs& args, cudaStream_t stream) {
  if (args.num_rows == 0) return;
  SLUICE_CHECK_LE(args.vocab, kMaxVocab);
  // A plain launch: it follows a graph launch or a copy, not a kernel.
  sample_rows_kernel<<<args.num_rows, kThreads, 0, stream>>>(args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
