// See clock.h.
#include "daemon/logic/clock.h"

#include "common/time_ns.h"

namespace fr::daemon {

namespace {

constexpr int64_t kMaxOffsetNs = int64_t(1) << 60;

}  // namespace

bool ClockEstimator::add(int64_t t1, int64_t t2, int64_t t3, int64_t t4) {
  // A reading that is no time (common/time_ns.h) is refused; within them, nothing below overflows.
  for (int64_t t : {t1, t2, t3, t4})
    if (!plausible_ns(t)) return false;
  if (t4 < t1 || t3 < t2) return false;
  int64_t delay = (t4 - t1) - (t3 - t2);
  if (delay < 0) return false;
  // Node minus coordinator is ((t2 - t1) + (t3 - t4)) / 2; we store what to add to node times.
  int64_t node_ahead = ((t2 - t1) + (t3 - t4)) / 2;
  // Nor a node 36 years off: a time plus its offset, and the difference of two such, stay in range.
  if (node_ahead > kMaxOffsetNs || node_ahead < -kMaxOffsetNs) return false;
  samples_.push_back({-node_ahead, delay});
  while (samples_.size() > kWindow) samples_.pop_front();
  return true;
}

const ClockEstimator::Sample* ClockEstimator::best() const {
  const Sample* b = nullptr;
  for (const auto& s : samples_)
    if (!b || s.delay < b->delay) b = &s;
  return b;
}

int64_t ClockEstimator::offset_ns() const {
  const Sample* b = best();
  return b ? b->offset : 0;
}

int64_t ClockEstimator::delay_ns() const {
  const Sample* b = best();
  return b ? b->delay : 0;
}

}  // namespace fr::daemon
