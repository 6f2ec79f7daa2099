// Times DeepSeek-V4's device forward (model/cuda/deepseek_v4_forward.h) as
// it is today, correct first (f32 weights, CUDA-core linears): the baseline
// that stage 4 speeds up. A make-model checkpoint at V4-Flash's head widths
// (latent 512, 64 heads, index heads 64 x 128, top-512, window 128, rates 4 and
// 128) with a narrowed body (hidden, experts, depth below), random weights:
//   prefill of one sequence in chunks, then decode steps at batch 1 and 16.
//
//   deepseek_v4_forward_bench DIR [hidden] [layers] [experts] [prefill_tokens]
// DIR is scratch space for the checkpoint.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "sluice/backend/cpu/deepseek_v4_ops.h"
#include "sluice/model/cuda/deepseek_v4_forward.h"
#include "sluice/model/config.h"
#include "sluice/model/deepseek_v4_kv_layout.h"
#include "sluice/model/make_model.h"
#include "sluice/model/safetensors.h"

namespace {

using namespace sluice;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int run(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [hidden] [layers] [experts] [prefill_tokens]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const int hidden = argc > 2 ? std::atoi(argv[2]) : 1024;
  const int layers = argc > 3 ? std::atoi(argv[3]) : 3;
  const int experts = argc > 4 ? std::atoi(argv[4]) : 16;
  const int prefill = argc > 5 ? std::atoi(argv[5]) : 2048;
  MakeModelOptions o;
  o.architecture = Architecture::deepseek_v4;
  o.num_layers = layers;
  o.hidden_size = hidden;
  o.num_heads = 64;
  o.head_dim = 512;
  o.vocab_size = 4096;
  o.dtype = DType::bf16;
  o.max_position_embeddings = 65536;
  DeepseekV4Shape& d = o.deepseek_v4;
  std::strcpy(d.layer_types.data(), "sch");
  d.q_lora_rank = 1024;
  d.qk_rope_head_dim = 64;
  d.o_groups = 8;
  d.o_lora_rank = 1024;
  d.csa_compress_rate = 4;
  d.hca_compress_rate = 128;
  d.sliding_window = 128;
  d.index_n_heads = 64;
  d.index_head_dim = 128;
  d.index_topk = 512;
  d.num_hash_layers = 1;
  d.n_routed_experts = experts;
  d.num_experts_per_tok = 6;
  d.moe_intermediate_size = 2048;
  o.out_dir = dir;
  auto t0 = Clock::now();
  if (Status made = make_model(o); !made.ok()) {
    std::fprintf(stderr, "make_model: %s\n", made.error_message().c_str());
    return 1;
  }
  auto config = load_model_config(dir);
  auto checkpoint = Checkpoint::open(dir);
  if (!config.ok() || !checkpoint.ok()) return 1;
  cpu::DeepseekV4CpuKernels kernels;
  auto reference = DeepseekV4Reference::load(*config, *checkpoint, kernels);
  if (!reference.ok()) {
    std::fprintf(stderr, "load: %s\n", reference.error_message().c_str());
    return 1;
  }
  constexpr std::int32_t kBlock = 128;
  auto layout = DeepseekV4KvLayout::make(*config, kBlock);
  auto device = cuda::DeepseekV4DeviceForward::upload(**reference, *layout);
  if (!device.ok()) {
    std::fprintf(stderr, "upload: %s\n", device.error_message().c_str());
    return 1;
  }
  std::printf("model made, loaded and uploaded in %.1f s: hidden %d, %d layers (sch), %d experts top 6\n",
              seconds_since(t0), hidden, layers, experts);
  // Blocks for 17 sequences: one of prefill + 64 tokens, 16 decode sequences of 1024 + 64.
  const std::int32_t blocks_a = (prefill + 64 + kBlock - 1) / kBlock, blocks_b = (1024 + 64) / kBlock + 1;
  const std::int32_t num_blocks = blocks_a + 16 * blocks_b;
  const std::int64_t fpb = (layout->floats_per_block() + kBlock - 1) / kBlock * kBlock;
  float* blocks = nullptr;
  if (cudaMalloc(reinterpret_cast<void**>(&blocks), static_cast<std::size_t>(num_blocks * fpb) * 4) != cudaSuccess)
    return 1;
  cudaMemset(blocks, 0, static_cast<std::size_t>(num_blocks * fpb) * 4);
  const cuda::V4PagedBlocks pb{.data = blocks, .floats_per_block = fpb, .num_blocks = num_blocks, .block_size = kBlock};
  std::vector<std::vector<BlockId>> tables(17);
  BlockId next = 0;
  for (int s = 0; s < 17; ++s)
    for (int b = 0; b < (s == 0 ? blocks_a : blocks_b); ++b) tables[s].push_back(next++);
  auto step_of = [&](const std::vector<int>& seqs, const std::vector<int>& computed, int rows_each) {
    StepLayout step;
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      step.sequences.push_back({.row_begin = step.num_rows(), .num_rows = rows_each, .num_computed_tokens = computed[i],
                                .block_table = tables[seqs[i]]});
      for (int r = 0; r < rows_each; ++r) {
        step.token_ids.push_back((computed[i] + r) * 7 % 4096);
        step.positions.push_back(computed[i] + r);
      }
      step.sample_rows.push_back(step.num_rows() - 1);
    }
    return step;
  };
  auto timed = [&](const StepLayout& step) {
    const auto t = Clock::now();
    auto logits = (*device)->forward(step, pb, nullptr);
    if (!logits.ok()) {
      std::fprintf(stderr, "forward: %s\n", logits.error_message().c_str());
      std::exit(1);
    }
    return seconds_since(t);
  };
  // Prefill in chunks of 512, then 32 decode steps (batch 1).
  double prefill_s = 0;
  for (int done = 0; done < prefill; done += 512) prefill_s += timed(step_of({0}, {done}, 512));
  double decode1 = 0;
  for (int i = 0; i < 32; ++i) decode1 += timed(step_of({0}, {prefill + i}, 1));
  // 16 sequences of 1024 tokens (prefilled together), then 32 decode steps at batch 16.
  std::vector<int> seqs, at(16, 0);
  for (int s = 1; s <= 16; ++s) seqs.push_back(s);
  for (int done = 0; done < 1024; done += 128) {
    std::vector<int> c(16, done);
    (void)timed(step_of(seqs, c, 128));
  }
  double decode16 = 0;
  for (int i = 0; i < 32; ++i) decode16 += timed(step_of(seqs, std::vector<int>(16, 1024 + i), 1));
  std::printf("| what | time | rate |\n|---|---|---|\n");
  std::printf("| prefill %d tokens (chunks of 512) | %.1f ms | %.0f tok/s |\n", prefill, prefill_s * 1e3,
              prefill / prefill_s);
  std::printf("| decode batch 1 at %d | %.2f ms/step | %.1f tok/s |\n", prefill, decode1 / 32 * 1e3, 32 / decode1);
  std::printf("| decode batch 16 at 1024 | %.2f ms/step | %.1f tok/s |\n", decode16 / 32 * 1e3, 16 * 32 / decode16);
  cudaFree(blocks);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return run(argc, argv); }
