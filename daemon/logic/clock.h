// Clock offsets between a node and the coordinator, measured from ping round trips (NTP style):
// the coordinator stamps t1, the node its receive time t2 and its send time t3, the coordinator
// its receive time t4. The sample with the smallest network delay of the recent ones wins, since
// its error is bounded by half that delay.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>

namespace fr::daemon {

class ClockEstimator {
 public:
  // Adds one round trip. Samples that cannot be right (t4 < t1, t3 < t2, delay < 0, a time before
  // the epoch or past 2^62 ns, an offset past 2^60 ns) are ignored; returns whether the sample
  // was kept.
  bool add(int64_t t1, int64_t t2, int64_t t3, int64_t t4);

  bool has_offset() const { return !samples_.empty(); }
  // Nanoseconds to ADD to the node's times to put them on the coordinator's clock.
  int64_t offset_ns() const;
  // Round-trip network delay of the sample in use.
  int64_t delay_ns() const;

 private:
  struct Sample {
    int64_t offset;
    int64_t delay;
  };
  const Sample* best() const;
  std::deque<Sample> samples_;
  static constexpr size_t kWindow = 16;
};

}  // namespace fr::daemon
