// The step plan of a batched DeepSeek-V4 forward (model/deepseek_v4_step_plan.h)
// run on the host against the reference's row-by-row compression
// (DeepseekV4Reference::compress / emit_entry, restated here over the public
// DeepseekV4SequenceState): two copies of the same paged blocks, three
// sequences stepped together in chunks of 1 to 64 tokens (decode rows, chunks
// that split windows, chunks of many windows, chunks across block boundaries),
// CSA's overlapping compressors (rate 4, its indexer's too) and HCA's (rate 16),
// blocks of 16 and 32 tokens. After every step the two caches are byte-equal:
// the same entries, and the same pool states in every block. The same for
// the window latents a block keeps (DeepseekV4WindowPlan).
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "sluice/backend/cpu/cpu_ops.h"
#include "sluice/backend/cpu/deepseek_v4_ops.h"
#include "sluice/backend/rope.h"
#include "sluice/common/rng.h"
#include "sluice/model/deepseek_v4_kv_layout.h"
#include "sluice/model/deepseek_v4_paged_state.h"
#include "sluice/model/deepseek_v4_pool_fold.h"
#include "sluice/model/deepseek_v4_step_plan.h"
#include "../support/deepseek_v4_flash_config.h"

namespace sluice {
namespace {

constexpr std::int32_t kSequences = 3;
constexpr std::int32_t kMaxTokens = 160;

// Two layers (CSA at 4, HCA at 16) at small widths.
ModelConfig small_config() {
  nlohmann::json j = testing::deepseek_v4_flash_config_json();
  j["num_hidden_layers"] = 2;
  j.erase("compress_ratios");  // transformers' spelling instead, which allows any HCA rate
  j["layer_types"] = nlohmann::json::array({"compressed_sparse_attention", "heavily_compressed_attention"});
  j["compress_rates"] = {{"compressed_sparse_attention", 4}, {"heavily_compressed_attention", 16}};
  j["num_hash_layers"] = 1;
  j["head_dim"] = 64;
  j["qk_rope_head_dim"] = 16;
  j["index_head_dim"] = 32;
  j["sliding_window"] = 8;
  auto config = parse_model_config(j.dump(), "config.json");
  EXPECT_TRUE(config.ok()) << config.error_message();
  return *config;
}

std::vector<float> uniform(std::size_t n, std::uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<float> out(n);
  for (float& v : out) v = static_cast<float>(2.0 * rng.uniform() - 1.0);
  return out;
}

// One compressor of one layer: its weights and every position's projections.
struct Pool {
  std::int32_t layer;
  DeepseekV4Pool which;
  DeepseekV4PoolRegion region;
  std::vector<float> ape, norm;
  std::vector<std::vector<float>> kv, gate;  // [sequence][position * width]
};

// A token's projections for entry `e` of its pool: its value and gate
// (with the position bias) rows [dim], as DeepseekV4Reference::compress
// takes them.
struct TokenFeed {
  std::span<const float> values;
  std::vector<float> gates;
};
TokenFeed feed_of(const Pool& p, std::size_t sequence, std::int64_t t, std::int64_t e) {
  const DeepseekV4PoolRegion& r = p.region;
  const std::int64_t half = r.overlapping() && t / r.rate == e ? r.dim : 0;
  const std::int64_t slot = t % r.rate;
  TokenFeed f{.values = std::span<const float>(p.kv[sequence]).subspan(static_cast<std::size_t>(t * r.width + half),
                                                                      static_cast<std::size_t>(r.dim)),
              .gates = std::vector<float>(static_cast<std::size_t>(r.dim))};
  for (std::int64_t c = 0; c < r.dim; ++c)
    f.gates[static_cast<std::size_t>(c)] = p.gate[sequence][static_cast<std::size_t>(t * r.width + half + c)] +
                                           p.ape[static_cast<std::size_t>(slot * r.width + half + c)];
  return f;
}

// emit_entry's arithmetic: the pool's entry, normed, roped at its first position.
std::vector<float> finish_entry(const Pool& p, std::span<const float> state, std::int64_t window,
                                const RotaryTable& rope) {
  const cpu::DeepseekV4CpuKernels k;
  const DeepseekV4PoolRegion& r = p.region;
  std::vector<float> entry(static_cast<std::size_t>(r.dim));
  deepseek_v4_pool_finish(state, entry);
  k.rms_norm(entry, r.dim, p.norm, 1e-6f);
  const std::int64_t position = window * r.rate;
  k.rope_tail(entry, r.dim, 1, std::span(&position, 1), rope, false);
  return entry;
}

// The cache a runner sizes by budget holds the layout's f32 floats on a bf16
// backend too (CUDA): sized at the activations' 2 bytes, `serve --device
// cuda` asked CudaOps for twice the device's memory (session 22, on the H200).
TEST(DeepseekV4KvBlock, AModelDefinedBlockIsF32WhateverTheActivations) {
  auto layout = DeepseekV4KvLayout::make(small_config(), 64);
  ASSERT_TRUE(layout.ok()) << layout.error_message();
  const KvCacheSpec spec{.num_layers = 1, .num_blocks = 1, .block_size_tokens = 64, .num_kv_heads = 1,
                         .head_dim = static_cast<std::int32_t>((layout->floats_per_block() + 63) / 64),
                         .layout = KvCacheLayout::model_defined};
  for (DType activations : {DType::bf16, DType::f32}) {
    EXPECT_EQ(spec.value_dtype(activations), DType::f32);
    EXPECT_GE(spec.bytes_per_block(spec.value_dtype(activations)), layout->floats_per_block() * 4);
  }
  const KvCacheSpec dense{.num_layers = 2, .num_blocks = 1, .block_size_tokens = 16, .num_kv_heads = 8, .head_dim = 128};
  EXPECT_EQ(dense.value_dtype(DType::bf16), DType::bf16);
}

// Two CPU caches of the layout's blocks, one the reference writes row by
// row and one a plan writes, and each sequence's block table: every third
// block from the top (shuffled; the lowest blocks unused). plan_ops is null
// when a cache could not be allocated.
struct TwoCaches {
  explicit TwoCaches(const DeepseekV4KvLayout& layout) {
    const std::int32_t block_size = layout.block_size_tokens();
    const std::int32_t blocks_per_sequence = (kMaxTokens + block_size - 1) / block_size;
    num_blocks = kSequences * blocks_per_sequence + 2;
    const KvCacheSpec spec{.num_layers = 1, .num_blocks = num_blocks, .block_size_tokens = block_size,
                           .num_kv_heads = 1,
                           .head_dim = static_cast<std::int32_t>((layout.floats_per_block() + block_size - 1) / block_size),
                           .layout = KvCacheLayout::model_defined};
    reference_ops = make_cpu_ops({.num_threads = 1});
    plan_ops = make_cpu_ops({.num_threads = 1});
    if (!reference_ops->allocate_kv_cache(spec).ok() || !plan_ops->allocate_kv_cache(spec).ok()) plan_ops.reset();
    tables.resize(kSequences);
    for (std::int32_t s = 0; s < kSequences; ++s)
      for (std::int32_t b = 0; b < blocks_per_sequence; ++b) tables[s].push_back(num_blocks - 1 - (b * kSequences + s));
  }
  std::int32_t num_blocks = 0;
  std::unique_ptr<Ops> reference_ops, plan_ops;
  std::vector<std::vector<BlockId>> tables;
};

class DeepseekV4StepPlanTest : public ::testing::TestWithParam<std::int32_t> {};

TEST_P(DeepseekV4StepPlanTest, PlannedStepsLeaveTheReferencesBytes) {
  const std::int32_t block_size = GetParam();
  const ModelConfig config = small_config();
  auto layout = DeepseekV4KvLayout::make(config, block_size);
  ASSERT_TRUE(layout.ok()) << layout.error_message();
  TwoCaches caches(*layout);
  ASSERT_NE(caches.plan_ops, nullptr);
  auto& [num_blocks, ref_ops, plan_ops, tables] = caches;

  std::vector<Pool> pools;
  std::uint64_t seed = 1;
  for (std::int32_t l = 0; l < 2; ++l) {
    const DeepseekV4LayerRegion& lr = layout->layer(static_cast<std::size_t>(l));
    for (DeepseekV4Pool which : {DeepseekV4Pool::compressor, DeepseekV4Pool::indexer}) {
      const std::optional<DeepseekV4PoolRegion>& r = which == DeepseekV4Pool::compressor ? lr.compressor : lr.indexer;
      if (!r) continue;
      Pool p{.layer = l, .which = which, .region = *r};
      p.ape = uniform(static_cast<std::size_t>(r->rate * r->width), ++seed);
      p.norm = uniform(static_cast<std::size_t>(r->dim), ++seed);
      for (std::int32_t s = 0; s < kSequences; ++s) {
        p.kv.push_back(uniform(static_cast<std::size_t>(kMaxTokens * r->width), ++seed));
        p.gate.push_back(uniform(static_cast<std::size_t>(kMaxTokens * r->width), ++seed));
      }
      pools.push_back(std::move(p));
    }
  }
  ASSERT_EQ(pools.size(), 3u);  // CSA's compressor and indexer, HCA's compressor
  const RotaryTable rope{.inv_freq = rope_inverse_frequencies({.head_dim = 16, .theta = 160000.0f})};

  // The schedule: each step gives each sequence a chunk (0: not in the step).
  const std::vector<std::int32_t> sizes = {1, 1, 1, 1, 1, 1, 2, 3, 5, 7, 8, 15, 16, 17, 33, 64, 0};
  SplitMix64 rng(block_size);
  std::vector<std::int32_t> done(kSequences, 0);
  std::int64_t steps = 0, entries = 0, multi_window_chunks = 0;
  while (*std::min_element(done.begin(), done.end()) < kMaxTokens) {
    StepLayout step;
    for (std::int32_t s = 0; s < kSequences; ++s) {
      const std::int32_t n = std::min(sizes[rng.next() % sizes.size()], kMaxTokens - done[s]);
      if (n == 0) continue;
      step.sequences.push_back({.row_begin = step.num_rows(), .num_rows = n, .num_computed_tokens = done[s],
                                .block_table = tables[s]});
      for (std::int32_t i = 0; i < n; ++i) {
        step.token_ids.push_back(0);
        step.positions.push_back(done[s] + i);
      }
      if (n > 32) ++multi_window_chunks;
    }
    if (step.sequences.empty()) continue;
    const DeepseekV4StepTables t = DeepseekV4StepTables::make(step);
    ASSERT_EQ(t.positions, step.positions);
    for (const Pool& p : pools) {
      const DeepseekV4PoolRegion& r = p.region;
      // The reference: row by row, each token into its entries' states, each
      // entry emitted at its window's last token.
      for (const SequenceLayout& seq : step.sequences) {
        const auto id = static_cast<std::size_t>(std::find(tables.begin(), tables.end(), seq.block_table) - tables.begin());
        DeepseekV4PagedState state(*layout, *ref_ops, tables[id]);
        for (std::int64_t pos = seq.num_computed_tokens; pos < seq.num_computed_tokens + seq.num_rows; ++pos) {
          const std::int64_t w = pos / r.rate;
          for (std::int64_t e : {w, w + 1}) {
            if (e == w + 1 && !r.overlapping()) continue;
            const std::span<float> at = continue_pool_state(state, p.layer, p.which, e, pos, r.first_token(e));
            const TokenFeed f = feed_of(p, id, pos, e);
            deepseek_v4_pool_fold(at, f.values, f.gates);
          }
          if (pos == r.last_token(w))
            std::ranges::copy(finish_entry(p, state.pool_state(p.layer, p.which, w, pos), w, rope),
                              state.entry(p.layer, p.which, w).begin());
        }
      }
      // The plan: every item from the blocks as they were before the step, then its stores and entries.
      const DeepseekV4CompressPlan plan = DeepseekV4CompressPlan::make(t, static_cast<std::int32_t>(r.rate),
                                                                       r.overlapping(), block_size);
      auto state_of = [&](std::int32_t sequence) {
        return DeepseekV4PagedState(*layout, *plan_ops, step.sequences[static_cast<std::size_t>(sequence)].block_table);
      };
      auto id_of = [&](std::int32_t sequence) {
        return static_cast<std::size_t>(std::find(tables.begin(), tables.end(),
                                                  step.sequences[static_cast<std::size_t>(sequence)].block_table) -
                                        tables.begin());
      };
      std::vector<std::vector<float>> folded;
      for (std::int32_t i = 0; i < plan.num_items(); ++i) {
        const std::int32_t q = plan.item_sequence[i], e = plan.item_entry[i], t0 = plan.item_first_token[i];
        ASSERT_EQ(t.positions[static_cast<std::size_t>(plan.item_first_row[i])], t0);
        ASSERT_EQ(t.row_sequence[static_cast<std::size_t>(plan.item_first_row[i] + plan.item_count[i] - 1)], q);
        std::vector<float> pool_state(static_cast<std::size_t>(3 * r.dim));
        if (plan.item_flags[i] & DeepseekV4CompressPlan::kReadState) {
          DeepseekV4PagedState state = state_of(q);
          std::ranges::copy(state.pool_state(p.layer, p.which, e, t0 - 1), pool_state.begin());
        } else {
          ASSERT_EQ(t0, r.first_token(e)) << "an item that opens its entry starts at its first token";
          deepseek_v4_pool_init(pool_state);
        }
        for (std::int64_t tok = t0; tok < t0 + plan.item_count[i]; ++tok) {
          const TokenFeed f = feed_of(p, id_of(q), tok, e);
          deepseek_v4_pool_fold(pool_state, f.values, f.gates);
        }
        folded.push_back(std::move(pool_state));
      }
      std::set<std::tuple<std::int32_t, std::int64_t, std::int64_t>> stored;  // (sequence, block, slot)
      for (std::int32_t i = 0; i < plan.num_items(); ++i) {
        const std::int32_t q = plan.item_sequence[i], e = plan.item_entry[i];
        const std::int64_t last = plan.item_first_token[i] + plan.item_count[i] - 1;
        DeepseekV4PagedState state = state_of(q);
        if (plan.item_flags[i] & DeepseekV4CompressPlan::kStoreState) {
          EXPECT_TRUE(stored.emplace(q, last / block_size, e % r.slots).second) << "two stores into one slot";
          std::ranges::copy(folded[static_cast<std::size_t>(i)], state.pool_state(p.layer, p.which, e, last).begin());
        }
        if (plan.item_flags[i] & DeepseekV4CompressPlan::kEmit) {
          ASSERT_EQ(last, r.last_token(e));
          const std::int32_t row = plan.item_emit_row[i];
          ASSERT_EQ(plan.entry_index[static_cast<std::size_t>(row)], e);
          ASSERT_EQ(plan.entry_position[static_cast<std::size_t>(row)], e * r.rate);
          std::ranges::copy(finish_entry(p, folded[static_cast<std::size_t>(i)], e, rope),
                            state.entry(p.layer, p.which, e).begin());
          ++entries;
        } else {
          ASSERT_EQ(plan.item_emit_row[i], -1);
        }
      }
    }
    for (const SequenceLayout& seq : step.sequences) {
      const auto id = static_cast<std::size_t>(std::find(tables.begin(), tables.end(), seq.block_table) - tables.begin());
      done[id] += seq.num_rows;
    }
    ++steps;
    for (BlockId b = 0; b < num_blocks; ++b) {
      const std::span<float> want = ref_ops->model_defined_kv_block(b), got = plan_ops->model_defined_kv_block(b);
      ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size_bytes()), 0) << "block " << b << " after step " << steps;
    }
  }
  EXPECT_GT(steps, 12);
  EXPECT_GT(multi_window_chunks, 0);
  // Every window of every sequence, once: CSA's two pools at rate 4, HCA's at 16.
  EXPECT_EQ(entries, kSequences * (2 * kMaxTokens / 4 + kMaxTokens / 16));
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, DeepseekV4StepPlanTest, ::testing::Values(16, 32));

// The window plan against what each row must see: three sequences stepped in
// random chunks, blocks of 16 and 32 tokens keeping their last 8 latents. Every
// row's window, read as the device gathers it (positions before the step from
// the blocks, the step's own from its rows), is the latents of its last 8
// positions; and after the plan's stores the blocks are byte-equal to the
// reference's row-by-row stores.
TEST_P(DeepseekV4StepPlanTest, PlannedWindowsAreWhatEachRowSees) {
  const std::int32_t block_size = GetParam();
  const ModelConfig config = small_config();
  auto layout = DeepseekV4KvLayout::make(config, block_size);
  ASSERT_TRUE(layout.ok()) << layout.error_message();
  const std::int32_t slots = layout->window_slots(), window = config.deepseek_v4->sliding_window;
  ASSERT_EQ(slots, 8);
  ASSERT_LT(slots, block_size);  // slots are reused within a block
  const std::int64_t hd = layout->head_dim();
  TwoCaches caches(*layout);
  ASSERT_NE(caches.plan_ops, nullptr);
  auto& [num_blocks, ref_ops, plan_ops, tables] = caches;
  std::vector<std::vector<float>> latents;  // [sequence][position * hd]
  for (std::int32_t s = 0; s < kSequences; ++s) latents.push_back(uniform(static_cast<std::size_t>(kMaxTokens * hd), 100 + s));
  auto latent = [&](std::int32_t s, std::int64_t position) {
    return std::span<const float>(latents[static_cast<std::size_t>(s)]).subspan(static_cast<std::size_t>(position * hd),
                                                                                 static_cast<std::size_t>(hd));
  };

  const std::vector<std::int32_t> sizes = {1, 1, 1, 2, 3, 7, 8, 9, 15, 16, 17, 33, 0};
  SplitMix64 rng(block_size + 7);
  std::vector<std::int32_t> done(kSequences, 0);
  std::int64_t steps = 0, rows_checked = 0, reused_slots = 0;
  while (*std::min_element(done.begin(), done.end()) < kMaxTokens) {
    StepLayout step;
    std::vector<std::int32_t> ids;
    for (std::int32_t s = 0; s < kSequences; ++s) {
      const std::int32_t n = std::min(sizes[rng.next() % sizes.size()], kMaxTokens - done[s]);
      if (n == 0) continue;
      step.sequences.push_back({.row_begin = step.num_rows(), .num_rows = n, .num_computed_tokens = done[s],
                                .block_table = tables[s]});
      ids.push_back(s);
      for (std::int32_t i = 0; i < n; ++i) {
        step.token_ids.push_back(0);
        step.positions.push_back(done[s] + i);
      }
    }
    if (step.sequences.empty()) continue;
    const DeepseekV4StepTables t = DeepseekV4StepTables::make(step);
    const DeepseekV4WindowPlan plan = DeepseekV4WindowPlan::make(t, slots, block_size);
    ASSERT_EQ(plan.row_first_row.size(), t.positions.size());
    // The gather: every row's window, the step's own positions from its rows.
    for (std::size_t r = 0; r < t.positions.size(); ++r) {
      const std::int32_t q = t.row_sequence[r], id = ids[static_cast<std::size_t>(q)];
      const std::int32_t first_row = plan.row_first_row[r];
      ASSERT_EQ(first_row, t.sequence_row_begin[static_cast<std::size_t>(q)]);
      ASSERT_EQ(t.positions[static_cast<std::size_t>(first_row)], done[static_cast<std::size_t>(id)]);
      DeepseekV4PagedState state(*layout, *plan_ops, tables[static_cast<std::size_t>(id)]);
      const std::int64_t p = t.positions[r];
      for (std::int64_t u = std::max<std::int64_t>(0, p - window + 1); u <= p; ++u) {
        const std::span<const float> seen =
            u >= t.positions[static_cast<std::size_t>(first_row)]
                ? latent(id, u)  // the step's row first_row + (u - first position): this position's latent
                : std::span<const float>(state.window_latent(0, u));
        ASSERT_TRUE(std::ranges::equal(seen, latent(id, u))) << "row " << r << " position " << u;
      }
      ++rows_checked;
    }
    // The stores: the reference writes every row in order, the plan its store rows.
    for (std::size_t r = 0; r < t.positions.size(); ++r) {
      const std::int32_t id = ids[static_cast<std::size_t>(t.row_sequence[r])];
      DeepseekV4PagedState state(*layout, *ref_ops, tables[static_cast<std::size_t>(id)]);
      std::ranges::copy(latent(id, t.positions[r]), state.window_latent(0, t.positions[r]).begin());
    }
    for (std::int32_t r : plan.store_row) {
      const std::int32_t id = ids[static_cast<std::size_t>(t.row_sequence[static_cast<std::size_t>(r)])];
      DeepseekV4PagedState state(*layout, *plan_ops, tables[static_cast<std::size_t>(id)]);
      const std::int64_t p = t.positions[static_cast<std::size_t>(r)];
      std::ranges::copy(latent(id, p), state.window_latent(0, p).begin());
    }
    // One store per slot the step touches (the device stores them at once).
    std::set<std::tuple<std::int32_t, std::int64_t, std::int64_t>> touched, stored;
    for (std::size_t r = 0; r < t.positions.size(); ++r)
      touched.emplace(t.row_sequence[r], t.positions[r] / block_size, t.positions[r] % slots);
    for (std::int32_t r : plan.store_row) {
      const std::int64_t p = t.positions[static_cast<std::size_t>(r)];
      EXPECT_TRUE(stored.emplace(t.row_sequence[static_cast<std::size_t>(r)], p / block_size, p % slots).second)
          << "two stores into one slot, row " << r;
    }
    EXPECT_EQ(stored, touched);
    reused_slots += static_cast<std::int64_t>(t.positions.size() - plan.store_row.size());
    for (std::size_t q = 0; q < ids.size(); ++q) done[static_cast<std::size_t>(ids[q])] += step.sequences[q].num_rows;
    ++steps;
    for (BlockId b = 0; b < num_blocks; ++b) {
      const std::span<float> want = ref_ops->model_defined_kv_block(b), got = plan_ops->model_defined_kv_block(b);
      ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size_bytes()), 0) << "block " << b << " after step " << steps;
    }
  }
  EXPECT_GT(steps, 12);
  EXPECT_EQ(rows_checked, kSequences * kMaxTokens);
  EXPECT_GT(reused_slots, 0);  // some chunks had two rows for one slot of one block
}

TEST(DeepseekV4StepPlan, ADecodeRowFoldsIntoTheEntriesItFeeds) {
  // One sequence's decode row at 11, CSA rate 4, blocks of 16: it continues
  // entry 2 (opened at 4) and entry 3 (opened at 8) from their states before
  // the step, stores both, and closes entry 2.
  StepLayout step;
  step.sequences.push_back({.row_begin = 0, .num_rows = 1, .num_computed_tokens = 11, .block_table = {3, 1}});
  step.token_ids = {0};
  step.positions = {11};
  using Plan = DeepseekV4CompressPlan;
  const Plan plan = Plan::make(DeepseekV4StepTables::make(step), 4, true, 16);
  EXPECT_EQ(plan.item_entry, (std::vector<std::int32_t>{2, 3}));
  EXPECT_EQ(plan.item_first_token, (std::vector<std::int32_t>{11, 11}));
  EXPECT_EQ(plan.item_count, (std::vector<std::int32_t>{1, 1}));
  EXPECT_EQ(plan.item_flags, (std::vector<std::int32_t>{Plan::kReadState | Plan::kStoreState | Plan::kEmit,
                                                        Plan::kReadState | Plan::kStoreState}));
  EXPECT_EQ(plan.entry_index, (std::vector<std::int32_t>{2}));
  // The row at 12 opens entry 4 (its first half) and continues entry 3.
  step.sequences[0].num_computed_tokens = 12;
  step.positions = {12};
  const Plan opening = Plan::make(DeepseekV4StepTables::make(step), 4, true, 16);
  EXPECT_EQ(opening.item_entry, (std::vector<std::int32_t>{3, 4}));
  EXPECT_EQ(opening.item_flags, (std::vector<std::int32_t>{Plan::kReadState | Plan::kStoreState, Plan::kStoreState}));
  EXPECT_TRUE(opening.entry_index.empty());
  // A chunk 14..17 across the block boundary at 16: entry 4 (tokens 12..19)
  // stores its state in both blocks; entry 3 closes at 15, and entry 5, in
  // its slot, opens at 16 in the next block, so entry 3 stores too.
  step.sequences[0].num_computed_tokens = 14;
  step.sequences[0].num_rows = 4;
  step.token_ids = {0, 0, 0, 0};
  step.positions = {14, 15, 16, 17};
  const Plan crossing = Plan::make(DeepseekV4StepTables::make(step), 4, true, 16);
  EXPECT_EQ(crossing.item_entry, (std::vector<std::int32_t>{3, 4, 4, 5}));
  EXPECT_EQ(crossing.item_first_token, (std::vector<std::int32_t>{14, 14, 14, 16}));
  EXPECT_EQ(crossing.item_count, (std::vector<std::int32_t>{2, 2, 4, 2}));
  EXPECT_EQ(crossing.item_flags,
            (std::vector<std::int32_t>{Plan::kReadState | Plan::kStoreState | Plan::kEmit,
                                       Plan::kReadState | Plan::kStoreState, Plan::kReadState | Plan::kStoreState,
                                       Plan::kStoreState}));
  // Within one block a closing entry's slot goes to the one that opens after
  // it: 4..9 closes entry 1 at 7 (emitted, its state not stored), entry 3
  // opens at 8 in its slot; entry 2 opens at 4, with the step.
  step.sequences[0].num_computed_tokens = 4;
  step.sequences[0].num_rows = 6;
  step.token_ids.assign(6, 0);
  step.positions = {4, 5, 6, 7, 8, 9};
  const Plan inside = Plan::make(DeepseekV4StepTables::make(step), 4, true, 16);
  EXPECT_EQ(inside.item_entry, (std::vector<std::int32_t>{1, 2, 3}));
  EXPECT_EQ(inside.item_flags,
            (std::vector<std::int32_t>{Plan::kReadState | Plan::kEmit, Plan::kStoreState, Plan::kStoreState}));
}

TEST(DeepseekV4IndexPlan, EachRowSeesItsSequencesEntriesUpToItsOwnWindow) {
  // A prefill chunk of 10 rows from 0 and a decode row at 41, CSA rate 4: the
  // chunk's rows see 0, 0, 0, 1, 1, 1, 1, 2, 2, 2 entries (the window a row
  // closes included), the decode row 10; the pool holds A's 2 keys, then B's 10.
  StepLayout step;
  step.sequences.push_back({.row_begin = 0, .num_rows = 10, .num_computed_tokens = 0, .block_table = {4}});
  step.sequences.push_back({.row_begin = 10, .num_rows = 1, .num_computed_tokens = 41, .block_table = {0, 2, 7}});
  for (std::int32_t i = 0; i < 10; ++i) step.positions.push_back(i);
  step.positions.push_back(41);
  step.token_ids.assign(11, 0);
  const DeepseekV4IndexPlan plan = DeepseekV4IndexPlan::make(DeepseekV4StepTables::make(step), 4);
  EXPECT_EQ(plan.row_num_visible, (std::vector<std::int32_t>{0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 10}));
  EXPECT_EQ(plan.row_key_begin, (std::vector<std::int32_t>{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}));
  EXPECT_EQ(plan.sequence_key_begin, (std::vector<std::int32_t>{0, 2, 12}));
  EXPECT_EQ(plan.num_keys(), 12);
  EXPECT_EQ(plan.max_visible, 10);
}

}  // namespace
}  // namespace sluice
