// The roofline cost model against arithmetic done here from the published
// shapes (independent of the profile code), the device anchors in
// /work/shared/DEVICE.md, and its qualitative laws: monotone in batch, chunk
// and position; MoE weight reads saturate when every expert is touched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>

#include "sluice/common/rng.h"
#include "sluice/sim/roofline_cost_model.h"
#include "sluice/sim/skewed_cost_model.h"

namespace sluice::sim {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

ModelProfile profile(const char* name) {
  auto p = find_profile(name);
  EXPECT_TRUE(p.has_value()) << name;
  return *p;
}

StepShape decode_batch(std::int32_t batch, std::int32_t position) {
  StepShape shape;
  shape.sequences.assign(static_cast<std::size_t>(batch), {.num_new_tokens = 1, .num_computed_tokens = position});
  return shape;
}

StepShape chunk(std::int32_t tokens, std::int32_t position) {
  return {.sequences = {{.num_new_tokens = tokens, .num_computed_tokens = position}}};
}

// Llama-3-8B from its config.json: every weight a decode step streams (all but
// the embedding table, which is looked up row by row), bf16.
double llama_3_8b_streamed_weight_bytes() {
  const double hidden = 4096, kv = 1024, inter = 14336, vocab = 128256, layers = 32;
  const double per_layer = hidden * hidden * 2 + hidden * kv * 2 + 3 * hidden * inter + 2 * hidden;
  return 2.0 * (layers * per_layer + vocab * hidden);
}

TEST(RooflineCostModel, LlamaDecodeBatchOneIsWeightBandwidthBound) {
  const HardwareSpec hw = h200();
  const RooflineCostModel model(profile("llama-3-8b"), hw, {});
  const StepCost cost = model.predict(decode_batch(1, 0));
  const double bytes = llama_3_8b_streamed_weight_bytes();
  EXPECT_NEAR(cost.weight_bytes_per_gpu, bytes, bytes * 1e-6);
  const double weight_ms = 1e3 * bytes / (4.3e12 * hw.efficiency.weight_bandwidth);
  EXPECT_NEAR(cost.gemm_ms, weight_ms, weight_ms * 1e-6);
  // Everything else (attention at position 0, overhead) is small next to it.
  EXPECT_GT(cost.total_ms(), weight_ms);
  EXPECT_LT(cost.total_ms(), weight_ms * 1.15);
  // DEVICE.md: llama.cpp decodes this shape at 209 tok/s (71% of HBM); a good
  // engine at ~85% of HBM reaches ~240. The prediction sits between.
  const double tokens_per_s = 1e3 / cost.total_ms();
  EXPECT_GT(tokens_per_s, 200);
  EXPECT_LT(tokens_per_s, 250);
}

// The measured H200 spec moved to an H100 SXM as the runtime reports it
// (3.35 TB/s by clock and bus, 80 GB, 132 SMs at 1,980 MHz): batch-1 decode
// reads its weights at 4.3 x 3.35 / 4.8 = 3.0 TB/s, what the H100's copy
// measures (2.97-2.99 TB/s, S30/S31), and prefill's FLOPs cost the same.
TEST(RooflineCostModel, TheH200SpecMovesToTheCardItRunsOn) {
  const HardwareSpec h200 = h200_sluice_cuda();
  const HardwareSpec h100 = on_device(h200, {.name = "NVIDIA H100 80GB HBM3",
                                             .hbm_spec_bytes_per_s = 3.352e12,
                                             .memory_bytes = 85.0e9,
                                             .num_sms = 132,
                                             .sm_clock_hz = 1.98e9});
  EXPECT_EQ(h100.name, "NVIDIA H100 80GB HBM3, as " + h200.name + " scaled to it");
  EXPECT_NEAR(h100.hbm_bytes_per_s, 3.0e12, 0.01e12);
  EXPECT_EQ(h100.hbm_capacity_bytes, 85.0e9);
  EXPECT_EQ(h100.peak_bf16_flops_per_s, h200.peak_bf16_flops_per_s);
  EXPECT_EQ(h100.efficiency.weight_bandwidth, h200.efficiency.weight_bandwidth);
  const RooflineCostModel on_h200(profile("llama-3-8b"), h200, {}), on_h100(profile("llama-3-8b"), h100, {});
  const StepCost decode_h200 = on_h200.predict(decode_batch(1, 0)), decode_h100 = on_h100.predict(decode_batch(1, 0));
  EXPECT_NEAR(decode_h100.gemm_ms / decode_h200.gemm_ms, 4.8 / 3.352, 1e-3);
  EXPECT_NEAR(on_h100.predict(chunk(8192, 0)).gemm_ms, on_h200.predict(chunk(8192, 0)).gemm_ms, 1e-9);
  // A card with fewer SMs at a lower clock computes less; facts not reported keep the H200's.
  const HardwareSpec small = on_device(h200, {.num_sms = 66, .sm_clock_hz = 1.5e9});
  EXPECT_NEAR(small.peak_fp8_flops_per_s / h200.peak_fp8_flops_per_s, 66 * 1.5 / (132 * 1.98), 1e-12);
  EXPECT_EQ(small.hbm_bytes_per_s, h200.hbm_bytes_per_s);
  EXPECT_EQ(small.name, h200.name);
}

TEST(RooflineCostModel, LlamaDecodeAtContextReadsTheWholeKv) {
  const RooflineCostModel model(profile("llama-3-8b"), h200(), {});
  // 2 (K,V) x 32 layers x 8 kv heads x 128 x 2 bytes per position.
  const double kv_per_token = 2.0 * 32 * 8 * 128 * 2;
  const StepCost at_4k = model.predict(decode_batch(1, 4096));
  // Reads 4097 positions, writes 1.
  EXPECT_NEAR(at_4k.kv_bytes_per_gpu, kv_per_token * (4097 + 1), 1.0);
  EXPECT_GT(at_4k.total_ms(), model.predict_step_ms(decode_batch(1, 0)));
  // DEVICE.md: llama.cpp 198 tok/s at 4k context; we predict a better engine.
  EXPECT_GT(1e3 / at_4k.total_ms(), 198);
}

TEST(RooflineCostModel, AttentionCostGrowsWithPosition) {
  const RooflineCostModel model(profile("llama-3-8b"), h200(), {});
  const StepCost at_0 = model.predict(chunk(4096, 0));
  const StepCost at_250k = model.predict(chunk(4096, 250000));
  // Causal attention FLOPs: 4 x heads x head_dim x layers per (query, visible
  // position); queries at p..p+n-1 see p+1..p+n positions.
  const double per_pair = 4.0 * 32 * 128 * 32;
  const auto pairs = [](double n, double p) { return n * p + n * (n + 1) / 2; };
  EXPECT_NEAR(at_0.attention_flops_per_gpu, per_pair * pairs(4096, 0), 1e3);
  EXPECT_NEAR(at_250k.attention_flops_per_gpu, per_pair * pairs(4096, 250000), 1e6);
  // The same 4k tokens cost far more at 250k than at 0: a token budget does not bound time.
  EXPECT_GT(at_250k.total_ms(), 5 * at_0.total_ms());
  EXPECT_DOUBLE_EQ(at_250k.gemm_ms, at_0.gemm_ms);
}

// The prefill kernel runs whole 128-row query tiles: every row of a tile is
// computed against the keys up to the tile's last query, padding included.
// Counted here tile by tile, independently of the model's closed form.
TEST(RooflineCostModel, PrefillAttentionIsPricedInWholeQueryTiles) {
  HardwareSpec hw = h200();
  hw.attention_query_tile_rows = 128;
  const RooflineCostModel tiled(profile("llama-3-8b"), hw, {});
  hw.attention_query_tile_rows = 1;
  const RooflineCostModel exact(profile("llama-3-8b"), hw, {});
  const double per_pair = 4.0 * 32 * 128 * 32;
  const auto tile_pairs = [](std::int32_t n, double p) {
    double pairs = 0;
    for (std::int32_t start = 0; start < n; start += 128) pairs += 128.0 * (p + std::min(start + 128, n));
    return pairs;
  };
  for (const double position : {0.0, 4096.0, 100000.0}) {
    for (const std::int32_t n : {16, 128, 200, 1000, 4096}) {
      const auto p = static_cast<std::int32_t>(position);
      const double expected = per_pair * tile_pairs(n, position);
      EXPECT_NEAR(tiled.predict(chunk(n, p)).attention_flops_per_gpu, expected, expected * 1e-9)
          << n << " rows at " << p;
      // Without tiles: exact causal pairs.
      const double pairs = double(n) * position + double(n) * (n + 1) / 2;
      EXPECT_NEAR(exact.predict(chunk(n, p)).attention_flops_per_gpu, per_pair * pairs, per_pair * pairs * 1e-9);
    }
  }
  // A decode row is not tiled (the split-KV kernel runs it).
  EXPECT_DOUBLE_EQ(tiled.predict(decode_batch(4, 100000)).attention_flops_per_gpu,
                   exact.predict(decode_batch(4, 100000)).attention_flops_per_gpu);
  // So a 16-row chunk over a long prefix costs as much attention as 128 rows.
  EXPECT_NEAR(tiled.predict(chunk(16, 100000)).attention_flops_per_gpu,
              tiled.predict(chunk(128, 100000)).attention_flops_per_gpu,
              per_pair * 128 * 112);
}

// Chunks of at least attention_long_chunk_rows rows run their attention math
// at attention_compute_long_chunks (cuDNN runs them whole), shorter ones at
// efficiency.attention_compute: same FLOPs, time by the efficiency of each.
TEST(RooflineCostModel, LongChunksTakeTheirOwnAttentionEfficiency) {
  HardwareSpec hw = h200();
  hw.efficiency.attention_compute = 0.40;
  hw.attention_long_chunk_rows = 1024;
  hw.attention_compute_long_chunks = 0.80;
  const RooflineCostModel split(profile("llama-3-8b"), hw, {});
  hw.attention_long_chunk_rows = 0;
  const RooflineCostModel one(profile("llama-3-8b"), hw, {});
  // 2048 rows over 100k: attention-bound, priced at twice the efficiency.
  const StepCost long_split = split.predict(chunk(2048, 100000)), long_one = one.predict(chunk(2048, 100000));
  EXPECT_DOUBLE_EQ(long_split.attention_flops_per_gpu, long_one.attention_flops_per_gpu);
  EXPECT_NEAR(long_split.attention_ms, long_one.attention_ms / 2, long_one.attention_ms * 1e-9);
  // 1023 rows: below the threshold, priced as before.
  EXPECT_DOUBLE_EQ(split.predict(chunk(1023, 100000)).attention_ms, one.predict(chunk(1023, 100000)).attention_ms);
}

TEST(RooflineCostModel, DeepSeekPositionCostIsTheIndexerScan) {
  // Sparse attention attends a fixed 128 + 512 entries; what grows with
  // position is the indexer's scan of the compressed keys. Still monotone.
  const ModelProfile ds = profile("deepseek-v4.1-flash");
  const RooflineCostModel model(ds, h200(), {.num_gpus = 8, .tensor_parallel = 8, .expert_parallel = 8});
  double previous = 0;
  for (std::int32_t position : {0, 65536, 262144, 524288, 1000000}) {
    const double ms = model.predict_step_ms(chunk(4096, position));
    EXPECT_GT(ms, previous) << position;
    previous = ms;
  }
  EXPECT_GT(model.predict_step_ms(chunk(4096, 1000000)), 1.1 * model.predict_step_ms(chunk(4096, 0)));
}

TEST(RooflineCostModel, MonotoneInBatchAndChunk) {
  for (const char* name : {"llama-3-8b", "deepseek-v4.1-flash"}) {
    const ModelProfile p = profile(name);
    const Parallelism par = p.is_moe() ? Parallelism{.num_gpus = 8, .tensor_parallel = 8, .expert_parallel = 8}
                                       : Parallelism{};
    const RooflineCostModel model(p, h200(), par);
    double previous = 0;
    for (std::int32_t batch : {1, 2, 8, 32, 64, 256}) {
      const double ms = model.predict_step_ms(decode_batch(batch, 8192));
      EXPECT_GE(ms, previous) << name << " batch " << batch;
      previous = ms;
    }
    previous = 0;
    for (std::int32_t tokens : {1, 16, 256, 1024, 4096, 16384}) {
      const double ms = model.predict_step_ms(chunk(tokens, 1000));
      EXPECT_GT(ms, previous) << name << " chunk " << tokens;
      previous = ms;
    }
  }
}

TEST(RooflineCostModel, PrefillIsComputeBoundAndCountsEveryActiveParam) {
  const RooflineCostModel model(profile("llama-3-8b"), h200(), {});
  const StepCost cost = model.predict(chunk(32768, 0));
  // 2 FLOPs per weight per token in the layers, plus one head row.
  const double layer_params = 32.0 * (4096.0 * 4096 * 2 + 4096.0 * 1024 * 2 + 3 * 4096.0 * 14336 + 2 * 4096);
  const double head_params = 128256.0 * 4096;
  EXPECT_NEAR(cost.gemm_flops_per_gpu, 2 * layer_params * 32768 + 2 * head_params, 1e6);
  const HardwareSpec hw = h200();
  EXPECT_NEAR(cost.gemm_ms, 1e3 * cost.gemm_flops_per_gpu / (790e12 * hw.efficiency.gemm_compute), 1e-6);
  // DEVICE.md: llama.cpp prefills 32k at 14,200 tok/s (42% of peak); cuDNN-class
  // attention and cuBLASLt GEMMs do better, but not beyond the FLOP ceiling.
  const double tokens_per_s = 32768 / (cost.total_ms() / 1e3);
  EXPECT_GT(tokens_per_s, 14200);
  EXPECT_LT(tokens_per_s, 790e12 / (2 * (layer_params + head_params)));
}

TEST(ExpectedExpertsTouched, MatchesMonteCarloRouting) {
  // Oracle: route tokens to top-6 of 384 uniformly at random and count.
  constexpr int kExperts = 384, kTopK = 6, kTrials = 200;
  for (int tokens : {1, 4, 16, 64, 256}) {
    double total = 0;
    for (int trial = 0; trial < kTrials; ++trial) {
      std::set<int> touched;
      SplitMix64 rng(static_cast<std::uint64_t>(trial * 1000 + tokens));
      for (int t = 0; t < tokens; ++t) {
        std::set<int> picks;
        while (static_cast<int>(picks.size()) < kTopK) picks.insert(static_cast<int>(rng.next() % kExperts));
        touched.insert(picks.begin(), picks.end());
      }
      total += static_cast<double>(touched.size());
    }
    const double simulated = total / kTrials;
    EXPECT_NEAR(expected_experts_touched(kExperts, kTopK, tokens), simulated, 0.03 * simulated) << tokens;
  }
  EXPECT_DOUBLE_EQ(expected_experts_touched(384, 6, 1), 6);
  EXPECT_NEAR(expected_experts_touched(384, 6, 100000), 384, 1e-9);
  EXPECT_EQ(expected_experts_touched(384, 6, 0), 0);
}

TEST(RooflineCostModel, MoeWeightReadsSaturate) {
  const RooflineCostModel model(profile("deepseek-v4.1-flash"), h200(),
                                {.num_gpus = 8, .tensor_parallel = 8, .expert_parallel = 8});
  const StepCost one = model.predict(decode_batch(1, 1000));
  const StepCost sixteen = model.predict(decode_batch(16, 1000));
  const StepCost big = model.predict(chunk(4096, 0));
  const StepCost bigger = model.predict(chunk(16384, 0));
  EXPECT_NEAR(one.expected_experts_touched, 6, 1e-9);
  EXPECT_LT(one.weight_bytes_per_gpu, sixteen.weight_bytes_per_gpu);
  EXPECT_LT(sixteen.weight_bytes_per_gpu, big.weight_bytes_per_gpu);
  EXPECT_NEAR(big.expected_experts_touched, 384, 1e-6);
  // Saturated: more tokens read no more weights.
  EXPECT_NEAR(bigger.weight_bytes_per_gpu, big.weight_bytes_per_gpu, 1e-6 * big.weight_bytes_per_gpu);
  // Saturated reads per GPU: 40 layers x 48 local experts x 18.8 MB, plus the
  // rank's share of the dense weights. Check the expert part dominates as expected.
  EXPECT_GT(big.weight_bytes_per_gpu, 40.0 * 48 * 18'800'640);
  // Batch-1 decode reads 6 of 384 experts per layer: 6/8 per rank on average.
  EXPECT_LT(one.weight_bytes_per_gpu, big.weight_bytes_per_gpu / 4);
}

TEST(ModelProfiles, DeepSeekMatchesThePublishedNumbers) {
  const ModelProfile ds = profile("deepseek-v4.1-flash");
  // TR: 552B backbone (Engram excluded), 8B active per prompt token, 16B per output token.
  EXPECT_NEAR(ds.total_params() / 1e9, 552, 552 * 0.01);
  EXPECT_NEAR(ds.active_params_per_prompt_token() / 1e9, 8, 0.5);
  EXPECT_NEAR(ds.active_params_per_output_token() / 1e9, 16, 0.5);
  EXPECT_DOUBLE_EQ(ds.kv_bytes_per_token, 890);
  EXPECT_EQ(ds.kv_window_tokens, 128);
  EXPECT_DOUBLE_EQ(ds.host_bytes_per_token, 48 * 264);
  // S4: 62.55 GiB per rank at TP8/EP8 with Engram resident; ours holds Engram
  // in host RAM, so add its per-rank share back (189.13 GiB / 8) to compare.
  const double per_rank = ds.replicated_weight_bytes + (ds.gpu_weight_bytes() - ds.replicated_weight_bytes) / 8;
  EXPECT_NEAR((per_rank + ds.host_table_bytes / 8) / kGiB, 62.55, 62.55 * 0.03);
}

TEST(ModelProfiles, DenseLlamaCounts) {
  EXPECT_NEAR(profile("llama-3-8b").total_params() / 1e9, 8.03, 0.01);
  EXPECT_NEAR(profile("llama-3-70b").total_params() / 1e9, 70.55, 0.05);
  EXPECT_FALSE(find_profile("gpt-5").has_value());
  EXPECT_EQ(list_profiles().size(), 3u);
  for (const auto& name : list_profiles()) EXPECT_TRUE(find_profile(name).has_value()) << name;
}

TEST(RooflineCostModel, DeepSeekPrefillRunsTheDecoderOnlyOnTheReplayTail) {
  const ModelProfile ds = profile("deepseek-v4.1-flash");
  const RooflineCostModel model(ds, h200(), {.num_gpus = 8, .tensor_parallel = 8, .expert_parallel = 8});
  const double prompt = ds.active_params_per_prompt_token();
  const double decoder = ds.active_params_per_output_token() - prompt - ds.head_params;
  const StepCost cost = model.predict(chunk(4096, 0));
  const double flops = 2 * (prompt * 4096 + decoder * 128 + ds.head_params);
  EXPECT_NEAR(cost.gemm_flops_per_gpu, flops / 8, flops * 1e-9);
  // A 1-token step runs the whole stack: 16B active.
  const StepCost one = model.predict(chunk(1, 0));
  EXPECT_NEAR(one.gemm_flops_per_gpu, 2.0 * ds.active_params_per_output_token() / 8, 1.0);
}

TEST(RooflineCostModel, CommunicationOnlyWithTensorParallel) {
  const ModelProfile p = profile("llama-3-70b");
  const RooflineCostModel tp1(p, h200(), {});
  const RooflineCostModel tp8(p, h200(), {.num_gpus = 8, .tensor_parallel = 8});
  EXPECT_EQ(tp1.predict(chunk(4096, 0)).comm_ms, 0);
  const StepCost cost = tp8.predict(chunk(4096, 0));
  // Two ring all-reduces per layer of 4096 x 8192 bf16: each rank sends 2 x 7/8 of it.
  EXPECT_NEAR(cost.comm_bytes_per_gpu, 80 * 2 * (2.0 * 7 / 8) * 4096 * 8192 * 2, 1.0);
  EXPECT_LT(tp8.predict_step_ms(decode_batch(1, 0)), tp1.predict_step_ms(decode_batch(1, 0)));
}

TEST(RooflineCostModel, Fp8KvHalvesLlamaKvReads) {
  const ModelProfile p = profile("llama-3-8b");
  auto fp8 = with_fp8_kv_cache(p);
  ASSERT_TRUE(fp8.ok());
  const RooflineCostModel auto_model(p, h200(), {});
  const RooflineCostModel fp8_model(*fp8, h200(), {});
  EXPECT_NEAR(fp8_model.predict(decode_batch(8, 32768)).kv_bytes_per_gpu,
              auto_model.predict(decode_batch(8, 32768)).kv_bytes_per_gpu / 2, 1.0);
}

TEST(RooflineCostModel, EmptyStepCostsNothing) {
  const RooflineCostModel model(profile("llama-3-8b"), h200(), {});
  EXPECT_EQ(model.predict_step_ms({}), 0);
  EXPECT_EQ(model.predict_step_ms(chunk(0, 100)), 0);
}

TEST(Parallelism, RejectsWhatCannotBeHonoured) {
  const ModelProfile llama = profile("llama-3-8b");
  const ModelProfile ds = profile("deepseek-v4.1-flash");
  EXPECT_TRUE(validate({.num_gpus = 8, .tensor_parallel = 8}, llama).ok());
  EXPECT_TRUE(validate({.num_gpus = 8, .tensor_parallel = 2}, llama).ok());  // 4 replicas
  EXPECT_FALSE(validate({.num_gpus = 8, .tensor_parallel = 3}, llama).ok());
  EXPECT_FALSE(validate({.num_gpus = 2, .tensor_parallel = 2, .expert_parallel = 2}, llama).ok());
  EXPECT_TRUE(validate({.num_gpus = 8, .tensor_parallel = 8, .expert_parallel = 8}, ds).ok());
  EXPECT_FALSE(validate({.num_gpus = 16, .tensor_parallel = 16}, ds).ok());  // o_groups = 8
  EXPECT_FALSE(validate({.num_gpus = 0}, llama).ok());
  const Status dense_ep = validate({.num_gpus = 2, .tensor_parallel = 2, .expert_parallel = 2}, llama);
  EXPECT_NE(dense_ep.error_message().find("dense"), std::string::npos) << dense_ep.error_message();
}

// The terms the online correction fits: they add up to the prediction, and a
// decode step lands in the memory terms, a long prefill chunk in the compute ones.
TEST(RooflineTerms, SumToThePredictionAndFollowTheBindingCeiling) {
  const RooflineCostModel model(profile("llama-3-8b"), h200(), Parallelism{});
  const StepShape decode = decode_batch(8, 4096), prefill = chunk(4096, 32768);
  for (const StepShape& shape : {decode, prefill})
    EXPECT_NEAR(model.predict_terms(shape).total_ms(), model.predict_step_ms(shape), 1e-9);
  const CostTerms d = model.predict_terms(decode), p = model.predict_terms(prefill);
  EXPECT_GT(d.gemm_memory_ms, 0.0);
  EXPECT_EQ(d.gemm_compute_ms, 0.0);
  EXPECT_GT(d.attention_memory_ms, 0.0);
  EXPECT_GT(p.gemm_compute_ms, 0.0);
  EXPECT_EQ(p.gemm_memory_ms, 0.0);
  EXPECT_GT(p.attention_compute_ms, 0.0);
  EXPECT_GT(d.fixed_ms, 0.0);
}

// The sim backend's truth: each term scaled, and long-context attention again.
TEST(SkewedCostModel, ScalesTermsAndLongPrefixAttention) {
  auto believed = std::make_shared<RooflineCostModel>(profile("llama-3-8b"), h200(), Parallelism{});
  const StepShape mixed{.sequences = {{.num_new_tokens = 1, .num_computed_tokens = 1000},
                                      {.num_new_tokens = 512, .num_computed_tokens = 60000}}};
  const SkewedCostModel uniform(believed, CostSkew::uniform(3.0));
  EXPECT_NEAR(uniform.predict_step_ms(mixed), 3.0 * believed->predict_step_ms(mixed), 1e-9);

  const SkewedCostModel long_prefix(believed, {.long_prefix_attention_factor = 2.5, .long_prefix_tokens = 32768});
  const StepShape long_only{.sequences = {mixed.sequences[1]}};
  const CostTerms base = believed->predict_terms(mixed), alone = believed->predict_terms(long_only);
  const CostTerms skewed = long_prefix.predict_terms(mixed);
  EXPECT_NEAR(skewed.attention_compute_ms, base.attention_compute_ms + 1.5 * alone.attention_compute_ms, 1e-9);
  EXPECT_EQ(skewed.gemm_compute_ms, base.gemm_compute_ms);
  // Short contexts are priced as believed.
  const StepShape short_only{.sequences = {{.num_new_tokens = 512, .num_computed_tokens = 1000}}};
  EXPECT_NEAR(long_prefix.predict_step_ms(short_only), believed->predict_step_ms(short_only), 1e-9);
}

}  // namespace
}  // namespace sluice::sim
