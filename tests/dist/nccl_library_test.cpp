// The NCCL loader where no NCCL is: it fails with every path it tried and
// dlopen's reason for each, so `sluice serve` can say why; a library that is
// not NCCL is refused naming the missing symbol.
#include <gtest/gtest.h>

#include "sluice/dist/nccl_library.h"

namespace sluice {
namespace {

TEST(NcclLibrary, AMissingLibraryNamesEveryPathTried) {
  auto library = NcclLibrary::load({"/nonexistent/libnccl.so.2", "libsluice-no-such-nccl.so.2"});
  ASSERT_FALSE(library.ok());
  const std::string& message = library.error_message();
  EXPECT_NE(message.find("cannot load NCCL (libnccl.so.2)"), std::string::npos) << message;
  EXPECT_NE(message.find("/nonexistent/libnccl.so.2: "), std::string::npos) << message;
  EXPECT_NE(message.find("libsluice-no-such-nccl.so.2: "), std::string::npos) << message;
}

TEST(NcclLibrary, ALibraryThatIsNotNcclIsRefusedByTheMissingSymbol) {
  // libc is loaded in every process and has no NCCL symbol.
  auto library = NcclLibrary::load({"libc.so.6"});
  ASSERT_FALSE(library.ok());
  EXPECT_EQ(library.error_message(), "libc.so.6 has no symbol ncclGetVersion: not an NCCL 2.x library");
}

}  // namespace
}  // namespace sluice
