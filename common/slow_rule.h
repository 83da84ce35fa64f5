// The fail-slow rules that frd's live detector (daemon/logic/slow_detector.h) and fr-analyze's
// post-mortem `slow` finding (analyzer/slow_history.cpp) both apply, so that a dump set judged
// after the fact names what the coordinator named while the job ran. Numbers in, verdicts out:
// no clock, no model. The reasons for each threshold are in slow_detector.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "fr/flight_log.h"

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
inline constexpr int64_t kSampledFloorNs = 1'000'000;  // sampled GPU times count as this at least

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

// A time in ns from a double, within int64 (a hostile or absurd time must not overflow): 0 below,
// 9e18 (all an int64 holds, with room) above; NaN is 0.
inline int64_t saturated_ns(double v) {
  return v >= 9.0e18 ? int64_t(9'000'000'000'000'000'000) : v > 0 ? int64_t(v) : 0;
}
// A time in ns from its log, likewise.
inline int64_t ns_of_log(double l) { return saturated_ns(std::exp(l)); }

// What a link's slower steps cost its op: (its step time - the others') x its steps, saturated.
inline int64_t link_excess_ns(int64_t value_ns, int64_t others_ns, double steps) {
  return saturated_ns((double(value_ns) - double(others_ns)) * steps);
}

// A member's GPU time per op, in log space (log_avg, over n samples): from kernel times (the
// profiler's kernel channels), or where it has none from the node's sampled progress markers.
// Kernel times win: the first one replaces the sampled times, which are not taken after it.
struct GpuAvg {
  uint32_t op = 0;
  double log_avg = 0;
  uint32_t n = 0;
  // From the sampled markers: a linear average (a time quantized by the sample period can be 0),
  // whose log, floored at one sample period, is log_avg.
  bool sampled = false;
  double lin_avg = 0;

  void add_kernel(int64_t ns) {
    if (ns <= 0) return;
    if (sampled) *this = GpuAvg{op};
    log_avg = decay_log(log_avg, n, std::log(double(ns)));
    n++;
  }
  void add_sampled(int64_t own_ns, int64_t floor_ns = kSampledFloorNs) {
    if (n > 0 && !sampled) return;  // kernel times first
    sampled = true;
    const double own = double(std::max<int64_t>(0, own_ns));
    lin_avg = n == 0 ? own : (1 - kAvgAlpha) * lin_avg + kAvgAlpha * own;
    log_avg = std::log(std::max(lin_avg, double(std::max<int64_t>(1, floor_ns))));
    n++;
  }
};

// Whether a collective's sampled markers time it: reached (start) and finished (end, not before).
inline bool marks_timed(int64_t start_ns, int64_t end_ns) {
  return start_ns > 0 && end_ns >= start_ns;
}

// Each member's own GPU time at a collective from its sampled markers (start, end), given for
// every member of the communicator: from when the last member's GPU reached it (before that a
// GPU waits for its peers, so the marker interval alone cannot show a slow GPU) to when its own
// finished. A sample period's rounding (and the nodes' clock error) can put an end before the
// last start: 0, which the average absorbs. Empty where a member's markers do not time it.
inline std::vector<int64_t> sampled_gpu_times(
    const std::vector<std::pair<int64_t, int64_t>>& marks) {
  int64_t last = 0;
  for (const auto& [start, end] : marks) {
    if (!marks_timed(start, end)) return {};
    last = std::max(last, start);
  }
  std::vector<int64_t> own;
  own.reserve(marks.size());
  for (const auto& m : marks) own.push_back(std::max<int64_t>(0, m.second - last));
  return own;
}

// Whether a member's GPU times were judged and are clearly not slow (a late host is then its
// host's fault): its worst op's ratio under the bar. Sampled times are coarser than kernel
// times: a GPU a little under the bar (a mild slowdown rounded by the sample period) is not
// cleared (half the floor's margin), nor one whose peers' times spread so much (samplers delayed
// on a busy node) that the bar rose above the floor.
inline bool gpu_clear(double ratio, double bar, bool sampled, double floor = kGpuFloor) {
  if (sampled && bar > floor + 1e-9) return false;
  const double clear = sampled ? 1 + (floor - 1) / 2 : floor;
  return ratio > 0 && ratio < clear;
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

// What one link (sender, receiver and channel of a communicator) has shown: how often its sender
// was caught on the wire, recent samples weighing most, and its decaying mean step time per op.
struct LinkStats {
  uint64_t last_op = 0;
  double log_avg = 0;
  double steps = 0;                // average steps per op
  uint32_t n = 0;                  // ops learned
  uint32_t sampled = 0, wire = 0;  // sender's states seen, of which on the wire

  // One report of the link's slot. Every report of the sender's slot samples its state (not once
  // per op): on the wire, or anything else (waiting for the GPU or for credit, or done with its
  // op and waiting for the next); true when it did. A slot shows its newest op until the next
  // one, so each op is learned from once per side.
  bool sample_state(bool send, uint32_t state) {
    if (!send || state < FR_CHANST_POSTED || state > FR_CHANST_DONE) return false;
    if (sampled >= 64) {  // halved: recent samples weigh most
      sampled /= 2;
      wire /= 2;
    }
    sampled++;
    wire += state == FR_CHANST_SEND_WAIT;
    return true;
  }
  // The slot's op (its step time and steps); false when that op was learned already.
  bool learn_op(uint64_t op_seq, int64_t step_ns, uint32_t op_steps) {
    if (n > 0 && op_seq == last_op) return false;
    last_op = op_seq;
    log_avg = decay_log(log_avg, n, std::log(double(step_ns)));
    steps = n == 0 ? op_steps : (1 - kAvgAlpha) * steps + kAvgAlpha * op_steps;
    n++;
    return true;
  }
};

// A communicator's links by (sender, receiver) pair, for judging by the senders' states: the
// pair's samples and hits on the wire over its channels, and its channel on the wire most.
template <class L>
struct WirePair {
  uint32_t sampled = 0, wire = 0;
  const L* top = nullptr;
};
// The pairs of `links` (a map of links with src, dst and LinkStats' counts), and the shares on
// the wire of those with `min_samples` states or more.
template <class L, class Map>
std::map<std::pair<int, int>, WirePair<L>> wire_pairs(
    const Map& links, uint32_t min_samples,
    std::vector<std::pair<std::pair<int, int>, double>>* shares) {
  std::map<std::pair<int, int>, WirePair<L>> pairs;
  for (const auto& [_, k] : links) {
    if (k.sampled == 0 || k.n == 0) continue;
    WirePair<L>& p = pairs[{k.src, k.dst}];
    p.sampled += k.sampled;
    p.wire += k.wire;
    if (p.top == nullptr || k.wire * p.top->sampled > p.top->wire * k.sampled) p.top = &k;
  }
  for (const auto& [key, p] : pairs)
    if (p.sampled >= min_samples) shares->emplace_back(key, double(p.wire) / p.sampled);
  return pairs;
}

// Whether a link on the wire at `share` of its samples, into the node of a slow link's sender
// that was on the wire at `fed_share`, waits for that link (backpressure: the slow link's sender
// consumes what its node's ranks forward to it late, and they fall behind receiving).
inline bool waits_for_slow_link(double share, double fed_share) { return share * 2 <= fed_share; }

// A sender pair's share of samples on the wire against the other pairs' median share: whether
// it is the link the others wait for (the floor of `other` is applied here).
inline double wire_other(const std::vector<double>& others) {
  return std::max(median_of(others), kMinOtherWireShare);
}
// The same for the pair `key` among all judged pairs' shares (`shares`, as wire_pairs gives them).
inline double wire_other_than(const std::vector<std::pair<std::pair<int, int>, double>>& shares,
                              const std::pair<int, int>& key) {
  std::vector<double> others;
  for (const auto& [k, share] : shares)
    if (k != key) others.push_back(share);
  return wire_other(others);
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
