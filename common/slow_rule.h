// The fail-slow rules that frd's live detector (daemon/logic/slow_detector.h) and fr-analyze's
// post-mortem `slow` finding (analyzer/slow_history.cpp) both apply, so that a dump set judged
// after the fact names what the coordinator named while the job ran. Numbers in, verdicts out:
// no clock, no model. The reasons for each threshold are in slow_detector.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fr::slow {

// Defaults of the thresholds (SlowConfig's, and the post-mortem's).
inline constexpr double kGpuFloor = 1.3;            // gpu: times the peers' median kernel time
inline constexpr double kLinkFloor = 1.5;           // link: times the communicator's median link
inline constexpr double kRatioNoiseFactor = 4;      // ... and 1 + this x the spread of the others
inline constexpr uint32_t kMinGpuSamples = 8;       // kernel times a member needs to be judged
inline constexpr uint32_t kMinLinkSamples = 4;      // ops a link needs
inline constexpr uint32_t kMinWireSamples = 12;     // sender states a pair needs
inline constexpr double kWireShare = 0.15;          // on the wire at least this share
inline constexpr double kWireRatio = 3;             // ... this many times the other pairs' median
inline constexpr uint32_t kMinWireHits = 6;         // ... in this many samples at least
inline constexpr double kMinOtherWireShare = 0.02;  // a share of 0 in a few dozen samples
inline constexpr uint32_t kMinBusySamples = 10;     // heartbeats of a late rank's GPU counters
inline constexpr double kBusyFloor = 0.2;           // the peers' in-flight share to judge by
inline constexpr double kBusyRatio = 0.5;           // its share over theirs: its GPU, not its host
inline constexpr int64_t kMinExcessNs = 200'000;    // a finding's excess over its peers per op
inline constexpr double kAvgAlpha = 0.2;  // weight of the newest sample in a kernel or link average

// A decaying average of logs: the first sample sets it (n: samples before this one).
inline double decay_log(double avg, uint32_t n, double v) {
  return n == 0 ? v : (1 - kAvgAlpha) * avg + kAvgAlpha * v;
}

template <class T>
T median_of(std::vector<T> v) {
  if (v.empty()) return T{};
  auto mid = v.begin() + std::ptrdiff_t(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

// The bar a ratio must pass: the floor, or 1 + k x the others' spread when that is higher.
inline double ratio_bar(double floor, double k, double spread_log) {
  return std::max(floor, 1 + k * (std::exp(spread_log) - 1));
}

// Values compared in log space with their median: the median and the bar a member's ratio
// (exp(its log - median)) must reach to stand out.
struct Spread {
  double median_log = 0;
  double bar = 0;
};
inline Spread spread_of(const std::vector<double>& logs, double floor, double k) {
  Spread s;
  s.median_log = median_of(logs);
  std::vector<double> dev;
  for (double v : logs) dev.push_back(std::fabs(v - s.median_log));
  s.bar = ratio_bar(floor, k, median_of(dev));
  return s;
}

// A sender pair's share of samples on the wire against the other pairs' median share: whether
// it is the link the others wait for (the floor of `other` is applied here).
inline double wire_other(const std::vector<double>& others) {
  return std::max(median_of(others), kMinOtherWireShare);
}
inline bool wire_stands_out(double share, double other, uint32_t hits,
                            double min_share = kWireShare, double ratio = kWireRatio,
                            uint32_t min_hits = kMinWireHits) {
  return share >= min_share && share >= ratio * other && hits >= min_hits;
}

// A late rank's share of samples with a collective in flight on its GPU against its peers':
// its host waits for its GPU (true) or its GPU for its host. Only where the peers' share reaches
// kBusyFloor (they wait in flight for it) do the counters say anything: `judged` tells.
inline bool busy_means_gpu(double share, double peers, bool* judged, double bar = kBusyRatio,
                           double floor = kBusyFloor) {
  *judged = peers >= floor;
  return *judged && share >= bar * peers;
}

}  // namespace fr::slow
