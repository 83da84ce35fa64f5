// Fuzz target: the flight-log reader on arbitrary bytes (a dump file or a live log copied in).
#include <cstddef>
#include <cstdint>

#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = fr::log::read_log_bytes(data, size, "fuzz.frlog");
  if (r.ok()) {
    fr::fuzz::touch(*r.log);
    fr::fuzz::check_reencodes(*r.log);
  } else if (r.message.empty()) {
    __builtin_trap();  // every refusal names its reason
  }
  return 0;
}
