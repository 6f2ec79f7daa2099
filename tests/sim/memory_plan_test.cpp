// Memory per GPU and KV capacity, checked against arithmetic done here.
#include <gtest/gtest.h>

#include "sluice/sim/memory_plan.h"

namespace sluice::sim {
namespace {

ModelProfile profile(const char* name) { return *find_profile(name); }

TEST(MemoryPlan, LlamaOnOneGpu) {
  const ModelProfile p = profile("llama-3-8b");
  const MemoryOptions options{.gpu_memory_utilization = 0.9};
  const MemoryPlan plan = plan_memory(p, h200(), {}, options);
  EXPECT_DOUBLE_EQ(plan.budget_bytes, 141e9 * 0.9);
  EXPECT_NEAR(plan.weight_bytes, 8.03e9 * 2, 0.01e9 * 2);
  EXPECT_GT(plan.activation_bytes, 2.0 * (1 << 30));  // at least the runtime reserve
  EXPECT_LT(plan.activation_bytes, 8e9);
  ASSERT_TRUE(plan.fits());
  const double kv = plan.budget_bytes - plan.weight_bytes - plan.activation_bytes;
  EXPECT_NEAR(plan.kv_bytes, kv, 1.0);
  // Whole blocks of 16 tokens of 128 KiB each.
  const auto tokens = static_cast<std::int64_t>(kv / 131072) / 16 * 16;
  EXPECT_EQ(plan.kv_capacity_tokens, tokens);
  EXPECT_EQ(plan.num_kv_blocks, tokens / 16);
  // DESIGN.md's "one GPU's worth of KV (0.7M tokens)" is this magnitude.
  EXPECT_GT(plan.kv_capacity_tokens, 700'000);
  EXPECT_LT(plan.kv_capacity_tokens, 900'000);
}

TEST(MemoryPlan, Fp8KvDoublesLlamaCapacity) {
  const ModelProfile p = profile("llama-3-8b");
  const MemoryPlan bf16 = plan_memory(p, h200(), {}, {});
  const MemoryPlan fp8 = plan_memory(p, h200(), {}, {.kv_cache_dtype = KvCacheDtype::kFp8});
  EXPECT_NEAR(static_cast<double>(fp8.kv_capacity_tokens), 2.0 * bf16.kv_capacity_tokens, 32);
}

TEST(MemoryPlan, TensorParallelShardsWeightsAndKvHeads) {
  const ModelProfile p = profile("llama-3-70b");
  EXPECT_FALSE(plan_memory(p, h200(), {}, {}).fits());  // 141 GB of bf16 weights on one GPU
  const MemoryPlan tp8 = plan_memory(p, h200(), {.num_gpus = 8, .tensor_parallel = 8}, {});
  ASSERT_TRUE(tp8.fits());
  EXPECT_NEAR(tp8.weight_bytes, p.gpu_weight_bytes() / 8 + p.replicated_weight_bytes * 7 / 8, 1.0);
  EXPECT_DOUBLE_EQ(tp8.kv_bytes_per_token, 327680.0 / 8);  // 8 kv heads, one per rank
}

TEST(MemoryPlan, DataParallelReplicasMultiplyCapacity) {
  const ModelProfile p = profile("llama-3-8b");
  const MemoryPlan one = plan_memory(p, h200(), {}, {.max_num_seqs = 64, .max_num_batched_tokens = 8192});
  const MemoryPlan four = plan_memory(p, h200(), {.num_gpus = 4, .tensor_parallel = 1},
                                      {.max_num_seqs = 256, .max_num_batched_tokens = 4 * 8192});
  EXPECT_EQ(four.num_kv_blocks, 4 * one.num_kv_blocks);
}

TEST(MemoryPlan, DeepSeekOnEightH200) {
  const ModelProfile p = profile("deepseek-v4.1-flash");
  const Parallelism par{.num_gpus = 8, .tensor_parallel = 8, .expert_parallel = 8};
  const MemoryPlan plan = plan_memory(p, h200(), par, {.max_model_len_tokens = 1048576});
  ASSERT_TRUE(plan.fits());
  // The single latent KV head is replicated on every rank: 890 B per token per GPU.
  EXPECT_DOUBLE_EQ(plan.kv_bytes_per_token, 890);
  // Spec section 7: ~65 GiB per GPU for KV with 140 GiB and Engram on the GPU
  // (74 sequences of 1M); Engram in host RAM frees ~23.6 GiB more.
  EXPECT_GT(plan.kv_capacity_tokens / 1048576, 74);
  EXPECT_LT(plan.kv_capacity_tokens / 1048576, 110);
  EXPECT_DOUBLE_EQ(plan.host_table_bytes, p.host_table_bytes);
  // 64 sequences' window rings are reserved.
  EXPECT_DOUBLE_EQ(plan.sequence_state_bytes, 64 * p.kv_state_bytes_per_sequence);
  // On one GPU it does not fit at all.
  EXPECT_FALSE(plan_memory(p, h200(), {}, {}).fits());
}

}  // namespace
}  // namespace sluice::sim
