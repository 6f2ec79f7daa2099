// DeepSeek-V4's paged KV layout on the device (deepseek_v4_kernels.h,
// V4Paged*; issue 18, the device side of docs/kv-v4.md), against the host's
// addressing (DeepseekV4PagedState over the CPU backend's model-defined
// cache), at V4-Flash's widths (head_dim 512, index keys 128, window 128,
// CSA rate 4, HCA rate 128) in 5 layers of each kind, blocks of 128 tokens:
//   - launch_v4_paged_copy writes every site (window latents, CSA/HCA
//     entries, index keys) of every layer
//     where the host state writes them: the whole caches are byte-equal
//     afterwards; and reads them back as the host state reads them;
//   - launch_v4_gather_keys gives each query row the reference's key set in
//     the reference's order (window, then the indexer's picks or every
//     visible entry), rounded to bf16, for rows at the sequence's start,
//     inside the first window, on block and window boundaries and deep in,
//     and the sparse attention over that set, as it is, is the reference's;
//   - the compression of batched steps on the device (a DeepseekV4CompressPlan:
//     launch_v4_compress folding the step's rows into the entries' pool
//     states, the states and the emitted entries written back) leaves the
//     blocks the reference's row-by-row compression leaves on the host, step
//     after step;
//   - the forward's own layout (bf16 latents and entries) holds and gathers
//     the values rounded to bf16;
//   - CudaOps allocates a model-defined cache (one f32 area a block) and its
//     host tier moves such blocks byte-equal; the layouts it cannot hold are
//     refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <set>

#include "deepseek_v4_test_util.h"
#include "sluice/backend/float_convert.h"
#include "sluice/backend/cpu/cpu_ops.h"
#include "sluice/backend/cuda/cuda_ops.h"
#include "sluice/backend/cuda/kernels/deepseek_v4_forward_kernels.h"
#include "sluice/backend/cuda/kernels/deepseek_v4_kernels.h"
#include "sluice/model/deepseek_v4_fp8_ds_mla.h"
#include "sluice/model/deepseek_v4_kv_layout.h"
#include "sluice/model/deepseek_v4_paged_state.h"
#include "sluice/model/deepseek_v4_pool_fold.h"
#include "sluice/model/deepseek_v4_step_plan.h"
#include "../support/deepseek_v4_flash_config.h"

namespace sluice {
namespace {

using cuda::V4PagedRegion;
using cuda::V4PagedSite;
using v4_testing::Dev;
using v4_testing::kBf16;
using v4_testing::kE4m3;
using v4_testing::kF32;

constexpr std::int32_t kBlock = 128;
constexpr std::int32_t kNumBlocks = 12;

// V4-Flash's widths in 5 layers: sliding, CSA, HCA, CSA, HCA.
ModelConfig five_layer_flash() {
  nlohmann::json j = testing::deepseek_v4_flash_config_json();
  j["num_hidden_layers"] = 5;
  j["compress_ratios"] = nlohmann::json::array({0, 4, 128, 4, 128, 0});
  auto config = parse_model_config(j.dump(), "config.json");
  SLUICE_CHECK(config.ok());
  return *config;
}

// Two sequences over shuffled blocks: A has 6 blocks (768 tokens), B 5.
const std::vector<std::int32_t> kTableA = {5, 2, 9, 0, 7, 3};
const std::vector<std::int32_t> kTableB = {11, 1, 8, 6, 4};

class DeepseekV4PagedCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = five_layer_flash();
    auto layout = DeepseekV4KvLayout::make(config_, kBlock);
    ASSERT_TRUE(layout.ok()) << layout.error_message();
    layout_ = std::move(*layout);
    floats_per_block_ = (layout_->floats_per_block() + kBlock - 1) / kBlock * kBlock;  // whole slots, as the model asks
    host_ = make_cpu_ops({.num_threads = 1});
    const Status allocated = host_->allocate_kv_cache({.num_layers = 1, .num_blocks = kNumBlocks,
                                                       .block_size_tokens = kBlock, .num_kv_heads = 1,
                                                       .head_dim = static_cast<std::int32_t>(floats_per_block_ / kBlock),
                                                       .layout = KvCacheLayout::model_defined});
    ASSERT_TRUE(allocated.ok()) << allocated.error_message();
    ids_ = kTableA;
    ids_.insert(ids_.end(), kTableB.begin(), kTableB.end());
    device_ = std::make_unique<Dev<float>>(static_cast<std::size_t>(kNumBlocks * floats_per_block_));
    block_ids_ = std::make_unique<Dev<std::int32_t>>(ids_);
  }

  // The host cache, block by block, as one image.
  std::vector<float> host_image() {
    std::vector<float> out;
    for (BlockId b = 0; b < kNumBlocks; ++b) {
      const std::span<float> block = host_->model_defined_kv_block(b);
      EXPECT_EQ(static_cast<std::int64_t>(block.size()), floats_per_block_);
      out.insert(out.end(), block.begin(), block.end());
    }
    return out;
  }
  void set_host_image(const std::vector<float>& image) {
    for (BlockId b = 0; b < kNumBlocks; ++b)
      std::copy_n(image.begin() + b * floats_per_block_, floats_per_block_, host_->model_defined_kv_block(b).begin());
  }
  void set_device_image(const std::vector<float>& image) {
    ASSERT_EQ(cudaMemcpy(device_->get(), image.data(), image.size() * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  DeepseekV4PagedState state(bool b) {
    const std::vector<std::int32_t>& t = b ? kTableB : kTableA;
    return DeepseekV4PagedState(*layout_, *host_, std::span<const BlockId>(t.data(), t.size()));
  }
  cuda::V4PagedBlocks blocks() const {
    return {.data = device_->get(), .floats_per_block = floats_per_block_, .num_blocks = kNumBlocks,
            .block_size = kBlock};
  }
  // Block tables of items that belong to sequence A or B.
  struct Tables {
    std::unique_ptr<Dev<std::int32_t>> begin, len;
  };
  Tables tables_for(const std::vector<bool>& in_b) const {
    std::vector<std::int32_t> begin, len;
    for (bool b : in_b) {
      begin.push_back(b ? static_cast<std::int32_t>(kTableA.size()) : 0);
      len.push_back(static_cast<std::int32_t>(b ? kTableB.size() : kTableA.size()));
    }
    return {std::make_unique<Dev<std::int32_t>>(begin), std::make_unique<Dev<std::int32_t>>(len)};
  }
  cuda::V4BlockTables device_tables(const Tables& t) const {
    return {.block_ids = block_ids_->get(), .table_begin = t.begin->get(), .table_len = t.len->get()};
  }

  V4PagedRegion window_region(const DeepseekV4LayerRegion& l) const {
    return {.site = V4PagedSite::window, .offset = l.window_offset,
            .count = static_cast<std::int32_t>(layout_->head_dim()), .slots = layout_->window_slots()};
  }
  static V4PagedRegion entry_region(const DeepseekV4PoolRegion& r) {
    return {.site = V4PagedSite::entry, .offset = r.entries_offset, .count = static_cast<std::int32_t>(r.dim),
            .rate = static_cast<std::int32_t>(r.rate)};
  }
  // A gather of layer lr's key sets (the window, its entries, CSA's picks);
  // the caller points keys, key_rows and num_keys at its buffers.
  cuda::V4GatherKeysArgs gather_args(const DeepseekV4LayerRegion& lr, const cuda::V4BlockTables& tables,
                                     const std::int32_t* positions, std::int32_t rows, std::int32_t max_keys,
                                     const std::int32_t* selected, const std::int32_t* num_selected) const {
    cuda::V4GatherKeysArgs args{.blocks = blocks(), .tables = tables, .positions = positions,
                                .window = window_region(lr),
                                .sliding_window = config_.deepseek_v4->sliding_window, .rows = rows,
                                .max_keys = max_keys};
    if (lr.compressor) args.entries = entry_region(*lr.compressor);
    if (lr.indexer) {
      args.selected = selected;
      args.num_selected = num_selected;
      args.top_k = config_.deepseek_v4->index_topk;
    }
    return args;
  }

  ModelConfig config_;
  std::optional<DeepseekV4KvLayout> layout_;
  std::int64_t floats_per_block_ = 0;
  std::unique_ptr<Ops> host_;
  std::vector<std::int32_t> ids_;
  std::unique_ptr<Dev<float>> device_;
  std::unique_ptr<Dev<std::int32_t>> block_ids_;
};

// One site's items: which sequence, and the position or entry index.
struct Item {
  bool in_b;
  std::int64_t index;
};

std::span<float> host_site(DeepseekV4PagedState& s, std::int32_t layer, DeepseekV4Pool pool, V4PagedSite site,
                           std::int64_t index) {
  switch (site) {
    case V4PagedSite::window: return s.window_latent(layer, index);
    case V4PagedSite::entry: return s.entry(layer, pool, index);
  }
  return {};
}

TEST_F(DeepseekV4PagedCuda, CopyWritesAndReadsEverySiteWhereTheHostStateDoes) {
  set_host_image(std::vector<float>(static_cast<std::size_t>(kNumBlocks * floats_per_block_), 0.0f));
  ASSERT_EQ(cudaMemset(device_->get(), 0, static_cast<std::size_t>(kNumBlocks * floats_per_block_) * 4), cudaSuccess);
  std::uint64_t seed = 100;
  std::int64_t sites_checked = 0;
  auto run_site = [&](std::int32_t layer, DeepseekV4Pool pool, const V4PagedRegion& region,
                      const std::vector<Item>& items) {
    SCOPED_TRACE(::testing::Message() << "layer " << layer << " site " << static_cast<int>(region.site));
    const std::size_t count = static_cast<std::size_t>(region.count);
    const std::vector<float> values = v4_testing::uniform(items.size() * count, ++seed, -2.0f, 2.0f);
    std::vector<std::int32_t> index;
    std::vector<bool> in_b;
    for (std::size_t i = 0; i < items.size(); ++i) {
      DeepseekV4PagedState s = state(items[i].in_b);
      std::ranges::copy(std::span(values).subspan(i * count, count),
                        host_site(s, layer, pool, region.site, items[i].index).begin());
      index.push_back(static_cast<std::int32_t>(items[i].index));
      in_b.push_back(items[i].in_b);
    }
    const Tables t = tables_for(in_b);
    const Dev<std::int32_t> d_index(index);
    const Dev<float> dense(values);
    cuda::launch_v4_paged_copy({.blocks = blocks(), .tables = device_tables(t), .region = region,
                                .index = d_index.get(), .dense = dense.get(), .dense_dt = kF32,
                                .items = static_cast<std::int32_t>(items.size()), .to_blocks = true},
                               nullptr);
    const Dev<float> back(values.size());
    cuda::launch_v4_paged_copy({.blocks = blocks(), .tables = device_tables(t), .region = region,
                                .index = d_index.get(), .dense = back.get(), .dense_dt = kF32,
                                .items = static_cast<std::int32_t>(items.size()), .to_blocks = false},
                               nullptr);
    EXPECT_EQ(back.host(), values);
    ++sites_checked;
  };
  for (std::int32_t l = 0; l < static_cast<std::int32_t>(layout_->num_layers()); ++l) {
    const DeepseekV4LayerRegion& lr = layout_->layer(static_cast<std::size_t>(l));
    // Window latents: A's positions across its 6 blocks, B's across 5 (distinct places).
    std::vector<Item> window;
    for (std::int64_t p : {0, 1, 127, 128, 129, 300, 511, 512, 767}) window.push_back({false, p});
    for (std::int64_t p : {0, 5, 255, 256, 600, 639}) window.push_back({true, p});
    run_site(l, DeepseekV4Pool::compressor, window_region(lr), window);
    for (DeepseekV4Pool pool : {DeepseekV4Pool::compressor, DeepseekV4Pool::indexer}) {
      const std::optional<DeepseekV4PoolRegion>& r = pool == DeepseekV4Pool::compressor ? lr.compressor : lr.indexer;
      if (!r) continue;
      // Entries: every window of A, the first and last ones of B.
      std::vector<Item> entries;
      for (std::int64_t e = 0; e < 6 * kBlock / r->rate; ++e) entries.push_back({false, e});
      entries.push_back({true, 0});
      entries.push_back({true, 5 * kBlock / r->rate - 1});
      run_site(l, pool, entry_region(*r), entries);
    }
  }
  EXPECT_EQ(sites_checked, 1 + 2 * (1 + 2) + 2 * (1 + 1));  // sliding; CSA: window + 2 pools' entries; HCA: window + entries
  const std::vector<float> host = host_image();
  const std::vector<float> device = device_->host();
  ASSERT_EQ(host.size(), device.size());
  EXPECT_EQ(std::memcmp(host.data(), device.data(), host.size() * sizeof(float)), 0)
      << "the device blocks differ from the host state's";
  EXPECT_GT(std::ranges::count_if(host, [](float v) { return v != 0.0f; }), 100000);
}

// The query rows of the gather: (sequence, position) at the start, inside the
// first window, on block and compression-window boundaries, deep in.
const std::vector<Item> kQueryRows = {{false, 0},   {false, 2},   {false, 3},   {false, 126}, {false, 127},
                                      {false, 128}, {false, 255}, {false, 383}, {false, 767}, {true, 0},
                                      {true, 64},   {true, 131},  {true, 639}};

// CSA: picks as the indexer leaves them (ascending, -1 past the count), a
// random subset of the visible entries (all of them for some rows); HCA:
// every visible entry; sliding layers: none.
struct RowPicks {
  std::vector<std::int32_t> selected, num_selected;
  std::vector<std::vector<std::int64_t>> picks;
  std::int32_t max_entries = 0;
};
RowPicks random_picks(const DeepseekV4LayerRegion& lr, std::int32_t top_k, SplitMix64& rng) {
  const auto rows = static_cast<std::int32_t>(kQueryRows.size());
  const bool csa = lr.indexer.has_value();
  RowPicks out{.selected = std::vector<std::int32_t>(static_cast<std::size_t>(rows * top_k), -1),
               .num_selected = std::vector<std::int32_t>(rows, 0),
               .picks = std::vector<std::vector<std::int64_t>>(rows)};
  for (std::int32_t r = 0; r < rows; ++r) {
    if (!lr.compressor) continue;
    const std::int64_t visible = (kQueryRows[r].index + 1) / lr.compressor->rate;
    for (std::int64_t e = 0; e < visible; ++e)
      if (!csa || r % 3 == 0 || rng.uniform() < 0.5) out.picks[r].push_back(e);
    out.num_selected[r] = static_cast<std::int32_t>(out.picks[r].size());
    for (std::size_t j = 0; j < out.picks[r].size(); ++j)
      out.selected[r * top_k + j] = static_cast<std::int32_t>(out.picks[r][j]);
    out.max_entries = std::max(out.max_entries, out.num_selected[r]);
  }
  return out;
}

TEST_F(DeepseekV4PagedCuda, GatheredKeysAreTheReferenceKeySetInItsOrder) {
  const std::vector<float> image = v4_testing::uniform(static_cast<std::size_t>(kNumBlocks * floats_per_block_), 7,
                                                       -3.0f, 3.0f);
  set_host_image(image);
  set_device_image(image);
  const std::int64_t hd = layout_->head_dim();
  const std::int32_t window = config_.deepseek_v4->sliding_window;
  const std::int32_t top_k = config_.deepseek_v4->index_topk;
  const std::int32_t rows = static_cast<std::int32_t>(kQueryRows.size());
  std::vector<std::int32_t> positions;
  std::vector<bool> in_b;
  for (const Item& q : kQueryRows) {
    positions.push_back(static_cast<std::int32_t>(q.index));
    in_b.push_back(q.in_b);
  }
  const Tables t = tables_for(in_b);
  const Dev<std::int32_t> d_positions(positions);
  SplitMix64 rng(3);
  for (std::int32_t l = 0; l < static_cast<std::int32_t>(layout_->num_layers()); ++l) {
    SCOPED_TRACE(::testing::Message() << "layer " << l);
    const DeepseekV4LayerRegion& lr = layout_->layer(static_cast<std::size_t>(l));
    const bool csa = lr.indexer.has_value();
    const RowPicks rp = random_picks(lr, top_k, rng);
    const std::vector<std::vector<std::int64_t>>& picks = rp.picks;
    const std::int32_t max_keys = window + (csa ? top_k : rp.max_entries);
    const Dev<std::int32_t> d_selected(rp.selected), d_num_selected(rp.num_selected);
    Dev<std::uint16_t> keys(static_cast<std::size_t>(rows) * max_keys * hd);
    Dev<std::int32_t> key_rows(static_cast<std::size_t>(rows) * max_keys), num_keys(static_cast<std::size_t>(rows));
    cuda::V4GatherKeysArgs args = gather_args(lr, device_tables(t), d_positions.get(), rows, max_keys,
                                              d_selected.get(), d_num_selected.get());
    args.keys = keys.get();
    args.key_rows = key_rows.get();
    args.num_keys = num_keys.get();
    cuda::launch_v4_gather_keys(args, nullptr);
    // The gathered set is the sparse attention's input as it is (64 heads, sinks, the inverse rope).
    const std::int64_t heads = 64;
    const std::vector<float> q = v4_testing::bf16_values(static_cast<std::size_t>(rows * heads * hd), 20 + l, 1.0f);
    const std::vector<float> sinks = v4_testing::uniform(static_cast<std::size_t>(heads), 30 + l, -2.0f, 4.0f);
    const RotaryTable rope = v4_testing::test_rope(160000.0f);
    const Dev<std::uint16_t> d_q(v4_testing::to_bf16(q));
    const Dev<float> d_sinks(sinks), d_freq(rope.inv_freq);
    const Dev<float> d_attn(q.size());
    const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(hd));
    cuda::launch_v4_sparse_attention({.q = d_q.get(), .kv = keys.get(), .key_rows = key_rows.get(),
                                      .num_keys = num_keys.get(), .sinks = d_sinks.get(),
                                      .positions = d_positions.get(),
                                      .rope = {.inv_freq = d_freq.get(), .rope_dim = 64}, .out = d_attn.get(),
                                      .out_dt = kF32, .rows = rows, .num_heads = static_cast<std::int32_t>(heads),
                                      .max_keys = max_keys, .softmax_scale = softmax_scale},
                                     nullptr);
    std::vector<float> want_attn(q.size());
    const std::vector<std::uint16_t> got = keys.host();
    const std::vector<std::int32_t> got_rows = key_rows.host(), got_num = num_keys.host();
    for (std::int32_t r = 0; r < rows; ++r) {
      SCOPED_TRACE(::testing::Message() << "row " << r << " at " << kQueryRows[r].index);
      DeepseekV4PagedState s = state(kQueryRows[r].in_b);
      const std::int64_t p = kQueryRows[r].index;
      std::vector<std::span<float>> expected;  // run_attention's loop
      for (std::int64_t u = std::max<std::int64_t>(0, p - window + 1); u <= p; ++u) expected.push_back(s.window_latent(l, u));
      for (std::int64_t e : picks[r]) expected.push_back(s.entry(l, DeepseekV4Pool::compressor, e));
      ASSERT_EQ(got_num[r], static_cast<std::int32_t>(expected.size()));
      for (std::size_t j = 0; j < expected.size(); ++j) {
        const std::int64_t out_row = static_cast<std::int64_t>(r) * max_keys + static_cast<std::int64_t>(j);
        ASSERT_EQ(got_rows[out_row], out_row);
        for (std::int64_t c = 0; c < hd; ++c)
          ASSERT_EQ(got[out_row * hd + c], f32_to_bf16(expected[j][c])) << "key " << j << " dim " << c;
      }
      std::vector<float> ref_keys;
      for (std::span<float> k : expected)
        for (float v : k) ref_keys.push_back(v4_testing::round_bf16(v));
      const auto out_row = std::span<float>(want_attn).subspan(static_cast<std::size_t>(r * heads * hd),
                                                               static_cast<std::size_t>(heads * hd));
      v4_testing::cpu_ops().sink_attention(
          std::span<const float>(q).subspan(static_cast<std::size_t>(r * heads * hd), static_cast<std::size_t>(heads * hd)),
          ref_keys, sinks, {.num_heads = heads, .head_dim = hd, .softmax_scale = softmax_scale}, out_row);
      v4_testing::cpu_ops().rope_tail(out_row, hd, heads, std::span(&p, 1), rope, true);
    }
    const std::vector<float> got_attn = d_attn.host();
    EXPECT_LT(v4_testing::relative_error(got_attn, want_attn), 2e-5)
        << "max |delta| " << v4_testing::max_abs_difference(got_attn, want_attn);
  }
}

// The pooled gather (rows that share their sequence's keys, each key once)
// hands the attention the same key set, row by row and key by key, bit-equal
// to the per-row gather above, the rows of two sequences mixed.
TEST_F(DeepseekV4PagedCuda, PooledKeysAreThePerRowKeySets) {
  const std::vector<float> image = v4_testing::uniform(static_cast<std::size_t>(kNumBlocks * floats_per_block_), 8,
                                                       -3.0f, 3.0f);
  set_device_image(image);
  const std::int64_t hd = layout_->head_dim();
  const std::int32_t window = config_.deepseek_v4->sliding_window;
  const std::int32_t top_k = config_.deepseek_v4->index_topk;
  const auto rows = static_cast<std::int32_t>(kQueryRows.size());
  std::vector<std::int32_t> positions, row_sequence;
  std::vector<bool> in_b;
  for (const Item& q : kQueryRows) {
    positions.push_back(static_cast<std::int32_t>(q.index));
    in_b.push_back(q.in_b);
    row_sequence.push_back(q.in_b ? 1 : 0);
  }
  const Tables row_tables = tables_for(in_b), sequence_tables = tables_for({false, true});
  const Dev<std::int32_t> d_positions(positions), d_row_sequence(row_sequence);
  SplitMix64 rng(4);
  for (std::int32_t l = 0; l < static_cast<std::int32_t>(layout_->num_layers()); ++l) {
    SCOPED_TRACE(::testing::Message() << "layer " << l);
    const DeepseekV4LayerRegion& lr = layout_->layer(static_cast<std::size_t>(l));
    const bool csa = lr.indexer.has_value();
    const RowPicks rp = random_picks(lr, top_k, rng);
    const std::int32_t max_keys = window + (csa ? top_k : rp.max_entries);
    // Each sequence's window span and entries, as the forward plans them.
    const std::int32_t rate = lr.compressor ? static_cast<std::int32_t>(lr.compressor->rate) : 0;
    std::vector<std::int32_t> pool_begin{0}, window_first, window_count;
    for (std::int32_t q = 0; q < 2; ++q) {
      std::int32_t lo = 1 << 30, hi = -1;
      for (std::int32_t r = 0; r < rows; ++r)
        if (row_sequence[r] == q) {
          lo = std::min(lo, positions[r]);
          hi = std::max(hi, positions[r]);
        }
      window_first.push_back(std::max(0, lo - window + 1));
      window_count.push_back(hi - window_first.back() + 1);
      pool_begin.push_back(pool_begin.back() + window_count.back() + (rate > 0 ? (hi + 1) / rate : 0));
    }
    const Dev<std::int32_t> d_selected(rp.selected), d_num_selected(rp.num_selected);
    const Dev<std::int32_t> d_pool_begin(pool_begin), d_window_first(window_first), d_window_count(window_count);
    Dev<std::uint16_t> per_row_keys(static_cast<std::size_t>(rows) * max_keys * hd);
    Dev<std::uint16_t> pool_keys(static_cast<std::size_t>(pool_begin.back()) * hd);
    Dev<std::int32_t> per_row_rows(static_cast<std::size_t>(rows) * max_keys), pool_rows(static_cast<std::size_t>(rows) * max_keys);
    Dev<std::int32_t> per_row_num(static_cast<std::size_t>(rows)), pool_num(static_cast<std::size_t>(rows));
    cuda::V4GatherKeysArgs args = gather_args(lr, device_tables(row_tables), d_positions.get(), rows, max_keys,
                                              d_selected.get(), d_num_selected.get());
    args.keys = per_row_keys.get();
    args.key_rows = per_row_rows.get();
    args.num_keys = per_row_num.get();
    cuda::launch_v4_gather_keys(args, nullptr);
    args.keys = pool_keys.get();
    args.key_rows = pool_rows.get();
    args.num_keys = pool_num.get();
    cuda::launch_v4_gather_keys_pooled(
        args,
        {.tables = device_tables(sequence_tables), .row_sequence = d_row_sequence.get(),
         .pool_begin = d_pool_begin.get(), .window_first = d_window_first.get(),
         .window_count = d_window_count.get(), .num_sequences = 2, .pool_rows = pool_begin.back()},
        nullptr);
    const std::vector<std::uint16_t> want = per_row_keys.host(), got = pool_keys.host();
    const std::vector<std::int32_t> want_rows = per_row_rows.host(), got_rows = pool_rows.host();
    ASSERT_EQ(pool_num.host(), per_row_num.host());
    const std::vector<std::int32_t> num = per_row_num.host();
    for (std::int32_t r = 0; r < rows; ++r)
      for (std::int32_t j = 0; j < num[r]; ++j) {
        const std::int64_t at = static_cast<std::int64_t>(r) * max_keys + j;
        ASSERT_GE(got_rows[at], pool_begin[row_sequence[r]]) << "row " << r << " key " << j;
        ASSERT_LT(got_rows[at], pool_begin[row_sequence[r] + 1]) << "row " << r << " key " << j;
        ASSERT_TRUE(std::equal(got.begin() + got_rows[at] * hd, got.begin() + (got_rows[at] + 1) * hd,
                               want.begin() + want_rows[at] * hd))
            << "row " << r << " key " << j;
      }
  }
}

// The indexer's key pool of both CSA layers (A's first 150 keys, B's 160,
// one of A's keys all zeros, the values spanning many exponents): the records
// made in one pass are the bytes of the f32 gather followed by the separate
// quantization (session 17's path), and both are the host's quantization of
// the host state's entries (amax / 448 a key, round to nearest even).
TEST_F(DeepseekV4PagedCuda, IndexKeyRecordsInOnePassAreTheGatherThenQuantizeBytes) {
  std::vector<float> image = v4_testing::uniform(static_cast<std::size_t>(kNumBlocks * floats_per_block_), 8, -1.0f, 1.0f);
  SplitMix64 rng(9);
  for (float& v : image) v = std::ldexp(v, static_cast<int>(rng.next() % 24) - 12);
  set_host_image(image);
  constexpr std::int64_t kZeroKey = 17;
  const std::vector<std::int32_t> sequence_key_begin = {0, 150, 310};
  const std::int32_t num_keys = sequence_key_begin.back();
  const Tables t = tables_for({false, true});
  const Dev<std::int32_t> d_begin(sequence_key_begin);
  std::int32_t layers_checked = 0;
  for (std::int32_t l = 0; l < static_cast<std::int32_t>(layout_->num_layers()); ++l) {
    const DeepseekV4LayerRegion& lr = layout_->layer(static_cast<std::size_t>(l));
    if (!lr.indexer) continue;
    SCOPED_TRACE(::testing::Message() << "layer " << l);
    const std::int64_t d = lr.indexer->dim;
    ASSERT_EQ(d, cuda::kV4IndexHeadDim);
    {
      DeepseekV4PagedState a = state(false);
      std::ranges::fill(a.entry(l, DeepseekV4Pool::indexer, kZeroKey), 0.0f);
    }
    set_device_image(host_image());
    // The host's records, key by key.
    std::vector<std::uint8_t> want_codes;
    std::vector<float> want_scales;
    for (std::int32_t sq = 0; sq < 2; ++sq) {
      DeepseekV4PagedState st = state(sq == 1);
      for (std::int32_t e = 0; e < sequence_key_begin[sq + 1] - sequence_key_begin[sq]; ++e) {
        const std::span<float> key = st.entry(l, DeepseekV4Pool::indexer, e);
        float amax = 0.0f;
        for (float v : key) amax = std::max(amax, std::fabs(v));
        const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
        want_scales.push_back(scale);
        for (float v : key) want_codes.push_back(f32_to_fp8_e4m3(v / scale));
      }
    }
    ASSERT_EQ(want_scales[kZeroKey], 1.0f);
    const cuda::V4IndexKeysArgs base{.blocks = blocks(), .tables = device_tables(t),
                                     .region = entry_region(*lr.indexer),
                                     .sequence_key_begin = d_begin.get(), .num_sequences = 2, .num_keys = num_keys};
    // Session 17's two steps.
    Dev<float> keys(static_cast<std::size_t>(num_keys * d));
    Dev<std::uint8_t> two_step_codes(static_cast<std::size_t>(num_keys * d));
    Dev<float> two_step_scales(static_cast<std::size_t>(num_keys));
    cuda::V4IndexKeysArgs f32_args = base;
    f32_args.keys = keys.get();
    cuda::launch_v4_gather_index_keys(f32_args, nullptr);
    cuda::launch_v4_quantize_e4m3_rows(keys.get(), num_keys, static_cast<std::int32_t>(d), two_step_codes.get(),
                                       two_step_scales.get(), nullptr);
    // One pass, into poisoned buffers (every byte must be written).
    Dev<std::uint8_t> codes(std::vector<std::uint8_t>(static_cast<std::size_t>(num_keys * d), 0x7f));
    Dev<float> scales(std::vector<float>(static_cast<std::size_t>(num_keys), NAN));
    cuda::V4IndexKeysArgs e4m3_args = base;
    e4m3_args.codes = codes.get();
    e4m3_args.scales = scales.get();
    cuda::launch_v4_gather_index_keys_e4m3(e4m3_args, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<std::uint8_t> got_codes = codes.host();
    const std::vector<float> got_scales = scales.host();
    EXPECT_EQ(got_codes, two_step_codes.host());
    EXPECT_EQ(got_codes, want_codes);
    const std::vector<float> two_step = two_step_scales.host();
    ASSERT_EQ(got_scales.size(), want_scales.size());
    for (std::size_t k = 0; k < got_scales.size(); ++k) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(got_scales[k]), std::bit_cast<std::uint32_t>(two_step[k])) << "key " << k;
      ASSERT_EQ(std::bit_cast<std::uint32_t>(got_scales[k]), std::bit_cast<std::uint32_t>(want_scales[k])) << "key " << k;
    }
    ++layers_checked;
  }
  EXPECT_EQ(layers_checked, 2);
}

// CSA's compressor and indexer (layer 1) and HCA's compressor (layer 2), A and
// B stepped together in chunks from one token to several windows.
TEST_F(DeepseekV4PagedCuda, PlannedCompressionOnTheDeviceLeavesTheReferencesBlocks) {
  set_host_image(std::vector<float>(static_cast<std::size_t>(kNumBlocks * floats_per_block_), 0.0f));
  ASSERT_EQ(cudaMemset(device_->get(), 0, static_cast<std::size_t>(kNumBlocks * floats_per_block_) * 4), cudaSuccess);
  const RotaryTable rope = v4_testing::test_rope(160000.0f);
  const Dev<float> d_freq(rope.inv_freq);
  struct Pool {
    std::int32_t layer;
    DeepseekV4Pool which;
    DeepseekV4PoolRegion r;
    std::vector<float> ape, norm;
    std::vector<std::vector<float>> kv, gate;  // [A, B][position * width]
  };
  std::vector<Pool> pools;
  std::uint64_t seed = 40;
  const std::vector<std::int32_t> lengths = {static_cast<std::int32_t>(kTableA.size()) * kBlock,
                                             static_cast<std::int32_t>(kTableB.size()) * kBlock};
  for (auto [l, which] : {std::pair{1, DeepseekV4Pool::compressor}, std::pair{1, DeepseekV4Pool::indexer},
                          std::pair{2, DeepseekV4Pool::compressor}}) {
    const DeepseekV4LayerRegion& lr = layout_->layer(static_cast<std::size_t>(l));
    const DeepseekV4PoolRegion r = which == DeepseekV4Pool::compressor ? *lr.compressor : *lr.indexer;
    Pool p{.layer = l, .which = which, .r = r};
    p.ape = v4_testing::uniform(static_cast<std::size_t>(r.rate * r.width), ++seed, -1.0f, 1.0f);
    p.norm = v4_testing::uniform(static_cast<std::size_t>(r.dim), ++seed, 0.5f, 1.5f);
    for (std::int32_t n : lengths) {
      p.kv.push_back(v4_testing::uniform(static_cast<std::size_t>(n * r.width), ++seed, -2.0f, 2.0f));
      p.gate.push_back(v4_testing::uniform(static_cast<std::size_t>(n * r.width), ++seed, -4.0f, 4.0f));
    }
    pools.push_back(std::move(p));
  }
  // Chunks per step for A and B (0: not in the step): prefill chunks that end
  // mid-window, a chunk of many CSA windows and across an HCA window and a
  // block, decode rows that close windows.
  const std::vector<std::pair<std::int32_t, std::int32_t>> schedule = {
      {5, 130}, {1, 1}, {1, 0}, {250, 2}, {3, 1}, {1, 1}, {0, 7}, {128, 125}, {1, 1}, {1, 1}, {2, 3}};
  std::vector<std::int32_t> done = {0, 0};
  std::int64_t entries = 0;
  for (const auto& [na, nb] : schedule) {
    StepLayout step;
    for (std::int32_t s = 0; s < 2; ++s) {
      const std::int32_t n = s == 0 ? na : nb;
      if (n == 0) continue;
      step.sequences.push_back({.row_begin = step.num_rows(), .num_rows = n, .num_computed_tokens = done[s],
                                .block_table = s == 0 ? kTableA : kTableB});
      for (std::int32_t i = 0; i < n; ++i) {
        step.token_ids.push_back(s);  // the token says the sequence (A 0, B 1)
        step.positions.push_back(done[s] + i);
      }
    }
    const DeepseekV4StepTables t = DeepseekV4StepTables::make(step);
    const Dev<std::int32_t> d_ids(t.block_ids);
    auto tables_of = [&](const std::vector<std::int32_t>& sequences) {
      std::vector<std::int32_t> begin, len;
      for (std::int32_t s : sequences) {
        begin.push_back(t.sequence_table_begin[static_cast<std::size_t>(s)]);
        len.push_back(t.sequence_table_len[static_cast<std::size_t>(s)]);
      }
      return Tables{std::make_unique<Dev<std::int32_t>>(begin), std::make_unique<Dev<std::int32_t>>(len)};
    };
    auto device_tables_of = [&](const Tables& tt) {
      return cuda::V4BlockTables{.block_ids = d_ids.get(), .table_begin = tt.begin->get(), .table_len = tt.len->get()};
    };
    for (const Pool& p : pools) {
      const DeepseekV4PoolRegion& r = p.r;
      // The host: DeepseekV4Reference::compress, row by row.
      std::vector<float> values(static_cast<std::size_t>(r.dim)), gates(static_cast<std::size_t>(r.dim));
      auto feed = [&](std::int32_t s, std::int64_t pos, std::int64_t e) {
        const std::int64_t half = r.overlapping() && pos / r.rate == e ? r.dim : 0;
        for (std::int64_t c = 0; c < r.dim; ++c) {
          values[static_cast<std::size_t>(c)] = p.kv[s][static_cast<std::size_t>(pos * r.width + half + c)];
          gates[static_cast<std::size_t>(c)] = p.gate[s][static_cast<std::size_t>(pos * r.width + half + c)] +
                                               p.ape[static_cast<std::size_t>(pos % r.rate * r.width + half + c)];
        }
      };
      for (std::size_t row = 0; row < t.positions.size(); ++row) {
        const std::int32_t s = step.token_ids[row];
        DeepseekV4PagedState state = this->state(s == 1);
        const std::int64_t pos = t.positions[row], w = pos / r.rate;
        for (std::int64_t e : {w, w + 1}) {
          if (e == w + 1 && !r.overlapping()) continue;
          const std::span<float> at = continue_pool_state(state, p.layer, p.which, e, pos, r.first_token(e));
          feed(s, pos, e);
          deepseek_v4_pool_fold(at, values, gates);
        }
        if (pos != r.last_token(w)) continue;
        std::vector<float> entry(static_cast<std::size_t>(r.dim));
        deepseek_v4_pool_finish(state.pool_state(p.layer, p.which, w, pos), entry);
        v4_testing::cpu_ops().rms_norm(entry, r.dim, p.norm, 1e-6f);
        const std::int64_t first = w * r.rate;
        v4_testing::cpu_ops().rope_tail(entry, r.dim, 1, std::span(&first, 1), rope, false);
        std::ranges::copy(entry, state.entry(p.layer, p.which, w).begin());
      }
      // The device: the plan, the step's projections as the forward has them.
      const DeepseekV4CompressPlan plan =
          DeepseekV4CompressPlan::make(t, static_cast<std::int32_t>(r.rate), r.overlapping(), kBlock);
      std::vector<float> kv(t.positions.size() * static_cast<std::size_t>(r.width)), gate(kv.size());
      for (std::size_t row = 0; row < t.positions.size(); ++row) {
        const std::int32_t id = step.token_ids[row];
        const auto src = static_cast<std::ptrdiff_t>(static_cast<std::size_t>(t.positions[row]) * r.width);
        const auto dst = static_cast<std::ptrdiff_t>(row * static_cast<std::size_t>(r.width));
        std::copy_n(p.kv[id].begin() + src, r.width, kv.begin() + dst);
        std::copy_n(p.gate[id].begin() + src, r.width, gate.begin() + dst);
      }
      const Dev<float> d_kv(kv), d_gate(gate), d_ape(p.ape), d_norm(p.norm);
      const auto n = plan.num_entries();
      const Tables items = tables_of(plan.item_sequence);
      const Dev<std::int32_t> d_entry(plan.item_entry), d_row(plan.item_first_row), d_token(plan.item_first_token),
          d_count(plan.item_count), d_flags(plan.item_flags), d_emit(plan.item_emit_row), d_index(plan.entry_index);
      const Dev<float> d_out(static_cast<std::size_t>(std::max(n, 1)) * static_cast<std::size_t>(r.dim)),
          d_start(static_cast<std::size_t>(std::max(plan.num_items(), 1)) * 3 * static_cast<std::size_t>(r.dim));
      cuda::launch_v4_compress({.kv = d_kv.get(), .gate = d_gate.get(), .ape = d_ape.get(), .norm = d_norm.get(),
                                .blocks = blocks(), .tables = device_tables_of(items), .state_offset = r.state_offset,
                                .slots = static_cast<std::int32_t>(r.slots), .entry = d_entry.get(),
                                .first_row = d_row.get(), .first_token = d_token.get(), .count = d_count.get(),
                                .flags = d_flags.get(), .emit_row = d_emit.get(), .start_states = d_start.get(),
                                .rope = {.inv_freq = d_freq.get(), .rope_dim = 64}, .out = d_out.get(),
                                .out_dt = kF32, .items = plan.num_items(), .dim = static_cast<std::int32_t>(r.dim),
                                .width = static_cast<std::int32_t>(r.width), .rate = static_cast<std::int32_t>(r.rate),
                                .eps = 1e-6f},
                               nullptr);
      if (n > 0) {
        const Tables tt = tables_of(plan.entry_sequence);
        cuda::launch_v4_paged_copy({.blocks = blocks(), .tables = device_tables_of(tt), .region = entry_region(r),
                                    .index = d_index.get(), .dense = d_out.get(), .dense_dt = kF32, .items = n,
                                    .to_blocks = true},
                                   nullptr);
        entries += n;
      }
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the buffers are freed at the end of this scope
    }
    done[0] += na;
    done[1] += nb;
    // Pool states and entries within the kernel's own bound (expf against the host's exp).
    const std::vector<float> want = host_image(), got = device_->host();
    double worst = 0.0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      ASSERT_FALSE(std::isnan(got[i])) << "float " << i;
      worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
    }
    EXPECT_LT(worst, 1e-4) << "after A " << done[0] << ", B " << done[1];
  }
  // Every window of A's 393 and B's 272 tokens, once: CSA's two pools at rate 4, HCA's at 128.
  EXPECT_EQ(done, (std::vector<std::int32_t>{393, 272}));
  EXPECT_EQ(entries, 2 * (393 / 4 + 272 / 4) + (393 / 128 + 272 / 128));
}

// The key sets of an HCA layer's rows at 127, 200 and 255 gathered from two
// blocks of 128: each key reads as `latents` (positions 0-255) and `entries`
// hold it, bit for bit, the window then every visible entry.
void expect_hca_key_sets(const cuda::V4PagedBlocks& blocks, const V4PagedRegion& window_region,
                         const V4PagedRegion& entry_region, std::span<const float> latents,
                         std::span<const float> entries, std::int32_t hd, std::int32_t window) {
  const std::vector<std::int32_t> positions = {127, 200, 255}, ids = {0, 1}, begin(3, 0), len(3, 2);
  const std::int32_t rows = 3, max_keys = window + 2;
  const Dev<std::int32_t> d_positions(positions), d_ids(ids), d_begin(begin), d_len(len);
  Dev<std::uint16_t> keys(static_cast<std::size_t>(rows) * max_keys * hd);
  Dev<std::int32_t> key_rows(static_cast<std::size_t>(rows) * max_keys), num_keys(static_cast<std::size_t>(rows));
  cuda::launch_v4_gather_keys(
      {.blocks = blocks, .tables = {.block_ids = d_ids.get(), .table_begin = d_begin.get(), .table_len = d_len.get()},
       .positions = d_positions.get(), .window = window_region, .entries = entry_region, .sliding_window = window,
       .keys = keys.get(), .key_rows = key_rows.get(), .num_keys = num_keys.get(), .rows = rows,
       .max_keys = max_keys},
      nullptr);
  const std::vector<std::uint16_t> got = keys.host();
  const std::vector<std::int32_t> got_num = num_keys.host();
  for (std::int32_t r = 0; r < rows; ++r) {
    const std::int64_t p = positions[static_cast<std::size_t>(r)];
    std::vector<std::span<const float>> expected;
    for (std::int64_t u = std::max<std::int64_t>(0, p - window + 1); u <= p; ++u)
      expected.push_back(latents.subspan(static_cast<std::size_t>(u * hd), static_cast<std::size_t>(hd)));
    for (std::int64_t e = 0; e < (p + 1) / 128; ++e)
      expected.push_back(entries.subspan(static_cast<std::size_t>(e * hd), static_cast<std::size_t>(hd)));
    ASSERT_EQ(got_num[static_cast<std::size_t>(r)], static_cast<std::int32_t>(expected.size())) << "row " << r;
    for (std::size_t j = 0; j < expected.size(); ++j)
      for (std::int32_t c = 0; c < hd; ++c)
        ASSERT_EQ(bf16_to_f32(got[(static_cast<std::size_t>(r) * max_keys + j) * hd + static_cast<std::size_t>(c)]),
                  expected[j][static_cast<std::size_t>(c)])
            << "row " << r << " key " << j << " channel " << c;
  }
}

// The CUDA forward's own layout (DeepseekV4KvFormats::cuda()): window
// latents and CSA/HCA entries stored as bf16, index keys as e4m3 records. An
// HCA layer and a CSA layer of V4-Flash in two blocks of 128: the sites read
// back as their values rounded to bf16, the gather hands the sparse attention
// those same bf16 values, window then every visible entry, and the indexer's
// gather copies out the records launch_v4_quantize_e4m3_rows made, bit for bit.
TEST(DeepseekV4PagedBf16, SitesHoldBf16AndTheGatherReadsThem) {
  const ModelConfig config = five_layer_flash();
  auto layout = DeepseekV4KvLayout::make(config, kBlock, DeepseekV4KvFormats::cuda());
  ASSERT_TRUE(layout.ok()) << layout.error_message();
  const std::int32_t hd = static_cast<std::int32_t>(layout->head_dim()), window = config.deepseek_v4->sliding_window;
  const Dev<float> area(std::vector<float>(static_cast<std::size_t>(2 * layout->floats_per_block()), 0.0f));
  const cuda::V4PagedBlocks blocks{.data = area.get(), .floats_per_block = layout->floats_per_block(), .num_blocks = 2,
                                   .block_size = kBlock};
  const auto bf16 = [](const std::vector<float>& v) {
    std::vector<float> out;
    for (float x : v) out.push_back(bf16_to_f32(f32_to_bf16(x)));
    return out;
  };
  // Writes `items` values of a site from f32, reads them back; returns what was written.
  auto write_and_read = [&](const V4PagedRegion& region, std::int32_t items, std::uint64_t seed, bool exact) {
    std::vector<std::int32_t> index(static_cast<std::size_t>(items)), begin(index.size(), 0), len(index.size(), 2);
    std::iota(index.begin(), index.end(), 0);
    const std::vector<std::int32_t> ids = {0, 1};
    const Dev<std::int32_t> d_index(index), d_begin(begin), d_len(len), d_ids(ids);
    const cuda::V4BlockTables tables{.block_ids = d_ids.get(), .table_begin = d_begin.get(), .table_len = d_len.get()};
    const std::vector<float> values =
        v4_testing::uniform(static_cast<std::size_t>(items) * static_cast<std::size_t>(region.count), seed, -3.0f, 3.0f);
    const Dev<float> dense(values), back(values.size());
    cuda::launch_v4_paged_copy({.blocks = blocks, .tables = tables, .region = region, .index = d_index.get(),
                                .dense = dense.get(), .dense_dt = kF32, .items = items, .to_blocks = true},
                               nullptr);
    cuda::launch_v4_paged_copy({.blocks = blocks, .tables = tables, .region = region, .index = d_index.get(),
                                .dense = back.get(), .dense_dt = kF32, .items = items, .to_blocks = false},
                               nullptr);
    EXPECT_EQ(back.host(), exact ? values : bf16(values)) << "site " << static_cast<int>(region.site);
    return exact ? values : bf16(values);
  };
  const DeepseekV4LayerRegion& csa = layout->layer(1);
  const DeepseekV4LayerRegion& hca = layout->layer(2);
  ASSERT_TRUE(csa.indexer.has_value() && hca.compressor.has_value() && !hca.indexer.has_value());
  auto entries_of = [](const DeepseekV4PoolRegion& r, cuda::Dt dt) {
    return V4PagedRegion{.site = V4PagedSite::entry, .offset = r.entries_offset, .count = static_cast<std::int32_t>(r.dim),
                         .rate = static_cast<std::int32_t>(r.rate), .dt = dt};
  };
  auto window_of = [&](const DeepseekV4LayerRegion& l) {
    return V4PagedRegion{.site = V4PagedSite::window, .offset = l.window_offset, .count = hd,
                         .slots = layout->window_slots(), .dt = kBf16};
  };
  write_and_read(window_of(csa), 2 * kBlock, 61, false);
  const std::vector<float> csa_entries = write_and_read(entries_of(*csa.compressor, kBf16), 2 * kBlock / 4, 62, false);
  const std::vector<float> latents = write_and_read(window_of(hca), 2 * kBlock, 64, false);
  const std::vector<float> entries = write_and_read(entries_of(*hca.compressor, kBf16), 2, 65, false);

  // The CSA layer's index keys: stored as records, then gathered for two
  // sequences over the same blocks (keys 0-9 the first's entries 0-9, keys
  // 10-73 the second's 0-63).
  {
    const DeepseekV4PoolRegion& ix = *csa.indexer;
    ASSERT_EQ(ix.entries_format, DeepseekV4ValueFormat::e4m3_scaled);
    const std::int32_t n = 2 * kBlock / 4, dim = static_cast<std::int32_t>(ix.dim);
    const Dev<float> f32_keys(v4_testing::uniform(static_cast<std::size_t>(n) * dim, 63, -3.0f, 3.0f));
    const Dev<std::uint8_t> codes(static_cast<std::size_t>(n) * dim);
    const Dev<float> scales(static_cast<std::size_t>(n));
    cuda::launch_v4_quantize_e4m3_rows(f32_keys.get(), n, dim, codes.get(), scales.get(), nullptr);
    std::vector<std::int32_t> index(static_cast<std::size_t>(n));
    std::iota(index.begin(), index.end(), 0);
    const std::vector<std::int32_t> ids = {0, 1}, begin(index.size(), 0), len(index.size(), 2);
    const Dev<std::int32_t> d_index(index), d_ids(ids), d_begin(begin), d_len(len);
    const cuda::V4BlockTables tables{.block_ids = d_ids.get(), .table_begin = d_begin.get(), .table_len = d_len.get()};
    const V4PagedRegion code_region = entries_of(ix, kE4m3);
    const V4PagedRegion scale_region{.site = V4PagedSite::entry, .offset = ix.scales_offset, .count = 1,
                                     .rate = static_cast<std::int32_t>(ix.rate), .dt = kF32};
    cuda::launch_v4_paged_copy({.blocks = blocks, .tables = tables, .region = code_region, .index = d_index.get(),
                                .dense = codes.get(), .dense_dt = kE4m3, .items = n, .to_blocks = true},
                               nullptr);
    cuda::launch_v4_paged_copy({.blocks = blocks, .tables = tables, .region = scale_region, .index = d_index.get(),
                                .dense = scales.get(), .dense_dt = kF32, .items = n, .to_blocks = true},
                               nullptr);
    const std::int32_t first = 10, num_keys = first + n;
    const std::vector<std::int32_t> key_begin = {0, first, num_keys};
    const Dev<std::int32_t> d_key_begin(key_begin);
    const Dev<std::uint8_t> got_codes(static_cast<std::size_t>(num_keys) * dim);
    const Dev<float> got_scales(static_cast<std::size_t>(num_keys));
    cuda::launch_v4_gather_index_keys_e4m3({.blocks = blocks, .tables = tables, .region = code_region,
                                            .scales_region = scale_region, .sequence_key_begin = d_key_begin.get(),
                                            .num_sequences = 2, .num_keys = num_keys, .codes = got_codes.get(),
                                            .scales = got_scales.get()},
                                           nullptr);
    const std::vector<std::uint8_t> made = codes.host(), got = got_codes.host();
    const std::vector<float> made_scales = scales.host(), got_scale = got_scales.host();
    std::vector<std::uint8_t> want(made.begin(), made.begin() + static_cast<std::ptrdiff_t>(first) * dim);
    want.insert(want.end(), made.begin(), made.end());
    std::vector<float> want_scales(made_scales.begin(), made_scales.begin() + first);
    want_scales.insert(want_scales.end(), made_scales.begin(), made_scales.end());
    EXPECT_EQ(got, want);
    EXPECT_EQ(got_scale, want_scales);
    // The records share the blocks with the other sites: the CSA entries stored before read back unchanged.
    const Dev<float> back(csa_entries.size());
    cuda::launch_v4_paged_copy({.blocks = blocks, .tables = tables, .region = entries_of(*csa.compressor, kBf16),
                                .index = d_index.get(), .dense = back.get(), .dense_dt = kF32, .items = n,
                                .to_blocks = false},
                               nullptr);
    EXPECT_EQ(back.host(), csa_entries);
  }

  // The HCA layer's key sets, from the blocks.
  expect_hca_key_sets(blocks, window_of(hca), entries_of(*hca.compressor, kBf16), latents, entries, hd, window);
}

// --kv-cache-dtype fp8's layout (DeepseekV4KvFormats::cuda_fp8()): the
// quantizer makes the host codec's records byte for byte and leaves each row
// what its record holds (a zero row and rows of large values included); an
// HCA layer's window and entries stored as those records, in two blocks of
// 128, gather as the values they hold, window then every visible entry.
TEST(DeepseekV4PagedFp8DsMla, RecordsAreTheHostCodecsAndTheGatherReadsThem) {
  const ModelConfig config = five_layer_flash();
  auto layout = DeepseekV4KvLayout::make(config, kBlock, DeepseekV4KvFormats::cuda_fp8());
  ASSERT_TRUE(layout.ok()) << layout.error_message();
  const std::int32_t hd = static_cast<std::int32_t>(layout->head_dim()), window = config.deepseek_v4->sliding_window;
  const Fp8DsMlaShape shape{.head_dim = hd, .rope_dim = config.deepseek_v4->qk_rope_head_dim};
  ASSERT_EQ(shape.bytes(), cuda::kV4Fp8DsMlaBytes);
  // Latents of positions 0-255 and the two HCA entries, quantized on the device; checked against the host.
  auto quantize = [&](std::int32_t rows, std::uint64_t seed, std::vector<float>& decoded) {
    std::vector<float> values = v4_testing::uniform(static_cast<std::size_t>(rows) * hd, seed, -3.0f, 3.0f);
    std::fill_n(values.begin(), hd, 0.0f);                                       // a zero row
    for (std::int32_t c = 0; c < hd; ++c) values[static_cast<std::size_t>(hd + c)] *= 1000.0f;  // large values
    Dev<float> d_rows(values);
    auto records = std::make_unique<Dev<std::uint8_t>>(static_cast<std::size_t>(rows) * shape.bytes());
    cuda::launch_v4_quantize_fp8_ds_mla_rows(d_rows.get(), rows, records->get(), nullptr);
    const std::vector<std::uint8_t> got = records->host();
    const std::vector<float> got_rows = d_rows.host();
    decoded.assign(values.size(), 0.0f);
    std::vector<std::uint8_t> want(static_cast<std::size_t>(shape.bytes()));
    for (std::int32_t r = 0; r < rows; ++r) {
      const auto at = static_cast<std::size_t>(r);
      fp8_ds_mla_encode(shape, std::span(values).subspan(at * hd, hd), want);
      EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin() + static_cast<std::ptrdiff_t>(at * want.size())))
          << "record " << r;
      fp8_ds_mla_decode(shape, want, std::span(decoded).subspan(at * hd, hd));
    }
    EXPECT_EQ(got_rows, decoded);
    return records;
  };
  std::vector<float> latents, entries;
  const auto latent_records = quantize(2 * kBlock, 71, latents);
  const auto entry_records = quantize(2, 72, entries);

  const Dev<float> area(std::vector<float>(static_cast<std::size_t>(2 * layout->floats_per_block()), 0.0f));
  const cuda::V4PagedBlocks blocks{.data = area.get(), .floats_per_block = layout->floats_per_block(), .num_blocks = 2,
                                   .block_size = kBlock};
  const DeepseekV4LayerRegion& hca = layout->layer(2);
  ASSERT_TRUE(hca.compressor.has_value());
  ASSERT_EQ(hca.compressor->entries_format, DeepseekV4ValueFormat::fp8_ds_mla);
  const V4PagedRegion window_region{.site = V4PagedSite::window, .offset = hca.window_offset, .count = hd,
                                    .slots = layout->window_slots(), .dt = kE4m3, .fp8_ds_mla = true};
  const V4PagedRegion entry_region{.site = V4PagedSite::entry, .offset = hca.compressor->entries_offset, .count = hd,
                                   .rate = static_cast<std::int32_t>(hca.compressor->rate), .dt = kE4m3,
                                   .fp8_ds_mla = true};
  auto store = [&](const V4PagedRegion& region, const Dev<std::uint8_t>& records, std::int32_t items) {
    std::vector<std::int32_t> index(static_cast<std::size_t>(items)), begin(index.size(), 0), len(index.size(), 2);
    std::iota(index.begin(), index.end(), 0);
    const std::vector<std::int32_t> ids = {0, 1};
    const Dev<std::int32_t> d_index(index), d_begin(begin), d_len(len), d_ids(ids);
    cuda::launch_v4_paged_copy(
        {.blocks = blocks, .tables = {.block_ids = d_ids.get(), .table_begin = d_begin.get(), .table_len = d_len.get()},
         .region = region, .index = d_index.get(), .dense = records.get(), .dense_dt = kE4m3, .items = items,
         .to_blocks = true},
        nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  };
  store(window_region, *latent_records, 2 * kBlock);
  store(entry_region, *entry_records, 2);

  expect_hca_key_sets(blocks, window_region, entry_region, latents, entries, hd, window);
}

TEST(DeepseekV4PagedCudaOps, ModelDefinedCacheAndItsHostTierMoveBlocksByteEqual) {
  auto ops = make_cuda_ops({.scratch_bytes = 16LL << 20});
  ASSERT_TRUE(ops.ok()) << ops.error_message();
  EXPECT_FALSE(cuda_model_defined_kv(**ops).ok());  // nothing allocated yet
  const KvCacheSpec spec{.num_layers = 1, .num_blocks = 8, .block_size_tokens = 128, .num_kv_heads = 1,
                         .head_dim = 1000, .layout = KvCacheLayout::model_defined};
  KvCacheSpec two_layers = spec;
  two_layers.num_layers = 2;
  const Status refused = (*ops)->allocate_kv_cache(two_layers);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error_message().find("one area a block"), std::string::npos) << refused.error_message();
  const Status allocated = (*ops)->allocate_kv_cache(spec);
  ASSERT_TRUE(allocated.ok()) << allocated.error_message();
  auto blocks = cuda_model_defined_kv(**ops);
  ASSERT_TRUE(blocks.ok()) << blocks.error_message();
  EXPECT_EQ(blocks->floats_per_block, 128 * 1000);
  EXPECT_EQ(blocks->num_blocks, 8);
  EXPECT_FALSE(cuda_fill_kv_cache_random(**ops, 1).ok());
  const std::size_t floats = static_cast<std::size_t>(8 * blocks->floats_per_block);
  const std::vector<float> original = v4_testing::uniform(floats, 11, -1.0f, 1.0f);
  ASSERT_EQ(cudaMemcpy(blocks->data, original.data(), floats * 4, cudaMemcpyHostToDevice), cudaSuccess);
  const Status tier = (*ops)->allocate_host_kv_cache(4);
  ASSERT_TRUE(tier.ok()) << tier.error_message();
  auto run = [&](std::vector<KvBlockCopy> copies) {
    std::set<KvCopyId> pending;
    for (const KvBlockCopy& c : copies) pending.insert(c.id);
    auto done = (*ops)->copy_kv_blocks(copies, false);
    ASSERT_TRUE(done.ok()) << done.error_message();
    for (int round = 0; round < 64 && !pending.empty(); ++round) {
      for (const KvCopyCompletion& c : done.value()) {
        EXPECT_TRUE(c.ok);
        pending.erase(c.id);
      }
      if (pending.empty()) break;
      done = (*ops)->copy_kv_blocks({}, true);
      ASSERT_TRUE(done.ok()) << done.error_message();
    }
    EXPECT_TRUE(pending.empty());
  };
  run({{.id = 1, .direction = KvCopyDirection::kDeviceToHost, .device_block = 6, .host_block = 0},
       {.id = 2, .direction = KvCopyDirection::kDeviceToHost, .device_block = 1, .host_block = 3}});
  run({{.id = 3, .direction = KvCopyDirection::kHostToDevice, .device_block = 2, .host_block = 0},
       {.id = 4, .direction = KvCopyDirection::kHostToDevice, .device_block = 7, .host_block = 3}});
  std::vector<float> after(floats);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(after.data(), blocks->data, floats * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  const std::size_t per = static_cast<std::size_t>(blocks->floats_per_block);
  auto block = [&](const std::vector<float>& v, int b) { return std::vector<float>(v.begin() + b * per, v.begin() + (b + 1) * per); };
  for (int b = 0; b < 8; ++b) {
    const int source = b == 2 ? 6 : b == 7 ? 1 : b;
    EXPECT_EQ(block(after, b), block(original, source)) << "block " << b;
  }
}

}  // namespace
}  // namespace sluice
