// See stall.h.
#include "daemon/logic/stall.h"

#include <algorithm>
#include <cmath>

namespace fr::daemon {

namespace {
constexpr int64_t kMs = 1'000'000;
// Past this many counts every bucket is halved: about the last thousand or two samples count.
constexpr float kDecayAt = 2048;
// Weight of the newest sample in the smoothed gap.
constexpr double kGapAlpha = 0.1;
}  // namespace

int LatencyHistogram::bucket_of(int64_t ns) {
  if (ns <= kMs) return 0;
  int b = int(std::floor(2 * std::log2(double(ns) / double(kMs)))) + 1;
  return std::min(b, kBuckets - 1);
}

int64_t LatencyHistogram::upper_edge(int bucket) {
  return int64_t(double(kMs) * std::exp2(double(bucket) / 2));
}

void LatencyHistogram::add(int64_t ns) {
  if (total_ >= kDecayAt) {
    total_ = 0;
    for (auto& c : counts_) total_ += (c *= 0.5f);
  }
  counts_[size_t(bucket_of(std::max<int64_t>(ns, 0)))] += 1;
  total_ += 1;
}

int64_t LatencyHistogram::quantile(double q) const {
  if (total_ <= 0) return 0;
  double want = std::clamp(q, 0.0, 1.0) * total_, seen = 0;
  for (int b = 0; b < kBuckets; ++b) {
    seen += counts_[size_t(b)];
    if (seen >= want && counts_[size_t(b)] > 0) return upper_edge(b);
  }
  return upper_edge(kBuckets - 1);
}

int64_t unlearned_threshold_ns(const StallPolicy& p) { return p.automatic ? p.cap_ns : p.fixed_ns; }

int64_t CommModel::threshold_ns(const StallPolicy& p) const {
  if (!p.automatic) return p.fixed_ns;
  if (!warm(p)) return p.cap_ns;
  double learned = p.factor * double(latency.quantile(0.99));
  int64_t t = std::max<int64_t>(p.floor_ns, int64_t(std::min(learned, double(p.cap_ns))));
  return std::min(t, p.cap_ns);
}

MemberTrack observe(CommModel& model, const MemberTrack* prev, uint64_t key, int rank,
                    uint64_t comm_id, uint64_t oldest_seq, int64_t oldest_age_ns,
                    uint64_t completed, int64_t now_mono) {
  MemberTrack m;
  m.key = key;
  m.comm_id = comm_id;
  m.rank = rank;
  m.oldest_seq = oldest_seq;
  m.oldest_age_ns = std::max<int64_t>(oldest_age_ns, 0);
  m.completed = completed;
  m.at_mono = now_mono;
  float in_flight = m.oldest_age_ns > 0 ? 1.0f : 0.0f;
  model.last_seen_mono = now_mono;
  if (!prev) {
    m.waiting = in_flight;
    m.samples = 1;
    model.waiting_sum += m.waiting;
    model.waiting_members++;
    return m;
  }
  // The op in flight last time is done now (nothing in flight, or another op is the oldest):
  // it lasted at least the age it had then.
  if (prev->oldest_age_ns > 0 && (m.oldest_age_ns == 0 || m.oldest_seq != prev->oldest_seq) &&
      completed >= prev->completed)
    model.latency.add(prev->oldest_age_ns);
  if (completed > prev->completed && now_mono > prev->at_mono) {
    double gap = double(now_mono - prev->at_mono) / double(completed - prev->completed);
    model.gap_ns = model.gap_ns ? int64_t(kGapAlpha * gap + (1 - kGapAlpha) * double(model.gap_ns))
                                : int64_t(gap);
    model.progress++;
    model.last_progress_mono = now_mono;
  }
  m.waiting = prev->waiting + MemberTrack::kAlpha * (in_flight - prev->waiting);
  m.samples = prev->samples + 1;
  m.slow_streak = prev->slow_streak;
  model.waiting_sum += double(m.waiting) - double(prev->waiting);
  return m;
}

void leave(CommModel& model, const MemberTrack& m) {
  if (model.waiting_members == 0) return;
  model.waiting_members--;
  model.waiting_sum = model.waiting_members ? std::max(0.0, model.waiting_sum - m.waiting) : 0;
}

double peers_waiting(const CommModel& model, const MemberTrack& m) {
  if (model.waiting_members < 2) return 0;
  return std::max(0.0, model.waiting_sum - m.waiting) / double(model.waiting_members - 1);
}

bool is_slow_member(const CommModel& model, const MemberTrack& m, int64_t now_mono,
                    int64_t recent_ns) {
  if (m.samples < MemberTrack::kMinSamples || model.waiting_members < 2) return false;
  if (model.last_progress_mono == 0 || now_mono - model.last_progress_mono > recent_ns)
    return false;
  double peers = peers_waiting(model, m);
  return peers >= 0.5 && double(m.waiting) < peers / 5;
}

}  // namespace fr::daemon
