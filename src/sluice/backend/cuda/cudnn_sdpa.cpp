// cuDNN SDPA through the backend API (cudnn_sdpa.h says what and why).
#include "sluice/backend/cuda/cudnn_sdpa.h"

#include <cudnn_graph.h>
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/cudnn_plan_classes.h"
#include "sluice/backend/cuda/cudnn_split_plan.h"
#include "sluice/backend/cuda/kernels/kernels.h"
#include "sluice/common/setup_time.h"

namespace sluice::cuda {

// The library's entry points, looked up by name.
struct CudnnSdpa::Api {
  void* library = nullptr;
  decltype(&cudnnGetVersion) get_version = nullptr;
  decltype(&cudnnGetErrorString) error_string = nullptr;
  decltype(&cudnnGetLastErrorString) last_error = nullptr;
  decltype(&cudnnCreate) create = nullptr;
  decltype(&cudnnDestroy) destroy = nullptr;
  decltype(&cudnnSetStream) set_stream = nullptr;
  decltype(&cudnnBackendCreateDescriptor) create_descriptor = nullptr;
  decltype(&cudnnBackendDestroyDescriptor) destroy_descriptor = nullptr;
  decltype(&cudnnBackendSetAttribute) set_attribute = nullptr;
  decltype(&cudnnBackendGetAttribute) get_attribute = nullptr;
  decltype(&cudnnBackendFinalize) finalize = nullptr;
  decltype(&cudnnBackendExecute) execute = nullptr;

  ~Api() {
    if (library != nullptr) dlclose(library);
  }

  // "<what>: <status> (<cuDNN's last message>)".
  std::string describe(const char* what, cudnnStatus_t status) const {
    std::array<char, 1024> message{};
    last_error(message.data(), message.size());
    return fmt::format("cuDNN {}: {} ({})", what, error_string(status), message.data());
  }
};

// An execution plan and every descriptor its graph was made of (kept alive
// with it, as cudnn-frontend keeps its graph's).
struct CudnnSdpa::Plan {
  const Api* api = nullptr;
  std::vector<cudnnBackendDescriptor_t> owned;
  cudnnBackendDescriptor_t plan = nullptr;
  std::int64_t workspace_bytes = 0;
  std::int64_t config_index = -1;  // of the heuristics' list
  ~Plan() {
    for (auto it = owned.rbegin(); it != owned.rend(); ++it) api->destroy_descriptor(*it);
  }
};

namespace {

// Tensor uids of the variant pack.
enum Uid : std::int64_t {
  kQ = 1,
  kK = 2,
  kV = 3,
  kO = 4,
  kSeqLenQ = 5,
  kSeqLenKv = 6,
  kPageTable = 7,  // one table for K and V (the same blocks)
  kPageTableV = 8,
  kQOffsets = 9,
  kOOffsets = 10,
  kScale = 11,
  kNegativeInfinity = 12,
  kKOffsets = 13,
  kVOffsets = 14,
  kStats = 15,
  kFirstVirtual = 100,
};

// Builds one graph's descriptors; the first failure is kept and every later
// call is a no-op, so the graph reads as straight-line code.
class GraphBuilder {
 public:
  explicit GraphBuilder(const CudnnSdpa::Api& api, std::vector<cudnnBackendDescriptor_t>& owned)
      : api_(api), owned_(owned) {}

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  const std::vector<cudnnBackendDescriptor_t>& ops() const { return ops_; }

  cudnnBackendDescriptor_t create(cudnnBackendDescriptorType_t type, const char* what) {
    if (!ok()) return nullptr;
    cudnnBackendDescriptor_t d = nullptr;
    if (const cudnnStatus_t s = api_.create_descriptor(type, &d); s != CUDNN_STATUS_SUCCESS) {
      error_ = api_.describe(what, s);
      return nullptr;
    }
    owned_.push_back(d);
    return d;
  }
  void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
           std::int64_t count, const void* value, const char* what) {
    if (!ok()) return;
    if (const cudnnStatus_t s = api_.set_attribute(d, name, type, count, value); s != CUDNN_STATUS_SUCCESS)
      error_ = api_.describe(what, s);
  }
  void finalize(cudnnBackendDescriptor_t d, const char* what) {
    if (!ok()) return;
    if (const cudnnStatus_t s = api_.finalize(d); s != CUDNN_STATUS_SUCCESS) error_ = api_.describe(what, s);
  }

  struct TensorSpec {
    std::int64_t uid;
    cudnnDataType_t dtype;
    std::array<std::int64_t, 4> dims, strides;
    bool is_virtual = false, by_value = false;
    cudnnBackendDescriptor_t ragged_offsets = nullptr;
  };
  cudnnBackendDescriptor_t tensor(const TensorSpec& t) {
    cudnnBackendDescriptor_t d = create(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor");
    const std::int64_t alignment = 16;
    set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t.dtype, "tensor data type");
    set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, t.dims.data(), "tensor dims");
    set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, t.strides.data(), "tensor strides");
    set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &t.uid, "tensor uid");
    set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment, "tensor alignment");
    if (t.is_virtual) set(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &t.is_virtual, "tensor virtual");
    if (t.by_value) set(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &t.by_value, "tensor by value");
    if (t.ragged_offsets != nullptr)
      set(d, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t.ragged_offsets,
          "tensor ragged offsets");
    finalize(d, "tensor");
    return d;
  }
  // A virtual tensor with `like`'s dims and strides.
  cudnnBackendDescriptor_t virtual_tensor(cudnnDataType_t dtype, const std::array<std::int64_t, 4>& dims,
                                          const std::array<std::int64_t, 4>& strides) {
    return tensor({.uid = next_virtual_++, .dtype = dtype, .dims = dims, .strides = strides, .is_virtual = true});
  }

  // y = mode(x[, b[, t]]) computed in `precision`.
  void pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t precision, cudnnBackendDescriptor_t x,
                 cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y,
                 std::int64_t axis = -1) {
    cudnnBackendDescriptor_t pw = create(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise");
    set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
    set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &precision, "pointwise precision");
    if (mode == CUDNN_POINTWISE_GEN_INDEX) set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "axis");
    finalize(pw, "pointwise");
    cudnnBackendDescriptor_t op = create(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise op");
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw, "pointwise desc");
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "pointwise x");
    if (b != nullptr) set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, "pointwise b");
    if (t != nullptr) set(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t, "pointwise t");
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "pointwise y");
    finalize(op, "pointwise op");
    ops_.push_back(op);
  }

  // c = a b with the row count overridden by `m` and the inner or outer by `n` / `k`.
  void matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c,
              cudnnBackendDescriptor_t m, cudnnBackendDescriptor_t n, cudnnBackendDescriptor_t k, bool padded) {
    cudnnBackendDescriptor_t mm = create(CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul");
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute, "matmul compute type");
    const double zero = 0.0;
    if (padded) set(mm, CUDNN_ATTR_MATMUL_PADDING_VALUE, CUDNN_TYPE_DOUBLE, 1, &zero, "matmul padding");
    finalize(mm, "matmul");
    cudnnBackendDescriptor_t op = create(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul op");
    set(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, "matmul a");
    set(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, "matmul b");
    set(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, "matmul c");
    set(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm, "matmul desc");
    if (m != nullptr)
      set(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m, "matmul m");
    if (n != nullptr)
      set(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, "matmul n");
    if (k != nullptr)
      set(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &k, "matmul k");
    finalize(op, "matmul op");
    ops_.push_back(op);
  }

  void reduction(cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t r = create(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction");
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    set(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode, "reduction mode");
    set(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute, "reduction compute type");
    finalize(r, "reduction");
    cudnnBackendDescriptor_t op = create(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction op");
    set(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "reduction x");
    set(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "reduction y");
    set(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r, "reduction desc");
    finalize(op, "reduction op");
    ops_.push_back(op);
  }

  void paged_cache_load(cudnnBackendDescriptor_t container, cudnnBackendDescriptor_t page_table,
                        cudnnBackendDescriptor_t seq_len, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t op = create(CUDNN_BACKEND_OPERATION_PAGED_CACHE_LOAD_DESCRIPTOR, "paged cache load");
    set(op, CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_CONTAINER_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &container,
        "paged container");
    set(op, CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_PAGE_TABLE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &page_table,
        "paged page table");
    set(op, CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_SEQUENCE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &seq_len,
        "paged seq len");
    set(op, CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "paged y");
    finalize(op, "paged cache load");
    ops_.push_back(op);
  }

 private:
  const CudnnSdpa::Api& api_;
  std::vector<cudnnBackendDescriptor_t>& owned_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  std::string error_;
  std::int64_t next_virtual_ = kFirstVirtual;
};

// cudnnBackendAttributeName_t values cuDNN 9 marks deprecated but still
// reads (cudnn-frontend sets them): the handle of the graph and the plan.
constexpr auto kOperationGraphHandle = static_cast<cudnnBackendAttributeName_t>(800);
constexpr auto kExecutionPlanHandle = static_cast<cudnnBackendAttributeName_t>(400);

}  // namespace

std::string cudnn_sdpa_unsupported(std::int32_t num_q_heads, std::int32_t num_kv_heads, std::int32_t head_dim_qk,
                                   std::int32_t head_dim_v, std::int32_t block_size) {
  if (num_kv_heads <= 0 || num_q_heads % num_kv_heads != 0)
    return fmt::format("{} query heads over {} kv heads", num_q_heads, num_kv_heads);
  const bool dims_ok = (head_dim_qk == head_dim_v && head_dim_qk <= 128 && head_dim_qk % 16 == 0) ||
                       (head_dim_qk == 192 && head_dim_v == 128);
  if (!dims_ok) return fmt::format("head dims {}/{} (cuDNN: equal and <= 128, or 192/128)", head_dim_qk, head_dim_v);
  if (block_size <= 0 || !std::has_single_bit(static_cast<unsigned>(block_size)))
    return fmt::format("KV block size {} (cuDNN's page size is a power of two)", block_size);
  return {};
}

Result<std::unique_ptr<CudnnSdpa>> CudnnSdpa::open(cudaStream_t stream, bool background_plans) {
  auto api = std::make_unique<Api>();
  api->library = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
  if (api->library == nullptr) return Error{fmt::format("dlopen libcudnn.so.9: {}", dlerror())};
  bool missing = false;
  std::string missing_names;
  auto load = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(api->library, name));
    if (fn == nullptr) {
      missing = true;
      missing_names += std::string(" ") + name;
    }
  };
  load(api->get_version, "cudnnGetVersion");
  load(api->error_string, "cudnnGetErrorString");
  load(api->last_error, "cudnnGetLastErrorString");
  load(api->create, "cudnnCreate");
  load(api->destroy, "cudnnDestroy");
  load(api->set_stream, "cudnnSetStream");
  load(api->create_descriptor, "cudnnBackendCreateDescriptor");
  load(api->destroy_descriptor, "cudnnBackendDestroyDescriptor");
  load(api->set_attribute, "cudnnBackendSetAttribute");
  load(api->get_attribute, "cudnnBackendGetAttribute");
  load(api->finalize, "cudnnBackendFinalize");
  load(api->execute, "cudnnBackendExecute");
  if (missing) return Error{"libcudnn.so.9 lacks" + missing_names};
  // Paged K/V with ragged Q needs 9.7; we ask for what was measured: 9.14+.
  if (api->get_version() < 91400)
    return Error{fmt::format("cuDNN {} is older than 9.14 (paged, ragged SDPA)", api->get_version())};
  cudnnHandle_t handle = nullptr;
  if (const cudnnStatus_t s = api->create(&handle); s != CUDNN_STATUS_SUCCESS)
    return Error{api->describe("create", s)};
  if (const cudnnStatus_t s = api->set_stream(handle, stream); s != CUDNN_STATUS_SUCCESS) {
    api->destroy(handle);
    return Error{api->describe("set stream", s)};
  }
  cudnnHandle_t build_handle = nullptr;
  if (background_plans) {
    if (const cudnnStatus_t s = api->create(&build_handle); s != CUDNN_STATUS_SUCCESS) {
      api->destroy(handle);
      return Error{api->describe("create (plan builder)", s)};
    }
  }
  return std::unique_ptr<CudnnSdpa>(new CudnnSdpa(std::move(api), handle, build_handle, stream));
}

CudnnSdpa::CudnnSdpa(std::unique_ptr<Api> api, void* handle, void* build_handle, cudaStream_t stream)
    : api_(std::move(api)), handle_(handle), stream_(stream), build_handle_(build_handle),
      negative_infinity_(-std::numeric_limits<float>::infinity()) {
  if (build_handle_ != nullptr) builder_ = std::thread([this] { build_queued_plans(); });
}

CudnnSdpa::~CudnnSdpa() {
  if (builder_.joinable()) {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    builder_.join();
  }
  cudaStreamSynchronize(stream_);
  plans_.clear();
  built_.clear();
  api_->destroy(static_cast<cudnnHandle_t>(handle_));
  if (build_handle_ != nullptr) api_->destroy(static_cast<cudnnHandle_t>(build_handle_));
}

std::int64_t CudnnSdpa::version() const { return static_cast<std::int64_t>(api_->get_version()); }

std::int64_t CudnnSdpa::add_section(std::int64_t count) {
  const std::int64_t at = static_cast<std::int64_t>(host_tensors_.size());
  host_tensors_.resize(static_cast<std::size_t>(at + (count + 3) / 4 * 4), 0);
  return at;
}

CudnnSdpa::Call CudnnSdpa::add_call(std::span<const Entry> entries, bool paged, bool causal, bool stats) {
  Call call{.paged = paged, .causal = causal, .stats = stats};
  const auto n = static_cast<std::int64_t>(entries.size());
  std::int64_t max_rows = 0, max_keys = 0, end_q = 0, end_out = 0;
  for (const Entry& e : entries) {
    max_rows = std::max<std::int64_t>(max_rows, e.num_rows);
    max_keys = std::max<std::int64_t>(max_keys, e.key_end - e.key_begin);
    end_q = std::max<std::int64_t>(end_q, e.q_row + e.num_rows);
    end_out = std::max<std::int64_t>(end_out, e.out_row + e.num_rows);
  }
  // The batch padded with empty entries, rows and keys rounded up: the plan's class.
  const SdpaCallClass shape_class = sdpa_call_class(paged, causal, stats, n, max_rows, max_keys, shape_.block_size);
  call.b = shape_class.b;
  call.sq = shape_class.sq;
  call.skv = shape_class.skv;
  const std::int64_t bs = shape_.block_size;
  call.table = paged ? call.skv / bs : 0;
  call.seq_len_q = add_section(call.b);
  call.seq_len_kv = add_section(call.b);
  call.q_offsets = add_section(call.b + 1);
  call.out_offsets = add_section(call.b + 1);
  call.kv_offsets = add_section(call.b + 1);
  call.page_table = paged ? add_section(call.b * call.table) : 0;
  std::int32_t* t = host_tensors_.data();
  for (std::int64_t i = 0; i <= call.b; ++i) {
    // Past the last entry (and for the padding): offsets at the end, lengths 0.
    const bool real = i < n;
    const Entry e = real ? entries[static_cast<std::size_t>(i)] : Entry{};
    const std::int64_t q_row = real ? e.q_row : end_q, out_row = real ? e.out_row : end_out;
    t[call.q_offsets + i] = static_cast<std::int32_t>(q_row * shape_.q_row_elems);
    t[call.out_offsets + i] = static_cast<std::int32_t>(out_row * shape_.out_row_elems);
    t[call.kv_offsets + i] = static_cast<std::int32_t>(q_row * shape_.kv_row_elems);
    if (i == call.b) break;
    t[call.seq_len_q + i] = e.num_rows;
    t[call.seq_len_kv + i] = e.key_end - e.key_begin;
    if (!paged || !real) continue;
    const std::int64_t first = e.key_begin / bs, used = (e.key_end - e.key_begin + bs - 1) / bs;
    std::copy_n(e.block_table.begin() + first, used, t + call.page_table + i * call.table);
  }
  return call;
}

Result<bool> CudnnSdpa::prepare(std::span<const SdpaSequence> sequences, const SdpaStepShape& shape) {
  prepared_ = false;
  if (sequences.empty()) return Error{"cuDNN SDPA: no sequences"};
  std::vector<SdpaShape> shapes;
  for (const SdpaSequence& s : sequences) {
    if (s.num_rows <= 0 || s.num_rows > s.num_keys) return Error{"cuDNN SDPA: a sequence with more rows than keys"};
    if (static_cast<std::int64_t>(s.block_table.size()) * shape.block_size < s.num_keys)
      return Error{"cuDNN SDPA: a block table shorter than its keys"};
    shapes.push_back({.num_rows = s.num_rows, .num_keys = s.num_keys});
  }
  // Ragged offsets are int32 element offsets.
  const SdpaSequence& last = sequences.back();
  const std::int64_t end_row = last.row_begin + last.num_rows;
  if (end_row * std::max({shape.q_row_elems, shape.out_row_elems, shape.kv_row_elems}) >
      std::numeric_limits<std::int32_t>::max())
    return Error{"cuDNN SDPA: a step of more than 2^31 q elements"};
  SdpaRouting routing = route_sdpa_step(shapes, shape.num_q_heads, shape.block_size, shape.num_sms);
  if (routing.route == SdpaRoute::decline) {
    if (shape.may_decline) return false;
    routing.route = SdpaRoute::whole;
  }
  shape_ = shape;
  host_tensors_.clear();
  split_ = routing.route == SdpaRoute::split;
  if (!split_) {
    // Every key of every sequence is a row of this step (prompts from position
    // 0): K and V are read from the step's rows, packed, not from the pages.
    const bool fresh = std::all_of(sequences.begin(), sequences.end(),
                                   [](const SdpaSequence& s) { return s.num_keys == s.num_rows; });
    std::vector<Entry> entries;
    for (const SdpaSequence& s : sequences)
      entries.push_back({.q_row = s.row_begin, .out_row = s.row_begin, .num_rows = s.num_rows, .key_begin = 0,
                         .key_end = s.num_keys, .block_table = s.block_table});
    whole_ = add_call(entries, /*paged=*/!fresh, /*causal=*/true, /*stats=*/false);
  } else {
    // Pieces: every row of the sequence over whole blocks of its prefix, into
    // partial_out_ one piece after another. Tails: the rest, causal, into out.
    std::vector<Entry> pieces, tails;
    std::vector<std::int32_t> piece_row_begin, first_piece(sequences.size(), 0), num_pieces(sequences.size(), 0);
    std::int32_t partial_rows = 0;
    for (const SdpaKeyPiece& p : routing.pieces) {
      const SdpaSequence& s = sequences[static_cast<std::size_t>(p.sequence)];
      if (num_pieces[static_cast<std::size_t>(p.sequence)]++ == 0)
        first_piece[static_cast<std::size_t>(p.sequence)] = static_cast<std::int32_t>(pieces.size());
      pieces.push_back({.q_row = s.row_begin, .out_row = partial_rows, .num_rows = s.num_rows,
                        .key_begin = p.key_begin, .key_end = p.key_end, .block_table = s.block_table});
      piece_row_begin.push_back(partial_rows);
      partial_rows += s.num_rows;
    }
    for (std::size_t i = 0; i < sequences.size(); ++i) {
      const SdpaSequence& s = sequences[i];
      tails.push_back({.q_row = s.row_begin, .out_row = s.row_begin, .num_rows = s.num_rows,
                       .key_begin = routing.tail_begin[i], .key_end = s.num_keys, .block_table = s.block_table});
    }
    pieces_ = add_call(pieces, /*paged=*/true, /*causal=*/false, /*stats=*/true);
    tails_ = add_call(tails, /*paged=*/true, /*causal=*/true, /*stats=*/true);
    // The combine's rows: each row of a split sequence.
    combine_rows_ = 0;
    for (std::size_t i = 0; i < sequences.size(); ++i)
      if (num_pieces[i] > 0) combine_rows_ += sequences[i].num_rows;
    combine_rows_at_ = add_section(5 * combine_rows_);
    piece_row_begin_at_ = add_section(static_cast<std::int64_t>(piece_row_begin.size()));
    std::int32_t* rows = host_tensors_.data() + combine_rows_at_;
    for (std::size_t i = 0; i < sequences.size(); ++i) {
      if (num_pieces[i] == 0) continue;
      for (std::int32_t r = 0; r < sequences[i].num_rows; ++r) {
        const std::array<std::int32_t, 5> row = {sequences[i].row_begin + r, static_cast<std::int32_t>(i), r,
                                                 first_piece[i], num_pieces[i]};
        rows = std::copy(row.begin(), row.end(), rows);
      }
    }
    std::copy(piece_row_begin.begin(), piece_row_begin.end(), host_tensors_.data() + piece_row_begin_at_);
    partial_out_.ensure(static_cast<std::int64_t>(partial_rows) * shape.out_row_elems * 2, stream_);
    const std::int64_t hq = shape.num_q_heads;
    piece_lse_.ensure(pieces_.b * hq * pieces_.sq * static_cast<std::int64_t>(sizeof(float)), stream_);
    tail_lse_.ensure(tails_.b * hq * tails_.sq * static_cast<std::int64_t>(sizeof(float)), stream_);
  }
  // Every plan of the step built: else decline it (the builder thread is on it).
  bool ready = true;
  const std::array<const Call*, 2> calls = {split_ ? &pieces_ : &whole_, split_ ? &tails_ : nullptr};
  for (const Call* call : calls) {
    if (call == nullptr) continue;
    SLUICE_TRY_ASSIGN(plan, plan_for(spec_of(*call)));
    ready = ready && plan != nullptr;
  }
  if (!ready) return false;
  const auto bytes = static_cast<std::int64_t>(host_tensors_.size() * sizeof(std::int32_t));
  step_tensors_.ensure(bytes, stream_);
  // Pageable source: the copy is staged before this returns, so the host
  // vector may change at the next step while the device still reads its copy.
  SLUICE_CUDA_CHECK(cudaMemcpyAsync(step_tensors_.data(), host_tensors_.data(), static_cast<std::size_t>(bytes),
                                    cudaMemcpyHostToDevice, stream_));
  prepared_ = true;
  return true;
}

Result<const CudnnSdpa::Plan*> CudnnSdpa::plan_for(const GraphSpec& spec, bool may_defer) {
  const Key key = spec.key();
  if (auto it = plans_.find(key); it != plans_.end()) return it->second.get();
  // A shape class cuDNN refused is not asked again (a plan can take seconds).
  if (auto it = failed_.find(key); it != failed_.end()) return Error{it->second};
  if (build_handle_ != nullptr) {
    std::unique_lock lock(mutex_);
    // A call that cannot wait for the builder (may_defer false) waits for the
    // plan it is building now; one still queued is taken off and built here.
    if (!may_defer) {
      progress_.wait(lock, [&] { return !building_ || building_key_ != key; });
      if (auto it = std::find_if(queue_.begin(), queue_.end(), [&](const GraphSpec& g) { return g.key() == key; });
          it != queue_.end())
        queue_.erase(it);
    }
    if (auto it = built_.find(key); it != built_.end()) {
      const Plan* plan = it->second.get();
      plans_.emplace(key, std::move(it->second));
      built_.erase(it);
      return plan;
    }
    if (auto it = refused_.find(key); it != refused_.end()) {
      failed_.emplace(key, it->second);
      return Error{it->second};
    }
    if (may_defer) {
      if (asked_.insert(key).second) {
        queue_.push_back(spec);
        wake_.notify_one();
      }
      return nullptr;
    }
    asked_.insert(key);  // built below: the builder must not take it again
  }
  auto made = build_plan(spec, handle_);
  if (!made.ok()) {
    failed_.emplace(key, made.error_message());
    return Error{made.error_message()};
  }
  const Plan* plan = made->get();
  plans_.emplace(key, std::move(made).value());
  return plan;
}

void CudnnSdpa::build_queued_plans() {
  std::unique_lock lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    const GraphSpec spec = queue_.front();
    queue_.pop_front();
    building_ = true;
    building_key_ = spec.key();
    lock.unlock();
    auto made = build_plan(spec, build_handle_);
    lock.lock();
    building_ = false;
    if (made.ok())
      built_.emplace(spec.key(), std::move(made).value());
    else
      refused_.emplace(spec.key(), made.error_message());
    progress_.notify_all();
    if (queue_.empty()) idle_.notify_all();
  }
}

void CudnnSdpa::wait_for_plans() {
  if (build_handle_ == nullptr) return;
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [&] { return queue_.empty() && !building_; });
}

Result<SdpaServingPlans> CudnnSdpa::build_plans_before_serving(const SdpaStepShape& shape,
                                                              const SdpaServingBounds& bounds, double max_wait_s) {
  if (build_handle_ == nullptr)
    return Error{"cuDNN SDPA: plans before serving need the builder thread (open()'s background_plans)"};
  shape_ = shape;
  std::vector<GraphSpec> specs;
  for (const SdpaCallClass& c : sdpa_serving_classes(bounds, shape.block_size, shape.num_sms))
    specs.push_back(spec_of({.b = c.b, .sq = c.sq, .skv = c.skv, .table = c.paged ? c.skv / shape.block_size : 0,
                             .paged = c.paged, .causal = c.causal, .stats = c.stats}));
  // The likeliest first: few sequences a step (a split's pieces are several a
  // sequence), then the longest chunks.
  auto rank = [](const GraphSpec& g) { return std::pair{g.stats != 0 && g.causal == 0 ? g.b / 4 : g.b, -g.sq}; };
  std::stable_sort(specs.begin(), specs.end(), [&](const GraphSpec& a, const GraphSpec& b) { return rank(a) < rank(b); });
  return queue_and_wait(specs, max_wait_s);
}

Result<SdpaServingPlans> CudnnSdpa::queue_and_wait(std::span<const GraphSpec> specs, double max_wait_s) {
  const auto start = std::chrono::steady_clock::now();
  // The builder thread takes them in order; plan_for hands each over at its
  // first step. What is not built when the time is up is built while serving
  // (a step that needs it declines meanwhile).
  std::unique_lock lock(mutex_);
  for (const GraphSpec& spec : specs)
    if (!plans_.contains(spec.key()) && asked_.insert(spec.key()).second) queue_.push_back(spec);
  wake_.notify_one();
  idle_.wait_for(lock, std::chrono::duration<double>(max_wait_s), [&] { return queue_.empty() && !building_; });
  // Not run once here to load their kernels: a run over empty sequences (every
  // length 0) never returned on the H200 (S14-lead-2).
  SdpaServingPlans result{.num_classes = static_cast<std::int64_t>(specs.size()),
                          .num_left = static_cast<std::int64_t>(queue_.size()),
                          .build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
  for (const GraphSpec& spec : specs) {
    const Key key = spec.key();
    if (plans_.contains(key) || built_.contains(key)) ++result.num_built;
    if (auto it = refused_.find(key); it != refused_.end()) {
      if (result.first_refusal.empty()) result.first_refusal = it->second;
      ++result.num_refused;
    }
  }
  return result;
}

Result<SdpaServingPlans> CudnnSdpa::build_packed_plans_before_serving(std::span<const SdpaPacked> calls,
                                                                     double max_wait_s) {
  if (build_handle_ == nullptr)
    return Error{"cuDNN SDPA: plans before serving need the builder thread (open()'s background_plans)"};
  std::vector<GraphSpec> specs;
  std::set<Key> seen;
  for (const SdpaPacked& call : calls)
    if (const GraphSpec spec = packed_spec(call); seen.insert(spec.key()).second) specs.push_back(spec);
  return queue_and_wait(specs, max_wait_s);
}

Result<std::unique_ptr<CudnnSdpa::Plan>> CudnnSdpa::build_plan(const GraphSpec& sp, void* handle) {
  const auto start = std::chrono::steady_clock::now();
  auto plan = std::make_unique<Plan>();
  plan->api = api_.get();
  GraphBuilder g(*api_, plan->owned);
  const std::int64_t b = sp.b, hq = sp.hq, hk = sp.hk, sq = sp.sq, skv = sp.skv, dqk = sp.dqk, dv = sp.dv;
  const auto i32 = CUDNN_DATA_INT32, f32 = CUDNN_DATA_FLOAT, bf16 = CUDNN_DATA_BFLOAT16, boolean = CUDNN_DATA_BOOLEAN;
  const std::array<std::int64_t, 4> per_seq_dims{b, 1, 1, 1}, per_seq_strides{1, 1, 1, 1};
  const std::array<std::int64_t, 4> offsets_dims{b + 1, 1, 1, 1}, scalar{1, 1, 1, 1};

  auto seq_len_q = g.tensor({.uid = kSeqLenQ, .dtype = i32, .dims = per_seq_dims, .strides = per_seq_strides});
  auto seq_len_kv = g.tensor({.uid = kSeqLenKv, .dtype = i32, .dims = per_seq_dims, .strides = per_seq_strides});
  auto q_offsets = g.tensor({.uid = kQOffsets, .dtype = i32, .dims = offsets_dims, .strides = per_seq_strides});
  auto o_offsets = g.tensor({.uid = kOOffsets, .dtype = i32, .dims = offsets_dims, .strides = per_seq_strides});
  // Packed rows: [b, h, s, d] with the given row and head strides, each sequence at its ragged offset.
  auto q = g.tensor({.uid = kQ, .dtype = bf16, .dims = {b, hq, sq, dqk}, .strides = {sq * sp.q_row, sp.q_head, sp.q_row, 1},
                     .ragged_offsets = q_offsets});
  auto o = g.tensor({.uid = kO, .dtype = bf16, .dims = {b, hq, sq, dv}, .strides = {sq * sp.o_row, sp.o_head, sp.o_row, 1},
                     .ragged_offsets = o_offsets});
  auto scale = g.tensor({.uid = kScale, .dtype = f32, .dims = scalar, .strides = scalar, .by_value = true});
  auto minus_inf =
      g.tensor({.uid = kNegativeInfinity, .dtype = f32, .dims = scalar, .strides = scalar, .by_value = true});

  // K^T [b, hk, d, s_kv] and V [b, hk, s_kv, d]: out of the pages, or packed rows read in place.
  cudnnBackendDescriptor_t k_t = nullptr, v = nullptr, v_container = nullptr, page_table_v = nullptr;
  if (sp.paged) {
    const std::int64_t nb = sp.num_blocks, bs = sp.block_size, table = sp.table;
    // Our pages [block, token, kv head, dim] as cuDNN's container [block, kv head, token, dim].
    auto k_container = g.tensor({.uid = kK, .dtype = bf16, .dims = {nb, hk, bs, dqk},
                                 .strides = {bs * sp.k_row, sp.k_head, sp.k_row, 1}});
    v_container = g.tensor({.uid = kV, .dtype = bf16, .dims = {nb, hk, bs, dv},
                            .strides = {bs * sp.v_row, sp.v_head, sp.v_row, 1}});
    auto page_table_k =
        g.tensor({.uid = kPageTable, .dtype = i32, .dims = {b, 1, table, 1}, .strides = {table, table, 1, 1}});
    page_table_v =
        g.tensor({.uid = kPageTableV, .dtype = i32, .dims = {b, 1, table, 1}, .strides = {table, table, 1, 1}});
    k_t = g.virtual_tensor(bf16, {b, hk, dqk, skv}, {dqk * skv * hk, dqk * skv, 1, dqk});
    g.paged_cache_load(k_container, page_table_k, seq_len_kv, k_t);
  } else {
    auto k_offsets = g.tensor({.uid = kKOffsets, .dtype = i32, .dims = offsets_dims, .strides = per_seq_strides});
    auto v_offsets = g.tensor({.uid = kVOffsets, .dtype = i32, .dims = offsets_dims, .strides = per_seq_strides});
    k_t = g.tensor({.uid = kK, .dtype = bf16, .dims = {b, hk, dqk, skv}, .strides = {skv * sp.k_row, sp.k_head, 1, sp.k_row},
                    .ragged_offsets = k_offsets});
    v = g.tensor({.uid = kV, .dtype = bf16, .dims = {b, hk, skv, dv}, .strides = {skv * sp.v_row, sp.v_head, sp.v_row, 1},
                  .ragged_offsets = v_offsets});
  }

  const std::array<std::int64_t, 4> s_dims{b, hq, sq, skv}, s_strides{hq * sq * skv, sq * skv, skv, 1};
  const std::array<std::int64_t, 4> row_dims{b, hq, sq, 1}, row_strides{hq * sq, sq, 1, 1};
  auto scores = g.virtual_tensor(f32, s_dims, s_strides);
  g.matmul(q, k_t, scores, seq_len_q, seq_len_kv, nullptr, /*padded=*/true);
  auto scaled = g.virtual_tensor(f32, s_dims, s_strides);
  g.pointwise(CUDNN_POINTWISE_MUL, f32, scores, scale, nullptr, scaled);

  // Padding mask: row < seq_len_q and col < seq_len_kv.
  auto pad_row = g.virtual_tensor(i32, s_dims, s_strides);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, i32, scaled, nullptr, nullptr, pad_row, 2);
  auto pad_col = g.virtual_tensor(i32, s_dims, s_strides);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, i32, scaled, nullptr, nullptr, pad_col, 3);
  auto row_in = g.virtual_tensor(boolean, s_dims, s_strides);
  g.pointwise(CUDNN_POINTWISE_CMP_LT, boolean, pad_row, seq_len_q, nullptr, row_in);
  auto col_in = g.virtual_tensor(boolean, s_dims, s_strides);
  g.pointwise(CUDNN_POINTWISE_CMP_LT, boolean, pad_col, seq_len_kv, nullptr, col_in);
  auto inside = g.virtual_tensor(boolean, s_dims, s_strides);
  g.pointwise(CUDNN_POINTWISE_LOGICAL_AND, boolean, row_in, col_in, nullptr, inside);
  auto padded = g.virtual_tensor(f32, s_dims, s_strides);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, f32, scaled, minus_inf, inside, padded);

  // Bottom-right causal: keep col <= row + seq_len_kv - seq_len_q (a split
  // step's prefix pieces are seen whole by every row: padding only).
  cudnnBackendDescriptor_t masked = padded;
  if (sp.causal) {
    auto row = g.virtual_tensor(i32, s_dims, s_strides);
    g.pointwise(CUDNN_POINTWISE_GEN_INDEX, f32, padded, nullptr, nullptr, row, 2);
    auto col = g.virtual_tensor(i32, s_dims, s_strides);
    g.pointwise(CUDNN_POINTWISE_GEN_INDEX, f32, padded, nullptr, nullptr, col, 3);
    auto row_plus_kv = g.virtual_tensor(i32, s_dims, s_strides);
    g.pointwise(CUDNN_POINTWISE_ADD, i32, row, seq_len_kv, nullptr, row_plus_kv);
    auto diagonal = g.virtual_tensor(i32, s_dims, s_strides);
    g.pointwise(CUDNN_POINTWISE_SUB, i32, row_plus_kv, seq_len_q, nullptr, diagonal);
    auto causal = g.virtual_tensor(boolean, s_dims, s_strides);
    g.pointwise(CUDNN_POINTWISE_CMP_GE, boolean, diagonal, col, nullptr, causal);
    masked = g.virtual_tensor(f32, s_dims, s_strides);
    g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, f32, padded, minus_inf, causal, masked);
  }

  // Softmax, with the log-sum-exp branch cudnn-frontend keeps: an output
  // (f32 [b, hq, sq, 1], natural log) where a split step's combine needs it.
  auto row_max = g.virtual_tensor(f32, row_dims, row_strides);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, masked, row_max);
  auto shifted = g.virtual_tensor(f32, s_dims, s_strides);
  g.pointwise(CUDNN_POINTWISE_SUB, f32, masked, row_max, nullptr, shifted);
  auto exps = g.virtual_tensor(f32, s_dims, s_strides);
  g.pointwise(CUDNN_POINTWISE_EXP, f32, shifted, nullptr, nullptr, exps);
  auto row_sum = g.virtual_tensor(f32, row_dims, row_strides);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, exps, row_sum);
  auto log_sum = g.virtual_tensor(f32, row_dims, row_strides);
  g.pointwise(CUDNN_POINTWISE_LOG, f32, row_sum, nullptr, nullptr, log_sum);
  auto stats = sp.stats ? g.tensor({.uid = kStats, .dtype = f32, .dims = row_dims, .strides = row_strides})
                        : g.virtual_tensor(f32, row_dims, row_strides);
  g.pointwise(CUDNN_POINTWISE_ADD, f32, row_max, log_sum, nullptr, stats);
  auto probs = g.virtual_tensor(bf16, s_dims, s_strides);
  g.pointwise(CUDNN_POINTWISE_DIV, f32, exps, row_sum, nullptr, probs);

  if (sp.paged) {
    v = g.virtual_tensor(bf16, {b, hk, skv, dv}, {dv * skv * hk, dv * skv, dv, 1});
    g.paged_cache_load(v_container, page_table_v, seq_len_kv, v);
  }
  g.matmul(probs, v, o, seq_len_q, nullptr, seq_len_kv, /*padded=*/false);

  // The operation graph, the heuristics' engine configs, the first that makes a plan.
  cudnnBackendDescriptor_t graph = g.create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
  const std::vector<cudnnBackendDescriptor_t> ops = g.ops();
  g.set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<std::int64_t>(ops.size()),
        ops.data(), "graph ops");
  g.set(graph, kOperationGraphHandle, CUDNN_TYPE_HANDLE, 1, &handle, "graph handle");
  g.finalize(graph, "operation graph");
  cudnnBackendDescriptor_t heuristics = g.create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  g.set(heuristics, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph, "heur graph");
  g.set(heuristics, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heur mode");
  g.finalize(heuristics, "heuristics");
  if (!g.ok()) return Error{"cuDNN SDPA graph: " + g.error()};
  std::int64_t num_configs = 0;
  if (const cudnnStatus_t s = api_->get_attribute(heuristics, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &num_configs, nullptr);
      s != CUDNN_STATUS_SUCCESS)
    return Error{api_->describe("heuristic results", s)};
  if (num_configs == 0) return Error{"cuDNN SDPA: no engine for the graph (heuristics returned none)"};
  std::vector<cudnnBackendDescriptor_t> configs;
  for (std::int64_t i = 0; i < num_configs; ++i)
    configs.push_back(g.create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config"));
  if (!g.ok()) return Error{"cuDNN SDPA graph: " + g.error()};
  std::int64_t returned = 0;
  if (const cudnnStatus_t s = api_->get_attribute(heuristics, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, num_configs, &returned,
                                                  configs.data());
      s != CUDNN_STATUS_SUCCESS)
    return Error{api_->describe("heuristic results", s)};
  std::string tried;
  for (std::int64_t i = 0; i < returned && plan->plan == nullptr; ++i) {
    cudnnBackendDescriptor_t candidate = nullptr;
    if (api_->create_descriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &candidate) != CUDNN_STATUS_SUCCESS)
      continue;
    cudnnStatus_t s = api_->set_attribute(candidate, kExecutionPlanHandle, CUDNN_TYPE_HANDLE, 1, &handle);
    if (s == CUDNN_STATUS_SUCCESS)
      s = api_->set_attribute(candidate, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                              &configs[static_cast<std::size_t>(i)]);
    if (s == CUDNN_STATUS_SUCCESS) s = api_->finalize(candidate);
    if (s != CUDNN_STATUS_SUCCESS) {
      tried += fmt::format(" [config {}: {}]", i, api_->describe("plan", s));
      api_->destroy_descriptor(candidate);
      continue;
    }
    plan->owned.push_back(candidate);
    plan->plan = candidate;
    plan->config_index = i;
  }
  if (plan->plan == nullptr)
    return Error{fmt::format("cuDNN SDPA: none of {} engine configs made a plan:{}", returned, tried)};
  std::int64_t count = 0;
  if (const cudnnStatus_t s = api_->get_attribute(plan->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                  CUDNN_TYPE_INT64, 1, &count, &plan->workspace_bytes);
      s != CUDNN_STATUS_SUCCESS)
    return Error{api_->describe("plan workspace size", s)};
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (handle == handle_) add_setup_ms(ms);  // built on the step's path (not in the background)
  spdlog::info("cuDNN SDPA plan ({} K/V{}{}): {} sequences, rows <= {}, keys <= {}, {}/{} heads x {}/{}: {:.0f} ms{}, "
               "engine config {}, workspace {} bytes",
               sp.paged ? "paged" : "packed", sp.causal ? ", causal" : "", sp.stats ? ", stats" : "", sp.b, sp.sq,
               sp.skv, sp.hq, sp.hk, sp.dqk, sp.dv, ms, handle == handle_ ? "" : " (in the background)",
               plan->config_index, plan->workspace_bytes);
  return plan;
}

Status CudnnSdpa::execute(const Plan& plan, std::span<const std::int64_t> uids, std::span<void* const> pointers) {
  if (plan.workspace_bytes > 0) workspace_.ensure(plan.workspace_bytes, stream_);
  cudnnBackendDescriptor_t pack = nullptr;
  if (const cudnnStatus_t s = api_->create_descriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
      s != CUDNN_STATUS_SUCCESS)
    return Error{api_->describe("variant pack", s)};
  void* workspace = workspace_.data();
  cudnnStatus_t s = api_->set_attribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                        static_cast<std::int64_t>(uids.size()), uids.data());
  if (s == CUDNN_STATUS_SUCCESS)
    s = api_->set_attribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                            static_cast<std::int64_t>(pointers.size()), pointers.data());
  if (s == CUDNN_STATUS_SUCCESS)
    s = api_->set_attribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  if (s == CUDNN_STATUS_SUCCESS) s = api_->finalize(pack);
  if (s == CUDNN_STATUS_SUCCESS) s = api_->execute(static_cast<cudnnHandle_t>(handle_), plan.plan, pack);
  std::string error = s == CUDNN_STATUS_SUCCESS ? std::string() : api_->describe("execute", s);
  api_->destroy_descriptor(pack);
  if (!error.empty()) return Error{error};
  ++num_runs_;
  return Ok{};
}

CudnnSdpa::GraphSpec CudnnSdpa::spec_of(const Call& call) const {
  const SdpaStepShape& s = shape_;
  GraphSpec spec{.paged = call.paged ? 1 : 0,
                 .causal = call.causal ? 1 : 0,
                 .stats = call.stats ? 1 : 0,
                 .b = call.b,
                 .hq = s.num_q_heads,
                 .hk = s.num_kv_heads,
                 .sq = call.sq,
                 .skv = call.skv,
                 .dqk = s.head_dim_qk,
                 .dv = s.head_dim_v,
                 .q_row = s.q_row_elems,
                 .q_head = s.head_dim_qk,
                 .o_row = s.out_row_elems,
                 .o_head = s.head_dim_v,
                 .k_row = static_cast<std::int64_t>(s.num_kv_heads) * s.head_dim_qk,
                 .k_head = s.head_dim_qk,
                 .v_row = static_cast<std::int64_t>(s.num_kv_heads) * s.head_dim_v,
                 .v_head = s.head_dim_v};
  if (call.paged) {
    spec.block_size = s.block_size;
    spec.num_blocks = s.num_blocks;
    spec.table = call.table;
  }
  return spec;
}

Status CudnnSdpa::run_call(const Call& call, const SdpaLayer& l, void* out, void* stats) {
  auto* base = static_cast<std::int32_t*>(step_tensors_.data());
  std::vector<std::int64_t> uids = {kQ, kK, kV, kO, kSeqLenQ, kSeqLenKv, kQOffsets, kOOffsets, kScale,
                                    kNegativeInfinity};
  std::vector<void*> pointers = {const_cast<void*>(l.q), nullptr, nullptr, out, base + call.seq_len_q,
                                 base + call.seq_len_kv, base + call.q_offsets, base + call.out_offsets,
                                 &scale_, &negative_infinity_};
  if (call.paged) {
    pointers[1] = const_cast<void*>(l.k_cache);
    pointers[2] = const_cast<void*>(l.v_cache);
    uids.insert(uids.end(), {kPageTable, kPageTableV});
    pointers.insert(pointers.end(), {base + call.page_table, base + call.page_table});
  } else {
    // Prompts from position 0: K and V straight from the step's rows.
    if (l.k == nullptr || l.v == nullptr)
      return Error{"cuDNN SDPA: a step of prompts from position 0 needs the step's K and V rows"};
    pointers[1] = const_cast<void*>(l.k);
    pointers[2] = const_cast<void*>(l.v);
    uids.insert(uids.end(), {kKOffsets, kVOffsets});
    pointers.insert(pointers.end(), {base + call.kv_offsets, base + call.kv_offsets});
  }
  if (call.stats) {
    uids.push_back(kStats);
    pointers.push_back(stats);
  }
  SLUICE_TRY_ASSIGN(plan, plan_for(spec_of(call)));
  if (plan == nullptr) return Error{"cuDNN SDPA: run() of a step whose plan is not built (prepare() declined it)"};
  return execute(*plan, uids, pointers);
}

Status CudnnSdpa::run(const SdpaLayer& l) {
  if (!prepared_) return Error{"cuDNN SDPA: run() before prepare()"};
  if (l.block_size != shape_.block_size) return Error{"cuDNN SDPA: block size differs from prepare()"};
  if (static_cast<std::int64_t>(l.num_q_heads) * l.head_dim_qk != shape_.q_row_elems ||
      static_cast<std::int64_t>(l.num_q_heads) * l.head_dim_v != shape_.out_row_elems ||
      static_cast<std::int64_t>(l.num_kv_heads) * l.head_dim_qk != shape_.kv_row_elems ||
      l.head_dim_qk != l.head_dim_v || l.num_q_heads != shape_.num_q_heads || l.num_kv_heads != shape_.num_kv_heads ||
      l.head_dim_qk != shape_.head_dim_qk || l.head_dim_v != shape_.head_dim_v || l.num_blocks != shape_.num_blocks)
    return Error{"cuDNN SDPA: row widths differ from prepare()"};
  scale_ = l.scale;
  if (!split_) {
    SLUICE_TRY(run_call(whole_, l, l.out, nullptr));
    ++num_runs_;
    return Ok{};
  }
  SLUICE_TRY(run_call(pieces_, l, partial_out_.data(), piece_lse_.data()));
  SLUICE_TRY(run_call(tails_, l, l.out, tail_lse_.data()));
  auto* base = static_cast<std::int32_t*>(step_tensors_.data());
  launch_sdpa_split_combine({.out = l.out,
                             .partial = partial_out_.data(),
                             .tail_lse = static_cast<const float*>(tail_lse_.data()),
                             .piece_lse = static_cast<const float*>(piece_lse_.data()),
                             .rows = base + combine_rows_at_,
                             .piece_row_begin = base + piece_row_begin_at_,
                             .num_rows = static_cast<std::int32_t>(combine_rows_),
                             .num_heads = l.num_q_heads,
                             .head_dim = l.head_dim_v,
                             .tail_rows = static_cast<std::int32_t>(tails_.sq),
                             .piece_rows = static_cast<std::int32_t>(pieces_.sq),
                             .out_row_elems = shape_.out_row_elems},
                            {.stream = stream_, .programmatic = false});
  ++num_runs_;
  ++num_split_runs_;
  return Ok{};
}

CudnnSdpa::GraphSpec CudnnSdpa::packed_spec(const SdpaPacked& p) {
  return {.paged = 0,
          .causal = 1,
          .b = 1,
          .hq = p.num_heads,
          .hk = p.num_heads,
          .sq = pow2_at_least(p.num_rows, 64),
          .skv = pow2_at_least(p.num_keys, 64),
          .dqk = p.head_dim_qk,
          .dv = p.head_dim_v,
          .q_row = p.q_row,
          .q_head = p.head_dim_qk,
          .o_row = p.o_row,
          .o_head = p.head_dim_v,
          .k_row = p.k_row,
          .k_head = p.k_head,
          .v_row = p.v_row,
          .v_head = p.v_head};
}

Status CudnnSdpa::run_packed(const SdpaPacked& p) {
  if (p.num_rows <= 0 || p.num_rows > p.num_keys) return Error{"cuDNN SDPA: packed rows out of range"};
  const std::int64_t q_end = p.num_rows * p.q_row, o_end = p.num_rows * p.o_row, k_end = p.num_keys * p.k_row,
                     v_end = p.num_keys * p.v_row;
  if (std::max({q_end, o_end, k_end, v_end}) > std::numeric_limits<std::int32_t>::max())
    return Error{"cuDNN SDPA: a packed sequence of more than 2^31 elements"};
  const GraphSpec spec = packed_spec(p);
  SLUICE_TRY_ASSIGN(plan, plan_for(spec, /*may_defer=*/false));  // MLA has no other path: built or waited for
  // [seq_len_q][seq_len_kv][q offsets 2][o offsets 2][k offsets 2][v offsets 2], 16-byte sections.
  packed_host_ = {p.num_rows, 0, 0, 0, p.num_keys, 0, 0, 0, 0, static_cast<std::int32_t>(q_end), 0, 0,
                  0, static_cast<std::int32_t>(o_end), 0, 0, 0, static_cast<std::int32_t>(k_end), 0, 0,
                  0, static_cast<std::int32_t>(v_end), 0, 0};
  packed_tensors_.ensure(static_cast<std::int64_t>(packed_host_.size() * sizeof(std::int32_t)), stream_);
  SLUICE_CUDA_CHECK(cudaMemcpyAsync(packed_tensors_.data(), packed_host_.data(),
                                    packed_host_.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice, stream_));
  scale_ = p.scale;
  auto* base = static_cast<std::int32_t*>(packed_tensors_.data());
  const std::array<std::int64_t, 12> uids = {kQ,        kK,        kV,        kO,        kSeqLenQ, kSeqLenKv,
                                              kQOffsets, kOOffsets, kKOffsets, kVOffsets, kScale,   kNegativeInfinity};
  const std::array<void*, 12> pointers = {const_cast<void*>(p.q), const_cast<void*>(p.k), const_cast<void*>(p.v),
                                          p.out,                  base,                   base + 4,
                                          base + 8,               base + 12,              base + 16,
                                          base + 20,              &scale_,                &negative_infinity_};
  return execute(*plan, uids, pointers);
}

}  // namespace sluice::cuda
