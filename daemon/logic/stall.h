// Adaptive stall detection: what the coordinator learns of each communicator's normal ops from
// the heartbeats, and the threshold it derives from it. Pure logic, no clock and no socket: the
// coordinator passes time in.
//
// Heartbeats come about once a second, far slower than the ops, so latency is learned by
// sampling. An op seen in flight at one heartbeat and done at the next was in flight at least as
// long as its age at the first; these lower bounds, from every member of the communicator, fill a
// decaying histogram whose p99 gives the threshold max(floor, factor x p99), capped. An op still
// in flight is never learned from, so a stall cannot raise its own threshold. A communicator is
// judged with the cap until it has been seen to complete ops for a while (its first collectives
// set up connections and are slow), then with what was learned. The gap (time per completed op)
// comes from the completed counters.
//
// The same heartbeats show who waits for whom: a member that its peers keep waiting for (they
// have an op in flight at most heartbeats, it rarely does) while the communicator still completes
// ops is a slow rank, a finding of its own and not a hang.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace fr::daemon {

struct StallPolicy {
  bool automatic = false;  // false: every op is judged by fixed_ns
  int64_t fixed_ns = 30'000'000'000;
  int64_t floor_ns = 3'000'000'000;  // automatic: never below this ...
  int64_t cap_ns = 30'000'000'000;   // ... nor above this
  double factor = 5;                 // k in max(floor, k x p99)
  uint32_t warmup = 8;               // progress observations before the learned p99 is used

  // What the nodes must report at once: the lowest threshold any op can have.
  int64_t report_at_once_ns() const { return automatic ? floor_ns : fixed_ns; }
};

// Durations in buckets two to an octave from 1 ms; older counts decay so the recent past rules.
class LatencyHistogram {
 public:
  static constexpr int kBuckets = 48;
  void add(int64_t ns);
  // The upper edge of the bucket holding quantile q (0 < q <= 1); 0 when empty.
  int64_t quantile(double q) const;
  double count() const { return total_; }

 private:
  static int bucket_of(int64_t ns);
  static int64_t upper_edge(int bucket);
  std::array<float, kBuckets> counts_{};
  float total_ = 0;
};

// What is learned of one communicator.
struct CommModel {
  LatencyHistogram latency;
  uint32_t progress = 0;  // member heartbeats that saw its completed counter advance
  int64_t gap_ns = 0;     // smoothed time per completed op, one member's view
  int64_t last_seen_mono = 0;
  int64_t last_progress_mono = 0;
  std::string name;
  // Slow-rank evidence: the sum of its members' waiting averages and how many there are.
  double waiting_sum = 0;
  uint32_t waiting_members = 0;

  bool warm(const StallPolicy& p) const { return progress >= p.warmup; }
  // How long an op of this communicator may be in flight before an incident opens.
  int64_t threshold_ns(const StallPolicy& p) const;
};

// The threshold for an op whose communicator is unknown (not learned, or past the bounds).
int64_t unlearned_threshold_ns(const StallPolicy& p);

// One member (a process on one communicator) between two heartbeats: what it showed last time,
// and its waiting average.
struct MemberTrack {
  // Weight of the newest heartbeat in `waiting`, and the heartbeats before a member is judged:
  // long enough that ranks with random jitter (each slow in turn) do not look slow by chance.
  static constexpr float kAlpha = 0.05f;
  static constexpr uint32_t kMinSamples = 15;
  // ... and it must look slow at this many heartbeats in a row before it is reported.
  static constexpr uint32_t kSlowStreak = 10;

  uint64_t key = 0;  // hash of the process's log name and the communicator
  uint64_t comm_id = 0;
  int rank = -1;
  uint64_t oldest_seq = 0;
  int64_t oldest_age_ns = 0;
  uint64_t completed = 0;
  int64_t at_mono = 0;
  float waiting = 0;  // average of "had an op in flight at the heartbeat"
  uint32_t samples = 0;
  uint32_t slow_streak = 0;  // heartbeats in a row that is_slow_member held
};

// Learns from one member's new heartbeat, given what it showed the last time (`prev`, null for
// a new member), and returns its new track. Updates the model's latency, gap and progress, and
// its waiting sum (the previous contribution replaced by the new one).
MemberTrack observe(CommModel& model, const MemberTrack* prev, uint64_t key, int rank,
                    uint64_t comm_id, uint64_t oldest_seq, int64_t oldest_age_ns,
                    uint64_t completed, int64_t now_mono);
// A member that is gone: its waiting average leaves the model's sum.
void leave(CommModel& model, const MemberTrack& m);

// Whether this member looks like a slow rank of its communicator now: it has enough samples, the
// communicator completed ops lately (within `recent_ns`), its peers wait at most heartbeats (on
// average at least half of them) and it waits less than a fifth as often as they do.
bool is_slow_member(const CommModel& model, const MemberTrack& m, int64_t now_mono,
                    int64_t recent_ns);
// The peers' waiting average, without this member.
double peers_waiting(const CommModel& model, const MemberTrack& m);

}  // namespace fr::daemon
