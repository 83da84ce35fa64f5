// CRC-32C (daemon/base/crc32c.h): the checksum of every dump file.
#include <catch2/catch.hpp>

#include "daemon/base/crc32c.h"

using namespace fr::daemon;

TEST_CASE("crc32c matches the standard check value", "[daemon]") {
  const char* s = "123456789";
  CHECK(crc32c(0, s, 9) == 0xE3069283u);
  // Incremental equals one shot.
  CHECK(crc32c(crc32c(0, s, 4), s + 4, 5) == 0xE3069283u);
}
