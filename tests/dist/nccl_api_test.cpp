// Our NCCL declarations (nccl_api.h) against the installed nccl.h: every
// function's type and every enum value we pass, checked by the compiler
// (this file is built only where cmake finds nccl.h). Then the loader
// against the library next to that header: it opens, and reports the
// header's NCCL_VERSION_CODE. No GPU needed (ncclGetVersion touches none).
#include <gtest/gtest.h>

#include <nccl.h>

#include <type_traits>

#include "sluice/dist/nccl_api.h"
#include "sluice/dist/nccl_library.h"

namespace sluice {
namespace {

using Header = nccl::Signatures<ncclResult_t, ncclDataType_t, ncclRedOp_t, ncclUniqueId>;

static_assert(std::is_same_v<nccl::Comm, ncclComm_t>);
static_assert(std::is_same_v<nccl::Stream, cudaStream_t>);
static_assert(std::is_same_v<decltype(&ncclGetVersion), Header::GetVersion>);
static_assert(std::is_same_v<decltype(&ncclGetErrorString), Header::GetErrorString>);
static_assert(std::is_same_v<decltype(&ncclGetUniqueId), Header::GetUniqueId>);
static_assert(std::is_same_v<decltype(&ncclCommInitRank), Header::CommInitRank>);
static_assert(std::is_same_v<decltype(&ncclCommInitAll), Header::CommInitAll>);
static_assert(std::is_same_v<decltype(&ncclCommDestroy), Header::CommDestroy>);
static_assert(std::is_same_v<decltype(&ncclCommAbort), Header::CommAbort>);
static_assert(std::is_same_v<decltype(&ncclCommGetAsyncError), Header::CommGetAsyncError>);
static_assert(std::is_same_v<decltype(&ncclCommCount), Header::CommCount>);
static_assert(std::is_same_v<decltype(&ncclCommUserRank), Header::CommUserRank>);
static_assert(std::is_same_v<decltype(&ncclAllReduce), Header::AllReduce>);
static_assert(std::is_same_v<decltype(&ncclAllGather), Header::AllGather>);
static_assert(std::is_same_v<decltype(&ncclReduceScatter), Header::ReduceScatter>);
static_assert(std::is_same_v<decltype(&ncclSend), Header::Send>);
static_assert(std::is_same_v<decltype(&ncclRecv), Header::Recv>);
static_assert(std::is_same_v<decltype(&ncclGroupStart), Header::GroupStart>);
static_assert(std::is_same_v<decltype(&ncclGroupEnd), Header::GroupEnd>);

// The enums travel by value as our int-based enums: same size, same values.
static_assert(sizeof(ncclResult_t) == sizeof(nccl::Result) && alignof(ncclResult_t) == alignof(nccl::Result));
static_assert(sizeof(ncclDataType_t) == sizeof(nccl::DataType));
static_assert(sizeof(ncclRedOp_t) == sizeof(nccl::RedOp));
static_assert(static_cast<int>(ncclSuccess) == nccl::kSuccess);
static_assert(static_cast<int>(ncclInProgress) == nccl::kInProgress);
static_assert(static_cast<int>(ncclFloat32) == nccl::kFloat32);
static_assert(static_cast<int>(ncclBfloat16) == nccl::kBfloat16);
static_assert(static_cast<int>(ncclSum) == nccl::kSum);
// The unique id travels by value too.
static_assert(sizeof(ncclUniqueId) == sizeof(nccl::UniqueId) && alignof(ncclUniqueId) == alignof(nccl::UniqueId));
static_assert(NCCL_UNIQUE_ID_BYTES == nccl::kUniqueIdBytes);
// The header we compile against is one the loader accepts.
static_assert(NCCL_VERSION_CODE >= nccl::kMinVersionCode);

TEST(NcclApi, TheLibraryBesideTheHeaderLoadsAndReportsTheHeadersVersion) {
  auto library = NcclLibrary::load({SLUICE_NCCL_LIBRARY});
  ASSERT_TRUE(library.ok()) << library.error_message();
  EXPECT_EQ((*library)->version_code(), NCCL_VERSION_CODE);
  EXPECT_EQ((*library)->version(),
            std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." + std::to_string(NCCL_PATCH));
  // The library's own words for an error, with the call and the code.
  const std::string described = (*library)->describe("ncclAllReduce", static_cast<nccl::Result>(ncclInvalidArgument));
  EXPECT_TRUE(described.starts_with("ncclAllReduce: invalid argument")) << described;
  EXPECT_TRUE(described.ends_with(" (4)")) << described;
}

}  // namespace
}  // namespace sluice
