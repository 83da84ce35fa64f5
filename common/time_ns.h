// Times and durations in ns that come from outside the process (a peer's heartbeat, a dump's
// files): one is a time only between 0 and 2^62 ns (the year 2116), so that sums and differences
// of two such, or of one and a clock offset, cannot overflow int64.
#pragma once

#include <cstdint>

namespace fr {

inline constexpr int64_t kMaxTimeNs = int64_t(1) << 62;

inline bool plausible_ns(int64_t ns) { return ns >= 0 && ns <= kMaxTimeNs; }

// `ns` where it is a time, else 0 (unknown).
inline int64_t time_or_zero(int64_t ns) { return plausible_ns(ns) ? ns : 0; }

}  // namespace fr
