// Our declarations of the NCCL 2.x C API that sluice calls, so one build runs
// with or without NCCL on the machine (it is loaded with dlopen, see
// nccl_library.h; docs/architecture.md "Several devices" says why). They
// mirror nccl.h for the dozen functions and the enums we use, all stable
// across NCCL 2.x; tests/dist/nccl_api_test.cpp static_asserts that they
// match the installed nccl.h wherever one is found.
//
// No CUDA header here: a stream is `struct CUstream_st*`, which is what
// cudaStream_t names, so the function types are the very ones nccl.h declares.
#pragma once

#include <cstddef>

struct ncclComm;     // nccl.h's opaque communicator
struct CUstream_st;  // the CUDA runtime's opaque stream

namespace sluice::nccl {

using Comm = ::ncclComm*;       // ncclComm_t
using Stream = ::CUstream_st*;  // cudaStream_t

// ncclResult_t, ncclDataType_t, ncclRedOp_t: C enums of int size, passed by value.
enum Result : int { kSuccess = 0, kInProgress = 7 };
enum DataType : int { kFloat32 = 7, kBfloat16 = 9 };
enum RedOp : int { kSum = 0 };

inline constexpr std::size_t kUniqueIdBytes = 128;
struct UniqueId {  // ncclUniqueId
  char internal[kUniqueIdBytes];
};

// The oldest NCCL whose API and ABI these declarations assume
// (NCCL_VERSION(2, 18, 0) = 21800).
inline constexpr int kMinVersionCode = 21800;

// The functions' types, over the enum and id types: instantiated with ours
// here, and with nccl.h's by the test that proves they match.
template <class ResultT, class DataTypeT, class RedOpT, class UniqueIdT>
struct Signatures {
  using GetVersion = ResultT (*)(int* version);
  using GetErrorString = const char* (*)(ResultT result);
  using GetUniqueId = ResultT (*)(UniqueIdT* id);
  using CommInitRank = ResultT (*)(Comm* comm, int num_ranks, UniqueIdT id, int rank);
  using CommInitAll = ResultT (*)(Comm* comms, int num_devices, const int* devices);
  using CommDestroy = ResultT (*)(Comm comm);
  using CommAbort = ResultT (*)(Comm comm);
  using CommGetAsyncError = ResultT (*)(Comm comm, ResultT* async_error);
  using CommCount = ResultT (*)(Comm comm, int* count);
  using CommUserRank = ResultT (*)(Comm comm, int* rank);
  using AllReduce = ResultT (*)(const void* send, void* recv, std::size_t count, DataTypeT type, RedOpT op, Comm comm,
                                Stream stream);
  using AllGather = ResultT (*)(const void* send, void* recv, std::size_t send_count, DataTypeT type, Comm comm,
                                Stream stream);
  using ReduceScatter = ResultT (*)(const void* send, void* recv, std::size_t recv_count, DataTypeT type, RedOpT op,
                                    Comm comm, Stream stream);
  using Send = ResultT (*)(const void* send, std::size_t count, DataTypeT type, int peer, Comm comm, Stream stream);
  using Recv = ResultT (*)(void* recv, std::size_t count, DataTypeT type, int peer, Comm comm, Stream stream);
  using GroupStart = ResultT (*)();
  using GroupEnd = ResultT (*)();
};

using Api = Signatures<Result, DataType, RedOp, UniqueId>;

}  // namespace sluice::nccl
