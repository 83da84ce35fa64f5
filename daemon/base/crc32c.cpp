// CRC32C with a 256-entry table built once (reflected polynomial 0x82F63B78).
#include "daemon/base/crc32c.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <vector>

namespace fr::daemon {
namespace {

std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}

}  // namespace

uint32_t crc32c(uint32_t crc, const void* data, size_t size) {
  static const std::array<uint32_t, 256> table = make_table();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ p[i]) & 0xffu] ^ (crc >> 8);
  return ~crc;
}

bool crc32c_fd(int fd, uint64_t* size, uint32_t* crc) {
  std::vector<char> buf(1 << 20);
  *size = 0;
  *crc = 0;
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) return true;
    *crc = crc32c(*crc, buf.data(), size_t(n));
    *size += uint64_t(n);
  }
}

}  // namespace fr::daemon
