// Times DeepSeek-V4's device forward (model/cuda/deepseek_v4_forward.h), two ways:
//
//   deepseek_v4_forward_bench DIR [hidden] [layers] [experts] [prefill_tokens]
//     Session 11's baseline shapes: a make-model checkpoint (DIR is scratch
//     space) at V4-Flash's head widths (latent 512, 64 heads, index heads
//     64 x 128, top-512, window 128, rates 4 and 128) with a narrowed body,
//     random weights: prefill of one sequence in chunks of 512, then decode
//     at batch 1 and 16.
//
//   deepseek_v4_forward_bench --flash [layers] [prefill_tokens] [decode_batch] [profile]
//     V4-Flash's width (hidden 4096, 64 heads x 512, q_lora 1024, 8 x 1024
//     output groups, 256 experts top 6 x 2048 and a shared one, vocab
//     129,280) with the depth cut to `layers` (sliding + hash MoE, then CSA
//     and HCA alternating), random bf16 weights made on the device (no
//     checkpoint of that size fits the host): prefill of one prompt in
//     chunks of 8,192 (the rate at 8k and over the whole prompt), decode at
//     batch 1 after it, and decode at `decode_batch` sequences of 1,024.
//     Each row gives its share of the H200's limits: prefill as FLOPs (the
//     linears, the experts the rows route to, the sparse attention and the
//     indexer's scores) over 790 TFLOP/s; decode as the bytes of the weights
//     a step must read (dense, shared, and the routed experts a batch of
//     that size touches on average under uniform routing; KV not counted)
//     over the device copy timed at start. With profile 1, one batch-1
//     decode step runs between cudaProfilerStart and cudaProfilerStop (for
//     ncu --profile-from-start off / nsys --capture-range=cudaProfilerApi);
//     with profile 2, the first prefill chunk.
//
//   deepseek_v4_forward_bench --flash-formats [layers] [context] [decode_batch]
//     V4-Flash's width as --flash, one format after another in the same
//     process (weights freed between): bf16 weights holding exactly the
//     values of the FP8 / FP4 ones (the session-12 path), FP8 dense + FP4
//     experts turned FP8 at load under the bf16-activation FP8 GEMMs (the
//     grouped kernel, mma.sync), and the same under the default FP8 GEMMs
//     (cuBLASLt block-scaled, wgmma e4m3; at decode the dense linears take the
//     FP8 GEMV), then the default with the dense linears on the grouped kernel
//     (the GEMV's A/B), then the default with session 17's indexer kernels,
//     with session 18's indexer scores at prefill (session 21's A/B), with
//     the CUDA-core sparse attention, and with both of session 17's (session
//     18's A/Bs). Per format: the weights' device
//     bytes and the time to make them, prefill of one prompt to `context`
//     in chunks of 8,192 (the first chunk's rate: "prefill 8k"), decode at
//     batch 1 after it, and decode at `decode_batch` sequences at position
//     `context` over KV blocks that were never written (the work of a step
//     depends on positions, not values; prefilling 64 x 32k tokens would
//     take minutes); shares of the card's limits (prefill FLOPs over 790
//     bf16 / 1979 FP8 TFLOP/s; decode weight bytes, in each format's bytes,
//     over the device copy timed at start); the first chunk's and a batch-1 decode step's logits
//     against the bf16 format's (max |d| / max |logit|).
//
//   deepseek_v4_forward_bench --flash-formats LAYERS CONTEXT BATCH PROFILE [FORMATS]
//     Only the formats FORMATS (a comma list: 0 bf16, 1 grouped / mma.sync,
//     2 cuBLASLt / wgmma, 3 grouped dense / wgmma, 4 the default with session
//     17's indexer, 5 with session 18's indexer scores at prefill, 6 with the
//     CUDA-core attention, 7 with session 18's mma.sync attention, 8 with
//     the wgmma attention's two bf16 softmax terms, 9 with 4 and 6, 10 the
//     default over f32 index keys (quantized at the gather, as to session
//     24), 11 the default with fp8_ds_mla latents (--kv-cache-dtype fp8), 12
//     the default with the indexer's heads summed by a tf32 MMA, 13 that in
//     steps of at least 4,096 rows only, 14 12 with that kernel's keys in
//     registers, 15 14 with session 27's top-k, 16 the default with session
//     32's bulk-copy top-k, 17 with the top-k in 512-thread blocks at
//     every row count (sessions 35's 17 was the 256-thread top-k, today's
//     default from 2,048 rows), 18 with the tf32 scores' keys in shared
//     memory (the default until session 37; that session's first 18 was
//     today's default; 19 was removed in session 44: two rows in flight a
//     warpgroup, 30.3-30.8% of the CSA layer against the default's 24%); the
//     default 2; up to session 20, 5 and 6 were today's 6 and 9, in session
//     21 7 was today's 9), one step between cudaProfilerStart and
//     cudaProfilerStop after a warm-up step of the same shape (for ncu
//     --profile-from-start off; the first format listed): PROFILE 1 a decode
//     step of BATCH sequences at CONTEXT, 2 the first prefill chunk of 8,192
//     rows, 3 a decode step of one sequence at CONTEXT (decode over KV blocks
//     never written, as above), 5 the last prefill chunk of a prompt of
//     CONTEXT tokens (the chunks before it run unprofiled; BATCH 1 keeps the
//     decode sequences' blocks small). PROFILE 4: no profiler and no prefill, each
//     listed format's decode at BATCH x CONTEXT timed over 16 steps, its share
//     of HBM on the weights and on the weights plus the KV it reads (the
//     sizes whose prefill would take too long, 64 x 131072). PROFILE 0 with
//     FORMATS: the whole row (prefill, decode) of the listed formats only.
//     Mode 4 also prints the host's time
//     to enqueue a step, and the same steps through forward() (logits into a
//     host vector) beside them.
//
// Every step is timed as the engine's runner runs it (since session 21):
// enqueue_into() with the logits copied into a device buffer for a sampler
// there, then one synchronisation; up to session 20 the bench timed
// forward(), whose 33 MB of batch-64 logits went into a new host vector.
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "sluice/backend/cpu/deepseek_v4_ops.h"
#include "sluice/model/config.h"
#include "sluice/model/cuda/deepseek_v4_forward.h"
#include "sluice/model/deepseek_v4_kv_layout.h"
#include "sluice/model/make_model.h"
#include "sluice/model/safetensors.h"
#include "device_ceilings.h"

namespace {

using namespace sluice;
using Clock = std::chrono::steady_clock;

constexpr double kBf16PeakFlops = 790e12;  // cuBLASLt bf16 on random data, docs/benchmarks.md
// This card's device copy, timed at start (device_ceilings.h).
double hbm_copy() { return device_ceilings().hbm_copy; }

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Sequences over one device pool of blocks, and the steps the bench runs.
class Harness {
 public:
  Harness(const cuda::DeepseekV4DeviceForward& device, const DeepseekV4KvLayout& layout, std::int32_t vocab,
          std::int32_t block)
      : device_(device), layout_(layout), vocab_(vocab), block_(block) {}
  ~Harness() {
    cudaFree(blocks_);
    cudaFree(logits_);
  }

  // Block tables for sequences of these token counts; false when the pool does not fit.
  bool allocate(const std::vector<std::int32_t>& tokens) {
    std::int32_t next = 0;
    for (std::int32_t t : tokens) {
      std::vector<BlockId>& table = tables_.emplace_back();
      for (std::int32_t b = 0; b < (t + block_ - 1) / block_; ++b) table.push_back(next++);
    }
    fpb_ = (layout_.floats_per_block() + block_ - 1) / block_ * block_;
    const std::size_t bytes = static_cast<std::size_t>(next) * static_cast<std::size_t>(fpb_) * 4;
    std::printf("KV pool: %d blocks of %d tokens, %.2f GB\n", next, block_, static_cast<double>(bytes) / 1e9);
    if (cudaMalloc(reinterpret_cast<void**>(&blocks_), bytes) != cudaSuccess) return false;
    cudaMemset(blocks_, 0, bytes);
    num_blocks_ = next;
    return true;
  }
  StepLayout step_of(const std::vector<int>& seqs, const std::vector<int>& computed, int rows_each) const {
    StepLayout step;
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      step.sequences.push_back({.row_begin = step.num_rows(), .num_rows = rows_each,
                                .num_computed_tokens = computed[i], .block_table = tables_[seqs[i]]});
      for (int r = 0; r < rows_each; ++r) {
        step.token_ids.push_back((computed[i] + r + 1000 * seqs[i]) * 7 % vocab_);
        step.positions.push_back(computed[i] + r);
      }
      step.sample_rows.push_back(step.num_rows() - 1);
    }
    return step;
  }
  // One step as the engine's runner takes it: the logits copied into a device
  // buffer for the sampler there, one synchronisation at the end. Returns the
  // step's wall time; adds the host's share (until the step is enqueued) to
  // enqueue_seconds().
  double timed(const StepLayout& step, std::vector<float>* logits_out = nullptr) {
    const cuda::V4PagedBlocks pb = paged();
    const std::size_t floats = step.sample_rows.size() * static_cast<std::size_t>(vocab_);
    if (floats > logits_floats_) {
      cudaFree(logits_);
      if (cudaMalloc(reinterpret_cast<void**>(&logits_), floats * sizeof(float)) != cudaSuccess) {
        std::fprintf(stderr, "cudaMalloc of the logits (%zu floats) failed\n", floats);
        std::exit(1);
      }
      logits_floats_ = floats;
    }
    const auto t = Clock::now();
    if (Status s = device_.enqueue_into(step, pb, logits_, nullptr); !s.ok()) {
      std::fprintf(stderr, "forward: %s\n", s.error_message().c_str());
      std::exit(1);
    }
    enqueue_s_ += seconds_since(t);
    if (cudaError_t e = cudaStreamSynchronize(nullptr); e != cudaSuccess) {
      std::fprintf(stderr, "forward: %s\n", cudaGetErrorString(e));
      std::exit(1);
    }
    const double s = seconds_since(t);
    if (logits_out != nullptr) {
      logits_out->resize(floats);
      cudaMemcpy(logits_out->data(), logits_, floats * sizeof(float), cudaMemcpyDeviceToHost);
      if (std::any_of(logits_out->begin(), logits_out->end(), [](float v) { return !std::isfinite(v); }))
        std::printf("warning: a logit is not finite (random weights); the timing stands\n");
    }
    return s;
  }
  // The same step through forward(): its logits into a new host vector (what
  // this bench timed up to session 20).
  double timed_to_host(const StepLayout& step) const {
    const auto t = Clock::now();
    if (auto logits = device_.forward(step, paged(), nullptr); !logits.ok()) {
      std::fprintf(stderr, "forward: %s\n", logits.error_message().c_str());
      std::exit(1);
    }
    return seconds_since(t);
  }
  double enqueue_seconds() const { return enqueue_s_; }
  void reset_enqueue_seconds() { enqueue_s_ = 0; }

 private:
  const cuda::DeepseekV4DeviceForward& device_;
  const DeepseekV4KvLayout& layout_;
  std::int32_t vocab_, block_;
  std::vector<std::vector<BlockId>> tables_;
  cuda::V4PagedBlocks paged() const {
    return {.data = blocks_, .floats_per_block = fpb_, .num_blocks = num_blocks_, .block_size = block_};
  }
  float* blocks_ = nullptr;
  std::int64_t fpb_ = 0;
  std::int32_t num_blocks_ = 0;
  float* logits_ = nullptr;
  std::size_t logits_floats_ = 0;
  double enqueue_s_ = 0;
};

int baseline(int argc, char** argv) {
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
  auto layout = DeepseekV4KvLayout::make(*config, kBlock, DeepseekV4KvFormats::cuda());
  auto device = cuda::DeepseekV4DeviceForward::upload(**reference, *layout);
  if (!device.ok()) {
    std::fprintf(stderr, "upload: %s\n", device.error_message().c_str());
    return 1;
  }
  std::printf("model made, loaded and uploaded in %.1f s: hidden %d, %d layers (sch), %d experts top 6\n",
              seconds_since(t0), hidden, layers, experts);
  // Sequence 0: prefill + 64 tokens; 1..16: 1024 + 64.
  Harness h(**device, *layout, 4096, kBlock);
  std::vector<std::int32_t> tokens = {prefill + 64};
  for (int s = 1; s <= 16; ++s) tokens.push_back(1024 + 64);
  if (!h.allocate(tokens)) return 1;
  // Prefill in chunks of 512, then 32 decode steps (batch 1).
  double prefill_s = 0;
  for (int done = 0; done < prefill; done += 512) prefill_s += h.timed(h.step_of({0}, {done}, 512));
  double decode1 = 0;
  for (int i = 0; i < 32; ++i) decode1 += h.timed(h.step_of({0}, {prefill + i}, 1));
  // 16 sequences of 1024 tokens (prefilled together), then 32 decode steps at batch 16.
  std::vector<int> seqs;
  for (int s = 1; s <= 16; ++s) seqs.push_back(s);
  for (int done = 0; done < 1024; done += 128) (void)h.timed(h.step_of(seqs, std::vector<int>(16, done), 128));
  double decode16 = 0;
  for (int i = 0; i < 32; ++i) decode16 += h.timed(h.step_of(seqs, std::vector<int>(16, 1024 + i), 1));
  std::printf("| what | time | rate |\n|---|---|---|\n");
  std::printf("| prefill %d tokens (chunks of 512) | %.1f ms | %.0f tok/s |\n", prefill, prefill_s * 1e3,
              prefill / prefill_s);
  std::printf("| decode batch 1 at %d | %.2f ms/step | %.1f tok/s |\n", prefill, decode1 / 32 * 1e3, 32 / decode1);
  std::printf("| decode batch 16 at 1024 | %.2f ms/step | %.1f tok/s |\n", decode16 / 32 * 1e3, 16 * 32 / decode16);
  return 0;
}

// V4-Flash's config.json with the depth cut to `layers` (sliding, then CSA / HCA alternating; the first hash-routed).
std::string flash_config_json(int layers) {
  std::string ratios = "0";
  for (int i = 1; i < layers; ++i) ratios += i % 2 == 1 ? ", 4" : ", 128";
  ratios += ", 0";
  return fmt::format(R"({{"model_type": "deepseek_v4", "architectures": ["DeepseekV4ForCausalLM"],
    "vocab_size": 129280, "hidden_size": 4096, "moe_intermediate_size": 2048, "num_hidden_layers": {},
    "num_attention_heads": 64, "num_key_value_heads": 1, "head_dim": 512, "q_lora_rank": 1024,
    "qk_rope_head_dim": 64, "o_groups": 8, "o_lora_rank": 1024, "n_routed_experts": 256, "n_shared_experts": 1,
    "num_experts_per_tok": 6, "num_hash_layers": 1, "scoring_func": "sqrtsoftplus", "norm_topk_prob": true,
    "routed_scaling_factor": 1.5, "swiglu_limit": 10.0, "sliding_window": 128, "index_n_heads": 64,
    "index_head_dim": 128, "index_topk": 512, "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6,
    "compress_ratios": [{}], "compress_rope_theta": 160000, "rope_theta": 10000,
    "max_position_embeddings": 1048576,
    "rope_scaling": {{"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536,
                     "beta_fast": 32, "beta_slow": 1}},
    "rms_norm_eps": 1e-6, "num_nextn_predict_layers": 1, "bos_token_id": 0, "eos_token_id": 1,
    "torch_dtype": "bfloat16"}})",
                     layers, ratios);
}

// Work per token at position `pos` of one layer (FLOPs of the linears and experts, attention, indexer).
struct LayerCost {
  double linear_flops = 0, attention_flops = 0;
};
LayerCost layer_cost(const ModelConfig& c, DeepseekV4Attention type, std::int64_t pos) {
  const DeepseekV4Config& ds = *c.deepseek_v4;
  const double hidden = c.hidden_size, heads = c.num_heads, hd = c.head_dim, q_lora = ds.q_lora_rank;
  const double o = static_cast<double>(ds.o_groups) * ds.o_lora_rank, inter = ds.moe_intermediate_size;
  const double ih = ds.index_n_heads, ihd = ds.index_head_dim;
  LayerCost cost;
  double lin = hidden * q_lora + q_lora * heads * hd + hidden * hd + heads * hd * ds.o_lora_rank + o * hidden;
  lin += hidden * ds.n_routed_experts + (ds.num_experts_per_tok + 1) * 3 * hidden * inter;
  double keys = std::min<double>(static_cast<double>(pos + 1), ds.sliding_window);
  if (type == DeepseekV4Attention::compressed_sparse) {
    const double visible = static_cast<double>((pos + 1) / ds.csa_compress_rate);
    lin += 2 * hidden * 2 * hd + 2 * hidden * 2 * ihd + q_lora * ih * ihd + hidden * ih;
    keys += std::min<double>(visible, ds.index_topk);
    cost.attention_flops += 2 * ih * ihd * visible;
  } else if (type == DeepseekV4Attention::heavily_compressed) {
    lin += 2 * hidden * hd;
    keys += static_cast<double>((pos + 1) / ds.hca_compress_rate);
  }
  cost.linear_flops = 2 * lin;
  cost.attention_flops += 4 * heads * hd * keys;  // QK and PV over the K = V latents
  return cost;
}

// Bytes of weights a decode step of `batch` rows reads (bf16; routed experts: the expected distinct ones).
double decode_weight_bytes(const ModelConfig& c, int batch) {
  const DeepseekV4Config& ds = *c.deepseek_v4;
  const double hidden = c.hidden_size, heads = c.num_heads, hd = c.head_dim, q_lora = ds.q_lora_rank;
  const double o = static_cast<double>(ds.o_groups) * ds.o_lora_rank, inter = ds.moe_intermediate_size;
  const double e = ds.n_routed_experts, k = ds.num_experts_per_tok;
  const double touched = e * (1.0 - std::pow(1.0 - k / e, batch));
  double params = 0;
  for (DeepseekV4Attention type : ds.layer_types) {
    params += hidden * q_lora + q_lora * heads * hd + hidden * hd + heads * hd * ds.o_lora_rank + o * hidden;
    params += hidden * e + (touched + 1) * 3 * hidden * inter;
    if (type == DeepseekV4Attention::compressed_sparse)
      params += 2 * hidden * 2 * hd + 2 * hidden * 2.0 * ds.index_head_dim +
                q_lora * ds.index_n_heads * ds.index_head_dim + hidden * ds.index_n_heads;
    else if (type == DeepseekV4Attention::heavily_compressed)
      params += 2 * hidden * hd;
  }
  params += hidden * c.vocab_size;  // the LM head
  return 2 * params;
}

int flash(int argc, char** argv) {
  const int layers = argc > 2 ? std::atoi(argv[2]) : 4;
  const int prefill = argc > 3 ? std::atoi(argv[3]) : 32768;
  const int batch = argc > 4 ? std::atoi(argv[4]) : 64;
  const int profile = argc > 5 ? std::atoi(argv[5]) : 0;  // 1: a decode step, 2: the first prefill chunk
  constexpr int kChunk = 8192, kContext = 1024, kDecodeSteps = 16;
  auto config = parse_model_config(flash_config_json(layers), "deepseek_v4_forward_bench --flash");
  if (!config.ok()) {
    std::fprintf(stderr, "config: %s\n", config.error_message().c_str());
    return 1;
  }
  constexpr std::int32_t kBlock = 128;
  auto layout = DeepseekV4KvLayout::make(*config, kBlock, DeepseekV4KvFormats::cuda());
  if (!layout.ok()) {
    std::fprintf(stderr, "layout: %s\n", layout.error_message().c_str());
    return 1;
  }
  const auto t0 = Clock::now();
  auto device = cuda::DeepseekV4DeviceForward::random(*config, *layout, 7);
  if (!device.ok()) {
    std::fprintf(stderr, "random: %s\n", device.error_message().c_str());
    return 1;
  }
  std::printf("V4-Flash width, %d layers: %.1f GB of weights made on the device in %.1f s\n", layers,
              static_cast<double>((*device)->weight_bytes()) / 1e9, seconds_since(t0));
  Harness h(**device, *layout, config->vocab_size, kBlock);
  std::vector<std::int32_t> tokens = {prefill + kDecodeSteps};
  for (int s = 0; s < batch; ++s) tokens.push_back(kContext + kDecodeSteps);
  if (!h.allocate(tokens)) return 1;
  const DeepseekV4Config& ds = *config->deepseek_v4;
  auto flops_of = [&](std::int64_t from, std::int64_t to) {  // positions [from, to) of one sequence
    double linear = 0, attention = 0;
    for (std::int64_t p = from; p < to; ++p)
      for (DeepseekV4Attention type : ds.layer_types) {
        const LayerCost c = layer_cost(*config, type, p);
        linear += c.linear_flops;
        attention += c.attention_flops;
      }
    linear += 2.0 * config->hidden_size * config->vocab_size;  // one sampled row's LM head
    return std::pair{linear, attention};
  };
  std::printf("| what | time | rate | share of the limit |\n|---|---|---|---|\n");
  // Prefill of one prompt in chunks.
  // Warm-up (cuBLASLt plans, the scratch arena's growth): the first chunk, rewritten by the prefill below.
  (void)h.timed(h.step_of({0}, {0}, std::min(kChunk, prefill)));
  double total_s = 0, total_linear = 0, total_attention = 0;
  for (int done = 0; done < prefill; done += kChunk) {
    const int rows = std::min(kChunk, prefill - done);
    if (profile == 2 && done == 0) cudaProfilerStart();
    const double s = h.timed(h.step_of({0}, {done}, rows));
    if (profile == 2 && done == 0) cudaProfilerStop();
    const auto [linear, attention] = flops_of(done, done + rows);
    total_s += s;
    total_linear += linear;
    total_attention += attention;
    if (done + rows == kChunk || done + rows == prefill)
      std::printf("| prefill to %d (chunks of %d) | %.1f ms | %.0f tok/s | %.1f%% of 790 TFLOP/s (%.0f TFLOP/s; "
                  "attention + indexer %.0f%% of the FLOPs) |\n",
                  done + rows, kChunk, total_s * 1e3, (done + rows) / total_s,
                  100.0 * (total_linear + total_attention) / total_s / kBf16PeakFlops,
                  (total_linear + total_attention) / total_s / 1e12,
                  100.0 * total_attention / (total_linear + total_attention));
  }
  double decode1 = 0;
  for (int i = 0; i < kDecodeSteps; ++i) decode1 += h.timed(h.step_of({0}, {prefill + i}, 1));
  decode1 /= kDecodeSteps;
  if (profile == 1) {
    cudaProfilerStart();
    const double s = h.timed(h.step_of({0}, {prefill + kDecodeSteps - 1}, 1));  // the last step again
    cudaProfilerStop();
    std::printf("profiled decode step (batch 1): %.2f ms\n", s * 1e3);
  }
  std::printf("| decode batch 1 at %d | %.2f ms/step | %.1f tok/s | %.1f%% of the copy (%.1f GB of weights a step) |\n",
              prefill, decode1 * 1e3, 1 / decode1, 100.0 * decode_weight_bytes(*config, 1) / decode1 / hbm_copy(),
              decode_weight_bytes(*config, 1) / 1e9);
  // `batch` sequences of kContext tokens, prefilled in groups of kChunk rows, then decode.
  const int per_chunk = std::max(1, kChunk / kContext);
  for (int first = 0; first < batch; first += per_chunk) {
    std::vector<int> seqs;
    for (int s = first; s < std::min(batch, first + per_chunk); ++s) seqs.push_back(s + 1);
    (void)h.timed(h.step_of(seqs, std::vector<int>(seqs.size(), 0), kContext));
  }
  std::vector<int> all;
  for (int s = 1; s <= batch; ++s) all.push_back(s);
  double decode_b = 0;
  for (int i = 0; i < kDecodeSteps; ++i)
    decode_b += h.timed(h.step_of(all, std::vector<int>(static_cast<std::size_t>(batch), kContext + i), 1));
  decode_b /= kDecodeSteps;
  std::printf("| decode batch %d at %d | %.2f ms/step | %.0f tok/s | %.1f%% of the copy (%.1f GB of weights a step) |\n",
              batch, kContext, decode_b * 1e3, batch / decode_b,
              100.0 * decode_weight_bytes(*config, batch) / decode_b / hbm_copy(),
              decode_weight_bytes(*config, batch) / 1e9);
  return 0;
}

// Parameters a decode step of `batch` rows reads, split by how they are
// stored in the FP8 formats: FP8 (the linears DeepSeek ships FP8, the routed
// experts touched) and bf16 (compressors, the indexer's weights_proj, the
// router, the LM head). The bf16 format stores both in bf16.
struct DecodeParams {
  double quantized = 0, bf16 = 0;
};
DecodeParams decode_params(const ModelConfig& c, int batch) {
  const DeepseekV4Config& ds = *c.deepseek_v4;
  const double hidden = c.hidden_size, heads = c.num_heads, hd = c.head_dim, q_lora = ds.q_lora_rank;
  const double o = static_cast<double>(ds.o_groups) * ds.o_lora_rank, inter = ds.moe_intermediate_size;
  const double e = ds.n_routed_experts, k = ds.num_experts_per_tok;
  const double touched = e * (1.0 - std::pow(1.0 - k / e, batch));
  DecodeParams p;
  for (DeepseekV4Attention type : ds.layer_types) {
    p.quantized += hidden * q_lora + q_lora * heads * hd + hidden * hd + heads * hd * ds.o_lora_rank + o * hidden;
    p.quantized += (touched + 1) * 3 * hidden * inter;
    p.bf16 += hidden * e;
    if (type == DeepseekV4Attention::compressed_sparse) {
      p.quantized += q_lora * ds.index_n_heads * ds.index_head_dim;
      p.bf16 += 2 * hidden * 2 * hd + 2 * hidden * 2.0 * ds.index_head_dim + hidden * ds.index_n_heads;
    } else if (type == DeepseekV4Attention::heavily_compressed) {
      p.bf16 += 2 * hidden * hd;
    }
  }
  p.bf16 += hidden * c.vocab_size;
  return p;
}

// Bytes of the f32 cache a decode step of `batch` rows at position `context`
// reads (KV not counted in decode_params): each row's window latents, and per
// CSA layer its visible index keys (the indexer scores all of them) and its
// top-k entries, per HCA layer every visible entry. Pending rings and the
// step's own writes are left out.
double decode_kv_bytes(const ModelConfig& c, std::int64_t context, int batch) {
  const DeepseekV4Config& ds = *c.deepseek_v4;
  const double hd = c.head_dim, p = static_cast<double>(context + 1);
  double floats = 0;
  for (DeepseekV4Attention type : ds.layer_types) {
    floats += std::min<double>(p, ds.sliding_window) * hd;
    if (type == DeepseekV4Attention::compressed_sparse) {
      const double visible = std::floor(p / ds.csa_compress_rate);
      floats += visible * ds.index_head_dim + std::min<double>(visible, ds.index_topk) * hd;
    } else if (type == DeepseekV4Attention::heavily_compressed) {
      floats += std::floor(p / ds.hca_compress_rate) * hd;
    }
  }
  return 4.0 * floats * batch;
}

// A comma-separated list of format numbers ("2,4").
std::vector<int> format_list(const std::string& arg) {
  std::vector<int> out;
  for (std::size_t begin = 0;;) {
    const std::size_t comma = arg.find(',', begin);
    out.push_back(std::atoi(arg.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin).c_str()));
    if (comma == std::string::npos) return out;
    begin = comma + 1;
  }
}

int flash_formats(int argc, char** argv) {
  const int layers = argc > 2 ? std::atoi(argv[2]) : 4;
  const int context = argc > 3 ? std::atoi(argv[3]) : 32768;
  const int batch = argc > 4 ? std::atoi(argv[4]) : 64;
  const int profile = argc > 5 ? std::atoi(argv[5]) : 0;
  const std::vector<int> only_formats = argc > 6 ? format_list(argv[6]) : std::vector<int>{2};
  constexpr int kChunk = 8192, kDecodeSteps = 16;
  constexpr double kFp8PeakFlops = 1979e12;  // H200 dense FP8, the spec sheet
  auto config = parse_model_config(flash_config_json(layers), "deepseek_v4_forward_bench --flash-formats");
  if (!config.ok()) {
    std::fprintf(stderr, "config: %s\n", config.error_message().c_str());
    return 1;
  }
  constexpr std::int32_t kBlock = 128;
  const DeepseekV4Config& ds = *config->deepseek_v4;
  // The session-17 indexer reads f32 index keys; the others the served e4m3 records.
  constexpr DeepseekV4KvFormats kF32IndexKeys{.latents = DeepseekV4ValueFormat::bf16,
                                              .index_keys = DeepseekV4ValueFormat::f32};
  struct Format {
    const char* name;
    bool as_bf16;
    cuda::DeepseekV4DeviceOptions options;
    DeepseekV4KvFormats kv = DeepseekV4KvFormats::cuda();
    cuda::V4IndexerTf32Keys tf32_keys = cuda::V4IndexerTf32Keys::registers_in_pairs;  // set_v4_indexer_scores_tf32_keys
    bool top_k_session27 = false;     // set_v4_indexer_top_k_session27 for this format
    bool top_k_bulk = false;          // set_v4_indexer_top_k_bulk_sweep for this format
    cuda::V4TopKBlocks top_k_blocks = cuda::V4TopKBlocks::by_rows;  // set_v4_indexer_top_k_blocks for this format
  };
  const Format formats[] = {
      {"bf16 (the FP8/FP4 values)", true, {}},
      {"FP8 dense + FP4->FP8 experts, grouped kernel + mma.sync (bf16 activations)", false,
       {.fp8_dense_gemm = cuda::Fp8DenseGemm::kernel, .moe_expert_gemm = cuda::MoeExpertGemm::grouped}},
      {"FP8 dense + FP4->FP8 experts, cuBLASLt + wgmma (e4m3 activations; the default)", false, {}},
      // The default but for the dense linears on the grouped kernel at every size: at decode (<= 16
      // rows) the A/B row of the FP8 GEMV the default takes there (session 14).
      {"FP8 dense on the grouped kernel + FP4->FP8 experts on wgmma", false,
       {.fp8_dense_gemm = cuda::Fp8DenseGemm::kernel, .moe_expert_gemm = cuda::MoeExpertGemm::fp8_wgmma}},
      // The default but for session 17's indexer (the f32 key pool, quantized apart, CUDA-core
      // scores): the A/B of the one-pass records and the tensor-core scores (session 18).
      {"FP8 default, session-17 indexer (f32 pool + quantize, CUDA-core scores)", false,
       {.indexer = cuda::DeepseekV4IndexerKernels::f32_pool_cuda_cores}, kF32IndexKeys},
      // The default but for session 18's indexer scores at prefill too (mma.sync on f16): the A/B of the
      // warpgroup-MMA scores (session 21).
      {"FP8 default, session-18 indexer scores (mma.sync) at prefill", false,
       {.indexer = cuda::DeepseekV4IndexerKernels::e4m3_pool_mma}},
      // The default but for the CUDA-core sparse attention (session 11's kernel): the A/B of the tensor-core one.
      {"FP8 default, CUDA-core sparse attention", false, {.attention = cuda::DeepseekV4AttentionKernel::cuda_cores}},
      // The default but for session 18's mma.sync sparse attention: the A/B of the warpgroup-MMA one (session 22).
      {"FP8 default, session-18 sparse attention (mma.sync)", false,
       {.attention = cuda::DeepseekV4AttentionKernel::mma_sync}},
      // The default but for the softmax weights as two bf16 terms (the f32 reference's precision).
      {"FP8 default, wgmma sparse attention with two bf16 softmax terms", false,
       {.attention = cuda::DeepseekV4AttentionKernel::wgmma_two_terms}},
      // Both of session 17's kernels.
      {"FP8 default, session-17 indexer and CUDA-core attention", false,
       {.indexer = cuda::DeepseekV4IndexerKernels::f32_pool_cuda_cores,
        .attention = cuda::DeepseekV4AttentionKernel::cuda_cores},
       kF32IndexKeys},
      // The default over f32 index keys, its records made from them at every step's gather (sessions
      // 18-24): the A/B of the records stored once as entries are emitted (session 25).
      {"FP8 default, f32 index keys quantized at the gather", false, {}, kF32IndexKeys},
      // The default with the latents and entries as fp8_ds_mla records (--kv-cache-dtype fp8): the
      // A/B of bf16 ones, in time and in logits against the bf16 format's.
      {"FP8 default, fp8_ds_mla KV records", false, {}, DeepseekV4KvFormats::cuda_fp8()},
      // The default but for the indexer's heads summed by a tf32 MMA in every prefill step (session
      // 26; the default takes it from tf32_head_sum_min_rows rows).
      {"FP8 default, indexer heads summed by a tf32 MMA at every prefill size", false,
       {.indexer = cuda::DeepseekV4IndexerKernels::e4m3_pool_wgmma_tf32_prefill}},
      // The default but for the FMA head sum at every size (the default until session 29): its A/B.
      {"FP8 default, indexer heads summed on FMAs (the default until session 29)", false,
       {.indexer = cuda::DeepseekV4IndexerKernels::e4m3_pool_wgmma_prefill}},
      // 12 with the tf32 kernel's keys in registers (four consumer warpgroups of 64 keys).
      {"FP8 default, indexer heads summed by a tf32 MMA, keys in registers", false,
       {.indexer = cuda::DeepseekV4IndexerKernels::e4m3_pool_wgmma_tf32_prefill}, DeepseekV4KvFormats::cuda(),
       cuda::V4IndexerTf32Keys::registers},
      // 14 with session 27's top-k (float4 sweeps, lists sized by the sample).
      {"FP8 default, indexer heads summed by a tf32 MMA, keys in registers, session-27 top-k", false,
       {.indexer = cuda::DeepseekV4IndexerKernels::e4m3_pool_wgmma_tf32_prefill}, DeepseekV4KvFormats::cuda(),
       cuda::V4IndexerTf32Keys::registers, true},
      // The default with session 32's top-k (a per-warp ring of bulk copies): its A/B.
      {"FP8 default, bulk-copy top-k sweep", false, {}, DeepseekV4KvFormats::cuda(),
       cuda::V4IndexerTf32Keys::registers_in_pairs,
       false, true},
      // The default with the top-k in 512-thread blocks at every row count (the default before
      // session 36, which takes 256-thread blocks from 2,048 rows): its A/B.
      {"FP8 default, top-k in 512-thread blocks", false, {}, DeepseekV4KvFormats::cuda(),
       cuda::V4IndexerTf32Keys::registers_in_pairs,
       false, false, cuda::V4TopKBlocks::wide},
      // The default with the tf32 scores' keys in shared memory (the default until session 37, which
      // holds them in registers in three consumer warpgroups of 128): its A/B.
      {"FP8 default, indexer tf32 scores over keys in shared memory (until session 37)", false, {},
       DeepseekV4KvFormats::cuda(), cuda::V4IndexerTf32Keys::shared},
  };
  auto flops_of = [&](std::int64_t from, std::int64_t to) {
    double total = 0;
    for (std::int64_t p = from; p < to; ++p)
      for (DeepseekV4Attention type : ds.layer_types) {
        const LayerCost c = layer_cost(*config, type, p);
        total += c.linear_flops + c.attention_flops;
      }
    return total + 2.0 * config->hidden_size * config->vocab_size;
  };
  std::vector<float> ref_prefill, ref_decode;
  std::printf("| format | weights on the device | prefill 8k | prefill to %d | decode batch 1 at %d | decode batch %d "
              "at %d | logits vs bf16 (prefill / decode) |\n|---|---|---|---|---|---|---|\n",
              context, context, batch, context);
  for (std::size_t fi = 0; fi < std::size(formats); ++fi) {
    const Format& f = formats[fi];
    cuda::set_v4_indexer_scores_tf32_keys(f.tf32_keys);
    cuda::set_v4_indexer_top_k_session27(f.top_k_session27);
    cuda::set_v4_indexer_top_k_bulk_sweep(f.top_k_bulk);
    cuda::set_v4_indexer_top_k_blocks(f.top_k_blocks);
    if ((profile != 0 || argc > 6) && std::ranges::find(only_formats, static_cast<int>(fi)) == only_formats.end())
      continue;
    const auto t0 = Clock::now();
    auto layout = DeepseekV4KvLayout::make(*config, kBlock, f.kv);
    if (!layout.ok()) return 1;
    auto device = cuda::DeepseekV4DeviceForward::random(
        *config, *layout, 7, cuda::DeepseekV4RandomWeights::fp8_fp4_experts, f.as_bf16, f.options);
    if (!device.ok()) {
      std::fprintf(stderr, "random: %s\n", device.error_message().c_str());
      return 1;
    }
    const double make_s = seconds_since(t0);
    const auto summary = (*device)->weight_summary();
    std::fprintf(stderr,
                 "%s: %d FP8 linears %.2f GB, %d bf16 %.2f GB, %d FP4 turned FP8 (%d inexact), made in %.1f s\n",
                 f.name, summary.fp8_linears, summary.fp8_bytes / 1e9, summary.bf16_linears, summary.bf16_bytes / 1e9,
                 summary.fp4_converted, summary.fp4_inexact, make_s);
    double prefill8k = 0, prefill_all = 0, decode1 = 0, decode_b = 0;
    std::vector<double> chunk_ms;  // each prefill chunk's time, in order
    std::vector<float> first_logits, decode_logits;
    if (profile != 0) {
      Harness h(**device, *layout, config->vocab_size, kBlock);
      // Mode 4 never runs sequence 0 (the prefill one): one block for it.
      std::vector<std::int32_t> tokens = {profile == 4 ? 1 : context + kDecodeSteps};
      for (int s = 0; s < batch; ++s) tokens.push_back(context + kDecodeSteps + 1);
      if (!h.allocate(tokens)) return 1;
      std::vector<int> all;
      for (int s = 1; s <= batch; ++s) all.push_back(s);
      if (profile == 4) {
        (void)h.timed(h.step_of(all, std::vector<int>(all.size(), context), 1));  // warm-up
        h.reset_enqueue_seconds();
        double decode_b = 0, to_host = 0;
        for (int i = 0; i < kDecodeSteps; ++i)
          decode_b += h.timed(h.step_of(all, std::vector<int>(all.size(), context + 1 + i), 1));
        decode_b /= kDecodeSteps;
        const double enqueue = h.enqueue_seconds() / kDecodeSteps;
        // The same steps (positions written again) with the logits copied into a new host vector.
        for (int i = 0; i < kDecodeSteps; ++i)
          to_host += h.timed_to_host(h.step_of(all, std::vector<int>(all.size(), context + 1 + i), 1));
        to_host /= kDecodeSteps;
        const DecodeParams pb = decode_params(*config, batch);
        const double weights = pb.quantized * (f.as_bf16 ? 2.0 : 1.0) + pb.bf16 * 2;
        const double kv = decode_kv_bytes(*config, context, batch);
        std::printf("| %s | decode batch %d at %d, %d layers | %.2f ms, %.0f tok/s (host enqueue %.2f ms) | "
                    "weights %.2f GB: %.1f%% of HBM | weights + KV read %.2f GB: %.1f%% of HBM | "
                    "logits to a host vector (forward()): %.2f ms |\n",
                    f.name, batch, context, layers, decode_b * 1e3, batch / decode_b, enqueue * 1e3, weights / 1e9,
                    100 * weights / decode_b / hbm_copy(), (weights + kv) / 1e9,
                    100 * (weights + kv) / decode_b / hbm_copy(), to_host * 1e3);
        std::fflush(stdout);
        continue;
      }
      if (profile == 5)  // the prompt up to its last chunk, unprofiled
        for (int done = 0; done + kChunk < context; done += kChunk) (void)h.timed(h.step_of({0}, {done}, kChunk));
      const StepLayout step = profile == 2   ? h.step_of({0}, {0}, kChunk)
                              : profile == 5 ? h.step_of({0}, {context - kChunk}, kChunk)
                              : profile == 1 ? h.step_of(all, std::vector<int>(all.size(), context), 1)
                                             : h.step_of({0}, {context}, 1);
      (void)h.timed(step);  // warm-up
      cudaProfilerStart();
      const double s = h.timed(step);
      cudaProfilerStop();
      std::printf("profiled %s, mode %d: %.2f ms\n", f.name, profile, s * 1e3);
      return 0;
    }
    {
      Harness h(**device, *layout, config->vocab_size, kBlock);
      std::vector<std::int32_t> tokens = {context + kDecodeSteps + 1};
      for (int s = 0; s < batch; ++s) tokens.push_back(context + kDecodeSteps + 1);
      if (!h.allocate(tokens)) return 1;
      (void)h.timed(h.step_of({0}, {0}, kChunk));  // warm-up: plans, arena growth (rewritten below)
      for (int done = 0; done < context; done += kChunk) {
        const double s = h.timed(h.step_of({0}, {done}, std::min(kChunk, context - done)),
                                 done == 0 ? &first_logits : nullptr);
        if (done == 0) prefill8k = s;
        prefill_all += s;
        chunk_ms.push_back(s * 1e3);
      }
      // A warm-up step first, as for batch 64: untimed, the first batch-1 step
      // of a process paid its one-time costs (1st format 2.6-3.0 ms against
      // 1.8 ms for the next ones, S22-7/S22-15).
      (void)h.timed(h.step_of({0}, {context}, 1), &decode_logits);
      for (int i = 0; i < kDecodeSteps; ++i) decode1 += h.timed(h.step_of({0}, {context + 1 + i}, 1));
      decode1 /= kDecodeSteps;
      std::vector<int> all;
      for (int s = 1; s <= batch; ++s) all.push_back(s);
      (void)h.timed(h.step_of(all, std::vector<int>(static_cast<std::size_t>(batch), context), 1));  // warm-up
      for (int i = 0; i < kDecodeSteps; ++i)
        decode_b += h.timed(h.step_of(all, std::vector<int>(static_cast<std::size_t>(batch), context + 1 + i), 1));
      decode_b /= kDecodeSteps;
    }
    auto vs_ref = [](const std::vector<float>& got, const std::vector<float>& want) {
      double d = 0, top = 0;
      for (std::size_t i = 0; i < got.size() && i < want.size(); ++i) {
        d = std::max(d, static_cast<double>(std::fabs(got[i] - want[i])));
        top = std::max(top, static_cast<double>(std::fabs(want[i])));
      }
      return d / std::max(top, 1e-30);
    };
    std::string compare = "(the reference)";
    if (ref_prefill.empty()) {
      ref_prefill = first_logits;
      ref_decode = decode_logits;
    } else {
      compare = fmt::format("{:.3g} / {:.3g}", vs_ref(first_logits, ref_prefill), vs_ref(decode_logits, ref_decode));
    }
    const DecodeParams p1 = decode_params(*config, 1), pb = decode_params(*config, batch);
    const double bytes_per_quantized = f.as_bf16 ? 2.0 : 1.0;
    const double bytes1 = p1.quantized * bytes_per_quantized + p1.bf16 * 2;
    const double bytesb = pb.quantized * bytes_per_quantized + pb.bf16 * 2;
    const double flops8k = flops_of(0, std::min(kChunk, context)), flops_all = flops_of(0, context);
    std::printf("| %s | %.1f GB (made in %.1f s) | %.0f tok/s, %.0f TFLOP/s (%.1f%% of bf16, %.1f%% of FP8 peak) | "
                "%.0f tok/s, %.0f TFLOP/s | %.2f ms, %.1f tok/s, %.1f%% of HBM (%.1f GB a step) | %.2f ms, %.0f tok/s, "
                "%.1f%% of HBM (%.1f GB a step) | %s |\n",
                f.name, static_cast<double>((*device)->weight_bytes()) / 1e9, make_s,
                std::min(kChunk, context) / prefill8k,
                flops8k / prefill8k / 1e12, 100 * flops8k / prefill8k / kBf16PeakFlops,
                100 * flops8k / prefill8k / kFp8PeakFlops, context / prefill_all, flops_all / prefill_all / 1e12,
                decode1 * 1e3, 1 / decode1, 100 * bytes1 / decode1 / hbm_copy(), bytes1 / 1e9, decode_b * 1e3,
                batch / decode_b, 100 * bytesb / decode_b / hbm_copy(), bytesb / 1e9, compare.c_str());
    std::string chunks;
    for (double ms : chunk_ms) chunks += fmt::format(" {:.1f}", ms);
    std::printf("prefill chunks of %d (ms, in order):%s\n", kChunk, chunks.c_str());
    std::fflush(stdout);
  }
  return 0;
}

int run(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s DIR [hidden] [layers] [experts] [prefill_tokens]\n"
                 "       %s --flash [layers] [prefill_tokens] [decode_batch] [profile]\n"
                 "       %s --flash-formats [layers] [context] [decode_batch] [profile] [format]\n",
                 argv[0], argv[0], argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  if (mode == "--flash") return flash(argc, argv);
  if (mode == "--flash-formats") return flash_formats(argc, argv);
  return baseline(argc, argv);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2) sluice::print_device_ceilings();
  return run(argc, argv);
}
