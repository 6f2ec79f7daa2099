// The NCCL communicator on one GPU (issue 19): libnccl.so.2 loaded by
// NcclLibrary, a 1-rank group made by ncclCommInitAll, and each collective
// on device memory against what one rank's collective must give (the sum
// over one rank is the input; the gather of one rank is its send buffer),
// read back after synchronizing the stream the collectives were enqueued on.
// Then an abort: every later collective fails with the reason. Several GPUs
// wait for the tensor-parallel wiring (nvidia-h200-x2).
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <vector>

#include "sluice/dist/nccl_communicator.h"

namespace sluice {
namespace {

void check_cuda(cudaError_t error) { ASSERT_EQ(error, cudaSuccess) << cudaGetErrorString(error); }

TEST(NcclOneRank, CollectivesOnDeviceMemory) {
  auto library = NcclLibrary::load();
  ASSERT_TRUE(library.ok()) << library.error_message();
  std::printf("NCCL %s from %s\n", (*library)->version().c_str(), (*library)->path().c_str());
  check_cuda(cudaSetDevice(0));
  cudaStream_t stream = nullptr;
  check_cuda(cudaStreamCreate(&stream));
  const int devices[] = {0};
  const nccl::Stream streams[] = {stream};
  auto group = NcclCommunicator::create_all(*library, devices, streams);
  ASSERT_TRUE(group.ok()) << group.error_message();
  ASSERT_EQ(group->size(), 1u);
  Communicator& comm = *group->front();
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.size(), 1);

  const std::vector<float> input = {1.5f, -2.0f, 3.25f, 1e-3f, 7.0f};
  const std::size_t n = input.size();
  void* data_bytes = nullptr;
  void* out_bytes = nullptr;
  check_cuda(cudaMalloc(&data_bytes, n * sizeof(float)));
  check_cuda(cudaMalloc(&out_bytes, n * sizeof(float)));
  auto* data = static_cast<float*>(data_bytes);
  auto* out = static_cast<float*>(out_bytes);
  check_cuda(cudaMemcpy(data, input.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  check_cuda(cudaMemset(out, 0xff, n * sizeof(float)));  // NaNs: an output left unwritten shows
  std::vector<float> host(n);

  ASSERT_TRUE(comm.all_reduce_sum({data, n}).ok());
  check_cuda(cudaStreamSynchronize(stream));
  check_cuda(cudaMemcpy(host.data(), data, n * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT_EQ(host, input) << "all_reduce_sum over one rank";

  ASSERT_TRUE(comm.all_gather({data, n}, {out, n}).ok());
  check_cuda(cudaStreamSynchronize(stream));
  check_cuda(cudaMemcpy(host.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT_EQ(host, input) << "all_gather over one rank";

  check_cuda(cudaMemset(out, 0xff, n * sizeof(float)));
  ASSERT_TRUE(comm.reduce_scatter_sum({data, n}, {out, n}).ok());
  check_cuda(cudaStreamSynchronize(stream));
  check_cuda(cudaMemcpy(host.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT_EQ(host, input) << "reduce_scatter_sum over one rank";

  comm.abort("test abort");
  const Status after = comm.all_reduce_sum({data, n});
  ASSERT_FALSE(after.ok());
  EXPECT_EQ(after.error_message(), "communicator group aborted by rank 0: test abort");
  group->clear();
  check_cuda(cudaFree(data));
  check_cuda(cudaFree(out));
  check_cuda(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace sluice
