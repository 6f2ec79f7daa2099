// DeepSeek-V4 served by the engine on CUDA: the DeepseekV4DeviceRunner
// (model/deepseek_v4_model.h) that DeepseekV4Model runs where the Ops offer
// no host V4 kernels. It loads the reference's weights on the host (with the
// CPU kernels, never run here), uploads them once the KV layout is known
// (deepseek_v4_forward.h) and runs each step over CudaOps' model-defined
// cache. A program that serves V4 on CUDA calls
// register_cuda_deepseek_v4_runner() once before loading the model.
#pragma once

namespace sluice {

void register_cuda_deepseek_v4_runner();

}  // namespace sluice
