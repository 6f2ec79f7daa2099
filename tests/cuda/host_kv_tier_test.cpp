// The CUDA host KV tier (backend/cuda/host_kv_tier.h) on the GPU, under both
// copy methods: blocks
// stored to pinned host memory and loaded back into other device blocks are
// byte-equal; a store reads what the compute stream wrote before it, a load
// lands after the compute stream's earlier work and is reported only once it
// has landed; copies already issued run while later compute work is held up,
// and reading their events never waits for the compute stream. Then the
// engine on CUDA (a tiny random Llama): a prompt whose prefix comes back from
// the host tier generates exactly what the same prompt generates from a
// device prefix hit, and the greedy tokens of a cold run; and two step loops
// (--decode-lane: a second CudaOps over the same pages and weights, at high
// priority or on SMs of its own) generate the one loop's greedy tokens.
//
// The compute stream is held up by a gate (a host function spinning on a
// flag the test opens), so "the copy has not run yet" is a certainty, not a
// race against a slow kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "../engine/engine_test_support.h"
#include "sluice/backend/cuda/cuda_ops.h"
#include "sluice/backend/cuda/host_kv_tier.h"
#include "sluice/common/rng.h"
#include "sluice/engine/engine.h"
#include "sluice/model/make_model.h"
#include "sluice/model/model_runner.h"

namespace sluice {
namespace {

constexpr KvCacheSpec kSpec{.num_layers = 3, .num_blocks = 16, .block_size_tokens = 16, .num_kv_heads = 2, .head_dim = 64};
constexpr std::size_t kPieceBytes = 16 * 2 * 64 * 2;   // one layer's K (or V) of one block
constexpr std::size_t kNumPieces = 2 * 3;              // K and V of every layer
constexpr std::size_t kSlabBytes = kPieceBytes * 16;   // one piece of every block: the device pitch
constexpr std::size_t kCacheBytes = kSlabBytes * kNumPieces;

// Holds a stream's later work until open() (or a 60 s deadline, so a failed
// test cannot hang the binary: the ordering checks still hold after it).
class Gate {
 public:
  explicit Gate(cudaStream_t stream) : stream_(stream) {
    EXPECT_EQ(cudaLaunchHostFunc(stream, &Gate::wait, this), cudaSuccess);
  }
  ~Gate() {
    open();
    cudaStreamSynchronize(stream_);  // the host function reads this object until it returns
  }
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;
  void open() { open_.store(true, std::memory_order_release); }

 private:
  static void CUDART_CB wait(void* self) {
    auto* gate = static_cast<Gate*>(self);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!gate->open_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < deadline) {
    }
  }
  cudaStream_t stream_;
  std::atomic<bool> open_{false};
};

// Every test under both ways of issuing the copies (host_kv_tier.h).
class CudaHostKvTier : public ::testing::TestWithParam<cuda::HostCopyMethod> {
 protected:
  void SetUp() override {
    ASSERT_EQ(cudaMalloc(&device_kv_, kCacheBytes), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking), cudaSuccess);
    SplitMix64 rng(17);
    original_.resize(kCacheBytes);
    for (std::byte& b : original_) b = static_cast<std::byte>(rng.next() & 0xff);
    ASSERT_EQ(cudaMemcpy(device_kv_, original_.data(), kCacheBytes, cudaMemcpyHostToDevice), cudaSuccess);
    // A pageable copy may return before its last bytes land; the tier's and compute_'s streams do not wait for it.
    ASSERT_EQ(cudaStreamSynchronize(cudaStreamLegacy), cudaSuccess);
    const Status allocated = tier_.allocate(8, kSpec, device_kv_);
    ASSERT_TRUE(allocated.ok()) << allocated.error_message();
  }
  void TearDown() override {
    tier_.drain();
    cudaStreamSynchronize(compute_);
    cudaStreamDestroy(compute_);
    cudaFree(device_kv_);
  }

  std::vector<std::byte> download() {
    EXPECT_EQ(cudaStreamSynchronize(compute_), cudaSuccess);
    std::vector<std::byte> out(kCacheBytes);
    EXPECT_EQ(cudaMemcpy(out.data(), device_kv_, kCacheBytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
  // Piece p of block b in a whole-cache image.
  static std::vector<std::byte> piece(const std::vector<std::byte>& cache, std::size_t p, BlockId b) {
    const auto first = cache.begin() + static_cast<std::ptrdiff_t>(p * kSlabBytes + static_cast<std::size_t>(b) * kPieceBytes);
    return {first, first + static_cast<std::ptrdiff_t>(kPieceBytes)};
  }
  // The compute stream writes `value` into every byte of device block b (as a step would).
  void compute_writes(BlockId b, int value) {
    auto* first = static_cast<std::byte*>(device_kv_) + static_cast<std::size_t>(b) * kPieceBytes;
    ASSERT_EQ(cudaMemset2DAsync(first, kSlabBytes, value, kPieceBytes, kNumPieces, compute_), cudaSuccess);
  }
  // Ops::copy_kv_blocks; returns how many completions it reported (each is
  // also counted in reported_).
  std::size_t copy(std::span<const KvBlockCopy> copies, bool wait_for_one) {
    auto done = tier_.copy(copies, wait_for_one, compute_);
    EXPECT_TRUE(done.ok()) << done.error_message();
    if (!done.ok()) return 0;
    for (const KvCopyCompletion& c : done.value()) {
      EXPECT_TRUE(c.ok);
      ++reported_[c.id];
    }
    return done.value().size();
  }
  std::size_t copy_one(const KvBlockCopy& one, bool wait_for_one) { return copy(std::span(&one, 1), wait_for_one); }
  // Waits until every copy in `ids` is reported, each exactly once; bounded
  // by the copies in flight, since every waiting call completes a batch.
  void wait_for(const std::set<KvCopyId>& ids) {
    auto all_reported = [&] {
      return std::all_of(ids.begin(), ids.end(), [&](KvCopyId id) { return reported_.contains(id); });
    };
    for (std::size_t round = 0; round <= 64 && !all_reported(); ++round) copy(std::span<const KvBlockCopy>(), true);
    for (KvCopyId id : ids) EXPECT_EQ(reported_[id], 1) << "copy " << id << " reported " << reported_[id] << " times";
  }

  void* device_kv_ = nullptr;
  cudaStream_t compute_ = nullptr;
  std::vector<std::byte> original_;
  std::map<KvCopyId, int> reported_;
  cuda::HostKvTier tier_{GetParam()};
};

KvBlockCopy store(KvCopyId id, BlockId device, BlockId host) {
  return {.id = id, .direction = KvCopyDirection::kDeviceToHost, .device_block = device, .host_block = host};
}
KvBlockCopy load(KvCopyId id, BlockId device, BlockId host) {
  return {.id = id, .direction = KvCopyDirection::kHostToDevice, .device_block = device, .host_block = host};
}

TEST_P(CudaHostKvTier, StoredBlocksLoadBackByteEqualIntoOtherBlocks) {
  const std::vector<KvBlockCopy> stores = {store(1, 3, 0), store(2, 7, 1), store(3, 0, 2), store(4, 15, 7)};
  {
    Gate gate(compute_);  // keeps the stores in flight for the retry
    EXPECT_EQ(copy(stores, false), 0u);
    // A retry of copies in flight (a failed batch run again) starts nothing twice.
    EXPECT_EQ(copy(stores, false), 0u);
  }
  wait_for({1, 2, 3, 4});
  const std::vector<KvBlockCopy> loads = {load(5, 5, 0), load(6, 9, 1), load(7, 10, 2), load(8, 11, 7)};
  copy(loads, false);
  wait_for({5, 6, 7, 8});
  const std::vector<std::byte> after = download();
  const std::vector<std::pair<BlockId, BlockId>> moved = {{3, 5}, {7, 9}, {0, 10}, {15, 11}};  // from, to
  for (std::size_t p = 0; p < kNumPieces; ++p) {
    for (BlockId b = 0; b < kSpec.num_blocks; ++b) {
      BlockId source = b;
      for (const auto& [from, to] : moved)
        if (to == b) source = from;
      EXPECT_EQ(piece(after, p, b), piece(original_, p, source)) << "piece " << p << " of block " << b;
    }
  }
}

TEST_P(CudaHostKvTier, StoreReadsWhatTheComputeStreamWroteBefore) {
  Gate gate(compute_);
  compute_writes(2, 0x5a);  // an earlier step's write, held up behind the gate
  // The store is issued while the compute stream is held: the call returns
  // at once and reports nothing, because the store waits for that write.
  EXPECT_EQ(copy_one(store(1, 2, 4), false), 0u);
  EXPECT_EQ(cudaStreamQuery(compute_), cudaErrorNotReady) << "issuing copies must not wait for the compute stream";
  EXPECT_EQ(copy(std::span<const KvBlockCopy>(), false), 0u) << "polling reports nothing before the store ran";
  gate.open();
  wait_for({1});
  copy_one(load(2, 6, 4), false);
  wait_for({2});
  const std::vector<std::byte> after = download();
  for (std::size_t p = 0; p < kNumPieces; ++p)
    EXPECT_EQ(piece(after, p, 6), std::vector<std::byte>(kPieceBytes, std::byte{0x5a})) << "piece " << p;
}

TEST_P(CudaHostKvTier, LoadLandsAfterTheComputeStreamsEarlierWork) {
  copy_one(store(1, 1, 0), false);
  wait_for({1});
  Gate gate(compute_);
  compute_writes(8, 0x11);  // an earlier step still using block 8, which the load now reuses
  EXPECT_EQ(copy_one(load(2, 8, 0), false), 0u);
  gate.open();
  wait_for({2});
  const std::vector<std::byte> after = download();
  for (std::size_t p = 0; p < kNumPieces; ++p)
    EXPECT_EQ(piece(after, p, 8), piece(original_, p, 1)) << "the load must land last, piece " << p;
}

TEST_P(CudaHostKvTier, IssuedCopiesRunWhileLaterComputeIsHeldUp) {
  copy_one(store(1, 3, 5), false);
  Gate gate(compute_);  // compute work issued after the store: it must not delay it
  wait_for({1});
  EXPECT_EQ(cudaStreamQuery(compute_), cudaErrorNotReady) << "the store completed while compute was held up";
  gate.open();
  copy_one(load(2, 12, 5), false);
  wait_for({2});
  const std::vector<std::byte> after = download();
  for (std::size_t p = 0; p < kNumPieces; ++p) EXPECT_EQ(piece(after, p, 12), piece(original_, p, 3));
}

TEST_P(CudaHostKvTier, CopiesOutsideThePoolsAreRefused) {
  const KvBlockCopy outside_device = store(1, 16, 0), outside_host = load(2, 0, 8);
  EXPECT_FALSE(tier_.copy(std::span(&outside_device, 1), false, compute_).ok());
  EXPECT_FALSE(tier_.copy(std::span(&outside_host, 1), false, compute_).ok());
}

INSTANTIATE_TEST_SUITE_P(CopyMethods, CudaHostKvTier,
                         ::testing::Values(cuda::HostCopyMethod::kPerBlock2d, cuda::HostCopyMethod::kBatched),
                         [](const ::testing::TestParamInfo<cuda::HostCopyMethod>& info) {
                           return info.param == cuda::HostCopyMethod::kBatched ? "batched" : "per_block_2d";
                         });

// --- the engine on CUDA ---------------------------------------------------

using testing::Generated;
using testing::run_one_after_another;

constexpr std::int32_t kVocab = 512;
constexpr std::int32_t kNewTokens = 12;
constexpr std::int32_t kBlockTokens = 16;
// A step's token is decisive when its top-2 log-probability gap exceeds this:
// below it bf16 differences between two ways of computing may flip it.
constexpr float kDecisiveMargin = 0.1f;

std::string tiny_model_dir() {
  static const std::string dir = [] {
    const std::string d = std::string(SLUICE_BINARY_DIR) + "/test-scratch/cuda-host-tier-model";
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    const Status s = make_model({.num_layers = 2, .hidden_size = 256, .num_heads = 4, .num_kv_heads = 2,
                                 .intermediate_size = 512, .vocab_size = kVocab, .seed = 23,
                                 .max_position_embeddings = 1024, .out_dir = d});
    EXPECT_TRUE(s.ok()) << s.error_message();
    return d;
  }();
  return dir;
}

// stream_sms < 0: the backend's stream on every SM but -stream_sms (a decode lane's are the others).
std::unique_ptr<Backend> cuda_backend(std::int32_t num_kv_blocks, std::int32_t stream_sms = 0) {
  CudaOptions options{.scratch_bytes = 64LL << 20};
  options.stream_sms = stream_sms;
  auto ops = make_cuda_ops(options);
  EXPECT_TRUE(ops.ok()) << ops.error_message();
  auto backend = make_model_runner(tiny_model_dir(), std::move(ops).value(),
                                   {.block_size_tokens = kBlockTokens, .num_kv_blocks = num_kv_blocks});
  EXPECT_TRUE(backend.ok()) << backend.error_message();
  return std::move(backend).value();
}

TEST(EngineOnCuda, HostTierHitEqualsADeviceHitAndTheColdRunsGreedyTokens) {
  SplitMix64 rng(41);
  auto random_tokens = [&](int n) {
    std::vector<TokenId> t;
    for (int i = 0; i < n; ++i) t.push_back(static_cast<TokenId>(rng.next() % kVocab));
    return t;
  };
  const std::vector<TokenId> shared = random_tokens(6 * kBlockTokens);
  std::vector<TokenId> first = shared, last = shared;
  for (TokenId t : random_tokens(20)) first.push_back(t);
  for (TokenId t : random_tokens(28)) last.push_back(t);
  const std::vector<TokenId> filler_a = random_tokens(200), filler_b = random_tokens(200);

  EngineConfig config;
  config.max_num_seqs = 2;
  config.max_num_batched_tokens = 64;
  config.clock = ClockMode::kVirtual;
  config.kv_reserve_fraction = 0.0;
  // 16 blocks of 16 on the device: the fillers push the shared prefix into the host tier.
  std::unique_ptr<Backend> backend = cuda_backend(16);
  ASSERT_GT(backend->info().host_link_bytes_per_s, 0.0) << "the CUDA backend offers a host tier";
  config.kv_offloading_bytes = 64 * backend->info().kv_bytes_per_block;
  Engine tiered(std::move(backend), nullptr, config);
  const Generated from_host = run_one_after_another(tiered, {first, filler_a, filler_b, last}, kNewTokens, 2, true);
  const EngineStats stats = tiered.stats();
  ASSERT_GT(stats.host_cache_hit_tokens, 0) << "the last prompt's shared prefix came back from the host tier";
  ASSERT_EQ(stats.prefix_cache_hit_tokens + stats.host_cache_hit_tokens, static_cast<std::int64_t>(shared.size()))
      << "all of it from the two tiers (the device may still hold its head)";
  EXPECT_GT(stats.host_stored_blocks, 0);
  EXPECT_EQ(stats.host_loaded_bytes, stats.host_loaded_blocks * tiered.backend_info().kv_bytes_per_block);
  EXPECT_EQ(stats.host_failed_copies, 0);
  EXPECT_EQ(stats.num_free_kv_blocks, stats.num_kv_blocks);

  // The same prefix, computed the same way (by `first`), hit on the device:
  // the KV is the same bytes, so the output is the same bits.
  EngineConfig device_config = config;
  device_config.kv_offloading_bytes = 0;
  Engine device_hit(cuda_backend(64), nullptr, device_config);
  const Generated from_device = run_one_after_another(device_hit, {first, last}, kNewTokens, 2, true);
  ASSERT_EQ(device_hit.stats().prefix_cache_hit_tokens, static_cast<std::int64_t>(shared.size()));
  ASSERT_EQ(from_host.tokens.size(), static_cast<std::size_t>(kNewTokens));
  EXPECT_EQ(from_host, from_device);

  // Cold (no cache): the prefix is computed in other chunks, so bf16 may move
  // logits slightly; the greedy token must agree wherever the step is decisive
  // (compared up to the first step that is not, after which contexts differ).
  EngineConfig cold_config = device_config;
  cold_config.enable_prefix_caching = false;
  Engine cold(cuda_backend(64), nullptr, cold_config);
  const Generated reference = run_one_after_another(cold, {last}, kNewTokens, 2, true);
  ASSERT_EQ(reference.tokens.size(), static_cast<std::size_t>(kNewTokens));
  std::size_t num_compared = 0;
  for (std::size_t i = 0; i < reference.tokens.size(); ++i) {
    const float margin = reference.logprobs[3 * i + 1] - reference.logprobs[3 * i + 2];
    if (margin <= kDecisiveMargin) break;
    EXPECT_EQ(from_host.tokens[i], reference.tokens[i]) << "step " << i << " (margin " << margin << ")";
    ++num_compared;
  }
  EXPECT_GT(num_compared, 0u) << "the first step was not decisive: the comparison says nothing";
}

// Four prompts of 40-500 tokens at once, chunked by 64 tokens: the first to
// finish its prompt decodes on the decode lane beside the others' chunks.
// Batches differ from the one loop's (decodes alone, chunks alone), so bf16
// may move logits slightly: each request's greedy tokens must agree up to its
// first step that is not decisive in the one loop's run.
TEST(EngineOnCuda, DecodeLaneGivesTheOneLoopsGreedyTokens) {
  SplitMix64 rng(57);
  std::vector<std::vector<TokenId>> prompts;
  for (int length : {40, 150, 300, 500}) {
    std::vector<TokenId> p;
    for (int i = 0; i < length; ++i) p.push_back(static_cast<TokenId>(rng.next() % kVocab));
    prompts.push_back(std::move(p));
  }
  auto run = [&](Engine& engine) {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      EngineRequest r{.request_id = "r" + std::to_string(i), .prompt_token_ids = prompts[i], .max_tokens = kNewTokens};
      r.sampling.num_top_logprobs = 2;
      r.ignore_eos = true;
      auto s = engine.submit(std::move(r));
      EXPECT_TRUE(s.ok()) << s.error_message();
      streams.push_back(*s);
    }
    for (int step = 0; step < 2000 && engine.has_work(); ++step) {
      engine.step();
      engine.check_invariants();
    }
    std::vector<Generated> out(prompts.size());
    for (std::size_t i = 0; i < streams.size(); ++i)
      while (auto o = streams[i]->poll())
        for (const GeneratedToken& t : o->tokens) {
          out[i].tokens.push_back(t.token);
          out[i].logprobs.push_back(t.logprob);
          for (const TokenLogprob& top : t.top_logprobs) out[i].logprobs.push_back(top.logprob);
        }
    return out;
  };
  EngineConfig config;
  config.max_num_seqs = 8;
  config.max_num_batched_tokens = 64;
  config.kv_reserve_fraction = 0.0;
  config.enable_prefix_caching = false;
  Engine one_loop(cuda_backend(128), nullptr, config);
  const std::vector<Generated> reference = run(one_loop);
  for (const auto& [lane_mode, sms] : {std::pair{DecodeLane::kHighPriority, 0}, std::pair{DecodeLane::kSms, 16}}) {
    EngineConfig lanes = config;
    lanes.decode_lane = lane_mode;
    lanes.decode_lane_sms = sms;
    std::unique_ptr<Backend> backend = cuda_backend(128, -sms);
    auto lane = make_decode_lane(*backend, lanes);
    ASSERT_TRUE(lane.ok()) << lane.error_message();
    Engine two_loops(std::move(backend), nullptr, lanes, std::move(lane).value());
    const std::vector<Generated> got = run(two_loops);
    const EngineStats stats = two_loops.stats();
    EXPECT_GT(stats.num_decode_lane_steps, 0) << to_string(lane_mode, sms);
    EXPECT_GT(stats.num_steps_beside_other_lane, 0) << to_string(lane_mode, sms);
    // The last decodes, with no prompt left, ran on the main lane.
    EXPECT_GT(stats.num_main_lane_decode_steps, 0) << to_string(lane_mode, sms);
    EXPECT_EQ(stats.num_free_kv_blocks, stats.num_kv_blocks);
    std::size_t num_compared = 0;
    for (std::size_t r = 0; r < prompts.size(); ++r) {
      ASSERT_EQ(got[r].tokens.size(), static_cast<std::size_t>(kNewTokens)) << to_string(lane_mode, sms) << " r" << r;
      ASSERT_EQ(reference[r].tokens.size(), static_cast<std::size_t>(kNewTokens));
      for (std::size_t i = 0; i < reference[r].tokens.size(); ++i) {
        const float margin = reference[r].logprobs[3 * i + 1] - reference[r].logprobs[3 * i + 2];
        if (margin <= kDecisiveMargin) break;
        EXPECT_EQ(got[r].tokens[i], reference[r].tokens[i]) << to_string(lane_mode, sms) << " r" << r << " step " << i;
        ++num_compared;
      }
    }
    EXPECT_GT(num_compared, 8u) << "too few decisive steps: the comparison says little";
  }
}

}  // namespace
}  // namespace sluice
