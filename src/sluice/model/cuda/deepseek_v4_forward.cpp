#include "sluice/model/cuda/deepseek_v4_forward.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/cuda_dtype.h"
#include "sluice/backend/cuda/kernels/deepseek_v4_forward_kernels.h"
#include "sluice/model/deepseek_v4_step_plan.h"

namespace sluice::cuda {
namespace {

// One device allocation of n values (at least 16 bytes, so empty ones are valid pointers).
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(std::size_t n) : n_(n) {
    SLUICE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p_), std::max<std::size_t>(n * sizeof(T), 16)));
  }
  DeviceArray(const std::vector<T>& host, cudaStream_t stream) : DeviceArray(host.size()) {
    if (!host.empty())
      SLUICE_CUDA_CHECK(cudaMemcpyAsync(p_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
    // The host vector may die before the copy ran: pageable copies are staged, but keep it simple.
    SLUICE_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  ~DeviceArray() {
    if (p_ != nullptr) cudaFree(p_);
  }
  DeviceArray(DeviceArray&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(o.n_) {}
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  T* get() const { return p_; }
  std::size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

template <class T>
DeviceArray<T> up(const std::vector<T>& host) {
  return DeviceArray<T>(host, nullptr);
}

const Dt kF32Dt = dt_of(DType::f32);

}  // namespace

struct DeepseekV4DeviceForward::Weights {
  struct Hc {
    DeviceArray<float> fn, base, scale;
    V4HcWeights view() const { return {fn.get(), base.get(), scale.get()}; }
  };
  struct Compressor {
    DeviceArray<float> wkv, wgate, ape, norm;
    DeepseekV4PoolRegion region;
  };
  struct Layer {
    DeepseekV4Attention type{};
    bool hash = false;
    Hc attn_hc, ffn_hc;
    DeviceArray<float> attn_norm, ffn_norm;
    DeviceArray<float> wq_a, q_norm, wq_b, wkv, kv_norm, wo_a, wo_b, sinks;
    std::optional<Compressor> compressor, index_compressor;
    DeviceArray<float> index_wq_b, index_weights_proj;
    DeviceArray<float> router, bias;
    DeviceArray<std::int32_t> tid2eid;
    DeviceArray<float> gate_up, down;  // [experts + 1, ...]: the routed experts, then the shared one
    std::int64_t window_offset = 0;
  };
  const DeepseekV4KvLayout* layout = nullptr;
  ModelConfig config;
  DeepseekV4Config ds;
  DeviceArray<float> main_freq, compress_freq;
  float main_scale = 1.0f, compress_scale = 1.0f;
  DeviceArray<float> embed, final_norm, head;
  Hc hc_head;
  std::vector<Layer> layers;

  V4Rope main_rope() const { return {main_freq.get(), ds.qk_rope_head_dim, main_scale}; }
  V4Rope compress_rope() const { return {compress_freq.get(), ds.qk_rope_head_dim, compress_scale}; }
};

DeepseekV4DeviceForward::~DeepseekV4DeviceForward() = default;

Result<std::unique_ptr<DeepseekV4DeviceForward>> DeepseekV4DeviceForward::upload(const DeepseekV4Reference& ref,
                                                                                 const DeepseekV4KvLayout& layout) {
  const ModelConfig& config = ref.config_;
  const DeepseekV4Config& ds = ref.ds_;
  if (config.head_dim != kV4LatentDim || ds.index_head_dim != kV4IndexHeadDim)
    return Error{fmt::format("deepseek_v4 on CUDA: the kernels are built for head_dim {} and index_head_dim {} "
                             "(V4-Flash's); this model has {} and {}",
                             kV4LatentDim, kV4IndexHeadDim, config.head_dim, ds.index_head_dim),
                 ErrorCode::kInvalidArgument};
  if (ds.index_n_heads > kV4MaxIndexHeads || ds.hc_mult > kV4MaxHcMult || ds.n_routed_experts > kV4MaxExperts)
    return Error{fmt::format("deepseek_v4 on CUDA: at most {} index heads, hc_mult {} and {} experts",
                             kV4MaxIndexHeads, kV4MaxHcMult, kV4MaxExperts),
                 ErrorCode::kInvalidArgument};
  auto owned = std::unique_ptr<DeepseekV4DeviceForward>(new DeepseekV4DeviceForward());
  owned->w_ = std::make_unique<Weights>();
  Weights& w = *owned->w_;
  w.layout = &layout;
  w.config = config;
  w.ds = ds;
  w.main_freq = up(ref.main_rope_.inv_freq);
  w.compress_freq = up(ref.compress_rope_.inv_freq);
  w.main_scale = ref.main_rope_.cos_sin_scale;
  w.compress_scale = ref.compress_rope_.cos_sin_scale;
  w.embed = up(ref.embed_);
  w.final_norm = up(ref.final_norm_);
  w.head = up(ref.head_);
  auto hc = [](const DeepseekV4Reference::HyperConnection& h) {
    return Weights::Hc{up(h.fn), up(h.base), up(h.scale)};
  };
  auto compressor = [](const DeepseekV4Reference::Compressor& c, const DeepseekV4PoolRegion& region) {
    return Weights::Compressor{up(c.wkv), up(c.wgate), up(c.ape), up(c.norm), region};
  };
  w.hc_head = hc(ref.hc_head_);
  for (std::size_t l = 0; l < ref.layers_.size(); ++l) {
    const DeepseekV4Reference::Layer& src = ref.layers_[l];
    const DeepseekV4LayerRegion& region = layout.layer(l);
    Weights::Layer& d = w.layers.emplace_back();
    d.type = src.type;
    d.window_offset = region.window_offset;
    d.attn_hc = hc(src.attn_hc);
    d.ffn_hc = hc(src.ffn_hc);
    d.attn_norm = up(src.attn_norm);
    d.ffn_norm = up(src.ffn_norm);
    const auto& a = src.attention;
    d.wq_a = up(a.wq_a);
    d.q_norm = up(a.q_norm);
    d.wq_b = up(a.wq_b);
    d.wkv = up(a.wkv);
    d.kv_norm = up(a.kv_norm);
    d.wo_a = up(a.wo_a);
    d.wo_b = up(a.wo_b);
    d.sinks = up(a.sinks);
    if (a.compressor) d.compressor = compressor(*a.compressor, *region.compressor);
    if (a.indexer) {
      d.index_compressor = compressor(a.indexer->compressor, *region.indexer);
      d.index_wq_b = up(a.indexer->wq_b);
      d.index_weights_proj = up(a.indexer->weights_proj);
    }
    const auto& m = src.moe;
    d.router = up(m.router);
    d.hash = !m.tid2eid.empty();
    if (d.hash) d.tid2eid = up(m.tid2eid);
    else d.bias = up(m.bias);
    std::vector<float> gate_up, down;
    for (std::size_t e = 0; e < m.gate_up.size(); ++e) {
      gate_up.insert(gate_up.end(), m.gate_up[e].begin(), m.gate_up[e].end());
      down.insert(down.end(), m.down[e].begin(), m.down[e].end());
    }
    gate_up.insert(gate_up.end(), m.shared_gate_up.begin(), m.shared_gate_up.end());
    down.insert(down.end(), m.shared_down.begin(), m.shared_down.end());
    d.gate_up = up(gate_up);
    d.down = up(down);
  }
  return owned;
}

namespace {

// The step's int32 arrays on the device, and per-item block tables.
struct StepDevice {
  DeepseekV4StepTables t;
  DeviceArray<std::int32_t> block_ids, tokens, positions, row_table_begin, row_table_len;

  // Block tables for items that belong to `sequences` (one entry an item).
  struct ItemTables {
    DeviceArray<std::int32_t> begin, len;
  };
  ItemTables tables_of(const std::vector<std::int32_t>& sequences) const {
    std::vector<std::int32_t> begin, len;
    for (std::int32_t s : sequences) {
      begin.push_back(t.sequence_table_begin[static_cast<std::size_t>(s)]);
      len.push_back(t.sequence_table_len[static_cast<std::size_t>(s)]);
    }
    return {up(begin), up(len)};
  }
  V4BlockTables view(const ItemTables& it) const { return {block_ids.get(), it.begin.get(), it.len.get()}; }
  V4BlockTables rows_view() const { return {block_ids.get(), row_table_begin.get(), row_table_len.get()}; }
};

V4PagedRegion pool_region(const DeepseekV4PoolRegion& r, V4PagedSite site) {
  const bool entry = site == V4PagedSite::entry;
  return {.site = site,
          .offset = entry ? r.entries_offset : r.pending_offset,
          .count = static_cast<std::int32_t>(entry ? r.dim : r.width),
          .rate = static_cast<std::int32_t>(r.rate),
          .ring_windows = static_cast<std::int32_t>(r.ring_windows)};
}

void linear(const float* x, const DeviceArray<float>& w, std::int32_t m, std::int32_t k, float* y, cudaStream_t s) {
  const auto n = static_cast<std::int32_t>(w.size() / static_cast<std::size_t>(k));
  launch_v4_linear_f32({.x = x, .w = w.get(), .y = y, .m = m, .n = n, .k = k, .ldx = k, .ldy = n}, s);
}

// One compressor's share of a step (DeepseekV4Reference::compress): the
// projections of the step's rows and the ring rows the plan reads back in a
// dense buffer, the windows the step completes pooled into entries, then the
// rows the reference leaves in the ring stored back.
void compress_step(const DeepseekV4DeviceForward::Weights& w, const StepDevice& step, const V4PagedBlocks& blocks,
                   const DeepseekV4DeviceForward::Weights::Compressor& c, const float* x, std::int32_t n,
                   cudaStream_t s) {
  const DeepseekV4PoolRegion& r = c.region;
  const auto width = static_cast<std::int32_t>(r.width), hidden = w.config.hidden_size;
  const DeepseekV4CompressPlan plan = DeepseekV4CompressPlan::make(step.t, static_cast<std::int32_t>(r.rate),
                                                                   r.overlapping(), blocks.block_size);
  DeviceArray<float> fresh(static_cast<std::size_t>(n) * 2 * width);  // [kv rows | gate rows]
  DeviceArray<float> kv(static_cast<std::size_t>(plan.buffer_rows) * width), gate(kv.size());
  linear(x, c.wkv, n, hidden, fresh.get(), s);
  linear(x, c.wgate, n, hidden, fresh.get() + static_cast<std::size_t>(n) * width, s);
  const DeviceArray<std::int32_t> new_rows = up(plan.new_buffer_row);
  launch_v4_copy_rows(fresh.get(), nullptr, kv.get(), new_rows.get(), n, width, s);
  launch_v4_copy_rows(fresh.get() + static_cast<std::size_t>(n) * width, nullptr, gate.get(), new_rows.get(), n,
                      width, s);
  const V4PagedRegion kv_region = pool_region(r, V4PagedSite::pending_kv);
  const V4PagedRegion gate_region = pool_region(r, V4PagedSite::pending_gate);
  if (!plan.read_position.empty()) {
    const StepDevice::ItemTables tt = step.tables_of(plan.read_sequence);
    const DeviceArray<std::int32_t> index = up(plan.read_position), rows = up(plan.read_buffer_row);
    for (const auto& [region, dense] : {std::pair{kv_region, kv.get()}, std::pair{gate_region, gate.get()}})
      launch_v4_paged_copy({.blocks = blocks, .tables = step.view(tt), .region = region, .index = index.get(),
                            .dense = dense, .dense_row = rows.get(), .dense_dt = kF32Dt,
                            .items = static_cast<std::int32_t>(plan.read_position.size())},
                           s);
  }
  if (!plan.entry_index.empty()) {
    const auto entries = static_cast<std::int32_t>(plan.entry_index.size());
    const DeviceArray<std::int32_t> win = up(plan.window_row), prev = up(plan.prev_window_row),
                                    pos = up(plan.entry_position), index = up(plan.entry_index);
    DeviceArray<float> out(static_cast<std::size_t>(entries) * r.dim);
    launch_v4_compress({.kv = kv.get(), .gate = gate.get(), .ape = c.ape.get(), .norm = c.norm.get(),
                        .window_row = win.get(), .prev_window_row = prev.get(), .position = pos.get(),
                        .rope = w.compress_rope(), .out = out.get(), .out_dt = kF32Dt, .entries = entries,
                        .dim = static_cast<std::int32_t>(r.dim), .width = width,
                        .rate = static_cast<std::int32_t>(r.rate), .eps = w.config.rms_norm_eps},
                       s);
    const StepDevice::ItemTables tt = step.tables_of(plan.entry_sequence);
    launch_v4_paged_copy({.blocks = blocks, .tables = step.view(tt), .region = pool_region(r, V4PagedSite::entry),
                          .index = index.get(), .dense = out.get(), .dense_dt = kF32Dt, .items = entries,
                          .to_blocks = true},
                         s);
    SLUICE_CUDA_CHECK(cudaStreamSynchronize(s));  // before `out` and the tables are freed
  }
  std::vector<std::int32_t> store_sequence, store_position, store_buffer_row;
  for (std::int32_t row : plan.store_row) {
    store_sequence.push_back(step.t.row_sequence[static_cast<std::size_t>(row)]);
    store_position.push_back(step.t.positions[static_cast<std::size_t>(row)]);
    store_buffer_row.push_back(plan.new_buffer_row[static_cast<std::size_t>(row)]);
  }
  if (!store_position.empty()) {
    const StepDevice::ItemTables tt = step.tables_of(store_sequence);
    const DeviceArray<std::int32_t> index = up(store_position), rows = up(store_buffer_row);
    for (const auto& [region, dense] : {std::pair{kv_region, kv.get()}, std::pair{gate_region, gate.get()}})
      launch_v4_paged_copy({.blocks = blocks, .tables = step.view(tt), .region = region, .index = index.get(),
                            .dense = dense, .dense_row = rows.get(), .dense_dt = kF32Dt,
                            .items = static_cast<std::int32_t>(store_position.size()), .to_blocks = true},
                           s);
  }
  SLUICE_CUDA_CHECK(cudaStreamSynchronize(s));
}

// DeepseekV4Reference::run_attention for every row: x [n, hidden] -> out [n, hidden].
void attention(const DeepseekV4DeviceForward::Weights& w, std::size_t layer_index, const StepDevice& step,
               const V4PagedBlocks& blocks, const float* x, std::int32_t n, float* out, cudaStream_t s) {
  const auto& L = w.layers[layer_index];
  const ModelConfig& cfg = w.config;
  const DeepseekV4Config& ds = w.ds;
  const std::int32_t hidden = cfg.hidden_size, heads = cfg.num_heads, hd = cfg.head_dim, q_lora = ds.q_lora_rank;
  const float eps = cfg.rms_norm_eps;
  const V4Rope rope = L.type == DeepseekV4Attention::sliding ? w.main_rope() : w.compress_rope();
  const std::int32_t* positions = step.positions.get();

  // Queries: q_a, its norm, q_b, an unweighted norm per head, rope; bf16 for the attention.
  DeviceArray<float> q_residual(static_cast<std::size_t>(n) * q_lora);
  linear(x, L.wq_a, n, hidden, q_residual.get(), s);
  launch_v4_rms_norm_f32(q_residual.get(), n, q_lora, L.q_norm.get(), eps, s);
  DeviceArray<float> q(static_cast<std::size_t>(n) * heads * hd);
  linear(q_residual.get(), L.wq_b, n, q_lora, q.get(), s);
  launch_v4_rms_norm_f32(q.get(), static_cast<std::int64_t>(n) * heads, hd, nullptr, eps, s);
  launch_v4_rope_tail_f32(q.get(), n, heads, hd, positions, rope, false, s);
  DeviceArray<std::uint16_t> q_bf16(q.size());
  launch_v4_f32_to_bf16(q.get(), q_bf16.get(), static_cast<std::int64_t>(q.size()), s);
  // The shared K=V latent of each new token joins its sequence's window.
  DeviceArray<float> kv(static_cast<std::size_t>(n) * hd);
  linear(x, L.wkv, n, hidden, kv.get(), s);
  launch_v4_rms_norm_f32(kv.get(), n, hd, L.kv_norm.get(), eps, s);
  launch_v4_rope_tail_f32(kv.get(), n, 1, hd, positions, rope, false, s);
  const V4PagedRegion window_region{.site = V4PagedSite::window, .offset = L.window_offset, .count = hd};
  launch_v4_paged_copy({.blocks = blocks, .tables = step.rows_view(), .region = window_region, .index = positions,
                        .dense = kv.get(), .dense_dt = kF32Dt, .items = n, .to_blocks = true},
                       s);
  if (L.compressor) compress_step(w, step, blocks, *L.compressor, x, n, s);

  // CSA: the indexer's picks among the visible entries.
  const std::int32_t top_k = ds.index_topk;
  DeviceArray<std::int32_t> selected, num_selected;
  if (L.index_compressor) {
    compress_step(w, step, blocks, *L.index_compressor, x, n, s);
    const std::int32_t ih = ds.index_n_heads, ihd = ds.index_head_dim;
    DeviceArray<float> index_q(static_cast<std::size_t>(n) * ih * ihd), weights(static_cast<std::size_t>(n) * ih);
    linear(q_residual.get(), L.index_wq_b, n, q_lora, index_q.get(), s);
    launch_v4_rope_tail_f32(index_q.get(), n, ih, ihd, positions, w.compress_rope(), false, s);
    linear(x, L.index_weights_proj, n, hidden, weights.get(), s);
    launch_v4_scale_f32(weights.get(), static_cast<std::int64_t>(weights.size()),
                        1.0f / std::sqrt(static_cast<float>(ih)), s);
    const DeepseekV4IndexPlan plan =
        DeepseekV4IndexPlan::make(step.t, static_cast<std::int32_t>(L.index_compressor->region.rate));
    selected = DeviceArray<std::int32_t>(static_cast<std::size_t>(n) * top_k);
    num_selected = DeviceArray<std::int32_t>(static_cast<std::size_t>(n));
    if (plan.max_visible == 0) {
      SLUICE_CUDA_CHECK(cudaMemsetAsync(num_selected.get(), 0, num_selected.size() * sizeof(std::int32_t), s));
    } else {
      const auto pool = static_cast<std::int32_t>(plan.key_entry.size());
      DeviceArray<float> keys(static_cast<std::size_t>(pool) * ihd), key_scale(static_cast<std::size_t>(pool));
      const StepDevice::ItemTables tt = step.tables_of(plan.key_sequence);
      const DeviceArray<std::int32_t> key_entry = up(plan.key_entry);
      launch_v4_paged_copy({.blocks = blocks, .tables = step.view(tt),
                            .region = pool_region(L.index_compressor->region, V4PagedSite::entry),
                            .index = key_entry.get(), .dense = keys.get(), .dense_dt = kF32Dt, .items = pool},
                           s);
      DeviceArray<std::uint8_t> keys_e4m3(static_cast<std::size_t>(pool) * ihd);
      launch_v4_quantize_e4m3_rows(keys.get(), pool, ihd, keys_e4m3.get(), key_scale.get(), s);
      DeviceArray<std::uint8_t> q_e4m3(index_q.size());
      DeviceArray<float> q_scale(static_cast<std::size_t>(n) * ih);
      launch_v4_quantize_e4m3_rows(index_q.get(), static_cast<std::int64_t>(n) * ih, ihd, q_e4m3.get(),
                                   q_scale.get(), s);
      const DeviceArray<std::int32_t> key_begin = up(plan.row_key_begin), visible = up(plan.row_num_visible);
      DeviceArray<float> scores(static_cast<std::size_t>(n) * plan.max_visible);
      const V4IndexerArgs args{.q = q_e4m3.get(), .q_scale = q_scale.get(), .weights = weights.get(),
                               .keys = keys_e4m3.get(), .key_scale = key_scale.get(), .key_begin = key_begin.get(),
                               .num_visible = visible.get(), .scores = scores.get(), .selected = selected.get(),
                               .num_selected = num_selected.get(), .rows = n, .num_heads = ih,
                               .max_visible = plan.max_visible, .top_k = top_k};
      launch_v4_indexer_scores(args, s);
      launch_v4_indexer_top_k(args, s);
      SLUICE_CUDA_CHECK(cudaStreamSynchronize(s));
    }
  }

  // Each row's key set (window, then the picks or every visible HCA entry), the sparse attention.
  std::int32_t max_keys = ds.sliding_window;
  if (L.index_compressor) {
    max_keys += top_k;
  } else if (L.compressor) {
    std::int32_t most = 0;
    for (std::int32_t p : step.t.positions) most = std::max(most, (p + 1) / static_cast<std::int32_t>(L.compressor->region.rate));
    max_keys += most;
  }
  DeviceArray<std::uint16_t> keys(static_cast<std::size_t>(n) * max_keys * hd);
  DeviceArray<std::int32_t> key_rows(static_cast<std::size_t>(n) * max_keys), num_keys(static_cast<std::size_t>(n));
  V4GatherKeysArgs gather{.blocks = blocks, .tables = step.rows_view(), .positions = positions,
                          .window = window_region, .sliding_window = ds.sliding_window, .keys = keys.get(),
                          .key_rows = key_rows.get(), .num_keys = num_keys.get(), .rows = n, .max_keys = max_keys};
  if (L.compressor) gather.entries = pool_region(L.compressor->region, V4PagedSite::entry);
  if (L.index_compressor) {
    gather.selected = selected.get();
    gather.num_selected = num_selected.get();
    gather.top_k = top_k;
  }
  launch_v4_gather_keys(gather, s);
  DeviceArray<float> attn(static_cast<std::size_t>(n) * heads * hd);
  launch_v4_sparse_attention({.q = q_bf16.get(), .kv = keys.get(), .key_rows = key_rows.get(),
                              .num_keys = num_keys.get(), .sinks = L.sinks.get(), .positions = positions,
                              .rope = rope, .out = attn.get(), .out_dt = kF32Dt, .rows = n, .num_heads = heads,
                              .max_keys = max_keys, .softmax_scale = 1.0f / std::sqrt(static_cast<float>(hd))},
                             s);
  // Grouped output: each group of heads to o_lora_rank by its block of wo_a (one batched launch), then wo_b.
  const std::int32_t groups = ds.o_groups, group_in = heads * hd / groups, o_lora = ds.o_lora_rank;
  DeviceArray<float> grouped(static_cast<std::size_t>(n) * groups * o_lora);
  launch_v4_linear_f32({.x = attn.get(), .w = L.wo_a.get(), .y = grouped.get(), .m = n, .n = o_lora, .k = group_in,
                        .batches = groups, .ldx = static_cast<std::int64_t>(heads) * hd,
                        .ldy = static_cast<std::int64_t>(groups) * o_lora, .x_batch = group_in,
                        .w_batch = static_cast<std::int64_t>(o_lora) * group_in, .y_batch = o_lora},
                       s);
  linear(grouped.get(), L.wo_b, n, groups * o_lora, out, s);
  SLUICE_CUDA_CHECK(cudaStreamSynchronize(s));  // the temporaries above are freed on return
}

// DeepseekV4Reference::run_moe: x [n, hidden] -> out [n, hidden].
void moe(const DeepseekV4DeviceForward::Weights& w, std::size_t layer_index, const StepDevice& step, const float* x,
         std::int32_t n, float* out, cudaStream_t s) {
  const auto& L = w.layers[layer_index];
  const DeepseekV4Config& ds = w.ds;
  const std::int32_t hidden = w.config.hidden_size, experts = ds.n_routed_experts, k = ds.num_experts_per_tok;
  const std::int32_t inter = ds.moe_intermediate_size;
  DeviceArray<float> logits(static_cast<std::size_t>(n) * experts);
  linear(x, L.router, n, hidden, logits.get(), s);
  DeviceArray<std::int32_t> ids(static_cast<std::size_t>(n) * k);
  DeviceArray<float> weights(static_cast<std::size_t>(n) * k);
  launch_v4_route({.logits = logits.get(), .bias = L.hash ? nullptr : L.bias.get(),
                   .hash_table = L.hash ? L.tid2eid.get() : nullptr, .token_ids = step.tokens.get(),
                   .expert_ids = ids.get(), .expert_weights = weights.get(), .rows = n, .num_experts = experts, .k = k,
                   .scale = ds.routed_scaling_factor},
                  s);
  const std::size_t slots = static_cast<std::size_t>(n) * (k + 1);
  DeviceArray<float> gate_up(slots * 2 * inter), act(slots * inter);
  V4DenseExpertArgs args{.x = x, .expert_ids = ids.get(), .expert_weights = weights.get(), .gate_up = L.gate_up.get(),
                         .down = L.down.get(), .gate_up_out = gate_up.get(), .act = act.get(), .out = out,
                         .rows = n, .k = k, .hidden = hidden, .inter = inter, .num_experts = experts};
  launch_v4_dense_expert_up(args, s);
  launch_v4_clamped_swiglu({.in = gate_up.get(), .in_dt = kF32Dt, .out = act.get(), .out_dt = kF32Dt,
                            .rows = static_cast<std::int32_t>(slots), .inter = inter, .limit = ds.swiglu_limit},
                           s);
  launch_v4_dense_expert_down(args, s);
  SLUICE_CUDA_CHECK(cudaStreamSynchronize(s));
}

}  // namespace

Result<std::vector<float>> DeepseekV4DeviceForward::forward(const StepLayout& layout, const V4PagedBlocks& blocks,
                                                            cudaStream_t s) const {
  const Weights& w = *w_;
  const ModelConfig& cfg = w.config;
  const DeepseekV4Config& ds = w.ds;
  if (blocks.block_size != w.layout->block_size_tokens() || blocks.floats_per_block < w.layout->floats_per_block())
    return Error{"deepseek_v4 on CUDA: the blocks do not match the KV layout", ErrorCode::kInvalidArgument};
  const std::int32_t n = layout.num_rows(), hidden = cfg.hidden_size, hc = ds.hc_mult, vocab = cfg.vocab_size;
  if (n == 0) return std::vector<float>{};
  for (TokenId t : layout.token_ids)
    if (t < 0 || t >= vocab)
      return Error{fmt::format("deepseek_v4: token id {} is outside the vocabulary of {}", t, vocab)};
  StepDevice step;
  step.t = DeepseekV4StepTables::make(layout);
  std::vector<std::int32_t> row_begin, row_len;
  for (std::int32_t sq : step.t.row_sequence) {
    row_begin.push_back(step.t.sequence_table_begin[static_cast<std::size_t>(sq)]);
    row_len.push_back(step.t.sequence_table_len[static_cast<std::size_t>(sq)]);
  }
  for (std::size_t q = 0; q < layout.sequences.size(); ++q) {
    const std::int64_t last = layout.sequences[q].num_computed_tokens + layout.sequences[q].num_rows;
    if (last > static_cast<std::int64_t>(layout.sequences[q].block_table.size()) * blocks.block_size)
      return Error{"deepseek_v4 on CUDA: a sequence's block table is shorter than its tokens",
                   ErrorCode::kInvalidArgument};
  }
  step.block_ids = up(step.t.block_ids);
  step.tokens = up(std::vector<std::int32_t>(layout.token_ids.begin(), layout.token_ids.end()));
  step.positions = up(step.t.positions);
  step.row_table_begin = up(row_begin);
  step.row_table_len = up(row_len);

  // Every stream starts as the token's embedding.
  DeviceArray<float> streams(static_cast<std::size_t>(n) * hc * hidden);
  launch_v4_embed_streams(w.embed.get(), step.tokens.get(), n, hc, hidden, streams.get(), s);
  DeviceArray<float> x(static_cast<std::size_t>(n) * hidden), y(x.size());
  DeviceArray<float> post(static_cast<std::size_t>(n) * hc), comb(static_cast<std::size_t>(n) * hc * hc);
  auto sub_layer = [&](const Weights::Hc& site, const DeviceArray<float>& norm, auto&& run) {
    launch_v4_hc_pre({.streams = streams.get(), .w = site.view(), .post = post.get(), .comb = comb.get(),
                      .collapsed = x.get(), .out_dt = kF32Dt, .rows = n, .hc = hc, .hidden = hidden,
                      .sinkhorn_iters = ds.hc_sinkhorn_iters, .hc_eps = ds.hc_eps, .norm_eps = cfg.rms_norm_eps},
                     s);
    launch_v4_rms_norm_f32(x.get(), n, hidden, norm.get(), cfg.rms_norm_eps, s);
    run();
    launch_v4_hc_post({.streams = streams.get(), .y = y.get(), .y_dt = kF32Dt, .post = post.get(),
                       .comb = comb.get(), .rows = n, .hc = hc, .hidden = hidden},
                      s);
  };
  for (std::size_t l = 0; l < w.layers.size(); ++l) {
    const Weights::Layer& L = w.layers[l];
    sub_layer(L.attn_hc, L.attn_norm, [&] { attention(w, l, step, blocks, x.get(), n, y.get(), s); });
    sub_layer(L.ffn_hc, L.ffn_norm, [&] { moe(w, l, step, x.get(), n, y.get(), s); });
  }
  // The sampled rows: hc_head, the final norm, the LM head.
  const auto sampled = static_cast<std::int32_t>(layout.sample_rows.size());
  if (sampled == 0) {
    SLUICE_CUDA_CHECK(cudaStreamSynchronize(s));
    return std::vector<float>{};
  }
  for (std::int32_t r : layout.sample_rows)
    if (r < 0 || r >= n) return Error{"deepseek_v4: a sample row is outside the step", ErrorCode::kInvalidArgument};
  const DeviceArray<std::int32_t> sample_rows = up(layout.sample_rows);
  DeviceArray<float> picked(static_cast<std::size_t>(sampled) * hc * hidden), last(static_cast<std::size_t>(sampled) * hidden);
  launch_v4_copy_rows(streams.get(), sample_rows.get(), picked.get(), nullptr, sampled, hc * hidden, s);
  launch_v4_hc_pre({.streams = picked.get(), .w = w.hc_head.view(), .collapsed = last.get(), .out_dt = kF32Dt,
                    .rows = sampled, .hc = hc, .hidden = hidden, .hc_eps = ds.hc_eps, .norm_eps = cfg.rms_norm_eps,
                    .head = true},
                   s);
  launch_v4_rms_norm_f32(last.get(), sampled, hidden, w.final_norm.get(), cfg.rms_norm_eps, s);
  DeviceArray<float> logits(static_cast<std::size_t>(sampled) * vocab);
  linear(last.get(), w.head, sampled, hidden, logits.get(), s);
  std::vector<float> host(logits.size());
  SLUICE_CUDA_CHECK(cudaMemcpyAsync(host.data(), logits.get(), host.size() * sizeof(float), cudaMemcpyDeviceToHost, s));
  SLUICE_CUDA_CHECK(cudaStreamSynchronize(s));
  return host;
}

}  // namespace sluice::cuda
