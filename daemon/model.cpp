// The little code model.h declares: the clocks every daemon library reads, and a report's oldest
// op. Here, in the base library, rather than with the log watcher that first needed them, so the
// coordinator's logic links them without linking the node's I/O.
#include "daemon/model.h"

#include <time.h>

#include <algorithm>

namespace fr::daemon {

int64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t real_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t ProcessReport::oldest_age_ns() const {
  int64_t m = 0;
  for (const auto& c : comms) m = std::max(m, c.oldest_age_ns);
  return m;
}

}  // namespace fr::daemon
