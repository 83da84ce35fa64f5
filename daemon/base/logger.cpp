// See logger.h.
#include "daemon/base/logger.h"

#include <time.h>
#include <unistd.h>

#include <cstdio>

namespace fr::daemon {

const char* log_level_name(LogLevel level) {
  switch (level) {
#define FR_LOG_LEVEL_CASE(e, s) \
  case LogLevel::e: return s;
    FR_LOG_LEVELS(FR_LOG_LEVEL_CASE)
#undef FR_LOG_LEVEL_CASE
  }
  return "?";
}

std::string format_log_line(LogLevel level, const std::string& text, int64_t real_ns) {
  time_t secs = time_t(real_ns / 1'000'000'000);
  struct tm tm;
  gmtime_r(&secs, &tm);
  char stamp[96];
  std::snprintf(stamp, sizeof stamp, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ %-5s ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                int(real_ns / 1'000'000 % 1000), log_level_name(level));
  return stamp + text;
}

void log_line(LogLevel level, const std::string& text) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  std::string line =
      format_log_line(level, text, int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec) + "\n";
  ssize_t rc = ::write(STDERR_FILENO, line.data(), line.size());
  (void)rc;  // nowhere to report a failing stderr
}

bool LogThrottle::due(int64_t now_ns, uint64_t* suppressed) {
  if (active_ && now_ns - last_ns_ < every_ns_) {
    ++suppressed_;
    return false;
  }
  *suppressed = suppressed_;
  suppressed_ = 0;
  active_ = true;
  last_ns_ = now_ns;
  return true;
}

bool LogThrottle::clear() {
  const bool was = active_;
  active_ = false;
  suppressed_ = 0;
  return was;
}

}  // namespace fr::daemon
