// DeepSeek-V4's paged KV layout on the device (deepseek_v4_kernels.h,
// V4Paged*): the addressing of DeepseekV4PagedState (model/deepseek_v4_paged_state.cpp)
// in device code, a copy between dense rows and their places in the blocks,
// the gather of each query row's key set for the sparse attention, and the
// indexer's key pool (f32, or its e4m3 records: quantized from f32 keys in one
// pass, or copied as stored). One block per item (or per (key, row); a warp
// per key for the records), threads over the item's values: these move bytes,
// and the records' quantization.
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/common.cuh"
#include "sluice/backend/cuda/kernels/deepseek_v4_fp8_ds_mla.cuh"
#include "sluice/backend/cuda/kernels/deepseek_v4_kernels.h"

namespace sluice::cuda {
namespace {

constexpr int kThreads = 128;
// launch_v4_gather_index_keys_e4m3: warps a block, keys a warp, keys a warp loads before it reduces.
constexpr int kIndexKeyWarps = 8;
constexpr int kIndexKeysPerWarp = 32;
constexpr int kIndexKeysInFlight = 8;

__device__ __forceinline__ int value_bytes(Dt dt) { return dt == Dt::f32 ? 4 : dt == Dt::e4m3 ? 1 : 2; }

__device__ __forceinline__ std::int64_t item_bytes(const V4PagedRegion& r) {
  return r.fp8_ds_mla ? kV4Fp8DsMlaBytes : static_cast<std::int64_t>(r.count) * value_bytes(r.dt);
}

// Value c of a latent or entry stored as `dt` values, or as an fp8_ds_mla record.
__device__ __forceinline__ float load_latent(const void* item, Dt dt, bool fp8_ds_mla, int c) {
  return fp8_ds_mla ? fp8_ds_mla_value(item, c) : load_f(item, dt, c);
}

// The values (r.dt) of `index` (a position, or an entry index) in its block,
// as DeepseekV4PagedState::{window_latent, entry} place them.
__device__ __forceinline__ void* paged_item(const V4PagedBlocks& b, const V4BlockTables& t, int table,
                                            const V4PagedRegion& r, std::int64_t index) {
  std::int64_t position = index, slot = 0;
  switch (r.site) {
    case V4PagedSite::window:
      slot = position % r.slots;
      break;
    case V4PagedSite::entry:
      position = index * r.rate;
      slot = position % b.block_size / r.rate;
      break;
  }
  const std::int64_t bytes = item_bytes(r);
  const std::int64_t offset = r.offset * 4 + slot * bytes;
  const std::int64_t block_index = position / b.block_size;
  if (position < 0 || block_index >= t.table_len[table] || offset + bytes > b.floats_per_block * 4) __trap();
  const std::int32_t block = t.block_ids[t.table_begin[table] + block_index];
  if (block < 0 || block >= b.num_blocks) __trap();
  return reinterpret_cast<char*>(b.data + static_cast<std::int64_t>(block) * b.floats_per_block) + offset;
}

__global__ void __launch_bounds__(kThreads) v4_paged_copy_kernel(V4PagedCopyArgs a) {
  const int item = blockIdx.x;
  void* paged = paged_item(a.blocks, a.tables, item, a.region, a.index[item]);
  const std::int64_t row = a.dense_row != nullptr ? a.dense_row[item] : item;
  if (a.region.dt == Dt::e4m3 || a.region.fp8_ds_mla) {  // codes and records move as they are (dense too)
    const std::int64_t bytes = item_bytes(a.region);
    auto* stored = static_cast<std::uint8_t*>(paged);
    auto* dense = static_cast<std::uint8_t*>(a.dense) + row * bytes;
    for (std::int64_t c = threadIdx.x; c < bytes; c += kThreads) {
      if (a.to_blocks) stored[c] = dense[c];
      else dense[c] = stored[c];
    }
    return;
  }
  const std::int64_t base = row * a.region.count;
  for (int c = threadIdx.x; c < a.region.count; c += kThreads) {
    if (a.to_blocks)
      store_f(paged, a.region.dt, c, load_f(a.dense, a.dense_dt, base + c));
    else
      store_f(a.dense, a.dense_dt, base + c, load_f(paged, a.region.dt, c));
  }
}

// The last sequence whose range begins at or before `key` (a few hundred at most).
__device__ __forceinline__ int sequence_of_key(const V4IndexKeysArgs& a, int key) {
  int lo = 0, hi = a.num_sequences - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (a.sequence_key_begin[mid] <= key) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

__global__ void __launch_bounds__(kThreads) v4_gather_index_keys_kernel(V4IndexKeysArgs a) {
  const int key = blockIdx.x;
  const int lo = sequence_of_key(a, key);
  const auto* src = static_cast<const float*>(paged_item(a.blocks, a.tables, lo, a.region, key - a.sequence_key_begin[lo]));
  for (int c = threadIdx.x; c < a.region.count; c += kThreads)
    a.keys[static_cast<std::int64_t>(key) * a.region.count + c] = src[c];
}

// A warp a run of 32 keys. A key's address is a chain of dependent loads
// (its sequence's range, block table, block id), so each lane resolves one
// key's address, all 32 at once, and the warp then streams the keys 8 at a
// time with every load in flight before the first reduction (one key a warp,
// each waiting on its own chain, ran at 0.6 TB/s). A key is 32 lanes x 4
// floats: its amax is one warp reduction and each lane stores 4 codes as one
// word. The scale and codes are launch_v4_quantize_e4m3_rows' arithmetic,
// operation for operation, so the records are bit-equal to gather + quantize.
__global__ void __launch_bounds__(kIndexKeyWarps * 32) v4_gather_index_keys_e4m3_kernel(V4IndexKeysArgs a) {
  const int lane = threadIdx.x & 31;
  const int first = (blockIdx.x * kIndexKeyWarps + (threadIdx.x >> 5)) * kIndexKeysPerWarp;
  if (first >= a.num_keys) return;
  const int count = min(kIndexKeysPerWarp, a.num_keys - first);
  const float* mine = nullptr;
  if (lane < count) {
    const int key = first + lane;
    const int sequence = sequence_of_key(a, key);
    mine = static_cast<const float*>(paged_item(a.blocks, a.tables, sequence, a.region, key - a.sequence_key_begin[sequence]));
  }
  for (int batch = 0; batch < count; batch += kIndexKeysInFlight) {
    float4 v[kIndexKeysInFlight];
#pragma unroll
    for (int i = 0; i < kIndexKeysInFlight; ++i) {
      const auto* src = reinterpret_cast<const float*>(
          __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(mine), (batch + i) & 31));
      if (batch + i >= count) {
        v[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      } else if ((reinterpret_cast<std::uintptr_t>(src) & 15u) == 0) {
        v[i] = __ldg(reinterpret_cast<const float4*>(src) + lane);
      } else {  // a layout whose entries are not 16 B aligned: the same values, 4 B at a time
        v[i] = make_float4(src[4 * lane], src[4 * lane + 1], src[4 * lane + 2], src[4 * lane + 3]);
      }
    }
#pragma unroll
    for (int i = 0; i < kIndexKeysInFlight; ++i) {
      if (batch + i >= count) break;  // warp-uniform
      const int key = first + batch + i;
      const float amax =
          warp_max(fmaxf(fmaxf(fabsf(v[i].x), fabsf(v[i].y)), fmaxf(fabsf(v[i].z), fabsf(v[i].w))));
      const float s = e4m3_scale(amax);
      const std::uint32_t word = static_cast<std::uint32_t>(__nv_fp8_e4m3(v[i].x / s).__x) |
                                 static_cast<std::uint32_t>(__nv_fp8_e4m3(v[i].y / s).__x) << 8 |
                                 static_cast<std::uint32_t>(__nv_fp8_e4m3(v[i].z / s).__x) << 16 |
                                 static_cast<std::uint32_t>(__nv_fp8_e4m3(v[i].w / s).__x) << 24;
      reinterpret_cast<std::uint32_t*>(a.codes + static_cast<std::int64_t>(key) * kV4IndexHeadDim)[lane] = word;
      if (lane == 0) a.scales[key] = s;
    }
  }
}

// Stored records (an e4m3_scaled region: codes in `region`, scales in
// `scales_region`) copied out, a warp a run of 32 keys as above: each lane
// resolves one key's codes and copies its scale, then the warp copies the
// codes 8 keys at a time, a word of each a lane (a key's 128 codes are 32 words).
__global__ void __launch_bounds__(kIndexKeyWarps * 32) v4_gather_index_records_kernel(V4IndexKeysArgs a) {
  const int lane = threadIdx.x & 31;
  const int first = (blockIdx.x * kIndexKeyWarps + (threadIdx.x >> 5)) * kIndexKeysPerWarp;
  if (first >= a.num_keys) return;
  const int count = min(kIndexKeysPerWarp, a.num_keys - first);
  const std::uint32_t* mine = nullptr;
  if (lane < count) {
    const int key = first + lane;
    const int sequence = sequence_of_key(a, key);
    const std::int64_t entry = key - a.sequence_key_begin[sequence];
    mine = static_cast<const std::uint32_t*>(paged_item(a.blocks, a.tables, sequence, a.region, entry));
    a.scales[key] = *static_cast<const float*>(paged_item(a.blocks, a.tables, sequence, a.scales_region, entry));
  }
  for (int batch = 0; batch < count; batch += kIndexKeysInFlight) {
    std::uint32_t words[kIndexKeysInFlight];
#pragma unroll
    for (int i = 0; i < kIndexKeysInFlight; ++i) {
      const auto* src = reinterpret_cast<const std::uint32_t*>(
          __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(mine), (batch + i) & 31));
      words[i] = batch + i < count ? __ldg(src + lane) : 0u;
    }
#pragma unroll
    for (int i = 0; i < kIndexKeysInFlight; ++i) {
      if (batch + i >= count) break;  // warp-uniform
      const std::int64_t key = first + batch + i;
      reinterpret_cast<std::uint32_t*>(a.codes + key * kV4IndexHeadDim)[lane] = words[i];
    }
  }
}

// The step's own latent of `position` when the sequence whose first row this
// step is first_rows[i] has reached it this step, else null (read the blocks).
__device__ __forceinline__ const float* fresh_latent(const V4GatherKeysArgs& a, const std::int32_t* first_rows, int i,
                                                     std::int64_t position) {
  if (a.fresh == nullptr) return nullptr;
  const int first_row = first_rows[i];
  const std::int64_t first_position = a.positions[first_row];
  if (position < first_position) return nullptr;
  return a.fresh + (first_row + (position - first_position)) * static_cast<std::int64_t>(a.window.count);
}

// Query row r's key set: its window's first position and length, and its keys
// in all (window, then entries); traps past max_keys or top_k.
struct RowKeys {
  std::int64_t position, first, window_keys, total;
};
__device__ __forceinline__ RowKeys row_keys(const V4GatherKeysArgs& a, int r) {
  const std::int64_t p = a.positions[r];
  const std::int64_t first = p - a.sliding_window + 1 > 0 ? p - a.sliding_window + 1 : 0;
  const std::int64_t window_keys = p - first + 1;
  std::int64_t entry_keys = 0;
  if (a.entries.count > 0) entry_keys = a.selected != nullptr ? a.num_selected[r] : (p + 1) / a.entries.rate;
  if (window_keys + entry_keys > a.max_keys || (a.selected != nullptr && entry_keys > a.top_k)) __trap();
  return {p, first, window_keys, window_keys + entry_keys};
}

// Block (j, r): key j of query row r, or (the first of a row's blocks) its count.
__global__ void __launch_bounds__(kThreads) v4_gather_keys_kernel(V4GatherKeysArgs a) {
  const int r = blockIdx.y, j = blockIdx.x;
  const auto [p, first, window_keys, total] = row_keys(a, r);
  (void)p;
  const std::int64_t out_row = static_cast<std::int64_t>(r) * a.max_keys + j;
  if (threadIdx.x == 0) {
    a.key_rows[out_row] = static_cast<std::int32_t>(out_row);
    if (j == 0) a.num_keys[r] = static_cast<std::int32_t>(total);
  }
  if (j >= total) return;
  // The step's own rows are f32; the blocks' values are their region's.
  const void* src;
  Dt dt = Dt::f32;
  bool fp8 = false;
  if (j < window_keys) {
    src = fresh_latent(a, a.fresh_first_row, r, first + j);
    if (src == nullptr) {
      src = paged_item(a.blocks, a.tables, r, a.window, first + j);
      dt = a.window.dt;
      fp8 = a.window.fp8_ds_mla;
    }
  } else {
    const std::int64_t e = j - window_keys;
    const std::int64_t index = a.selected != nullptr ? a.selected[static_cast<std::int64_t>(r) * a.top_k + e] : e;
    src = paged_item(a.blocks, a.tables, r, a.entries, index);
    dt = a.entries.dt;
    fp8 = a.entries.fp8_ds_mla;
  }
  const int dim = a.window.count;
  for (int c = threadIdx.x; c < dim; c += kThreads)
    store_f(a.keys, Dt::bf16, out_row * dim + c, load_latent(src, dt, fp8, c));
}

// Block i: pool row i, of the last sequence whose pool begins at or before it.
__global__ void __launch_bounds__(kThreads) v4_pool_keys_kernel(V4GatherKeysArgs a, V4KeyPool k) {
  const int i = blockIdx.x;
  int lo = 0, hi = k.num_sequences;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (k.pool_begin[mid] <= i) lo = mid;
    else hi = mid;
  }
  const int local = i - k.pool_begin[lo];
  const void* src;
  Dt dt = Dt::f32;  // the step's own rows are f32
  bool fp8 = false;
  if (local < k.window_count[lo]) {
    const std::int64_t position = k.window_first[lo] + local;
    src = fresh_latent(a, k.first_row, lo, position);
    if (src == nullptr) {
      src = paged_item(a.blocks, k.tables, lo, a.window, position);
      dt = a.window.dt;
      fp8 = a.window.fp8_ds_mla;
    }
  } else {
    src = paged_item(a.blocks, k.tables, lo, a.entries, local - k.window_count[lo]);
    dt = a.entries.dt;
    fp8 = a.entries.fp8_ds_mla;
  }
  const int dim = a.window.count;
  for (int c = threadIdx.x; c < dim; c += kThreads)
    store_f(a.keys, Dt::bf16, static_cast<std::int64_t>(i) * dim + c, load_latent(src, dt, fp8, c));
}

// Block (j / kThreads, r): row r's key rows in the pool, in v4_gather_keys_kernel's order.
__global__ void __launch_bounds__(kThreads) v4_pooled_key_rows_kernel(V4GatherKeysArgs a, V4KeyPool k) {
  const int r = blockIdx.y, j = blockIdx.x * kThreads + threadIdx.x;
  const auto [p, first, window_keys, total] = row_keys(a, r);
  const int q = k.row_sequence[r];
  const std::int64_t begin = k.pool_begin[q], span = k.window_count[q];
  // The row's window inside its sequence's span, its entries inside the sequence's.
  if (first < k.window_first[q] || p >= k.window_first[q] + span) __trap();
  if (j == 0) a.num_keys[r] = static_cast<std::int32_t>(total);
  if (j >= a.max_keys) return;
  std::int64_t row = 0;
  if (j < window_keys) {
    row = begin + (first + j - k.window_first[q]);
  } else if (j < total) {
    const std::int64_t e = j - window_keys;
    const std::int64_t index = a.selected != nullptr ? a.selected[static_cast<std::int64_t>(r) * a.top_k + e] : e;
    if (index < 0 || begin + span + index >= k.pool_begin[q + 1]) __trap();
    row = begin + span + index;
  }
  a.key_rows[static_cast<std::int64_t>(r) * a.max_keys + j] = static_cast<std::int32_t>(row);
}

void check_blocks(const V4PagedBlocks& b, const V4BlockTables& t) {
  SLUICE_CHECK(b.data != nullptr && b.floats_per_block > 0 && b.num_blocks > 0 && b.block_size > 0);
  SLUICE_CHECK(t.block_ids != nullptr && t.table_begin != nullptr && t.table_len != nullptr);
}

void check_region(const V4PagedRegion& r, std::int64_t floats_per_block) {
  SLUICE_CHECK(r.count > 0 && r.offset >= 0 && r.offset < floats_per_block);
  // items stay 4-byte aligned
  if (r.fp8_ds_mla) SLUICE_CHECK(r.count == kV4LatentDim);
  else SLUICE_CHECK(r.dt == Dt::f32 || (r.dt == Dt::bf16 && r.count % 2 == 0) || (r.dt == Dt::e4m3 && r.count % 4 == 0));
  if (r.site == V4PagedSite::window) SLUICE_CHECK(r.slots > 0);
  else SLUICE_CHECK(r.rate > 0);
}

// What both gathers need of their arguments but the tables.
void check_gather_keys_args(const V4GatherKeysArgs& args) {
  check_region(args.window, args.blocks.floats_per_block);
  SLUICE_CHECK(args.window.site == V4PagedSite::window && args.sliding_window > 0);
  if (args.entries.count > 0) {
    check_region(args.entries, args.blocks.floats_per_block);
    SLUICE_CHECK(args.entries.site == V4PagedSite::entry && args.entries.count == args.window.count);
    SLUICE_CHECK(args.selected == nullptr || (args.num_selected != nullptr && args.top_k > 0));
  }
  SLUICE_CHECK(args.positions != nullptr && args.keys != nullptr && args.key_rows != nullptr &&
               args.num_keys != nullptr);
  SLUICE_CHECK(args.rows >= 0 && args.max_keys >= args.sliding_window);
  SLUICE_CHECK(args.fresh == nullptr || args.fresh_first_row != nullptr);
}

}  // namespace

void launch_v4_paged_copy(const V4PagedCopyArgs& args, cudaStream_t stream) {
  check_blocks(args.blocks, args.tables);
  check_region(args.region, args.blocks.floats_per_block);
  SLUICE_CHECK(args.items >= 0 && args.index != nullptr && args.dense != nullptr);
  // codes and records move only as themselves
  SLUICE_CHECK((args.region.dt == Dt::e4m3 || args.region.fp8_ds_mla) == (args.dense_dt == Dt::e4m3));
  if (args.items == 0) return;
  v4_paged_copy_kernel<<<static_cast<unsigned>(args.items), kThreads, 0, stream>>>(args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_v4_gather_index_keys(const V4IndexKeysArgs& args, cudaStream_t stream) {
  check_blocks(args.blocks, args.tables);
  check_region(args.region, args.blocks.floats_per_block);
  SLUICE_CHECK(args.region.site == V4PagedSite::entry && args.region.dt == Dt::f32);
  SLUICE_CHECK(args.num_keys >= 0 && args.num_sequences > 0 && args.sequence_key_begin != nullptr &&
               args.keys != nullptr);
  if (args.num_keys == 0) return;
  v4_gather_index_keys_kernel<<<static_cast<unsigned>(args.num_keys), kThreads, 0, stream>>>(args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_v4_gather_index_keys_e4m3(const V4IndexKeysArgs& args, cudaStream_t stream) {
  check_blocks(args.blocks, args.tables);
  check_region(args.region, args.blocks.floats_per_block);
  const bool records = args.region.dt == Dt::e4m3;
  SLUICE_CHECK(args.region.site == V4PagedSite::entry && args.region.count == kV4IndexHeadDim &&
               (records || args.region.dt == Dt::f32));
  if (records) {
    check_region(args.scales_region, args.blocks.floats_per_block);
    SLUICE_CHECK(args.scales_region.site == V4PagedSite::entry && args.scales_region.count == 1 &&
                 args.scales_region.dt == Dt::f32 && args.scales_region.rate == args.region.rate);
  }
  SLUICE_CHECK(args.num_keys >= 0 && args.num_sequences > 0 && args.sequence_key_begin != nullptr &&
               args.codes != nullptr && args.scales != nullptr);
  SLUICE_CHECK(reinterpret_cast<std::uintptr_t>(args.codes) % 4 == 0);
  if (args.num_keys == 0) return;
  constexpr int kKeysPerBlock = kIndexKeyWarps * kIndexKeysPerWarp;
  const unsigned grid = static_cast<unsigned>((args.num_keys + kKeysPerBlock - 1) / kKeysPerBlock);
  if (records)
    v4_gather_index_records_kernel<<<grid, kIndexKeyWarps * 32, 0, stream>>>(args);
  else
    v4_gather_index_keys_e4m3_kernel<<<grid, kIndexKeyWarps * 32, 0, stream>>>(args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_v4_gather_keys(const V4GatherKeysArgs& args, cudaStream_t stream) {
  check_blocks(args.blocks, args.tables);
  check_gather_keys_args(args);
  if (args.rows == 0) return;
  v4_gather_keys_kernel<<<dim3(static_cast<unsigned>(args.max_keys), static_cast<unsigned>(args.rows)), kThreads, 0,
                          stream>>>(args);
  SLUICE_CUDA_CHECK_LAUNCH();
}

void launch_v4_gather_keys_pooled(const V4GatherKeysArgs& args, const V4KeyPool& pool, cudaStream_t stream) {
  check_blocks(args.blocks, pool.tables);
  check_gather_keys_args(args);
  SLUICE_CHECK(pool.row_sequence != nullptr && pool.pool_begin != nullptr && pool.window_first != nullptr &&
               pool.window_count != nullptr && pool.num_sequences > 0 && pool.pool_rows >= 0);
  SLUICE_CHECK(args.fresh == nullptr || pool.first_row != nullptr);
  if (args.rows == 0) return;
  if (pool.pool_rows > 0) {
    v4_pool_keys_kernel<<<static_cast<unsigned>(pool.pool_rows), kThreads, 0, stream>>>(args, pool);
    SLUICE_CUDA_CHECK_LAUNCH();
  }
  const dim3 grid(static_cast<unsigned>((args.max_keys + kThreads - 1) / kThreads), static_cast<unsigned>(args.rows));
  v4_pooled_key_rows_kernel<<<grid, kThreads, 0, stream>>>(args, pool);
  SLUICE_CUDA_CHECK_LAUNCH();
}

}  // namespace sluice::cuda
