// Time in tests: the units the daemon and the log count in (nanoseconds, as int64_t), and the
// wall clock the flight log's timestamps use. One copy instead of a `kSec` in every test file.
// Included as "testing/clock.h" (library fr_test_common).
#pragma once

#include <time.h>

#include <cstdint>

namespace fr::test {

inline constexpr int64_t kUs = 1'000;
inline constexpr int64_t kMs = 1'000'000;
inline constexpr int64_t kSec = 1'000'000'000;

// CLOCK_REALTIME in nanoseconds: what a log header's create_ns and the agent's timestamps hold.
inline uint64_t now_real_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

}  // namespace fr::test
