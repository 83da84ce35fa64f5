// Fuzz target: the dump-set manifest parser (manifest.json of docs/dump-set.md).
#include <cstddef>
#include <cstdint>
#include <string>

#include "log/snapshot.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  fr::log::Manifest m;
  std::string error;
  if (!fr::log::parse_manifest(text, &m, &error) && error.empty()) __builtin_trap();
  return 0;
}
