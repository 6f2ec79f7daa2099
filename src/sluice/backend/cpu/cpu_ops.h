// The CPU implementation of Ops: plain C++ with a thread pool, f32 activations
// and f32 accumulation. It is the correctness reference for every other backend,
// so clarity wins over speed wherever they conflict.
#pragma once

#include <cstdint>
#include <memory>

#include "sluice/backend/ops.h"

namespace sluice {

// What the CPU reference does with the activations entering a GEMM whose
// weight is FP8 e4m3 with block scales (DeepSeek's quantization_config).
enum class CpuFp8Activations {
  // The weights dequantized to f32 on load, the activations as they are: the
  // checkpoint's math with no activation rounding. The default.
  f32,
  // The weights kept FP8 (Ops::keeps_fp8_block_weights) and dequantized in
  // the matmul; the activations of each such GEMM quantized per row and
  // 128-column group to e4m3 (cpu_math.h, quantize_fp8_activations): the
  // checkpoints' "dynamic" activation scheme as DeepSeek's inference and our
  // CUDA FP8 GEMMs compute it. Matmuls, gate_up_silu and the routed experts
  // (DeepSeek-V3 family; other architectures' CPU kernels read f32 weights).
  e4m3_1x128,
};

struct CpuOpsOptions {
  int num_threads = 0;  // 0 = all hardware threads
  CpuFp8Activations fp8_activations = CpuFp8Activations::f32;
  // Under e4m3_1x128, dense matmuls of at most this many rows keep their
  // activations unquantized (the routed experts quantize at every size). The
  // CUDA backend's FP8 matmuls of <= 16 rows (kFp8KernelMaxRows) run a kernel
  // that dequantizes the weight and keeps bf16 activations, so a reference for
  // it sets 16; 0 quantizes every FP8 GEMM.
  std::int64_t fp8_dense_unquantized_max_rows = 0;
};

std::unique_ptr<Ops> make_cpu_ops(const CpuOpsOptions& options);

}  // namespace sluice
