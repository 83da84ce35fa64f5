// Fail-slow detection (#38): which rank, GPU or link keeps a running job slower than it should be.
// Pure logic, no clock and no socket: the coordinator feeds it what each heartbeat says of each
// member (a process on a communicator) and asks it to judge once a heartbeat interval.
//
// Three signals, each compared with the same member's peers on the same communicator, never
// with a fixed expectation, so a fast and a slow job are judged alike:
//   - host: when each rank called each recent collective (its node's clock moved onto the
//     coordinator's). The same collective (comm, seq) is joined across ranks from every node; a
//     rank's lateness is its call time minus the median call time of the collective. A rank is
//     late at a collective when that lateness passes max(floor, k x the communicator's noise),
//     the noise being a decaying average of the collectives' median absolute lateness: heavy
//     jitter raises the bar, a quiet job lowers it (as the stall threshold adapts, stall.h).
//     Late at most of its recent collectives: slow.
//   - gpu: the kernel time of the rank's recent collectives (profiler plugin), a decaying log
//     average per (member, op), over the median of its peers' averages for the same op. Without
//     kernel times, a rank late by the host signal is judged by its GPU's progress counters: a
//     rank whose host waits for its GPU has a collective in flight (handed to the GPU, not done)
//     at as many heartbeats as its peers, who wait for it in flight; a rank whose host is slow
//     has nothing in flight while they wait: its GPU is done and waits for its host.
//   - link: the mean proxy-step time per (sender, receiver, channel), over the median of the
//     communicator's links; and, where the steps are lockstep (a ring: every link's step waits
//     for the slowest, so all step times stretch alike), how often the heartbeats catch a
//     sender on the wire (SEND_WAIT), per (sender, receiver) over its channels, against the
//     other pairs: the slow link's sender is on the wire for most of each op, the others wait
//     for credit or data, or are done with their part. Where the states suffice to judge, they
//     decide alone.
// A candidate must hold at `streak` judgements in a row to become a finding, and a finding clears
// after `clear_streak` judgements without it: ranks slow in turn by chance, a checkpoint pause
// (every rank waits alike) or one slow collective raise nothing. A rank found slow on the GPU or
// the host (or late, or slow on its GPU, at this judgement without a finding yet) is not also
// blamed for its links, on any communicator, nor are the links into and out of its node: its
// node's ranks forward to it over shared memory (no proxy steps) and fall behind receiving, so the
// sender of the ring link that feeds the node waits on the wire as a slow link's sender would.
//
// Bounds: communicators tracked (max_comms), members per communicator (max_members), collectives
// waiting to be joined per communicator (max_pending, the oldest judged first), links per
// communicator (max_links). Past them new entries are not tracked.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/slow_rule.h"
#include "daemon/base/model.h"

namespace fr::daemon {

struct SlowConfig {
  uint32_t window = 16;                    // a member's recent collectives judged for lateness
  double late_share = 0.75;                // ... of which it must be late at this share
  int64_t late_floor_ns = 2'000'000;       // host: late by at least this
  double noise_factor = 3;                 // ... and by this many times the communicator's noise
  double gpu_floor = fr::slow::kGpuFloor;  // gpu: at least this many times the peers' median
  double link_floor =
      fr::slow::kLinkFloor;  // link: at least this many times the communicator's median link
  double ratio_noise_factor =
      fr::slow::kRatioNoiseFactor;  // ... and 1 + this x the spread of the others' ratios
  uint32_t min_gpu_samples =
      fr::slow::kMinGpuSamples;  // kernel times a member needs before it is judged
  // GPU times from the sampled markers below this count as this: a sample period (frd node's
  // default) rounds them, so 0.3 ms against 0 is no ratio.
  int64_t sampled_floor_ns = fr::slow::kSampledFloorNs;
  uint32_t min_link_samples = fr::slow::kMinLinkSamples;
  uint32_t min_wire_samples =
      fr::slow::kMinWireSamples;  // states of a sender pair's slots before it is judged
  // A late rank without kernel times: how often its heartbeats show a collective of it handed to
  // its GPU and not done (in flight), against its peers', counted from when a member first turned
  // late. Where the members report these counters, a late rank's finding waits for
  // min_busy_samples heartbeats of it, and its cause is judged again at every judgement as they
  // accumulate; judged where the peers' median share reaches busy_floor
  // (they wait in flight for it). The peers are those on its node where it has any: sampled at
  // the same instants, which a job's steady pace and the heartbeats' fixed period cannot alias.
  uint32_t min_busy_samples = fr::slow::kMinBusySamples;
  double busy_floor = fr::slow::kBusyFloor;
  double busy_ratio =
      fr::slow::kBusyRatio;  // at least this share of the peers': its GPU, not its host
  double wire_share = fr::slow::kWireShare;  // ... on the wire at least this share of them
  double wire_ratio =
      fr::slow::kWireRatio;  // ... and this many times the other pairs' median share
  uint32_t min_wire_hits =
      fr::slow::kMinWireHits;  // ... and on the wire in this many samples at least (not 2 of 12)
  // A finding must cost the job something: its excess over its peers per op (host: lateness;
  // link: per step x steps) at least min_excess_ns, and where the pace is known at least
  // min_loss_percent of the time between collectives (microsecond noise on fast links is not slow).
  int64_t min_excess_ns = fr::slow::kMinExcessNs;
  double min_loss_percent = 1;
  uint32_t streak = 3;                // judgements in a row before a candidate becomes a finding
  uint32_t clear_streak = 5;          // judgements in a row without it before a finding clears
  int64_t join_ns = 3'000'000'000;    // a collective is joined this long after its first arrival
  int64_t stale_ns = 30'000'000'000;  // a communicator not heard of this long is forgotten
  size_t max_comms = 4096;
  size_t max_members = 1 << 20;
  size_t max_pending = 32;
  size_t max_links = 4096;
};

enum class SlowCause { kHost, kGpu, kLink };
const char* slow_cause_name(SlowCause c);

// A rank, GPU or link found slow, with its evidence.
struct SlowFinding {
  SlowCause cause = SlowCause::kHost;
  uint64_t comm_id = 0;
  std::string comm_name;
  int rank = -1;          // global rank: the slow host or GPU; link: the receiving (waiting) rank
  int peer_rank = -1;     // link: the sending rank
  int channel = -1;       // link
  double factor = 1;      // how many times slower than its peers
  double share = 0;       // host: share of recent collectives it was late at; link: on the wire
  int64_t value_ns = 0;   // host: median lateness; gpu: median kernel time; link: step time
  int64_t others_ns = 0;  // the peers' typical value (host: their median |lateness|)
  int64_t step_ns = 0;    // time between collectives now (with the straggler)
  int64_t step_without_ns = 0;  // ... estimated without it
  int64_t since_mono = 0;
  // host: the rank's kernel times were judged against its peers' and are not slow. Without them a GPU slower than its
  // peers', which a host that synchronizes with it waits for, makes the same late calls.
  bool gpu_timed = false;
  // Its GPU times (gpu: the finding's; host: the ones judged not slow) came from the stream's
  // progress markers as the node samples them, not from the profiler's kernel channels.
  bool gpu_sampled = false;
  // Without kernel times, from the GPU's progress counters: the share of heartbeats at which the
  // rank had a collective in flight on its GPU, and its peers' median share (0: not judged).
  double busy_share = 0;
  double peers_busy_share = 0;
  // host or gpu: the slowing clock throttle reasons NVML reports for the rank's GPU
  // ("HwThermalSlowdown", ...), as its node's heartbeats last said. Evidence only: a throttled GPU
  // that is not slow raises nothing.
  std::vector<std::string> nvml_throttle;
  std::string key() const;  // "host:6", "gpu:6", "link:2->3"
  // What it names: "rank:6" for a host or GPU (a finding whose cause the GPU's progress counters
  // revise stays the same finding), the key for a link.
  std::string subject() const;
  std::string evidence() const;  // one paragraph an operator reads
  double loss_percent() const;   // share of the step time the straggler costs
};

// What each rank shows now (the metrics): its lateness and GPU time ratio on its communicator
// with the most members.
struct SlowRankStat {
  int rank = -1;
  uint64_t comm_id = 0;
  int64_t late_ns = 0;   // median lateness over its window (can be negative: early)
  double gpu_ratio = 0;  // 0 unknown
};
struct SlowLinkStat {
  int src = -1, dst = -1, channel = -1;
  uint64_t comm_id = 0;
  int64_t step_ns = 0;
  double ratio = 0;
};

class SlowDetector {
 public:
  explicit SlowDetector(SlowConfig cfg = {});

  // One member's heartbeat: its communicator, its place in it and in the job, its recent
  // collectives (times on its node's clock, moved by offset_ns onto the coordinator's).
  // `node` names the member's node (its heartbeats sample its node's members at one instant);
  // 0 unknown.
  void member(const CommProgress& c, int global_rank, int64_t offset_ns, int64_t now_mono,
              uint64_t node = 0);
  // One process's proxy-step timings (its place in each communicator from p.comms; the peers'
  // global ranks come from their own member() reports).
  void links(const ProcessReport& p, int64_t now_mono);
  // A process's GPU clock throttle reasons (ProcessReport::gpu_throttle), by its global rank:
  // added to the evidence of a finding on that rank.
  void throttle(int global_rank, uint64_t mask);
  // Joins what is due, judges every member and link, and updates the findings. Returns whether
  // the set of findings changed.
  bool judge(int64_t now_mono);

  const std::vector<SlowFinding>& findings() const { return findings_; }
  std::vector<SlowRankStat> rank_stats() const;
  std::vector<SlowLinkStat> link_stats() const;
  const SlowConfig& config() const { return cfg_; }
  size_t tracked_comms() const { return comms_.size(); }

 private:
  // Per op: kernel times, else the sampled markers' (join_markers); the rule is shared with
  // fr-analyze.
  using GpuAvg = fr::slow::GpuAvg;
  struct Member {
    int global_rank = -1;
    uint64_t last_seq = 0;      // newest collective taken from its reports
    std::vector<int64_t> late;  // ring of its last `window` lateness values
    size_t late_next = 0;
    std::vector<GpuAvg> gpu;  // per op
    uint32_t host_streak = 0, gpu_streak = 0;
    double gpu_ratio = 0;
    bool gpu_sampled = false;  // its ratio rests on the sampled markers
    double gpu_bar = 0;        // the bar its worst op's ratio was judged against
    // Its heartbeats since the communicator's late period began, and those with a collective of
    // it in flight.
    uint32_t period_n = 0, period_busy = 0;
    uint64_t node = 0;
  };
  // One member's arrival at a collective, on the coordinator's clock: its call and, where its node
  // samples the GPU's markers, when its GPU reached and finished the collective (0 unknown).
  struct Arrival {
    int rank = -1;
    int64_t at = 0;
    int64_t gpu_start = 0, gpu_end = 0;
    bool operator<(const Arrival& o) const {
      return rank < o.rank || (rank == o.rank && at < o.at);
    }
  };
  struct Pending {
    int64_t first_mono = 0;
    uint32_t op = 0;
    std::vector<Arrival> arrivals;
  };
  struct Link : fr::slow::LinkStats {
    int src = -1, dst = -1, channel = -1;  // comm ranks
    uint32_t streak = 0;
    double ratio = 0;
  };
  struct Comm {
    int size = -1;
    std::string name;
    int64_t last_mono = 0;
    std::unordered_map<int, Member> members;  // by comm rank
    std::map<uint64_t, Pending> pending;      // by seq
    double noise_ns = 0;                      // decaying median |lateness|
    uint32_t joined = 0;
    // Ring: (sequence number, median call time) of the last joined collectives.
    std::vector<std::pair<uint64_t, int64_t>> medians;
    size_t median_next = 0;
    std::set<uint64_t> done;  // collectives joined lately (their late reports are dropped)
    std::map<std::tuple<int, int, int>, Link> links;      // (src, dst, channel)
    std::map<std::pair<int, int>, uint32_t> wire_streak;  // (src, dst)
    bool counters = false;     // a member reported a collective handed to its GPU
    bool markers = false;      // a member reported a collective's sampled GPU times
    bool late_period = false;  // a member is late: its members' heartbeats are counted
  };

  void finish(Comm& c, std::map<uint64_t, Pending>::iterator p);
  // Whether every member reported the collective (with its GPU times, where markers are sampled).
  static bool ready(const Comm& c, const Pending& p);
  // A member's GPU times for a collective it reported before, without them.
  void late_markers(Comm& c, int rank, const CollTiming& t, int64_t offset_ns);
  void join(Comm& c, uint64_t seq, Pending& p);
  // Each member's own GPU time at a collective every member's markers timed: from when the last
  // member's GPU reached it (before that its GPU waits for the others) to when its own finished.
  void join_markers(Comm& c, const Pending& p);
  int64_t step_ns(const Comm& c) const;
  void judge_hosts(uint64_t id, Comm& c, int64_t now_mono, std::vector<SlowFinding>* out);
  void judge_gpus(uint64_t id, Comm& c, int64_t now_mono, std::vector<SlowFinding>* out);
  // A late rank without kernel times: its GPU's progress counters against its peers' say whether
  // its host waits for its GPU (cause gpu) or its GPU for its host (host).
  void attribute_late(const Comm& c, int rank, SlowFinding* f) const;
  void judge_links(uint64_t id, Comm& c, int64_t now_mono, std::vector<SlowFinding>* out);
  // Whether the senders' states were enough to judge the communicator's links by (then
  // judge_links is not asked).
  bool judge_wire(uint64_t id, Comm& c, int64_t now_mono, std::vector<SlowFinding>* out);
  bool merge(std::vector<SlowFinding> now, int64_t now_mono);
  // Counts the judgements in a row that `holds`; whether to report it now (it held long enough,
  // or is a finding already).
  bool report(uint32_t* streak, bool holds, const std::string& key) const;
  static int64_t without(int64_t step, int64_t loss);
  // Whether a candidate costs enough to be worth a finding (min_excess_ns, min_loss_percent).
  bool worth(const SlowFinding& f, int64_t excess_ns) const;
  // Whether a link (comm ranks) is not to be blamed: a rank at either end, or one on either end's
  // node, is slow or about to be found slow on its host or GPU (excused_ranks_, excused_nodes_).
  bool excused(const Comm& c, int src, int dst) const;
  // Whether a link on the wire at `share` of its samples, into comm rank `dst`, waits for a slow
  // link out of dst's node (on the wire at least twice as often): the slow link's sender consumes
  // what its node's ranks forward to it late, and they fall behind receiving, on every
  // communicator (fed_nodes_). A link that is a finding already stays one.
  bool backpressured(const Comm& c, int dst, double share, const std::string& key) const;
  // Whether a member's GPU times were judged and are clearly not slow (its late host is slow).
  bool gpu_clear(const Member& m) const;

  SlowConfig cfg_;
  std::unordered_map<uint64_t, Comm> comms_;
  std::vector<SlowFinding> findings_;
  std::map<std::string, uint32_t> missing_;
  std::set<int> excused_ranks_;       // global ranks slow or late at this judgement
  std::set<uint64_t> excused_nodes_;  // ... and their nodes
  std::map<int, uint64_t> throttle_;  // global rank -> its GPU's throttle reasons (nonzero only)
  std::set<std::string> active_;      // keys of the findings at the start of a judgement
  // The node of each slow link's sender (a finding at the start of a judgement) -> the highest
  // share of samples such a link was on the wire: a link into that node waits for it.
  std::map<uint64_t, double> fed_nodes_;
};

}  // namespace fr::daemon
