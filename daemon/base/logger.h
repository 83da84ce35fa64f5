// frd's log: one line per event on stderr, each with a UTC timestamp and a level, so a node's
// and a coordinator's logs can be read side by side and filtered by severity:
//   2026-12-03T03:40:37.123Z WARN  frd node n1: cannot reach the coordinator at ...
// And a throttle for conditions that persist (a coordinator out of reach, a missing log
// directory): said at once, then at a bounded rate while they last, and once when they clear.
#pragma once

#include <cstdint>
#include <string>

namespace fr::daemon {

#define FR_LOG_LEVELS(X) \
  X(kInfo, "INFO")       \
  X(kWarn, "WARN")       \
  X(kError, "ERROR")

enum class LogLevel {
#define FR_LOG_LEVEL_ENUM(e, s) e,
  FR_LOG_LEVELS(FR_LOG_LEVEL_ENUM)
#undef FR_LOG_LEVEL_ENUM
};
const char* log_level_name(LogLevel level);

// The line as written (without the newline); real_ns is CLOCK_REALTIME.
std::string format_log_line(LogLevel level, const std::string& text, int64_t real_ns);
// Writes one line to stderr in a single write, so lines from several threads never interleave.
void log_line(LogLevel level, const std::string& text);

// A persisting condition, said at once and then at most once per interval. Time is passed in.
class LogThrottle {
 public:
  explicit LogThrottle(int64_t every_ns) : every_ns_(every_ns) {}
  // The condition holds now. True when it is to be said; *suppressed is then how many times it
  // held since it was last said.
  bool due(int64_t now_ns, uint64_t* suppressed);
  // The condition cleared. True when it had been said (so its end is worth a line).
  bool clear();
  bool active() const { return active_; }

 private:
  int64_t every_ns_;
  int64_t last_ns_ = 0;
  uint64_t suppressed_ = 0;
  bool active_ = false;
};

}  // namespace fr::daemon
