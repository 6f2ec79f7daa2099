// CudaOps: the Ops contract on one GPU, tying together the parts that live in
// their own files (cuda_ops.h lists them). An op checks shapes, then launches
// its kernels on the one stream unless the step is replaying a decode graph.
#include "sluice/backend/cuda/cuda_ops.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <optional>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "sluice/backend/block_scales.h"
#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/cuda_dtype.h"
#include "sluice/backend/cuda/cudnn_sdpa.h"
#include "sluice/backend/cuda/host_kv_tier.h"
#include "sluice/backend/cuda/decode_graphs.h"
#include "sluice/backend/cuda/device_buffer.h"
#include "sluice/backend/cuda/device_weights.h"
#include "sluice/backend/cuda/fp8_matmul.h"
#include "sluice/backend/cuda/kernels/kernels.h"
#include "sluice/backend/cuda/kernels/moe_kernels.h"
#include "sluice/backend/cuda/lt_gemm.h"
#include "sluice/backend/cuda/mla_attention.h"
#include "sluice/backend/cuda/moe.h"
#include "sluice/backend/cuda/rope_frequencies.h"
#include "sluice/backend/cuda/scratch_arena.h"
#include "sluice/backend/cuda/step_metadata.h"
#include "sluice/backend/cuda/step_sampler.h"
#include "sluice/backend/cuda/stream_partition.h"

namespace sluice {
namespace {

using cuda::dt_of;

// The Ops' stream, destroyed after every other member has released what it
// enqueued (the first member, so the last destroyed).
struct OwnedStream {
  cudaStream_t stream;
  ~OwnedStream() { cudaStreamDestroy(stream); }
};

class CudaOps final : public Ops {
 public:
  CudaOps(const CudaOptions& options, cuda::PartitionedStream partitioned)
      : CudaOps(options, partitioned.stream) {
    num_sms_ = partitioned.num_sms;
    if (options.gemm_sm_count_target && options.stream_sms < 0) gemm_.set_sm_count_target(num_sms_);
  }
  CudaOps(const CudaOptions& options, cudaStream_t stream)
      : owned_stream_{stream}, options_(options), stream_(stream), launch_{.stream = stream, .programmatic = options.programmatic_launch},
        weights_(stream), scratch_(options.scratch_bytes, stream), gemm_(stream, options.gemm_workspace_bytes),
        fp8_matmul_(gemm_, options.fp8_dense_gemm), metadata_(stream), graphs_(stream), sampler_(stream),
        mla_(stream, gemm_) {
    int device = 0;
    SLUICE_CUDA_CHECK(cudaGetDevice(&device));
    SLUICE_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, device));
    cuda::prepare_grouped_gemm();
    cuda::prepare_grouped_gemm_fp8();
    split_arrivals_.ensure(kSplitArrivals * static_cast<std::int64_t>(sizeof(int)), stream_);
    SLUICE_CUDA_CHECK(cudaMemsetAsync(split_arrivals_.data(), 0, kSplitArrivals * sizeof(int), stream_));
  }
  ~CudaOps() override {
    graphs_.abort_capture();
    cudaStreamSynchronize(stream_);
    host_tier_.drain();  // its copies read and write kv_cache_
    graphs_.clear();
    if (owns_kv_cache_) cudaFree(kv_cache_);
  }

  // A lane shares the pages (and reads the weights uploaded here through the
  // model's tensors); everything a step writes besides the pages is its own.
  Result<std::unique_ptr<Ops>> make_lane(const LaneOptions& lane_options) override {
    if (kv_cache_ == nullptr) return Error{"CUDA backend: a lane needs the KV cache allocated first"};
    CudaOptions options = options_;
    options.stream_high_priority = lane_options.high_priority;
    options.stream_sms = lane_options.num_sms;
    if (lane_options.num_sms > 0) options.gemv_max_rows = 0;  // cuBLASLt reaches HBM speed on few SMs, the GEMV not
    SLUICE_TRY_ASSIGN(stream, cuda::make_partitioned_stream(
                                  options.device_index,
                                  {.sms = lane_options.num_sms, .high_priority = lane_options.high_priority}));
    auto lane = std::make_unique<CudaOps>(options, stream);
    // The pages were zeroed on this stream: the lane's first step must see that.
    SLUICE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    lane->kv_cache_ = kv_cache_;
    lane->owns_kv_cache_ = false;
    lane->kv_spec_ = kv_spec_;
    return std::unique_ptr<Ops>(std::move(lane));
  }

  // --- memory ---
  DType activation_dtype() const override { return DType::bf16; }

  Result<Tensor> upload_weight(const Tensor& host) override {
    return weights_.upload(std::span<const Tensor>(&host, 1));
  }

  Result<Tensor> upload_concatenated(std::span<const Tensor> parts) override { return weights_.upload(parts); }

  // FP8 weights stay FP8 for matmul (fp8_matmul.h) and moe_experts (moe.h), 128x128 blocks.
  bool keeps_fp8_block_weights(std::int32_t block_rows, std::int32_t block_cols) const override {
    return block_rows == 128 && block_cols == 128;
  }

  Status allocate_kv_cache(const KvCacheSpec& spec) override {
    // Model-defined (DeepSeek-V4, docs/kv-v4.md): each block one f32 area the
    // model lays out, the CPU's bytes exactly, so the prefix cache and the host
    // tier move the same state on both backends (kernels/deepseek_v4_paged.cu
    // addresses it). The FP8 records of DeepseekV4KvRecords::cuda_fp8 are stage 4.
    const bool model_defined = spec.layout == KvCacheLayout::model_defined;
    if (model_defined && (spec.num_layers != 1 || spec.num_kv_heads != 1))
      return Error{fmt::format("CUDA backend: a model-defined KV cache is one area a block (num_layers {}, "
                               "num_kv_heads {}; 1 and 1 expected)",
                               spec.num_layers, spec.num_kv_heads)};
    if (spec.layout == KvCacheLayout::latent && spec.num_kv_heads != 1)
      return Error{fmt::format("CUDA backend: a latent KV cache has one entry a position (num_kv_heads {})",
                               spec.num_kv_heads)};
    if (spec.layout == KvCacheLayout::latent && spec.head_dim % 8 != 0)
      return Error{fmt::format("CUDA backend: a latent KV cache needs head_dim a multiple of 8 (16-byte rows), got {}",
                               spec.head_dim)};
    if (spec.layout == KvCacheLayout::key_value && !cuda::split_kernel_supports(spec.head_dim))
      return Error{fmt::format("CUDA backend: head_dim {} is not supported (16, 32, 64, 128, 256)",
                               spec.head_dim)};
    if (spec.num_kv_heads <= 0 || spec.num_layers <= 0 || spec.num_blocks <= 0 ||
        spec.block_size_tokens <= 0 || spec.head_dim <= 0)
      return Error{"CUDA backend: KV cache spec has a zero dimension"};
    const DType cache_dtype = spec.value_dtype(DType::bf16);
    const std::int64_t bytes = spec.bytes_per_block(cache_dtype) * spec.num_blocks;
    if (!owns_kv_cache_) return Error{"CUDA backend: a lane reads the KV cache of the Ops it was made from"};
    if (kv_cache_ != nullptr) SLUICE_CUDA_CHECK(cudaFree(kv_cache_));
    kv_cache_ = nullptr;
    if (cudaMalloc(&kv_cache_, static_cast<std::size_t>(bytes)) != cudaSuccess) {
      cudaGetLastError();
      std::size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      return Error{fmt::format(
          "CUDA backend: the KV cache needs {:.2f} GiB ({} blocks x {} bytes) but only {:.2f} GiB "
          "of {:.2f} GiB is free",
          bytes / 1073741824.0, spec.num_blocks, spec.bytes_per_block(cache_dtype),
          free_bytes / 1073741824.0, total_bytes / 1073741824.0)};
    }
    SLUICE_CUDA_CHECK(cudaMemsetAsync(kv_cache_, 0, static_cast<std::size_t>(bytes), stream_));
    kv_spec_ = spec;
    graphs_.clear();  // they hold the old cache's address
    // cuDNN loads (dlopen, handles, the plan builder) before serving, not
    // inside the first prefill step.
    if (cuda::uses_cudnn(options_.prefill_attention) && options_.cudnn_plans_in_background && !model_defined)
      open_cudnn();
    if (spec.layout == KvCacheLayout::key_value) SLUICE_TRY(build_cudnn_plans_before_serving());
    return Ok{};
  }

  // The serving bounds' longest key range: no sequence holds more keys than the cache.
  std::int32_t serving_max_keys() const {
    const std::int64_t capacity = kv_spec_.num_blocks * static_cast<std::int64_t>(kv_spec_.block_size_tokens);
    const std::int32_t asked = options_.cudnn_serving_bounds.max_keys;
    return static_cast<std::int32_t>(asked > 0 ? std::min<std::int64_t>(asked, capacity)
                                               : std::min<std::int64_t>(capacity, 1 << 30));
  }

  // Every cuDNN plan the server's steps can ask for (cuda_options.h's
  // cudnn_serving_bounds), built now.
  Status build_cudnn_plans_before_serving() {
    cuda::SdpaServingBounds bounds = options_.cudnn_serving_bounds;
    if (cudnn_ == nullptr || !options_.cudnn_plans_in_background || bounds.max_step_rows <= 0 ||
        !cuda::prefill_kernel_supports(kv_spec_.head_dim))
      return Ok{};
    bounds.max_keys = serving_max_keys();
    const std::int32_t hd = kv_spec_.head_dim, hk = kv_spec_.num_kv_heads;
    if (!cuda::cudnn_sdpa_unsupported(bounds.num_q_heads, hk, hd, hd, kv_spec_.block_size_tokens).empty()) return Ok{};
    const std::int64_t row_elems = static_cast<std::int64_t>(bounds.num_q_heads) * hd;
    SLUICE_TRY_ASSIGN(done, cudnn_->build_plans_before_serving(
                                {.q_row_elems = row_elems, .out_row_elems = row_elems,
                                 .kv_row_elems = static_cast<std::int64_t>(hk) * hd,
                                 .block_size = kv_spec_.block_size_tokens, .num_q_heads = bounds.num_q_heads,
                                 .num_kv_heads = hk, .head_dim_qk = hd, .head_dim_v = hd, .num_sms = num_sms_,
                                 .num_blocks = kv_spec_.num_blocks},
                                bounds, options_.cudnn_serving_wait_s));
    spdlog::info("prefill attention cudnn: {} of {} plans built before serving (steps of <= {} rows, {} sequences, "
                 "{} keys) in {:.1f} s; {} left to build while serving{}",
                 done.num_built, done.num_classes, bounds.max_step_rows, bounds.max_sequences, bounds.max_keys,
                 done.build_s, done.num_left,
                 done.num_refused == 0 ? std::string()
                                       : fmt::format("; {} refused, the first: {}", done.num_refused,
                                                     done.first_refusal));
    return Ok{};
  }

  // The host KV tier (host_kv_tier.h): pinned memory, copies on their own stream.
  Status allocate_host_kv_cache(std::int32_t num_blocks) override {
    return host_tier_.allocate(num_blocks, kv_spec_, kv_cache_);
  }
  // The measured pinned copy rate on the H200 (../shared/DEVICE.md), each direction.
  double host_link_bytes_per_s() const override { return 55e9; }
  Result<std::vector<KvCopyCompletion>> copy_kv_blocks(std::span<const KvBlockCopy> copies,
                                                       bool wait_for_one) override {
    return host_tier_.copy(copies, wait_for_one, stream_);
  }

  Tensor scratch(Shape shape, DType dtype) override {
    const std::int64_t bytes = shape.numel() * static_cast<std::int64_t>(dtype_size_bytes(dtype));
    return Tensor{scratch_.allocate(bytes), dtype, shape};
  }

  std::optional<std::int64_t> device_memory_free_bytes() const override {
    std::size_t free_bytes = 0, total_bytes = 0;
    SLUICE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    return static_cast<std::int64_t>(free_bytes);
  }

  // --- step ---
  void begin_step(const StepLayout& layout) override {
    // The current device is per host thread; the engine may step on another
    // thread than the one that made this Ops.
    SLUICE_CUDA_CHECK(cudaSetDevice(options_.device_index));
    finish_step_graph();
    scratch_.reset();
    layout_ = &layout;
    ++step_serial_;
    std::optional<cuda::GraphKey> key;
    // No graphs over a model-defined cache: no forward of CudaOps runs over one yet.
    if (options_.use_cuda_graphs && kv_cache_ != nullptr && kv_spec_.layout != KvCacheLayout::model_defined)
      key = cuda::decode_graph_key(layout, options_.graph_buckets);
    // MLA's decode workspace is sized before the capture, never during it.
    if (key && kv_spec_.layout == KvCacheLayout::latent &&
        !mla_.prepare_decode(key->num_rows, key->context_bucket, num_sms_, options_.mla_kernels))
      key.reset();
    if (key) {
      // Both generations in one: the scratch arena's (high bits) and MLA's decode workspace's.
      key->scratch_generation = (scratch_.generation() << 32) | mla_.decode_generation();
      key->metadata_generation = metadata_.generation();
    }
    view_ = metadata_.upload(layout,
                             {.head_dim = kv_spec_.head_dim,
                              .num_q_heads = attention_q_heads_ > 0 ? attention_q_heads_ : kv_spec_.num_kv_heads,
                              .num_sms = num_sms_},
                             key);
    if (!key) return;
    key->metadata_generation = metadata_.generation();  // the upload may have moved the buffer
    graphs_.begin(*key);
  }

  void embedding(const Tensor& table, Tensor out) override {
    SLUICE_CHECK_EQ(out.rows(), static_cast<std::int64_t>(view_.num_rows));
    SLUICE_CHECK_EQ(out.cols(), table.cols());
    if (!launching()) return;
    cuda::launch_embedding(view_, table.data, dt_of(table.dtype), table.cols(), out.data,
                           dt_of(out.dtype), launch_);
  }

  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor out) override {
    SLUICE_CHECK_EQ(x.numel(), out.numel());
    SLUICE_CHECK_EQ(weight.numel(), x.cols());
    if (!launching()) return;
    cuda::launch_rms_norm(x.data, dt_of(x.dtype), weight.data, dt_of(weight.dtype), eps, x.rows(),
                          x.cols(), out.data, dt_of(out.dtype), launch_);
  }

  void add_rms_norm(Tensor residual, const Tensor& x, const Tensor& weight, float eps,
                    Tensor out) override {
    SLUICE_CHECK_EQ(residual.numel(), x.numel());
    SLUICE_CHECK_EQ(residual.numel(), out.numel());
    SLUICE_CHECK_EQ(weight.numel(), x.cols());
    if (!launching()) return;
    cuda::launch_add_rms_norm(residual.data, dt_of(residual.dtype), x.data, dt_of(x.dtype),
                              weight.data, dt_of(weight.dtype), eps, x.rows(), x.cols(), out.data,
                              dt_of(out.dtype), launch_);
  }

  void matmul(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor out) override {
    if (w.dtype == DType::f8_e4m3) {
      SLUICE_CHECK_MSG(bias.data == nullptr, "CUDA FP8 matmul takes no bias");
      const cuda::ScratchScope temporaries(scratch_);  // the quantized rows and a padded result
      fp8_matmul_.run(x, w, out, scratch_, launching(), launch_);
      return;
    }
    SLUICE_CHECK_MSG(x.dtype == DType::bf16 && w.dtype == DType::bf16,
                     "CUDA matmul takes bf16 activations and weights");
    SLUICE_CHECK_EQ(x.cols(), w.cols());
    SLUICE_CHECK_EQ(out.rows(), x.rows());
    SLUICE_CHECK_EQ(out.cols(), w.rows());
    SLUICE_CHECK(out.dtype == DType::bf16 || out.dtype == DType::f32);
    if (!launching()) return;
    cuda::GemvOutputs gemv_out;
    gemv_out.data[0] = out.data;
    gemv_out.cols[0] = w.rows();
    gemv_out.num_parts = 1;
    gemv_out.dt = dt_of(out.dtype);
    if (!gemv_takes(x.rows()) ||
        !cuda::launch_gemv(x.data, w.data, gemv_out, x.rows(), x.cols(), options_.gemv_split_k, launch_))
      gemm_.run(x.data, w.data, out.data, out.dtype, x.rows(), w.rows(), x.cols());
    if (bias.data != nullptr) {
      SLUICE_CHECK_EQ(bias.numel(), w.rows());
      cuda::launch_add_bias(out.data, dt_of(out.dtype), bias.data, dt_of(bias.dtype), out.rows(),
                            out.cols(), launch_);
    }
  }

  // Whether a batch of `rows` runs its linears on the GEMV kernels
  // (CudaOptions::gemv_max_rows, at most the kernels' kGemvMaxRows).
  bool gemv_takes(std::int64_t rows) const {
    return rows <= std::min<std::int64_t>(options_.gemv_max_rows, cuda::kGemvMaxRows);
  }

  // Decode batches (<= gemv_max_rows rows): one GEMV pass over the stacked
  // q|k|v weight writing q, k and v; larger batches: the three GEMMs.
  void qkv_projection(const Tensor& x, const Tensor& w_qkv, std::span<const Tensor, 3> biases, Tensor q,
                      Tensor k, Tensor v) override {
    const bool fused = gemv_takes(x.rows()) && x.cols() % 8 == 0 && x.dtype == DType::bf16 &&
                       w_qkv.dtype == DType::bf16 && q.dtype == k.dtype && q.dtype == v.dtype;
    if (!fused) {
      Ops::qkv_projection(x, w_qkv, biases, q, k, v);
      return;
    }
    SLUICE_CHECK_EQ(x.cols(), w_qkv.cols());
    SLUICE_CHECK_EQ(w_qkv.rows(), q.cols() + k.cols() + v.cols());
    for (const Tensor* t : {&q, &k, &v}) SLUICE_CHECK_EQ(t->rows(), x.rows());
    SLUICE_CHECK(q.dtype == DType::bf16 || q.dtype == DType::f32);
    if (!launching()) return;
    if (graphs_.mode() == cuda::DecodeGraphs::Mode::capturing &&
        options_.decode_rope_fusion == cuda::DecodeRopeFusion::qkv_epilogue && q.dtype == DType::bf16 &&
        k.cols() == v.cols() && biases[0].data == nullptr && biases[1].data == nullptr && biases[2].data == nullptr) {
      deferred_qkv_ = DeferredQkv{.x = x.data, .w = w_qkv.data, .q = q.data, .k = k.data, .v = v.data,
                                  .rows = x.rows(), .cols = x.cols(), .q_cols = q.cols(), .kv_cols = k.cols()};
      return;  // launched by attention() (with RoPE and the page write) or the next op
    }
    cuda::GemvOutputs outs;
    outs.num_parts = 3;
    outs.dt = dt_of(q.dtype);
    const std::array<Tensor*, 3> parts = {&q, &k, &v};
    for (int i = 0; i < 3; ++i) {
      outs.data[i] = parts[i]->data;
      outs.cols[i] = parts[i]->cols();
    }
    SLUICE_CHECK(cuda::launch_gemv(x.data, w_qkv.data, outs, x.rows(), x.cols(), options_.gemv_split_k, launch_));
    for (int i = 0; i < 3; ++i) {
      if (biases[i].data == nullptr) continue;
      SLUICE_CHECK_EQ(biases[i].numel(), parts[i]->cols());
      cuda::launch_add_bias(parts[i]->data, dt_of(parts[i]->dtype), biases[i].data, dt_of(biases[i].dtype),
                            parts[i]->rows(), parts[i]->cols(), launch_);
    }
  }

  // Decode batches: the SwiGLU is the GEMV's epilogue (no [rows, 2I]
  // intermediate, no silu kernel); larger batches: GEMM then silu_mul.
  void gate_up_silu(const Tensor& x, const Tensor& w_gate_up, Tensor gate_up, Tensor out) override {
    const bool fused = gemv_takes(x.rows()) && x.cols() % 8 == 0 && x.dtype == DType::bf16 &&
                       w_gate_up.dtype == DType::bf16 &&
                       (out.dtype == DType::bf16 || out.dtype == DType::f32);
    if (!fused) {
      Ops::gate_up_silu(x, w_gate_up, gate_up, out);
      return;
    }
    SLUICE_CHECK_EQ(x.cols(), w_gate_up.cols());
    SLUICE_CHECK_EQ(w_gate_up.rows(), 2 * out.cols());
    SLUICE_CHECK_EQ(out.rows(), x.rows());
    if (!launching()) return;
    SLUICE_CHECK(cuda::launch_gemv_swiglu(x.data, w_gate_up.data, out.data, dt_of(out.dtype), x.rows(),
                                          out.cols(), x.cols(), launch_));
  }

  void rope(Tensor q, Tensor k, const RopeParams& params) override {
    const std::int64_t head_dim = params.head_dim;
    SLUICE_CHECK(head_dim > 0 && head_dim % 2 == 0);
    SLUICE_CHECK_EQ(q.rows(), static_cast<std::int64_t>(view_.num_rows));
    SLUICE_CHECK_EQ(k.rows(), static_cast<std::int64_t>(view_.num_rows));
    SLUICE_CHECK_EQ(q.cols() % head_dim, std::int64_t{0});
    SLUICE_CHECK_EQ(k.cols() % head_dim, std::int64_t{0});
    if (replaying()) return;
    // A deferred q|k|v GEMV that wrote these q and k stays deferred: the
    // attention op after this may run it with this RoPE as its epilogue.
    if (!(deferred_qkv_ && deferred_qkv_->q == q.data && deferred_qkv_->k == k.data)) flush_deferred_qkv();
    flush_deferred_rope();
    if (graphs_.mode() == cuda::DecodeGraphs::Mode::capturing && k.dtype == DType::bf16) {
      deferred_rope_ = DeferredRope{q.data, dt_of(q.dtype), k.data, static_cast<std::int32_t>(q.cols() / head_dim),
                                    static_cast<std::int32_t>(k.cols() / head_dim), params.head_dim,
                                    rope_frequencies_.inverse_frequencies(params)};
      return;
    }
    cuda::launch_rope(view_, q.data, dt_of(q.dtype), static_cast<std::int32_t>(q.cols() / head_dim),
                      k.data, dt_of(k.dtype), static_cast<std::int32_t>(k.cols() / head_dim),
                      params.head_dim, rope_frequencies_.inverse_frequencies(params), launch_);
  }

  void attention(std::int32_t layer, const Tensor& q, const Tensor& k, const Tensor& v,
                 float scale, Tensor out) override {
    SLUICE_CHECK_MSG(kv_cache_ != nullptr, "attention before allocate_kv_cache");
    SLUICE_CHECK_MSG(kv_spec_.layout == KvCacheLayout::key_value, "attention() over a latent (MLA) KV cache");
    SLUICE_CHECK(layer >= 0 && layer < kv_spec_.num_layers);
    SLUICE_CHECK(q.dtype == DType::bf16 && k.dtype == DType::bf16 && v.dtype == DType::bf16 &&
                 out.dtype == DType::bf16);
    const std::int64_t head_dim = kv_spec_.head_dim;
    const std::int64_t kv_width = static_cast<std::int64_t>(kv_spec_.num_kv_heads) * head_dim;
    SLUICE_CHECK_EQ(k.cols(), kv_width);
    SLUICE_CHECK_EQ(v.cols(), kv_width);
    SLUICE_CHECK_EQ(q.numel(), out.numel());
    SLUICE_CHECK_EQ(q.rows(), static_cast<std::int64_t>(view_.num_rows));
    const auto num_q_heads = static_cast<std::int32_t>(q.cols() / head_dim);
    SLUICE_CHECK_EQ(num_q_heads % kv_spec_.num_kv_heads, 0);

    cuda::AttentionArgs args = attention_args(q, out, layer, scale);
    args.prefill_attention = options_.prefill_attention;
    args.decode_split_plan = options_.decode_split_plan;
    args.decode_split_tiles = options_.decode_split_tiles;
    args.decode_split_count = options_.decode_split_count;
    args.decode_split_stages = options_.decode_split_stages;
    args.decode_split_loads = options_.decode_split_loads;
    // Allocated when replaying too: later scratch must land where it was captured.
    if (view_.num_split_rows > 0)
      args.workspace = scratch_.allocate(cuda::split_workspace_bytes(view_, args));
    if (options_.decode_split_merge == cuda::DecodeSplitMerge::in_split_kernel) {
      args.split_arrivals = static_cast<int*>(split_arrivals_.data());
      args.split_arrivals_capacity = kSplitArrivals;
    }
    if (view_.num_prefill_split_pieces > 0)
      args.prefill_split_workspace = scratch_.allocate(cuda::prefill_split_workspace_bytes(view_, args));
    attention_q_heads_ = num_q_heads;
    if (replaying()) return;
    if (!launch_deferred_qkv_rope(args, q, k, v)) write_kv_pages(args, q, k, v);
    if (!cuda::uses_cudnn(args.prefill_attention) || !cudnn_prefill(args, k, v)) {
      cuda::launch_attention_prefill(view_, args, launch_);
      cuda::launch_attention_prefill_split(view_, args, launch_);
    }
    cuda::launch_attention_split(view_, args, launch_);
  }

  void silu_mul(const Tensor& gate_up, Tensor out) override {
    SLUICE_CHECK_EQ(gate_up.cols(), 2 * out.cols());
    SLUICE_CHECK_EQ(gate_up.rows(), out.rows());
    if (!launching()) return;
    cuda::launch_silu_mul(gate_up.data, dt_of(gate_up.dtype), out.rows(), out.cols(), out.data,
                          dt_of(out.dtype), launch_);
  }

  // DeepSeek-V3 (issue 15). MLA: mla_attention.h; MoE: moe.h.
  Status rope_partial(Tensor x, std::int32_t head_stride, std::int32_t rotary_offset,
                      const RopeParams& params) override {
    SLUICE_CHECK(params.head_dim > 0 && params.head_dim % 2 == 0);
    SLUICE_CHECK(head_stride > 0 && x.cols() % head_stride == 0);
    SLUICE_CHECK_LE(rotary_offset + params.head_dim, head_stride);
    SLUICE_CHECK_EQ(x.rows(), static_cast<std::int64_t>(view_.num_rows));
    SLUICE_CHECK(x.dtype == DType::bf16 || x.dtype == DType::f32);
    if (params.head_dim > cuda::kRopePartialMaxDim)
      return Error{fmt::format("CUDA rope_partial: {} rotary dims, at most {}", params.head_dim,
                               cuda::kRopePartialMaxDim)};
    if (!launching()) return Ok{};
    cuda::launch_rope_partial(view_,
                              {.x = x.data,
                               .dt = dt_of(x.dtype),
                               .num_heads = static_cast<std::int32_t>(x.cols() / head_stride),
                               .head_stride = head_stride,
                               .rotary_offset = rotary_offset,
                               .rotary_dim = params.head_dim,
                               .inv_freq = rope_frequencies_.inverse_frequencies(params),
                               .cos_sin_scale = params.cos_sin_scale,
                               .interleaved = params.interleaved},
                              launch_);
    return Ok{};
  }
  Status mla_attention(std::int32_t layer, const MlaInputs& in, const MlaShape& shape, Tensor out) override {
    SLUICE_CHECK_MSG(kv_cache_ != nullptr, "mla_attention before allocate_kv_cache");
    if (kv_spec_.layout != KvCacheLayout::latent)
      return Error{"CUDA mla_attention needs a latent KV cache (KvCacheLayout::latent)"};
    SLUICE_CHECK(layer >= 0 && layer < kv_spec_.num_layers);
    const std::int64_t layer_elems =
        static_cast<std::int64_t>(kv_spec_.num_blocks) * kv_spec_.block_size_tokens * kv_spec_.head_dim;
    const cuda::LatentCache cache{.data = static_cast<std::uint16_t*>(kv_cache_) + layer * layer_elems,
                                  .width = kv_spec_.head_dim,
                                  .kv_lora_rank = shape.kv_lora_rank,
                                  .block_size = kv_spec_.block_size_tokens,
                                  .num_blocks = kv_spec_.num_blocks};
    const bool replay = !launching();
    const bool cudnn = cuda::uses_cudnn(options_.prefill_attention) && !replay &&
                       graphs_.mode() == cuda::DecodeGraphs::Mode::eager &&
                       std::any_of(layout_->sequences.begin(), layout_->sequences.end(),
                                   [](const SequenceLayout& seq) { return seq.num_rows > 1; });
    cuda::CudnnSdpa* sdpa = cudnn ? open_cudnn() : nullptr;
    if (sdpa != nullptr && !mla_plans_asked_) SLUICE_TRY(build_mla_cudnn_plans_before_serving(*sdpa, shape));
    return mla_.run({.view = view_,
                     .layout = *layout_,
                     .cache = cache,
                     .launch = launch_,
                     .kernels = options_.mla_kernels,
                     .num_sms = num_sms_,
                     .replaying = replay,
                     .cudnn = sdpa},
                    in, shape, out);
  }

  // MLA's cuDNN plans for every prefill chunk within the serving bounds, at
  // the first MLA prefill (its shape is the model's, known from then on):
  // serve's warm-up chunk (engine/prefill_warmup.h), before it serves. Built
  // on the steps' path they cost 64-118 ms each, 33 of the burst's steps
  // (S34-2). Without bounds (no server), plans are built where asked.
  Status build_mla_cudnn_plans_before_serving(cuda::CudnnSdpa& sdpa, const MlaShape& shape) {
    mla_plans_asked_ = true;
    const cuda::SdpaServingBounds& bounds = options_.cudnn_serving_bounds;
    if (!options_.cudnn_plans_in_background || bounds.max_step_rows <= 0 ||
        !cuda::mla_cudnn_prefill_supported(shape, sdpa.version()))
      return Ok{};
    const std::int32_t max_keys = serving_max_keys();
    const std::vector<cuda::SdpaPacked> calls = cuda::mla_cudnn_prefill_classes(shape, bounds.max_step_rows, max_keys);
    SLUICE_TRY_ASSIGN(done, sdpa.build_packed_plans_before_serving(calls, options_.cudnn_serving_wait_s));
    spdlog::info("MLA prefill attention cudnn: {} of {} plans built at the first prefill (chunks of <= {} rows over "
                 "<= {} keys) in {:.1f} s; {} left to build while serving{}",
                 done.num_built, done.num_classes, bounds.max_step_rows, max_keys, done.build_s, done.num_left,
                 done.num_refused == 0 ? std::string()
                                       : fmt::format("; {} refused, the first: {}", done.num_refused,
                                                     done.first_refusal));
    return Ok{};
  }
  Status moe_route(const Tensor& router_logits, const Tensor& correction_bias, const MoeRouting& routing,
                   MoeAssignment out) override {
    return cuda::moe_route(router_logits, correction_bias, routing, out, moe_context());
  }
  Status moe_experts(const Tensor& x, const MoeExpertWeights& experts, const MoeAssignment& assignment,
                     Tensor out) override {
    const cuda::ScratchScope temporaries(scratch_);  // the slots' buffers: ~170 KB a token at V3's width, 1.4 GB at 8k
    return cuda::moe_experts(x, experts, assignment, out, moe_context());
  }

  void gather_sample_rows(const Tensor& x, Tensor out) override {
    SLUICE_CHECK_EQ(out.rows(), static_cast<std::int64_t>(view_.num_sample_rows));
    SLUICE_CHECK_EQ(out.cols(), x.cols());
    SLUICE_CHECK(out.dtype == x.dtype);
    if (!launching()) return;
    cuda::launch_gather_rows(x.data, dt_of(x.dtype), x.cols(), view_.sample_rows,
                             view_.num_sample_rows, out.data, launch_);
  }

  std::vector<SampleResult> sample(const Tensor& logits, std::span<const SampleRequest> requests) override {
    finish_step_graph();
    return sampler_.sample(logits, requests);
  }

  Result<cuda::V4PagedBlocks> model_defined_kv_device() const {
    if (kv_cache_ == nullptr || kv_spec_.layout != KvCacheLayout::model_defined)
      return Error{"cuda_model_defined_kv: no model-defined KV cache allocated"};
    return cuda::V4PagedBlocks{.data = static_cast<float*>(kv_cache_),
                               .floats_per_block = static_cast<std::int64_t>(kv_spec_.block_size_tokens) *
                                                   kv_spec_.head_dim,
                               .num_blocks = kv_spec_.num_blocks,
                               .block_size = kv_spec_.block_size_tokens};
  }

  // The bytes of a bf16 K/V cache that a test or benchmark may overwrite.
  Result<std::int64_t> fillable_kv_bytes(const char* what) const {
    if (kv_cache_ == nullptr) return Error{fmt::format("{}: no KV cache yet", what)};
    if (kv_spec_.layout == KvCacheLayout::model_defined)
      return Error{fmt::format("{}: a model-defined cache's bytes mean what its model says; bf16 values in it "
                               "are not a state",
                               what)};
    return kv_spec_.bytes_per_block(DType::bf16) * kv_spec_.num_blocks;
  }

  Status fill_kv_cache_nan() {
    SLUICE_TRY_ASSIGN(bytes, fillable_kv_bytes("cuda_fill_kv_cache_nan"));
    SLUICE_CUDA_CHECK(cudaMemsetAsync(kv_cache_, 0xff, static_cast<std::size_t>(bytes), stream_));
    SLUICE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return Ok{};
  }

  Status fill_kv_cache_random(std::uint64_t seed) {
    SLUICE_TRY_ASSIGN(bytes, fillable_kv_bytes("cuda_fill_kv_cache_random"));
    cuda::launch_random_fill(kv_cache_, dt_of(DType::bf16), bytes / 2, seed, 1.0f, stream_);
    SLUICE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return Ok{};
  }

  Result<Tensor> random_weight(Shape shape, DType dtype, std::uint64_t seed, float scale) {
    const std::int64_t bytes = shape.numel() * static_cast<std::int64_t>(dtype_size_bytes(dtype));
    SLUICE_TRY_ASSIGN(device, weights_.allocate(bytes, "random weight"));
    cuda::launch_random_fill(device, dt_of(dtype), shape.numel(), seed, scale, stream_);
    SLUICE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return Tensor{device, dtype, shape};
  }

  cuda::Fp8GemmCounts fp8_gemm_counts() const { return gemm_.fp8_counts(); }
  const CudaOptions& options() const { return options_; }
  std::int64_t qkv_rope_epilogue_launches() const { return qkv_rope_epilogue_launches_; }
  std::int64_t cudnn_sdpa_runs() const { return cudnn_ == nullptr ? 0 : cudnn_->num_runs(); }
  std::int64_t cudnn_sdpa_split_runs() const { return cudnn_ == nullptr ? 0 : cudnn_->num_split_runs(); }
  void cudnn_wait_for_plans() {
    if (cudnn_ != nullptr) cudnn_->wait_for_plans();
  }

  Result<Tensor> random_fp8_weight(Shape shape, std::uint64_t seed, float scale) {
    const std::int64_t rows = shape.rows(), cols = shape.cols();
    const std::int64_t scale_stride = (num_scale_blocks(cols, 128) + cuda::kLtWeightScaleRowAlignment - 1) /
                                      cuda::kLtWeightScaleRowAlignment * cuda::kLtWeightScaleRowAlignment;
    const std::int64_t num_scales = num_scale_blocks(rows, 128) * scale_stride;
    SLUICE_TRY_ASSIGN(values, weights_.allocate(rows * cols, "random FP8 weight"));
    SLUICE_TRY_ASSIGN(scales, weights_.allocate(num_scales * 4, "random FP8 weight scales"));
    // Random bf16 through the activation quantizer: valid e4m3 values (its
    // per-row scales go to a throwaway buffer).
    cuda::DeviceBuffer source, row_scales;
    source.ensure(rows * cols * 2, stream_);
    row_scales.ensure(num_scale_blocks(cols, 128) * rows * 4, stream_);
    cuda::launch_random_fill(source.data(), dt_of(DType::bf16), rows * cols, seed, 1.0f, stream_);
    cuda::launch_quantize_fp8_rows({.x = source.data(), .rows = rows, .k = cols, .q = values,
                                    .scales = static_cast<float*>(row_scales.data())},
                                   {.stream = stream_, .programmatic = false});
    cuda::launch_random_fill(scales, dt_of(DType::f32), num_scales, seed + 1, scale, stream_);
    SLUICE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return Tensor{values, DType::f8_e4m3, shape,
                  BlockScales{.data = static_cast<const float*>(scales), .block_rows = 128, .block_cols = 128,
                              .row_stride = scale_stride}};
  }

 private:
  cuda::AttentionArgs attention_args(const Tensor& q, const Tensor& out, std::int32_t layer, float scale) const {
    const std::int64_t kv_width = static_cast<std::int64_t>(kv_spec_.num_kv_heads) * kv_spec_.head_dim;
    const std::int64_t layer_elems =
        static_cast<std::int64_t>(kv_spec_.num_blocks) * kv_spec_.block_size_tokens * kv_width;
    auto* k_cache = static_cast<std::uint16_t*>(kv_cache_) + 2 * layer * layer_elems;
    cuda::AttentionArgs args;
    args.q = q.data;
    args.out = out.data;
    args.k_cache = k_cache;
    args.v_cache = k_cache + layer_elems;
    args.num_q_heads = static_cast<std::int32_t>(q.cols() / kv_spec_.head_dim);
    args.num_kv_heads = kv_spec_.num_kv_heads;
    args.head_dim = kv_spec_.head_dim;
    args.block_size_tokens = kv_spec_.block_size_tokens;
    args.kv_cache_slots = static_cast<std::int64_t>(kv_spec_.num_blocks) * kv_spec_.block_size_tokens;
    args.scale = scale;
    return args;
  }

  // The step's prefill sequences (more than one row) through cuDNN's SDPA
  // (cudnn_sdpa.h); false where cuDNN does not take this step: the caller
  // runs our kernels (wgmma_ws) instead. Eager steps only (decode graphs
  // have no prefill rows). Decode rows stay on the split-KV kernel.
  bool cudnn_prefill(const cuda::AttentionArgs& args, const Tensor& k, const Tensor& v) {
    // Prefill rows: whole tiles or split pieces (a short chunk over a long prefix has only pieces).
    if ((view_.num_prefill_tiles == 0 && view_.num_prefill_split_pieces == 0) ||
        graphs_.mode() != cuda::DecodeGraphs::Mode::eager)
      return false;
    // Where our prefill kernel lacks the head_dim, the split kernel runs every row.
    if (!cuda::prefill_kernel_supports(args.head_dim) || cudnn_unavailable_ || cudnn_failed_step_ == step_serial_)
      return false;
    if (const std::string why = cuda::cudnn_sdpa_unsupported(args.num_q_heads, args.num_kv_heads, args.head_dim,
                                                             args.head_dim, args.block_size_tokens);
        !why.empty()) {
      if (!cudnn_refusal_logged_) spdlog::warn("prefill attention cudnn: not for {}; wgmma-ws runs it", why);
      cudnn_refusal_logged_ = true;
      return false;
    }
    if (open_cudnn() == nullptr) return false;
    if (cudnn_step_ != step_serial_) {
      std::vector<cuda::SdpaSequence> sequences;
      for (const SequenceLayout& seq : layout_->sequences) {
        if (seq.num_rows <= 1) continue;
        sequences.push_back({.row_begin = seq.row_begin, .num_rows = seq.num_rows,
                             .num_keys = seq.num_computed_tokens + seq.num_rows, .block_table = seq.block_table});
      }
      const std::int64_t row_elems = static_cast<std::int64_t>(args.num_q_heads) * args.head_dim;
      Result<bool> taken = cudnn_->prepare(
          sequences, {.q_row_elems = row_elems, .out_row_elems = row_elems,
                      .kv_row_elems = static_cast<std::int64_t>(args.num_kv_heads) * args.head_dim,
                      .block_size = args.block_size_tokens, .num_q_heads = args.num_q_heads,
                      .num_kv_heads = args.num_kv_heads, .head_dim_qk = args.head_dim, .head_dim_v = args.head_dim,
                      .num_sms = num_sms_, .num_blocks = kv_spec_.num_blocks,
                      .may_decline = args.prefill_attention == cuda::PrefillAttention::automatic});
      if (!taken.ok()) spdlog::warn("prefill attention cudnn: {}; wgmma-ws runs this step", taken.error_message());
      if (!taken.ok() || !*taken) {
        cudnn_failed_step_ = step_serial_;
        return false;
      }
      cudnn_step_ = step_serial_;
    }
    const Status ran = cudnn_->run({.q = args.q, .out = args.out, .k = k.data, .v = v.data,
                                    .k_cache = args.k_cache, .v_cache = args.v_cache,
                                    .num_q_heads = args.num_q_heads, .num_kv_heads = args.num_kv_heads,
                                    .head_dim_qk = args.head_dim, .head_dim_v = args.head_dim,
                                    .block_size = args.block_size_tokens, .num_blocks = kv_spec_.num_blocks,
                                    .scale = args.scale});
    if (!ran.ok()) {
      spdlog::warn("prefill attention cudnn: {}; wgmma-ws runs this step", ran.error_message());
      cudnn_failed_step_ = step_serial_;
      return false;
    }
    return true;
  }

  // cuDNN's SDPA, opened at the first prefill step that asks for it; null
  // (and a log line, once) where libcudnn.so.9 does not load.
  cuda::CudnnSdpa* open_cudnn() {
    if (cudnn_ == nullptr && !cudnn_unavailable_) {
      auto opened = cuda::CudnnSdpa::open(stream_, options_.cudnn_plans_in_background);
      if (!opened.ok()) {
        spdlog::warn("prefill attention cudnn: {}; our kernels (wgmma-ws) run prefill attention instead",
                     opened.error_message());
        cudnn_unavailable_ = true;
        return nullptr;
      }
      cudnn_ = std::move(opened).value();
      spdlog::info("prefill attention cudnn: cuDNN {} loaded", cudnn_->version());
    }
    return cudnn_.get();
  }

  bool replaying() const { return graphs_.mode() == cuda::DecodeGraphs::Mode::replaying; }
  cuda::MoeContext moe_context() {
    return {.scratch = scratch_,
            .launch = launch_,
            .launch_kernels = launching(),
            .expert_gemm = options_.moe_expert_gemm};
  }
  // Whether an op launches its kernels (not while replaying: the graph has
  // them); first launches a deferred RoPE, whose q and k the op may read.
  bool launching() {
    if (replaying()) return false;
    flush_deferred_qkv();
    flush_deferred_rope();
    return true;
  }

  // Under capture (DecodeRopeFusion::qkv_epilogue), qkv_projection defers
  // its GEMV too: if rope() on its q and k and then attention() on its q, k
  // and v follow, attention launches the GEMV with RoPE and the page write as
  // its epilogue (launch_gemv_qkv_rope), and no kernel runs between the GEMV
  // and attention. Any other op launches it first, as a plain GEMV.
  struct DeferredQkv {
    const void* x;
    const void* w;
    void *q, *k, *v;
    std::int64_t rows, cols, q_cols, kv_cols;
  };
  void flush_deferred_qkv() {
    if (!deferred_qkv_) return;
    const DeferredQkv d = *deferred_qkv_;
    deferred_qkv_.reset();
    cuda::GemvOutputs outs;
    outs.num_parts = 3;
    outs.dt = dt_of(DType::bf16);
    outs.data[0] = d.q;
    outs.data[1] = d.k;
    outs.data[2] = d.v;
    outs.cols[0] = d.q_cols;
    outs.cols[1] = d.kv_cols;
    outs.cols[2] = d.kv_cols;
    SLUICE_CHECK(cuda::launch_gemv(d.x, d.w, outs, d.rows, d.cols, options_.gemv_split_k, launch_));
  }
  // K and V of the step's rows into their pages, after a deferred q|k|v GEMV:
  // with a deferred RoPE on q and k as one kernel, else alone.
  void write_kv_pages(const cuda::AttentionArgs& args, const Tensor& q, const Tensor& k, const Tensor& v) {
    flush_deferred_qkv();
    if (deferred_rope_ && deferred_rope_->q == q.data && deferred_rope_->k == k.data &&
        deferred_rope_->num_kv_heads == kv_spec_.num_kv_heads && deferred_rope_->head_dim == kv_spec_.head_dim) {
      const cuda::RopeKvWriteArgs fused{.q = q.data, .q_dt = deferred_rope_->q_dt, .k = k.data, .v = v.data,
                                        .k_cache = const_cast<void*>(args.k_cache),
                                        .v_cache = const_cast<void*>(args.v_cache),
                                        .inv_freq = deferred_rope_->inv_freq,
                                        .num_q_heads = deferred_rope_->num_q_heads,
                                        .num_kv_heads = kv_spec_.num_kv_heads, .head_dim = kv_spec_.head_dim,
                                        .block_size = kv_spec_.block_size_tokens};
      deferred_rope_.reset();
      cuda::launch_rope_kv_write(view_, fused, launch_);
      return;
    }
    flush_deferred_rope();
    cuda::launch_kv_write(view_, k.data, v.data, const_cast<void*>(args.k_cache), const_cast<void*>(args.v_cache),
                          kv_spec_.num_kv_heads, kv_spec_.head_dim, kv_spec_.block_size_tokens, launch_);
  }
  // The deferred GEMV and RoPE as one kernel, if both are there and are this
  // attention's q, k and v; true when it launched (the pages are written).
  bool launch_deferred_qkv_rope(const cuda::AttentionArgs& args, const Tensor& q, const Tensor& k, const Tensor& v) {
    if (!deferred_qkv_ || !deferred_rope_) return false;
    const DeferredQkv& d = *deferred_qkv_;
    const DeferredRope& r = *deferred_rope_;
    if (d.q != q.data || d.k != k.data || d.v != v.data || r.q != q.data || r.k != k.data ||
        r.q_dt != dt_of(DType::bf16) || r.num_kv_heads != kv_spec_.num_kv_heads || r.head_dim != kv_spec_.head_dim ||
        d.q_cols != static_cast<std::int64_t>(r.num_q_heads) * r.head_dim ||
        d.kv_cols != static_cast<std::int64_t>(r.num_kv_heads) * r.head_dim)
      return false;
    const cuda::GemvQkvRopeArgs fused{.x = d.x, .w_qkv = d.w, .q = d.q, .k = d.k, .v = d.v,
                                      .k_cache = const_cast<void*>(args.k_cache),
                                      .v_cache = const_cast<void*>(args.v_cache), .inv_freq = r.inv_freq,
                                      .num_q_heads = r.num_q_heads, .num_kv_heads = r.num_kv_heads,
                                      .head_dim = r.head_dim, .block_size = kv_spec_.block_size_tokens};
    if (!cuda::launch_gemv_qkv_rope(view_, fused, d.rows, d.cols, options_.gemv_split_k, launch_)) return false;
    ++qkv_rope_epilogue_launches_;
    deferred_qkv_.reset();
    deferred_rope_.reset();
    return true;
  }

  // A decode step under capture defers its RoPE to the attention op that
  // follows it, which launches it fused with the KV page write: one kernel
  // instead of two, ~3-4 us a layer each at batch 1 (apart: -0.7% at 4k and
  // -7.6% at 0 context, S3-d2). Any other op launches it first (as does the
  // end of the capture). Eager steps (prefill, the tests that compare each op
  // with the CPU) keep the separate kernels.
  struct DeferredRope {
    void* q;
    cuda::Dt q_dt;
    void* k;
    std::int32_t num_q_heads, num_kv_heads, head_dim;
    const float* inv_freq;
  };
  void flush_deferred_rope() {
    if (!deferred_rope_) return;
    const DeferredRope r = *deferred_rope_;
    deferred_rope_.reset();
    cuda::launch_rope(view_, r.q, r.q_dt, r.num_q_heads, r.k, dt_of(DType::bf16), r.num_kv_heads, r.head_dim,
                      r.inv_freq, launch_);
  }

  void end_step() override {
    finish_step_graph();
    SLUICE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  // Ends a capture (after launching a deferred RoPE) or a replay by launching
  // the step's graph; a no-op for eager steps.
  void finish_step_graph() {
    if (graphs_.mode() == cuda::DecodeGraphs::Mode::capturing) {
      flush_deferred_qkv();
      flush_deferred_rope();
    }
    graphs_.finish();
  }

  OwnedStream owned_stream_;
  CudaOptions options_;
  cudaStream_t stream_;
  cuda::Launch launch_;
  cuda::DeviceWeights weights_;
  cuda::RopeFrequencies rope_frequencies_;
  // per layer: K then V, each [num_blocks, block_size, kv_heads, head_dim]; a
  // latent cache (MLA) one [num_blocks, block_size, 1, head_dim] array per layer
  void* kv_cache_ = nullptr;
  bool owns_kv_cache_ = true;  // false in a lane: the Ops it was made from frees it
  KvCacheSpec kv_spec_;
  cuda::ScratchArena scratch_;
  cuda::LtGemm gemm_;
  cuda::Fp8Matmul fp8_matmul_;
  cuda::StepMetadata metadata_;
  cuda::StepDeviceView view_;
  int num_sms_ = 0;
  std::int32_t attention_q_heads_ = 0;  // the model's, known from its first attention call
  cuda::DecodeGraphs graphs_;
  std::optional<DeferredRope> deferred_rope_;
  std::optional<DeferredQkv> deferred_qkv_;
  std::int64_t qkv_rope_epilogue_launches_ = 0;
  // The split-KV kernels' arrival counters (AttentionArgs::split_arrivals):
  // zeroed once, left zeroed by every launch. 64k covers 8192 decode rows of
  // 8 kv heads; a step needing more merges in the combine kernel.
  static constexpr std::int64_t kSplitArrivals = 1 << 16;
  cuda::DeviceBuffer split_arrivals_;
  cuda::StepSampler sampler_;
  const StepLayout* layout_ = nullptr;  // the step's, valid until the next begin_step()
  cuda::MlaAttention mla_;
  bool mla_plans_asked_ = false;  // build_mla_cudnn_plans_before_serving ran
  cuda::HostKvTier host_tier_;  // after kv_cache_'s users: destroyed first, it drains its stream
  // PrefillAttention::cudnn: opened at the first prefill step that asks for it.
  std::unique_ptr<cuda::CudnnSdpa> cudnn_;
  bool cudnn_unavailable_ = false, cudnn_refusal_logged_ = false;
  std::uint64_t step_serial_ = 0, cudnn_step_ = 0, cudnn_failed_step_ = 0;
};

}  // namespace

Result<std::unique_ptr<Ops>> make_cuda_ops(const CudaOptions& options) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return Error{"CUDA backend: no CUDA device is visible"};
  }
  if (options.device_index < 0 || options.device_index >= count)
    return Error{fmt::format("CUDA backend: device {} does not exist ({} visible)",
                             options.device_index, count)};
  SLUICE_CUDA_CHECK(cudaSetDevice(options.device_index));
  cudaDeviceProp prop{};
  SLUICE_CUDA_CHECK(cudaGetDeviceProperties(&prop, options.device_index));
  if (prop.major < 9)
    return Error{fmt::format("CUDA backend: {} is compute capability {}.{}; sluice is built for "
                             "sm_90a (H100/H200)",
                             prop.name, prop.major, prop.minor)};
  SLUICE_TRY_ASSIGN(stream, cuda::make_partitioned_stream(
                                options.device_index,
                                {.sms = options.stream_sms, .high_priority = options.stream_high_priority}));
  return std::unique_ptr<Ops>(std::make_unique<CudaOps>(options, stream));
}

Result<Tensor> cuda_random_weight(Ops& ops, Shape shape, DType dtype, std::uint64_t seed,
                                  float scale) {
  auto* cuda_ops = dynamic_cast<CudaOps*>(&ops);
  if (cuda_ops == nullptr) return Error{"cuda_random_weight: not a CUDA Ops"};
  return cuda_ops->random_weight(shape, dtype, seed, scale);
}

Result<Tensor> cuda_random_fp8_weight(Ops& ops, Shape shape, std::uint64_t seed, float scale) {
  auto* cuda_ops = dynamic_cast<CudaOps*>(&ops);
  if (cuda_ops == nullptr) return Error{"cuda_random_fp8_weight: not a CUDA Ops"};
  return cuda_ops->random_fp8_weight(shape, seed, scale);
}

Result<cuda::Fp8GemmCounts> cuda_fp8_gemm_counts(const Ops& ops) {
  const auto* cuda_ops = dynamic_cast<const CudaOps*>(&ops);
  if (cuda_ops == nullptr) return Error{"cuda_fp8_gemm_counts: not a CUDA Ops"};
  return cuda_ops->fp8_gemm_counts();
}

Result<CudaOptions> cuda_ops_options(const Ops& ops) {
  const auto* cuda_ops = dynamic_cast<const CudaOps*>(&ops);
  if (cuda_ops == nullptr) return Error{"cuda_ops_options: not a CUDA Ops"};
  return cuda_ops->options();
}

Result<std::int64_t> cuda_cudnn_sdpa_runs(const Ops& ops) {
  const auto* cuda_ops = dynamic_cast<const CudaOps*>(&ops);
  if (cuda_ops == nullptr) return Error{"cuda_cudnn_sdpa_runs: not a CUDA Ops"};
  return cuda_ops->cudnn_sdpa_runs();
}

Result<std::int64_t> cuda_qkv_rope_epilogue_launches(const Ops& ops) {
  const auto* cuda_ops = dynamic_cast<const CudaOps*>(&ops);
  if (cuda_ops == nullptr) return Error{"cuda_qkv_rope_epilogue_launches: not a CUDA Ops"};
  return cuda_ops->qkv_rope_epilogue_launches();
}

Status cuda_cudnn_wait_for_plans(Ops& ops) {
  auto* cuda_ops = dynamic_cast<CudaOps*>(&ops);
  if (cuda_ops == nullptr) return Error{"cuda_cudnn_wait_for_plans: not a CUDA Ops"};
  cuda_ops->cudnn_wait_for_plans();
  return Ok{};
}

Result<std::int64_t> cuda_cudnn_sdpa_split_runs(const Ops& ops) {
  const auto* cuda_ops = dynamic_cast<const CudaOps*>(&ops);
  if (cuda_ops == nullptr) return Error{"cuda_cudnn_sdpa_split_runs: not a CUDA Ops"};
  return cuda_ops->cudnn_sdpa_split_runs();
}

Result<cuda::V4PagedBlocks> cuda_model_defined_kv(const Ops& ops) {
  const auto* cuda_ops = dynamic_cast<const CudaOps*>(&ops);
  if (cuda_ops == nullptr) return Error{"cuda_model_defined_kv: not a CUDA Ops"};
  return cuda_ops->model_defined_kv_device();
}

Status cuda_fill_kv_cache_nan(Ops& ops) {
  auto* cuda_ops = dynamic_cast<CudaOps*>(&ops);
  if (cuda_ops == nullptr) return Error{"cuda_fill_kv_cache_nan: not a CUDA Ops"};
  return cuda_ops->fill_kv_cache_nan();
}

Status cuda_fill_kv_cache_random(Ops& ops, std::uint64_t seed) {
  auto* cuda_ops = dynamic_cast<CudaOps*>(&ops);
  if (cuda_ops == nullptr) return Error{"cuda_fill_kv_cache_random: not a CUDA Ops"};
  return cuda_ops->fill_kv_cache_random(seed);
}

}  // namespace sluice
