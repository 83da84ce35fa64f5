// See slow_detector.h.
#include "daemon/logic/slow_detector.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <tuple>

#include "fr/flight_log.h"

namespace fr::daemon {

namespace {

constexpr double kNoiseAlpha = 0.1;  // weight of the newest collective in a communicator's noise
constexpr double kAvgAlpha = fr::slow::kAvgAlpha;
constexpr uint32_t kMinJoined = 8;  // collectives joined before a communicator's hosts are judged

using fr::slow::median_of;
using fr::slow::ratio_bar;

}  // namespace

SlowDetector::SlowDetector(SlowConfig cfg) : cfg_(cfg) {}

void SlowDetector::member(const CommProgress& cp, int global_rank, int64_t offset_ns,
                          int64_t now_mono, uint64_t node) {
  if (cp.rank < 0 || cp.size < 2) return;
  auto it = comms_.find(cp.comm_id);
  if (it == comms_.end()) {
    if (comms_.size() >= cfg_.max_comms) return;
    it = comms_.emplace(cp.comm_id, Comm{}).first;
  }
  Comm& c = it->second;
  c.size = cp.size;
  c.last_mono = now_mono;
  if (c.name.empty() && !cp.name.empty()) c.name = cp.name;
  auto m = c.members.find(cp.rank);
  if (m == c.members.end()) {
    if (c.members.size() >= cfg_.max_members) return;
    m = c.members.emplace(cp.rank, Member{}).first;
  }
  Member& mem = m->second;
  mem.global_rank = global_rank;
  mem.node = node;
  // Once a heartbeat: a collective of it handed to its GPU and not done, or none.
  c.counters |= cp.enqueued > 0;
  if (c.late_period && mem.period_n < (1u << 30)) {
    mem.period_n++;
    mem.period_busy += cp.enqueued > cp.completed;
  }
  for (const CollTiming& t : cp.recent) {
    const bool timed = t.gpu_start_ns > 0 && t.gpu_end_ns >= t.gpu_start_ns;
    c.markers |= timed;
    if (t.seq <= mem.last_seq) {  // reported again: its GPU may have finished it since
      if (timed) late_markers(c, cp.rank, t, offset_ns);
      continue;
    }
    mem.last_seq = t.seq;
    if (t.gpu_ns > 0) {
      auto g = std::find_if(mem.gpu.begin(), mem.gpu.end(),
                            [&](const GpuAvg& a) { return a.op == t.op; });
      if (g == mem.gpu.end() && mem.gpu.size() < 8) g = mem.gpu.insert(mem.gpu.end(), {t.op});
      if (g != mem.gpu.end()) g->add_kernel(t.gpu_ns);  // kernel times first
    }
    auto p = c.pending.find(t.seq);
    if (p == c.pending.end()) {
      if (c.done.count(t.seq)) continue;  // joined already: this member reported it late
      if (c.pending.size() >= cfg_.max_pending) finish(c, c.pending.begin());
      p = c.pending.emplace(t.seq, Pending{now_mono, t.op, {}}).first;
    }
    p->second.arrivals.push_back({cp.rank, t.call_ns + offset_ns,
                                  timed ? t.gpu_start_ns + offset_ns : 0,
                                  timed ? t.gpu_end_ns + offset_ns : 0});
    if (ready(c, p->second)) finish(c, p);
  }
}

bool SlowDetector::ready(const Comm& c, const Pending& p) {
  if (int(p.arrivals.size()) < c.size) return false;
  // Where the members' markers are sampled, a collective waits (join_ns at most) for every
  // member's GPU times: the newest op of a heartbeat is often not finished yet.
  if (!c.markers) return true;
  return std::all_of(p.arrivals.begin(), p.arrivals.end(),
                     [](const Arrival& a) { return a.gpu_start > 0; });
}

void SlowDetector::late_markers(Comm& c, int rank, const CollTiming& t, int64_t offset_ns) {
  auto p = c.pending.find(t.seq);
  if (p == c.pending.end()) return;
  for (Arrival& a : p->second.arrivals)
    if (a.rank == rank && a.gpu_start == 0) {
      a.gpu_start = t.gpu_start_ns + offset_ns;
      a.gpu_end = t.gpu_end_ns + offset_ns;
    }
  if (ready(c, p->second)) finish(c, p);
}

void SlowDetector::finish(Comm& c, std::map<uint64_t, Pending>::iterator p) {
  join(c, p->first, p->second);
  c.done.insert(p->first);
  while (c.done.size() > 4 * cfg_.max_pending) c.done.erase(c.done.begin());
  c.pending.erase(p);
}

void SlowDetector::join(Comm& c, uint64_t seq, Pending& p) {
  auto& a = p.arrivals;
  // A collective seen by fewer than half the members says little of who is late.
  if (a.size() < 3 || a.size() * 2 < size_t(c.size)) return;
  std::sort(a.begin(), a.end());
  a.erase(std::unique(a.begin(), a.end(),
                      [](const auto& x, const auto& y) { return x.rank == y.rank; }),
          a.end());
  join_markers(c, p);
  std::vector<int64_t> t;
  t.reserve(a.size());
  for (const auto& x : a) t.push_back(x.at);
  const int64_t med = median_of(t);
  std::vector<int64_t> dev;
  dev.reserve(a.size());
  for (const auto& [rank, at, gs, ge] : a) {
    dev.push_back(std::llabs(at - med));
    auto m = c.members.find(rank);
    if (m == c.members.end()) continue;
    Member& mem = m->second;
    if (mem.late.size() < cfg_.window) {
      mem.late.push_back(at - med);
    } else {
      mem.late[mem.late_next] = at - med;
      mem.late_next = (mem.late_next + 1) % cfg_.window;
    }
  }
  const double noise = double(median_of(dev));
  c.noise_ns = c.joined == 0 ? noise : (1 - kNoiseAlpha) * c.noise_ns + kNoiseAlpha * noise;
  c.joined++;
  // The pace of the job: the collectives' median call times.
  if (c.medians.size() < cfg_.window) {
    c.medians.emplace_back(seq, med);
  } else {
    c.medians[c.median_next] = {seq, med};
    c.median_next = (c.median_next + 1) % cfg_.window;
  }
}

void SlowDetector::join_markers(Comm& c, const Pending& p) {
  if (p.arrivals.size() != size_t(c.size)) return;  // the last to reach it may be the one missing
  std::vector<std::pair<int64_t, int64_t>> marks;
  marks.reserve(p.arrivals.size());
  for (const Arrival& x : p.arrivals) marks.emplace_back(x.gpu_start, x.gpu_end);
  const std::vector<int64_t> own = fr::slow::sampled_gpu_times(marks);
  for (size_t i = 0; i < own.size(); ++i) {
    auto m = c.members.find(p.arrivals[i].rank);
    if (m == c.members.end()) continue;
    auto& gpu = m->second.gpu;
    auto g = std::find_if(gpu.begin(), gpu.end(), [&](const GpuAvg& a) { return a.op == p.op; });
    if (g == gpu.end() && gpu.size() < 8) g = gpu.insert(gpu.end(), {p.op});
    if (g != gpu.end()) g->add_sampled(own[i], cfg_.sampled_floor_ns);  // kernel times first
  }
}

int64_t SlowDetector::step_ns(const Comm& c) const {
  // The mean time per collective over the last joined ones (several may share a step: the median
  // gap would be one of those; collectives not joined count by their sequence numbers).
  if (c.medians.size() < 3) return 0;
  const auto [lo, hi] = std::minmax_element(c.medians.begin(), c.medians.end());
  if (hi->first <= lo->first || hi->second <= lo->second) return 0;
  return (hi->second - lo->second) / int64_t(hi->first - lo->first);
}

void SlowDetector::links(const ProcessReport& p, int64_t now_mono) {
  for (const LinkTiming& l : p.links) {
    auto it = comms_.find(l.comm_id);
    if (it == comms_.end() || l.step_ns <= 0 || l.steps == 0) continue;
    Comm& c = it->second;
    int self = -1;
    for (const auto& cp : p.comms)
      if (cp.comm_id == l.comm_id) self = cp.rank;
    if (self < 0 || l.peer < 0 || l.peer >= c.size || l.peer == self) continue;
    // The sender's and the receiver's slots time the same connection: one entry for both.
    const int src = l.send ? self : l.peer, dst = l.send ? l.peer : self;
    auto key = std::make_tuple(src, dst, int(l.channel));
    auto k = c.links.find(key);
    if (k == c.links.end()) {
      if (c.links.size() >= cfg_.max_links) continue;
      k = c.links.emplace(key, Link{{}, src, dst, int(l.channel)}).first;
    }
    Link& link = k->second;
    if (link.sample_state(l.send, l.state)) c.last_mono = now_mono;
    if (!link.learn_op(l.op_seq, l.step_ns, l.steps)) continue;
    c.last_mono = now_mono;
  }
}

void SlowDetector::throttle(int global_rank, uint64_t mask) {
  if (global_rank < 0) return;
  if (mask == 0)
    throttle_.erase(global_rank);
  else if (throttle_.size() < cfg_.max_members || throttle_.count(global_rank))
    throttle_[global_rank] = mask;
}

bool SlowDetector::judge(int64_t now_mono) {
  active_.clear();
  for (const auto& f : findings_) active_.insert(f.key());
  std::vector<SlowFinding> now;
  excused_ranks_.clear();
  excused_nodes_.clear();
  for (auto it = comms_.begin(); it != comms_.end();) {
    Comm& c = it->second;
    if (now_mono - c.last_mono > cfg_.stale_ns) {
      it = comms_.erase(it);
      continue;
    }
    // Collectives whose missing members did not report within join_ns: joined as they are.
    for (auto p = c.pending.begin(); p != c.pending.end();) {
      auto next = std::next(p);
      if (now_mono - p->second.first_mono > cfg_.join_ns) finish(c, p);
      p = next;
    }
    const size_t before = now.size();
    judge_gpus(it->first, c, now_mono, &now);
    judge_hosts(it->first, c, now_mono, &now);
    // A rank slow on its host or GPU slows every link it is on: those are not blamed.
    for (size_t i = before; i < now.size(); ++i) excused_ranks_.insert(now[i].rank);
    // So does one late or slow on its GPU and not a finding yet (its streak is building, or its
    // cause waits for the GPU's counters).
    for (const auto& [_, m] : c.members)
      if (m.host_streak > 0 || m.gpu_streak > 0) excused_ranks_.insert(m.global_rank);
    ++it;
  }
  // ... on every communicator, and the links into and out of its node: it consumes what its
  // node's ranks forward to it late, so they fall behind receiving too, and the sender of the link
  // that feeds its node waits on the wire for them (backpressure through the node's shared memory,
  // which reports no proxy steps).
  for (const auto& [_, c] : comms_)
    for (const auto& [r, m] : c.members)
      if (m.node != 0 && excused_ranks_.count(m.global_rank)) excused_nodes_.insert(m.node);
  fed_nodes_.clear();
  for (const auto& f : findings_) {
    if (f.cause != SlowCause::kLink || f.share <= 0) continue;
    for (const auto& [_, c] : comms_)
      for (const auto& [r, m] : c.members)
        if (m.global_rank == f.peer_rank && m.node != 0) {
          double& s = fed_nodes_[m.node];
          s = std::max(s, f.share);
        }
  }
  for (auto& [id, c] : comms_) {
    // Where the senders' states tell which link the others wait for, they decide: a slow link
    // stretches the step times of the links that wait for it too.
    if (!judge_wire(id, c, now_mono, &now)) judge_links(id, c, now_mono, &now);
  }
  const bool changed = merge(std::move(now), now_mono);
  for (auto& f : findings_) {
    auto t = throttle_.find(f.rank);
    f.nvml_throttle = f.cause == SlowCause::kLink || t == throttle_.end()
                          ? std::vector<std::string>{}
                          : slowing_throttle_names(t->second);
  }
  return changed;
}

bool SlowDetector::report(uint32_t* streak, bool holds, const std::string& key) const {
  *streak = holds ? *streak + 1 : 0;
  return holds && (*streak >= cfg_.streak || active_.count(key));
}

int64_t SlowDetector::without(int64_t step, int64_t loss) {
  if (step <= 0) return 0;
  return std::max(step / 20, step - std::max<int64_t>(0, loss));
}

bool SlowDetector::excused(const Comm& c, int src, int dst) const {
  for (int r : {src, dst}) {
    auto m = c.members.find(r);
    if (m == c.members.end()) continue;
    if (excused_ranks_.count(m->second.global_rank)) return true;
    if (m->second.node != 0 && excused_nodes_.count(m->second.node)) return true;
  }
  return false;
}

bool SlowDetector::backpressured(const Comm& c, int dst, double share,
                                 const std::string& key) const {
  if (active_.count(key)) return false;
  auto m = c.members.find(dst);
  if (m == c.members.end() || m->second.node == 0) return false;
  auto fed = fed_nodes_.find(m->second.node);
  return fed != fed_nodes_.end() && fr::slow::waits_for_slow_link(share, fed->second);
}

bool SlowDetector::gpu_clear(const Member& m) const {
  return fr::slow::gpu_clear(m.gpu_ratio, m.gpu_bar, m.gpu_sampled, cfg_.gpu_floor);
}

bool SlowDetector::worth(const SlowFinding& f, int64_t excess_ns) const {
  if (excess_ns < cfg_.min_excess_ns) return false;
  return f.step_ns <= 0 || f.loss_percent() >= cfg_.min_loss_percent;
}

void SlowDetector::judge_hosts(uint64_t id, Comm& c, int64_t now_mono,
                               std::vector<SlowFinding>* out) {
  if (c.joined < kMinJoined) return;
  const int64_t bar =
      std::max<int64_t>(cfg_.late_floor_ns, int64_t(cfg_.noise_factor * c.noise_ns));
  std::vector<std::pair<int, int64_t>> late;  // (comm rank, median lateness) of candidates
  size_t judged = 0;
  bool any_late = false;
  const int64_t step = step_ns(c);
  for (auto& [rank, m] : c.members) {
    if (m.late.size() < cfg_.window / 2) {
      m.host_streak = 0;
      continue;
    }
    judged++;
    size_t n = 0;
    for (int64_t l : m.late) n += l > bar;
    const double share = double(n) / double(m.late.size());
    const int64_t med = median_of(m.late);
    SlowFinding probe;
    probe.step_ns = step;
    probe.step_without_ns = without(step, med);
    const bool holds = share >= cfg_.late_share && med > bar && worth(probe, med);
    const std::string g = std::to_string(m.global_rank);
    const bool shown = active_.count("host:" + g) || active_.count("gpu:" + g);
    any_late |= holds || shown;  // the period lasts while a finding does
    // With the GPU's progress counters the cause is decided on the heartbeats since the lateness
    // began: a new finding waits for enough of them.
    // (Not where its GPU times were judged and are not slow: those say host already.)
    const bool gpu_not_slow = gpu_clear(m);
    const bool waiting =
        holds && !shown && c.counters && !gpu_not_slow && m.period_n < cfg_.min_busy_samples;
    m.host_streak = holds ? m.host_streak + 1 : 0;
    if (holds && !waiting && (m.host_streak >= cfg_.streak || shown)) late.emplace_back(rank, med);
  }
  if (any_late != c.late_period) {  // a late period begins or ends: its counts start afresh
    c.late_period = any_late;
    for (auto& [_, m] : c.members) m.period_n = m.period_busy = 0;
  }
  // More than a third of the members late is a shift of the whole job (or of a node's clock),
  // not a straggler.
  if (late.empty() || late.size() * 3 > judged) return;
  std::vector<int64_t> typical;
  for (const auto& [rank, m] : c.members)
    if (!m.late.empty()) typical.push_back(std::llabs(median_of(m.late)));
  const int64_t others = median_of(typical);
  for (const auto& [rank, med] : late) {
    const Member& m = c.members[rank];
    SlowFinding f;
    f.cause = SlowCause::kHost;
    f.comm_id = id;
    f.comm_name = c.name;
    f.rank = m.global_rank;
    size_t n = 0;
    for (int64_t l : m.late) n += l > bar;
    f.share = double(n) / double(m.late.size());
    f.value_ns = med;
    f.others_ns = others;
    // Its kernel times judged against its peers' (judge_gpus ran first) and not slow.
    f.gpu_timed = gpu_clear(m);
    f.gpu_sampled = f.gpu_timed && m.gpu_sampled;
    f.step_ns = step;
    f.step_without_ns = without(step, med);
    f.factor = f.step_without_ns > 0 ? double(step) / double(f.step_without_ns) : 1;
    f.since_mono = now_mono;
    if (!f.gpu_timed) attribute_late(c, rank, &f);
    out->push_back(std::move(f));
  }
}

void SlowDetector::attribute_late(const Comm& c, int rank, SlowFinding* f) const {
  auto share = [](const Member& m) { return double(m.period_busy) / double(m.period_n); };
  const Member& m = c.members.at(rank);
  const std::string g = std::to_string(m.global_rank);
  if (active_.count("gpu:" + g)) f->cause = SlowCause::kGpu;  // until judged again
  if (m.period_n < cfg_.min_busy_samples) return;
  // Its node's other members where it has any (sampled at the same instants), else all.
  std::vector<double> peers, mates;
  for (const auto& [r, p] : c.members) {
    if (r == rank || p.period_n < cfg_.min_busy_samples) continue;
    peers.push_back(share(p));
    if (m.node != 0 && p.node == m.node) mates.push_back(share(p));
  }
  if (!mates.empty()) peers = std::move(mates);
  if (peers.empty()) return;
  const double others = median_of(peers);
  // Peers seldom in flight while they wait for it: no counters to judge by.
  if (others < cfg_.busy_floor) return;
  f->busy_share = share(m);
  f->peers_busy_share = others;
  // Its host waits for its GPU. How much slower the GPU itself is, counters cannot tell: what it
  // costs is what the host signal measured (the lateness, the step with and without it). Judged
  // again as the heartbeats accumulate, with a margin around the bar for a cause already given.
  double bar = cfg_.busy_ratio;
  if (active_.count("gpu:" + g)) bar -= 0.1;
  if (active_.count("host:" + g)) bar += 0.1;
  f->cause = f->busy_share >= bar * others ? SlowCause::kGpu : SlowCause::kHost;
}

void SlowDetector::judge_gpus(uint64_t id, Comm& c, int64_t now_mono,
                              std::vector<SlowFinding>* out) {
  // Every op the members timed, each judged apart; a member's ratio is its worst op's.
  std::set<uint32_t> ops;
  for (auto& [rank, m] : c.members) {
    m.gpu_ratio = 0;
    m.gpu_sampled = false;
    m.gpu_bar = 0;
    for (const auto& g : m.gpu) ops.insert(g.op);
  }
  struct Worst {
    double ratio = 0, bar = 0;
    int64_t value = 0, others = 0;
    bool sampled = false;
  };
  std::unordered_map<int, Worst> worst;
  for (uint32_t op : ops) {
    std::vector<std::pair<int, double>> avg;
    bool sampled = false;  // some of them from the markers
    for (const auto& [rank, m] : c.members)
      for (const auto& g : m.gpu)
        if (g.op == op && g.n >= cfg_.min_gpu_samples) {
          avg.emplace_back(rank, g.log_avg);
          sampled |= g.sampled;
        }
    if (avg.size() < 3) continue;
    std::vector<double> l;
    for (const auto& [_, v] : avg) l.push_back(v);
    const fr::slow::Spread sp = fr::slow::spread_of(l, cfg_.gpu_floor, cfg_.ratio_noise_factor);
    const double med = sp.median_log, bar = sp.bar;
    for (const auto& [rank, v] : avg) {
      const double r = std::exp(v - med);
      c.members[rank].gpu_ratio = std::max(c.members[rank].gpu_ratio, r);
      Worst& w = worst[rank];
      if (r / bar > (w.bar > 0 ? w.ratio / w.bar : 0))
        w = {r, bar, fr::slow::ns_of_log(v), fr::slow::ns_of_log(med), sampled};
      if (r > 0) c.members[rank].gpu_sampled |= sampled;
      c.members[rank].gpu_bar = std::max(c.members[rank].gpu_bar, bar);
    }
  }
  const int64_t step = step_ns(c);
  size_t flagged = 0;
  std::vector<SlowFinding> found;
  for (auto& [rank, m] : c.members) {
    auto w = worst.find(rank);
    SlowFinding f;
    if (w != worst.end()) {
      f.cause = SlowCause::kGpu;
      f.comm_id = id;
      f.comm_name = c.name;
      f.rank = m.global_rank;
      f.factor = w->second.ratio;
      f.gpu_sampled = w->second.sampled;
      f.value_ns = w->second.value;
      f.others_ns = w->second.others;
      f.step_ns = step;
      f.step_without_ns = without(step, f.value_ns - f.others_ns);
      f.since_mono = now_mono;
    }
    const bool holds =
        w != worst.end() && w->second.ratio >= w->second.bar && worth(f, f.value_ns - f.others_ns);
    if (!report(&m.gpu_streak, holds, "gpu:" + std::to_string(m.global_rank))) continue;
    flagged++;
    found.push_back(std::move(f));
  }
  if (flagged * 3 <= worst.size())
    for (auto& f : found) out->push_back(std::move(f));
}

namespace {

// A link finding on communicator `id`: comm-local sender and receiver named by their global
// ranks (-1 for one the communicator's members do not list), the receiver waiting.
template <typename CommT>
SlowFinding link_finding(uint64_t id, const CommT& c, int src, int dst, int channel) {
  auto s = c.members.find(src), d = c.members.find(dst);
  SlowFinding f;
  f.cause = SlowCause::kLink;
  f.comm_id = id;
  f.comm_name = c.name;
  f.rank = d == c.members.end() ? -1 : d->second.global_rank;
  f.peer_rank = s == c.members.end() ? -1 : s->second.global_rank;
  f.channel = channel;
  return f;
}

}  // namespace

void SlowDetector::judge_links(uint64_t id, Comm& c, int64_t now_mono,
                               std::vector<SlowFinding>* out) {
  std::vector<double> l;
  for (const auto& [_, k] : c.links)
    if (k.n >= cfg_.min_link_samples) l.push_back(k.log_avg);
  if (l.size() < 3) return;
  const fr::slow::Spread sp = fr::slow::spread_of(l, cfg_.link_floor, cfg_.ratio_noise_factor);
  const double med = sp.median_log, bar = sp.bar;
  const int64_t step = step_ns(c);
  std::vector<SlowFinding> found;
  size_t excused_n = 0;
  for (auto& [key, k] : c.links) {
    if (k.n < cfg_.min_link_samples) continue;
    k.ratio = std::exp(k.log_avg - med);
    SlowFinding f = link_finding(id, c, k.src, k.dst, k.channel);
    const int gsrc = f.peer_rank, gdst = f.rank;
    f.factor = k.ratio;
    f.value_ns = fr::slow::ns_of_log(k.log_avg);
    f.others_ns = fr::slow::ns_of_log(med);
    f.step_ns = step;
    const int64_t excess = fr::slow::link_excess_ns(f.value_ns, f.others_ns, k.steps);
    f.step_without_ns = without(step, excess);
    f.since_mono = now_mono;
    const bool stands_out = k.ratio >= bar && gsrc >= 0 && gdst >= 0 && worth(f, excess);
    // An excused link that stands out still counts towards the links standing out.
    const bool excuse = stands_out && excused(c, k.src, k.dst);
    excused_n += excuse;
    if (!report(&k.streak, stands_out && !excuse, f.key())) continue;
    found.push_back(std::move(f));
  }
  if ((found.size() + excused_n) * 3 <= l.size())
    for (auto& f : found) out->push_back(std::move(f));
}

bool SlowDetector::judge_wire(uint64_t id, Comm& c, int64_t now_mono,
                              std::vector<SlowFinding>* out) {
  std::vector<std::pair<std::pair<int, int>, double>> shares;  // judged pairs' wire shares
  auto pairs = fr::slow::wire_pairs<Link>(c.links, cfg_.min_wire_samples, &shares);
  if (shares.size() < 2) return false;
  const int64_t step = step_ns(c);
  std::vector<SlowFinding> found;
  size_t excused_n = 0;
  for (const auto& [key, share] : shares) {
    // A share of 0 in a few dozen samples is below 1 in 50, not nothing.
    const double other = fr::slow::wire_other_than(shares, key);
    const auto& p = pairs[key];
    SlowFinding f = link_finding(id, c, key.first, key.second, p.top->channel);
    const int gsrc = f.peer_rank, gdst = f.rank;
    // Lockstep: the others' steps last as long as the slow link's, on the wire only for the time
    // a step of theirs takes; the ratio of the shares estimates how much slower it is.
    f.factor = std::min(share / other, 1000.0);
    f.share = share;
    f.value_ns = fr::slow::ns_of_log(p.top->log_avg);
    f.others_ns = int64_t(double(f.value_ns) / std::max(f.factor, 1.0));
    f.step_ns = step;
    const int64_t excess = fr::slow::link_excess_ns(f.value_ns, f.others_ns, p.top->steps);
    f.step_without_ns = without(step, excess);
    f.since_mono = now_mono;
    const bool stands_out = fr::slow::wire_stands_out(share, other, p.wire, cfg_.wire_share,
                                                      cfg_.wire_ratio, cfg_.min_wire_hits) &&
                            gsrc >= 0 && gdst >= 0 && worth(f, excess);
    const bool excuse = stands_out && (excused(c, key.first, key.second) ||
                                       backpressured(c, key.second, share, f.key()));
    excused_n += excuse;
    if (!report(&c.wire_streak[key], stands_out && !excuse, f.key())) continue;
    found.push_back(std::move(f));
  }
  // One link standing out; the senders of half the pairs on the wire is the pace of the job.
  if ((found.size() + excused_n) * 2 <= shares.size())
    for (auto& f : found) out->push_back(std::move(f));
  return true;
}

namespace {

// How much a finding's cause rests on: kernel times (a GPU finding of judge_gpus, or a host whose
// kernels were judged), the GPU's progress counters, or call times alone.
int weight(const SlowFinding& f) {
  if (f.cause == SlowCause::kLink) return 2;
  if (f.gpu_timed || (f.cause == SlowCause::kGpu && f.peers_busy_share == 0)) return 2;
  return f.peers_busy_share > 0 ? 1 : 0;
}

}  // namespace

bool SlowDetector::merge(std::vector<SlowFinding> now, int64_t now_mono) {
  (void)now_mono;
  bool changed = false;
  // One finding per rank or link: where several communicators judged it, the one whose cause
  // rests on the most (the first of those).
  std::map<std::string, size_t> best;
  for (size_t i = 0; i < now.size(); ++i) {
    auto [it, fresh] = best.emplace(now[i].subject(), i);
    if (!fresh && weight(now[i]) > weight(now[it->second])) it->second = i;
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < now.size(); ++i) {
    SlowFinding& f = now[i];
    if (best[f.subject()] != i) continue;
    const std::string key = f.key();
    if (!seen.insert(key).second) continue;  // one finding per key, the first communicator's
    missing_.erase(key);
    // The same finding: its key, or its rank with a revised cause (host or gpu).
    auto old = std::find_if(findings_.begin(), findings_.end(),
                            [&](const SlowFinding& x) { return x.key() == key; });
    if (old == findings_.end())
      old = std::find_if(findings_.begin(), findings_.end(), [&](const SlowFinding& x) {
        return x.subject() == f.subject() && !seen.count(x.key());
      });
    if (old != findings_.end()) missing_.erase(old->key());
    if (old != findings_.end()) {
      f.since_mono = old->since_mono;
      *old = std::move(f);
    } else {
      findings_.push_back(std::move(f));
      changed = true;
    }
  }
  for (auto it = findings_.begin(); it != findings_.end();) {
    const std::string key = it->key();
    if (seen.count(key) || ++missing_[key] < cfg_.clear_streak) {
      ++it;
      continue;
    }
    missing_.erase(key);
    it = findings_.erase(it);
    changed = true;
  }
  return changed;
}

std::vector<SlowRankStat> SlowDetector::rank_stats() const {
  std::map<int, std::pair<int, SlowRankStat>> best;  // global rank -> (comm size, stat)
  for (const auto& [id, c] : comms_)
    for (const auto& [rank, m] : c.members) {
      if (m.global_rank < 0) continue;
      auto& b = best[m.global_rank];
      if (b.second.rank >= 0 && b.first >= c.size) continue;
      b.first = c.size;
      b.second = {m.global_rank, id, m.late.empty() ? 0 : median_of(m.late), m.gpu_ratio};
    }
  std::vector<SlowRankStat> out;
  for (const auto& [_, b] : best) out.push_back(b.second);
  return out;
}

std::vector<SlowLinkStat> SlowDetector::link_stats() const {
  std::vector<SlowLinkStat> out;
  for (const auto& [id, c] : comms_)
    for (const auto& [_, k] : c.links) {
      if (k.n < cfg_.min_link_samples) continue;
      auto src = c.members.find(k.src), dst = c.members.find(k.dst);
      if (src == c.members.end() || dst == c.members.end()) continue;
      out.push_back({src->second.global_rank, dst->second.global_rank, k.channel, id,
                     fr::slow::ns_of_log(k.log_avg), k.ratio});
    }
  return out;
}

}  // namespace fr::daemon
