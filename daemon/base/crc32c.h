// CRC32C (Castagnoli), the checksum of every uploaded dump file. Small and table driven: uploads
// are bounded by the network, not by this.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fr::daemon {

// Extends `crc` (0 to start) over `size` bytes.
uint32_t crc32c(uint32_t crc, const void* data, size_t size);

// Reads `fd` from its current offset to the end: how many bytes and their CRC32C. False on a
// read error.
bool crc32c_fd(int fd, uint64_t* size, uint32_t* crc);

}  // namespace fr::daemon
