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
//   - without top-p the draw walks the kept tokens in id order: warp chunks,
//     double prefix sums.
// The sums run in another order than the reference's sequential double sums
// (and the fixed point drops weights below 2^-45), so a draw within ~1e-8
// relative of a CDF boundary may pick the neighbour; and a device expf that
// differs from the host's by an ulp can flip a min-p test at its threshold.
#include <cuda_bf16.h>

#include <climits>
#include <cstdlib>
#include <string_view>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/kernels.h"

namespace sluice::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 256;
constexpr int kLevels = 4;  // 8 key bits a pass
constexpr unsigned kFullMask = 0xffffffffu;
// Weights are <= 1 (the top token's is 1), so a sum of up to 2^20 of them in
// units of 2^-44 fits in 64 bits.
using Fixed = unsigned long long;
constexpr float kFixedScale = 17592186044416.0f;  // 2^44
constexpr double kFixedScaleD = 17592186044416.0;
constexpr std::int64_t kMaxVocab = 1 << 20;

// Monotone in the float order, with -0 and +0 equal (the reference compares
// floats, so they tie and fall back to the id).
__device__ __forceinline__ std::uint32_t order_key(float v) {
  std::uint32_t u = __float_as_uint(v);
  if ((u << 1) == 0) u = 0;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

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
  unsigned int count[kBins];
  Fixed sum[kBins];  // the measure: a count, or weights in 2^-44 units
  int min_id[kBins];
  int max_id[kBins];
  int chosen_bin;
  Fixed chosen_before;
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

// Walking ids upward over the tokens `item` marks as members, the first id at
// which the running sum of their values exceeds the goal (goal = target, or
// target * the members' total when `of_total`); the last member if the sums
// never do (the reference's kept.back()). Each warp owns a contiguous id
// range; one warp walks its range in 32-id tiles.
template <class Item>
__device__ int first_crossing_in_id_order(int vocab, Item item, double target, bool of_total, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int chunk = ((vocab + kWarps - 1) / kWarps + 31) / 32 * 32;
  const int begin = min(warp * chunk, vocab), end = min(begin + chunk, vocab);
  double sum = 0.0;
  int last = -1;
  for (int t = begin + lane; t < end; t += 32) {
    float v = 0.0f;
    if (item(t, v)) {
      sum += v;
      last = t;
    }
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
    sh.crossing_result = last_member;
  }
  __syncthreads();
  if (warp == sh.crossing_warp) {
    double carry = sh.crossing_base;
    const double goal = sh.crossing_goal;
    int result = -1;
    for (int tile = begin; tile < end; tile += 32) {
      const int t = tile + lane;
      float v = 0.0f;
      if (t >= end || !item(t, v)) v = 0.0f;
      double x = v;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const double y = __shfl_up_sync(kFullMask, x, o);
        if (lane >= o) x += y;
      }
      const unsigned hits = __ballot_sync(kFullMask, carry + x > goal);
      if (hits != 0) {
        result = tile + __ffs(hits) - 1;
        break;
      }
      carry += __shfl_sync(kFullMask, x, 31);
    }
    if (result < 0) result = sh.warp_int[warp];  // rounding: the range's last member
    if (lane == 0) sh.crossing_result = result;
  }
  __syncthreads();
  return sh.crossing_result;
}

__device__ __forceinline__ void flush_run(SelectShared& s, int bin, unsigned count, Fixed sum, int min_id,
                                          int max_id, bool with_ids) {
  if (bin < 0) return;
  atomicAdd(&s.count[bin], count);
  atomicAdd(&s.sum[bin], sum);
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
  Fixed lane_total = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) lane_total += s.sum[kBins - 1 - 8 * lane - i];
  Fixed inclusive = lane_total;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const Fixed y = __shfl_up_sync(kFullMask, inclusive, o);
    if (lane >= o) inclusive += y;
  }
  Fixed acc = before + inclusive - lane_total;
  int found = -1, last = -1;
  Fixed found_before = 0, last_before = 0;
  for (int i = 0; i < 8; ++i) {
    const int b = kBins - 1 - 8 * lane - i;
    if (s.count[b] == 0) continue;
    const Fixed through = acc + s.sum[b];
    if (reached && found < 0 && meets(through, target, strict)) {
      found = b;
      found_before = acc;
    }
    last = b;
    last_before = acc;
    acc = through;
  }
  const unsigned found_lanes = __ballot_sync(kFullMask, found >= 0);
  if (found_lanes != 0) {
    if (lane == __ffs(found_lanes) - 1) {
      s.chosen_bin = found;
      s.chosen_before = found_before;
      s.reached = 1;
    }
    return;
  }
  const unsigned last_lanes = __ballot_sync(kFullMask, last >= 0);
  if (last_lanes == 0) {
    if (lane == 0) {
      s.chosen_bin = 0;
      s.chosen_before = before;
      s.reached = 0;
    }
    return;
  }
  if (lane == 31 - __clz(last_lanes)) {
    s.chosen_bin = last;
    s.chosen_before = last_before;
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
    for (int b = threadIdx.x; b < kBins; b += kThreads) {
      s.count[b] = 0;
      s.sum[b] = 0;
      s.min_id[b] = INT_MAX;
      s.max_id[b] = -1;
    }
    __syncthreads();
    // Runs of one bin are added once: where the keys crowd into a few bins
    // (the first level), runs are long and the atomics few.
    int run_bin = -1, run_min = 0, run_max = 0;
    unsigned run_count = 0;
    Fixed run_sum = 0;
    for (int t = threadIdx.x; t < row.vocab; t += kThreads) {
      const float l = row.logits[t];
      const std::uint32_t k = order_key(l);
      if ((k & prefix_mask) != prefix) continue;
      float w = 0.0f;
      if (!row.kept(set, t, l, k, kWantWeight, w)) continue;
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
    }
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
  const unsigned num_ties = s.count[bin];
  const Fixed tie_sum = s.sum[bin];
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
        row.vocab,
        [&](int t, float& v) {
          const float l = row.logits[t];
          const std::uint32_t k = order_key(l);
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
    for (int t = threadIdx.x; t < row.vocab; t += kThreads) {
      const float l = row.logits[t];
      if (set.top_k.keeps(order_key(l), t)) total += row.weight(l);
    }
    total = block_sum_double(total, sh);
    const double target_mass = static_cast<double>(p.top_p) * total;
    const Position prefix = select_position<Measure::weight>(row, set, target_mass * kFixedScaleD, false, sh);
    if (prefix.reached) set.top_p = Cut{prefix.key, prefix.id};
    const double target = p.uniform * static_cast<double>(prefix.through);
    return select_position<Measure::weight>(row, set, target, true, sh).id;
  }
  return first_crossing_in_id_order(
      row.vocab,
      [&](int t, float& v) {
        const float l = row.logits[t];
        return row.kept(set, t, l, order_key(l), true, v);
      },
      p.uniform, true, sh);
}

__device__ __forceinline__ bool mask_allows(const std::uint64_t* words, int num_words, int t) {
  return (t >> 6) < num_words && ((words[t >> 6] >> (t & 63)) & 1u) != 0;
}

__global__ void __launch_bounds__(kThreads, 1) sample_rows_kernel(const SampleRowsArgs args) {
  __shared__ Shared sh;
  const DeviceSampleRow p = args.rows[blockIdx.x];
  const int vocab = static_cast<int>(args.vocab);
  float* work = args.workspace + static_cast<std::int64_t>(blockIdx.x) * vocab;
  const std::int64_t base = static_cast<std::int64_t>(p.logits_row) * vocab;
  const std::uint64_t* mask = p.mask_word_begin >= 0 ? args.mask_words + p.mask_word_begin : nullptr;
  for (int t = threadIdx.x; t < vocab; t += kThreads) {
    float l = load_f(args.logits, args.dt, base + t);
    if (mask != nullptr && !mask_allows(mask, p.num_mask_words, t)) l = -INFINITY;
    work[t] = l;
  }
  __syncthreads();
  // Penalties after the mask: a masked token is -inf and stays -inf under
  // them, as when the reference masks after penalising.
  for (int e = threadIdx.x; e < p.num_penalties; e += kThreads) {
    const DevicePenaltyEntry entry = args.penalties[p.penalty_begin + e];
    float l = work[entry.token];
    if (p.repetition_penalty != 1.0f)
      l = l > 0.0f ? __fdiv_rn(l, p.repetition_penalty) : __fmul_rn(l, p.repetition_penalty);
    if (entry.num_generated > 0)
      l = __fsub_rn(l, __fadd_rn(__fmul_rn(p.frequency_penalty, static_cast<float>(entry.num_generated)),
                                 p.presence_penalty));
    work[entry.token] = l;
  }
  __syncthreads();
  float best = -INFINITY;
  int best_id = INT_MAX;
  for (int t = threadIdx.x; t < vocab; t += kThreads) better(best, best_id, work[t], t);
  block_argmax(best, best_id, sh);
  const float max_logit = best;
  // Logprobs are of the temperature-1 distribution, as the reference reports them.
  double unit_sum = 0.0;
  for (int t = threadIdx.x; t < vocab; t += kThreads) unit_sum += expf(__fsub_rn(work[t], max_logit));
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
  for (int t = threadIdx.x; t < vocab; t += kThreads) {
    if (!cut.keeps(order_key(work[t]), t)) continue;
    const int i = atomicAdd(&sh.num_top, 1);
    if (i < kMaxDeviceTopLogprobs) sh.top_ids[i] = t;
  }
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

bool g_device_sampling = [] {
  const char* env = std::getenv("SLUICE_DEVICE_SAMPLING");
  return env == nullptr || std::string_view(env) != "0";
}();

}  // namespace

bool device_sampling_enabled() { return g_device_sampling; }
void set_device_sampling_enabled(bool enabled) { g_device_sampling = enabled; }

void launch_sample_rows(const SampleRowsArgs& args, cudaStream_t stream) {
  if (args.num_rows == 0) return;
  SLUICE_CHECK_LE(args.vocab, kMaxVocab);
  // A plain launch: it follows a graph launch or a copy, not a kernel.
  sample_rows_kernel<<<args.num_rows, kThreads, 0, stream>>>(args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
