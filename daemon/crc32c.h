// CRC32C (Castagnoli), the checksum of every uploaded dump file. Small and table driven: uploads
// are bounded by the network, not by this.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fr::daemon {

// Extends `crc` (0 to start) over `size` bytes.
uint32_t crc32c(uint32_t crc, const void* data, size_t size);

}  // namespace fr::daemon
