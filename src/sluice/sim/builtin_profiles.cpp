// The built-in profiles. Every number is from a public config or the model
// spec in /work/shared/models/deepseek-v41-flash.md; docs/cost-model.md
// explains the derivations.
#include <cstdint>

#include "sluice/sim/model_profile.h"

namespace sluice::sim {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

ModelProfile llama_3_8b() {
  // meta-llama/Meta-Llama-3-8B config.json; 131072 positions as in Llama 3.1.
  ModelProfile p = make_dense_profile({.name = "llama-3-8b",
                                       .num_layers = 32,
                                       .hidden_size = 4096,
                                       .num_attention_heads = 32,
                                       .num_kv_heads = 8,
                                       .head_dim = 128,
                                       .intermediate_size = 14336,
                                       .vocab_size = 128256,
                                       .max_position_embeddings = 131072,
                                       .tie_word_embeddings = false,
                                       .dtype_bytes = 2});
  p.source = "Meta-Llama-3-8B config.json (bf16), 131072 positions as Llama 3.1";
  return p;
}

ModelProfile llama_3_70b() {
  ModelProfile p = make_dense_profile({.name = "llama-3-70b",
                                       .num_layers = 80,
                                       .hidden_size = 8192,
                                       .num_attention_heads = 64,
                                       .num_kv_heads = 8,
                                       .head_dim = 128,
                                       .intermediate_size = 28672,
                                       .vocab_size = 128256,
                                       .max_position_embeddings = 131072,
                                       .tie_word_embeddings = false,
                                       .dtype_bytes = 2});
  p.source = "Meta-Llama-3-70B config.json (bf16), 131072 positions as Llama 3.1";
  return p;
}

// DeepSeek-V4.1-Flash, shapes from the spec's section 1 tables.
namespace dsv41 {
constexpr std::int64_t kHidden = 5120;
constexpr std::int64_t kHeads = 64;
constexpr std::int64_t kHeadDim = 512;  // one shared K=V latent
constexpr std::int64_t kWindow = 128;
constexpr std::int64_t kTopK = 512;
constexpr std::int64_t kIndexHeads = 32;
constexpr std::int64_t kIndexHeadDim = 128;
constexpr std::int64_t kCandidatePositions = 2048 * 8;  // candidate_topk_blocks x block size
constexpr std::int64_t kExperts = 384;
constexpr std::int32_t kExpertsPerToken = 6;
constexpr std::int64_t kMoeWidth = 2304;
constexpr std::int64_t kExpertParams = 3 * kHidden * kMoeWidth;  // 35,389,440
constexpr double kExpertBytes = 18'800'640;                       // MXFP4 + ue8m0 scales
constexpr double kFp8ScaleOverhead = 1.0 + 1.0 / 1024;            // one ue8m0 per 32x32 tile

constexpr double kSwaRecordBytes = 528;    // window ring entry, MXFP8
constexpr double kMainRecordBytes = 288;   // compressed KV entry, FP4 /16
constexpr double kIndexKeyBytes = 68;      // index key, MXFP4 /32

struct LayerParams {
  std::int64_t params = 0;
  double bytes = 0;
};

// Every backbone layer: attention projections, shared expert, router, mHC, norms.
LayerParams common_layer() {
  const std::int64_t wq_a = 1280 * kHidden;
  const std::int64_t wq_b = (kHeads * kHeadDim) * 1280;
  const std::int64_t wkv = kHeadDim * kHidden;
  const std::int64_t wo_a = 8192 * 4096;  // bf16 after load
  const std::int64_t wo_b = kHidden * 8192;
  const std::int64_t shared_expert = kExpertParams;  // fp8
  const std::int64_t router = kExperts * kHidden;    // bf16
  const std::int64_t mhc = 2 * 24 * (4 * kHidden);   // fp32
  const std::int64_t norms = 2 * kHidden + 1280 + kHeadDim;
  LayerParams l;
  l.params = wq_a + wq_b + wkv + wo_a + wo_b + shared_expert + router + mhc + norms;
  const double fp8 = static_cast<double>(wq_a + wq_b + wkv + wo_b + shared_expert) * kFp8ScaleOverhead;
  l.bytes = fp8 + 2.0 * static_cast<double>(wo_a + router + norms) + 4.0 * static_cast<double>(mhc);
  return l;
}

LayerParams indexer() {  // index-source layers: wq_b (fp8) and weights_proj (bf16)
  const std::int64_t wq_b = kIndexHeads * kIndexHeadDim * 1280;
  const std::int64_t weights_proj = kIndexHeads * kHidden;
  return {wq_b + weights_proj, static_cast<double>(wq_b) * kFp8ScaleOverhead + 2.0 * weights_proj};
}

LayerParams compressor(bool gated) {  // KV-source layers: wkv (+ wgate at ratio 2), indexer wk; bf16
  const std::int64_t n = kHeadDim * kHidden * (gated ? 2 : 1) + kIndexHeadDim * kHeadDim;
  return {n, 2.0 * static_cast<double>(n)};
}

LayerParams engram() {  // Engram layers: wkv 25600 x 6144 (fp8), q/k weights
  const std::int64_t wkv = 25600 * 6144;
  const std::int64_t qk = 2 * 4 * kHidden;
  return {wkv + qk, static_cast<double>(wkv) * kFp8ScaleOverhead + 2.0 * qk};
}

// Per entry of sparse attention: QK^T and PV over the 512-wide latent, all heads.
constexpr double kFlopsPerAttendedEntry = 4.0 * kHeads * kHeadDim;
// Per index key scored: 32 heads x 128 dims, one multiply-add each.
constexpr double kFlopsPerIndexKey = 2.0 * kIndexHeads * kIndexHeadDim;

LayerGroup group(const char* name, std::int32_t num_layers, TokenScope scope) {
  LayerGroup g;
  g.name = name;
  g.num_layers = num_layers;
  g.scope = scope;
  g.num_routed_experts = kExperts;
  g.num_experts_per_token = kExpertsPerToken;
  g.expert_params = kExpertParams;
  g.expert_weight_bytes = kExpertBytes;
  return g;
}

void add(LayerGroup& g, LayerParams p, std::int64_t times) {
  g.dense_params += p.params * times;
  g.dense_weight_bytes += p.bytes * static_cast<double>(times);
}

// Layers 0-19: SWA-only 0-1, ratio-2 Full 2/8/14 (compressor + indexer), Reuse
// others; Engram at 1 and 14. Every prompt token runs them.
LayerGroup encoder() {
  LayerGroup g = group("ced-encoder", 20, TokenScope::kAllTokens);
  add(g, common_layer(), 20);
  add(g, indexer(), 3);
  add(g, compressor(/*gated=*/true), 3);
  add(g, engram(), 2);
  auto& a = g.attention;
  // Layers 0-1 attend the window only; 2-19 the window plus top-512 entries.
  a.flops_per_query = kFlopsPerAttendedEntry * (2 * kWindow + 18 * (kWindow + kTopK));
  a.gather_bytes_per_query = 20 * kWindow * kSwaRecordBytes + 18 * kTopK * kMainRecordBytes;
  // Indexers at 2, 8, 14 score every visible ratio-2 entry: p/2 keys each.
  a.flops_per_query_context_token = 3 * 0.5 * kFlopsPerIndexKey;
  a.scan_bytes_per_context_token = 3 * 0.5 * kIndexKeyBytes;
  a.scan_uses_fp8 = true;
  return g;
}

// Layers 20-39: layer 20 Full ratio 1 (compressor + indexer over every
// position), Reindex at 24/28/32/36 (scored inside the 16,384-position
// candidate pool), Reuse others. Prefill runs them on the last 128 tokens only
// (SWA bounded replay); decode runs them on every token.
LayerGroup decoder() {
  LayerGroup g = group("ced-decoder", 20, TokenScope::kReplayTail);
  add(g, common_layer(), 20);
  add(g, indexer(), 5);
  add(g, compressor(/*gated=*/false), 1);
  auto& a = g.attention;
  a.flops_per_query = kFlopsPerAttendedEntry * 20 * (kWindow + kTopK) +
                      4 * kCandidatePositions * kFlopsPerIndexKey;
  a.gather_bytes_per_query = 20 * kWindow * kSwaRecordBytes + 20 * kTopK * kMainRecordBytes +
                             4 * kCandidatePositions * kIndexKeyBytes;
  a.flops_per_query_context_token = kFlopsPerIndexKey;
  a.scan_bytes_per_context_token = kIndexKeyBytes;
  a.scan_uses_fp8 = true;
  return g;
}

}  // namespace dsv41

ModelProfile deepseek_v41_flash() {
  using namespace dsv41;
  ModelProfile p;
  p.name = "deepseek-v4.1-flash";
  p.source = "/work/shared/models/deepseek-v41-flash.md (HF-CFG shapes, S4 memory arithmetic)";
  p.num_layers = 40;
  p.hidden_size = kHidden;
  p.num_attention_heads = kHeads;
  p.num_kv_heads = 1;
  p.head_dim = kHeadDim;
  p.intermediate_size = kMoeWidth;
  p.vocab_size = 129280;
  p.max_position_embeddings = 1048576;
  p.max_tensor_parallel = 8;  // o_groups = 8 must split evenly
  p.residual_streams = 4;     // mHC
  p.weight_dtype_bytes = 1;
  p.gemm_uses_fp8 = true;     // FP8 dense, FP4 experts unpacked to FP8 MMA on SM90
  p.deepseek_v4_kernels = true;  // V4's sparse attention, indexer and mHC (V4.1 keeps them)

  p.layer_groups = {encoder(), decoder()};
  p.decoder_replay_tokens = 128;

  p.embedding_params = 129280 * kHidden;
  p.head_params = 129280 * kHidden;
  p.embedding_head_bytes = 2.0 * 2.0 * 129280 * kHidden;  // both bf16
  p.other_gpu_weight_bytes = (7.39 + 0.90) * kGiB;        // DSpark draft, vision + aligner
  p.replicated_weight_bytes = 3.40 * kGiB;                // S4: replicated on every rank

  // Global KV per token: 3 ratio-2 sources x (288 + 68) / 2 + layer 20's 288 + 68.
  p.kv_bytes_per_token = 3 * (kMainRecordBytes + kIndexKeyBytes) / 2 + (kMainRecordBytes + kIndexKeyBytes);
  // FP8 main record (528) and FP8 index keys (132) instead of FP4.
  p.kv_bytes_per_token_fp8 = 3 * (528.0 + 132.0) / 2 + (528.0 + 132.0);
  p.kv_window_tokens = kWindow;
  // 40 backbone + 3 DSpark window rings of 128 MXFP8 records each.
  p.kv_state_bytes_per_sequence = (40 + 3) * kWindow * kSwaRecordBytes;

  p.host_table_bytes = 189.13 * kGiB;      // two Engram tables, e4m3 rows + scales
  p.host_bytes_per_token = 48 * 264.0;     // 2 layers x 3 orders x 8 heads rows of 264 B
  p.workspace_bytes_per_context_token = 5.2 * kGiB / 1048576.0;
  return p;
}

}  // namespace

std::vector<std::string> list_profiles() {
  return {"llama-3-8b", "llama-3-70b", "deepseek-v4.1-flash"};
}

std::optional<ModelProfile> find_profile(std::string_view name) {
  if (name == "llama-3-8b") return llama_3_8b();
  if (name == "llama-3-70b") return llama_3_70b();
  if (name == "deepseek-v4.1-flash") return deepseek_v41_flash();
  return std::nullopt;
}

}  // namespace sluice::sim
