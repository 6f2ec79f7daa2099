#include "sluice/model/cuda/deepseek_v4_forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "sluice/backend/cuda/batched_gemm.h"
#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/cuda_dtype.h"
#include "sluice/backend/cuda/device_buffer.h"
#include "sluice/backend/cuda/fp8_matmul.h"
#include "sluice/backend/cuda/kernels/deepseek_v4_quantized.h"
#include "sluice/backend/cuda/kernels/deepseek_v4_forward_kernels.h"
#include "sluice/backend/cuda/kernels/moe_kernels.h"
#include "sluice/backend/cuda/moe.h"
#include "sluice/backend/cuda/lt_gemm.h"
#include "sluice/backend/cuda/scratch_arena.h"
#include "sluice/backend/float_convert.h"
#include "sluice/backend/rope.h"
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

// Upload time only (synchronous copies).
template <class T>
DeviceArray<T> up(const std::vector<T>& host) {
  DeviceArray<T> d(host.size());
  if (!host.empty()) SLUICE_CUDA_CHECK(cudaMemcpy(d.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

// A linear's weight, [rows, cols] (the Hugging Face [out, in] layout;
// stacked experts: [experts * rows_each, cols]): bf16, or FP8 e4m3 with f32
// 128x128 block scales [ceil(rows / 128), scale_row_stride] (cuBLASLt's
// padded rows: Fp8Matmul takes cuBLASLt's path only with that stride).
struct Matrix {
  DType dtype = DType::bf16;  // bf16 or f8_e4m3
  DeviceArray<std::uint8_t> data;
  DeviceArray<float> scales;
  std::int64_t rows = 0, cols = 0, scale_row_stride = 0;

  bool fp8() const { return dtype == DType::f8_e4m3; }
  const void* ptr() const { return data.get(); }
  // Rows [first, first + count); FP8: first on a 128-row block.
  Tensor rows_tensor(std::int64_t first, std::int64_t count) const {
    SLUICE_CHECK(first >= 0 && first + count <= rows);
    const auto element = static_cast<std::int64_t>(dtype_size_bytes(dtype));
    Tensor t{data.get() + first * cols * element, dtype, Shape{count, cols}};
    if (fp8()) {
      SLUICE_CHECK(first % kFp8Block == 0);
      t.scales = BlockScales{.data = scales.get() + first / kFp8Block * scale_row_stride,
                             .block_rows = kFp8Block, .block_cols = kFp8Block, .row_stride = scale_row_stride};
    }
    return t;
  }
  Tensor tensor() const { return rows_tensor(0, rows); }
  std::int64_t bytes() const {
    return static_cast<std::int64_t>(data.size()) + static_cast<std::int64_t>(scales.size()) * 4;
  }
  static constexpr std::int64_t kFp8Block = 128;
};

std::int64_t num_blocks(std::int64_t n) { return (n + Matrix::kFp8Block - 1) / Matrix::kFp8Block; }
// cuBLASLt's row stride of a 128x128 weight scale grid over `cols` columns.
std::int64_t lt_scale_row_stride(std::int64_t cols) {
  return (num_blocks(cols) + kLtWeightScaleRowAlignment - 1) / kLtWeightScaleRowAlignment *
         kLtWeightScaleRowAlignment;
}

Matrix bf16_matrix(std::int64_t rows, std::int64_t cols) {
  return Matrix{.dtype = DType::bf16, .data = DeviceArray<std::uint8_t>(static_cast<std::size_t>(rows * cols * 2)),
                .rows = rows, .cols = cols};
}
Matrix fp8_matrix(std::int64_t rows, std::int64_t cols) {
  const std::int64_t stride = lt_scale_row_stride(cols);
  return Matrix{.dtype = DType::f8_e4m3, .data = DeviceArray<std::uint8_t>(static_cast<std::size_t>(rows * cols)),
                .scales = DeviceArray<float>(static_cast<std::size_t>(num_blocks(rows) * stride)), .rows = rows,
                .cols = cols, .scale_row_stride = stride};
}

// Rounds each host matrix to bf16 (to nearest even) and puts them back to back.
Matrix up_bf16(const std::vector<const std::vector<float>*>& parts, std::int64_t cols) {
  std::size_t total = 0;
  for (const auto* p : parts) total += p->size();
  SLUICE_CHECK(cols > 0 && total % static_cast<std::size_t>(cols) == 0);
  Matrix m = bf16_matrix(static_cast<std::int64_t>(total) / cols, cols);
  std::vector<std::uint16_t> staged;
  std::size_t at = 0;
  for (const auto* p : parts) {
    staged.resize(p->size());
    std::transform(p->begin(), p->end(), staged.begin(), [](float v) { return f32_to_bf16(v); });
    if (!staged.empty())
      SLUICE_CUDA_CHECK(cudaMemcpy(m.data.get() + at * 2, staged.data(), staged.size() * 2, cudaMemcpyHostToDevice));
    at += staged.size();
  }
  return m;
}
Matrix up_bf16(const std::vector<float>& host, std::int64_t cols) { return up_bf16({&host}, cols); }

const Dt kF32Dt = dt_of(DType::f32);
const Dt kBf16Dt = dt_of(DType::bf16);

// Per-step scratch: a bump allocator over chunks, with marks to give a
// sub-layer's temporaries back (every launch is ordered on the one stream,
// so the next sub-layer's kernels reuse the bytes only after these ran). At
// reset() the chunks merge into one of the high-water size.
class StepScratch {
 public:
  struct Mark {
    std::size_t chunk = 0;
    std::int64_t used = 0;
  };
  StepScratch() = default;
  ~StepScratch() {
    for (auto& c : chunks_) cudaFree(c.base);
  }
  StepScratch(const StepScratch&) = delete;
  StepScratch& operator=(const StepScratch&) = delete;

  // Starts a step; the previous one must have finished on the device (forward() ends in a sync).
  // A step that overflowed into more chunks leaves one chunk of their sum and
  // an eighth more: a long prompt's chunks need ~67 MB more scores each (8,192
  // rows x 2,048 more entries), and regrowing to the exact sum cost every
  // chunk past 106k two cudaMallocs of ~1 GB, ~45 ms of a 135 ms step (S21-4).
  void reset() {
    if (chunks_.size() > 1) {
      std::int64_t total = 0;
      for (auto& c : chunks_) {
        total += c.capacity;
        SLUICE_CUDA_CHECK(cudaFree(c.base));
      }
      chunks_.clear();
      add_chunk(total + total / 8);
    }
    for (auto& c : chunks_) c.used = 0;
    current_ = 0;
  }
  template <class T>
  T* alloc(std::int64_t count) {
    return static_cast<T*>(allocate(count * static_cast<std::int64_t>(sizeof(T))));
  }
  Mark mark() const { return {current_, chunks_.empty() ? 0 : chunks_[current_].used}; }
  void rewind(Mark m) {
    if (chunks_.empty()) return;
    current_ = m.chunk;
    chunks_[current_].used = m.used;
    for (std::size_t i = current_ + 1; i < chunks_.size(); ++i) chunks_[i].used = 0;
  }

 private:
  struct Chunk {
    void* base = nullptr;
    std::int64_t capacity = 0, used = 0;
  };
  void* allocate(std::int64_t bytes) {
    bytes = align_up(std::max<std::int64_t>(bytes, 1), kDeviceAlignBytes);
    while (current_ < chunks_.size() && chunks_[current_].used + bytes > chunks_[current_].capacity) {
      if (current_ + 1 == chunks_.size()) break;
      ++current_;
    }
    if (chunks_.empty() || chunks_[current_].used + bytes > chunks_[current_].capacity) {
      add_chunk(std::max<std::int64_t>(bytes, kInitialBytes));
      current_ = chunks_.size() - 1;
    }
    Chunk& c = chunks_[current_];
    void* out = static_cast<std::byte*>(c.base) + c.used;
    c.used += bytes;
    return out;
  }
  void add_chunk(std::int64_t bytes) {
    Chunk c{.capacity = bytes};
    const cudaError_t status = cudaMalloc(&c.base, static_cast<std::size_t>(bytes));
    SLUICE_CHECK_MSG(status == cudaSuccess, fmt::format("deepseek_v4 step scratch: cudaMalloc of {} bytes failed ({})",
                                                        bytes, cudaGetErrorString(status)));
    chunks_.push_back(c);
  }
  static constexpr std::int64_t kInitialBytes = 64LL << 20;
  std::vector<Chunk> chunks_;
  std::size_t current_ = 0;
};

// The step's int32 arrays, staged on the host while the plans are made and
// copied to the device in one piece (pinned, asynchronous).
class StepInts {
 public:
  using Handle = std::size_t;
  Handle add(const std::vector<std::int32_t>& v) {
    const Handle h = host_.size();
    host_.insert(host_.end(), v.begin(), v.end());
    host_.resize(h + static_cast<std::size_t>(align_up(static_cast<std::int64_t>(v.size()) + 1, kAlignInts)));
    return h;
  }
  void upload(StepScratch& scratch, PinnedBuffer& pinned, cudaStream_t s) {
    const auto bytes = static_cast<std::int64_t>(host_.size() * sizeof(std::int32_t));
    void* staged = pinned.ensure(bytes);
    std::memcpy(staged, host_.data(), static_cast<std::size_t>(bytes));
    device_ = scratch.alloc<std::int32_t>(static_cast<std::int64_t>(host_.size()));
    SLUICE_CUDA_CHECK(cudaMemcpyAsync(device_, staged, static_cast<std::size_t>(bytes), cudaMemcpyHostToDevice, s));
  }
  const std::int32_t* operator[](Handle h) const { return device_ + h; }
  std::int32_t* mutable_at(Handle h) const { return device_ + h; }

 private:
  static constexpr std::int64_t kAlignInts = kDeviceAlignBytes / 4;
  std::vector<std::int32_t> host_;
  std::int32_t* device_ = nullptr;
};

}  // namespace

struct DeepseekV4DeviceForward::Weights {
  struct Hc {
    DeviceArray<float> fn, base, scale;
    V4HcWeights view() const { return {fn.get(), base.get(), scale.get()}; }
  };
  struct Compressor {
    Matrix wkv, wgate;
    DeviceArray<float> ape, norm;
    DeepseekV4PoolRegion region;
  };
  struct Layer {
    DeepseekV4Attention type{};
    bool hash = false;
    Hc attn_hc, ffn_hc;
    DeviceArray<float> attn_norm, ffn_norm, q_norm, kv_norm, sinks;
    Matrix wq_a, wq_b, wkv, wo_a, wo_b;  // wo_a: [groups * o_lora, heads * head_dim / groups]
    std::optional<Compressor> compressor, index_compressor;
    Matrix index_wq_b, index_weights_proj;
    Matrix router;
    DeviceArray<float> bias;
    DeviceArray<std::int32_t> tid2eid;
    // One format for both (the expert GEMM path is chosen per layer):
    Matrix experts_gate_up;  // [experts * 2 * inter, hidden]: each expert's w1 rows, then its w3 rows
    Matrix experts_down;     // [experts * hidden, inter]
    Matrix shared_gate_up, shared_down;
    std::int64_t window_offset = 0;
  };
  const DeepseekV4KvLayout* layout = nullptr;
  ModelConfig config;
  DeepseekV4Config ds;
  DeviceArray<float> main_freq, compress_freq;
  float main_scale = 1.0f, compress_scale = 1.0f;
  DeviceArray<float> embed, final_norm;
  Matrix head;
  Hc hc_head;
  std::vector<Layer> layers;
  DeepseekV4DeviceOptions options;
  WeightSummary summary;

  V4Rope main_rope() const { return {main_freq.get(), ds.qk_rope_head_dim, main_scale}; }
  V4Rope compress_rope() const { return {compress_freq.get(), ds.qk_rope_head_dim, compress_scale}; }
};

struct DeepseekV4DeviceForward::Runtime {
  StepScratch scratch;
  PinnedBuffer staging;
  cudaStream_t stream = nullptr;
  std::unique_ptr<LtGemm> gemm;
  std::unique_ptr<LtBatchedGemm> batched;
  std::unique_ptr<Fp8Matmul> fp8;
  // Fp8Matmul's quantized activations: reset before each FP8 linear (one
  // stream: the previous GEMM has read its bytes before the next quantize).
  std::unique_ptr<ScratchArena> fp8_scratch;  // in the bound stream's order

  // The cuBLASLt handles are made for one stream; a call on another remakes them.
  void bind(cudaStream_t s, Fp8DenseGemm fp8_dense) {
    if (gemm != nullptr && s == stream) return;
    gemm = std::make_unique<LtGemm>(s, kGemmWorkspaceBytes);
    batched = std::make_unique<LtBatchedGemm>(s);
    fp8 = std::make_unique<Fp8Matmul>(*gemm, fp8_dense);
    fp8_scratch = std::make_unique<ScratchArena>(kFp8ScratchBytes, s);
    stream = s;
  }
  static constexpr std::int64_t kGemmWorkspaceBytes = 32LL << 20;
  static constexpr std::int64_t kFp8ScratchBytes = 64LL << 20;
};

DeepseekV4DeviceForward::DeepseekV4DeviceForward() : w_(std::make_unique<Weights>()), rt_(std::make_unique<Runtime>()) {}
DeepseekV4DeviceForward::~DeepseekV4DeviceForward() = default;

namespace {

Status check_widths(const ModelConfig& config, const DeepseekV4Config& ds) {
  if (config.head_dim != kV4LatentDim || ds.index_head_dim != kV4IndexHeadDim)
    return Error{fmt::format("deepseek_v4 on CUDA: the kernels are built for head_dim {} and index_head_dim {} "
                             "(V4-Flash's); this model has {} and {}",
                             kV4LatentDim, kV4IndexHeadDim, config.head_dim, ds.index_head_dim),
                 ErrorCode::kInvalidArgument};
  if (ds.index_n_heads > kV4MaxIndexHeads || ds.hc_mult > kV4MaxHcMult || ds.n_routed_experts > kV4MaxExperts)
    return Error{fmt::format("deepseek_v4 on CUDA: at most {} index heads, hc_mult {} and {} experts",
                             kV4MaxIndexHeads, kV4MaxHcMult, kV4MaxExperts),
                 ErrorCode::kInvalidArgument};
  if (!grouped_gemm_supports(config.hidden_size, false) || !grouped_gemm_supports(ds.moe_intermediate_size, false))
    return Error{fmt::format("deepseek_v4 on CUDA: the grouped expert GEMM needs hidden and moe_intermediate_size "
                             "multiples of 8 ({} and {})",
                             config.hidden_size, ds.moe_intermediate_size),
                 ErrorCode::kInvalidArgument};
  return Ok{};
}

// The layout's formats the kernels read: latents f32, bf16 or fp8_ds_mla
// records (at the kernels' 64 rope dims), index keys f32 or e4m3 records; the
// session-17 indexer quantizes f32 keys itself.
Status check_layout(const DeepseekV4KvLayout& layout, const DeepseekV4Config& ds,
                    const DeepseekV4DeviceOptions& options) {
  if (layout.formats().latents == DeepseekV4ValueFormat::fp8_ds_mla && ds.qk_rope_head_dim != kV4RopeDim)
    return Error{fmt::format("deepseek_v4 on CUDA: fp8_ds_mla records are built for {} rope dims; this model has {}",
                             kV4RopeDim, ds.qk_rope_head_dim),
                 ErrorCode::kInvalidArgument};
  if (options.indexer == DeepseekV4IndexerKernels::f32_pool_cuda_cores &&
      layout.formats().index_keys != DeepseekV4ValueFormat::f32)
    return Error{"deepseek_v4 on CUDA: the f32-pool indexer (session 17's) reads f32 index keys; this layout stores "
                 "e4m3 records",
                 ErrorCode::kInvalidArgument};
  return Ok{};
}

// The reference's rotary tables (DeepseekV4Reference::load makes the same from the config).
std::vector<float> inverse_frequencies(const DeepseekV4Rope& rope, std::int32_t rope_dim) {
  return rope_inverse_frequencies(deepseek_v4_rope_params(rope, rope_dim));
}

}  // namespace

namespace {

using Summary = DeepseekV4DeviceForward::WeightSummary;

// FP4 parts stacked by rows into one matrix: FP8 where launch_v4_fp4_to_fp8
// is exact for every block (and `fp8_ok`), else bf16, both made on the device.
Matrix fp4_on_device(const DeviceArray<std::uint8_t>& codes, const DeviceArray<std::uint8_t>& group_scales,
                     std::int64_t rows, std::int64_t cols, bool fp8_ok, Summary& summary) {
  if (fp8_ok) {
    Matrix m = fp8_matrix(rows, cols);
    DeviceArray<std::int32_t> inexact(1);
    SLUICE_CUDA_CHECK(cudaMemset(inexact.get(), 0, sizeof(std::int32_t)));
    launch_v4_fp4_to_fp8({.codes = codes.get(), .group_scales = group_scales.get(), .rows = rows, .cols = cols,
                          .out = m.data.get(), .block_scales = m.scales.get(), .scale_row_stride = m.scale_row_stride,
                          .inexact_blocks = inexact.get()},
                         nullptr);
    std::int32_t host_inexact = 0;
    SLUICE_CUDA_CHECK(cudaMemcpy(&host_inexact, inexact.get(), sizeof(host_inexact), cudaMemcpyDeviceToHost));
    if (host_inexact == 0) {
      ++summary.fp4_converted;
      return m;
    }
    ++summary.fp4_inexact;
  } else {
    ++summary.dequantized_on_device;
  }
  Matrix m = bf16_matrix(rows, cols);
  launch_v4_fp4_to_bf16(codes.get(), group_scales.get(), rows, cols, m.data.get(), nullptr);
  SLUICE_CUDA_CHECK(cudaDeviceSynchronize());
  return m;
}

// The reference's linears on the device: as the checkpoint stores them where
// the reference kept them quantized (DeepseekV4LoadOptions::keep_quantized)
// and an FP8 kernel takes the shape, else bf16.
class Uploader {
 public:
  Uploader(const DeepseekV4Reference& ref, Summary& summary) : ref_(ref), summary_(summary) {}

  // A weight of `parts` stacked by rows (one part: a plain linear), each part
  // [rows_each, cols]; `f32` their host values where not quantized. FP8 stays
  // FP8 when `fp8_ok` and every part but the last ends on a 128-row block.
  Result<Matrix> stacked(const std::vector<std::string>& names, const std::vector<const std::vector<float>*>& f32,
                         std::int64_t rows_each, std::int64_t cols, bool fp8_ok) {
    std::vector<const DeepseekV4QuantizedLinear*> q;
    for (const std::string& name : names) q.push_back(ref_.quantized(name));
    const bool any = std::any_of(q.begin(), q.end(), [](auto* p) { return p != nullptr; });
    const std::int64_t rows = rows_each * static_cast<std::int64_t>(names.size());
    if (!any) {
      Matrix m = up_bf16(f32, cols);
      SLUICE_CHECK_EQ(m.rows, rows);
      count(m);
      return m;
    }
    for (std::size_t i = 0; i < q.size(); ++i)
      if (q[i] == nullptr || q[i]->format != q[0]->format || q[i]->rows != rows_each || q[i]->cols != cols)
        return Error{fmt::format("deepseek_v4 on CUDA: '{}' is stored unlike '{}' (the weights stacked with it)",
                                 names[i], names[0])};
    Matrix m;
    if (q[0]->format == DeepseekV4QuantizedLinear::Format::fp4_groups) {
      std::vector<std::uint8_t> codes, scales;
      for (const auto* p : q) {
        codes.insert(codes.end(), p->bytes.begin(), p->bytes.end());
        scales.insert(scales.end(), p->group_scales.begin(), p->group_scales.end());
      }
      m = fp4_on_device(up(codes), up(scales), rows, cols, fp8_ok && cols % 32 == 0, summary_);
    } else if (fp8_ok && (names.size() == 1 || rows_each % Matrix::kFp8Block == 0)) {
      m = fp8_matrix(rows, cols);
      std::vector<float> grid(m.scales.size(), 0.0f);
      const std::int64_t part_blocks = num_blocks(rows_each), col_blocks = num_blocks(cols);
      for (std::size_t i = 0; i < q.size(); ++i) {
        SLUICE_CUDA_CHECK(cudaMemcpy(m.data.get() + static_cast<std::int64_t>(i) * rows_each * cols,
                                     q[i]->bytes.data(), q[i]->bytes.size(), cudaMemcpyHostToDevice));
        for (std::int64_t br = 0; br < part_blocks; ++br) {
          const std::int64_t row = static_cast<std::int64_t>(i) * part_blocks + br;  // in the stacked grid
          for (std::int64_t bc = 0; bc < col_blocks; ++bc)
            grid[static_cast<std::size_t>(row * m.scale_row_stride + bc)] =
                q[i]->block_scales[static_cast<std::size_t>(br * col_blocks + bc)];
        }
      }
      SLUICE_CUDA_CHECK(cudaMemcpy(m.scales.get(), grid.data(), grid.size() * 4, cudaMemcpyHostToDevice));
    } else {
      // No FP8 kernel for this shape: each part dequantized to bf16 on the device.
      m = bf16_matrix(rows, cols);
      for (std::size_t i = 0; i < q.size(); ++i) {
        const DeviceArray<std::uint8_t> bytes = up(q[i]->bytes);
        const DeviceArray<float> grid = up(q[i]->block_scales);
        launch_v4_fp8_to_bf16(bytes.get(), grid.get(), num_blocks(cols), rows_each, cols,
                              m.data.get() + static_cast<std::int64_t>(i) * rows_each * cols * 2, nullptr);
        SLUICE_CUDA_CHECK(cudaDeviceSynchronize());
      }
      ++summary_.dequantized_on_device;
    }
    count(m);
    return m;
  }
  Result<Matrix> linear(const std::string& name, const std::vector<float>& f32, std::int64_t rows, std::int64_t cols,
                        bool fp8_ok) {
    return stacked({name}, {&f32}, rows, cols, fp8_ok);
  }

 private:
  void count(const Matrix& m) {
    if (m.fp8()) {
      ++summary_.fp8_linears;
      summary_.fp8_bytes += m.bytes();
    } else {
      ++summary_.bf16_linears;
      summary_.bf16_bytes += m.bytes();
    }
  }
  const DeepseekV4Reference& ref_;
  Summary& summary_;
};

// Whether the FP8 kernels take these widths: dense linears (Fp8Matmul: the
// grouped kernel needs K a multiple of 16; cuBLASLt falls back to it), the
// grouped wo_a (each group's rows on 128-row blocks), the routed experts
// (under the layer's expert GEMM: mma.sync needs N a multiple of 128 for
// each group and K of 16; wgmma both of 128).
bool dense_fp8_ok(std::int64_t cols) { return grouped_gemm_supports(cols, true); }
bool experts_fp8_ok(std::int64_t hidden, std::int64_t inter, MoeExpertGemm gemm) {
  if (gemm == MoeExpertGemm::fp8_wgmma)
    return grouped_gemm_fp8_supports(2 * inter, hidden) && grouped_gemm_fp8_supports(hidden, inter);
  return (2 * inter) % Matrix::kFp8Block == 0 && hidden % Matrix::kFp8Block == 0 &&
         grouped_gemm_supports(hidden, true) && grouped_gemm_supports(inter, true);
}

}  // namespace

Result<std::unique_ptr<DeepseekV4DeviceForward>> DeepseekV4DeviceForward::upload(
    const DeepseekV4Reference& ref, const DeepseekV4KvLayout& layout, const DeepseekV4DeviceOptions& options) {
  const ModelConfig& config = ref.config_;
  const DeepseekV4Config& ds = ref.ds_;
  SLUICE_TRY(check_widths(config, ds));
  SLUICE_TRY(check_layout(layout, ds, options));
  prepare_grouped_gemm();
  prepare_grouped_gemm_fp8();
  auto owned = std::unique_ptr<DeepseekV4DeviceForward>(new DeepseekV4DeviceForward());
  Weights& w = *owned->w_;
  const std::int64_t hidden = config.hidden_size, heads = config.num_heads, hd = config.head_dim;
  const std::int64_t inter = ds.moe_intermediate_size, q_lora = ds.q_lora_rank;
  const std::int64_t o_rows = std::int64_t{ds.o_groups} * ds.o_lora_rank, group_in = heads * hd / ds.o_groups;
  w.layout = &layout;
  w.config = config;
  w.ds = ds;
  w.options = options;
  Uploader u(ref, w.summary);
  w.main_freq = up(ref.main_rope_.inv_freq);
  w.compress_freq = up(ref.compress_rope_.inv_freq);
  w.main_scale = ref.main_rope_.cos_sin_scale;
  w.compress_scale = ref.compress_rope_.cos_sin_scale;
  w.embed = up(ref.embed_);
  w.final_norm = up(ref.final_norm_);
  SLUICE_TRY_ASSIGN(head, u.linear("head.weight", ref.head_, config.vocab_size, hidden, dense_fp8_ok(hidden)));
  w.head = std::move(head);
  auto hc = [](const DeepseekV4Reference::HyperConnection& h) {
    return Weights::Hc{up(h.fn), up(h.base), up(h.scale)};
  };
  auto compressor = [&](const std::string& prefix, const DeepseekV4Reference::Compressor& c,
                        const DeepseekV4PoolRegion& region) -> Result<Weights::Compressor> {
    const auto width = static_cast<std::int64_t>(c.ape.size()) / static_cast<std::int64_t>(region.rate);
    SLUICE_TRY_ASSIGN(wkv, u.linear(prefix + "wkv.weight", c.wkv, width, hidden, dense_fp8_ok(hidden)));
    SLUICE_TRY_ASSIGN(wgate, u.linear(prefix + "wgate.weight", c.wgate, width, hidden, dense_fp8_ok(hidden)));
    return Weights::Compressor{std::move(wkv), std::move(wgate), up(c.ape), up(c.norm), region};
  };
  w.hc_head = hc(ref.hc_head_);
  const bool wo_a_fp8 = ds.o_lora_rank % Matrix::kFp8Block == 0 && dense_fp8_ok(group_in);
  const bool experts_fp8 = experts_fp8_ok(hidden, inter, options.moe_expert_gemm);
  for (std::size_t l = 0; l < ref.layers_.size(); ++l) {
    const DeepseekV4Reference::Layer& src = ref.layers_[l];
    const DeepseekV4LayerRegion& region = layout.layer(l);
    const std::string a = fmt::format("layers.{}.attn.", l), f = fmt::format("layers.{}.ffn.", l);
    Weights::Layer& d = w.layers.emplace_back();
    d.type = src.type;
    d.window_offset = region.window_offset;
    d.attn_hc = hc(src.attn_hc);
    d.ffn_hc = hc(src.ffn_hc);
    d.attn_norm = up(src.attn_norm);
    d.ffn_norm = up(src.ffn_norm);
    const auto& at = src.attention;
    SLUICE_TRY_ASSIGN(wq_a, u.linear(a + "wq_a.weight", at.wq_a, q_lora, hidden, dense_fp8_ok(hidden)));
    SLUICE_TRY_ASSIGN(wq_b, u.linear(a + "wq_b.weight", at.wq_b, heads * hd, q_lora, dense_fp8_ok(q_lora)));
    SLUICE_TRY_ASSIGN(wkv, u.linear(a + "wkv.weight", at.wkv, hd, hidden, dense_fp8_ok(hidden)));
    SLUICE_TRY_ASSIGN(wo_a, u.linear(a + "wo_a.weight", at.wo_a, o_rows, group_in, wo_a_fp8));
    SLUICE_TRY_ASSIGN(wo_b, u.linear(a + "wo_b.weight", at.wo_b, hidden, o_rows, dense_fp8_ok(o_rows)));
    d.wq_a = std::move(wq_a);
    d.wq_b = std::move(wq_b);
    d.wkv = std::move(wkv);
    d.wo_a = std::move(wo_a);
    d.wo_b = std::move(wo_b);
    d.q_norm = up(at.q_norm);
    d.kv_norm = up(at.kv_norm);
    d.sinks = up(at.sinks);
    if (at.compressor) {
      SLUICE_TRY_ASSIGN(c, compressor(a + "compressor.", *at.compressor, *region.compressor));
      d.compressor = std::move(c);
    }
    if (at.indexer) {
      SLUICE_TRY_ASSIGN(c, compressor(a + "indexer.compressor.", at.indexer->compressor, *region.indexer));
      d.index_compressor = std::move(c);
      const std::int64_t iq_rows = std::int64_t{ds.index_n_heads} * ds.index_head_dim;
      SLUICE_TRY_ASSIGN(iq, u.linear(a + "indexer.wq_b.weight", at.indexer->wq_b, iq_rows, q_lora,
                                     dense_fp8_ok(q_lora)));
      SLUICE_TRY_ASSIGN(iw, u.linear(a + "indexer.weights_proj.weight", at.indexer->weights_proj, ds.index_n_heads,
                                     hidden, dense_fp8_ok(hidden)));
      d.index_wq_b = std::move(iq);
      d.index_weights_proj = std::move(iw);
    }
    const auto& m = src.moe;
    SLUICE_TRY_ASSIGN(router, u.linear(f + "gate.weight", m.router, ds.n_routed_experts, hidden, dense_fp8_ok(hidden)));
    d.router = std::move(router);
    d.hash = !m.tid2eid.empty();
    if (d.hash) d.tid2eid = up(m.tid2eid);
    else d.bias = up(m.bias);
    // Routed experts: per expert w1 then w3 (inter rows each) for gate_up, w2 for down.
    std::vector<std::string> gate_up_names, down_names;
    std::vector<const std::vector<float>*> gate_up, down;
    std::vector<std::vector<float>> halves;  // f32 w1 / w3 halves of each expert's gate_up (unquantized only)
    halves.reserve(2 * m.gate_up.size());
    for (std::size_t e = 0; e < m.gate_up.size(); ++e) {
      gate_up_names.push_back(fmt::format("{}experts.{}.w1.weight", f, e));
      gate_up_names.push_back(fmt::format("{}experts.{}.w3.weight", f, e));
      down_names.push_back(fmt::format("{}experts.{}.w2.weight", f, e));
      const std::vector<float>& both = m.gate_up[e];
      const auto half = static_cast<std::ptrdiff_t>(both.size() / 2);
      halves.emplace_back(both.begin(), both.begin() + half);
      halves.emplace_back(both.begin() + half, both.end());
      gate_up.push_back(&halves[halves.size() - 2]);
      gate_up.push_back(&halves.back());
      down.push_back(&m.down[e]);
    }
    SLUICE_TRY_ASSIGN(experts_gate_up, u.stacked(gate_up_names, gate_up, inter, hidden, experts_fp8));
    SLUICE_TRY_ASSIGN(experts_down, u.stacked(down_names, down, hidden, inter, experts_fp8));
    if (experts_gate_up.fp8() != experts_down.fp8())
      return Error{fmt::format("deepseek_v4 on CUDA: layer {}'s routed experts hold gate/up and down in different "
                               "formats (an FP4 weight with an inexact block?); the expert GEMMs take one",
                               l)};
    d.experts_gate_up = std::move(experts_gate_up);
    d.experts_down = std::move(experts_down);
    const auto shared_half = m.shared_gate_up.begin() + static_cast<std::ptrdiff_t>(m.shared_gate_up.size() / 2);
    const std::vector<float> shared_w1(m.shared_gate_up.begin(), shared_half);
    const std::vector<float> shared_w3(shared_half, m.shared_gate_up.end());
    SLUICE_TRY_ASSIGN(shared_gate_up, u.stacked({f + "shared_experts.w1.weight", f + "shared_experts.w3.weight"},
                                                {&shared_w1, &shared_w3}, inter, hidden, dense_fp8_ok(hidden)));
    SLUICE_TRY_ASSIGN(shared_down, u.linear(f + "shared_experts.w2.weight", m.shared_down, hidden, inter,
                                            dense_fp8_ok(inter)));
    d.shared_gate_up = std::move(shared_gate_up);
    d.shared_down = std::move(shared_down);
  }
  SLUICE_CUDA_CHECK(cudaDeviceSynchronize());
  return owned;
}

void DeepseekV4DeviceForward::release_host_weights(DeepseekV4Reference& ref) {
  auto drop = [](auto& v) { std::decay_t<decltype(v)>().swap(v); };
  auto drop_hc = [&](DeepseekV4Reference::HyperConnection& h) {
    drop(h.fn);
    drop(h.base);
    drop(h.scale);
  };
  drop(ref.embed_);
  drop(ref.final_norm_);
  drop(ref.head_);
  drop_hc(ref.hc_head_);
  drop(ref.layers_);
  ref.quantized_.clear();
}

Result<std::unique_ptr<DeepseekV4DeviceForward>> DeepseekV4DeviceForward::random(
    const ModelConfig& config, const DeepseekV4KvLayout& layout, std::uint64_t seed, DeepseekV4RandomWeights kind,
    bool as_bf16, const DeepseekV4DeviceOptions& options) {
  SLUICE_CHECK(config.deepseek_v4 != nullptr);
  const DeepseekV4Config& ds = *config.deepseek_v4;
  SLUICE_TRY(check_widths(config, ds));
  SLUICE_TRY(check_layout(layout, ds, options));
  prepare_grouped_gemm();
  prepare_grouped_gemm_fp8();
  auto owned = std::unique_ptr<DeepseekV4DeviceForward>(new DeepseekV4DeviceForward());
  Weights& w = *owned->w_;
  w.options = options;
  const std::int64_t hidden = config.hidden_size, hc = ds.hc_mult, heads = config.num_heads, hd = config.head_dim;
  const std::int64_t inter = ds.moe_intermediate_size, experts = ds.n_routed_experts, vocab = config.vocab_size;
  std::uint64_t fill_seed = seed * 1000003;  // one more for every tensor
  auto count = [&](const Matrix& m) {
    (m.fp8() ? w.summary.fp8_linears : w.summary.bf16_linears) += 1;
    (m.fp8() ? w.summary.fp8_bytes : w.summary.bf16_bytes) += m.bytes();
  };
  auto to_bf16 = [&](const Matrix& m) {
    Matrix b = bf16_matrix(m.rows, m.cols);
    launch_v4_fp8_to_bf16(m.data.get(), m.scales.get(), m.scale_row_stride, m.rows, m.cols, b.data.get(), nullptr);
    SLUICE_CUDA_CHECK(cudaDeviceSynchronize());
    return b;
  };
  // Values of about 1 / sqrt(the input width): bf16 uniform (what DeepSeek
  // keeps in bf16, and every linear of the bf16 kind), or FP8 blocks
  // (`quantized` linears of the other kinds; bf16 twins under as_bf16).
  auto matrix = [&](std::int64_t rows, std::int64_t cols, bool quantized = false) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(cols));
    Matrix m;
    if (quantized && kind != DeepseekV4RandomWeights::bf16) {
      m = fp8_matrix(rows, cols);
      launch_v4_fill_fp8_random(m.data.get(), m.scales.get(), m.scale_row_stride, rows, cols, scale, ++fill_seed,
                                nullptr);
      if (as_bf16 || !dense_fp8_ok(cols)) m = to_bf16(m);
    } else {
      m = bf16_matrix(rows, cols);
      launch_v4_fill_uniform(m.data.get(), kBf16Dt, rows * cols, scale, ++fill_seed, nullptr);
    }
    count(m);
    return m;
  };
  // The routed experts: FP8 blocks, or FP4 groups turned into FP8 on the device (fp8_fp4_experts).
  const bool experts_fp8 = experts_fp8_ok(hidden, inter, options.moe_expert_gemm) && !as_bf16;
  auto expert_matrix = [&](std::int64_t rows, std::int64_t cols) {
    if (kind == DeepseekV4RandomWeights::bf16) return matrix(rows, cols);
    const float scale = 1.0f / std::sqrt(static_cast<float>(cols));
    Matrix m;
    if (kind == DeepseekV4RandomWeights::fp8) {
      Matrix q = fp8_matrix(rows, cols);
      launch_v4_fill_fp8_random(q.data.get(), q.scales.get(), q.scale_row_stride, rows, cols, scale, ++fill_seed,
                                nullptr);
      if (experts_fp8) {
        m = std::move(q);
      } else {
        m = to_bf16(q);
        if (!as_bf16) ++w.summary.dequantized_on_device;
      }
    } else {
      DeviceArray<std::uint8_t> codes(static_cast<std::size_t>(rows * cols / 2));
      DeviceArray<std::uint8_t> scales(static_cast<std::size_t>(rows * (cols / 32)));
      launch_v4_fill_fp4_random(codes.get(), scales.get(), rows, cols, scale, ++fill_seed, nullptr);
      m = fp4_on_device(codes, scales, rows, cols, experts_fp8, w.summary);
    }
    count(m);
    return m;
  };
  auto floats = [&](std::int64_t n, float scale, float offset = 0.0f) {
    DeviceArray<float> v(static_cast<std::size_t>(n));
    launch_v4_fill_uniform(v.get(), kF32Dt, n, scale, ++fill_seed, nullptr, offset);
    return v;
  };
  auto hc_weights = [&](std::int64_t mixes, std::int64_t scales) {
    return Weights::Hc{floats(mixes * hc * hidden, 1.0f / std::sqrt(static_cast<float>(hc * hidden))),
                       floats(mixes, 0.1f), floats(scales, 0.1f, 1.0f)};
  };
  auto compressor = [&](std::int64_t dim, std::int64_t width, std::int64_t rate, const DeepseekV4PoolRegion& region) {
    return Weights::Compressor{matrix(width, hidden), matrix(width, hidden), floats(rate * width, 0.1f),
                               floats(dim, 0.0f, 1.0f), region};
  };
  w.layout = &layout;
  w.config = config;
  w.ds = ds;
  const bool wo_a_quantized = ds.o_lora_rank % Matrix::kFp8Block == 0;
  w.main_freq = up(inverse_frequencies(ds.main_rope, ds.qk_rope_head_dim));
  w.compress_freq = up(inverse_frequencies(ds.compress_rope, ds.qk_rope_head_dim));
  w.main_scale = ds.main_rope.cos_sin_scale;
  w.compress_scale = ds.compress_rope.cos_sin_scale;
  w.embed = floats(vocab * hidden, 1.0f);
  w.final_norm = floats(hidden, 0.0f, 1.0f);
  w.head = matrix(vocab, hidden);
  w.hc_head = hc_weights(hc, 1);
  for (std::int32_t l = 0; l < config.num_layers; ++l) {
    const DeepseekV4LayerRegion& region = layout.layer(static_cast<std::size_t>(l));
    Weights::Layer& d = w.layers.emplace_back();
    d.type = ds.layer_types[static_cast<std::size_t>(l)];
    d.window_offset = region.window_offset;
    d.attn_hc = hc_weights((2 + hc) * hc, 3);
    d.ffn_hc = hc_weights((2 + hc) * hc, 3);
    d.attn_norm = floats(hidden, 0.0f, 1.0f);
    d.ffn_norm = floats(hidden, 0.0f, 1.0f);
    d.wq_a = matrix(ds.q_lora_rank, hidden, true);
    d.q_norm = floats(ds.q_lora_rank, 0.0f, 1.0f);
    d.wq_b = matrix(heads * hd, ds.q_lora_rank, true);
    d.wkv = matrix(hd, hidden, true);
    d.kv_norm = floats(hd, 0.0f, 1.0f);
    d.wo_a = matrix(std::int64_t{ds.o_groups} * ds.o_lora_rank, heads * hd / ds.o_groups, wo_a_quantized);
    d.wo_b = matrix(hidden, std::int64_t{ds.o_groups} * ds.o_lora_rank, true);
    d.sinks = floats(heads, 1.0f);
    const std::int64_t rate = ds.compress_rate(d.type);
    if (d.type == DeepseekV4Attention::heavily_compressed) {
      d.compressor = compressor(hd, hd, rate, *region.compressor);
    } else if (d.type == DeepseekV4Attention::compressed_sparse) {
      d.compressor = compressor(hd, 2 * hd, rate, *region.compressor);
      d.index_compressor =
          compressor(ds.index_head_dim, 2 * ds.index_head_dim, rate, *region.indexer);
      d.index_wq_b = matrix(std::int64_t{ds.index_n_heads} * ds.index_head_dim, ds.q_lora_rank, true);
      d.index_weights_proj = matrix(ds.index_n_heads, hidden);
    }
    d.router = matrix(experts, hidden);
    d.hash = ds.mlp_layer_types[static_cast<std::size_t>(l)] == DeepseekV4Mlp::hash_moe;
    if (d.hash) {
      // Distinct experts a token, spread over all of them.
      std::vector<std::int32_t> table(static_cast<std::size_t>(vocab * ds.num_experts_per_tok));
      for (std::int64_t t = 0; t < vocab; ++t)
        for (std::int64_t j = 0; j < ds.num_experts_per_tok; ++j)
          table[static_cast<std::size_t>(t * ds.num_experts_per_tok + j)] =
              static_cast<std::int32_t>((t * 97 + j * (experts / ds.num_experts_per_tok + 1)) % experts);
      d.tid2eid = up(table);
    } else {
      d.bias = floats(experts, 0.0f);
    }
    d.experts_gate_up = expert_matrix(experts * 2 * inter, hidden);
    d.experts_down = expert_matrix(experts * hidden, inter);
    if (d.experts_gate_up.fp8() != d.experts_down.fp8())
      return Error{"deepseek_v4 random weights: an FP4 block e4m3 cannot hold (not expected of these scales)"};
    d.shared_gate_up = matrix(2 * inter, hidden, inter % Matrix::kFp8Block == 0);
    d.shared_down = matrix(hidden, inter, true);
  }
  SLUICE_CUDA_CHECK(cudaDeviceSynchronize());
  return owned;
}

DeepseekV4DeviceForward::WeightSummary DeepseekV4DeviceForward::weight_summary() const { return w_->summary; }

Fp8GemmCounts DeepseekV4DeviceForward::fp8_gemm_counts() const {
  return rt_->gemm != nullptr ? rt_->gemm->fp8_counts() : Fp8GemmCounts{};
}

std::int64_t DeepseekV4DeviceForward::weight_bytes() const {
  std::int64_t bytes = 0;
  auto f = [&](const DeviceArray<float>& v) { bytes += static_cast<std::int64_t>(v.size() * 4); };
  auto b = [&](const Matrix& m) { bytes += m.bytes(); };
  auto hc = [&](const Weights::Hc& h) {
    f(h.fn);
    f(h.base);
    f(h.scale);
  };
  auto comp = [&](const std::optional<Weights::Compressor>& c) {
    if (!c) return;
    b(c->wkv);
    b(c->wgate);
    f(c->ape);
    f(c->norm);
  };
  const Weights& w = *w_;
  f(w.embed);
  f(w.final_norm);
  b(w.head);
  hc(w.hc_head);
  for (const auto& L : w.layers) {
    hc(L.attn_hc);
    hc(L.ffn_hc);
    for (const auto* v : {&L.attn_norm, &L.ffn_norm, &L.q_norm, &L.kv_norm, &L.sinks, &L.bias}) f(*v);
    for (const auto* m : {&L.wq_a, &L.wq_b, &L.wkv, &L.wo_a, &L.wo_b, &L.index_wq_b, &L.index_weights_proj, &L.router,
                          &L.experts_gate_up, &L.experts_down, &L.shared_gate_up, &L.shared_down})
      b(*m);
    comp(L.compressor);
    comp(L.index_compressor);
  }
  return bytes;
}

namespace {

using Weights = DeepseekV4DeviceForward::Weights;

// Block tables for the items of a plan (one entry an item), staged.
struct ItemTables {
  StepInts::Handle begin = 0, len = 0;
};

// One compressor kind's plan for the step, its arrays staged.
struct CompressOnDevice {
  DeepseekV4CompressPlan plan;
  StepInts::Handle entry = 0, first_row = 0, first_token = 0, count = 0, flags = 0, emit_row = 0, entry_index = 0;
  ItemTables item_tables, entry_tables;
};

// One indexer rate's key pool for the step, its arrays staged.
struct IndexOnDevice {
  DeepseekV4IndexPlan plan;
  StepInts::Handle sequence_key_begin = 0, key_begin = 0, visible = 0;
};

// One layer kind's key pool for the step (launch_v4_gather_keys_pooled), its arrays staged.
struct KeyPoolOnDevice {
  StepInts::Handle pool_begin = 0, window_first = 0, window_count = 0;
  std::int32_t pool_rows = 0;
};

// The step's host plans and their device arrays.
struct Step {
  DeepseekV4StepTables t;
  StepInts ints;
  StepInts::Handle block_ids = 0, tokens = 0, positions = 0, row_table_begin = 0, row_table_len = 0, sample_rows = 0,
                   sequence_table_begin = 0, sequence_table_len = 0;
  std::map<std::pair<std::int32_t, bool>, CompressOnDevice> compress;  // by (rate, overlapping)
  std::map<std::int32_t, IndexOnDevice> index;                         // by rate
  std::map<std::int32_t, std::int32_t> most_entries;                   // HCA: the most entries a row sees, by rate
  std::map<std::int32_t, KeyPoolOnDevice> key_pools;                   // by entry rate (0: sliding layers)
  StepInts::Handle row_sequence = 0;
  // The row of each row's (and each sequence's) first position this step:
  // where the gathers find the step's own latents.
  StepInts::Handle row_first_row = 0, sequence_first_row = 0;
  // The rows whose window latents are stored after the attention (DeepseekV4WindowPlan).
  StepInts::Handle window_store_position = 0, window_store_row = 0;
  ItemTables window_store_tables;
  std::int32_t num_window_stores = 0;
  // wo_a in FP8 as one grouped GEMM (wo_a_takes_grouped_gemm): the group of each
  // (row, group) pair, [rows * o_groups], g at r * o_groups + g.
  bool wo_a_grouped = false;
  StepInts::Handle wo_a_group_of_pair = 0;

  ItemTables tables_of(const std::vector<std::int32_t>& sequences) {
    std::vector<std::int32_t> begin, len;
    for (std::int32_t s : sequences) {
      begin.push_back(t.sequence_table_begin[static_cast<std::size_t>(s)]);
      len.push_back(t.sequence_table_len[static_cast<std::size_t>(s)]);
    }
    return {ints.add(begin), ints.add(len)};
  }
  V4BlockTables view(const ItemTables& it) const { return {ints[block_ids], ints[it.begin], ints[it.len]}; }
  V4BlockTables rows_view() const { return {ints[block_ids], ints[row_table_begin], ints[row_table_len]}; }
  std::int32_t num_sequences() const { return static_cast<std::int32_t>(t.sequence_table_begin.size()); }
  V4BlockTables sequences_view() const {
    return {ints[block_ids], ints[sequence_table_begin], ints[sequence_table_len]};
  }

  void plan_compressor(std::int32_t rate, bool overlapping, std::int32_t block_size) {
    const auto key = std::pair{rate, overlapping};
    if (compress.contains(key)) return;
    CompressOnDevice& c = compress[key];
    c.plan = DeepseekV4CompressPlan::make(t, rate, overlapping, block_size);
    const DeepseekV4CompressPlan& p = c.plan;
    c.entry = ints.add(p.item_entry);
    c.first_row = ints.add(p.item_first_row);
    c.first_token = ints.add(p.item_first_token);
    c.count = ints.add(p.item_count);
    c.flags = ints.add(p.item_flags);
    c.emit_row = ints.add(p.item_emit_row);
    c.item_tables = tables_of(p.item_sequence);
    c.entry_index = ints.add(p.entry_index);
    c.entry_tables = tables_of(p.entry_sequence);
  }
  void plan_window_stores(std::int32_t window_slots, std::int32_t block_size) {
    const DeepseekV4WindowPlan plan = DeepseekV4WindowPlan::make(t, window_slots, block_size);
    std::vector<std::int32_t> store_position, store_sequence;
    for (std::int32_t row : plan.store_row) {
      store_position.push_back(t.positions[static_cast<std::size_t>(row)]);
      store_sequence.push_back(t.row_sequence[static_cast<std::size_t>(row)]);
    }
    row_first_row = ints.add(plan.row_first_row);
    sequence_first_row = ints.add(t.sequence_row_begin);
    window_store_position = ints.add(store_position);
    window_store_row = ints.add(plan.store_row);
    window_store_tables = tables_of(store_sequence);
    num_window_stores = static_cast<std::int32_t>(plan.store_row.size());
  }
  // Each sequence's window span (its first row's window through its last
  // row) and, for a compressed layer, its entries up to its last row's.
  void plan_key_pool(std::int32_t rate, std::int32_t window) {
    if (key_pools.contains(rate)) return;
    const std::size_t sequences = t.sequence_table_begin.size();
    std::vector<std::int32_t> lo(sequences, std::numeric_limits<std::int32_t>::max()), hi(sequences, -1);
    for (std::size_t r = 0; r < t.positions.size(); ++r) {
      const auto q = static_cast<std::size_t>(t.row_sequence[r]);
      lo[q] = std::min(lo[q], t.positions[r]);
      hi[q] = std::max(hi[q], t.positions[r]);
    }
    std::vector<std::int32_t> begin{0}, first(sequences, 0), count(sequences, 0);
    for (std::size_t q = 0; q < sequences; ++q) {
      std::int32_t entries = 0;
      if (hi[q] >= 0) {
        first[q] = std::max(0, lo[q] - window + 1);
        count[q] = hi[q] - first[q] + 1;
        entries = rate > 0 ? (hi[q] + 1) / rate : 0;
      }
      begin.push_back(begin.back() + count[q] + entries);
    }
    KeyPoolOnDevice& k = key_pools[rate];
    k.pool_begin = ints.add(begin);
    k.window_first = ints.add(first);
    k.window_count = ints.add(count);
    k.pool_rows = begin.back();
  }
  void plan_indexer(std::int32_t rate) {
    if (index.contains(rate)) return;
    IndexOnDevice& x = index[rate];
    x.plan = DeepseekV4IndexPlan::make(t, rate);
    x.sequence_key_begin = ints.add(x.plan.sequence_key_begin);
    x.key_begin = ints.add(x.plan.row_key_begin);
    x.visible = ints.add(x.plan.row_num_visible);
  }
};

const Dt kE4m3Dt = dt_of(DType::f8_e4m3);  // codes and records, moved as bytes

// How a block's values of `format` are tagged (an e4m3_scaled region's codes:
// e4m3; fp8_ds_mla records say so in the region instead).
Dt stored_dt(DeepseekV4ValueFormat format) {
  switch (format) {
    case DeepseekV4ValueFormat::f32: return kF32Dt;
    case DeepseekV4ValueFormat::bf16: return kBf16Dt;
    case DeepseekV4ValueFormat::e4m3_scaled:
    case DeepseekV4ValueFormat::fp8_ds_mla: return kE4m3Dt;
  }
  return kF32Dt;
}

// A compressor's entries (an index key's for the indexer) as a paged site:
// the values, or an e4m3_scaled region's codes.
V4PagedRegion entry_region(const DeepseekV4PoolRegion& r) {
  return {.site = V4PagedSite::entry,
          .offset = r.entries_offset,
          .count = static_cast<std::int32_t>(r.dim),
          .rate = static_cast<std::int32_t>(r.rate),
          .dt = stored_dt(r.entries_format),
          .fp8_ds_mla = r.entries_format == DeepseekV4ValueFormat::fp8_ds_mla};
}

// An e4m3_scaled region's scales, one f32 an entry.
V4PagedRegion entry_scales_region(const DeepseekV4PoolRegion& r) {
  SLUICE_CHECK(r.entries_format == DeepseekV4ValueFormat::e4m3_scaled);
  return {.site = V4PagedSite::entry, .offset = r.scales_offset, .count = 1,
          .rate = static_cast<std::int32_t>(r.rate), .dt = kF32Dt};
}

// What every sub-layer needs: weights, the step, the blocks, scratch, GEMMs, the stream.
struct Pass {
  const Weights& w;
  const Step& step;
  const V4PagedBlocks& blocks;
  StepScratch& scratch;
  LtGemm& gemm;
  LtBatchedGemm& batched;
  Fp8Matmul& fp8;
  ScratchArena& fp8_scratch;
  cudaStream_t s;
  std::int32_t n;  // rows

  template <class T>
  T* alloc(std::int64_t count) const {
    return scratch.alloc<T>(count);
  }
  // A bf16 copy of x (a GEMM's input).
  std::uint16_t* bf16(const float* x, std::int64_t count) const {
    auto* out = alloc<std::uint16_t>(count);
    launch_v4_f32_to_bf16(x, out, count, s);
    return out;
  }
  // out [rows, w.rows] = x [rows, w.cols] bf16 . w^T, out f32 (or bf16):
  // cuBLASLt for bf16 weights, Fp8Matmul for FP8 ones.
  void linear(const std::uint16_t* x, const Matrix& m, std::int64_t rows, void* out,
              DType out_dtype = DType::f32) const {
    if (rows == 0) return;
    if (!m.fp8()) {
      gemm.run(x, m.ptr(), out, out_dtype, rows, m.rows, m.cols);
      return;
    }
    fp8_linear(x, m.tensor(), rows, out, out_dtype);
  }
  void fp8_linear(const void* x, const Tensor& w, std::int64_t rows, void* out, DType out_dtype) const {
    fp8_scratch.reset();
    fp8.run(Tensor{const_cast<void*>(x), DType::bf16, Shape{rows, w.cols()}}, w,
            Tensor{out, out_dtype, Shape{rows, w.rows()}}, fp8_scratch, true,
            Launch{.stream = s, .programmatic = false});
  }
};

static_assert(DeepseekV4CompressPlan::kReadState == kV4CompressRead &&
              DeepseekV4CompressPlan::kStoreState == kV4CompressStore && DeepseekV4CompressPlan::kEmit == kV4CompressEmit);

// One compressor's share of a step (DeepseekV4Reference::compress): the
// projections of the step's rows, each entry they feed folded from its state
// before the step (DeepseekV4CompressPlan), the states the reference leaves
// stored, the entries that close emitted and stored.
void compress_step(const Pass& p, const Weights::Compressor& c, const std::uint16_t* x16) {
  const DeepseekV4PoolRegion& r = c.region;
  const CompressOnDevice& cd = p.step.compress.at({static_cast<std::int32_t>(r.rate), r.overlapping()});
  const DeepseekV4CompressPlan& plan = cd.plan;
  if (plan.num_items() == 0) return;
  const StepInts& ints = p.step.ints;
  const auto width = static_cast<std::int32_t>(r.width);
  const std::int32_t n = p.n;
  float* kv = p.alloc<float>(std::int64_t{n} * width);
  float* gate = p.alloc<float>(std::int64_t{n} * width);
  p.linear(x16, c.wkv, n, kv);
  p.linear(x16, c.wgate, n, gate);
  const std::int32_t entries = plan.num_entries();
  float* out = entries > 0 ? p.alloc<float>(std::int64_t{entries} * r.dim) : nullptr;
  float* start_states = p.alloc<float>(std::int64_t{plan.num_items()} * 3 * r.dim);
  launch_v4_compress({.kv = kv, .gate = gate, .ape = c.ape.get(), .norm = c.norm.get(), .blocks = p.blocks,
                      .tables = p.step.view(cd.item_tables), .state_offset = r.state_offset,
                      .slots = static_cast<std::int32_t>(r.slots), .entry = ints[cd.entry],
                      .first_row = ints[cd.first_row], .first_token = ints[cd.first_token], .count = ints[cd.count],
                      .flags = ints[cd.flags], .emit_row = ints[cd.emit_row], .start_states = start_states,
                      .rope = p.w.compress_rope(),
                      .out = out, .out_dt = kF32Dt, .items = plan.num_items(), .dim = static_cast<std::int32_t>(r.dim),
                      .width = width, .rate = static_cast<std::int32_t>(r.rate), .eps = p.w.config.rms_norm_eps},
                     p.s);
  if (entries == 0) return;
  const V4PagedCopyArgs store{.blocks = p.blocks, .tables = p.step.view(cd.entry_tables), .region = entry_region(r),
                              .index = ints[cd.entry_index], .dense = out, .dense_dt = kF32Dt, .items = entries,
                              .to_blocks = true};
  if (r.entries_format == DeepseekV4ValueFormat::fp8_ds_mla) {  // the entries' records, stored as made
    auto* records = p.alloc<std::uint8_t>(std::int64_t{entries} * kV4Fp8DsMlaBytes);
    launch_v4_quantize_fp8_ds_mla_rows(out, entries, records, p.s);
    V4PagedCopyArgs store_records = store;
    store_records.dense = records;
    store_records.dense_dt = kE4m3Dt;
    launch_v4_paged_copy(store_records, p.s);
    return;
  }
  if (r.entries_format != DeepseekV4ValueFormat::e4m3_scaled) {
    launch_v4_paged_copy(store, p.s);
    return;
  }
  // The indexer's records, made once as they are emitted: launch_v4_quantize_e4m3_rows'
  // codes and scales, which the f32 layout's gather makes from the same keys every step.
  auto* codes = p.alloc<std::uint8_t>(std::int64_t{entries} * r.dim);
  float* scales = p.alloc<float>(entries);
  launch_v4_quantize_e4m3_rows(out, entries, static_cast<std::int32_t>(r.dim), codes, scales, p.s);
  V4PagedCopyArgs store_codes = store;
  store_codes.dense = codes;
  store_codes.dense_dt = kE4m3Dt;
  launch_v4_paged_copy(store_codes, p.s);
  V4PagedCopyArgs store_scales = store;
  store_scales.region = entry_scales_region(r);
  store_scales.dense = scales;
  launch_v4_paged_copy(store_scales, p.s);
}

// Whether an FP8 wo_a runs as one grouped GEMM over its groups (wo_a_grouped_fp8)
// for a step of `rows`: where a GEMM a group would take cuBLASLt on e4m3
// activations anyway (the default options above the GEMV's rows), so the
// activations' rounding is the same and only the sums' order differs.
bool wo_a_takes_grouped_gemm(const Weights& w, std::int64_t rows) {
  const DeepseekV4Config& ds = w.ds;
  const std::int64_t o_lora = ds.o_lora_rank, group_in = std::int64_t{w.config.num_heads} * w.config.head_dim / ds.o_groups;
  return w.options.moe_expert_gemm == MoeExpertGemm::fp8_wgmma &&
         fp8_matmul_path(w.options.fp8_dense_gemm, rows, o_lora, group_in) == Fp8MatmulPath::cublaslt &&
         grouped_gemm_fp8_supports(o_lora, group_in) &&
         std::ranges::any_of(w.layers, [](const Weights::Layer& L) { return L.wo_a.fp8(); });
}

// wo_a in FP8 as the MoE's grouped GEMM with a group an expert, instead of a
// GEMM a group with its input and output columns copied apart (8 GEMMs of
// 64 rows at ~0.3 TB/s, 16 copies and 8 quantizations a layer at decode batch
// 64): attn [n, groups * group_in] is [n * groups, group_in], row r * groups + g
// group g's input, quantized per 1x128 block in one launch; pair r * groups + g
// goes to expert g (k = 1, so the plan's row of a slot is its pair); the
// outputs, by slot, go back to pair order, which is grouped's [n, groups * o_lora].
void wo_a_grouped_fp8(const Pass& p, const Weights::Layer& L, const std::uint16_t* attn16, std::uint16_t* grouped16) {
  const DeepseekV4Config& ds = p.w.ds;
  const std::int32_t groups = ds.o_groups, o_lora = ds.o_lora_rank;
  const std::int32_t group_in = p.w.config.num_heads * p.w.config.head_dim / groups;
  const std::int32_t pairs = p.n * groups;
  const Launch launch{.stream = p.s, .programmatic = false};
  const std::int32_t tile_rows = grouped_gemm_fp8_tile_rows(pairs, groups, /*a_gathered=*/true);
  const std::int32_t max_tiles = moe_max_tiles(pairs, groups, tile_rows);
  auto* expert_offsets = p.alloc<std::int32_t>(groups + 1);
  auto* slot_of_pair = p.alloc<std::int32_t>(pairs);
  auto* row_of_slot = p.alloc<std::int32_t>(pairs);
  auto* tile_expert = p.alloc<std::int32_t>(max_tiles);
  auto* tile_first_slot = p.alloc<std::int32_t>(max_tiles);
  launch_moe_plan({.expert_ids = p.step.ints[p.step.wo_a_group_of_pair], .num_pairs = pairs, .k = 1,
                   .num_experts = groups, .tile_rows = tile_rows, .max_tiles = max_tiles,
                   .tile_order = grouped_gemm_fp8_tile_order(tile_rows), .expert_offsets = expert_offsets,
                   .slot_of_pair = slot_of_pair, .row_of_slot = row_of_slot, .tile_expert = tile_expert,
                   .tile_first_slot = tile_first_slot},
                  launch);
  auto* a_q = p.alloc<std::uint8_t>(std::int64_t{pairs} * group_in);
  float* a_scales = p.alloc<float>(std::int64_t{pairs} * (group_in / Matrix::kFp8Block));
  launch_quantize_fp8_rows({.x = attn16, .rows = pairs, .k = group_in, .q = a_q, .scales = a_scales}, launch);
  auto* y16 = p.alloc<std::uint16_t>(std::int64_t{pairs} * o_lora);  // by slot
  launch_grouped_gemm_fp8({.a = a_q, .a_scales = a_scales, .a_scale_stride = pairs, .row_of_slot = row_of_slot,
                           .w = L.wo_a.ptr(), .w_rows = L.wo_a.rows, .w_scales = L.wo_a.scales.get(),
                           .w_scale_row_stride = L.wo_a.scale_row_stride, .tile_expert = tile_expert,
                           .tile_first_slot = tile_first_slot, .expert_offsets = expert_offsets,
                           .max_tiles = max_tiles, .tile_rows = tile_rows, .n = o_lora, .k = group_in,
                           .epilogue = GroupedEpilogue::store, .out = y16},
                          launch);
  // Pair i's row of grouped is slot slot_of_pair[i]'s output (o_lora bf16, moved as o_lora / 2 floats).
  launch_v4_copy_rows(reinterpret_cast<const float*>(y16), slot_of_pair, reinterpret_cast<float*>(grouped16), nullptr,
                      pairs, o_lora / 2, p.s);
}

// DeepseekV4Reference::run_attention for every row: x [n, hidden] (and its bf16 copy) -> out [n, hidden].
void attention(const Pass& p, const Weights::Layer& L, const std::uint16_t* x16, float* out) {
  const ModelConfig& cfg = p.w.config;
  const DeepseekV4Config& ds = p.w.ds;
  const StepInts& ints = p.step.ints;
  const std::int32_t n = p.n, heads = cfg.num_heads, hd = cfg.head_dim, q_lora = ds.q_lora_rank;
  const float eps = cfg.rms_norm_eps;
  const V4Rope rope = L.type == DeepseekV4Attention::sliding ? p.w.main_rope() : p.w.compress_rope();
  const std::int32_t* positions = ints[p.step.positions];
  cudaStream_t s = p.s;

  // Queries: q_a, its norm, q_b, an unweighted norm per head, rope; bf16 for the attention.
  float* q_residual = p.alloc<float>(std::int64_t{n} * q_lora);
  p.linear(x16, L.wq_a, n, q_residual);
  launch_v4_rms_norm_f32(q_residual, n, q_lora, L.q_norm.get(), eps, s);
  const std::uint16_t* q_residual16 = p.bf16(q_residual, std::int64_t{n} * q_lora);
  const std::int64_t q_size = std::int64_t{n} * heads * hd;
  float* q = p.alloc<float>(q_size);
  p.linear(q_residual16, L.wq_b, n, q);
  launch_v4_rms_norm_f32(q, std::int64_t{n} * heads, hd, nullptr, eps, s);
  launch_v4_rope_tail_f32(q, n, heads, hd, positions, rope, false, s);
  const std::uint16_t* q16 = p.bf16(q, q_size);
  // The shared K=V latent of each new token joins its sequence's window
  // (stored after the key gather, which reads the step's own from here).
  float* kv = p.alloc<float>(std::int64_t{n} * hd);
  p.linear(x16, L.wkv, n, kv);
  launch_v4_rms_norm_f32(kv, n, hd, L.kv_norm.get(), eps, s);
  launch_v4_rope_tail_f32(kv, n, 1, hd, positions, rope, false, s);
  const DeepseekV4ValueFormat latents = p.w.layout->formats().latents;
  const V4PagedRegion window_region{.site = V4PagedSite::window,
                                    .offset = L.window_offset,
                                    .count = hd,
                                    .slots = p.w.layout->window_slots(),
                                    .dt = stored_dt(latents),
                                    .fp8_ds_mla = latents == DeepseekV4ValueFormat::fp8_ds_mla};
  // fp8_ds_mla blocks: the step's latents become what their records hold
  // (its own keys then read as the blocks will give them later), and the
  // records are what the window store copies.
  std::uint8_t* kv_records = nullptr;
  if (window_region.fp8_ds_mla) {
    kv_records = p.alloc<std::uint8_t>(std::int64_t{n} * kV4Fp8DsMlaBytes);
    launch_v4_quantize_fp8_ds_mla_rows(kv, n, kv_records, s);
  }
  if (L.compressor) compress_step(p, *L.compressor, x16);

  // CSA: the indexer's picks among the visible entries.
  const std::int32_t top_k = ds.index_topk;
  std::int32_t* selected = nullptr;
  std::int32_t* num_selected = nullptr;
  if (L.index_compressor) {
    compress_step(p, *L.index_compressor, x16);
    const std::int32_t ih = ds.index_n_heads, ihd = ds.index_head_dim;
    float* index_q = p.alloc<float>(std::int64_t{n} * ih * ihd);
    float* weights = p.alloc<float>(std::int64_t{n} * ih);
    p.linear(q_residual16, L.index_wq_b, n, index_q);
    launch_v4_rope_tail_f32(index_q, n, ih, ihd, positions, p.w.compress_rope(), false, s);
    p.linear(x16, L.index_weights_proj, n, weights);
    launch_v4_scale_f32(weights, std::int64_t{n} * ih, 1.0f / std::sqrt(static_cast<float>(ih)), s);
    const IndexOnDevice& ix = p.step.index.at(static_cast<std::int32_t>(L.index_compressor->region.rate));
    selected = p.alloc<std::int32_t>(std::int64_t{n} * top_k);
    num_selected = p.alloc<std::int32_t>(n);
    if (ix.plan.max_visible == 0) {
      SLUICE_CUDA_CHECK(cudaMemsetAsync(num_selected, 0, static_cast<std::size_t>(n) * sizeof(std::int32_t), s));
    } else {
      const std::int32_t pool = ix.plan.num_keys();
      const bool f32_pool = p.w.options.indexer == DeepseekV4IndexerKernels::f32_pool_cuda_cores;
      auto* keys_e4m3 = p.alloc<std::uint8_t>(std::int64_t{pool} * ihd);
      float* key_scale = p.alloc<float>(pool);
      V4IndexKeysArgs pool_args{.blocks = p.blocks, .tables = p.step.sequences_view(),
                                .region = entry_region(L.index_compressor->region),
                                .sequence_key_begin = ints[ix.sequence_key_begin],
                                .num_sequences = p.step.num_sequences(),
                                .num_keys = pool, .codes = keys_e4m3, .scales = key_scale};
      if (L.index_compressor->region.entries_format == DeepseekV4ValueFormat::e4m3_scaled)
        pool_args.scales_region = entry_scales_region(L.index_compressor->region);
      if (f32_pool) {
        float* keys = p.alloc<float>(std::int64_t{pool} * ihd);
        pool_args.keys = keys;
        launch_v4_gather_index_keys(pool_args, s);
        launch_v4_quantize_e4m3_rows(keys, pool, ihd, keys_e4m3, key_scale, s);
      } else {
        launch_v4_gather_index_keys_e4m3(pool_args, s);
      }
      auto* q_e4m3 = p.alloc<std::uint8_t>(std::int64_t{n} * ih * ihd);
      float* q_scale = p.alloc<float>(std::int64_t{n} * ih);
      launch_v4_quantize_e4m3_rows(index_q, std::int64_t{n} * ih, ihd, q_e4m3, q_scale, s);
      // Prefill (rows sharing their sequence's keys) on warpgroup MMA, decode on mma.sync.
      constexpr std::int32_t kWgmmaRowsPerSequence = 4;
      const DeepseekV4IndexerKernels kernels = p.w.options.indexer;
      const bool tf32_head_sum = kernels == DeepseekV4IndexerKernels::e4m3_pool_wgmma_tf32_prefill ||
                                 (kernels == DeepseekV4IndexerKernels::e4m3_pool_wgmma_tf32_long_chunks &&
                                  n >= p.w.options.tf32_head_sum_min_rows);
      // Every e4m3 form but the mma.sync one scores prefill on warpgroup MMA.
      const bool wgmma = !f32_pool && kernels != DeepseekV4IndexerKernels::e4m3_pool_mma &&
                         n >= kWgmmaRowsPerSequence * p.step.num_sequences();
      // The warpgroup-MMA scores read each head's q_scale x weight as one factor.
      float* head_factors = nullptr;
      if (wgmma) {
        head_factors = p.alloc<float>(std::int64_t{n} * ih);
        launch_v4_multiply_f32(q_scale, weights, head_factors, std::int64_t{n} * ih, s);
      }
      // Rows of scores start on 16 bytes, so the top-k reads them a float4 a load.
      const std::int32_t score_width = static_cast<std::int32_t>(align_up(ix.plan.max_visible, 4));
      float* scores = p.alloc<float>(std::int64_t{n} * score_width);
      const V4IndexerArgs args{.q = q_e4m3, .q_scale = q_scale, .weights = weights, .head_factors = head_factors,
                               .keys = keys_e4m3, .key_scale = key_scale, .key_begin = ints[ix.key_begin],
                               .num_visible = ints[ix.visible], .scores = scores, .selected = selected,
                               .num_selected = num_selected, .rows = n, .num_heads = ih,
                               .max_visible = score_width, .top_k = top_k};
      if (f32_pool)
        launch_v4_indexer_scores(args, s);
      else if (wgmma && tf32_head_sum)
        launch_v4_indexer_scores_wgmma_tf32(args, s);
      else if (wgmma)
        launch_v4_indexer_scores_wgmma(args, s);
      else
        launch_v4_indexer_scores_mma(args, s);
      launch_v4_indexer_top_k(args, s);
    }
  }

  // Each row's key set (window, then the picks or every visible HCA entry), the sparse attention.
  std::int32_t max_keys = ds.sliding_window;
  if (L.index_compressor) max_keys += top_k;
  else if (L.compressor) max_keys += p.step.most_entries.at(static_cast<std::int32_t>(L.compressor->region.rate));
  // Rows that share their sequence's keys (prefill) gather each key once into
  // a pool; rows of their own (decode) gather their own sets, fewer rows.
  const KeyPoolOnDevice& pool =
      p.step.key_pools.at(L.compressor ? static_cast<std::int32_t>(L.compressor->region.rate) : 0);
  const bool pooled = pool.pool_rows < std::int64_t{n} * max_keys;
  auto* keys = p.alloc<std::uint16_t>((pooled ? pool.pool_rows : std::int64_t{n} * max_keys) * hd);
  auto* key_rows = p.alloc<std::int32_t>(std::int64_t{n} * max_keys);
  auto* num_keys = p.alloc<std::int32_t>(n);
  V4GatherKeysArgs gather{.blocks = p.blocks, .tables = p.step.rows_view(), .positions = positions,
                          .window = window_region, .sliding_window = ds.sliding_window, .fresh = kv,
                          .fresh_first_row = ints[p.step.row_first_row], .keys = keys, .key_rows = key_rows,
                          .num_keys = num_keys, .rows = n, .max_keys = max_keys};
  if (L.compressor) gather.entries = entry_region(L.compressor->region);
  if (L.index_compressor) {
    gather.selected = selected;
    gather.num_selected = num_selected;
    gather.top_k = top_k;
  }
  if (pooled) {
    launch_v4_gather_keys_pooled(gather,
                                 {.tables = p.step.sequences_view(), .row_sequence = ints[p.step.row_sequence],
                                  .pool_begin = ints[pool.pool_begin], .window_first = ints[pool.window_first],
                                  .window_count = ints[pool.window_count],
                                  .first_row = ints[p.step.sequence_first_row],
                                  .num_sequences = p.step.num_sequences(), .pool_rows = pool.pool_rows},
                                 s);
  } else {
    launch_v4_gather_keys(gather, s);
  }
  launch_v4_paged_copy({.blocks = p.blocks, .tables = p.step.view(p.step.window_store_tables),
                        .region = window_region, .index = ints[p.step.window_store_position],
                        .dense = kv_records != nullptr ? static_cast<void*>(kv_records) : kv,
                        .dense_row = ints[p.step.window_store_row],
                        .dense_dt = kv_records != nullptr ? kE4m3Dt : kF32Dt,
                        .items = p.step.num_window_stores, .to_blocks = true},
                       s);
  auto* attn16 = p.alloc<std::uint16_t>(q_size);  // bf16: wo_a's input
  const V4SparseAttentionArgs attention_args{
      .q = q16, .kv = keys, .key_rows = key_rows, .num_keys = num_keys, .sinks = L.sinks.get(),
      .positions = positions, .rope = rope, .out = attn16, .out_dt = kBf16Dt, .rows = n, .num_heads = heads,
      .max_keys = max_keys, .softmax_scale = 1.0f / std::sqrt(static_cast<float>(hd))};
  switch (p.w.options.attention) {
    case DeepseekV4AttentionKernel::wgmma:
      launch_v4_sparse_attention_wgmma(attention_args, V4SoftmaxWeights::one_bf16, s);
      break;
    case DeepseekV4AttentionKernel::wgmma_two_terms:
      launch_v4_sparse_attention_wgmma(attention_args, V4SoftmaxWeights::two_bf16_terms, s);
      break;
    case DeepseekV4AttentionKernel::mma_sync: launch_v4_sparse_attention_mma(attention_args, s); break;
    case DeepseekV4AttentionKernel::cuda_cores: launch_v4_sparse_attention(attention_args, s); break;
  }
  // Grouped output: group g's heads [n, group_in] (columns g * group_in of attn) times its block of
  // wo_a [o_lora, group_in]^T into [n, groups * o_lora] (bf16: wo_b's input), then wo_b. All groups
  // as one GEMM: strided-batched (bf16 wo_a) or grouped (FP8, wo_a_grouped_fp8); else (FP8 at the
  // GEMV's sizes or under Fp8DenseGemm::kernel) a GEMM a group.
  const std::int32_t groups = ds.o_groups, group_in = heads * hd / groups, o_lora = ds.o_lora_rank;
  auto* grouped16 = p.alloc<std::uint16_t>(std::int64_t{n} * groups * o_lora);
  if (L.wo_a.fp8() && p.step.wo_a_grouped) {
    wo_a_grouped_fp8(p, L, attn16, grouped16);
  } else if (!L.wo_a.fp8()) {
    p.batched.run({.m = o_lora, .n = n, .k = group_in, .transpose_a = true, .lda = group_in,
                   .ldb = std::int64_t{heads} * hd, .ldc = std::int64_t{groups} * o_lora,
                   .stride_a = std::int64_t{o_lora} * group_in, .stride_b = group_in, .stride_c = o_lora,
                   .batch = groups},
                  L.wo_a.ptr(), attn16, grouped16);
  } else {
    // FP8: a GEMM a group (o_lora on 128-row blocks), its input's columns
    // copied into a dense [n, group_in] and its output back into its columns.
    auto* group_x = p.alloc<std::uint16_t>(std::int64_t{n} * group_in);
    auto* group_y = p.alloc<std::uint16_t>(std::int64_t{n} * o_lora);
    const std::size_t row_in = static_cast<std::size_t>(group_in) * 2, row_out = static_cast<std::size_t>(o_lora) * 2;
    for (std::int32_t g = 0; g < groups; ++g) {
      SLUICE_CUDA_CHECK(cudaMemcpy2DAsync(group_x, row_in, attn16 + std::int64_t{g} * group_in,
                                          static_cast<std::size_t>(heads) * hd * 2, row_in, static_cast<std::size_t>(n),
                                          cudaMemcpyDeviceToDevice, s));
      p.fp8_linear(group_x, L.wo_a.rows_tensor(std::int64_t{g} * o_lora, o_lora), n, group_y, DType::bf16);
      SLUICE_CUDA_CHECK(cudaMemcpy2DAsync(grouped16 + std::int64_t{g} * o_lora,
                                          static_cast<std::size_t>(groups) * row_out, group_y, row_out, row_out,
                                          static_cast<std::size_t>(n), cudaMemcpyDeviceToDevice, s));
    }
  }
  p.linear(grouped16, L.wo_b, n, out);
}

// DeepseekV4Reference::run_moe: x [n, hidden] (bf16) -> out [n, hidden]. The
// shared expert as two dense GEMMs into out; the routed ones as grouped
// GEMMs over launch_moe_plan's slots (gate/up in f32, the clamped SwiGLU to
// bf16, down in f32), added with their routing weights.
void moe(const Pass& p, const Weights::Layer& L, const std::uint16_t* x16, float* out) {
  const DeepseekV4Config& ds = p.w.ds;
  const std::int32_t n = p.n, hidden = p.w.config.hidden_size, experts = ds.n_routed_experts;
  const std::int32_t k = ds.num_experts_per_tok, inter = ds.moe_intermediate_size;
  cudaStream_t s = p.s;
  const Launch launch{.stream = s, .programmatic = false};
  float* logits = p.alloc<float>(std::int64_t{n} * experts);
  p.linear(x16, L.router, n, logits);
  auto* ids = p.alloc<std::int32_t>(std::int64_t{n} * k);
  float* weights = p.alloc<float>(std::int64_t{n} * k);
  launch_v4_route({.logits = logits, .bias = L.hash ? nullptr : L.bias.get(),
                   .hash_table = L.hash ? L.tid2eid.get() : nullptr, .token_ids = p.step.ints[p.step.tokens],
                   .expert_ids = ids, .expert_weights = weights, .rows = n, .num_experts = experts, .k = k,
                   .scale = ds.routed_scaling_factor},
                  s);
  // The shared expert.
  float* shared_gate_up = p.alloc<float>(std::int64_t{n} * 2 * inter);
  p.linear(x16, L.shared_gate_up, n, shared_gate_up);
  auto* shared_act = p.alloc<std::uint16_t>(std::int64_t{n} * inter);
  launch_v4_clamped_swiglu({.in = shared_gate_up, .in_dt = kF32Dt, .out = shared_act, .out_dt = kBf16Dt, .rows = n,
                            .inter = inter, .limit = ds.swiglu_limit},
                           s);
  p.linear(shared_act, L.shared_down, n, out);
  // The routed experts: launch_moe_plan's slots, gate/up, the clamped SwiGLU, down, the weighted sum.
  const std::int32_t pairs = n * k;
  const bool wgmma = L.experts_gate_up.fp8() && p.w.options.moe_expert_gemm == MoeExpertGemm::fp8_wgmma;
  const std::int32_t tile_rows =
      wgmma ? grouped_gemm_fp8_tile_rows(pairs, experts, !moe_fp8_x_by_slot()) : grouped_gemm_tile_rows(pairs, experts);
  const std::int32_t max_tiles = moe_max_tiles(pairs, experts, tile_rows);
  auto* expert_offsets = p.alloc<std::int32_t>(experts + 1);
  auto* slot_of_pair = p.alloc<std::int32_t>(pairs);
  auto* row_of_slot = p.alloc<std::int32_t>(pairs);
  auto* tile_expert = p.alloc<std::int32_t>(max_tiles);
  auto* tile_first_slot = p.alloc<std::int32_t>(max_tiles);
  // The FP8 grouped kernel's order (tile pairs under weight multicast); the mma.sync kernels' by expert.
  launch_moe_plan({.expert_ids = ids, .num_pairs = pairs, .k = k, .num_experts = experts, .tile_rows = tile_rows,
                   .max_tiles = max_tiles,
                   .tile_order = wgmma ? grouped_gemm_fp8_tile_order(tile_rows) : MoeTileOrder::by_expert,
                   .expert_offsets = expert_offsets, .slot_of_pair = slot_of_pair, .row_of_slot = row_of_slot,
                   .tile_expert = tile_expert, .tile_first_slot = tile_first_slot},
                  launch);
  if (wgmma) {
    // FP8 tensor cores (MoeExpertGemm::fp8_wgmma): activations in e4m3 per
    // 1x128 block, outputs bf16: gate/up [pairs, 2 * inter] (store epilogue:
    // V4's SwiGLU is clamped), then down over the quantized activations.
    // x in slot order (each token's row written to its k slots: gate/up
    // reads consecutive rows, moe.h's set_moe_fp8_x_by_slot), or once a token.
    const std::int64_t kb = Matrix::kFp8Block;
    const bool by_slot = moe_fp8_x_by_slot();
    const std::int64_t x_q_rows = by_slot ? pairs : n;
    auto* x_q = p.alloc<std::uint8_t>(x_q_rows * hidden);
    float* x_scales = p.alloc<float>(x_q_rows * (hidden / kb));
    launch_quantize_fp8_rows({.x = x16, .rows = n, .k = hidden, .q = x_q, .scales = x_scales,
                              .slot_of_pair = by_slot ? slot_of_pair : nullptr, .copies = k},
                             launch);
    const auto fp8_gemm = [&](const Matrix& w, const void* a, const float* a_scales, std::int64_t a_rows,
                              const std::int32_t* rows_of_slot, std::int64_t n_out, std::int64_t k_in, void* y_out) {
      launch_grouped_gemm_fp8({.a = a, .a_scales = a_scales, .a_scale_stride = a_rows, .row_of_slot = rows_of_slot,
                               .w = w.ptr(), .w_rows = w.rows, .w_scales = w.scales.get(),
                               .w_scale_row_stride = w.scale_row_stride, .tile_expert = tile_expert,
                               .tile_first_slot = tile_first_slot, .expert_offsets = expert_offsets,
                               .max_tiles = max_tiles, .tile_rows = tile_rows, .n = n_out, .k = k_in,
                               .epilogue = GroupedEpilogue::store, .out = y_out},
                              launch);
    };
    auto* gate_up16 = p.alloc<std::uint16_t>(std::int64_t{pairs} * 2 * inter);
    fp8_gemm(L.experts_gate_up, x_q, x_scales, x_q_rows, by_slot ? nullptr : row_of_slot, 2 * inter, hidden,
             gate_up16);
    auto* act = p.alloc<std::uint16_t>(std::int64_t{pairs} * inter);
    launch_v4_clamped_swiglu({.in = gate_up16, .in_dt = kBf16Dt, .out = act, .out_dt = kBf16Dt, .rows = pairs,
                              .inter = inter, .limit = ds.swiglu_limit},
                             s);
    auto* act_q = p.alloc<std::uint8_t>(std::int64_t{pairs} * inter);
    float* act_scales = p.alloc<float>(std::int64_t{pairs} * (inter / kb));
    launch_quantize_fp8_rows({.x = act, .rows = pairs, .k = inter, .q = act_q, .scales = act_scales}, launch);
    auto* y16 = p.alloc<std::uint16_t>(std::int64_t{pairs} * hidden);  // by slot
    fp8_gemm(L.experts_down, act_q, act_scales, pairs, nullptr, hidden, inter, y16);
    launch_v4_moe_combine({.y = y16, .y_dt = kBf16Dt, .slot_of_pair = slot_of_pair, .weights = weights, .out = out,
                           .rows = n, .k = k, .hidden = hidden},
                          s);
    return;
  }
  // mma.sync (bf16 weights, or FP8 dequantized in registers), outputs f32.
  const bool fp8 = L.experts_gate_up.fp8();
  const GroupedGemmArgs tiles{.w_fp8 = fp8, .tile_expert = tile_expert, .tile_first_slot = tile_first_slot,
                              .expert_offsets = expert_offsets, .max_tiles = max_tiles, .tile_rows = tile_rows};
  float* gate_up = p.alloc<float>(std::int64_t{pairs} * 2 * inter);
  GroupedGemmArgs up = tiles;
  up.x = x16;
  up.row_of_slot = row_of_slot;
  up.w = L.experts_gate_up.ptr();
  up.w_scales = fp8 ? L.experts_gate_up.scales.get() : nullptr;
  up.w_scale_row_stride = L.experts_gate_up.scale_row_stride;
  up.n = 2 * inter;
  up.k = hidden;
  up.out = gate_up;
  up.out_dt = kF32Dt;
  launch_grouped_gemm(up, launch);
  auto* act = p.alloc<std::uint16_t>(std::int64_t{pairs} * inter);
  launch_v4_clamped_swiglu({.in = gate_up, .in_dt = kF32Dt, .out = act, .out_dt = kBf16Dt, .rows = pairs,
                            .inter = inter, .limit = ds.swiglu_limit},
                           s);
  float* y = p.alloc<float>(std::int64_t{pairs} * hidden);  // by slot
  GroupedGemmArgs down = tiles;
  down.x = act;
  down.w = L.experts_down.ptr();
  down.w_scales = fp8 ? L.experts_down.scales.get() : nullptr;
  down.w_scale_row_stride = L.experts_down.scale_row_stride;
  down.n = hidden;
  down.k = inter;
  down.out = y;
  down.out_dt = kF32Dt;
  launch_grouped_gemm(down, launch);
  launch_v4_moe_combine({.y = y, .y_dt = kF32Dt, .slot_of_pair = slot_of_pair, .weights = weights, .out = out,
                         .rows = n, .k = k, .hidden = hidden},
                        s);
}

}  // namespace

Result<const float*> DeepseekV4DeviceForward::run_step(const StepLayout& layout, const V4PagedBlocks& blocks,
                                                       cudaStream_t s) const {
  const Weights& w = *w_;
  const ModelConfig& cfg = w.config;
  const DeepseekV4Config& ds = w.ds;
  if (blocks.block_size != w.layout->block_size_tokens() || blocks.floats_per_block < w.layout->floats_per_block())
    return Error{"deepseek_v4 on CUDA: the blocks do not match the KV layout", ErrorCode::kInvalidArgument};
  const std::int32_t n = layout.num_rows(), hidden = cfg.hidden_size, hc = ds.hc_mult, vocab = cfg.vocab_size;
  if (n == 0) return static_cast<const float*>(nullptr);
  for (TokenId t : layout.token_ids)
    if (t < 0 || t >= vocab)
      return Error{fmt::format("deepseek_v4: token id {} is outside the vocabulary of {}", t, vocab)};
  for (std::size_t q = 0; q < layout.sequences.size(); ++q) {
    const std::int64_t last = layout.sequences[q].num_computed_tokens + layout.sequences[q].num_rows;
    if (last > static_cast<std::int64_t>(layout.sequences[q].block_table.size()) * blocks.block_size)
      return Error{"deepseek_v4 on CUDA: a sequence's block table is shorter than its tokens",
                   ErrorCode::kInvalidArgument};
  }
  for (std::int32_t r : layout.sample_rows)
    if (r < 0 || r >= n) return Error{"deepseek_v4: a sample row is outside the step", ErrorCode::kInvalidArgument};

  // The step's plans, made on the host once for every layer, and their one upload.
  Runtime& rt = *rt_;
  rt.bind(s, w.options.fp8_dense_gemm);
  rt.scratch.reset();
  Step step;
  step.t = DeepseekV4StepTables::make(layout);
  std::vector<std::int32_t> row_begin, row_len;
  for (std::int32_t sq : step.t.row_sequence) {
    row_begin.push_back(step.t.sequence_table_begin[static_cast<std::size_t>(sq)]);
    row_len.push_back(step.t.sequence_table_len[static_cast<std::size_t>(sq)]);
  }
  step.block_ids = step.ints.add(step.t.block_ids);
  step.tokens = step.ints.add(std::vector<std::int32_t>(layout.token_ids.begin(), layout.token_ids.end()));
  step.positions = step.ints.add(step.t.positions);
  step.row_table_begin = step.ints.add(row_begin);
  step.row_table_len = step.ints.add(row_len);
  step.sequence_table_begin = step.ints.add(step.t.sequence_table_begin);
  step.sequence_table_len = step.ints.add(step.t.sequence_table_len);
  step.sample_rows = step.ints.add(layout.sample_rows);
  step.row_sequence = step.ints.add(step.t.row_sequence);
  step.plan_window_stores(w.layout->window_slots(), blocks.block_size);
  for (const Weights::Layer& L : w.layers) {
    step.plan_key_pool(L.compressor ? static_cast<std::int32_t>(L.compressor->region.rate) : 0, ds.sliding_window);
    if (L.compressor) {
      const DeepseekV4PoolRegion& r = L.compressor->region;
      step.plan_compressor(static_cast<std::int32_t>(r.rate), r.overlapping(), blocks.block_size);
      if (!L.index_compressor) {
        std::int32_t most = 0;
        for (std::int32_t pos : step.t.positions) most = std::max(most, (pos + 1) / static_cast<std::int32_t>(r.rate));
        step.most_entries[static_cast<std::int32_t>(r.rate)] = most;
      }
    }
    if (L.index_compressor) {
      const DeepseekV4PoolRegion& r = L.index_compressor->region;
      step.plan_compressor(static_cast<std::int32_t>(r.rate), r.overlapping(), blocks.block_size);
      step.plan_indexer(static_cast<std::int32_t>(r.rate));
    }
  }
  if (wo_a_takes_grouped_gemm(w, n)) {
    std::vector<std::int32_t> group_of_pair(static_cast<std::size_t>(n) * ds.o_groups);
    for (std::size_t i = 0; i < group_of_pair.size(); ++i) group_of_pair[i] = static_cast<std::int32_t>(i % ds.o_groups);
    step.wo_a_grouped = true;
    step.wo_a_group_of_pair = step.ints.add(group_of_pair);
  }
  step.ints.upload(rt.scratch, rt.staging, s);

  const Pass pass{.w = w, .step = step, .blocks = blocks, .scratch = rt.scratch, .gemm = *rt.gemm,
                  .batched = *rt.batched, .fp8 = *rt.fp8, .fp8_scratch = *rt.fp8_scratch, .s = s, .n = n};
  // Every stream starts as the token's embedding.
  float* streams = pass.alloc<float>(std::int64_t{n} * hc * hidden);
  launch_v4_embed_streams(w.embed.get(), step.ints[step.tokens], n, hc, hidden, streams, s);
  float* x = pass.alloc<float>(std::int64_t{n} * hidden);
  float* y = pass.alloc<float>(std::int64_t{n} * hidden);
  float* post = pass.alloc<float>(std::int64_t{n} * hc);
  float* comb = pass.alloc<float>(std::int64_t{n} * hc * hc);
  // hc_pre's split dot products (null where the width does not split: a block a row).
  auto hc_pre_workspace = [&](std::int32_t rows) -> float* {
    const std::int64_t floats = v4_hc_pre_workspace_floats(rows, hc, hidden);
    return floats > 0 ? pass.alloc<float>(floats) : nullptr;
  };
  auto sub_layer = [&](const Weights::Hc& site, const DeviceArray<float>& norm, auto&& run) {
    const StepScratch::Mark mark = rt.scratch.mark();
    launch_v4_hc_pre({.streams = streams, .w = site.view(), .post = post, .comb = comb, .collapsed = x,
                      .out_dt = kF32Dt, .rows = n, .hc = hc, .hidden = hidden,
                      .sinkhorn_iters = ds.hc_sinkhorn_iters, .hc_eps = ds.hc_eps, .norm_eps = cfg.rms_norm_eps,
                      .workspace = hc_pre_workspace(n)},
                     s);
    launch_v4_rms_norm_f32(x, n, hidden, norm.get(), cfg.rms_norm_eps, s);
    run(pass.bf16(x, std::int64_t{n} * hidden));
    launch_v4_hc_post({.streams = streams, .y = y, .y_dt = kF32Dt, .post = post, .comb = comb, .rows = n, .hc = hc,
                       .hidden = hidden},
                      s);
    rt.scratch.rewind(mark);  // the sub-layer's temporaries; later launches on `s` reuse them in order
  };
  for (const Weights::Layer& L : w.layers) {
    sub_layer(L.attn_hc, L.attn_norm, [&](const std::uint16_t* x16) { attention(pass, L, x16, y); });
    sub_layer(L.ffn_hc, L.ffn_norm, [&](const std::uint16_t* x16) { moe(pass, L, x16, y); });
  }
  // The sampled rows: hc_head, the final norm, the LM head.
  const auto sampled = static_cast<std::int32_t>(layout.sample_rows.size());
  if (sampled == 0) return static_cast<const float*>(nullptr);
  float* picked = pass.alloc<float>(std::int64_t{sampled} * hc * hidden);
  float* last = pass.alloc<float>(std::int64_t{sampled} * hidden);
  launch_v4_copy_rows(streams, step.ints[step.sample_rows], picked, nullptr, sampled, hc * hidden, s);
  launch_v4_hc_pre({.streams = picked, .w = w.hc_head.view(), .collapsed = last, .out_dt = kF32Dt,
                    .rows = sampled, .hc = hc, .hidden = hidden, .hc_eps = ds.hc_eps, .norm_eps = cfg.rms_norm_eps,
                    .head = true, .workspace = hc_pre_workspace(sampled)},
                   s);
  launch_v4_rms_norm_f32(last, sampled, hidden, w.final_norm.get(), cfg.rms_norm_eps, s);
  float* logits = pass.alloc<float>(std::int64_t{sampled} * vocab);
  pass.linear(pass.bf16(last, std::int64_t{sampled} * hidden), w.head, sampled, logits);
  return static_cast<const float*>(logits);
}

Result<std::vector<float>> DeepseekV4DeviceForward::forward(const StepLayout& layout, const V4PagedBlocks& blocks,
                                                            cudaStream_t s) const {
  SLUICE_TRY_ASSIGN(logits, run_step(layout, blocks, s));
  std::vector<float> host(layout.sample_rows.size() * static_cast<std::size_t>(w_->config.vocab_size));
  if (logits != nullptr)
    SLUICE_CUDA_CHECK(cudaMemcpyAsync(host.data(), logits, host.size() * sizeof(float), cudaMemcpyDeviceToHost, s));
  SLUICE_CUDA_CHECK(cudaStreamSynchronize(s));
  return host;
}

Status DeepseekV4DeviceForward::enqueue_into(const StepLayout& layout, const V4PagedBlocks& blocks,
                                             float* device_logits, cudaStream_t s) const {
  SLUICE_TRY_ASSIGN(logits, run_step(layout, blocks, s));
  if (logits != nullptr)
    SLUICE_CUDA_CHECK(cudaMemcpyAsync(device_logits, logits,
                                      layout.sample_rows.size() * static_cast<std::size_t>(w_->config.vocab_size) *
                                          sizeof(float),
                                      cudaMemcpyDeviceToDevice, s));
  return Ok{};
}

Status DeepseekV4DeviceForward::forward_into(const StepLayout& layout, const V4PagedBlocks& blocks,
                                             float* device_logits, cudaStream_t s) const {
  SLUICE_TRY(enqueue_into(layout, blocks, device_logits, s));
  SLUICE_CUDA_CHECK(cudaStreamSynchronize(s));
  return Ok{};
}

}  // namespace sluice::cuda
