// See clock.h.
#include "daemon/logic/clock.h"

namespace fr::daemon {

namespace {

// A clock reading past this (year 2116) or before the epoch is not one; within it, the sums and
// differences below cannot overflow.
constexpr int64_t kMaxClockNs = int64_t(1) << 62;
constexpr int64_t kMaxOffsetNs = int64_t(1) << 60;

bool plausible(int64_t t) { return t >= 0 && t <= kMaxClockNs; }

}  // namespace

bool ClockEstimator::add(int64_t t1, int64_t t2, int64_t t3, int64_t t4) {
  if (!plausible(t1) || !plausible(t2) || !plausible(t3) || !plausible(t4)) return false;
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
